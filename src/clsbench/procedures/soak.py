"""The ``soak`` procedure: one cell measured for a long time in one fresh worker, its timed region split into windows.

Does the card hold its speed for an hour? A soak answers it with the ordinary engine: one cell (any workload, mode
and backend), one repeat, a stop rule whose minimum time is the soak's duration, and a plan whose ``window_s`` makes
the worker size every timed block to one window (:func:`clsbench.workloads.loop.run_windows`) and store where each
began, how long it ran and what it finished (``samples["windows"]``). NVML samples the same region (at
``sample_interval_s``, 1 s by default: an hour is 3,600 samples) into the repeat's telemetry record, on the same
time axis. Each finished window reaches the progress display as it ends; Ctrl-C asks the worker to stop after the
window in flight (:mod:`clsbench.engine.executor`), so everything measured is kept.

The result is an ordinary result file: the measurement as for ``run`` (its summary, telemetry summary and
efficiency figures over the whole soak), and the procedure's own facts under ``settings["soak"]``. The verdicts
(drift, steady state, throttling and its cost, temperature plateau, energy per image) are derived from the file
alone by :mod:`clsbench.analysis.soak`; ``show`` prints them through the :data:`PROCEDURES` entry at the bottom of
this module, and ``compare`` compares two soaks' steady states through its ``compare`` hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.analysis.significance import format_p
from clsbench.analysis.soak import SOAK_FORMAT, analyze_soak, compare_soaks, render_soak
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import StopRule
from clsbench.core.text_table import fmt_rate, text_table
from clsbench.engine.incremental import IncrementalRun
from clsbench.engine.planning import plan_run
from clsbench.errors import InvalidInputError
from clsbench.procedures.base import PROCEDURES, HtmlSection, ProcedureComparison, ProcedureView
from clsbench.procedures.soak_view import soak_section
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult
from clsbench.system.machine import resolve_device, run_facts

#: The default duration: MLPerf's minimum run (600 s), the anchor for "long enough".
DEFAULT_DURATION_S = 600.0
#: The default window: long enough that one window's throughput is steady on a GPU, short enough for a fine series.
DEFAULT_WINDOW_S = 10.0
#: The default telemetry interval of a soak: NVML's power reading is itself averaged over about a second.
DEFAULT_SAMPLE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class SoakSettings:
    """What one soak measures and for how long.

    Attributes:
        model, workload, mode, backend: the cell (as for ``run``).
        batch_size: None: the workload's default batch (as ``run`` chooses it).
        device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``.
        duration_s: the timed seconds to soak for (the stop rule's minimum time; whole windows, so a little more).
        window_s: the length of one window.
        sample_interval_s: seconds between telemetry samples; None: :data:`DEFAULT_SAMPLE_INTERVAL_S`, or the
            window when that is shorter.
    """

    model: str
    workload: str = "train"
    mode: str = "fp32"
    batch_size: int | None = None
    device: str = "auto"
    backend: str = DEFAULT_BACKEND
    duration_s: float = DEFAULT_DURATION_S
    window_s: float = DEFAULT_WINDOW_S
    sample_interval_s: float | None = None

    @property
    def interval_s(self) -> float:
        """The telemetry interval in force."""
        if self.sample_interval_s is not None:
            return self.sample_interval_s
        return min(DEFAULT_SAMPLE_INTERVAL_S, self.window_s)

    def validate(self) -> SoakSettings:
        """Raise InvalidInputError on settings no soak can use; return self."""
        if not self.window_s > 0:
            raise InvalidInputError(f"--window must be more than 0 seconds, got {self.window_s:g}", "e.g. --window 10s")
        if self.duration_s < self.window_s:
            raise InvalidInputError(f"a soak of {self.duration_s:g} s is shorter than one {self.window_s:g} s window",
                                    "raise --duration (e.g. --duration 10m) or shorten --window")
        if not self.interval_s > 0:
            raise InvalidInputError(f"--sample-interval must be more than 0 seconds, got {self.interval_s:g}",
                                    "e.g. --sample-interval 1")
        if self.interval_s > self.window_s:
            raise InvalidInputError(f"--sample-interval {self.interval_s:g} s is longer than one "
                                    f"{self.window_s:g} s window", "sample at least once per window")
        return self


@dataclass(frozen=True)
class SoakOutcome:
    """What :func:`soak` returns: the result (as saved), its verdicts, and the file."""

    result: BenchmarkResult
    analysis: dict[str, Any]
    path: Path | None

    @property
    def ended_early(self) -> bool:
        """Ctrl-C ended the soak before its duration (every finished window is in the result)."""
        return bool((self.analysis.get("duration") or {}).get("ended_early"))


def soak_rule(rule: StopRule, duration_s: float) -> StopRule:
    """The stop rule of a soak from the workload's own: its warm-up, then at least ``duration_s`` timed seconds
    (one iteration is enough), no maximum."""
    return dataclasses.replace(rule, min_iterations=1, min_seconds=duration_s, max_iterations=None, max_seconds=None)


def soak(settings: SoakSettings, output: str | Path | None = None, *, options: MeasureOptions = MeasureOptions(),
         execution: Execution = Execution()) -> SoakOutcome:
    """Soak one cell; see the module docstring.

    Args:
        settings: what to soak and for how long (validated here).
        output: the result file (must not exist; saved when the soak ends); None keeps it in memory.
        options: warm-up, input size, seed, compile mode, cuDNN autotuning and telemetry (as for ``run``); the
            repeats and the stop rule's times are the soak's own. ``timeout_s`` is what the worker may take beyond
            the soak's duration (start-up, compilation, warm-up).
        execution: isolation, clock, progress (which also gets a ``window`` event per finished window), the
            environment to record and the GPU probe. Overlap does not apply: a soak is one worker.

    Raises:
        InvalidInputError: bad settings or names (before any file is written).
        ResultFileError: ``output`` exists or cannot be written.
        RunInterrupted: Ctrl-C before the first window finished (nothing measured to keep).
    """
    settings.validate()
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    device = resolve_device(settings.device)
    execution = dataclasses.replace(execution, overlap=False)
    plan = plan_run(models=[settings.model], workloads=[settings.workload], modes=[settings.mode],
                    batch_sizes=[settings.batch_size] if settings.batch_size is not None else [], device=device,
                    options=dataclasses.replace(options, repeats=1), execution=execution,
                    environment=execution.env, backends=[settings.backend])
    rules = {settings.workload: soak_rule(plan.stop_rule(settings.workload), settings.duration_s)}
    plan = dataclasses.replace(plan, stop_rules=rules, repeats=1, overlap_prepare=False, window_s=settings.window_s,
                               telemetry_interval_s=settings.interval_s,
                               timeout_s=options.timeout_s + settings.duration_s + settings.window_s)
    cell = plan.cells[0]
    facts: dict[str, Any] = {"format": SOAK_FORMAT, "model": cell.model, "workload": cell.workload,
                             "mode": cell.mode, "batch_size": cell.batch_size, "device": cell.device,
                             "input_size": cell.input_size, "duration_s": settings.duration_s,
                             "window_s": settings.window_s, "sample_interval_s": settings.interval_s}
    if cell.backend != DEFAULT_BACKEND:
        facts["backend"] = cell.backend
    environment = run_facts(device, execution.env, probe=execution.probe)
    run = IncrementalRun(plan, path, environment=environment, key="soak", facts=facts, execution=execution)
    run.measure([cell])
    return SoakOutcome(result=run.result, analysis=analyze_soak(run.result), path=path)


# ------------------------------------------------------------------------------------------------ compare

#: Run labels of a comparison, as ``compare`` names them (A is the baseline).
RUN_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _change(row: dict[str, Any]) -> str:
    if row["change"] is None:
        return "-"
    return f"{row['change']:+.1f}%" if row["relative"] else f"{row['change']:+.1f}"


def _figure(value: float | None, name: str) -> str:
    if value is None:
        return "-"
    if name.startswith("throughput"):
        return fmt_rate(value)
    return f"{value:.4g}" if name == "J/image" else f"{value:.1f}"


def _check_comparable(analyses: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """Soaks of different models or workloads are not one configuration measured twice: refused."""
    first = analyses[0]["facts"]
    for analysis, name in zip(analyses[1:], names[1:], strict=True):
        facts = analysis["facts"]
        for key in ("model", "workload"):
            if facts.get(key) != first.get(key):
                raise InvalidInputError(f"{name} soaked {key} {facts.get(key)} and {names[0]} {first.get(key)}: "
                                        "soaks of different models or workloads are not compared",
                                        "compare soaks of one model and workload (show prints each on its own)")


def compare_runs(results: Sequence[BenchmarkResult], names: Sequence[str], alpha: float) -> ProcedureComparison:
    """``compare`` for soak results: each soak's steady state against the first's (Welch's t-test on the steady
    windows' img/s), with drift, throttled share, temperature plateau and energy per image beside it.

    Raises:
        InvalidInputError: fewer than two results, too many, a soak without verdicts (failed), or soaks of
            different models or workloads.
    """
    from clsbench.analysis.compare import same_hardware_warnings

    if len(results) < 2 or len(results) != len(names):
        raise InvalidInputError("compare needs at least two soak results, one name each",
                                "e.g. clsbench compare soak-a.json soak-b.json")
    if len(results) > len(RUN_LABELS):
        raise InvalidInputError(f"compare takes at most {len(RUN_LABELS)} runs, got {len(results)}")
    analyses = [analyze_soak(result, alpha=alpha) for result in results]
    for analysis, name in zip(analyses, names, strict=True):
        if analysis["status"] != "ok":
            raise InvalidInputError(f"{name} holds no finished soak ({analysis['status']}: "
                                    f"{analysis.get('detail') or analysis.get('reason')})", "compare finished soaks")
    _check_comparable(analyses, names)
    labels = RUN_LABELS[:len(results)]
    lines = [f"{label}: {name} ({a['label']} on {a['device']})" for label, name, a in zip(labels, names, analyses,
                                                                                          strict=True)]
    lines += [f"warning: {w}" for w in same_hardware_warnings(results, labels)]
    data: dict[str, Any] = {"procedure": "soak", "alpha": alpha, "runs": dict(zip(labels, names, strict=True)),
                            "comparisons": []}
    rows: list[dict[str, Any]] = []
    slowdowns: list[tuple[str, float]] = []
    for label, name, analysis in zip(labels[1:], names[1:], analyses[1:], strict=True):
        comparison = compare_soaks(analyses[0], analysis, alpha=alpha)
        data["comparisons"].append({"run": label, "against": labels[0], **comparison})
        lines += ["", f"{label} against {labels[0]} (steady states; Welch's t-test at alpha {alpha:g} on the steady "
                      "windows' img/s, a guide: windows of one soak are not independent):"]
        body = [[row["figure"], _figure(row["a"], row["figure"]), _figure(row["b"], row["figure"]), _change(row)]
                for row in comparison["rows"]]
        lines += ["  " + line for line in text_table(["figure", labels[0], label, "change"], body, right=(1, 2, 3))]
        verdict, slower = _verdict(comparison["throughput"], label, labels[0])
        lines.append(f"  {verdict}")
        if slower is not None:
            slowdowns.append((f"{analysis['label']}: {label} ({name}) is {slower:.1f}% slower than {labels[0]} in "
                              "its steady state", slower))
        rows += [{"run": name, "run_label": label, "figure": row["figure"], "baseline": row["a"], "value": row["b"],
                  "change": row["change"], "change_unit": "%" if row["relative"] else "abs"}
                 for row in comparison["rows"]]
    return ProcedureComparison(text="\n".join(lines) + "\n", data=data, rows=rows, slowdowns=slowdowns)


def _verdict(throughput: dict[str, Any], label: str, base: str) -> tuple[str, float | None]:
    """The sentence on the steady throughputs, and the slowdown when B is significantly slower."""
    basis = " / ".join(dict.fromkeys(throughput["basis"]))
    if throughput["ratio"] is None:
        return f"steady throughput: not comparable ({basis})", None
    test = throughput.get("test") or {}
    slowdown = throughput["slowdown_pct"]
    if round(slowdown, 1) == 0:  # "-0.0% faster" said nothing
        direction, than = "as fast", "as"
    else:
        direction, than = (f"{slowdown:.1f}% slower" if slowdown > 0 else f"{-slowdown:.1f}% faster"), "than"
    if test.get("p") is None:
        return f"{label} is {direction} {than} {base} ({basis}); significance not assessed: " \
               f"{test.get('reason') or 'too few windows'}", None
    significant = bool(test.get("significant"))
    words = "significant" if significant else "not significant"
    text = f"{label} is {direction} {than} {base} ({basis}; {format_p(test['p'])}, {words})"
    return text, slowdown if significant and slowdown > 0 else None


#: Where soak's section stands in the HTML report: after tune's and serve's.
SOAK_SECTION_ORDER = 30

PROCEDURES.register("soak", ProcedureView("soak", lambda result: render_soak(analyze_soak(result)),
                                          compare=compare_runs,
                                          html=HtmlSection("soaks", "Soaks", SOAK_SECTION_ORDER, soak_section)))
