"""Workloads and the worker, inline on the CPU with the fake clock: exact samples, stop rules, failures."""

from __future__ import annotations

import pytest

from clsbench.core.plan import Cell, StopRule
from clsbench.engine.worker import Job, execute
from clsbench.measure.clock import FakeClock, make_clock
from clsbench.workloads.base import StopWatch

RULE = StopRule(warmup=2, min_iterations=5, min_seconds=0.0)


def job(workload: str, *, model: str = "clsbench_testmodels:tiny", mode: str = "fp32", rule: StopRule = RULE,
        batch: int = 2, clock=None) -> Job:
    cell = Cell(model, workload, mode, batch, "cpu")
    return Job(cell=cell, repeat=0, stop=rule, clock=clock or FakeClock((1_000_000,)))


def test_latency_with_fake_clock_is_exact():
    record = execute(job("infer-latency", rule=StopRule(warmup=3, min_iterations=7, min_seconds=0.0)))
    assert record["status"] == "ok", record
    samples = record["samples"]
    assert samples["wall_ms"] == [1.0] * 7  # two clock readings per request, 1 ms apart
    assert samples["gpu_ms"] is None  # no GPU clock on a CPU
    assert samples["images"] == 14
    assert samples["wall_s"] == pytest.approx(0.007)
    assert record["timings"]["warmup_iterations"] == 3
    assert record["validity"] == {"stop_rule_met": True, "stopped_by_maximum": False, "timed_iterations": 7,
                                  "timed_seconds": pytest.approx(0.007)}


def test_latency_min_seconds_rule_extends_the_run():
    # 1000 ms of timed requests at 1 ms each: the time rule, not the count rule, decides.
    record = execute(job("infer-latency", rule=StopRule(warmup=0, min_iterations=10, min_seconds=0.05)))
    assert len(record["samples"]["wall_ms"]) == 50


def test_maximum_stops_before_the_rule_and_says_so():
    rule = StopRule(warmup=0, min_iterations=100, min_seconds=0.0, max_seconds=0.01)
    record = execute(job("infer-latency", rule=rule))
    assert record["validity"]["stop_rule_met"] is False
    assert record["validity"]["stopped_by_maximum"] is True
    assert len(record["samples"]["wall_ms"]) == 10


@pytest.mark.parametrize("workload", ["infer-throughput", "train"])
def test_batch_workloads_with_fake_clock(workload):
    record = execute(job(workload, batch=4))
    assert record["status"] == "ok", record
    samples = record["samples"]
    assert samples["iteration_ms"] == [1.0] * 5
    assert samples["images"] == 20
    assert samples["wall_s"] == pytest.approx(0.005)
    assert samples["iteration_clock"] == "host"
    assert record["timings"]["first_iteration_s"] == pytest.approx(0.001)
    assert record["memory"]["host_peak_rss_bytes"] > 0
    assert record["flags"]["matmul_allow_tf32"] is False  # fp32 means fp32


def test_train_records_losses_and_learns_nothing_strange():
    record = execute(job("train", batch=4))
    assert record["samples"]["loss_first"] > 0
    assert record["samples"]["loss_last"] > 0


def test_train_nan_loss_fails_with_reason():
    record = execute(job("train", model="clsbench_testmodels:nan_model"))
    assert record["status"] == "failed"
    assert record["reason"] == "nan_loss"


def test_oom_is_classified():
    record = execute(job("infer-throughput", model="clsbench_testmodels:oom_model"))
    assert (record["status"], record["reason"]) == ("failed", "oom")


def test_other_errors_are_crashes_with_the_message():
    record = execute(job("infer-throughput", model="clsbench_testmodels:error_model"))
    assert (record["status"], record["reason"]) == ("failed", "crash")
    assert "something broke inside forward" in record["detail"]


@pytest.mark.parametrize(("mode", "workload", "fragment"), [
    ("tf32", "train", "tensor-core"),
    ("fp16", "train", "inference only"),
    ("fp32+cudagraph", "infer-latency", "CUDA device"),
])
def test_unsupported_modes_are_skipped_with_a_reason(mode, workload, fragment):
    record = execute(job(workload, mode=mode))
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")
    assert fragment in record["detail"]


@pytest.mark.parametrize("mode", ["amp-bf16", "amp-bf16+cl", "bf16", "fp32+cl"])
def test_cpu_modes_run(mode):
    record = execute(job("infer-throughput", mode=mode))
    assert record["status"] == "ok", record


def test_stopwatch_block_planning():
    watch = StopWatch(StopRule(warmup=0, min_iterations=10, min_seconds=2.0, max_seconds=3.0))
    assert watch.plan_block(100_000_000) == 21  # 2 s * 1.05 margin / 0.1 s
    watch.add(21, 2_100_000_000)
    assert watch.done and watch.rule_met
    slow = StopWatch(StopRule(warmup=0, min_iterations=10, min_seconds=0.0, max_seconds=3.0))
    assert slow.plan_block(1_000_000_000) == 3  # capped by the 3 s maximum


def test_make_clock_specs():
    clock = make_clock("fake:1ms,2ms")
    assert [clock.now_ns() for _ in range(3)] == [1_000_000, 3_000_000, 4_000_000]
    with pytest.raises(ValueError):
        make_clock("fake:3")
    assert type(make_clock(None)).__name__ == "WallClock"


def test_measure_s_covers_every_phase_of_the_repeat():
    """measure_s is the whole measure phase on the host clock, so it holds the workload's own phases and more."""
    rule = StopRule(warmup=2, min_iterations=5, min_seconds=0.05, warmup_seconds=0.02)
    record = execute(Job(cell=Cell("clsbench_testmodels:tiny", "infer-throughput", "fp32", 4, "cpu"), repeat=0,
                         stop=rule))
    t = record["timings"]
    phases = t["setup_s"] + t["first_iteration_s"] + t["warmup_s"] + record["validity"]["timed_seconds"]
    assert t["context_s"] is None  # no CUDA context on a CPU
    assert phases <= t["measure_s"] < phases + 30.0
