"""Telemetry and efficiency inside a measurement's summary, and the table's power-and-efficiency section."""

from __future__ import annotations

import pytest

from clsbench.analysis.summary import build_measurement
from clsbench.core.plan import Cell, StopRule
from clsbench.engine.worker import Job, execute
from clsbench.measure.busy import _union_length
from clsbench.report import table
from clsbench.results.schema import BenchmarkResult
from clsbench.system.telemetry import FakeSource

CELL = Cell("resnet50", "infer-throughput", "amp-bf16+cl", 256, "cuda")
COSTS = {"forward_flops": 8.0e9, "train_step_flops": 24.0e9, "params": 25_557_032, "param_bytes": 102_228_128,
         "activation_bytes": 100_000_000}
ENV = {"gpu": {"name": "NVIDIA H200"}, "probe": {"matmul_flop_s": {"bf16": 800e12}, "copy_bytes_s": 4.0e12}}


def record(power: list[float], *, reasons: int = 0, temps=(50, 55), busy_ms: float = 16.0) -> dict:
    n = len(power)
    telemetry = FakeSource({"power_w": power, "temperature_c": [temps[0]] + [temps[1]] * (n - 1),
                            "clock_event_reasons": [reasons] * n, "sm_clock_mhz": [1980] * n},
                           energy_counter_j=sum(power) * 0.05).stop()
    return {"status": "ok", "samples": {"iteration_ms": [16.0] * 64, "images": 64 * 256, "wall_s": 1.024},
            "validity": {"stop_rule_met": True, "timed_iterations": 64}, "memory": {}, "timings": {},
            "telemetry": telemetry, "busy": {"gpu_busy_ms_per_iteration": busy_ms}, "costs": COSTS}


def test_efficiency_against_datasheet_and_probe():
    m = build_measurement(CELL, [record([500.0] * 20), record([520.0] * 20)], environment=ENV)
    eff = m.summary["efficiency"]
    throughput = 64 * 256 / 1.024
    assert m.summary["throughput_img_s"] == pytest.approx(throughput)
    assert eff["achieved_tflop_s"] == pytest.approx(8.0e9 * throughput / 1e12)
    assert eff["peak_tflop_s_datasheet"] == pytest.approx(989.5)  # H200 SXM dense bf16
    assert eff["mfu_datasheet_pct"] == pytest.approx(100 * 8.0e9 * throughput / 989.5e12)
    assert eff["mfu_measured_pct"] == pytest.approx(100 * 8.0e9 * throughput / 800e12)
    # bytes per image: (weights / batch + activations) in 16-bit
    assert eff["bytes_per_image"] == pytest.approx(0.5 * (102_228_128 / 256 + 100_000_000))
    assert eff["gpu_busy_fraction"] == pytest.approx(1.0)
    assert eff["bound_by"] in ("memory", "compute")


def test_launch_bound_when_the_gpu_idles():
    m = build_measurement(CELL, [record([200.0] * 20, busy_ms=4.0)], environment=ENV)
    assert m.summary["efficiency"]["gpu_busy_fraction"] == pytest.approx(0.25)
    assert m.summary["efficiency"]["bound_by"] == "launch"


def test_telemetry_combined_over_repeats():
    power_cap = 0x4  # sw_power_cap
    m = build_measurement(CELL, [record([500.0] * 20, temps=(50, 60)),
                                          record([600.0] * 20, reasons=power_cap, temps=(51, 70)),
                                          record([520.0] * 20)], environment=ENV)
    tele = m.summary["telemetry"]
    assert tele["power_avg_w"] == pytest.approx(520.0)  # median of 500, 600, 520
    assert tele["temperature_max_c"] == 70  # the hottest repeat's peak
    assert tele["throttled"] is True and "power cap" in tele["throttle_summary"]
    assert m.validity["throttled"] is True
    text = table.render(BenchmarkResult(environment=ENV, settings={}, measurements=(m,)))
    assert "power and efficiency" in text and "THROTTLED" in text
    row = next(line for line in text.splitlines() if line.startswith("resnet50") and " 520 " in line)
    assert "power cap" in row


def test_cpu_run_records_why_there_is_no_telemetry():
    cell = Cell("clsbench_testmodels:tiny", "infer-throughput", "fp32", 2, "cpu")
    rec = execute(Job(cell=cell, repeat=0, stop=StopRule(warmup=1, min_iterations=3, min_seconds=0.0)))
    assert rec["telemetry"]["unavailable"]
    assert rec["costs"]["forward_flops"] > 0
    m = build_measurement(cell, [rec], environment={})
    assert m.summary["telemetry"]["unavailable"]
    assert m.summary["efficiency"]["achieved_tflop_s"] > 0
    assert m.summary["efficiency"]["mfu_datasheet_pct"] is None  # no datasheet for a CPU


def test_union_of_activity_intervals():
    assert _union_length([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0
    assert _union_length([(0.0, 10.0), (2.0, 3.0)]) == 10.0
    assert _union_length([]) == 0.0


H100_ENV = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}, "probe": {"matmul_flop_s": {"bf16": 700e12}}}


@pytest.mark.parametrize("mode", ["fp8", "fp8+compile"])
def test_an_fp8_measurement_keeps_its_figures_and_withholds_mfu(mode, tmp_path):
    # On an H100 (2026-12-06) the whole fp8 run ended at its first summary with "no precision key for mode
    # 'fp8+compile'", and the measured repeats were never written as measurements.
    cell = Cell("timm/vit_tiny_patch16_224", "infer-throughput", mode, 256, "cuda")
    m = build_measurement(cell, [record([500.0] * 20), record([510.0] * 20)], environment=H100_ENV)
    eff = m.summary["efficiency"]
    assert m.summary["throughput_img_s"] == pytest.approx(64 * 256 / 1.024)
    assert eff["precision_unit"] == "fp8+bf16" and "withheld" in eff["peak_source"]
    assert eff["mfu_datasheet_pct"] is None and eff["mfu_measured_pct"] is None
    assert eff["achieved_tflop_s"] == pytest.approx(8.0e9 * 64 * 256 / 1.024 / 1e12)
    assert eff["bytes_per_image"] == pytest.approx(0.5 * (102_228_128 / 256 + 100_000_000))  # bf16's bytes
    result = BenchmarkResult(environment=H100_ENV, settings={}, measurements=(m,))
    text = table.render(result)
    assert "vit_tiny" in text and mode in text
    from clsbench.report.html import render_report

    assert mode in render_report([result], ["fp8.json"])


def test_a_figure_that_cannot_be_derived_never_loses_the_measurement(monkeypatch):
    from clsbench.analysis import summary

    def broken(*args, **kwargs):
        raise ValueError("no peak for this")

    monkeypatch.setattr(summary, "efficiency", broken)
    m = build_measurement(CELL, [record([500.0] * 20)], environment=ENV)
    assert m.status == "ok" and m.summary["throughput_img_s"] > 0
    assert m.summary["efficiency"] == {"unavailable": "efficiency could not be computed: no peak for this"}
