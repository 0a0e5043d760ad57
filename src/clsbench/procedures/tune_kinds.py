"""The kinds of candidate ``clsbench tune`` tries, one registry entry each (:data:`TUNE_KINDS`).

A kind says which rung its candidates enter (``screen``: a short stop rule, for the many cheap ones; ``longer``: the
full stop rule at once, for those whose build dominates their cost, since screening them would pay the build twice),
how long its build takes before anything was measured here (the cost model's prior, per device type), what the
up-front plan expects of it (its stages, each with a count and a priority for when the budget cannot hold
everything) and, as a generator, the rounds of cells it proposes from what the search measured so far.

Adding a kind (say Inductor freezing, or a training-step option) is one :func:`register_kind` call: the search, the
budget, the plan, the halving and the result file take it from there. Built-in kinds, in the order they run:

- ``eager``: every precision +/- channels_last at a reference batch size, then the larger sizes for the modes within
  a margin of the best there (screen rung), with the plateau, the limits and dominance pruning across batch sizes;
- ``compile``: ``+compile`` (and for inference ``+cudagraph``, ``+compile+cudagraph``) of the best eager families;
- ``freeze`` (inference): ``+compile+freeze`` (Inductor freezing) of the best family, ranked with its compiled
  results, and for infer-latency on a GPU ``+compile+freeze+cudagraph`` too;
- ``train-step`` (train): the training-step candidates of the best family: the optimizer implementation
  (``+fused``, or ``+foreach`` where the mode refuses ``+fused`` here), ``+compile`` with it, the whole step compiled
  (``+compile+compiled-step`` with it) and the whole step captured (``+cudagraph``, ``+compile+cudagraph``); what
  a mode refuses here is pruned with the mode's reason, without a worker;
- ``max-autotune``: ``+compile:max-autotune`` of the best precision;
- ``backend``: the inference backends, in the weight-cast form of the best eager precision;
- ``pipeline`` (``tune --data DIR``, train only; keep it the last kind registered): the best compute candidates
  (with a captured step among them where one was measured: :func:`pipeline_leaders`) measured again on real data
  under each pipeline's most tuned setting (:func:`pipeline_settings`); the synthetic cells stay in the file as the
  ceilings of those real-data cells.

An exhaustive search (:attr:`clsbench.procedures.tune_search.Search.exhaustive`) is a setting the kinds read: the
eager kind stops a mode only where it failed or broke a limit (no plateau, no dominance), and every kind that limits
its families asks :meth:`~clsbench.procedures.tune_search.Search.family_limit`, which says "all" (None) then. The
pipeline kind keeps its :data:`PIPELINE_LEADERS`: it measures the winners' input pipelines, not more candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from clsbench.core.registry import Registry
from clsbench.core.vocab import Reason, Status
from clsbench.procedures.sweep import AUTO_MIN_GAIN
from clsbench.procedures.tune import (
    BACKEND_PRECISION,
    MAX_AUTOTUNE_FAMILIES,
    MAX_BACKEND_FAMILIES,
    MAX_COMPILE_FAMILIES,
    PRUNE_LOSS_FRACTION,
    limit_violations,
    variant_of,
)
from clsbench.procedures.tune_budget import FREEZE_BUILD_S, TRAIN_STEP_BUILD_S
from clsbench.results.schema import DEFAULT_BACKEND

if TYPE_CHECKING:
    from clsbench.core.data_settings import DataSettings
    from clsbench.core.plan import Cell
    from clsbench.procedures.tune_search import Search
    from clsbench.results.schema import Measurement

#: Rounds a kind yields: (stage name, the cells to measure now). The search measures them, then resumes the
#: generator, which reads what it needs from the search.
Rounds = Iterator[tuple[str, list["Cell"]]]

#: A mode is not tried at larger batch sizes when one other mode beat it by more than this fraction at each of the
#: two largest sizes measured so far (dominance): its growth curve lies under the other's, so its larger batches
#: cannot win. The margin is sweep's plateau gain, three times the spread between fresh processes on the H200.
DOMINANCE_MARGIN = AUTO_MIN_GAIN
#: Where the budget cannot hold every stage, the plan keeps them in this order of priority (lower first); the
#: first screening round is always kept, and the output check with it (no winner without one). Compilation comes
#: before larger batch sizes and the longer rung: on a ResNet-50 class network on an H200 it gained 1.4-1.6x, more
#: than any of those. While the search runs, a stage's candidates leave the planned stages after it that rank at or
#: above it their estimated share of the budget.
#: Inductor freezing comes before the longer rung and later batch sizes: on the H200 it gained 13% over plain
#: compile (ResNet-50 bf16+cl, batch 512: 24,961 -> 28,241 img/s), where throughput beyond batch 256 is flat within
#: a few %. The training-step candidates (a train search has no freeze stage) take the same place: the first
#: budgeted train tune on the H200 (2026-12-02, 9 minutes) spent its time screening and lengthening eager candidates
#: and left the captured step out, the fastest step measured there. The longer rung only re-ranks eager leaders,
#: which a compiled candidate beats on a GPU.
#: For infer-latency on a GPU the backends come first after the confirmation, as ``captured-backend``: at batch 1 a
#: loaded artifact replayed as a CUDA graph was the fastest configuration measured on the H200, ahead of
#: ``+compile+cudagraph`` (ResNet-50 bf16+cl: export 0.513 ms p50, TorchScript 0.697, compile 0.67-0.92;
#: MobileNetV3-Large: export 0.451, TorchScript 0.628; benchmarks/README.md, 2026-12-03).
PRIORITY = {"screen-first": 0, "check": 0, "confirm": 1, "captured-backend": 1.5, "compile": 2, "screen-second": 3,
            "freeze": 4, "train-step": 4, "longer": 5, "screen-more": 6, "max-autotune": 7, "backend": 8}
#: ``+compile+freeze`` is tried for this many families (the best, by their compiled or eager scores): one cold
#: compile each, and freezing refines a compile rather than opening a new direction.
MAX_FREEZE_FAMILIES = 1
#: The training-step candidates are tried for this many families (the best, by their compiled or eager scores):
#: three or four builds each, two of them cold compiles.
MAX_TRAIN_STEP_FAMILIES = 1


class Stage(NamedTuple):
    """One stage the up-front plan expects of a kind (a kind's ``stages`` may also give plain 3-tuples).

    Attributes:
        name: the stage's name (the rounds the kind yields use it).
        count: how many candidates it is expected to propose.
        priority: its place when the budget cannot hold every stage (:data:`PRIORITY`, lower first).
        costs: the expected candidates one by one, most promising first, as (cost key, build shared with an earlier
            one): for a kind whose candidates differ in cost (the backend kind: an AOTInductor build against a
            TorchScript trace) or share builds. Empty: ``count`` candidates at the kind's own cost.
    """

    name: str
    count: int
    priority: float
    costs: tuple[tuple[str, bool], ...] = ()


@dataclass(frozen=True)
class CandidateKind:
    """One kind of candidate.

    Attributes:
        name: the kind's name (in the result file, the plan and the cost model).
        rung: the rung its candidates enter: ``screen`` or ``longer``.
        build_s: seconds its build costs per repeat, by device type (``cuda``, ``cpu``), before one was observed.
        stages: ``search -> [Stage or (stage, expected candidates, priority)]``: what the up-front plan expects.
        rounds: ``search -> Rounds``: the cells it proposes, round by round.
        enabled: ``search -> bool``: whether the search's settings ask for this kind at all.
        cost_key: ``cell -> key``: the cost model's key for a candidate (default: the kind's name), for a kind
            whose candidates cost differently by what they are (the backend kind prices each backend apart).
        priors: ``device type -> {key: build seconds}``: the build estimates of the keys ``cost_key`` makes, before
            one was observed (a key without one takes the kind's ``build_s``).
        build_key: ``cell -> key``: candidates with equal keys share one build (an artifact in the backends'
            cache), so a candidate whose build an earlier one of the search made is priced warm. None: each
            candidate builds its own.
    """

    name: str
    rung: str
    build_s: Mapping[str, float]
    stages: Callable[[Search], list[Stage] | list[tuple[str, int, int]]]
    rounds: Callable[[Search], Rounds]
    enabled: Callable[[Search], bool] = lambda search: True
    cost_key: Callable[[Cell], str] | None = None
    priors: Callable[[str], Mapping[str, float]] = lambda device_type: {}
    build_key: Callable[[Cell], Hashable] | None = None


TUNE_KINDS: Registry[CandidateKind] = Registry("tune candidate kind")


def register_kind(kind: CandidateKind, *, replace: bool = False) -> CandidateKind:
    """Add a kind of candidate to every search (after those registered before it)."""
    if kind.rung not in ("screen", "longer"):
        raise ValueError(f"a kind enters the screen or the longer rung, not {kind.rung!r}")
    return TUNE_KINDS.register(kind.name, kind, replace=replace)


def kinds(search: Search) -> list[CandidateKind]:
    """The kinds this search tries, in registration order."""
    return [TUNE_KINDS.get(name) for name in TUNE_KINDS.names() if TUNE_KINDS.get(name).enabled(search)]


def cost_priors(device_type: str) -> dict[str, float]:
    """Every registered kind's build estimate on ``device_type`` (``cuda``, ``cpu``), with the keys its
    ``cost_key`` makes: the cost model's priors."""
    out: dict[str, float] = {}
    for name in TUNE_KINDS.names():
        kind = TUNE_KINDS.get(name)
        out[name] = float(kind.build_s.get(device_type, 0.0))
        out.update({key: float(value) for key, value in kind.priors(device_type).items()})
    return out


def cost_key(kind_name: str, cell: Cell) -> str:
    """The cost model's key for ``cell`` proposed by the kind ``kind_name`` (its name, unless it keys by cell)."""
    kind = TUNE_KINDS.get(kind_name) if kind_name in TUNE_KINDS else None
    return kind.cost_key(cell) if kind is not None and kind.cost_key is not None else kind_name


def build_key(kind_name: str, cell: Cell) -> Hashable | None:
    """Which build ``cell`` shares with other candidates of its kind (None: its own)."""
    kind = TUNE_KINDS.get(kind_name) if kind_name in TUNE_KINDS else None
    return kind.build_key(cell) if kind is not None and kind.build_key is not None else None


# ------------------------------------------------------------------------------------------------------ eager


def eager_stage(search: Search, batch: int) -> str:
    """The eager kind's stage at ``batch``: ``screen bsN``, or ``longer bsN`` in an exhaustive search (which
    measures eager candidates at the longer rung at once)."""
    return f"{'longer' if search.exhaustive else 'screen'} bs{batch}"


def reference_index(search: Search) -> int:
    """Where the eager kind screens every mode first: the second size of tune's own doubling (128 of 64..512 on a
    GPU), else the first. The smallest size ranks precisions worst: there the step is bound by its kernel launches,
    not by the arithmetic the precision changes (on the H200, ResNet-50 training at batch 64: tf32+cl 2,484 img/s
    ahead of amp-bf16+cl 2,235; at 128 amp-bf16+cl led by 43%). A list the user named starts at its first size, so
    that every size named can be tried; an exhaustive search measures every mode at every size anyway."""
    return 1 if len(search.sizes) > 1 and not (search.explicit or search.exhaustive) else 0


def _eager_stages(search: Search) -> list[tuple[str, int, int]]:
    modes = len(search.base_modes)
    reference = reference_index(search)
    out = [(eager_stage(search, search.sizes[reference]), modes, PRIORITY["screen-first"])]
    for index in range(reference + 1, len(search.sizes)):
        # The screen margin and dominance leave about the best third of the modes beyond the reference (an
        # assumption of the plan only: the search itself prunes by what it measures); exhaustive keeps every mode.
        count = modes if search.exhaustive else math.ceil(modes / 3)
        priority = PRIORITY["screen-second"] if index == reference + 1 else PRIORITY["screen-more"]
        out.append((eager_stage(search, search.sizes[index]), count, priority))
    # Sizes below the reference are measured only for a mode that failed or broke a limit there: none expected, so
    # they cost the plan nothing (and are not announced), and they rank first, as the first screen does, since
    # without them such a mode has no result at all.
    out += [(eager_stage(search, search.sizes[index]), 0, PRIORITY["screen-first"]) for index in range(reference)]
    return out


def dominated(search: Search, mode: str, others: Sequence[str], sizes: Sequence[int]) -> str | None:
    """The mode that beat ``mode`` by more than :data:`DOMINANCE_MARGIN` at both of ``sizes``, or None."""
    def score(name: str, batch: int) -> float | None:
        m = search.measurement(search.cell(name, batch))
        return search.figures(m)["score"] if m is not None else None

    mine = [score(mode, b) for b in sizes]
    if any(s is None for s in mine):
        return None
    for other in others:
        theirs = [score(other, b) for b in sizes]
        if all(t is not None and t > s * (1.0 + DOMINANCE_MARGIN) for t, s in zip(theirs, mine, strict=True)):
            return other
    return None


def _fits(search: Search, mode: str, batch: int) -> bool:
    """Whether ``mode`` ran ok at ``batch`` within the limits."""
    m = search.measurement(search.cell(mode, batch))
    return m is not None and m.status == Status.OK and not limit_violations(search.figures(m), search.limits)


def _screen_margin(search: Search, modes: Sequence[str], batch: int, larger: Sequence[int]) -> list[str]:
    """The modes within :data:`PRUNE_LOSS_FRACTION` of the best at the reference ``batch``; the others are pruned
    (stage ``screen``) for the ``larger`` sizes. A precision or layout that loses by more than a quarter at one
    batch size does not catch up at a larger one: what a larger batch amortises (launches, the optimizer step) is
    the same for every mode, so the gap between the arithmetic-bound steps only widens."""
    scores = {mode: search.score(search.measurement(search.cell(mode, batch))) or 0.0 for mode in modes}
    best = max(scores.values(), default=0.0)
    kept = []
    for mode in modes:
        if scores[mode] >= (1.0 - PRUNE_LOSS_FRACTION) * best:
            kept.append(mode)
        elif larger:
            search.prune("screen", mode, [f"bs{b}" for b in larger],
                         f"{100 * scores[mode] / best:.0f}% of the best at batch {batch}, below the "
                         f"{100 * (1 - PRUNE_LOSS_FRACTION):.0f}% needed")
    return kept


def _growing(search: Search, active: Sequence[str], index: int, reference: int) -> list[str]:
    """The modes measured at ``sizes[index]`` that go on to the next size: ok within the limits and (unless the sizes
    were named, or the search is exhaustive) still gaining over their smaller sizes."""
    sizes = search.sizes
    still = []
    for mode in active:
        if not _fits(search, mode, sizes[index]):
            continue
        score = search.score(search.measurement(search.cell(mode, sizes[index]))) or 0.0
        previous = [search.score(search.measurement(search.cell(mode, b))) for b in sizes[reference:index]]
        previous = [p for p in previous if p is not None]
        if not (search.explicit or search.exhaustive) and previous and score < max(previous) * (1.0 + AUTO_MIN_GAIN):
            continue  # throughput stopped rising: larger batches only cost memory and latency
        still.append(mode)
    return still


def _undominated(search: Search, modes: Sequence[str], index: int) -> list[str]:
    """``modes`` less those another mode beat by more than the margin at ``sizes[index - 1]`` and ``sizes[index]``
    (pruned, stage ``dominance``)."""
    sizes = search.sizes
    pair = sizes[index - 1:index + 1]
    kept = []
    for mode in modes:
        winner = dominated(search, mode, [o for o in search.base_modes if o != mode], pair)
        if winner is None:
            kept.append(mode)
            continue
        search.prune("dominance", mode, [f"bs{b}" for b in sizes[index + 1:]],
                     f"{winner} beat it by more than {DOMINANCE_MARGIN:.0%} at batch {pair[0]} and {pair[1]}")
    return kept


def _eager_rounds(search: Search) -> Rounds:
    """Every mode at the reference size (:func:`reference_index`); then the sizes above it for the modes within the
    screen margin of the best there, each mode dropping out at a failure, a broken limit, a plateau, or when
    dominated; then the sizes below it, largest first, for the modes that failed or broke a limit at the reference,
    until each fits. When exhaustive: every mode at every size from the smallest, a mode stopping only at a failure
    or a broken limit, which larger batches cannot mend."""
    sizes = search.sizes
    reference = reference_index(search)
    active = list(search.base_modes)
    for index in range(reference, len(sizes)):
        if not active:
            break
        yield eager_stage(search, sizes[index]), [search.cell(mode, sizes[index]) for mode in active]
        if index == len(sizes) - 1:
            break
        active = _growing(search, active, index, reference)
        if search.exhaustive:
            continue
        active = _screen_margin(search, active, sizes[index], sizes[index + 1:]) if index == reference \
            else _undominated(search, active, index)
    down = [mode for mode in search.base_modes
            if search.measurement(search.cell(mode, sizes[reference])) is not None
            and not _fits(search, mode, sizes[reference])]
    for index in range(reference - 1, -1, -1):
        if not down:
            return
        yield eager_stage(search, sizes[index]), [search.cell(mode, sizes[index]) for mode in down]
        down = [mode for mode in down if not _fits(search, mode, sizes[index])]


register_kind(CandidateKind(name="eager", rung="screen", build_s={"cuda": 0.0, "cpu": 0.0},
                            stages=_eager_stages, rounds=_eager_rounds))


# ---------------------------------------------------------------------------------------------------- compile


def _compile_rounds(search: Search) -> Rounds:
    """The variants of the best eager families (within the pruning margin), each at its family's best batch."""
    scores = search.family_scores()
    families = search.rank_families("compile", search.suffixes, MAX_COMPILE_FAMILIES, scores,
                                    max(scores.values(), default=0.0))
    cells = variant_cells(search, families, search.suffixes)
    if cells:
        yield "compile", cells


def variant_cells(search: Search, families: Sequence[str], suffixes: Sequence[str]) -> list[Cell]:
    """Each family's variants (``suffixes`` added to it; those it cannot take left out) at the family's anchor batch
    (its best eager point), each variant remembered as the family's."""
    cells = []
    for family in families:
        anchor = search.family_point(family)
        for variant in (variant_of(family, s) for s in suffixes):
            if anchor is not None and variant:
                search.family_of[variant] = family
                cells.append(search.cell(variant, anchor.batch_size))
    return cells


register_kind(CandidateKind(
    name="compile", rung="longer", build_s={"cuda": 45.0, "cpu": 30.0},
    stages=lambda s: [("compile", s.family_count(MAX_COMPILE_FAMILIES) * len(s.suffixes), PRIORITY["compile"])],
    rounds=_compile_rounds, enabled=lambda s: s.compile_variants))


def best_compiled_families(search: Search, stage: str, suffixes: Sequence[str], keep: int) -> list[str]:
    """The families a kind that refines a compile tries: those compiled so far (all, when none was), rescored with
    their compiled results, within the pruning margin of the best result so far, at most ``keep``, best first."""
    scores = search.family_scores(compiled=True)
    eager = search.family_scores()
    best = max([*scores.values(), *eager.values()], default=0.0)
    compiled_families = {search.family_of.get(m.mode) for m in search.run.result.measurements}
    scores = {f: s for f, s in scores.items() if f in compiled_families} or scores
    return search.rank_families(stage, suffixes, keep, scores, best)


# ----------------------------------------------------------------------------------------------------- freeze


def freeze_suffixes(search: Search) -> tuple[str, ...]:
    """The freeze kind's variants: ``+compile+freeze`` where the compile variants include ``+compile``, and
    ``+compile+freeze+cudagraph`` for infer-latency on a GPU where they include ``+compile+cudagraph`` (freezing
    and the compiler's own CUDA graphs go together; at batch 1 the launches they save matter most)."""
    out = []
    if "+compile" in search.suffixes:
        out.append("+compile+freeze")
    if "+compile+cudagraph" in search.suffixes and search.workload == "infer-latency" \
            and search.device.startswith("cuda"):
        out.append("+compile+freeze+cudagraph")
    return tuple(out)


def _workload_kind(search: Search) -> str:
    from clsbench.workloads import get_workload

    return get_workload(search.workload).kind


def _freeze_rounds(search: Search) -> Rounds:
    """Freezing for the best families by their compiled (else eager) results, at each family's anchor batch."""
    suffixes = freeze_suffixes(search)
    cells = variant_cells(search, best_compiled_families(search, "freeze", suffixes, MAX_FREEZE_FAMILIES), suffixes)
    if cells:
        yield "freeze", cells


register_kind(CandidateKind(
    name="freeze", rung="longer", build_s=FREEZE_BUILD_S,
    stages=lambda s: [("freeze", s.family_count(MAX_FREEZE_FAMILIES) * len(freeze_suffixes(s)),
                       PRIORITY["freeze"])],
    rounds=_freeze_rounds,
    enabled=lambda s: s.compile_variants and _workload_kind(s) == "inference" and bool(freeze_suffixes(s))))


# ------------------------------------------------------------------------------------------------- train-step

#: The optimizer implementations the train-step kind tries, preferred first: ``fused`` reads and writes each
#: tensor once; ``foreach`` where the mode refuses ``fused`` on this device.
IMPLEMENTATIONS = ("+fused", "+foreach")
#: The train-step kind's variants of a family, ``{impl}`` standing for the implementation chosen (possibly none),
#: most promising first, since a budget may hold only the first few: ``+compile+cudagraph`` (the compiled step
#: captured whole) was the fastest ResNet-50 training step measured on the H200 (6,887 img/s against 6,788 for
#: ``+compile``, 2026-12-02, ``benchmarks/results/h200/candidates-*``).
TRAIN_STEP_SUFFIXES = ("+compile+cudagraph", "+compile{impl}", "+cudagraph", "+compile+compiled-step{impl}", "{impl}")
#: How many of them capture a CUDA graph (refused off CUDA, so not counted there when planning the budget).
GRAPH_SUFFIXES = sum("cudagraph" in suffix for suffix in TRAIN_STEP_SUFFIXES)


def mode_refusal(search: Search, cell: Cell) -> str | None:
    """Why ``cell``'s mode cannot run here, from the mode's own ``unsupported_reason`` as the runner judges it
    without a worker (:func:`clsbench.engine.runner.static_skip_reason`), or None."""
    from clsbench.engine.runner import static_skip_reason

    return static_skip_reason(cell, search.run.result.environment, search.run.plan.compile_mode)


def optimizer_implementation(search: Search, family: str, batch: int) -> tuple[str | None, dict[str, str]]:
    """The first of :data:`IMPLEMENTATIONS` the family's mode accepts here (``""``: the family names one itself;
    None: none is accepted), and the reasons of those refused, by variant."""
    refused: dict[str, str] = {}
    for implementation in IMPLEMENTATIONS:
        variant = variant_of(family, implementation)
        if variant is None:
            return "", refused
        reason = mode_refusal(search, search.cell(variant, batch))
        if reason is None:
            return implementation, refused
        refused[variant] = reason
    return None, refused


def proposed_by_another_kind(search: Search, cell: Cell, kind: str) -> bool:
    """Whether another kind's round of this search proposed ``cell`` already (``+compile`` of a family that names
    its optimizer implementation is the compile kind's), from the phases logged so far; a resumed search logs its
    phases afresh, in the same order, so it decides the same."""
    label = f"{cell.mode} bs{cell.batch_size}"
    return cell.backend == DEFAULT_BACKEND and any(
        p["phase"] != kind and label in p["candidates"] for p in search.facts["phases"])


def train_step_cells(search: Search, family: str, batch: int) -> list[Cell]:
    """The family's training-step candidates at ``batch`` that no other kind proposed; those a mode refuses here
    are pruned with its reason."""
    implementation, refused = optimizer_implementation(search, family, batch)
    cells = []
    for suffix in TRAIN_STEP_SUFFIXES:
        if implementation is None and "{impl}" in suffix:
            continue
        text = suffix.format(impl=implementation or "")
        variant = variant_of(family, text) if text else None
        if not variant or proposed_by_another_kind(search, search.cell(variant, batch), "train-step"):
            continue
        reason = mode_refusal(search, search.cell(variant, batch))
        if reason:
            refused[variant] = reason
            continue
        search.family_of[variant] = family
        cells.append(search.cell(variant, batch))
    for variant, reason in refused.items():
        search.prune("train-step", family, [variant], reason)
    return cells


def _foreach_instead(search: Search, cells: Sequence[Cell]) -> list[Cell]:
    """``+foreach`` in place of each ``+fused`` candidate that torch refused when its optimizer was built (the
    worker recorded it as skipped, ``unsupported_mode``: the device check the mode cannot make without torch)."""
    from clsbench.modes import parse_mode

    out = []
    for cell in cells:
        m = search.measurement(cell)
        if m is None or m.status != Status.SKIPPED or m.reason != Reason.UNSUPPORTED_MODE \
                or "fused" not in parse_mode(cell.mode).modifier_names:
            continue
        variant = parse_mode(cell.mode.replace("+fused", "+foreach")).name
        again = search.cell(variant, cell.batch_size)
        reason = mode_refusal(search, again)
        if reason:
            search.prune("train-step", search.family_of.get(cell.mode, cell.mode), [variant], reason)
        elif not proposed_by_another_kind(search, again, "train-step"):
            search.family_of[variant] = search.family_of.get(cell.mode, cell.mode)
            out.append(again)
    return out


def _train_step_rounds(search: Search) -> Rounds:
    """The training-step candidates of the best families by their compiled (else eager) results, at each family's
    anchor batch; then ``+foreach`` for the ``+fused`` ones torch refused."""
    suffixes = tuple(s.format(impl="+fused") for s in TRAIN_STEP_SUFFIXES)
    cells = []
    for family in best_compiled_families(search, "train-step", suffixes, MAX_TRAIN_STEP_FAMILIES):
        anchor = search.family_point(family)
        if anchor is not None:
            cells += train_step_cells(search, family, anchor.batch_size)
    if cells:
        yield "train-step", cells
        again = _foreach_instead(search, cells)
        if again:
            yield "train-step", again


def _train_step_count(search: Search) -> int:
    variants = len(TRAIN_STEP_SUFFIXES) - (0 if search.device.startswith("cuda") else GRAPH_SUFFIXES)
    return search.family_count(MAX_TRAIN_STEP_FAMILIES) * variants


register_kind(CandidateKind(
    name="train-step", rung="longer", build_s=TRAIN_STEP_BUILD_S,
    stages=lambda s: [("train-step", _train_step_count(s), PRIORITY["train-step"])],
    rounds=_train_step_rounds, enabled=lambda s: s.compile_variants and _workload_kind(s) == "train"))


# ----------------------------------------------------------------------------------------------- max-autotune


def _autotune_rounds(search: Search) -> Rounds:
    """max-autotune of the best precisions still within the margin, rescored with their compiled results."""
    suffixes = ("+compile:max-autotune",)
    cells = variant_cells(search, best_compiled_families(search, "max-autotune", suffixes, MAX_AUTOTUNE_FAMILIES),
                          suffixes)
    if cells:
        yield "max-autotune", cells


register_kind(CandidateKind(
    name="max-autotune", rung="longer", build_s={"cuda": 300.0, "cpu": 120.0},
    stages=lambda s: [("max-autotune", s.family_count(MAX_AUTOTUNE_FAMILIES), PRIORITY["max-autotune"])],
    rounds=_autotune_rounds, enabled=lambda s: s.compile_variants and s.max_autotune))


# ---------------------------------------------------------------------------------------------------- backend


def backend_precisions(search: Search) -> tuple[list[str], int | None]:
    """The precisions of the backend kind, best first, and its batch size: the weight-cast form
    (:data:`BACKEND_PRECISION`) of the best eager precisions (at most :data:`MAX_BACKEND_FAMILIES`, every one when
    exhaustive) at the batch of the best eager result."""
    points = [p for p in (search.family_point(fam) for fam in search.base_modes) if p is not None]
    scored = sorted((p for p in points if search.score(p) is not None), key=lambda p: -(search.score(p) or 0))
    if not scored:
        return [], None
    precisions: list[str] = []
    for point in scored:
        precision = point.mode.split("+", 1)[0]
        cast = BACKEND_PRECISION.get(precision, precision)
        if cast not in precisions:
            precisions.append(cast)
    return precisions[:search.family_limit(MAX_BACKEND_FAMILIES)], scored[0].batch_size


def backend_layouts(search: Search) -> tuple[str, ...]:
    """The suffixes each backend precision is tried with, most promising first: ``+cl`` before NCHW (the layout
    every GPU convolution kernel prefers), and for infer-latency on a GPU the CUDA-graph replays of the loaded
    artifact before the plain runs (at batch 1 a launched artifact is bound by its launches: ResNet-50 export 1.16
    ms p50 launched against 0.513 ms replayed on the H200). A replay shares the build of its plain run (the artifact
    cache keys it without ``+cudagraph``), so whichever of the two comes second costs no build."""
    if search.workload == "infer-latency" and search.device.startswith("cuda"):
        return ("+cl+cudagraph", "+cudagraph", "+cl", "")
    return ("+cl", "")


def backend_modes(search: Search) -> tuple[list[str], int | None]:
    """The modes of the backend kind, most promising first (:func:`backend_precisions` x :func:`backend_layouts`),
    and their batch size."""
    from clsbench.modes import parse_mode

    precisions, batch = backend_precisions(search)
    return [parse_mode(p + suffix).name for p in precisions for suffix in backend_layouts(search)], batch


def backend_cost_key(cell: Cell) -> str:
    """``backend:NAME``: each backend is priced apart (a TorchScript trace took 1-5 s on the H200, an AOTInductor
    build 54-72 s)."""
    return f"backend:{cell.backend}"


def artifact_key(cell: Cell) -> tuple[str, str, int]:
    """(backend, mode without ``+cudagraph``, batch): what decides a backend candidate's artifact in this search."""
    from clsbench.backends.base import artifact_mode

    return (cell.backend, artifact_mode(cell.mode), cell.batch_size)


def _backend_priors(device_type: str) -> dict[str, float]:
    from clsbench.backends import BACKENDS
    from clsbench.backends.base import build_prior_s

    # By name, not registration order, so the stored cost model reads the same whatever registered when.
    return {f"backend:{name}": build_prior_s(BACKENDS.get(name), device_type) for name in sorted(BACKENDS.names())
            if name != DEFAULT_BACKEND}


def _backend_priority(search: Search) -> float:
    captured = search.workload == "infer-latency" and search.device.startswith("cuda")
    return PRIORITY["captured-backend" if captured else "backend"]


def _backend_rounds(search: Search) -> Rounds:
    """Each backend in :func:`backend_modes`, mode by mode (every backend's most promising mode first); what a
    backend cannot express here is pruned with the backend's reason, without starting a worker."""
    from clsbench.engine.runner import static_backend_skip_reason

    modes, batch = backend_modes(search)
    if batch is None:
        return
    cells = []
    environment = search.run.result.environment
    refused: dict[tuple[str, str], list[str]] = {}
    for mode in modes:
        for name in search.backends:
            cell = search.cell(mode, batch, name)
            reason = static_backend_skip_reason(cell, environment)
            if reason:
                refused.setdefault((name, reason), []).append(mode)
            else:
                cells.append(cell)
    for (name, reason), refused_modes in refused.items():
        search.prune("backend", name, refused_modes, reason)
    if cells:
        yield "backend", cells


def runnable_backends(search: Search) -> list[str]:
    """The search's backends that can run here for at least one precision the eager kind may hand them (a missing
    library or a device the backend cannot use rules it out before anything was measured)."""
    from clsbench.engine.runner import static_backend_skip_reason
    from clsbench.modes import parse_mode

    casts = list(dict.fromkeys(BACKEND_PRECISION.get(p, p) for p in
                               (mode.split("+", 1)[0] for mode in search.base_modes)))
    environment = search.run.result.environment
    batch = search.sizes[0]
    return [name for name in search.backends
            if any(static_backend_skip_reason(search.cell(parse_mode(cast).name, batch, name), environment) is None
                   for cast in casts)]


def _backend_stages(search: Search) -> list[Stage]:
    """One stage priced candidate by candidate, in the order :func:`_backend_rounds` proposes them: a backend that
    cannot run here costs the plan nothing, each backend at its own build estimate, a mode whose artifact an
    earlier candidate built (its ``+cudagraph`` twin) warm."""
    from clsbench.backends.base import artifact_mode

    names = runnable_backends(search)
    costs = []
    for _ in range(search.family_count(MAX_BACKEND_FAMILIES)):
        built: set[tuple[str, str]] = set()
        for suffix in backend_layouts(search):
            layout = artifact_mode(suffix)  # a replay and its plain run are one artifact (artifact_key)
            for name in names:
                costs.append((f"backend:{name}", (name, layout) in built))
                built.add((name, layout))
    return [Stage("backend", len(costs), _backend_priority(search), tuple(costs))]


register_kind(CandidateKind(
    name="backend", rung="longer", build_s={"cuda": 90.0, "cpu": 30.0},
    stages=_backend_stages, rounds=_backend_rounds, enabled=lambda s: bool(s.backends),
    cost_key=backend_cost_key, priors=_backend_priors, build_key=artifact_key))


# --------------------------------------------------------------------------------------------------- pipeline

#: The pipeline kind measures real data for this many of the best compute candidates (their synthetic figures are
#: the ceilings). A second leader covers a mode whose outputs the guard rejects, or whose step suffers more beside
#: the pipeline: real data can change the order. On the H200 (benchmarks/README.md, 2026-12-02, third session) the
#: compiled ResNet-50 step ran 28.5 ms slower beside the gpu pipeline and the same step captured as a CUDA graph 2.2
#: ms slower, because a launched step's kernel launches wait for the interpreter's lock that the pipeline's threads
#: hold. Two days later (fifth session, docs/methodology/data.md 16.4.4) the order reversed over the memory source: the
#: captured step held back nvJPEG's round trips and was fed at 4,519 img/s, the launched one at 5,383. Which wins
#: depends on the pipeline and the source, so the leaders always include one of each where both were measured: where
#: the two best both capture their step, or neither does, the second is the best of the other kind
#: (:func:`pipeline_leaders`).
PIPELINE_LEADERS = 2
#: Seconds a real-data cell costs before its timed region beyond a synthetic one, per repeat, until one was observed
#: here: scanning the dataset, opening it, starting the DataLoader workers (forkserver, each importing torch: about
#: 1 s each on a CPU, 2 on a GPU host) and the priming pass that reads every file once. A first estimate only: the
#: cost model replaces it by what the first real-data cell cost.
PIPELINE_START_S = {"cuda": 10.0, "cpu": 4.0}
#: With ``--data`` the winner must be a real-data cell: the pipeline stage is planned as early as the confirmation.
PRIORITY["pipeline"] = PRIORITY["confirm"]


def pipeline_workers(cpu_count: int | None) -> int:
    """The worker count the pipeline kind gives the cpu pipeline (and dali's threads): the largest count
    ``clsbench diagnose`` sweeps (:func:`clsbench.procedures.diagnose.sweep_workers`), the CPU count."""
    from clsbench.procedures.diagnose import sweep_workers

    return max(sweep_workers(cpu_count))


def pipeline_settings(base: DataSettings, device: str, workers: int,
                      pipelines: Sequence[str] | None = None) -> list[DataSettings]:
    """Each pipeline's most tuned setting at ``workers`` workers: the last of the settings it proposes to
    ``clsbench diagnose`` (:meth:`clsbench.data.base.Pipeline.candidates`, listed from PyTorch's defaults towards the
    most tuned: for cpu, pinned where there is a GPU, persistent workers, uint8 batches normalised on the device; for
    gpu, its default batched augmentation; for dali, ``workers`` threads). ``pipelines``: those to try (default:
    every registered one, in their order)."""
    from clsbench.data.base import ordered_pipelines

    out = []
    for pipeline in ordered_pipelines(pipelines):
        proposed = pipeline.candidates(base, device, [workers])
        if proposed:
            out.append(proposed[-1])
    return list(dict.fromkeys(out))


def stored_settings(search: Search) -> list[DataSettings]:
    """The real-data settings of a ``--data`` search, from its file (so that ``tune --resume`` measures the same)."""
    from clsbench.core.data_settings import DataSettings

    return [DataSettings.from_dict(s) for s in (search.facts.get("data") or {}).get("settings") or []]


def pipeline_skip_reason(setting: DataSettings, device: str) -> str | None:
    """Why ``setting``'s pipeline cannot run on ``device``, in the pipeline's own words, known without a worker."""
    import torch

    from clsbench.data.base import PIPELINES

    return PIPELINES.get(setting.pipeline).unsupported_reason(torch.device(device), setting)


def pipeline_leaders(search: Search) -> list[Measurement]:
    """The :data:`PIPELINE_LEADERS` best synthetic candidates within the limits (highest rung, then score); where they
    all capture their step (``ExecutionMode.captured``), or none does, and an eligible candidate of the other kind
    was measured, the last leader is the best of that kind (the comment of :data:`PIPELINE_LEADERS` says why)."""
    from clsbench.modes import parse_mode

    def captured(mode: str) -> bool:
        return parse_mode(mode).captured

    ranked: list[Measurement] = []
    for m in search.ranked():
        if m.data is None and (m.mode, m.batch_size, m.backend) not in [(x.mode, x.batch_size, x.backend)
                                                                      for x in ranked]:
            ranked.append(m)
    leaders = ranked[:PIPELINE_LEADERS]
    kinds_led = {captured(m.mode) for m in leaders}
    if len(leaders) > 1 and len(kinds_led) == 1:
        other = not kinds_led.pop()
        best_other = next((m for m in ranked if captured(m.mode) == other and search.eligible(m)), None)
        if best_other is not None:
            leaders[-1] = best_other
    return leaders


def _pipeline_rounds(search: Search) -> Rounds:
    """Each leader under each setting; a setting whose pipeline cannot run here is pruned with its reason, without
    starting a worker."""
    import dataclasses

    from clsbench.core.plan import Cell

    leaders = pipeline_leaders(search)
    if not leaders:
        return
    cells = []
    for setting in stored_settings(search):
        reason = pipeline_skip_reason(setting, search.device)
        if reason:
            search.prune("pipeline", setting.label(), [f"{m.mode} bs{m.batch_size}" for m in leaders], reason)
            continue
        cells += [dataclasses.replace(Cell.of(m), data=setting) for m in leaders]
    if cells:
        yield "pipeline", cells


def _pipeline_count(search: Search) -> int:
    runnable = [s for s in stored_settings(search) if not pipeline_skip_reason(s, search.device)]
    return PIPELINE_LEADERS * len(runnable)


register_kind(CandidateKind(
    name="pipeline", rung="longer", build_s=PIPELINE_START_S,
    stages=lambda s: [("pipeline", _pipeline_count(s), PRIORITY["pipeline"])],
    rounds=_pipeline_rounds, enabled=lambda s: bool(s.facts.get("data"))))


__all__ = [
    "CandidateKind",
    "Stage",
    "DOMINANCE_MARGIN",
    "IMPLEMENTATIONS",
    "MAX_FREEZE_FAMILIES",
    "MAX_TRAIN_STEP_FAMILIES",
    "PIPELINE_LEADERS",
    "PIPELINE_START_S",
    "PRIORITY",
    "TRAIN_STEP_SUFFIXES",
    "TUNE_KINDS",
    "artifact_key",
    "backend_cost_key",
    "backend_layouts",
    "backend_modes",
    "backend_precisions",
    "build_key",
    "cost_key",
    "cost_priors",
    "best_compiled_families",
    "dominated",
    "eager_stage",
    "freeze_suffixes",
    "kinds",
    "mode_refusal",
    "optimizer_implementation",
    "pipeline_leaders",
    "pipeline_settings",
    "pipeline_skip_reason",
    "pipeline_workers",
    "proposed_by_another_kind",
    "register_kind",
    "runnable_backends",
    "train_step_cells",
    "variant_cells",
]
