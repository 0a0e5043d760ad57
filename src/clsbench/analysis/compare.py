"""Compare stored runs: matched measurements, speed-ups, whether each difference is significant, and what differs.

Reads :class:`~clsbench.results.schema.BenchmarkResult` objects only (files, or runs from the store), so a
comparison can be redone from files alone on any machine.

* **Matching.** Measurements are matched by ``(model, workload, mode, batch_size)``, the inference backend
  (``eager`` unless a run says otherwise), the input size, the data pipeline and the world size (:func:`match_key`),
  deliberately *not* by device: comparing an H200 with a CPU or with another GPU is the point. Measurements that
  differ in any of these facts are separate rows, each missing from the runs that lack it, and a warning (or, when
  two runs have nothing in common, the error) says which fact differed.

  - *Input size*: the size the measurement stored, else the size its repeats recorded. A measurement that stores
    none (it failed before the model was built, or an older file) ran at the model's default; that default is
    taken from the compared files when one of them shows it (a measurement of the same model, in a run whose
    settings asked for no input size, that recorded a size; one size across the files). Otherwise it stays
    "default": it pairs with another unrecorded default, never with a number, since the default is not known.
  - *Data pipeline*: :func:`clsbench.results.schema.data_label` of the real-data settings (source, pipeline,
    workers, pinning, ...; not the dataset's folder, which differs from machine to machine), or synthetic.
  - *World size*: the devices one step ran on: a ``clsbench scale`` measurement's GPUs in total (its summary's
    ``gpus``, else its global batch / the per-GPU batch), 1 for every other measurement.
* **The figure.** ``train`` and ``infer-throughput``: img/s (higher is better), one value per repeat from
  ``summary["throughput_img_s_by_repeat"]``. ``infer-latency``: p50 request latency in ms (lower is better), one
  value per repeat: the nearest-rank p50 (:func:`clsbench.analysis.stats.percentile`) of that repeat's raw ``wall_ms``
  samples. The figure shown is the median over repeats, as in ``clsbench show``.
* **The ratio** of every run against the first is a *speed-up*: ``> 1`` means faster than the first run.
  For throughput it is ``other / first``; for latency it is inverted, ``first / other``, so that ``> 1`` still
  means faster.
* **The verdict** comes from :func:`clsbench.analysis.significance.welch_t_test` (Welch's two-sided t-test on the
  per-repeat values, level ``alpha``, default 0.05): ``faster``, ``slower``, or ``not significant`` when the
  difference is inside the repeat-to-repeat noise; ``not testable`` with fewer than two repeats on a side; ``n/a``
  when either cell has no figure (failed, skipped or missing).
* **Protocols.** Runs measured under different stop-rule protocols (``run --protocol``; a file from before
  protocols reads as ``thorough (before protocols)``, the rules it ran under) are not compared silently: when a
  later run's protocol differs from the first's and the stop rules the two files store differ for a workload both
  measured, :func:`check_protocols` refuses in one error line, and ``--allow-protocol-mix`` turns the refusal into a
  warning. Protocols whose stored rules agree (on a CPU, or train and throughput alone) are no mix.
* **Environment.** The facts of :data:`clsbench.results.facts.KEY_FIELDS` that differ between runs are
  listed. Runs on different hardware are expected; runs on the *same* hardware (same GPU name, or same CPU model
  for CPU runs) whose software or settings differ get a warning: a difference may come from either.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.analysis import stats
from clsbench.analysis.significance import DEFAULT_ALPHA, TEST_NAME, TestResult, welch_t_test
from clsbench.core.plan import PRE_PROTOCOL_EQUIVALENT, PRE_PROTOCOL_LABEL, WORKLOADS, protocol_of
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError
from clsbench.results.facts import KEY_FIELDS, get_field
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, backend_suffix, data_label

#: Workloads whose figure is a latency (lower is better); every other workload is compared by throughput.
LATENCY_WORKLOADS = frozenset({"infer-latency"})
#: Facts that identify the hardware; the other KEY_FIELDS are software or settings.
HARDWARE_FIELDS = ("gpu.name", "cpu.model")
#: Run labels used in table headers; the legend maps each to its file.
RUN_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

VERDICT_FASTER = "faster"
VERDICT_SLOWER = "slower"
VERDICT_NOT_SIGNIFICANT = "not significant"
VERDICT_NOT_TESTABLE = "not testable"
VERDICT_NA = "n/a"

#: The label of synthetic data in tables and exports (a measurement without real-data settings).
SYNTHETIC = "synthetic"
#: What a measurement's key lacks that compare matches on too, in the order of :data:`Key`'s last three entries.
MATCH_FACTS = ("input size", "data pipeline", "world size")

#: model, workload, mode, batch_size, backend, input size (None: the model's default, size unknown), data label
#: (None: synthetic), world size (None: a scale measurement whose world size cannot be told).
Key = tuple[str, str, str, int, str, int | None, str | None, int | None]


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
        verdict: ``faster``, ``slower``, ``not significant``, ``not testable`` or ``n/a``.
        test: the Welch's t-test behind the verdict (None when there was nothing to test).
    """

    speedup: float | None
    verdict: str
    test: TestResult | None = None

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
        return {"speedup": self.speedup, "slowdown_pct": self.slowdown_pct, "verdict": self.verdict,
                "test": self.test.to_dict() if self.test else None}


@dataclass(frozen=True)
class Row:
    """One matched cell (:data:`Key`): each run's figure and each later run's ratio.

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

    def rows(self) -> list[Row]:
        return [row for table in self.tables for row in table.rows]

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "alpha": self.alpha,
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


def format_ratio(value: float) -> str:
    """A ratio as people read it: three significant digits, trailing zeros kept (1.10x, 0.0183x), whole from 100."""
    return f"{value:.0f}x" if value >= 100 else f"{value:#.3g}x"


# ----------------------------------------------------------------------------------------------------------
# Figures of one measurement


def metric_of(workload: str) -> tuple[str, bool]:
    """The figure compared for ``workload`` and whether higher is better."""
    if workload in LATENCY_WORKLOADS:
        return "latency_p50_ms", False
    return "throughput_img_s", True


def per_repeat_values(m: Measurement) -> list[float]:
    """The figure of each ok repeat: p50 of its ``wall_ms`` (infer-latency), else its img/s; finite values only."""
    ok = [r for r in m.repeats if r.get("status") == Status.OK and isinstance(r.get("samples"), dict)]
    values: list[float] = []
    if m.workload in LATENCY_WORKLOADS:
        values = [stats.percentile(r["samples"]["wall_ms"], 50.0) for r in ok if r["samples"].get("wall_ms")]
    elif m.summary.get("throughput_img_s_by_repeat"):
        values = list(m.summary["throughput_img_s_by_repeat"])
    else:
        for r in ok:
            images, wall_s = r["samples"].get("images"), r["samples"].get("wall_s")
            if images and wall_s:
                values.append(images / wall_s)
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def figure_of(m: Measurement) -> float | None:
    """The figure ``clsbench show`` prints: median img/s over repeats, or median over repeats of p50 latency."""
    if m.workload in LATENCY_WORKLOADS:
        value = (m.summary.get("latency_ms") or {}).get("p50")
    else:
        value = m.summary.get("throughput_img_s")
    if value is None:
        values = per_repeat_values(m)
        value = stats.median(values) if values else None
    return value


def cell_of(m: Measurement | None) -> CellValue:
    if m is None:
        return CellValue(status="missing")
    if m.status != Status.OK:
        return CellValue(status=m.status, reason=m.reason, device=m.device)
    value = figure_of(m)
    if value is None:
        return CellValue(status="missing", reason="no figure recorded", device=m.device)
    return CellValue(status="ok", value=value, values=tuple(per_repeat_values(m)),
                     unstable=bool(m.summary.get("unstable")), device=m.device)


def ratio_of(base: CellValue, other: CellValue, higher_is_better: bool, alpha: float) -> Ratio:
    """Speed-up of ``other`` against ``base`` and its verdict (see the module docstring)."""
    if base.status != Status.OK or other.status != Status.OK or not base.value or not other.value:
        return Ratio(None, VERDICT_NA)
    speedup = other.value / base.value if higher_is_better else base.value / other.value
    test = welch_t_test(other.values, base.values, alpha)
    if not test.testable:
        return Ratio(speedup, VERDICT_NOT_TESTABLE, test)
    if not test.significant:
        return Ratio(speedup, VERDICT_NOT_SIGNIFICANT, test)
    # The test is about means: its sign sets the direction (t > 0: other's figure is larger).
    larger = test.t is not None and test.t > 0
    return Ratio(speedup, VERDICT_FASTER if larger == higher_is_better else VERDICT_SLOWER, test)


# ----------------------------------------------------------------------------------------------------------
# Runs and environments


def _hardware(result: BenchmarkResult) -> tuple[str, str]:
    """("gpu" | "cpu", name) of the hardware the run measured."""
    devices = {m.device for m in result.measurements} or {str(result.environment.get("device") or "cpu")}
    if any(d.startswith("cuda") for d in devices):
        return "gpu", str(get_field(result.environment, "gpu.name") or "unknown GPU")
    return "cpu", str(get_field(result.environment, "cpu.model") or "unknown CPU")


def _run_info(result: BenchmarkResult, name: str, label: str) -> RunInfo:
    devices = tuple(sorted({m.device for m in result.measurements}))
    return RunInfo(name=name, label=label, hardware=_hardware(result)[1], devices=devices,
                   torch=get_field(result.environment, "software.torch"), created_utc=result.created_utc,
                   protocol=protocol_of(result.settings))


# ----------------------------------------------------------------------------------------------------------
# Protocols

#: The ``compare`` flag that compares runs of different protocols anyway (with a warning line).
ALLOW_PROTOCOL_MIX_FLAG = "--allow-protocol-mix"


def _same_rules_as(protocol: str) -> str:
    """The protocol whose rules ``protocol`` ran under (a file from before protocols: ``thorough``)."""
    return PRE_PROTOCOL_EQUIVALENT if protocol == PRE_PROTOCOL_LABEL else protocol


def _rule_differences(first: BenchmarkResult, other: BenchmarkResult) -> list[str]:
    """The stored stop-rule fields that differ between two runs, for the workloads both measured, e.g.
    ``infer-latency min_iterations 300 vs 1000`` (a workload whose rule either file lacks is not judged)."""
    rules = [r.settings.get("stop_rules") or {} for r in (first, other)]
    both = {m.workload for m in first.measurements} & {m.workload for m in other.measurements}
    out = []
    for workload in sorted(both, key=_workload_order):
        a, b = rules[0].get(workload), rules[1].get(workload)
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        out += [f"{workload} {name} {a.get(name)} vs {b.get(name)}" for name in dict.fromkeys([*a, *b])
                if a.get(name) != b.get(name)]
    return out


def protocol_mixes(results: Sequence[BenchmarkResult], names: Sequence[str]) -> list[str]:
    """One line per later run measured under another protocol than the first, with stop rules that differ for a
    workload both measured (:func:`_rule_differences`). Runs without stop rules (serve) are never a mix."""
    out = []
    first = protocol_of(results[0].settings)
    for name, result in zip(names[1:], results[1:], strict=True):
        other = protocol_of(result.settings)
        if first is None or other is None or _same_rules_as(first) == _same_rules_as(other):
            continue
        differences = _rule_differences(results[0], result)
        if differences:
            out.append(f"{names[0]} ran protocol {first!r} and {name} protocol {other!r}: their stop rules differ "
                       f"({'; '.join(differences)})")
    return out


def check_protocols(results: Sequence[BenchmarkResult], names: Sequence[str], *, allow_mix: bool) -> list[str]:
    """Refuse runs of different protocols (:func:`protocol_mixes`), or with ``allow_mix`` return the warning lines.

    Raises:
        InvalidInputError: a mix without ``allow_mix``: one line naming the runs, protocols and rules.
    """
    mixes = protocol_mixes(results, names)
    if mixes and not allow_mix:
        more = f" (and {len(mixes) - 1} more run(s) of another protocol)" if len(mixes) > 1 else ""
        wanted = _same_rules_as(protocol_of(results[0].settings) or "")
        raise InvalidInputError(
            f"{mixes[0]}{more}; compare does not mix protocols silently",
            f"re-run with `--protocol {wanted}` to match {names[0]}, or pass {ALLOW_PROTOCOL_MIX_FLAG} to compare "
            "them anyway")
    return [f"protocols mixed ({ALLOW_PROTOCOL_MIX_FLAG}): {line}" for line in mixes]


def environment_differences(results: Sequence[BenchmarkResult]) -> list[EnvDifference]:
    """The KEY_FIELDS whose values are not all equal across ``results``, in KEY_FIELDS order."""
    out = []
    for path in KEY_FIELDS:
        values = tuple(get_field(r.environment, path) for r in results)
        if len(set(map(repr, values))) > 1:
            out.append(EnvDifference(path, values))
    return out


def same_hardware_warnings(results: Sequence[BenchmarkResult], labels: Sequence[str]) -> list[str]:
    """One warning per pair of runs on the same GPU (or CPU) whose software or settings differ."""
    out = []
    for j in range(1, len(results)):
        for i in range(j):
            kind_i, hw_i = _hardware(results[i])
            kind_j, hw_j = _hardware(results[j])
            if (kind_i, hw_i) != (kind_j, hw_j) or hw_i.startswith("unknown"):
                continue
            relevant = [p for p in KEY_FIELDS if p not in HARDWARE_FIELDS and (kind_i == "gpu" or
                                                                                not p.startswith("gpu."))]
            changed = []
            for path in relevant:
                a, b = get_field(results[i].environment, path), get_field(results[j].environment, path)
                if a != b:
                    changed.append(f"{path} {a} -> {b}")
            if changed:
                what = "GPU" if kind_i == "gpu" else "CPU"
                out.append(f"{labels[i]} and {labels[j]} ran on the same {what} ({hw_i}) with different software or "
                           f"settings ({'; '.join(changed)}): a difference may come from either")
    return out


# ----------------------------------------------------------------------------------------------------------
# What a measurement is matched by


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def recorded_input_size(m: Measurement) -> int | None:
    """The input side ``m`` stores, else the one its repeats recorded; None: neither (the model's default)."""
    if _is_size(m.input_size):
        return m.input_size
    return next((r["input_size"] for r in m.repeats if _is_size(r.get("input_size"))), None)


def _requested_input_sizes(settings: dict[str, Any]) -> dict[str, set[Any]]:
    """Per model, the input sizes a run's settings asked for (None: the model's default): its cells and any
    procedure block naming a model (diagnose, sweep, tune, scale)."""
    out: dict[str, set[Any]] = {}
    blocks = [*(settings.get("cells") or ()), *settings.values()]
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("model"), str) and "input_size" in block:
            out.setdefault(block["model"], set()).add(block["input_size"])
    return out


def default_input_sizes(results: Sequence[BenchmarkResult]) -> dict[str, int]:
    """Per model, its default input size as ``results`` show it: the size recorded by its measurements in runs whose
    settings asked for no size for it. A model is left out when no file shows its default, or when the files
    disagree (one model name, two defaults: e.g. another timm version)."""
    seen: dict[str, set[int]] = {}
    for result in results:
        requested = _requested_input_sizes(result.settings)
        for m in result.measurements:
            size = recorded_input_size(m)
            if size is not None and requested.get(m.model) == {None}:
                seen.setdefault(m.model, set()).add(size)
    return {model: next(iter(sizes)) for model, sizes in seen.items() if len(sizes) == 1}


def input_size_of(m: Measurement, defaults: dict[str, int]) -> int | None:
    """The input side ``m`` ran at (:func:`recorded_input_size`, else the model's default from ``defaults``);
    None: the model's default, whose size is not known."""
    size = recorded_input_size(m)
    return size if size is not None else defaults.get(m.model)


def world_size_of(m: Measurement, settings: dict[str, Any]) -> int | None:
    """The devices one step of ``m`` ran on: a ``clsbench scale`` measurement's GPUs in total (its summary's
    ``gpus``, or, when it failed before it had figures, its global batch / the plan's per-GPU batch), 1 for any
    other measurement (one process on one device); None for a scale measurement that says neither."""
    gpus = (m.summary or {}).get("gpus")
    if _is_size(gpus):
        return gpus
    scale = settings.get("scale")
    if not isinstance(scale, dict):
        return 1
    per_gpu = scale.get("batch_size_per_gpu")
    if _is_size(per_gpu) and m.batch_size % per_gpu == 0:
        return m.batch_size // per_gpu
    return None


def match_key(m: Measurement, settings: dict[str, Any], defaults: dict[str, int]) -> Key:
    """What compare matches ``m`` by (:data:`Key`; see the module docstring). ``settings``: its run's settings;
    ``defaults``: :func:`default_input_sizes` of the compared runs."""
    return (m.model, m.workload, m.mode, m.batch_size, m.backend, input_size_of(m, defaults), data_label(m.data),
            world_size_of(m, settings))


def fact_text(index: int, value: Any) -> str:
    """One of :data:`MATCH_FACTS` (by position) as tables print it: ``160``, ``default``, ``synthetic``, ``?``."""
    if MATCH_FACTS[index] == "input size":
        return "default" if value is None else str(value)
    if MATCH_FACTS[index] == "data pipeline":
        return value or SYNTHETIC
    return "?" if value is None else str(value)


def key_text(key: Key, size_is_default: bool = False) -> str:
    """A matched cell in words (:meth:`Row.label`); the input size is left out when it is the model's default."""
    model, workload, mode, batch, backend, size, data, world = key
    text = f"{model} {workload}" + (f" [{data}]" if data else "") + f" {mode} bs{batch}"
    if size is not None and not size_is_default:
        text += f" {size}px"
    if world != 1:
        text += f" world {fact_text(2, world)}"
    return text + backend_suffix(backend)


def _differences(a: Key, b: Key) -> list[str]:
    """The match facts that differ between two keys of the same cell, e.g. ``input size 64 vs 160``."""
    return [f"{name} {fact_text(i, a[5 + i])} vs {fact_text(i, b[5 + i])}" for i, name in enumerate(MATCH_FACTS)
            if a[5 + i] != b[5 + i]]


def near_misses(base: dict[Key, Measurement], other: dict[Key, Measurement]) -> list[tuple[Key, Key]]:
    """Pairs (base key, other key) of one cell (model, workload, mode, batch size, backend) that did not pair up
    because an input size, data pipeline or world size differs; keys that matched elsewhere are not counted."""
    unmatched: dict[tuple[Any, ...], list[Key]] = {}
    for key in base:
        if key not in other:
            unmatched.setdefault(key[:5], []).append(key)
    return [(a, key) for key in other if key not in base for a in unmatched.get(key[:5], [])]


def _miss_summary(misses: Sequence[tuple[Key, Key]]) -> str:
    """The distinct differences of ``misses`` in words: ``input size 64 vs 160; data pipeline synthetic vs ...``."""
    return "; ".join(dict.fromkeys(d for a, b in misses for d in _differences(a, b)))


# ----------------------------------------------------------------------------------------------------------
# The comparison


def _index(result: BenchmarkResult, label: str, warnings: list[str],
           defaults: dict[str, int]) -> dict[Key, Measurement]:
    """Measurements by matching key; a key measured on several devices in one run keeps the first, with a warning."""
    index: dict[Key, Measurement] = {}
    for m in result.measurements:
        key = match_key(m, result.settings, defaults)
        if key in index:
            warnings.append(f"{label} has {_describe_keys([key], defaults)} on several devices "
                            f"({index[key].device}, {m.device}); comparing the one on {index[key].device}")
            continue
        index[key] = m
    return index


def _describe_keys(keys: Sequence[Key], defaults: dict[str, int], limit: int = 3) -> str:
    if not keys:
        return "no measurements"
    shown = ", ".join(key_text(k, k[5] is not None and k[5] == defaults.get(k[0])) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _workload_order(workload: str) -> tuple[int, str]:
    return (WORKLOADS.index(workload) if workload in WORKLOADS else len(WORKLOADS), workload)


MATCHED_BY = "model, workload, mode, batch size, backend, input size, data pipeline and world size"


def _check_common(indexes: Sequence[dict[Key, Measurement]], names: Sequence[str], labels: Sequence[str],
                  defaults: dict[str, int], warnings: list[str]) -> None:
    """Raise when a run has nothing in common with the first; warn about cells that did not pair up only because
    an input size, data pipeline or world size differs (they are separate rows)."""
    for i in range(1, len(indexes)):
        misses = near_misses(indexes[0], indexes[i])
        if not set(indexes[i]) & set(indexes[0]):
            why = (f"; the same cells differ in {_miss_summary(misses)} ({names[0]} vs {names[i]})" if misses else "")
            raise InvalidInputError(
                f"{names[i]} and {names[0]} have no measurement in common (matched by {MATCHED_BY}){why}: "
                f"{names[0]} has {_describe_keys(list(indexes[0]), defaults)}; {names[i]} has "
                f"{_describe_keys(list(indexes[i]), defaults)}",
                "compare runs measured with the same input size, data pipeline and world size (each is part of the "
                "match): re-run one with the other's settings" if misses else
                "compare runs of the same suite, e.g. `clsbench run --suite seed` on each machine",
            )
        if misses:
            by_cell: dict[tuple[Any, ...], list[tuple[Key, Key]]] = {}
            for a, b in misses:
                by_cell.setdefault(a[:5], []).append((a, b))
            shown = [f"{key_text((*cell, None, None, 1))} ({_miss_summary(pairs)})" for cell, pairs in by_cell.items()]
            more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
            warnings.append(f"{labels[i]} measured {len(shown)} cell(s) of {labels[0]} with another input size, data "
                            f"pipeline or world size ({labels[0]} vs {labels[i]}): {', '.join(shown[:3])}{more}; not "
                            "the same measurements, so they are separate rows, each missing from the other run")


def _tables(keys: Sequence[Key], indexes: Sequence[dict[Key, Measurement]], defaults: dict[str, int],
            alpha: float) -> list[WorkloadTable]:
    tables = []
    for workload in sorted({k[1] for k in keys}, key=_workload_order):
        metric, higher = metric_of(workload)
        rows = []
        for key in (k for k in keys if k[1] == workload):
            cells = tuple(cell_of(index.get(key)) for index in indexes)
            ratios = tuple(ratio_of(cells[0], cell, higher, alpha) for cell in cells[1:])
            rows.append(Row(key[0], key[1], key[2], key[3], cells, ratios, backend=key[4], input_size=key[5],
                            input_size_is_default=key[5] is not None and key[5] == defaults.get(key[0]),
                            data=key[6], world_size=key[7]))
        tables.append(WorkloadTable(workload, metric, higher, tuple(rows)))
    return tables


def compare(results: Sequence[BenchmarkResult], names: Sequence[str], alpha: float = DEFAULT_ALPHA, *,
            allow_protocol_mix: bool = False) -> Comparison:
    """Match the measurements of ``results`` and compare every run against the first.

    Args:
        results: two or more runs; the first is the baseline every ratio is taken against.
        names: one name per run (file path or run id), shown in the legend.
        alpha: significance level of Welch's t-test (p < alpha is significant).
        allow_protocol_mix: compare runs of different protocols anyway (:func:`check_protocols`), with a warning.

    Returns:
        The comparison as data (see :class:`Comparison`).

    Raises:
        InvalidInputError: fewer than two runs, names that do not match the runs, a bad ``alpha``, runs of
            different protocols without ``allow_protocol_mix``, or a run that has no measurement in common with the
            first (naming the input size, data pipeline or world size that kept the same cells apart, if one did).
    """
    if len(results) < 2:
        raise InvalidInputError("compare needs at least two runs", "e.g. clsbench compare baseline.json new.json")
    if len(names) != len(results):
        raise InvalidInputError(f"{len(names)} names for {len(results)} runs")
    if len(results) > len(RUN_LABELS):
        raise InvalidInputError(f"compare takes at most {len(RUN_LABELS)} runs, got {len(results)}")
    if not 0.0 < alpha < 1.0:
        raise InvalidInputError(f"alpha must lie between 0 and 1, got {alpha:g}", "e.g. --alpha 0.05")
    labels = [RUN_LABELS[i] for i in range(len(results))]
    warnings: list[str] = check_protocols(results, names, allow_mix=allow_protocol_mix)
    defaults = default_input_sizes(results)
    indexes = [_index(r, label, warnings, defaults) for r, label in zip(results, labels, strict=True)]
    _check_common(indexes, names, labels, defaults, warnings)

    keys: list[Key] = []
    for index in indexes:
        keys.extend(k for k in index if k not in keys)
    first_seen = {cell: i for i, cell in enumerate(dict.fromkeys(k[:5] for k in keys))}
    keys.sort(key=lambda k: first_seen[k[:5]])  # rows of one cell that did not pair up stand together
    tables = _tables(keys, indexes, defaults, alpha)

    runs = tuple(_run_info(r, n, label) for r, n, label in zip(results, names, labels, strict=True))
    warnings.extend(same_hardware_warnings(results, labels))
    return Comparison(
        runs=runs,
        alpha=alpha,
        env_differences=tuple(environment_differences(results)),
        warnings=tuple(warnings),
        tables=tuple(tables),
        cross=tuple(cross_gpu_rows(tables, indexes)),
    )


def _pick_train(rows: list[Row]) -> Row | None:
    """Of a model's training rows in one mode, the batch size with the most runs ok (the first on a tie)."""
    if not rows:
        return None
    return max(rows, key=lambda r: sum(c.status == Status.OK for c in r.cells))


def cross_gpu_rows(tables: Sequence[WorkloadTable], indexes: Sequence[dict[Key, Measurement]]) -> list[CrossRow]:
    """The seed articles' table: per model, mode and input size, training img/s, p50 latency at batch 1, peak memory
    and power.

    Rows exist for every (model, mode, input size) with an ok training or batch-1 latency measurement in some run.
    """
    by_workload = {t.workload: t for t in tables}

    def plain(row: Row) -> bool:
        # The articles' view is of the PyTorch module itself on synthetic data on one device (a backend, a data
        # pipeline and a world size are in the workload tables).
        return row.backend == DEFAULT_BACKEND and row.data is None and row.world_size == 1

    train_rows = [r for r in by_workload["train"].rows if plain(r)] if "train" in by_workload else []
    latency_rows = [r for r in by_workload["infer-latency"].rows
                    if r.batch_size == 1 and plain(r)] if "infer-latency" in by_workload else []
    order: list[tuple[str, str, int | None]] = []
    for r in train_rows + latency_rows:
        if (r.model, r.mode, r.input_size) not in order:
            order.append((r.model, r.mode, r.input_size))
    out = []
    for model, mode, size in order:
        train = _pick_train([r for r in train_rows if (r.model, r.mode, r.input_size) == (model, mode, size)])
        latency = next((r for r in latency_rows if (r.model, r.mode, r.input_size) == (model, mode, size)), None)
        figures = []
        for i, index in enumerate(indexes):
            m_train = index.get(train.key) if train else None
            memory, kind = _peak_memory(m_train)
            figures.append(CrossRunFigures(
                train_img_s=train.cells[i].value if train else None,
                train_batch_size=train.batch_size if train and train.cells[i].status == Status.OK else None,
                latency_p50_ms=latency.cells[i].value if latency else None,
                peak_memory_bytes=memory,
                peak_memory_kind=kind,
                power_avg_w=_power(m_train),
            ))
        if all(f == CrossRunFigures() for f in figures):
            continue  # nothing measured in any run (failed or skipped everywhere)
        out.append(CrossRow(
            model=model, mode=mode, runs=tuple(figures),
            train_ratio=train.ratios[0] if train and train.ratios else None,
            latency_ratio=latency.ratios[0] if latency and latency.ratios else None,
            input_size=size,
        ))
    return out


def _peak_memory(m: Measurement | None) -> tuple[int | None, str | None]:
    if m is None or m.status != Status.OK:
        return None, None
    if m.summary.get("peak_memory_allocated_bytes") is not None:
        return m.summary["peak_memory_allocated_bytes"], "allocated"
    if m.summary.get("host_peak_rss_bytes") is not None:
        return m.summary["host_peak_rss_bytes"], "host_rss"
    return None, None


def _power(m: Measurement | None) -> float | None:
    if m is None or m.status != Status.OK:
        return None
    return (m.summary.get("telemetry") or {}).get("power_avg_w")


def regressions(comparison: Comparison, threshold_pct: float) -> list[Regression]:
    """The significant slowdowns beyond ``threshold_pct``: the regression gate of ``compare --fail-if-slower``.

    A row counts when a later run's verdict against the first is ``slower`` (Welch's t-test, p < alpha) and
    its :attr:`Ratio.slowdown_pct` exceeds ``threshold_pct``. Differences inside the noise, untestable ones and
    cells without a figure never count.
    """
    if threshold_pct < 0:
        raise InvalidInputError(f"the slowdown threshold must be >= 0%, got {threshold_pct:g}%", "e.g. 5%")
    out = []
    for row in comparison.rows():
        for run, ratio in zip(comparison.runs[1:], row.ratios, strict=True):
            slowdown = ratio.slowdown_pct
            if ratio.verdict == VERDICT_SLOWER and slowdown is not None and slowdown > threshold_pct:
                out.append(Regression(row, run, ratio, baseline=comparison.runs[0].label))
    return out


def lost_measurements(comparison: Comparison) -> list[str]:
    """What the regression gate cannot judge, in words: measurements ok in the first run that failed or were
    skipped in a later one (one line each), and how many are missing from each later run (one line per run)."""
    out = []
    missing = dict.fromkeys((run.label for run in comparison.runs[1:]), 0)
    for row in comparison.rows():
        if row.cells[0].status != Status.OK:
            continue
        for run, cell in zip(comparison.runs[1:], row.cells[1:], strict=True):
            if cell.status == "missing":
                missing[run.label] += 1
            elif cell.status != Status.OK:
                reason = f": {cell.reason}" if cell.reason else ""
                out.append(f"{row.label()}: ok in {comparison.runs[0].label}, {cell.status}{reason} in {run.label}")
    for label, count in missing.items():
        if count:
            out.append(f"{count} measurement(s) ok in {comparison.runs[0].label} are missing from {label}")
    return out
