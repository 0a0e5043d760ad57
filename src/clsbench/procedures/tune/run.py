"""Running a ``clsbench tune`` search: :func:`tune` (a new one, from :class:`~clsbench.procedures.tune.settings.
TuneSettings`) and :func:`resume_tune` (one a result file holds), into one result file, with what the search records
before it starts (``settings["tune"]``) and what it raises when nothing wins or Ctrl-C stops it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution
from clsbench.engine.incremental import IncrementalRun
from clsbench.engine.planning import plan_run
from clsbench.engine.runner import RunInterrupted
from clsbench.errors import EXIT_INTERRUPTED, ClsbenchError, InvalidInputError, ResultFileError
from clsbench.procedures.sweep import AUTO_MIN_GAIN
from clsbench.procedures.tune.analysis import analyze_tune
from clsbench.procedures.tune.budget import Budget, CostModel, default_budget, parse_budget
from clsbench.procedures.tune.guard import check_candidates
from clsbench.procedures.tune.kinds import cost_priors
from clsbench.procedures.tune.mode_kinds import DOMINANCE_MARGIN, MAX_FREEZE_FAMILIES, MAX_TRAIN_STEP_FAMILIES
from clsbench.procedures.tune.pipeline_kind import PIPELINE_LEADERS, pipeline_settings, pipeline_workers
from clsbench.procedures.tune.search import CONFIRM_TOP, HALVING_ETA, SCREEN_FRACTION, Search
from clsbench.procedures.tune.settings import (
    DEVICE_PRECISIONS,
    MAX_AUTOTUNE_FAMILIES,
    MAX_BACKEND_FAMILIES,
    MAX_COMPILE_FAMILIES,
    OUTPUT_RTOL,
    PRUNE_LOSS_FRACTION,
    TRAIN_CHECK_STEPS,
    TRAIN_LOSS_RTOL,
    TUNE_FORMAT,
    TuneSettings,
    tolerance_for,
)
from clsbench.procedures.tune.text import format_duration, no_winner_message
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult
from clsbench.system.machine import environment, run_facts


class NoConfigurationError(InvalidInputError):
    """No configuration satisfies the limits (or every one that does was rejected); names the closest one.

    ``tune_result`` holds everything measured, saved as usual.
    """

    def __init__(self, message: str, hint: str | None, tune_result: TuneResult) -> None:
        super().__init__(message, hint)
        self.tune_result = tune_result


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` returns: the result (as saved) and its analysis (:func:`analyze_tune`)."""

    result: BenchmarkResult
    analysis: dict[str, Any]
    path: Path | None = None

    @property
    def winner(self) -> dict[str, Any] | None:
        return self.analysis.get("winner")

    @property
    def command(self) -> str | None:
        return self.analysis.get("command")

    @property
    def search_s(self) -> float | None:
        return self.analysis.get("search_s")

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return self.analysis.get("candidates", [])


class TuneInterrupted(ClsbenchError):
    """Ctrl-C during a search: everything finished is saved; ``tune_result`` holds the table so far."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, hint: str | None, tune_result: TuneResult) -> None:
        super().__init__(message, hint)
        self.tune_result = tune_result


def tune(settings: TuneSettings, *, output: str | Path | None = None, execution: Execution = Execution(),
         budget_clock: Callable[[], float] | None = None,
         announce: Callable[[str], None] | None = None, costs_from: str | Path | None = None) -> TuneResult:
    """Search execution modes x batch sizes x backends for the fastest configuration within the limits and the
    time budget that ``settings`` give (the package docstring; the search itself:
    :mod:`clsbench.procedures.tune.search`).

    Args:
        settings: what to search, checked when it was built (:class:`~clsbench.procedures.tune.settings.
            TuneSettings`).
        output: the result file (None: memory only); never overwritten.
        execution: isolation, clock, progress, environment and probe; with ``isolation="inline"`` the correctness
            check also runs in this process. With real data its overlapped preparation is turned off (it would take
            CPU time from the pipeline measured, as in diagnose).
        budget_clock: the clock the budget reads, in seconds (default ``time.monotonic``; a fake in tests).
        announce: called with each line of the up-front plan (what will be tried, what is left out), and with a
            ``warning:`` line for each file the dataset scan skipped.
        costs_from: an earlier tune file of this machine, whose observed costs (a worker's start, each kind's build)
            price the plan instead of the priors (:func:`earlier_costs`).

    Raises:
        InvalidInputError: an unusable dataset (the settings themselves were checked when built), or a
            ``costs_from`` that is no tune file of this machine.
        NoConfigurationError: nothing satisfies the limits (the message names the closest candidate), or every
            candidate that does was rejected by the correctness guard. The measurements are saved first.
        TuneInterrupted: Ctrl-C; what finished is saved, and ``tune --resume FILE`` goes on.
        ResultFileError: ``output`` exists or cannot be written.
    """
    resolved = settings.resolve()
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    run, total = _new_run(resolved, path, execution, announce, costs_from)
    return _search(run, resolved, Budget(total, budget_clock), announce)


def plan_tune(settings: TuneSettings, *, execution: Execution = Execution(),
              announce: Callable[[str], None] | None = None,
              costs_from: str | Path | None = None) -> list[dict[str, Any]]:
    """The plan a new search of ``settings`` would start with (``tune --plan-only``): every stage, how many
    candidates, its estimate from the cost model's priors, and whether the budget holds it; ``announce`` gets the
    plan's lines as :func:`tune` prints them. Nothing is measured and nothing is written; the stages of the kinds
    that propose from what was measured (the longer rung, compile, backends) are priced at the counts the plan
    expects, as a real search prices them before it starts; ``costs_from`` as in :func:`tune`.

    Raises:
        InvalidInputError: an unusable dataset (the settings themselves were checked when built), or a
            ``costs_from`` that is no tune file of this machine.
    """
    resolved = settings.resolve()
    execution = dataclasses.replace(execution, probe=False)  # the GPU's ceilings are for a result, and none is made
    run, total = _new_run(resolved, None, execution, announce, costs_from)
    return Search(run, resolved, Budget(total), _cost_model(resolved.device, run.facts), announce).plan()


def _new_run(resolved: TuneSettings, path: Path | None, execution: Execution,
             announce: Callable[[str], None] | None,
             costs_from: str | Path | None = None) -> tuple[IncrementalRun, float]:
    """The result a new search writes into (``path``; None: memory only), with its facts (the costs an earlier
    search observed, with ``costs_from``), and the budget's total."""
    machine = execution.env if execution.env is not None else environment(resolved.device)
    # Checked before the GPU probe runs: a file of another machine is refused without spending its seconds.
    earlier = earlier_costs(costs_from, machine, resolved.device) if costs_from is not None else None
    facts_here = run_facts(resolved.device, machine, probe=execution.probe)
    total = resolved.budget_s(resolved.device)
    data_facts = _data_facts(resolved, announce) if resolved.wants_data else None
    if data_facts is not None:  # overlapped preparation would take CPU time from the pipeline measured (diagnose)
        execution = dataclasses.replace(execution, overlap=False)
    sizes = list(resolved.batch_sizes or ())
    plan = plan_run(models=[resolved.model], workloads=[resolved.workload], modes=list(resolved.modes or ()),
                    batch_sizes=[sizes[0]], device=resolved.device, options=resolved.options, execution=execution,
                    environment=execution.env)
    facts = initial_facts(resolved)
    facts["budget_s"] = _stored_budget(total)
    if data_facts is not None:
        facts["data"] = data_facts
    if earlier is not None:
        facts["cost_model"], facts["costs_from"] = earlier, str(costs_from)
    run = IncrementalRun(plan, path, environment=facts_here, key="tune", facts=facts, execution=execution)
    return run, total


def _machine(env: dict[str, Any], device: str | None = None) -> tuple[str, str]:
    """What a search's costs depend on: the device type (``device``, else the environment's) and the GPU's name (on
    a CPU, the CPU's model); narrower than resuming's ``KEY_FIELDS``, since a new torch still starts and builds at
    about the old costs."""
    from clsbench.results.facts import get_field

    device = str(device or env.get("device") or "cpu").split(":", 1)[0]
    return device, str(get_field(env, "gpu.name" if device == "cuda" else "cpu.model") or "unknown")


def earlier_costs(path: str | Path, env: dict[str, Any], device: str) -> dict[str, Any]:
    """The cost model a tune file observed (``settings.tune.cost_model``), for a new search on ``device`` of the
    machine ``env`` describes.

    Raises:
        InvalidInputError: the file is unreadable, no tune result, holds no observed costs, or was measured on
            another device or card (its costs would misprice this machine's plan).
    """
    try:
        earlier = result_io.load(path)
    except ResultFileError as exc:
        raise InvalidInputError(f"--costs-from: {exc.message}", "name a tune result file (tune -o FILE)") from None
    costs = (earlier.settings.get("tune") or {}).get("cost_model")
    if not isinstance(costs, dict) or not (costs.get("observed_overhead_s") or {}):
        raise InvalidInputError(f"--costs-from {path}: no costs observed in it (not a tune result, or one that "
                                "measured nothing)", "name a tune result file of this machine (tune -o FILE)")
    there, here = _machine(earlier.environment), _machine(env, device)
    if there != here:
        raise InvalidInputError(f"--costs-from {path} was measured on {there[0]} ({there[1]}), this search runs on "
                                f"{here[0]} ({here[1]}): its costs would misprice the plan",
                                "name a tune file of this machine, or drop --costs-from for the priors")
    return costs


def _cost_model(device: str, facts: dict[str, Any]) -> CostModel:
    """The cost model of a search on ``device``: the kinds' priors, then what ``facts`` observed before."""
    cost = CostModel(device, cost_priors("cuda" if device.startswith("cuda") else "cpu"))
    cost.restore(facts.get("cost_model"))
    return cost


def resume_tune(path: str | Path, *, budget: float | str | None = None, execution: Execution = Execution(),
                budget_clock: Callable[[], float] | None = None, announce: Callable[[str], None] | None = None,
                force: bool = False) -> TuneResult:
    """Continue an interrupted (or budget-limited) search from its result file.

    Candidates measured before are not measured again; the budget counts what the file says was spent already
    (``budget``: the new total, default the stored one). Everything else comes from the file: the search's settings
    (``settings["tune"]``) and the measuring plan.

    Raises:
        ResultFileError: not a tune file this version continues, or started in another environment (``force``).
        InvalidInputError: a bad budget.
    """
    from clsbench.engine.runner import check_resume_compatible

    source = Path(path)
    result = result_io.load(source)
    facts = result.settings.get("tune")
    if not isinstance(facts, dict) or (facts.get("format") or 1) < TUNE_FORMAT:
        raise ResultFileError(f"{source} is not a tune search this clsbench can continue",
                              "start a new search: clsbench tune --model ... -o NEW.json")
    device = str(facts.get("device") or "cpu")
    current = execution.env if execution.env is not None else environment(device)
    if not force:
        check_resume_compatible(result, current, str(source))
        if facts.get("data"):
            from clsbench.data.plan import check_data_unchanged

            check_data_unchanged([DataSettings.from_dict(s) for s in facts["data"].get("settings") or []],
                                 str(source))
    stored = facts.get("budget_s")
    total = parse_budget(budget) or (float(stored) if stored else math.inf if facts.get("exhaustive")
                                     else default_budget(device))
    run = IncrementalRun.reopen(result, source, key="tune", execution=execution)
    _settle_pending(run)
    spent = float(run.facts.get("spent_s") or 0.0)
    run.facts["budget_s"] = _stored_budget(total)
    run.facts.setdefault("resumed", []).append({"spent_s": spent, "budget_s": _stored_budget(total)})
    settings = TuneSettings.from_facts(run.facts)
    return _search(run, settings, Budget(total, budget_clock, spent_before_s=spent), announce)


def _stored_budget(total_s: float) -> float | None:
    """``settings["tune"]["budget_s"]``: the budget in seconds, or None for none (an exhaustive search)."""
    return total_s if math.isfinite(total_s) else None


def _settle_pending(run: IncrementalRun) -> None:
    """A confirmation Ctrl-C stopped left its repeats pending: make them the candidate's measurement again (under
    the full rule they ran under), so that the candidate ranks whether or not the resumed search confirms it."""
    from clsbench.analysis.summary import build_measurement

    for pending in run.result.pending:
        cell = next((c for c in run.cells if c.key == tuple(pending.key)), None)
        if cell is not None and pending.repeats:
            m = build_measurement(cell, list(pending.repeats), run.plan.stop_rule(cell.workload),
                                  environment=run.result.environment)
            run.result = run.result.with_measurement(m)


def _search(run: IncrementalRun, settings: TuneSettings, budget: Budget,
            announce: Callable[[str], None] | None) -> TuneResult:
    """Run (or go on with) the search of ``run`` under the resolved ``settings``, check outputs, confirm, and
    analyse."""
    facts = run.facts
    search = Search(run, settings, budget, _cost_model(settings.device, facts), announce)
    path = run.path
    try:
        search.search(check_candidates if settings.check_outputs else None)
    except (RunInterrupted, KeyboardInterrupt):
        search.save()
        outcome = TuneResult(result=run.result, analysis=analyze_tune(run.result), path=path)
        where = f"; continue it with: clsbench tune --resume {shlex.quote(str(path))}" if path is not None else ""
        raise TuneInterrupted(f"tune interrupted after {format_duration(search.budget.spent_s())}: "
                              f"{len(run.result.measurements)} candidate(s) saved{where}", None, outcome) from None
    facts["search_s"] = search.budget.spent_s()
    search.save()
    analysis = analyze_tune(run.result)
    outcome = TuneResult(result=run.result, analysis=analysis, path=path)
    if analysis["winner"] is None:
        message, hint = no_winner_message(analysis)
        if path is not None and facts.get("left_out"):
            hint = f"{hint}; or continue with a larger budget: clsbench tune --resume {shlex.quote(str(path))} " \
                   "--budget 20m"
        raise NoConfigurationError(message, hint, outcome)
    return outcome


def _data_facts(settings: TuneSettings, announce: Callable[[str], None] | None) -> dict[str, Any]:
    """``settings["tune"]["data"]`` of a ``--data`` search (resolved ``settings``, whose data options were checked
    when they were built): the scanned dataset and the real-data settings the pipeline kind measures (stored, so that
    a resumed search measures the same). An unusable dataset raises here, before anything is written."""
    import os

    from clsbench.data.base import ordered_pipelines
    from clsbench.data.plan import check_settings, prepare_data_settings
    from clsbench.procedures.diagnose import INPUT_BOUND_RATIO, parse_pipelines

    data = settings.data
    if data is None:  # checked when the settings were built; kept for the type
        raise InvalidInputError("the pipeline options of tune need --data DIR", "e.g. --data ./images --pipeline cpu")
    chosen = parse_pipelines(settings.pipelines) if settings.pipelines is not None else \
        [p.name for p in ordered_pipelines()]
    count = pipeline_workers(os.cpu_count()) if settings.workers is None else settings.workers
    base, index = prepare_data_settings(data, list(settings.batch_sizes or ()))  # the dataset is scanned here, once
    for line in index.warnings():
        if announce is not None:
            announce(f"warning: {line}")
    stored = [check_settings(s) for s in pipeline_settings(base, settings.device, count, chosen)]
    return {"directory": base.directory, "source": base.source, "dataset": index.facts(limit=20),
            "pipelines": chosen, "workers": count, "settings": [s.to_dict() for s in stored],
            "rules": {"input_bound_ratio": INPUT_BOUND_RATIO, "pipeline_leaders": PIPELINE_LEADERS}}


def initial_facts(settings: TuneSettings) -> dict[str, Any]:
    """What ``settings["tune"]`` records before the search starts (the search appends its phases and decisions), from
    the resolved ``settings``."""
    workload, modes, tolerances = settings.workload, list(settings.modes or ()), settings.tolerances
    facts = {
        "format": TUNE_FORMAT,
        "model": settings.model,
        "workload": workload,
        "device": settings.device,
        "input_size": settings.options.input_size,
        "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "objective": "lowest p50 request latency" if workload == "infer-latency" else "highest img/s",
        "limits": settings.limits,
        "modes": modes,
        "batch_sizes": list(settings.batch_sizes or ()),
        "batch_sizes_explicit": settings.explicit,
        "rules": {"prune_loss_fraction": PRUNE_LOSS_FRACTION, "min_gain": AUTO_MIN_GAIN,
                  "max_compile_families": MAX_COMPILE_FAMILIES, "max_autotune_families": MAX_AUTOTUNE_FAMILIES,
                  "compile_variants": settings.compile_variants, "variants": [v.lstrip("+") for v in settings.suffixes],
                  "max_autotune": settings.max_autotune,
                  "output_rtol": {p: tolerance_for(p, tolerances) for p in OUTPUT_RTOL
                                  # a device precision only where the search tries it: other files read as before
                                  if p not in DEVICE_PRECISIONS or any(m.split("+")[0] == p for m in modes)},
                  "train_loss_rtol": TRAIN_LOSS_RTOL, "train_check_steps": TRAIN_CHECK_STEPS,
                  "halving_eta": HALVING_ETA, "confirm_top": CONFIRM_TOP, "screen_fraction": SCREEN_FRACTION,
                  "dominance_margin": DOMINANCE_MARGIN},
        "correctness_guard": settings.check_outputs,
        "phases": [],
        "pruned": [],
        "correctness": [],
        "search_s": None,
    }
    if settings.compile_variants:  # the freeze and train-step kinds' limits, written only when those kinds may run
        facts["rules"]["max_freeze_families"] = MAX_FREEZE_FAMILIES
        facts["rules"]["max_train_step_families"] = MAX_TRAIN_STEP_FAMILIES
    if settings.backends:  # written only when there is a backend phase, so other searches read as before
        facts["rules"]["backends"] = list(settings.backends)
        facts["rules"]["max_backend_families"] = MAX_BACKEND_FAMILIES
    if settings.exhaustive:  # written only for an exhaustive search, so other searches read as before
        facts["exhaustive"] = True
    return facts


__all__ = ["NoConfigurationError", "TuneInterrupted", "TuneResult", "earlier_costs", "initial_facts", "plan_tune",
           "resume_tune", "tune"]
