"""The screen-then-confirm search of ``clsbench tune`` within its time budget (successive halving).

Rungs (:data:`RUNGS`), each measuring ordinary cells into the tune's one result file:

1. ``screen``: the candidates of the kinds that enter here (eager) under a short stop rule (:func:`screen_rule`:
   a quarter of the timed minima, the same warm-up), one repeat each;
2. ``longer``: the best third (:data:`HALVING_ETA`) of the screened candidates within the limits, and the candidates
   of the kinds whose build dominates their cost (compile, max-autotune, backends), under the full stop rule, one
   repeat each;
3. ``confirm``: after the correctness guard, the best :data:`CONFIRM_TOP` candidates that passed it get the full
   protocol: their longer-rung repeat is continued to ``--repeats`` repeats (3 by default), each in a fresh worker.

A candidate's stored measurement is the one of the highest rung it reached; a measurement a later rung replaced is
kept whole under ``settings["tune"]["earlier"]``. Every candidate the search starts, or leaves out for the budget, is
logged under ``settings["tune"]["trials"]`` and ``["left_out"]`` with its estimated and, once done, actual cost.

**Budget**: before the search starts, :meth:`Search.plan` prices every stage with the cost model and keeps stages in
priority order (:data:`clsbench.procedures.tune.kinds.PRIORITY`) while they fit; the rest are left out up front, and
said so. While it runs, no candidate starts unless its estimate fits in the budget left less what the planned stages
after it are estimated to need (so that the output check and the confirmation keep their share). A candidate that is
not started is logged as left out, with its estimate and the seconds that were left.

**Exhaustive** (``tune --exhaustive``, :attr:`Search.exhaustive`, stored as ``settings["tune"]["exhaustive"]``): the
same kinds and candidate space with nothing cut for speed. The screen rung is skipped: every candidate of a screen
kind is measured at the longer rung at once (a screen exists to choose what to promote; when everything is
promoted it only adds a short window and a process start per candidate, and the ranking would come from the longer
rung anyway), so there is no halving; the eager kind prunes nothing by plateau or dominance; every kind that limits
its families tries every family (:meth:`Search.family_limit`, no pruning margin); and there is no budget unless one
is given. Limits, the correctness guard and the confirmation of the best :data:`CONFIRM_TOP` apply as usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from typing import Any

from clsbench.core.plan import Cell
from clsbench.core.vocab import Status
from clsbench.engine.incremental import IncrementalRun
from clsbench.procedures.tune.budget import SCREEN_FRACTION, Budget, CostModel, Window, format_seconds, screen_rule
from clsbench.procedures.tune.figures import candidate_figures, limit_violations, parity_verdict
from clsbench.procedures.tune.kinds import PRIORITY, CandidateKind, Stage, build_key, cost_key, kinds
from clsbench.procedures.tune.settings import PRUNE_LOSS_FRACTION, TuneSettings, variant_of
from clsbench.results.schema import DEFAULT_BACKEND, Measurement, data_label

#: The rungs, lowest first.
RUNGS = ("screen", "longer", "confirm")
#: Successive halving's reduction factor: the longer rung takes the best 1/ETA of the screened candidates.
HALVING_ETA = 3
#: How many candidates get the full protocol (``--repeats`` fresh repeats), and pass the guard first.
CONFIRM_TOP = 2


def rung_level(rung: str | None) -> int:
    """0 for screen, 1 for longer, 2 for confirm; -1 for no rung (a file written before rungs existed)."""
    return RUNGS.index(rung) if rung in RUNGS else -1


def trial_key(entry: Mapping[str, Any]) -> tuple[str, int, str, str | None, str]:
    """(mode, batch, backend, data label or None, rung) of a trial (or a left-out entry)."""
    return (*trial_cell(entry), entry["rung"])


def trial_cell(entry: Mapping[str, Any]) -> tuple[str, int, str, str | None]:
    """(mode, batch, backend, data label or None): which candidate a trial measured."""
    return (entry["mode"], int(entry["batch_size"]), entry.get("backend") or DEFAULT_BACKEND, entry.get("data"))


def cell_id(cell: Cell | Measurement) -> tuple[str, int, str, str | None]:
    """(mode, batch, backend, data label or None): a candidate as :func:`trial_cell` names it (a real-data cell of
    ``tune --data`` and the synthetic cell of the same mode and batch are two candidates)."""
    data = cell.data
    label = None if data is None else data.label() if hasattr(data, "label") else data_label(data)
    return (cell.mode, cell.batch_size, cell.backend, label)


def candidate_name(cell: Cell | Measurement) -> str:
    """``mode[ @backend] bsN[ [data label]]``: a candidate in the phases and the pruned lists."""
    _, _, backend, label = cell_id(cell)
    return (cell.mode + ("" if backend == DEFAULT_BACKEND else f" @{backend}") + f" bs{cell.batch_size}"
            + ("" if label is None else f" [{label}]"))


class Search:
    """One tune's search: its settings, the budget and cost model, the rungs and the log in ``settings["tune"]``.

    A resumed search (``tune --resume``) runs the same code on the loaded file: a candidate already measured at a
    rung is taken from the file instead of being measured again (:meth:`measure`), so the search's decisions, which
    depend only on the measurements, come out the same up to where it stopped, and it goes on from there.
    """

    def __init__(self, run: IncrementalRun, settings: TuneSettings, budget: Budget, cost: CostModel,
                 announce: Callable[[str], None] | None = None) -> None:
        """A search of ``run`` (a new file, or one a resumed search reopened) under ``settings``, resolved
        (:meth:`TuneSettings.resolve`, or :meth:`TuneSettings.from_facts` of the file); its attributes are the
        settings the kinds read."""
        self.run = run
        self.facts = run.facts
        self.settings = settings
        self.model, self.workload, self.device = settings.model, settings.workload, settings.device
        self.input_size = settings.options.input_size
        self.limits = settings.limits
        self.base_modes = list(settings.modes or ())
        self.sizes, self.explicit = list(settings.batch_sizes or ()), settings.explicit
        self.suffixes = settings.suffixes
        self.compile_variants, self.max_autotune = settings.compile_variants, settings.max_autotune
        self.backends = tuple(settings.backends or ())
        self.repeats = run.plan.repeats
        self.exhaustive = settings.exhaustive
        self.budget, self.cost = budget, cost
        self.announce = announce or (lambda line: None)
        self.family_of: dict[str, str] = {}
        self.full = run.plan.stop_rule(self.workload)
        self.rules = {"screen": screen_rule(self.full), "longer": self.full, "confirm": self.full}
        self.stages: list[dict[str, Any]] = []
        self.done_stages: set[str] = set()
        #: The planned stages the budget has run short for, said once each as it happens.
        self.short_stages: set[str] = set()
        for key in ("trials", "left_out", "earlier", "pruned", "phases"):
            self.facts.setdefault(key, [])
        for trial in self.facts["trials"]:
            if trial.get("actual_s") is None:
                trial["status"] = "interrupted"  # started before a Ctrl-C; a resumed search starts it anew
        self.facts["left_out"] = []  # what is left out is decided anew by every part of the search
        self.facts["pruned"] = []
        self.facts["phases"] = []

    # ------------------------------------------------------------------------------------------------ helpers

    def cell(self, mode: str, batch: int, backend: str = DEFAULT_BACKEND) -> Cell:
        return Cell(self.model, self.workload, mode, batch, self.device, self.input_size, backend=backend)

    def measurement(self, cell: Cell) -> Measurement | None:
        return self.run.result.find(cell.key)

    def figures(self, m: Measurement) -> dict[str, Any]:
        return candidate_figures(m, self.workload)

    def score(self, m: Measurement | None) -> float | None:
        return self.figures(m)["score"] if m is not None else None

    def rung_of(self, kind: CandidateKind) -> str:
        """The rung a kind's candidates enter: the kind's own, except that an exhaustive search screens nothing
        (every candidate is measured at the longer rung at once)."""
        return "longer" if self.exhaustive else kind.rung

    def family_limit(self, limit: int) -> int | None:
        """How many families a kind that limits them tries: ``limit``, or None (every family) when exhaustive."""
        return None if self.exhaustive else limit

    def family_count(self, limit: int) -> int:
        """The families the plan expects such a kind to try: ``limit``, or every eager family when exhaustive."""
        return len(self.base_modes) if self.exhaustive else limit

    def prune(self, stage: str, mode: str, variants: Sequence[str], reason: str) -> None:
        self.facts["pruned"].append({"stage": stage, "mode": mode, "variants": list(variants), "reason": reason})

    def family_point(self, family: str, extra: Sequence[Measurement] = ()) -> Measurement | None:
        """The eager family's best point within the limits; else its smallest ok batch (most likely to fit)."""
        points = [m for m in self.run.result.measurements if m.mode == family and m.backend == DEFAULT_BACKEND
                  and m.data is None]
        ok = [m for m in [*points, *extra] if m.status == Status.OK]
        within = [m for m in ok if not limit_violations(self.figures(m), self.limits)]
        if within:
            return max(within, key=lambda m: self.figures(m)["score"] or 0.0)
        return min(ok, key=lambda m: m.batch_size) if ok else None

    def family_scores(self, *, compiled: bool = False) -> dict[str, float]:
        """Each eager family's best score (with ``compiled``: counting its compiled variants' results too)."""
        out = {}
        for family in self.base_modes:
            extra = [m for m in self.run.result.measurements if compiled and self.family_of.get(m.mode) == family
                     and m.data is None]
            score = self.score(self.family_point(family, extra))
            if score is not None:
                out[family] = score
        return out

    def rank_families(self, stage: str, suffixes: Sequence[str], keep: int, scored: Mapping[str, float],
                      best: float) -> list[str]:
        """The families worth compiling: within the pruning margin of ``best``, at most ``keep``, best first (when
        exhaustive: every family, best first)."""
        chosen: list[str] = []
        limit = self.family_limit(keep)
        for family in sorted(scored, key=lambda fam: -scored[fam]):
            variants = [v for v in (variant_of(family, s) for s in suffixes) if v]
            if not variants:
                continue
            if limit is None:
                chosen.append(family)
            elif scored[family] < (1.0 - PRUNE_LOSS_FRACTION) * best:
                self.prune(stage, family, variants, f"its best result is {100 * scored[family] / best:.0f}% of the "
                                                    f"best so far, below the {100 * (1 - PRUNE_LOSS_FRACTION):.0f}% "
                                                    "needed")
            elif len(chosen) >= limit:
                self.prune(stage, family, variants, f"not among the {limit} best modes")
            else:
                chosen.append(family)
        return chosen

    def window(self, rung: str) -> Window:
        return Window.of(self.rules[rung])

    def iteration_s(self, cell: Cell) -> float | None:
        """Seconds per timed iteration, from what was measured of this cell or of its mode (None: unknown)."""
        m = self.measurement(cell)
        if m is None or m.status != Status.OK:
            same = [x for x in self.run.result.measurements if x.mode == cell.mode and x.status == Status.OK
                    and cell_id(x)[3] == cell_id(cell)[3]]
            same = same or [x for x in self.run.result.measurements if x.mode == cell.mode and x.status == Status.OK]
            m = same[0] if same else None
        if m is None:
            return None
        f = self.figures(m)
        if f.get("throughput_img_s"):
            return cell.batch_size / f["throughput_img_s"]
        p50 = f.get("latency_p50_ms")
        return p50 / 1000.0 if p50 else None

    # ---------------------------------------------------------------------------------------------- the plan

    def plan(self) -> list[dict[str, Any]]:
        """Price every stage and keep them, in priority order, while they fit in the budget (the first screening
        round always); store and announce the plan. Returns the stages in the order they run."""
        from clsbench.procedures.tune.mode_kinds import drop_refused_modes

        drop_refused_modes(self)  # the precisions this device cannot run: pruned with their reasons, never planned
        stages = []
        self.facts["kinds"] = [kind.name for kind in kinds(self)]  # the kinds this search tries, in their order
        for kind in kinds(self):
            for stage in (Stage(*entry) for entry in kind.stages(self)):
                stages.append({"stage": stage.name, "kind": kind.name, "rung": self.rung_of(kind),
                               "candidates": stage.count, "priority": stage.priority,
                               **({"costs": [[key, warm] for key, warm in stage.costs]} if stage.costs else {})})
            if self.rung_of(kind) == "screen":
                stages.append({"stage": "longer", "kind": "eager", "rung": "longer", "priority": PRIORITY["longer"],
                               "candidates": self._longer_count(sum(s["candidates"] for s in stages
                                                                    if s["rung"] == "screen"))})
        stages.append({"stage": "check", "kind": "check", "rung": None, "priority": PRIORITY["check"],
                       "candidates": CONFIRM_TOP})
        if self.repeats > 1:
            stages.append({"stage": "confirm", "kind": "confirm", "rung": "confirm", "priority": PRIORITY["confirm"],
                           "candidates": CONFIRM_TOP})
        self.stages = stages
        for stage in stages:
            stage["planned"] = False
        left = self.budget.left_s()
        for stage in sorted(stages, key=lambda s: s["priority"]):
            # Priced with the stages of higher priority planned: the confirmation, early in that order, is priced
            # for the leaders of the kinds planned so far, and a stage of a costlier kind pays for what it adds to
            # the confirmation's price (its leaders' repeats rebuild warm), so that what is planned fits. While the
            # search runs the confirmation is priced for the real leaders (stage_estimate).
            stage["estimate_s"] = self._stage_total(stage)
            extra = self._confirm_increase(stage)
            fits = stage["estimate_s"] + extra <= left
            stage["planned"] = fits or stage["stage"] == stages[0]["stage"]
            if not stage["planned"]:
                self._plan_part(stage, left - extra)
            if stage["planned"]:
                left -= stage["estimate_s"] + extra
                self._raise_confirm(extra)
            else:
                stage["reason"] = f"needs about {format_seconds(stage['estimate_s'] + extra)}" + \
                    (f" ({format_seconds(extra)} of it for the confirmation)" if extra > 0 else "") + \
                    f", {format_seconds(max(0.0, left))} of the budget left for it"
        self.stages = stages
        self.facts["plan"] = [dict(s) for s in stages]
        self.run.save()
        self._announce_plan()
        return stages

    def _confirm_increase(self, stage: dict[str, Any]) -> float:
        """Seconds planning ``stage`` would add to the price of a confirmation planned before it."""
        confirm = next((s for s in self.stages if s["kind"] == "confirm" and s.get("planned")), None)
        if confirm is None or stage["kind"] in ("check", "confirm"):
            return 0.0
        stage["planned"] = True  # for the moment of pricing the confirmation with it
        try:
            return max(0.0, self._stage_total(confirm) - float(confirm["estimate_s"]))
        finally:
            stage["planned"] = False

    def _raise_confirm(self, extra: float) -> None:
        if extra > 0:
            confirm = next(s for s in self.stages if s["kind"] == "confirm")
            confirm["estimate_s"] = float(confirm["estimate_s"]) + extra

    def _plan_part(self, stage: dict[str, Any], left: float) -> None:
        """A stage of candidates that does not fit whole is planned for as many of them as fit (at least one): its
        kind proposes them most promising first, and each is still started only while it fits. The stage keeps its
        full count under ``of``."""
        if stage["kind"] in ("check", "confirm") or int(stage["candidates"]) < 2:
            return
        each = self._candidate_estimates(stage)
        part, total = 0, 0.0
        while part < len(each) and total + each[part] <= left:
            total, part = total + each[part], part + 1
        if part < 1:
            return
        stage.update(planned=True, of=int(stage["candidates"]), candidates=part, estimate_s=total)

    def _candidate_estimates(self, stage: Mapping[str, Any]) -> list[float]:
        """Seconds each expected candidate of a stage of candidates costs, in the order its kind proposes them: from
        the stage's ``costs`` where its kind priced them one by one, else all at the kind's own cost."""
        window = self.window(stage["rung"])
        costs = stage.get("costs")
        if costs:
            return [self.cost.estimate_s(key, window, 1, warm=bool(warm)) for key, warm in costs]
        return [self.stage_estimate(stage, self.stages)] * int(stage["candidates"])

    def _longer_count(self, screened: int) -> int:
        return min(screened, max(CONFIRM_TOP, math.ceil(screened / HALVING_ETA)))

    def stage_estimate(self, stage: Mapping[str, Any], stages: Sequence[Mapping[str, Any]]) -> float:
        """Seconds a stage is expected to cost with the cost model as it stands."""
        if stage["kind"] == "check":
            return self.cost.check_s()
        if stage["kind"] == "confirm":
            return self.confirm_estimate(stages)
        return self.cost.estimate_s(stage["kind"], self.window(stage["rung"]), 1)

    def confirm_estimate(self, stages: Sequence[Mapping[str, Any]]) -> float:
        """Seconds the confirmation needs: for the current leaders, once there are any (each continues its longer
        repeat, or starts anew from a screened one; a built kind's build is warm by then); before, for
        :data:`CONFIRM_TOP` leaders of the costliest kind planned so far."""
        window = self.window("confirm")
        leaders = [m for m in self.ranked() if (self.passed(m) or not self.checked(m)) and self.eligible(m)]
        leaders = leaders[:CONFIRM_TOP]
        if leaders:
            total = 0.0
            for m in leaders:
                cell = Cell.of(m)
                kind = self.kind_of(m)
                todo = self.repeats - (len(m.repeats) if self.latest_rung(cell) == "longer" else 0)
                total += self.cost.estimate_s(cost_key(kind, cell), window, max(0, todo), self.iteration_s(cell),
                                              warm=kind != "eager")
            return total
        planned = {s["kind"] for s in stages if s["rung"] in ("screen", "longer") and s.get("planned")} or {"eager"}
        per = max(self.cost.overhead_s(k, warm=k != "eager") for k in planned)
        return CONFIRM_TOP * (self.repeats - 1) * (per + window.seconds(None))

    def kind_of(self, m: Measurement) -> str:
        """The kind whose round proposed ``m`` (from the trials)."""
        return next((t["kind"] for t in self.facts["trials"] if trial_cell(t) == cell_id(m)), "eager")

    def checked(self, m: Measurement) -> bool:
        """Whether the correctness guard has judged ``m`` yet (fp32 eager and backends judge themselves)."""
        if m.backend != DEFAULT_BACKEND or m.mode == "fp32" or not self.facts.get("correctness_guard", True):
            return True
        return any((c["mode"], c["batch_size"]) == (m.mode, m.batch_size) and not c.get("backend")
                   for c in self.facts.get("correctness") or [])

    def reserve_s(self, stage_name: str) -> float:
        """What the planned stages after ``stage_name`` that the plan ranks above it are estimated to need (with the
        cost model as it stands): a stage's candidates leave them their share, not the share of stages ranked
        below it."""
        names = [s["stage"] for s in self.stages]
        position = names.index(stage_name) if stage_name in names else -1
        priority = self.stages[position]["priority"] if position >= 0 else PRIORITY["screen-first"]
        later = [s for s in self.stages[position + 1:] if s.get("planned") and s["stage"] not in self.done_stages
                 and s["priority"] <= priority]
        return sum(self._stage_total(s) for s in later)

    def _stage_total(self, stage: Mapping[str, Any]) -> float:
        if stage["kind"] in ("check", "confirm"):
            return self.stage_estimate(stage, self.stages)
        return sum(self._candidate_estimates(stage)[:int(stage["candidates"])])

    def planned(self, stage_name: str) -> bool:
        return any(s["stage"] == stage_name and s.get("planned") for s in self.stages)

    def _announce_plan(self) -> None:
        total = sum(self._stage_total(s) for s in self.stages if s.get("planned"))
        budget = f"budget {format_seconds(self.budget.total_s)}, {format_seconds(self.budget.left_s())} left" \
            if math.isfinite(self.budget.total_s) else "no budget"
        what = "exhaustive tune plan" if self.exhaustive else "tune plan"
        self.announce(f"{what}: {budget}; the planned stages need about {format_seconds(total)}")
        for s in self.stages:
            if not s["candidates"]:
                continue  # a stage expected to propose nothing (the eager sizes below the reference)
            count = f"{s['candidates']} of {s['of']}" if s.get("of") else f"up to {s['candidates']}"
            what = f"{s['stage']}: {count} candidate(s), about {format_seconds(self._stage_total(s))}"
            self.announce(f"  try {what}" if s.get("planned") else f"  leave out {what} ({s['reason']})")

    # -------------------------------------------------------------------------------------------- measuring

    def find_trial(self, cell: Cell, rung: str) -> dict[str, Any] | None:
        key = (*cell_id(cell), rung)
        return next((t for t in reversed(self.facts["trials"]) if trial_key(t) == key), None)

    def at_rung(self, cell: Cell, rung: str) -> Measurement | None:
        """The stored measurement of ``cell`` at ``rung``: in the file when that is its latest rung, else in
        ``earlier``."""
        latest = self.latest_rung(cell)
        if latest == rung:
            return self.measurement(cell)
        for entry in self.facts["earlier"]:
            if entry["rung"] == rung and tuple(entry["key"]) == tuple(cell.key):
                return Measurement.from_dict(entry["measurement"])
        return None

    def latest_rung(self, cell: Cell) -> str | None:
        done = [t["rung"] for t in self.facts["trials"] if trial_cell(t) == cell_id(cell)
                and t.get("actual_s") is not None]
        return max(done, key=rung_level) if done else None

    def measure(self, cells: Sequence[Cell], kind: str, rung: str, stage: str) -> list[Measurement]:
        """Measure each cell at ``rung`` unless the budget says no; cells measured at that rung before are taken
        from the file. Returns the measurements there are."""
        out = []
        for index, cell in enumerate(cells):
            m = self.measure_one(cell, kind, rung, stage, position=(index, len(cells)))
            if m is not None:
                out.append(m)
        return out

    @contextlib.contextmanager
    def counted(self, position: tuple[int, int] | None) -> Iterator[None]:
        """While one candidate is measured: progress events count candidates of its stage (``[n/N]``: the n-th of
        the stage's N) instead of the repeats of the one-cell plan the runner is given (always 1 of 1)."""
        execution = self.run.execution
        if position is None or execution.progress is None:
            yield
            return
        index, count = position
        progress = execution.progress

        def recount(event: Any) -> None:
            done = index + (1 if event.kind in ("measurement", "finish") else 0)
            progress(dataclasses.replace(event, done=done, total=count))

        self.run.execution = dataclasses.replace(execution, progress=recount)
        try:
            yield
        finally:
            self.run.execution = execution

    def measure_one(self, cell: Cell, kind: str, rung: str, stage: str,
                    position: tuple[int, int] | None = None) -> Measurement | None:
        trial = self.find_trial(cell, rung)
        if trial is not None and trial.get("actual_s") is not None:
            return self.at_rung(cell, rung)  # measured before this search was interrupted
        repeats = self.repeats if rung == "confirm" else 1
        pending = len(self.run.result.pending_repeats(cell.key)) if rung == "confirm" else 0
        current = self.measurement(cell)
        if rung == "confirm" and current is not None and self.latest_rung(cell) == "longer":
            pending = len(current.repeats)
        todo = max(1, repeats - pending)
        warm = kind != "eager" and (current is not None or pending > 0 or self.built(kind, cell))
        key = cost_key(kind, cell)
        iteration = self.iteration_s(cell)
        estimate = self.cost.estimate_s(key, self.window(rung), todo, iteration, warm=warm)
        reserve = self.reserve_s(stage)
        if not self.budget.fits(estimate, reserve):
            self.leave_out(cell, kind, rung, stage, estimate, reserve)
            return None
        self._make_room(cell, rung, current)
        entry = {"mode": cell.mode, "batch_size": cell.batch_size, "kind": kind, "rung": rung, "stage": stage,
                 "repeats": repeats, "estimate_s": estimate, "start_s": self.budget.spent_s(), "actual_s": None}
        if cell.backend != DEFAULT_BACKEND:
            entry["backend"] = cell.backend
        if cell.data is not None:
            entry["data"] = cell.data.label()
        self.facts["trials"].append(entry)
        self.run.save()
        before = self.budget.clock()
        rules = {self.workload: self.rules[rung]}
        with self.counted(position):
            measured = self.run.measure([cell], repeats=repeats, stop_rules=rules)
        actual = self.budget.clock() - before
        m = measured[0] if measured else None
        entry.update({"actual_s": actual, "end_s": self.budget.spent_s(),
                      "status": m.status if m is not None else Status.FAILED,
                      "score": self.score(m) if m is not None else None})
        if m is not None and m.status != Status.SKIPPED:  # a skip starts no worker: nothing learnt of the cost
            self.cost.observe(key, actual, self.window(rung), todo, self.iteration_s(cell), warm=warm)
            built = m.summary.get("backend") or {}
            if not warm and built.get("built_now") and isinstance(built.get("build_process_s"), (int, float)):
                self.cost.observe_build(key, float(built["build_process_s"]))
        self.save()
        return m

    def built(self, kind: str, cell: Cell) -> bool:
        """Whether another candidate of this search made ``cell``'s build already and it is still at hand: one of the
        same kind and build key (:func:`clsbench.procedures.tune.kinds.build_key`) that ran ok."""
        key = self._shared_build(kind, cell)
        return key is not None and any(
            t.get("kind") == kind and t.get("actual_s") is not None and t.get("status") == Status.OK
            and build_key(kind, self.cell(*trial_cell(t)[:3])) == key for t in self.facts["trials"])

    def _shared_build(self, kind: str, cell: Cell) -> Hashable | None:
        """``cell``'s build key, or None where no other candidate can hand it a build (the kind gives each its own,
        or ``--no-cache`` builds every artifact anew)."""
        return None if self.run.plan.no_cache else build_key(kind, cell)

    def _expected_warm(self, kind: str, cells: Sequence[Cell]) -> list[bool]:
        """For cells about to be measured in this order: whether each will find its build made (by a candidate
        measured before, or by an earlier one of ``cells``, assumed to succeed)."""
        seen: set[Hashable] = set()
        out = []
        for cell in cells:
            key = self._shared_build(kind, cell)
            out.append(key is not None and (key in seen or self.built(kind, cell)))
            if key is not None:
                seen.add(key)
        return out

    def _make_room(self, cell: Cell, rung: str, current: Measurement | None) -> None:
        """Before measuring ``cell`` at ``rung``: a measurement of a lower rung moves to ``earlier`` (kept whole),
        except a longer-rung one about to be confirmed, whose repeat becomes the first of the confirmation."""
        if current is None:
            return
        latest = self.latest_rung(cell)
        if rung == "confirm" and latest == "longer":
            self.run.continue_measurement(cell)
            return
        old = self.run.retire(cell)
        if old is not None:
            self.facts["earlier"].append({"key": list(cell.key), "rung": latest, "measurement": old.to_dict()})

    def leave_out(self, cell: Cell | None, kind: str, rung: str | None, stage: str, estimate: float,
                  reserve: float) -> None:
        entry: dict[str, Any] = {"stage": stage, "kind": kind, "rung": rung, "estimate_s": estimate,
                                 "left_s": self.budget.left_s(), "reserved_s": reserve}
        if cell is not None:
            entry.update({"mode": cell.mode, "batch_size": cell.batch_size})
            if cell.backend != DEFAULT_BACKEND:
                entry["backend"] = cell.backend
            if cell.data is not None:
                entry["data"] = cell.data.label()
        entry["reason"] = (f"estimated {format_seconds(estimate)}, but {format_seconds(max(0.0, entry['left_s']))} "
                           f"of the budget was left" + (f", {format_seconds(reserve)} of it kept for the stages "
                                                        "after" if reserve > 0 else ""))
        self.facts["left_out"].append(entry)
        if stage not in self.short_stages and self.planned(stage):
            # The plan said this stage would run: say at once that the budget ran short for it, not only at the end.
            self.short_stages.add(stage)
            what = "its candidate" if cell is None else candidate_name(cell)
            self.announce(f"tune plan: {stage} runs short of the budget: {what} left out ({entry['reason']}); "
                          "the list at the end says what else was")
        self.save()

    def save(self) -> None:
        self.facts["spent_s"] = self.budget.spent_s()
        self.facts["cost_model"] = self.cost.to_dict()
        self.run.save()

    # ---------------------------------------------------------------------------------------------- the rungs

    def search(self, guard: Callable[[Search, int], None] | None) -> None:
        """Run the planned stages in order: screen kinds, the longer rung, longer kinds, the guard, confirm."""
        self.plan()
        for kind in kinds(self):
            self.run_kind(kind)
            if self.rung_of(kind) == "screen":
                self.longer()
        if guard is not None and self.planned("check"):
            guard(self, CONFIRM_TOP)
        self.done_stages.add("check")
        if self.planned("confirm"):
            self.confirm()
        self.done_stages.add("confirm")
        self.save()

    def run_kind(self, kind: CandidateKind) -> None:
        rung = self.rung_of(kind)
        for stage, cells in kind.rounds(self):
            if not self.planned(stage):
                admitted = self.readmit(stage, kind.name, rung, cells)
                if admitted < len(cells):
                    self.skip_stage(stage, kind.name, rung, cells[admitted:])
                if not admitted:
                    break
                cells = cells[:admitted]
            self.facts["phases"].append({"phase": kind.name, "stage": stage, "rung": rung,
                                         "candidates": [candidate_name(c) for c in cells]})
            self.measure(cells, kind.name, rung, stage)
            self.done_stages.add(stage)
        for stage in kind.stages(self):
            self.done_stages.add(stage[0])

    def readmit(self, stage_name: str, kind: str, rung: str, cells: Sequence[Cell]) -> int:
        """A stage the up-front plan left out, priced again when its turn comes, for the cells its kind proposes
        now, with the cost model as it stands (the plan priced it with cautious priors; by now it has seen what
        candidates cost here). Its first candidates (a kind proposes the most promising first) run after all while
        they fit in the budget left less what the planned stages after it that rank above it need
        (:meth:`reserve_s`); each is still started only while it fits. Returns how many of ``cells`` are admitted
        (0: none, the stage stays left out); a re-admission is announced and stored with the plan."""
        stage = next((s for s in self.stages if s["stage"] == stage_name), None)
        if stage is None or not math.isfinite(self.budget.total_s):
            return 0
        room = self.budget.left_s() - self.reserve_s(stage_name)
        estimate, admitted = 0.0, 0
        for cell, warm in zip(cells, self._expected_warm(kind, cells), strict=True):
            each = self.cost.estimate_s(cost_key(kind, cell), self.window(rung), 1, self.iteration_s(cell), warm=warm)
            if estimate + each > room:
                break
            estimate, admitted = estimate + each, admitted + 1
        if not admitted:
            return 0
        stage["planned"] = True
        readmitted = {"estimate_s": estimate, "left_s": self.budget.left_s(), "candidates": admitted}
        for entry in self.facts["plan"]:
            if entry["stage"] == stage_name:
                entry.update(planned=True, readmitted=readmitted)
        part = f"{admitted} of {len(cells)}" if admitted < len(cells) else f"{admitted}"
        self.announce(f"tune plan: {stage_name} runs after all: {part} candidate(s), now about "
                      f"{format_seconds(estimate)}, {format_seconds(room)} of the budget free for it")
        return admitted

    def skip_stage(self, stage: str, kind: str, rung: str, cells: Sequence[Cell]) -> None:
        """A stage the plan left out: its candidates are logged as left out, none is started."""
        planned = next((s for s in self.stages if s["stage"] == stage), None)
        reason = planned.get("reason") if planned else "not in the plan"
        for cell, warm in zip(cells, self._expected_warm(kind, cells), strict=True):
            entry = {"stage": stage, "kind": kind, "rung": rung, "mode": cell.mode, "batch_size": cell.batch_size,
                     "estimate_s": self.cost.estimate_s(cost_key(kind, cell), self.window(rung), 1,
                                                        self.iteration_s(cell), warm=warm),
                     "left_s": self.budget.left_s(), "reserved_s": None,
                     "reason": f"left out by the plan: {reason}"}
            if cell.backend != DEFAULT_BACKEND:
                entry["backend"] = cell.backend
            if cell.data is not None:
                entry["data"] = cell.data.label()
            self.facts["left_out"].append(entry)
        self.save()

    def ranked(self, rung: str | None = None) -> list[Measurement]:
        """The measurements within the limits that ran ok, best first (highest rung, then score); with ``rung``:
        only those whose latest rung it is."""
        pool = []
        for m in self.run.result.measurements:
            f = self.figures(m)
            if f["score"] is None or limit_violations(f, self.limits):
                continue
            latest = self.latest_rung(Cell.of(m))
            if rung is None or latest == rung:
                pool.append((m, f, latest))
        pool.sort(key=lambda item: (not self.eligible(item[0]), -rung_level(item[2]), -(item[1]["score"] or 0.0),
                                    item[0].mode, item[0].batch_size, item[0].backend, cell_id(item[0])[3] or ""))
        return [m for m, _, _ in pool]

    def longer(self) -> None:
        """The longer rung: the best 1/ETA of the screened candidates (within the limits), under the full rule."""
        if not self.planned("longer"):
            self.done_stages.add("longer")
            return
        # Every candidate screened, also those a resumed search finds at a higher rung already: ranked() puts them
        # first, so the same ones are chosen again (taken from the file) and the others are not promoted instead.
        screened = [m for m in self.ranked() if (self.find_trial(Cell.of(m), "screen") or {}).get("actual_s")
                    is not None]
        chosen = screened[:self._longer_count(len(screened))]
        if chosen:
            self.facts["phases"].append({"phase": "longer", "stage": "longer", "rung": "longer",
                                         "candidates": [f"{m.mode} bs{m.batch_size}" for m in chosen]})
        rest = screened[len(chosen):]
        if rest:
            self.prune("halving", f"{len(rest)} of {len(screened)} screened candidates",
                       [f"{m.mode} bs{m.batch_size}" for m in rest],
                       f"the longer rung takes the best 1/{HALVING_ETA} ({len(chosen)}) within the limits")
        self.measure([Cell.of(m) for m in chosen], "eager", "longer", "longer")
        self.done_stages.add("longer")

    def confirm(self) -> None:
        """The full protocol for the best :data:`CONFIRM_TOP` candidates that passed the guard (or all, without
        the guard)."""
        chosen = [m for m in self.ranked() if self.passed(m) and self.eligible(m)][:CONFIRM_TOP]
        if chosen:
            self.facts["phases"].append({"phase": "confirm", "stage": "confirm", "rung": "confirm",
                                         "candidates": [candidate_name(m) for m in chosen]})
        for index, m in enumerate(chosen):
            self.measure_one(Cell.of(m), self.kind_of(m), "confirm", "confirm", position=(index, len(chosen)))

    def eligible(self, m: Measurement) -> bool:
        """Whether ``m`` may win: any candidate, except that with ``--data`` only real-data cells may (the synthetic
        ones are their ceilings); those rank first and alone are confirmed."""
        return m.data is not None or not self.facts.get("data")

    def passed(self, m: Measurement) -> bool:
        """Whether ``m`` passed the correctness guard (always, with the guard off or for fp32 eager)."""
        if m.backend != DEFAULT_BACKEND:
            verdict = parity_verdict(m)
            return bool(verdict and verdict["ok"])
        if not self.facts.get("correctness_guard", True) or m.mode == "fp32":
            return True
        checks = [c for c in self.facts.get("correctness") or [] if (c["mode"], c["batch_size"],
                                                                     c.get("backend") or DEFAULT_BACKEND)
                  == (m.mode, m.batch_size, m.backend)]
        return bool(checks and checks[-1].get("ok"))


__all__ = ["CONFIRM_TOP", "HALVING_ETA", "RUNGS", "SCREEN_FRACTION", "Search", "candidate_name", "cell_id",
           "rung_level", "screen_rule", "trial_cell"]
