"""The edges of analysis/summary.py that mutation testing found unpinned: a spread of exactly the UNSTABLE limit,
repeats that differ (which peak memory, which compile time, how telemetry of throttled and steady repeats
combines), and what a measurement with failed or skipped repeats says. Records come from
:func:`test_results_io.ok_record`; times are exact binary fractions so the percentages are exact."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from clsbench.analysis import stats
from clsbench.analysis.summary import (
    TIME_VARYING_ADVICE,
    build_measurement,
    combine_telemetry,
    stop_rule_text,
    summarize,
    unstable_advice,
)
from clsbench.core.data_settings import DataSettings
from clsbench.core.plan import Cell, StopRule
from clsbench.results.telemetry import SERIES, make_record
from test_results_io import ok_record

TRAIN = Cell("clsbench_testmodels:tiny", "train", "fp32", 4, "cpu")
SW_POWER_CAP, HW_THERMAL, GPU_IDLE = 0x004, 0x040, 0x001


def train_records(*iteration_ms: float, count: int = 4) -> list[dict[str, Any]]:
    """One record per figure: ``count`` iterations of that many ms (throughput = 4 images / that time)."""
    return [ok_record([ms] * count, workload="train", batch=4, pid=100 + i) for i, ms in enumerate(iteration_ms)]


# ------------------------------------------------------------------------------------- the UNSTABLE limit
def test_a_spread_of_exactly_the_limit_is_stable_and_just_above_it_is_not() -> None:
    assert stats.UNSTABLE_SPREAD_PCT == 10.0
    # Throughputs 3800, 4000, 4200 img/s (4 images in 1/950, 1/1000, 1/1050 s): (4200 - 3800) / 4000 = 10% exactly.
    at, validity = summarize(train_records(4 / 3.8, 1.0, 4 / 4.2), "train", "cpu")
    assert at["spread_pct"] == pytest.approx(10.0)
    assert at["unstable"] is False and validity["stable"] is True and "advice" not in validity
    above, validity = summarize(train_records(4 / 3.79, 1.0, 4 / 4.2), "train", "cpu")
    assert above["spread_pct"] > 10.0
    assert above["unstable"] is True and validity["stable"] is False
    assert validity["advice"].startswith("results moved by more than 10% between fresh processes")


def test_one_repeat_has_no_spread_and_is_not_unstable() -> None:
    summary, validity = summarize(train_records(1.0), "train", "cpu")
    assert summary["spread_pct"] is None and summary["unstable"] is False and validity["stable"] is True
    assert summary["repeats"] == 1 and summary["throughput_img_s"] == 4000.0


# ------------------------------------------------------------------------------------- repeats that differ
def test_peak_memory_is_the_largest_of_any_repeat_and_a_repeat_that_read_none_is_skipped() -> None:
    records = train_records(1.0, 1.0, 1.0)
    readings = [(300, 700, None), (900, None, None), (None, 500, None)]
    for record, (allocated, reserved, used) in zip(records, readings, strict=True):
        record["memory"] = {"peak_memory_allocated_bytes": allocated, "peak_memory_reserved_bytes": reserved,
                            "device_memory_used_bytes": used, "host_peak_rss_bytes": 10}
    summary, _ = summarize(records, "train", "cpu")
    assert summary["peak_memory_allocated_bytes"] == 900
    assert summary["peak_memory_reserved_bytes"] == 700
    assert summary["device_memory_used_bytes"] is None
    assert summary["host_peak_rss_bytes"] == 10


def test_compile_time_is_the_first_repeats_and_the_warm_ones_are_the_median_of_the_rest() -> None:
    records = train_records(1.0, 1.0, 1.0, 1.0)
    for record, compile_s in zip(records, (40.0, 3.0, 5.0, 100.0), strict=True):
        record["timings"]["compile_s"] = compile_s
    summary, _ = summarize(records, "train", "cpu")
    assert summary["compile_s"] == 40.0
    assert summary["compile_s_warm"] == 5.0
    assert summary["prepare_s"] == 0.125  # every other timing is the median over repeats


def test_without_compile_there_is_no_compile_time() -> None:
    summary, _ = summarize(train_records(1.0, 1.0), "train", "cpu")
    assert summary["compile_s"] is None and "compile_s_warm" not in summary


def test_a_repeat_that_missed_its_stop_rule_makes_the_measurement_invalid() -> None:
    records = train_records(1.0, 1.0)
    records[1]["validity"]["stop_rule_met"] = False
    _, validity = summarize(records, "train", "cpu")
    assert validity["valid"] is False and validity["stop_rule_met"] is False
    assert validity["repeats_ok"] == validity["repeats_run"] == 2


# ------------------------------------------------------------------------------------- telemetry of repeats
def telemetry(*, reasons: list[int] | None, power: list[float], temperature: list[float]) -> dict[str, Any]:
    samples: dict[str, list[Any]] = {key: [None] * len(power) for key in SERIES}
    samples.update(t_s=[0.5 * i for i in range(len(power))], power_w=power, temperature_c=temperature,
                   clock_event_reasons=reasons if reasons is not None else [None] * len(power))
    return make_record("nvml", 0.5, samples=samples)


def with_telemetry(*records_telemetry: dict[str, Any]) -> list[dict[str, Any]]:
    records = train_records(*([1.0] * len(records_telemetry)))
    for record, record_telemetry in zip(records, records_telemetry, strict=True):
        record["telemetry"] = record_telemetry
    return records


def test_a_throttled_repeat_is_not_averaged_away_by_steady_ones() -> None:
    steady = telemetry(reasons=[0, 0, 0, 0], power=[100.0, 100.0, 100.0, 100.0], temperature=[50.0, 51, 52, 53])
    capped = telemetry(reasons=[SW_POWER_CAP, SW_POWER_CAP, 0, 0], power=[300.0, 320, 310, 300],
                       temperature=[60.0, 70, 80, 75])
    thermal = telemetry(reasons=[HW_THERMAL, 0, 0, 0], power=[200.0, 200, 200, 200], temperature=[55.0, 56, 57, 58])
    combined = combine_telemetry(with_telemetry(steady, thermal, capped))
    assert combined["throttled"] is True
    assert combined["throttle_reasons"] == {"sw_power_cap": 0.5}  # the most throttled repeat's, not the first's
    assert combined["throttle_summary"] == "power cap 50% of samples"
    assert combined["power_peak_w"] == 320.0 and combined["temperature_max_c"] == 80.0  # peaks: the largest
    assert combined["power_avg_w"] == 200.0  # averages: the median repeat's
    assert combined["temperature_start_c"] == 55.0


def test_idle_time_is_not_throttling_when_picking_the_worst_repeat() -> None:
    idle = telemetry(reasons=[GPU_IDLE, GPU_IDLE, GPU_IDLE, GPU_IDLE], power=[50.0] * 4, temperature=[40.0] * 4)
    capped = telemetry(reasons=[SW_POWER_CAP, 0, 0, 0], power=[300.0] * 4, temperature=[60.0] * 4)
    combined = combine_telemetry(with_telemetry(idle, capped))
    assert combined["throttle_reasons"] == {"sw_power_cap": 0.25}
    assert combined["throttled"] is True


def test_the_thinnest_repeat_gives_the_sample_count() -> None:
    long = telemetry(reasons=[0] * 6, power=[100.0] * 6, temperature=[50.0] * 6)
    short = telemetry(reasons=[0] * 3, power=[100.0] * 3, temperature=[50.0] * 3)
    assert combine_telemetry(with_telemetry(long, short, long))["samples_n"] == 3


@pytest.mark.parametrize(("flags", "expected"), [
    ((None, None), None),    # no repeat could read its clock-event reasons: unknown
    ((None, False), False),  # one read them and saw none
    ((False, True), True),
])
def test_throttled_is_unknown_only_when_no_repeat_could_tell(flags: tuple[bool | None, ...],
                                                             expected: bool | None) -> None:
    records = []
    for flag in flags:
        reasons = None if flag is None else ([SW_POWER_CAP] * 4 if flag else [0] * 4)
        records.append(telemetry(reasons=reasons, power=[100.0] * 4, temperature=[50.0] * 4))
    assert combine_telemetry(with_telemetry(*records))["throttled"] is expected


def test_no_repeats_no_telemetry() -> None:
    assert combine_telemetry([]) == {}


def test_the_measurement_carries_the_worst_repeats_throttling_and_the_first_repeats_flags() -> None:
    steady = telemetry(reasons=[0] * 4, power=[100.0] * 4, temperature=[50.0] * 4)
    capped = telemetry(reasons=[SW_POWER_CAP] * 4, power=[300.0] * 4, temperature=[60.0] * 4)
    records = with_telemetry(steady, capped)
    records[0]["flags"], records[1]["flags"] = {"num_threads": 2}, {"num_threads": 8}
    measurement = build_measurement(TRAIN, records)
    assert measurement.validity["throttled"] is True
    assert measurement.validity["throttle_summary"] == "power cap 100% of samples"
    assert measurement.summary["flags"] == {"num_threads": 2}


def test_host_cpu_contention_names_each_repeat_that_had_it() -> None:
    records = train_records(1.0, 1.0)
    records[0]["host_cpu"] = {"steal_pct": 5.0, "other_busy_cores": 3.0}
    records[1]["host_cpu"] = {"steal_pct": 0.0, "other_busy_cores": 1.5}
    measurement = build_measurement(TRAIN, records)
    assert measurement.summary["host_cpu"]["steal_pct_max"] == 5.0
    assert measurement.summary["host_cpu"]["other_busy_cores"] == 2.25  # median of 3.0 and 1.5
    assert measurement.validity["host_cpu_contention"] == (
        "repeat 1: hypervisor steal 5.0% of CPU time; repeat 1: other work kept 3.0 cores busy; "
        "repeat 2: other work kept 1.5 cores busy")
    records[0]["host_cpu"] = records[1]["host_cpu"] = {"steal_pct": 0.0, "other_busy_cores": 0.0}
    quiet = build_measurement(TRAIN, records)
    assert "host_cpu" in quiet.summary and "host_cpu_contention" not in quiet.validity


def test_a_real_data_cell_always_has_a_data_block() -> None:
    cell = Cell("clsbench_testmodels:tiny", "train", "fp32", 4, "cpu", data=DataSettings(directory="/data"))
    summary = build_measurement(cell, train_records(1.0)).summary
    assert "data" in summary and summary["data"] is None  # no repeat carried data facts
    assert build_measurement(cell, train_records(1.0)).data == cell.data.to_dict()
    assert "data" not in build_measurement(TRAIN, train_records(1.0)).summary


# ------------------------------------------------------------------------------------- failed and skipped repeats
def test_a_failed_repeat_sets_the_status_and_names_which_repeat() -> None:
    records = train_records(1.0, 1.0) + [{"status": "failed", "reason": "oom", "detail": "out of memory"}]
    measurement = build_measurement(TRAIN, records)
    assert measurement.status == "failed" and measurement.reason == "oom"
    assert measurement.detail == "out of memory (repeat 3/3)"
    assert measurement.validity["valid"] is False
    assert measurement.validity["repeats_ok"] == 2 and measurement.validity["repeats_run"] == 3
    assert measurement.summary["throughput_img_s"] == 4000.0


def test_a_skipped_cell_keeps_its_reason_without_a_repeat_number() -> None:
    measurement = build_measurement(TRAIN, [{"status": "skipped", "reason": "unsupported_mode", "detail": None}])
    assert measurement.status == "skipped" and measurement.detail == "unsupported_mode"
    assert measurement.summary == {}
    assert measurement.validity == {"valid": False, "repeats_ok": 0, "repeats_run": 1}


# ------------------------------------------------------------------------------------- efficiency
COSTS = {"forward_flops": 2.0e9, "train_step_flops": 6.0e9, "params": 1000, "param_bytes": 4096,
         "activation_bytes": 1024}


def efficiency_records(*, busy_ms: list[float | None], costs: dict[str, Any] | None = COSTS) -> list[dict[str, Any]]:
    """Train repeats of 4 iterations of 1 ms at batch 4 (4000 img/s), with the GPU busy ``busy_ms`` of each."""
    records = train_records(*([1.0] * len(busy_ms)))
    for record, busy in zip(records, busy_ms, strict=True):
        record["costs"] = costs
        record["busy"] = {"gpu_busy_ms_per_iteration": busy}
    return records


def test_train_efficiency_uses_the_train_step_flops_and_three_times_the_bytes() -> None:
    env = {"gpu": {"name": "NVIDIA H200"}, "probe": {"matmul_flop_s": {"fp32": 50e12}}}
    measurement = build_measurement(TRAIN, efficiency_records(busy_ms=[1.5, 3.0, 0.5]), environment=env)
    eff = measurement.summary["efficiency"]
    assert eff["flops_per_image"] == 6.0e9 and eff["flops_kind"] == "train step (forward + backward)"
    assert (eff["forward_flops_per_image"], eff["train_step_flops_per_image"], eff["params"]) == (2.0e9, 6.0e9, 1000)
    assert eff["precision_unit"] == "fp32"
    assert eff["achieved_tflop_s"] == pytest.approx(6.0e9 * 4000 / 1e12)
    assert eff["peak_tflop_s_datasheet"] == pytest.approx(67.0)
    assert eff["peak_source"].startswith("NVIDIA H200 Tensor Core GPU datasheet")
    assert eff["mfu_datasheet_pct"] == pytest.approx(100 * 24.0e12 / 67e12)
    assert eff["peak_tflop_s_measured"] == pytest.approx(50.0)
    assert eff["mfu_measured_pct"] == pytest.approx(100 * 24.0e12 / 50e12)
    bytes_per_image = 3.0 * (4096 / 4 + 1024)  # fp32: full width; training moves three times the forward's bytes
    assert eff["bytes_per_image"] == pytest.approx(bytes_per_image)
    assert eff["arithmetic_intensity"] == pytest.approx(6.0e9 / bytes_per_image)
    # Busy 1.5 and 3 ms in 1 ms iterations are capped at a fraction of 1; with 0.5, their median is 1.
    assert eff["gpu_busy_fraction"] == 1.0
    assert eff["gpu_busy_method"] == "torch.profiler CUDA activity after the timed region"
    # No measured copy rate: the datasheet's bandwidth; the measured matmul peak over the datasheet's.
    assert eff["roofline"]["ridge_point_flop_per_byte"] == pytest.approx(50e12 / 4.8e12)
    assert eff["bound_by"] == eff["roofline"]["bound_by"] == "compute"


def test_inference_efficiency_in_16_bit_on_an_unknown_gpu() -> None:
    cell = Cell("clsbench_testmodels:tiny", "infer-throughput", "amp-bf16", 4, "cuda")
    env = {"gpu": {"name": "Made-up GPU"}, "probe": {"copy_bytes_s": 1.0e9}}
    records = efficiency_records(busy_ms=[None, None])
    eff = build_measurement(cell, records, environment=env).summary["efficiency"]
    assert eff["flops_per_image"] == 2.0e9 and eff["flops_kind"] == "forward" and eff["precision_unit"] == "bf16"
    assert eff["peak_tflop_s_datasheet"] is None and eff["mfu_datasheet_pct"] is None
    assert eff["peak_source"] == "no datasheet entry for Made-up GPU"
    assert eff["peak_tflop_s_measured"] is None and eff["mfu_measured_pct"] is None
    assert eff["bytes_per_image"] == pytest.approx(0.5 * (4096 / 4 + 1024))  # 16-bit modes move half the bytes
    assert eff["gpu_busy_fraction"] is None and eff["gpu_busy_method"] is None
    assert eff["bound_by"] is None  # no peak FLOP/s to set a ridge point against
    unnamed = build_measurement(cell, records, environment={}).summary["efficiency"]
    assert unnamed["peak_source"] == "no datasheet entry for this device"


def test_a_measured_copy_rate_sets_the_ridge_point_instead_of_the_datasheets_bandwidth() -> None:
    env = {"gpu": {"name": "NVIDIA H200"}, "probe": {"copy_bytes_s": 1.0e12}}
    eff = build_measurement(TRAIN, efficiency_records(busy_ms=[1.0]), environment=env).summary["efficiency"]
    assert eff["roofline"]["ridge_point_flop_per_byte"] == pytest.approx(67e12 / 1.0e12)


def test_repeats_without_a_timed_region_have_no_throughput_and_no_achieved_rate() -> None:
    records = efficiency_records(busy_ms=[None])
    records[0]["samples"]["wall_s"] = 0.0
    measurement = build_measurement(TRAIN, records, environment={"gpu": {"name": "NVIDIA H200"}})
    assert measurement.summary["throughput_img_s"] is None
    assert measurement.summary["efficiency"]["achieved_tflop_s"] is None
    assert measurement.summary["efficiency"]["mfu_datasheet_pct"] is None


def test_efficiency_says_why_flops_were_not_counted() -> None:
    records = efficiency_records(busy_ms=[1.0, 1.0], costs={"unavailable": "fvcore missing"})
    assert build_measurement(TRAIN, records).summary["efficiency"] == {"unavailable": "fvcore missing"}
    records = efficiency_records(busy_ms=[1.0], costs=None)
    assert build_measurement(TRAIN, records).summary["efficiency"] == {"unavailable": "FLOPs were not counted"}


# ------------------------------------------------------------------------------------- backend facts of repeats
def test_backend_facts_come_from_the_repeat_that_built_and_the_medians_of_the_ok_ones() -> None:
    cell = Cell("clsbench_testmodels:tiny", "infer-throughput", "fp32", 4, "cpu", backend="export")
    parity = {"passed": False, "max_abs_diff": 0.5}
    facts = [
        {"name": "export", "cache_hit": True, "load_s": 1.0, "graph_capture_s": None, "no_cache": False,
         "cache_dir": "/c", "cache_key": "k1", "versions": {"torch": "x"}, "runtime": None, "build_s": None},
        {"name": "export", "cache_hit": False, "built_now": True, "build_s": 30.0, "build_process_s": 32.0,
         "load_s": 3.0, "graph_capture_s": 0.5, "artifact_bytes": 2048, "rebuilt_reason": "stale",
         "variant": "frozen", "build": {"flags": 1}, "attempts": 2, "runtime": "aoti"},
        {"name": "export", "cache_hit": True, "load_s": 2.0, "graph_capture_s": 0.25, "attempts": 1},
        {"name": "export", "cache_hit": True, "load_s": 99.0},
    ]
    records = train_records(1.0, 1.0, 1.0) + [{"status": "failed", "reason": "crash", "detail": "boom"}]
    for record, fact in zip(records, facts, strict=True):
        record["backend"] = fact
    records[0]["parity"] = parity
    backend = build_measurement(cell, records).summary["backend"]
    assert backend == {
        "name": "export", "build_s": 30.0, "built_now": True, "build_process_s": 32.0,
        "load_s": 2.0, "graph_capture_s": 0.375,  # medians over the ok repeats only (99 s was the failed one)
        "artifact_bytes": 2048, "cache_hit": True, "cache_hits": 3, "rebuilt_reason": "stale", "no_cache": False,
        "cache_dir": "/c", "cache_key": "k1", "variant": "frozen", "build": {"flags": 1}, "attempts": 2,
        "versions": {"torch": "x"}, "runtime": "aoti", "parity": parity,
    }


def test_a_failed_parity_check_keeps_the_figures_but_not_their_validity() -> None:
    cell = Cell("clsbench_testmodels:tiny", "infer-throughput", "fp32", 4, "cpu", backend="export")
    records = train_records(1.0)
    records[0]["backend"] = {"name": "export", "cache_hit": False, "built_now": True}
    records[0]["parity"] = {"passed": False}
    measurement = build_measurement(cell, records)
    assert measurement.validity["parity_passed"] is False and measurement.validity["valid"] is False
    assert measurement.summary["throughput_img_s"] == 4000.0
    records[0]["parity"] = {"passed": True}
    assert build_measurement(cell, records).validity["valid"] is True


def test_a_backend_named_but_not_applied_records_only_its_name() -> None:
    cell = Cell("clsbench_testmodels:tiny", "infer-throughput", "fp32", 4, "cpu", backend="export")
    records = train_records(1.0)
    records[0]["backend"] = {"name": "export"}
    assert build_measurement(cell, records).summary["backend"] == {"name": "export"}
    records[0]["backend"] = None
    assert "backend" not in build_measurement(cell, records).summary


# ------------------------------------------------------------------------------------- words
def test_stop_rule_text_names_every_limit_it_has() -> None:
    full = {"warmup": 5, "warmup_seconds": 2.5, "min_iterations": 20, "min_seconds": 1.0, "max_iterations": 100,
            "max_seconds": 30.0}
    assert stop_rule_text(full) == "warm-up >= 5 it and >= 2.5 s; timed >= 20 it and >= 1 s; max 100 it; max 30 s"
    bare = {"warmup": 0, "warmup_seconds": 0.0, "min_iterations": 3, "min_seconds": 0.0, "max_iterations": None,
            "max_seconds": None}
    assert stop_rule_text(bare) == "warm-up >= 0 it; timed >= 3 it and >= 0 s"


def test_cpu_advice_offers_no_gpu_remedy() -> None:
    time_varying = unstable_advice(40.0, 30.0, "cpu")
    assert time_varying == TIME_VARYING_ADVICE.format(where="this machine", clocks="", check="", launch="")
    per_process = unstable_advice(40.0, 1.0, "cpu")
    assert per_process == ("each repeat was steady but they differed, so the cause is fixed per process (e.g. memory "
                           "or CPU placement, thread start-up). Raise --repeats so the median rests on more processes")
    gpu = unstable_advice(40.0, 1.0, "cuda:0")
    assert "(e.g. cuDNN autotuning picking different algorithms, memory or CPU placement)" in gpu
    assert gpu.endswith(", and rerun with --no-cudnn-benchmark to test whether autotuning is the cause")


def test_the_first_repeats_profile_stop_rule_and_input_size_are_the_measurements() -> None:
    records = train_records(1.0, 1.0)
    records[0]["profile"], records[1]["profile"] = {"phases": {"forward": 1.0}}, {"phases": {"forward": 9.0}}
    records[0]["input_size"], records[1]["input_size"] = None, 48
    rule = StopRule(warmup=2, min_iterations=4, min_seconds=0.5)
    measurement = build_measurement(TRAIN, records, rule)
    assert measurement.summary["profile"] == {"phases": {"forward": 1.0}}
    assert measurement.validity["stop_rule"] == "warm-up >= 2 it; timed >= 4 it and >= 0.5 s"
    assert measurement.input_size == 48  # the first repeat that recorded one
    for record in records:
        record["input_size"] = None
    assert build_measurement(dataclasses.replace(TRAIN, input_size=64), records).input_size == 64


def test_an_eager_cell_has_no_backend_block_whatever_its_records_say() -> None:
    records = train_records(1.0)
    records[0]["backend"] = {"name": "eager", "cache_hit": False}
    assert "backend" not in build_measurement(TRAIN, records).summary


def test_energy_per_image_uses_each_repeats_images_and_wall_time() -> None:
    # One power sample: energy = 100 W x the repeat's 4 ms = 0.4 J, over its 16 images.
    single = make_record("nvml", 0.5, samples={**{key: [] for key in SERIES}, "t_s": [0.0], "power_w": [100.0]})
    combined = combine_telemetry(with_telemetry(single))
    assert combined["energy_j"] == pytest.approx(0.4)
    assert combined["joules_per_image"] == pytest.approx(0.4 / 16)


def test_what_the_latency_and_the_spread_are_of() -> None:
    summary, _ = summarize(train_records(1.0, 1.0), "train", "cpu")
    assert summary["latency_kind"] == "iteration" and summary["spread_metric"] == "throughput_img_s"
    assert summary["latency_ms"]["p50"] == 1.0 and "gpu_latency_ms" not in summary
    records = [ok_record([2.0] * 4, workload="infer-latency", batch=1, pid=1),
               ok_record([4.0] * 4, workload="infer-latency", batch=1, pid=2)]
    for record, gpu_ms in zip(records, ([1.5] * 4, [2.5] * 4), strict=True):
        record["samples"]["gpu_ms"] = gpu_ms
    summary, _ = summarize(records, "infer-latency", "cuda")
    assert summary["latency_kind"] == "request_wall" and summary["spread_metric"] == "latency_ms.p50"
    assert summary["latency_ms"]["p50"] == 3.0 and summary["gpu_latency_ms"]["p50"] == 2.0
    records[1]["samples"]["gpu_ms"] = None  # one repeat without CUDA-event timings: no GPU latency at all
    assert "gpu_latency_ms" not in summarize(records, "infer-latency", "cuda")[0]
