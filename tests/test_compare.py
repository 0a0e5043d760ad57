"""Significance (Welch's t-test, Student-t via the incomplete beta), compare on synthetic results, the gate.

The synthetic results are built like ``tests/data/make_fixture.py`` builds the fixture: hand-written repeat records
in the worker's shape, turned into measurements by :func:`clsbench.analysis.summary.build_measurement`, so every summary
is the library's own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from clsbench.analysis.compare import compare, regressions
from clsbench.analysis.compare_types import (
    VERDICT_FASTER,
    VERDICT_NA,
    VERDICT_NO_CHANGE,
    VERDICT_NOT_TESTABLE,
    VERDICT_SLOWER,
    Comparison,
    Row,
)
from clsbench.analysis.significance import (
    TEST_NAME,
    is_significant,
    regularized_incomplete_beta,
    student_t_cdf,
    student_t_two_sided_p,
    welch_t_test,
)
from clsbench.analysis.summary import build_measurement
from clsbench.cli.compare_cmds import EXIT_REGRESSION, parse_percent, register
from clsbench.core.data_settings import DataSettings
from clsbench.core.plan import Cell
from clsbench.errors import InvalidInputError
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

# ----------------------------------------------------------------------------------------------------------
# Numerics: the Student-t tail through the regularised incomplete beta function


@pytest.mark.parametrize(("t", "df", "p"), [
    (2.0, 10, 0.0733880347707),  # tables: t_{0.975,10} = 2.228 > 2.0 > t_{0.95,10} = 1.812
    (3.0, 4, 0.0399419680717),
    (2.228138851986, 10, 0.05),  # the 97.5% quantile of t(10)
    (12.7062047361747, 1, 0.05),  # the 97.5% quantile of t(1)
    (0.0, 7, 1.0),
])
def test_two_sided_p_of_known_values(t: float, df: float, p: float):
    assert student_t_two_sided_p(t, df) == pytest.approx(p, abs=1e-9)
    assert student_t_two_sided_p(-t, df) == pytest.approx(p, abs=1e-9)


@pytest.mark.parametrize("t", [0.1, 0.7, 1.0, 2.5, 10.0, 80.0])
def test_two_sided_p_matches_closed_forms(t: float):
    # df = 1 is the Cauchy distribution; df = 2 has P(|T| > t) = 1 - t / sqrt(2 + t^2).
    assert student_t_two_sided_p(t, 1) == pytest.approx(1 - 2 / math.pi * math.atan(t), abs=1e-12)
    assert student_t_two_sided_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    # Large df: the normal distribution.
    assert student_t_two_sided_p(t, 1e7) == pytest.approx(math.erfc(t / math.sqrt(2)), abs=1e-6)


def test_cdf_is_a_distribution_function():
    assert student_t_cdf(0.0, 3) == pytest.approx(0.5)
    assert student_t_cdf(2.0, 10) == pytest.approx(1 - 0.0733880347707 / 2, abs=1e-9)
    assert student_t_cdf(-2.0, 10) == pytest.approx(0.0733880347707 / 2, abs=1e-9)
    values = [student_t_cdf(x / 4, 2.5) for x in range(-40, 41)]
    assert values == sorted(values)


@pytest.mark.parametrize(("x", "a", "b", "expected"), [
    (0.3, 1.0, 1.0, 0.3),  # I_x(1, 1) = x
    (0.3, 2.5, 1.0, 0.3**2.5),  # I_x(a, 1) = x^a
    (0.3, 1.0, 4.0, 1 - 0.7**4),  # I_x(1, b) = 1 - (1 - x)^b
    (0.5, 7.0, 7.0, 0.5),  # symmetry
    (0.3, 0.5, 0.5, 2 / math.pi * math.asin(math.sqrt(0.3))),  # arcsine distribution
    (0.5, 2.0, 3.0, 0.6875),
    (0.0, 2.0, 3.0, 0.0),
    (1.0, 2.0, 3.0, 1.0),
])
def test_incomplete_beta(x: float, a: float, b: float, expected: float):
    assert regularized_incomplete_beta(x, a, b) == pytest.approx(expected, abs=1e-12)


def test_incomplete_beta_rejects_bad_arguments():
    with pytest.raises(ValueError):
        regularized_incomplete_beta(1.5, 1, 1)
    with pytest.raises(ValueError):
        regularized_incomplete_beta(0.5, 0, 1)


# The three examples of the Wikipedia article "Welch's t-test" (t, nu, p to the digits it gives).
WIKI_A1 = [27.5, 21.0, 19.0, 23.6, 17.0, 17.9, 16.9, 20.1, 21.9, 22.6, 23.1, 19.6, 19.0, 21.7, 21.4]
WIKI_A2 = [27.1, 22.0, 20.8, 23.4, 23.4, 23.5, 25.8, 22.0, 24.8, 20.2, 21.9, 22.1, 22.9, 20.5, 24.4]
WIKI_B1 = [17.2, 20.9, 22.6, 18.1, 21.7, 21.4, 23.5, 24.2, 14.7, 21.8]
WIKI_B2 = [21.5, 22.8, 21.0, 23.0, 21.6, 23.6, 22.5, 20.7, 23.4, 21.8, 20.7, 21.7, 21.5, 22.5, 23.6, 21.5, 22.5,
           23.5, 21.5, 21.8]
WIKI_C1 = [19.8, 20.4, 19.6, 17.8, 18.5, 18.9, 18.3, 18.9, 19.5, 22.0]
WIKI_C2 = [28.2, 26.6, 20.1, 23.3, 25.2, 22.1, 17.7, 27.6, 20.6, 13.7, 23.2, 17.5, 20.6, 18.0, 23.9, 21.6, 24.3,
           20.4, 23.9, 13.3]


@pytest.mark.parametrize(("a", "b", "t", "df", "p"), [
    (WIKI_A1, WIKI_A2, -2.46, 25.0, 0.021),
    (WIKI_B1, WIKI_B2, -1.57, 9.9, 0.149),
    (WIKI_C1, WIKI_C2, -2.22, 24.5, 0.036),
])
def test_welch_matches_published_examples(a: list[float], b: list[float], t: float, df: float, p: float):
    result = welch_t_test(a, b)
    assert result.t == pytest.approx(t, abs=0.01)
    assert result.df == pytest.approx(df, abs=0.1)
    assert result.p == pytest.approx(p, abs=0.001)


def test_welch_with_equal_variances_and_sizes_is_students_test():
    # Equal n and variances: df = 2n - 2 and t as Student's; t = -3.674, p = 0.0213 for these.
    result = welch_t_test([1, 2, 3], [4, 5, 6])
    assert result.t == pytest.approx(-math.sqrt(13.5))
    assert result.df == pytest.approx(4.0)
    assert result.p == pytest.approx(student_t_two_sided_p(math.sqrt(13.5), 4.0))
    assert result.p == pytest.approx(0.0213116, abs=1e-6)
    assert result.significant and is_significant([1, 2, 3], [4, 5, 6])
    assert not is_significant([1, 2, 3], [4, 5, 6], alpha=0.01)


def test_fewer_than_two_values_are_not_testable():
    result = welch_t_test([1.0], [2.0, 3.0])
    assert not result.testable and not result.significant
    assert result.p is None and "at least 2 repeats" in result.reason
    assert result.describe().startswith("not testable")
    assert not is_significant([5.0], [1.0, 1.1])


def test_zero_variance_cases():
    same = welch_t_test([3.0, 3.0, 3.0], [3.0, 3.0])
    assert same.p == 1.0 and not same.significant
    distinct = welch_t_test([3.0, 3.0], [4.0, 4.0, 4.0])
    assert distinct.p == 0.0 and distinct.significant and distinct.t == -math.inf
    assert json.dumps(distinct.to_dict())  # infinity is stored as text, never as JSON's non-standard Infinity
    one_sided = welch_t_test([10.0, 10.0, 10.0], [10.0, 11.0, 12.0])  # df from the noisy side alone
    assert one_sided.df == pytest.approx(2.0)
    assert not one_sided.significant


def test_the_test_and_alpha_are_named_in_the_output():
    text = welch_t_test([1, 2, 3], [4, 5, 6], alpha=0.05).describe()
    assert text == f"significant at alpha=0.05 ({TEST_NAME}, p=0.0213)"
    assert "Welch" in TEST_NAME and "two-sided" in TEST_NAME
    with pytest.raises(ValueError):
        welch_t_test([1, 2], [3, 4], alpha=1.5)


# ----------------------------------------------------------------------------------------------------------
# Synthetic results


def environment(gpu: str | None = "NVIDIA H200", torch: str = "2.11.0+cu130", driver: str = "580.159.04",
                cpu: str = "Intel(R) Xeon(R) Processor") -> dict[str, Any]:
    return {
        "device": "cuda" if gpu else "cpu",
        "cpu": {"model": cpu},
        "software": {"torch": torch, "torch_cuda_version": "13.0", "cudnn_version": 91900, "torchvision": "0.26.0",
                     "timm": "1.0.29", "triton": "3.6.0"},
        "gpu": {"name": gpu, "driver_version": driver if gpu else None, "mig_enabled": False if gpu else None,
                "power_limit_enforced_w": 700.0 if gpu else None},
    }


def throughput_records(img_s_by_repeat: list[float], batch: int = 32) -> list[dict[str, Any]]:
    """One ok repeat per value: 10 iterations of ``batch`` images whose wall time gives exactly that img/s."""
    records = []
    for value in img_s_by_repeat:
        images = 10 * batch
        wall_s = images / value
        records.append({"status": "ok", "reason": None, "detail": None,
                        "samples": {"iteration_ms": [wall_s * 100.0] * 10, "images": images, "wall_s": wall_s},
                        "validity": {"stop_rule_met": True},
                        "memory": {"peak_memory_allocated_bytes": 2**30, "peak_memory_reserved_bytes": 2**31}})
    return records


def latency_records(p50_by_repeat: list[float]) -> list[dict[str, Any]]:
    """One ok repeat per value: five requests around that p50 (nearest-rank p50 of 5 = the 3rd smallest)."""
    records = []
    for p50 in p50_by_repeat:
        wall_ms = [p50 * 0.98, p50 * 0.99, p50, p50 * 1.01, p50 * 1.2]
        records.append({"status": "ok", "reason": None, "detail": None,
                        "samples": {"wall_ms": wall_ms, "images": 5, "wall_s": sum(wall_ms) / 1000},
                        "validity": {"stop_rule_met": True}})
    return records


def failed(reason: str = "oom") -> list[dict[str, Any]]:
    return [{"status": "failed", "reason": reason, "detail": "CUDA out of memory"}]


def measurement(model: str, workload: str, records: list[dict[str, Any]], mode: str = "fp32", batch: int = 32,
                device: str = "cuda", power_w: float | None = None, input_size: int | None = None,
                data: DataSettings | None = None) -> Measurement:
    m = build_measurement(Cell(model, workload, mode, batch, device, input_size, data), records)
    if power_w is not None:
        m = dataclasses.replace(m, summary={**m.summary, "telemetry": {"power_avg_w": power_w}})
    return m


def result(measurements: list[Measurement], env: dict[str, Any] | None = None,
           created: str = "2026-11-30T00:00:00+00:00", settings: dict[str, Any] | None = None) -> BenchmarkResult:
    return BenchmarkResult(environment=env or environment(), settings=settings or {}, measurements=tuple(measurements),
                           created_utc=created, tool={"name": "clsbench", "version": "0.1.0"})


def find(comparison: Comparison, model: str, workload: str) -> Row:
    return next(r for r in comparison.rows() if (r.model, r.workload) == (model, workload))


BASE = [100.0, 101.0, 99.0]


@pytest.fixture
def runs() -> list[BenchmarkResult]:
    """A baseline and a second run: one row faster, one slower, one inside the noise, latency halved,
    one failed, one missing, one only in the second run."""
    a = result([
        measurement("fast", "train", throughput_records(BASE), power_w=400.0),
        measurement("slow", "train", throughput_records(BASE)),
        measurement("noisy", "train", throughput_records(BASE)),
        measurement("fast", "infer-latency", latency_records([10.0, 10.2, 9.8]), batch=1),
        measurement("oom", "train", throughput_records(BASE)),
        measurement("gone", "train", throughput_records(BASE)),
    ])
    b = result([
        measurement("fast", "train", throughput_records([120.0, 121.0, 119.0]), device="cpu", power_w=80.0),
        measurement("slow", "train", throughput_records([80.0, 81.0, 79.0]), device="cpu"),
        measurement("noisy", "train", throughput_records([101.0, 97.0, 103.0]), device="cpu"),
        measurement("fast", "infer-latency", latency_records([5.0, 5.1, 4.9]), batch=1, device="cpu"),
        measurement("oom", "train", failed(), device="cpu"),
        measurement("new", "train", throughput_records(BASE), device="cpu"),
    ], env=environment(gpu=None, torch="2.11.0+cpu"))
    return [a, b]


def test_verdicts_faster_slower_and_inside_the_noise(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    fast, slow, noisy = (find(c, name, "train") for name in ("fast", "slow", "noisy"))
    assert fast.ratios[0].speedup == pytest.approx(1.2)
    assert fast.ratios[0].verdict == VERDICT_FASTER
    assert slow.ratios[0].speedup == pytest.approx(0.8)
    assert slow.ratios[0].verdict == VERDICT_SLOWER
    assert slow.ratios[0].slowdown_pct == pytest.approx(25.0)  # 100 -> 80 img/s: 1.25x the time per image
    assert noisy.ratios[0].verdict == VERDICT_NO_CHANGE
    assert noisy.ratios[0].test.p > 0.05
    assert fast.cells[0].values == pytest.approx(tuple(BASE))


def test_latency_ratio_is_inverted_so_above_one_is_faster(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    table = next(t for t in c.tables if t.workload == "infer-latency")
    assert table.metric == "latency_p50_ms" and not table.higher_is_better
    row = find(c, "fast", "infer-latency")
    assert row.cells[0].value == pytest.approx(10.0)
    assert row.cells[1].value == pytest.approx(5.0)
    assert row.cells[1].values == pytest.approx((5.0, 5.1, 4.9))  # the nearest-rank p50 of each repeat
    assert row.ratios[0].speedup == pytest.approx(2.0)
    assert row.ratios[0].verdict == VERDICT_FASTER


def test_failed_missing_and_new_cells_are_shown_as_such(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    oom, gone, new = (find(c, name, "train") for name in ("oom", "gone", "new"))
    assert (oom.cells[1].status, oom.cells[1].reason) == ("failed", "oom")
    assert oom.ratios[0].verdict == VERDICT_NA and oom.ratios[0].speedup is None
    assert gone.cells[1].status == "missing" and gone.ratios[0].verdict == VERDICT_NA
    assert new.cells[0].status == "missing" and new.cells[1].status == "ok"
    from clsbench.report.export import comparison_text

    text = comparison_text(c)
    assert "FAILED: oom" in text and "missing" in text


def test_rows_match_across_devices_and_environment_differences_are_listed(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    assert [r.devices for r in c.runs] == [("cuda",), ("cpu",)]
    assert [r.hardware for r in c.runs] == ["NVIDIA H200", "Intel(R) Xeon(R) Processor"]
    fields = {d.field: d.values for d in c.env_differences}
    assert fields["gpu.name"] == ("NVIDIA H200", None)
    assert fields["software.torch"] == ("2.11.0+cu130", "2.11.0+cpu")
    assert "cpu.model" not in fields
    assert c.warnings == ()  # different hardware: the point of the tool, no warning


def test_same_gpu_with_different_software_is_flagged():
    a = result([measurement("m", "train", throughput_records(BASE))])
    b = result([measurement("m", "train", throughput_records(BASE))], env=environment(torch="2.12.0+cu130"))
    c = compare([a, b], ["old.json", "new.json"])
    assert len(c.warnings) == 1
    warning = c.warnings[0]
    assert "same GPU (NVIDIA H200)" in warning and "software.torch 2.11.0+cu130 -> 2.12.0+cu130" in warning
    other_gpu = result([measurement("m", "train", throughput_records(BASE))],
                       env=environment(gpu="NVIDIA A100-SXM4-80GB", torch="2.12.0+cu130"))
    assert compare([a, other_gpu], ["h200.json", "a100.json"]).warnings == ()
    same = compare([a, a], ["x.json", "y.json"])
    assert same.warnings == () and same.env_differences == ()


def test_same_cpu_with_different_software_is_flagged_too():
    env_old = environment(gpu=None, torch="2.10.0+cpu")
    env_new = environment(gpu=None, torch="2.11.0+cpu")
    a = result([measurement("m", "train", throughput_records(BASE), device="cpu")], env=env_old)
    b = result([measurement("m", "train", throughput_records(BASE), device="cpu")], env=env_new)
    (warning,) = compare([a, b], ["a.json", "b.json"]).warnings
    assert "same CPU (Intel(R) Xeon(R) Processor)" in warning and "gpu." not in warning


def test_nothing_in_common_is_a_clear_error():
    a = result([measurement("resnet50", "train", throughput_records(BASE))])
    b = result([measurement("resnet18", "train", throughput_records(BASE), batch=8)])
    with pytest.raises(InvalidInputError) as info:
        compare([a, b], ["h200.json", "cpu.json"])
    message = str(info.value)
    assert "cpu.json and h200.json have no measurement in common" in message
    assert "resnet50 train fp32 bs32" in message and "resnet18 train fp32 bs8" in message
    assert "--suite seed" in info.value.hint


def test_bad_arguments_are_invalid_input(runs: list[BenchmarkResult]):
    with pytest.raises(InvalidInputError):
        compare(runs[:1], ["a.json"])
    with pytest.raises(InvalidInputError):
        compare(runs, ["a.json"])
    with pytest.raises(InvalidInputError):
        compare(runs, ["a.json", "b.json"], alpha=0.0)


def test_single_repeat_is_not_testable():
    a = result([measurement("m", "train", throughput_records([100.0]))])
    b = result([measurement("m", "train", throughput_records([50.0]))])
    ratio = compare([a, b], ["a", "b"]).rows()[0].ratios[0]
    assert ratio.speedup == pytest.approx(0.5) and ratio.verdict == VERDICT_NOT_TESTABLE
    assert regressions(compare([a, b], ["a", "b"]), 5.0) == []


def test_cross_gpu_view(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    fast = next(r for r in c.cross if r.model == "fast")
    assert fast.mode == "fp32"
    assert [f.train_img_s for f in fast.runs] == pytest.approx([100.0, 120.0])
    assert [f.latency_p50_ms for f in fast.runs] == pytest.approx([10.0, 5.0])
    assert [f.power_avg_w for f in fast.runs] == [400.0, 80.0]
    assert fast.runs[0].peak_memory_bytes == 2**30 and fast.runs[0].peak_memory_kind == "allocated"
    assert fast.train_ratio.speedup == pytest.approx(1.2)
    assert fast.latency_ratio.speedup == pytest.approx(2.0)
    assert {r.model for r in c.cross} == {"fast", "slow", "noisy", "oom", "gone", "new"}


def test_regressions_are_significant_slowdowns_beyond_the_threshold(runs: list[BenchmarkResult]):
    c = compare(runs, ["a.json", "b.json"])
    (regression,) = regressions(c, 5.0)
    assert regression.row.model == "slow" and regression.run.name == "b.json"
    assert regression.describe() == (
        "slow train fp32 bs32: B (b.json) is 25.0% slower than A (1.25x the time per image; significant at "
        f"alpha=0.05 ({TEST_NAME}, p<0.0001))")
    assert regressions(c, 30.0) == []
    with pytest.raises(InvalidInputError):
        regressions(c, -1.0)


def test_three_runs_each_against_the_first(runs: list[BenchmarkResult]):
    c = compare([runs[0], runs[1], runs[0]], ["a", "b", "a-again"])
    fast = find(c, "fast", "train")
    assert [r.verdict for r in fast.ratios] == [VERDICT_FASTER, VERDICT_NO_CHANGE]
    assert fast.ratios[1].speedup == pytest.approx(1.0)


def test_a_real_file_compared_with_itself_is_all_inside_the_noise(data_dir: Path):
    fixture = result_io.load(data_dir / "result_v1.json")
    c = compare([fixture, fixture], ["x", "y"])
    verdicts = {r.label(): r.ratios[0].verdict for r in c.rows()}
    assert verdicts == {
        "resnet50 infer-latency fp32 bs1": VERDICT_NO_CHANGE,
        "resnet50 infer-throughput fp32 bs256": VERDICT_NO_CHANGE,
        "resnet50 train amp-bf16+cl bs32": VERDICT_NO_CHANGE,
        "resnet152 train fp32 bs1024": VERDICT_NA,
        "resnet50 train bf16 bs32": VERDICT_NA,
    }
    assert all(r.ratios[0].test is None or r.ratios[0].test.p == 1.0 for r in c.rows())


def test_comparison_to_dict_is_standard_json(runs: list[BenchmarkResult]):
    data = json.loads(json.dumps(compare(runs, ["a", "b"]).to_dict(), allow_nan=False))
    assert data["test"] == TEST_NAME and data["alpha"] == 0.05
    assert {t["workload"] for t in data["tables"]} == {"train", "infer-latency"}


# ----------------------------------------------------------------------------------------------------------
# Matching: input size, data pipeline and world size are part of the match


def requested(*models_and_sizes: tuple[str, int | None]) -> dict[str, Any]:
    """Settings whose cells asked for these (model, input size) pairs (None: the model's default), as a run stores
    them."""
    return {"cells": [{"model": model, "workload": "train", "mode": "fp32", "batch_size": 32, "device": "cuda",
                       "input_size": size} for model, size in models_and_sizes]}


def test_different_input_sizes_are_never_a_speed_up():
    # The issue: a 64 px run against a 160 px run of the same cell was shown as a 1.33x speed-up.
    a = result([measurement("resnet50", "train", throughput_records([300.0, 301.0, 299.0]), input_size=64)])
    b = result([measurement("resnet50", "train", throughput_records([400.0, 401.0, 399.0]), input_size=160)])
    with pytest.raises(InvalidInputError) as info:
        compare([a, b], ["small.json", "large.json"])
    message = str(info.value)
    assert "no measurement in common" in message and "input size 64 vs 160" in message
    assert "resnet50 train fp32 bs32 64px" in message and "resnet50 train fp32 bs32 160px" in message
    assert "input size" in info.value.hint


def test_cells_that_differ_in_input_size_are_separate_rows_each_missing_from_the_other_run():
    a = result([measurement("resnet50", "train", throughput_records(BASE), input_size=64),
                measurement("vit", "train", throughput_records(BASE), input_size=64)])
    b = result([measurement("resnet50", "train", throughput_records([80.0, 81.0, 79.0]), input_size=160),
                measurement("vit", "train", throughput_records([80.0, 81.0, 79.0]), input_size=64)])
    c = compare([a, b], ["a.json", "b.json"])
    rows = {(r.model, r.input_size): r for r in c.rows()}
    assert set(rows) == {("resnet50", 64), ("resnet50", 160), ("vit", 64)}
    assert [cell.status for cell in rows["resnet50", 64].cells] == ["ok", "missing"]
    assert [cell.status for cell in rows["resnet50", 160].cells] == ["missing", "ok"]
    assert rows["resnet50", 64].ratios[0].speedup is None and rows["resnet50", 64].ratios[0].verdict == VERDICT_NA
    assert rows["vit", 64].ratios[0].verdict == VERDICT_SLOWER
    assert [r.row.model for r in regressions(c, 5.0)] == ["vit"]  # the size change is no regression
    (warning,) = c.warnings
    assert "input size 64 vs 160" in warning and "resnet50 train fp32 bs32" in warning and "separate rows" in warning


def test_synthetic_and_real_data_and_different_pipelines_never_pair_up():
    workers = DataSettings("/data/imagenet", num_workers=8, pin_memory=True, persistent_workers=True)
    a = result([measurement("m", "train", throughput_records(BASE))])
    b = result([measurement("m", "train", throughput_records([50.0, 51.0, 49.0]), data=workers)])
    with pytest.raises(InvalidInputError) as info:
        compare([a, b], ["synthetic.json", "real.json"])
    assert "data pipeline synthetic vs folder cpu w8 pin persistent" in str(info.value)

    default = DataSettings("/elsewhere/imagenet")  # another machine's path: the same pipeline settings
    c = result([measurement("m", "train", throughput_records([40.0, 41.0, 39.0]), data=default),
                measurement("m", "train", throughput_records(BASE))])
    d = result([measurement("m", "train", throughput_records([45.0, 46.0, 44.0]), data=workers),
                measurement("m", "train", throughput_records(BASE), data=default)])
    comparison = compare([c, d], ["c.json", "d.json"])
    rows = {r.data: r for r in comparison.rows()}
    assert set(rows) == {None, "folder cpu w0", "folder cpu w8 pin persistent"}
    assert [cell.status for cell in rows[None].cells] == ["ok", "missing"]
    assert [cell.value for cell in rows["folder cpu w0"].cells] == pytest.approx([40.0, 100.0])
    assert [cell.status for cell in rows["folder cpu w8 pin persistent"].cells] == ["missing", "ok"]
    assert rows["folder cpu w0"].label() == "m train [folder cpu w0] fp32 bs32"
    assert not any("several data settings" in w for w in comparison.warnings)


def scale_measurement(gpus: int | None, batch_per_gpu: int, world: int, img_s: list[float] | None) -> Measurement:
    """A ``clsbench scale`` DDP measurement of ``world`` GPUs in total (its batch is the global batch); ``img_s``
    None: it failed before it had figures (no ``gpus`` in its summary)."""
    cell = Cell("resnet50", "train-ddp", "fp32", batch_per_gpu * world, "cuda")
    m = build_measurement(cell, throughput_records(img_s, batch_per_gpu * world) if img_s else failed())
    return m if gpus is None else dataclasses.replace(m, summary={**m.summary, "gpus": gpus})


def test_world_size_is_part_of_the_match():
    # The same global batch of 64 on one GPU and on two: not the same cell.
    one = result([scale_measurement(1, 64, 1, [1000.0, 1001.0, 999.0])], settings={"scale": {"batch_size_per_gpu": 64}})
    two = result([scale_measurement(2, 32, 2, [1800.0, 1801.0, 1799.0])],
                 settings={"scale": {"batch_size_per_gpu": 32}})
    with pytest.raises(InvalidInputError) as info:
        compare([one, two], ["one.json", "two.json"])
    assert "world size 1 vs 2" in str(info.value)
    # A measurement that failed before it had figures has its world size from its global batch / the per-GPU batch.
    broken = result([scale_measurement(None, 32, 2, None)], settings={"scale": {"batch_size_per_gpu": 32}})
    (row,) = compare([two, broken], ["two.json", "broken.json"]).rows()
    assert row.world_size == 2 and [cell.status for cell in row.cells] == ["ok", "failed"]
    assert row.label() == "resnet50 train-ddp fp32 bs64 world 2"


def test_a_scale_file_compares_each_world_size_with_the_same_one(data_dir: Path):
    from clsbench.report import export

    scale = result_io.load(data_dir.parent / "golden" / "expected" / "scale.json")  # 8 images per GPU, on 1 and 2
    c = compare([scale, scale], ["a.json", "b.json"])
    assert [(r.workload, r.batch_size, r.world_size) for r in c.rows()] == [
        ("train-ddp", 8, 1), ("train-ddp", 16, 2), ("train-dp", 8, 1), ("train-dp", 16, 2)]
    assert c.rows()[1].label() == "clsbench_testmodels:tiny train-ddp fp32 bs16 world 2"
    assert "world size" in export.export_comparison(c, "table")


def test_an_unrecorded_input_size_is_the_models_default_when_the_files_show_it():
    # A measurement that failed before building the model stores no size: it ran at the model's default, which the
    # other file shows (its run asked for no size and measured 224).
    ok = result([measurement("m", "train", throughput_records(BASE), input_size=224)], settings=requested(("m", None)))
    broken = result([measurement("m", "train", failed())], settings=requested(("m", None)))
    assert broken.measurements[0].input_size is None
    (row,) = compare([ok, broken], ["ok.json", "broken.json"]).rows()
    assert row.input_size == 224 and [cell.status for cell in row.cells] == ["ok", "failed"]
    assert row.label() == "m train fp32 bs32"  # the model's default size is not spelled out

    # Nothing shows the default: an explicit 224 is not assumed to be it.
    explicit = result([measurement("m", "train", throughput_records(BASE), input_size=224)],
                      settings=requested(("m", 224)))
    with pytest.raises(InvalidInputError) as info:
        compare([explicit, broken], ["explicit.json", "broken.json"])
    assert "input size 224 vs default" in str(info.value)


def test_outputs_have_input_size_data_and_world_size_columns():
    from clsbench.report import export

    a = result([measurement("m", "train", throughput_records(BASE), input_size=64),
                measurement("m", "infer-latency", latency_records([10.0, 10.2, 9.8]), batch=1, input_size=64)])
    b = result([measurement("m", "train", throughput_records(BASE), input_size=160),
                measurement("m", "infer-latency", latency_records([5.0, 5.1, 4.9]), batch=1, input_size=64)])
    c = compare([a, b], ["a.json", "b.json"])
    csv_lines = export.export_comparison(c, "csv").splitlines()
    assert csv_lines[0].startswith("workload,metric,model,mode,backend,batch_size,input_size,data,world_size,run,")
    assert {line.split(",")[6:9] == ["160", "synthetic", "1"] for line in csv_lines[1:]} == {True, False}
    rows = json.loads(export.export_comparison(c, "json"))["tables"][1]["rows"]
    assert [(r["input_size"], r["data"], r["world_size"]) for r in rows] == [(64, "synthetic", 1),
                                                                             (160, "synthetic", 1)]
    text = export.export_comparison(c, "table")
    header = next(line for line in text.splitlines() if line.startswith("model") and "img/s" in line)
    assert "input size" in header and "data" not in header and "world size" not in header
    assert "input size" in export.export_comparison(c, "markdown")
    # Every row at one size that is not known to be the model's default: the column says which.
    assert "input size" in export.export_comparison(compare([a, a], ["a", "b"]), "table")
    # Every row at the model's default, synthetic, on one device: the text table stays as it was.
    plain = result([measurement("m", "train", throughput_records(BASE))])
    same = export.export_comparison(compare([plain, plain], ["a", "b"]), "table")
    assert "input size" not in same and "data" not in same and "world size" not in same


# ----------------------------------------------------------------------------------------------------------
# The command


def invoke(*args: str) -> Result:
    group = click.Group()
    register(group)
    return CliRunner().invoke(group, ["compare", *args])


@pytest.fixture
def files(tmp_path: Path, runs: list[BenchmarkResult]) -> tuple[str, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    result_io.save(runs[0], a)
    result_io.save(runs[1], b)
    return str(a), str(b)


def test_compare_prints_environment_tables_cross_view_and_legend(files: tuple[str, str]):
    out = invoke(*files)
    assert out.exit_code == 0, out.output
    text = out.stdout
    assert f"A = {files[0]}: NVIDIA H200 (cuda)" in text and f"B = {files[1]}: Intel(R) Xeon(R) Processor (cpu)" in text
    assert "environment differences (key facts):" in text and "software.torch" in text
    for title in ("infer-latency: p50 latency in ms", "train: img/s", "cross-GPU view"):
        assert title in text
    assert text.index("infer-latency: p50") < text.index("train: img/s") < text.index("cross-GPU view")
    assert "faster (p<0.0001)" in text and "slower (p<0.0001)" in text and "no change > 9.9% (p=0.8714)" in text
    assert "Welch's t-test (two-sided)" in text and "alpha = 0.05" in text
    assert "> 1 means faster" in text and "inverted" in text


def test_gate_exits_5_and_lists_each_significant_slowdown(files: tuple[str, str]):
    for threshold in ("5%", "5", " 5 %"):
        out = invoke(*files, "--fail-if-slower", threshold)
        assert out.exit_code == EXIT_REGRESSION == 5, out.output
        assert "regression gate: 1 significant slowdown(s) beyond 5%" in out.stderr
        assert "SLOWER slow train fp32 bs32" in out.stderr and "25.0% slower" in out.stderr
        assert "note: oom train fp32 bs32: ok in A, failed: oom in B" in out.stderr
        assert "note: 1 measurement(s) ok in A are missing from B" in out.stderr
    passed = invoke(*files, "--fail-if-slower", "30%")
    assert passed.exit_code == 0, passed.output
    assert "regression gate: passed: no change beyond 30% in 1 figure(s), faster in 2, slower within 30% in 1" \
        in passed.stderr


def test_gate_is_inconclusive_when_the_slowdown_is_inside_the_noise(tmp_path: Path):
    a = result([measurement("m", "train", throughput_records([100.0, 80.0, 120.0]))])
    b = result([measurement("m", "train", throughput_records([90.0, 70.0, 110.0]))])
    result_io.save(a, tmp_path / "a.json")
    result_io.save(b, tmp_path / "b.json")
    out = invoke(str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--fail-if-slower", "1")
    assert out.exit_code == 6, out.output
    assert "inconclusive (detects" in out.stdout and "INCONCLUSIVE m train fp32 bs32" in out.stderr


@pytest.mark.parametrize("args", [["--fail-if-slower", "fast"], ["--fail-if-slower", "-5%"], ["--alpha", "2"]])
def test_bad_options_exit_2(files: tuple[str, str], args: list[str]):
    out = invoke(*files, *args)
    assert out.exit_code == 2, out.output
    assert out.stderr.startswith("error: ") and "Traceback" not in out.output


def test_nothing_in_common_exits_2_with_one_error_line(tmp_path: Path):
    result_io.save(result([measurement("a", "train", throughput_records(BASE))]), tmp_path / "a.json")
    result_io.save(result([measurement("b", "train", throughput_records(BASE))]), tmp_path / "b.json")
    out = invoke(str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert out.exit_code == 2
    lines = out.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and "no measurement in common" in lines[0]
    assert lines[1].startswith("hint: ") and out.stdout == ""


def test_runs_at_different_input_sizes_exit_2_naming_the_size(tmp_path: Path):
    result_io.save(result([measurement("m", "train", throughput_records([300.0, 301.0, 299.0]), input_size=64)]),
                   tmp_path / "small.json")
    result_io.save(result([measurement("m", "train", throughput_records(BASE), input_size=160)]),
                   tmp_path / "large.json")
    out = invoke(str(tmp_path / "small.json"), str(tmp_path / "large.json"))
    assert out.exit_code == 2 and out.stdout == "" and "1.33x" not in out.output
    error, hint = out.stderr.splitlines()
    assert "no measurement in common" in error and "input size 64 vs 160" in error
    assert hint.startswith("hint: ") and "input size" in hint


def test_missing_file_exits_3(files: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path / "index.sqlite"))
    out = invoke(files[0], str(tmp_path / "nope.json"))
    assert out.exit_code == 3 and "does not exist" in out.stderr


def test_one_run_is_not_enough(files: tuple[str, str]):
    out = invoke(files[0])
    assert out.exit_code == 2 and "at least two runs" in out.stderr


def test_formats_and_output_file(files: tuple[str, str], tmp_path: Path):
    data = json.loads(invoke(*files, "--format", "json").stdout)
    assert data["test"] == TEST_NAME and len(data["runs"]) == 2
    csv_text = invoke(*files, "--format", "csv").stdout
    assert csv_text.splitlines()[0].startswith(
        "workload,metric,model,mode,backend,batch_size,input_size,data,world_size,run,")
    assert len(csv_text.splitlines()) == 1 + 7 * 2  # 7 matched rows x 2 runs
    markdown = invoke(*files, "--format", "markdown").stdout
    assert "### train: img/s" in markdown and "|---|---|---:|" in markdown
    target = tmp_path / "cmp.md"
    out = invoke(*files, "--format", "markdown", "-o", str(target))
    assert out.exit_code == 0 and out.stdout == "" and target.read_text(encoding="utf-8") == markdown
    again = invoke(*files, "-o", str(target))
    assert again.exit_code == 3 and "already exists" in again.stderr
    assert target.read_text(encoding="utf-8") == markdown


def test_parse_percent():
    assert parse_percent("5%") == 5.0 and parse_percent("2.5") == 2.5 and parse_percent("0") == 0.0
    for bad in ("", "%", "five", "-1", "nan", "inf"):
        with pytest.raises(InvalidInputError):
            parse_percent(bad)


def test_runs_can_be_named_by_their_run_id(files: tuple[str, str], tmp_path: Path):
    from clsbench.results import store

    db = tmp_path / "index.sqlite3"
    store.import_files([files[1]], db=db)
    run_id = store.run_id_of(result_io.load(files[1]))
    out = invoke(files[0], run_id, "--db", str(db))
    assert out.exit_code == 0, out.output
    assert f"B = {run_id}: Intel(R) Xeon(R) Processor (cpu)" in out.stdout
