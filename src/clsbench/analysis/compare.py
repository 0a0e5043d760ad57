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
  per-repeat values, level ``alpha``, default 0.05) and from what that test could have found
  (:func:`clsbench.analysis.significance.detectable_difference`, at 80% power): ``faster`` or ``slower`` when
  p < alpha; otherwise ``no change`` when the repeats could have detected a change of the *reference* size (the
  gate's threshold, ``compare --fail-if-slower``; without one, the smallest change they could detect) and the
  point estimate stays within it, else ``inconclusive`` (:func:`verdict_of`). ``not testable`` with fewer than two
  repeats on a side; ``n/a`` when either cell has no figure (failed, skipped or missing). Detectable changes are
  slowdowns as :attr:`Ratio.slowdown_pct` counts them: a difference of means ``d`` is ``d / (mean_A - d)`` more
  time per image for throughput (infinite when ``d`` reaches A's mean) and ``d / mean_A`` more latency.
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

import math
from collections.abc import Sequence
from typing import Any

from clsbench.analysis import stats
from clsbench.analysis.compare_keys import Key, default_input_sizes, key_text, match_key, miss_summary, near_misses
from clsbench.analysis.compare_types import (
    LATENCY_WORKLOADS,
    RUN_LABELS,
    VERDICT_FASTER,
    VERDICT_INCONCLUSIVE,
    VERDICT_NA,
    VERDICT_NO_CHANGE,
    VERDICT_NOT_TESTABLE,
    VERDICT_SLOWER,
    CellValue,
    Comparison,
    CrossRow,
    CrossRunFigures,
    EnvDifference,
    GateFindings,
    Ratio,
    Regression,
    Row,
    RunInfo,
    Undecided,
    WorkloadTable,
)
from clsbench.analysis.significance import (
    DEFAULT_ALPHA,
    DEFAULT_POWER,
    POWER_METHOD,
    TestResult,
    detectable_difference,
    repeats_needed,
    welch_t_test,
)
from clsbench.core.plan import PRE_PROTOCOL_EQUIVALENT, PRE_PROTOCOL_LABEL, WORKLOADS, protocol_of
from clsbench.core.vocab import Status
from clsbench.errors import InvalidInputError
from clsbench.results.facts import KEY_FIELDS, get_field
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement

#: Facts that identify the hardware; the other KEY_FIELDS are software or settings.
HARDWARE_FIELDS = ("gpu.name", "cpu.model")


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


def slowdown_of_difference(difference: float, base_mean: float, higher_is_better: bool) -> float:
    """A difference of means as a slowdown in percent, as :attr:`Ratio.slowdown_pct` counts it: throughput falling
    by ``difference`` img/s from ``base_mean`` (``inf`` once it reaches the whole figure), or latency rising by
    ``difference`` ms."""
    if higher_is_better:
        return difference / (base_mean - difference) * 100.0 if difference < base_mean else math.inf
    return difference / base_mean * 100.0


def difference_of_slowdown(slowdown_pct: float, base_mean: float, higher_is_better: bool) -> float:
    """The inverse of :func:`slowdown_of_difference`: the difference of means a slowdown of ``slowdown_pct`` is."""
    if higher_is_better:
        return base_mean * slowdown_pct / (100.0 + slowdown_pct)
    return base_mean * slowdown_pct / 100.0


def verdict_of(test: TestResult, higher_is_better: bool, slowdown_pct: float, detectable_pct: float,
               threshold_pct: float | None) -> str:
    """The verdict of a tested difference (see the module docstring).

    Args:
        test: Welch's test of the later run (a) against the first (b).
        higher_is_better: the figure is a throughput (a larger mean is faster).
        slowdown_pct: the point estimate, by the medians (> 0: slower).
        detectable_pct: the smallest slowdown these repeats would detect at 80% power (``inf``: none).
        threshold_pct: the gate's threshold; None: judge ``no change`` against ``detectable_pct``.
    """
    if test.significant:
        # The test is about means: its sign sets the direction (t > 0: a's figure is larger).
        larger = test.t is not None and test.t > 0
        return VERDICT_FASTER if larger == higher_is_better else VERDICT_SLOWER
    reference = detectable_pct if threshold_pct is None else threshold_pct
    # A change the repeats could not have seen, or a point estimate beyond the reference, is never "no change".
    if math.isinf(detectable_pct) or detectable_pct > reference or abs(slowdown_pct) > reference:
        return VERDICT_INCONCLUSIVE
    return VERDICT_NO_CHANGE


def ratio_of(base: CellValue, other: CellValue, higher_is_better: bool, alpha: float,
             threshold_pct: float | None = None) -> Ratio:
    """Speed-up of ``other`` against ``base`` and its verdict (see the module docstring); with ``threshold_pct``
    (the gate's), an inconclusive verdict also says how many repeats would detect that slowdown."""
    if base.status != Status.OK or other.status != Status.OK or not base.value or not other.value:
        return Ratio(None, VERDICT_NA)
    speedup = other.value / base.value if higher_is_better else base.value / other.value
    test = welch_t_test(other.values, base.values, alpha)
    if not test.testable:
        return Ratio(speedup, VERDICT_NOT_TESTABLE, test, threshold_pct=threshold_pct)
    base_mean = stats.mean(base.values)
    difference = detectable_difference(other.values, base.values, alpha)
    detectable = slowdown_of_difference(difference, base_mean, higher_is_better)
    slowdown = (1.0 / speedup - 1.0) * 100.0
    verdict = verdict_of(test, higher_is_better, slowdown, detectable, threshold_pct)
    needed = None
    if verdict == VERDICT_INCONCLUSIVE and threshold_pct is not None:
        target = difference_of_slowdown(threshold_pct, base_mean, higher_is_better)
        needed = repeats_needed(other.values, base.values, target, alpha)
    return Ratio(speedup, verdict, test, detectable_pct=detectable, detectable_difference=difference,
                 threshold_pct=threshold_pct, repeats_needed=needed)


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
            why = (f"; the same cells differ in {miss_summary(misses)} ({names[0]} vs {names[i]})" if misses else "")
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
            shown = [f"{key_text((*cell, None, None, 1))} ({miss_summary(pairs)})" for cell, pairs in by_cell.items()]
            more = f" and {len(shown) - 3} more" if len(shown) > 3 else ""
            warnings.append(f"{labels[i]} measured {len(shown)} cell(s) of {labels[0]} with another input size, data "
                            f"pipeline or world size ({labels[0]} vs {labels[i]}): {', '.join(shown[:3])}{more}; not "
                            "the same measurements, so they are separate rows, each missing from the other run")


def _tables(keys: Sequence[Key], indexes: Sequence[dict[Key, Measurement]], defaults: dict[str, int],
            alpha: float, threshold_pct: float | None) -> list[WorkloadTable]:
    tables = []
    for workload in sorted({k[1] for k in keys}, key=_workload_order):
        metric, higher = metric_of(workload)
        rows = []
        for key in (k for k in keys if k[1] == workload):
            cells = tuple(cell_of(index.get(key)) for index in indexes)
            ratios = tuple(ratio_of(cells[0], cell, higher, alpha, threshold_pct) for cell in cells[1:])
            rows.append(Row(key[0], key[1], key[2], key[3], cells, ratios, backend=key[4], input_size=key[5],
                            input_size_is_default=key[5] is not None and key[5] == defaults.get(key[0]),
                            data=key[6], world_size=key[7]))
        tables.append(WorkloadTable(workload, metric, higher, tuple(rows)))
    return tables


def compare(results: Sequence[BenchmarkResult], names: Sequence[str], alpha: float = DEFAULT_ALPHA, *,
            allow_protocol_mix: bool = False, threshold_pct: float | None = None) -> Comparison:
    """Match the measurements of ``results`` and compare every run against the first.

    Args:
        results: two or more runs; the first is the baseline every ratio is taken against.
        names: one name per run (file path or run id), shown in the legend.
        alpha: significance level of Welch's t-test (p < alpha is significant).
        allow_protocol_mix: compare runs of different protocols anyway (:func:`check_protocols`), with a warning.
        threshold_pct: the regression gate's threshold (``--fail-if-slower``): ``no change`` and ``inconclusive``
            are judged against it, and an inconclusive verdict says how many repeats would detect it.

    Returns:
        The comparison as data (see :class:`Comparison`).

    Raises:
        InvalidInputError: fewer than two runs, names that do not match the runs, a bad ``alpha`` or threshold, runs of
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
    if threshold_pct is not None:
        _check_threshold(threshold_pct)
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
    tables = _tables(keys, indexes, defaults, alpha, threshold_pct)

    runs = tuple(_run_info(r, n, label) for r, n, label in zip(results, names, labels, strict=True))
    warnings.extend(same_hardware_warnings(results, labels))
    return Comparison(
        runs=runs,
        alpha=alpha,
        env_differences=tuple(environment_differences(results)),
        warnings=tuple(warnings),
        tables=tuple(tables),
        cross=tuple(cross_gpu_rows(tables, indexes)),
        threshold_pct=threshold_pct,
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


def _check_threshold(threshold_pct: float) -> None:
    if not 0 <= threshold_pct < math.inf:
        raise InvalidInputError(f"the slowdown threshold must be a percentage >= 0, got {threshold_pct:g}%",
                                "e.g. 5%")


def regressions(comparison: Comparison, threshold_pct: float) -> list[Regression]:
    """The significant slowdowns beyond ``threshold_pct``: the regression gate of ``compare --fail-if-slower``
    (exit 5).

    A row counts when a later run's verdict against the first is ``slower`` (Welch's t-test, p < alpha) and
    its :attr:`Ratio.slowdown_pct` exceeds ``threshold_pct``. What the test cannot tell is :func:`undecided`;
    cells without a figure never count.
    """
    _check_threshold(threshold_pct)
    out = []
    for row in comparison.rows():
        for run, ratio in zip(comparison.runs[1:], row.ratios, strict=True):
            slowdown = ratio.slowdown_pct
            if ratio.verdict == VERDICT_SLOWER and slowdown is not None and slowdown > threshold_pct:
                out.append(Regression(row, run, ratio, baseline=comparison.runs[0].label))
    return out


def _gate_threshold(comparison: Comparison) -> float:
    if comparison.threshold_pct is None:
        raise ValueError("the comparison was built without a threshold: compare(..., threshold_pct=...)")
    return comparison.threshold_pct


def undecided(comparison: Comparison) -> list[Undecided]:
    """The figures the regression gate cannot judge against the threshold ``comparison`` was built with (exit 6
    when there is no regression): verdicts ``inconclusive`` (noise too large for the threshold, or a point
    estimate beyond it that is not significant) and ``not testable`` (fewer than two repeats on a side).

    Raises:
        ValueError: ``comparison`` was built without a threshold (its verdicts judge no gate).
    """
    _gate_threshold(comparison)
    out = []
    for row in comparison.rows():
        for index, (run, ratio) in enumerate(zip(comparison.runs[1:], row.ratios, strict=True), start=1):
            if ratio.verdict in (VERDICT_INCONCLUSIVE, VERDICT_NOT_TESTABLE):
                out.append(Undecided(row, run, ratio, baseline=comparison.runs[0].label, index=index))
    return out


def gate(comparison: Comparison) -> GateFindings:
    """The regression gate of ``compare --fail-if-slower`` at the threshold ``comparison`` was built with: its
    :func:`regressions` (exit 5), else its :func:`undecided` figures (exit 6), else what passed (:func:`gate_passed`).

    Raises:
        ValueError: ``comparison`` was built without a threshold.
    """
    threshold = _gate_threshold(comparison)
    return GateFindings(
        slowdowns=tuple(r.describe() for r in regressions(comparison, threshold)),
        undecided=tuple(u.describe() for u in undecided(comparison)),
        passed=gate_passed(comparison),
        basis=f"{comparison.test}, alpha {comparison.alpha:g}; detectable at {DEFAULT_POWER:.0%} {POWER_METHOD}",
    )


def gate_passed(comparison: Comparison) -> str:
    """What a passed gate judged, in words: ``no change beyond 5% in 3 figure(s), faster in 1, slower within 5% in
    1`` (the verdicts of every compared figure; cells without a figure are listed apart, as notes).

    Raises:
        ValueError: ``comparison`` was built without a threshold.
    """
    threshold = _gate_threshold(comparison)
    counts = dict.fromkeys((VERDICT_NO_CHANGE, VERDICT_FASTER, VERDICT_SLOWER), 0)
    for row in comparison.rows():
        for ratio in row.ratios:
            if ratio.verdict in counts:
                counts[ratio.verdict] += 1
    parts = [f"no change beyond {threshold:g}% in {counts[VERDICT_NO_CHANGE]} figure(s)"]
    if counts[VERDICT_FASTER]:
        parts.append(f"faster in {counts[VERDICT_FASTER]}")
    if counts[VERDICT_SLOWER]:
        parts.append(f"slower within {threshold:g}% in {counts[VERDICT_SLOWER]}")
    return ", ".join(parts)


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
