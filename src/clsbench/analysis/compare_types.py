"""What a comparison is made of, as data: the runs, each run's figure for a matched row, the speed-up and its verdict,
the rows and tables per workload, the cross-GPU view, the environment facts that differ, and a regression.

:func:`clsbench.analysis.compare.compare` builds them; :mod:`clsbench.report.export` renders them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from clsbench.analysis import stats
from clsbench.analysis.compare_keys import SYNTHETIC, Key, key_text
from clsbench.analysis.significance import (
    DEFAULT_POWER,
    MAX_REPEATS_SEARCHED,
    MIN_SAMPLES,
    POWER_METHOD,
    TEST_NAME,
    TestResult,
    format_p,
)
from clsbench.results.schema import DEFAULT_BACKEND

#: Workloads whose figure is a latency (lower is better); every other workload is compared by throughput.
LATENCY_WORKLOADS = frozenset({"infer-latency"})
#: Run labels used in table headers; the legend maps each to its file.
RUN_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

VERDICT_FASTER = "faster"
VERDICT_SLOWER = "slower"
#: Not significant, and the repeats could have shown a change of the reference size (the gate's threshold, else the
#: smallest change they could detect): there is no change beyond it.
VERDICT_NO_CHANGE = "no change"
#: Not significant, but the noise is too large to tell a change of the reference size from none.
VERDICT_INCONCLUSIVE = "inconclusive"
VERDICT_NOT_TESTABLE = "not testable"
VERDICT_NA = "n/a"


@dataclass(frozen=True)
class RunInfo:
    """One compared run: its name (file or run id), table label, hardware and devices."""

    name: str
    label: str
    hardware: str
    devices: tuple[str, ...]
    torch: str | None
    created_utc: str
    protocol: str | None = None  # the stop rules' protocol; None: a result with no stop rules (serve)


@dataclass(frozen=True)
class CellValue:
    """One run's figure for one matched row.

    Attributes:
        status: ``ok``, ``failed``, ``skipped`` or ``missing`` (the run has no such measurement).
        reason: the failure or skip reason from the result file.
        value: the figure (median over repeats); None unless ok.
        values: the per-repeat figures the significance test uses.
        unstable: the measurement was flagged UNSTABLE (spread over repeats above the limit).
        device: the device the measurement ran on.
    """

    status: str
    reason: str | None = None
    value: float | None = None
    values: tuple[float, ...] = ()
    unstable: bool = False
    device: str | None = None

    @property
    def cv_pct(self) -> float | None:
        """Standard deviation over repeats relative to their mean, in percent (None below two repeats)."""
        if len(self.values) < 2:
            return None
        mean = stats.mean(self.values)
        return stats.stdev(self.values) / mean * 100.0 if mean else None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "value": self.value, "values": list(self.values),
                "cv_pct": self.cv_pct, "unstable": self.unstable, "device": self.device}


@dataclass(frozen=True)
class Ratio:
    """A run against the first run for one row.

    Attributes:
        speedup: > 1 means faster than the first run (latency inverted); None when either figure is missing.
        verdict: ``faster``, ``slower``, ``no change``, ``inconclusive``, ``not testable`` or ``n/a``.
        test: the Welch's t-test behind the verdict (None when there was nothing to test).
        detectable_pct: the smallest slowdown, in percent as :attr:`slowdown_pct` counts it, that these repeats
            would find significant 4 times out of 5 at their noise (power of the same test); ``inf`` when not even
            a loss of the whole figure would be; None when not tested.
        detectable_difference: the same as a difference of means, in the figure's unit (img/s or ms).
        threshold_pct: the change the verdict was judged against (``compare --fail-if-slower``); None: none given,
            and ``no change`` is then judged against ``detectable_pct``.
        repeats_needed: repeats per run that would detect a ``threshold_pct`` slowdown at this noise, for an
            inconclusive verdict against a threshold; None otherwise, or when more than the search looks at.
    """

    speedup: float | None
    verdict: str
    test: TestResult | None = None
    detectable_pct: float | None = None
    detectable_difference: float | None = None
    threshold_pct: float | None = None
    repeats_needed: int | None = None

    @property
    def slowdown_pct(self) -> float | None:
        """How much more time per image (or per request) than the first run, in percent; > 0 is slower.

        ``(1 / speedup - 1) * 100``: a throughput that falls from 100 to 90 img/s is 11.1% slower, a latency
        that rises from 10 to 11 ms is 10% slower (pyperf's "1.11x slower").
        """
        if not self.speedup:
            return None
        return (1.0 / self.speedup - 1.0) * 100.0

    def to_dict(self) -> dict[str, Any]:
        detectable = self.detectable_pct
        return {"speedup": self.speedup, "slowdown_pct": self.slowdown_pct, "verdict": self.verdict,
                "test": self.test.to_dict() if self.test else None,
                "detectable_slowdown_pct": "inf" if detectable == float("inf") else detectable,
                "detectable_difference": self.detectable_difference,
                "threshold_pct": self.threshold_pct, "repeats_needed": self.repeats_needed}


@dataclass(frozen=True)
class Row:
    """One matched cell (:data:`~clsbench.analysis.compare_keys.Key`): each run's figure and each later run's ratio.

    Attributes:
        input_size: the input side in pixels; None: the model's default, whose size no compared file shows.
        input_size_is_default: ``input_size`` is the model's default as the compared files show it.
        data: the data pipeline's label; None: synthetic data.
        world_size: the devices one step ran on (1 but for ``clsbench scale``); None: not known.
    """

    model: str
    workload: str
    mode: str
    batch_size: int
    cells: tuple[CellValue, ...]
    ratios: tuple[Ratio, ...]  # one per run after the first
    backend: str = DEFAULT_BACKEND
    input_size: int | None = None
    input_size_is_default: bool = False
    data: str | None = None
    world_size: int | None = 1

    @property
    def key(self) -> Key:
        return (self.model, self.workload, self.mode, self.batch_size, self.backend, self.input_size, self.data,
                self.world_size)

    def label(self) -> str:
        """E.g. ``resnet50 train fp32 bs32``; a real-data pipeline, an input size other than the model's default, a
        world size other than 1 and a backend other than eager are added: ``vit train [folder cpu w8] fp32 bs32
        160px world 2``."""
        return key_text(self.key, self.input_size_is_default)

    def to_dict(self) -> dict[str, Any]:
        backend = {} if self.backend == DEFAULT_BACKEND else {"backend": self.backend}
        return {"model": self.model, "workload": self.workload, "mode": self.mode, **backend,
                "batch_size": self.batch_size, "input_size": self.input_size, "data": self.data or SYNTHETIC,
                "world_size": self.world_size, "cells": [c.to_dict() for c in self.cells],
                "ratios": [r.to_dict() for r in self.ratios]}


@dataclass(frozen=True)
class WorkloadTable:
    """All rows of one workload and the figure they compare."""

    workload: str
    metric: str  # "throughput_img_s" or "latency_p50_ms"
    higher_is_better: bool
    rows: tuple[Row, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "rows": [r.to_dict() for r in self.rows]}


@dataclass(frozen=True)
class EnvDifference:
    """A key environment fact whose value is not the same in every run (one value per run)."""

    field: str
    values: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "values": list(self.values)}


@dataclass(frozen=True)
class CrossRunFigures:
    """One run's figures for one model in the cross-GPU view."""

    train_img_s: float | None = None
    train_batch_size: int | None = None
    latency_p50_ms: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_kind: str | None = None  # "allocated" (torch, GPU) or "host_rss" (CPU)
    power_avg_w: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CrossRow:
    """A row of the cross-GPU view: a model in a mode at one input size, its figures per run, the second run against
    the first.

    The train figure is the training throughput; the latency is the p50 at batch 1; peak memory and average
    power are those of the training measurement (torch's peak allocation on a GPU, the worker's peak RSS on a CPU).
    Only synthetic-data measurements on one device (world size 1) on the eager backend are in this view.
    """

    model: str
    mode: str
    runs: tuple[CrossRunFigures, ...]
    train_ratio: Ratio | None = None
    latency_ratio: Ratio | None = None
    input_size: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "mode": self.mode, "input_size": self.input_size,
                "runs": [r.to_dict() for r in self.runs],
                "train_ratio": self.train_ratio.to_dict() if self.train_ratio else None,
                "latency_ratio": self.latency_ratio.to_dict() if self.latency_ratio else None}


@dataclass(frozen=True)
class Comparison:
    """Everything ``clsbench compare`` shows, as data: render it with :mod:`clsbench.report.export`."""

    runs: tuple[RunInfo, ...]
    alpha: float
    env_differences: tuple[EnvDifference, ...]
    warnings: tuple[str, ...]
    tables: tuple[WorkloadTable, ...]
    cross: tuple[CrossRow, ...]
    test: str = TEST_NAME
    threshold_pct: float | None = None  # the change the verdicts were judged against (--fail-if-slower)

    def rows(self) -> list[Row]:
        return [row for table in self.tables for row in table.rows]

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "alpha": self.alpha,
            "power": DEFAULT_POWER,
            "detectable": f"smallest slowdown detected at {DEFAULT_POWER:.0%} {POWER_METHOD}",
            "threshold_pct": self.threshold_pct,
            "ratio": "speed-up against the first run: > 1 is faster (latency inverted: first / other)",
            "runs": [dataclasses.asdict(r) for r in self.runs],
            "env_differences": [d.to_dict() for d in self.env_differences],
            "warnings": list(self.warnings),
            "tables": [t.to_dict() for t in self.tables],
            "cross_gpu": [c.to_dict() for c in self.cross],
        }


@dataclass(frozen=True)
class Regression:
    """A significant slowdown beyond the gate's threshold."""

    row: Row
    run: RunInfo
    ratio: Ratio
    baseline: str = "the baseline"

    def describe(self) -> str:
        """E.g. ``resnet50 train fp32 bs32: B (new.json) is 25.0% slower than A (1.25x the time per image;
        significant at alpha=0.05 (Welch's t-test (two-sided), p=0.0012))``."""
        test = self.ratio.test
        unit = "latency" if self.row.workload in LATENCY_WORKLOADS else "time per image"
        significance = f"; {test.describe()}" if test else ""
        return (f"{self.row.label()}: {self.run.label} ({self.run.name}) is {self.ratio.slowdown_pct:.1f}% slower "
                f"than {self.baseline} ({format_ratio(1 / self.ratio.speedup)} the {unit}{significance})")


@dataclass(frozen=True)
class Undecided:
    """A figure the regression gate cannot judge against its threshold: an ``inconclusive`` or ``not testable``
    verdict."""

    row: Row
    run: RunInfo
    ratio: Ratio
    baseline: str = "the baseline"
    index: int = 1  # the run's position in the comparison (its cell in ``row.cells``)

    def describe(self) -> tuple[str, ...]:
        """The figure, its point estimate and p, then what these repeats could detect and the repeats needed; e.g.
        ``resnet18 infer-throughput fp32 bs2: B (slow.json) is 200.0% slower than A by the medians (3.00x the time
        per image), not significant (p=0.4051)``."""
        ratio, test = self.ratio, self.ratio.test
        unit = "latency" if self.row.workload in LATENCY_WORKLOADS else "time per image"
        first = f"{self.row.label()}: {self.run.label} ({self.run.name})"
        slowdown = ratio.slowdown_pct
        if slowdown is not None:
            way = f"{slowdown:.1f}% slower than" if slowdown >= 0 else "faster than"
            first += f" is {way} {self.baseline} by the medians ({format_ratio(1 / ratio.speedup)} the {unit})"
        threshold = ratio.threshold_pct
        if test is None or not test.testable:
            fewest = min(test.n_a, test.n_b) if test else 0
            return (first + f", not testable: {fewest} repeat(s) on a side, and the noise needs {MIN_SAMPLES} to be "
                            "estimated",
                    f"repeats needed: at least {MIN_SAMPLES} per run before the noise is known; compare again then for "
                    "the count that detects " + (f"a {threshold:g}% slowdown" if threshold is not None else "one"))
        lines = [first + f", not significant ({format_p(test.p or 0.0)})"]
        base, other = self.row.cells[0], self.row.cells[self.index]
        noise = f"±{_pct(base.cv_pct)} in {self.baseline}, ±{_pct(other.cv_pct)} in {self.run.label}"
        detectable = detectable_text(ratio.detectable_pct)
        if ratio.detectable_pct == float("inf") and ratio.detectable_difference is not None and base.values:
            share = ratio.detectable_difference / stats.mean(base.values) * 100.0
            detectable = (f"none: it would take a fall of {_pct(share)} of {self.baseline}'s mean, more than the "
                          "whole figure")
        lines.append(f"smallest slowdown {test.n_b} + {test.n_a} repeats could detect at this noise ({noise}): "
                     f"{detectable} ({DEFAULT_POWER:.0%} {POWER_METHOD}, alpha {test.alpha:g})")
        if threshold is not None:
            lines.append(f"repeats needed to detect a {threshold:g}% slowdown at this noise: "
                         f"{repeats_text(ratio.repeats_needed, threshold)}")
        return tuple(lines)


def _pct(value: float | None) -> str:
    """A percentage as the comparison tables print a spread: ``0.83%``, ``41.2%``, ``1,250%``."""
    if value is None:
        return "n/a"
    return f"{value:.2f}%" if value < 1 else f"{value:.1f}%" if value < 100 else f"{value:,.0f}%"


@dataclass(frozen=True)
class GateFindings:
    """What the regression gate found, as printed: each significant slowdown beyond the threshold (one line), each
    figure it cannot judge (its lines), what a passed gate judged (in words) and what decided (the test, alpha, the
    power)."""

    slowdowns: tuple[str, ...]
    undecided: tuple[tuple[str, ...], ...]
    passed: str
    basis: str


def detectable_text(pct: float | None) -> str:
    """The smallest detectable slowdown in words: ``2.1%``, or that none is (noise beyond the whole figure)."""
    if pct is None:
        return "n/a"
    if pct == float("inf"):
        return "none: the noise is larger than the figure itself"
    return f"{pct:.1f}%" if pct < 100 else _pct(pct)


def repeats_text(count: int | None, threshold_pct: float) -> str:
    """``12 per run``, or why no count is given."""
    if count is not None:
        return f"{count:,} per run"
    if threshold_pct == 0:
        return "no number of repeats detects a 0% change amid noise"
    return f"more than {MAX_REPEATS_SEARCHED:,} per run"


def format_ratio(value: float) -> str:
    """A ratio as people read it: three significant digits, trailing zeros kept (1.10x, 0.0183x), whole from 100."""
    return f"{value:.0f}x" if value >= 100 else f"{value:#.3g}x"
