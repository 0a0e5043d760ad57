"""The built-in kinds of candidate that vary the execution mode, registered in the order they run
(:mod:`clsbench.procedures.tune.kinds` holds the registry):

- ``eager``: every precision +/- channels_last at a reference batch size, then the larger sizes for the modes within
  a margin of the best there (screen rung), with the plateau, the limits and dominance pruning across batch sizes;
- ``compile``: ``+compile`` (and for inference ``+cudagraph``, ``+compile+cudagraph``) of the best eager families;
- ``freeze`` (inference): ``+compile+freeze`` (Inductor freezing) of the best family, ranked with its compiled
  results, and for infer-latency on a GPU ``+compile+freeze+cudagraph`` too;
- ``train-step`` (train): the training-step candidates of the best family: the optimizer implementation
  (``+fused``, or ``+foreach`` where the mode refuses ``+fused`` here), ``+compile`` with it, the whole step compiled
  (``+compile+compiled-step`` with it) and the whole step captured (``+cudagraph``, ``+compile+cudagraph``); what
  a mode refuses here is pruned with the mode's reason, without a worker;
- ``max-autotune``: ``+compile:max-autotune`` of the best precision.

The backend kind (:mod:`clsbench.procedures.tune.backend_kind`) and the pipeline kind
(:mod:`clsbench.procedures.tune.pipeline_kind`) follow.

An exhaustive search (:attr:`clsbench.procedures.tune.search.Search.exhaustive`) is a setting the kinds read: the
eager kind stops a mode only where it failed or broke a limit (no plateau, no dominance), and every kind that limits
its families asks :meth:`~clsbench.procedures.tune.search.Search.family_limit`, which says "all" (None) then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from clsbench.core.vocab import Reason, Status
from clsbench.procedures.sweep import AUTO_MIN_GAIN
from clsbench.procedures.tune.budget import FREEZE_BUILD_S, TRAIN_STEP_BUILD_S
from clsbench.procedures.tune.figures import limit_violations
from clsbench.procedures.tune.kinds import PRIORITY, CandidateKind, Rounds, register_kind
from clsbench.procedures.tune.settings import (
    MAX_AUTOTUNE_FAMILIES,
    MAX_COMPILE_FAMILIES,
    PRUNE_LOSS_FRACTION,
    variant_of,
)
from clsbench.results.schema import DEFAULT_BACKEND

if TYPE_CHECKING:
    from clsbench.core.plan import Cell
    from clsbench.procedures.tune.search import Search

#: A mode is not tried at larger batch sizes when one other mode beat it by more than this fraction at each of the
#: two largest sizes measured so far (dominance): its growth curve lies under the other's, so its larger batches
#: cannot win. The margin is sweep's plateau gain, three times the spread between fresh processes on the H200.
DOMINANCE_MARGIN = AUTO_MIN_GAIN
#: ``+compile+freeze`` is tried for this many families (the best, by their compiled or eager scores): one cold
#: compile each, and freezing refines a compile rather than opening a new direction.
MAX_FREEZE_FAMILIES = 1
#: The training-step candidates are tried for this many families (the best, by their compiled or eager scores):
#: three or four builds each, two of them cold compiles.
MAX_TRAIN_STEP_FAMILIES = 1


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


def _retry_smaller(search: Search, mode: str, batch: int) -> bool:
    """Whether ``mode`` is tried below ``batch``: it ran there and failed or broke a limit. A mode skipped there
    (the device cannot run it) is not: a smaller batch does not make it runnable."""
    m = search.measurement(search.cell(mode, batch))
    return m is not None and m.status != Status.SKIPPED and not _fits(search, mode, batch)


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
    down = [mode for mode in search.base_modes if _retry_smaller(search, mode, sizes[reference])]
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


def runnable_suffixes(search: Search) -> tuple[str, ...]:
    """The compile variants some mode of the search can take on this device, for the plan's count: a variant every
    mode refuses here (``+cudagraph`` on a CPU) is still proposed, and recorded as skipped with its reason without a
    worker, so the plan does not price it as a compile."""
    if not search.base_modes or not search.sizes:
        return tuple(search.suffixes)
    return tuple(suffix for suffix in search.suffixes
                 if any(mode_refusal(search, search.cell(variant, search.sizes[0])) is None
                        for variant in (variant_of(mode, suffix) for mode in search.base_modes) if variant))


register_kind(CandidateKind(
    name="compile", rung="longer", build_s={"cuda": 45.0, "cpu": 30.0},
    stages=lambda s: [("compile", s.family_count(MAX_COMPILE_FAMILIES) * len(runnable_suffixes(s)),
                       PRIORITY["compile"])],
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


def drop_refused_modes(search: Search) -> None:
    """The precisions this device cannot run leave the search before it is planned, each pruned (stage ``device``)
    with the mode's own reason (:func:`mode_refusal`: TF32 on a CPU): no stage counts them, and no left-out line
    blames the budget for them. Where no mode could run, they stay, and the runner records each as skipped with its
    reason."""
    if not search.base_modes or not search.sizes:
        return
    refused = {mode: reason for mode in search.base_modes
               if (reason := mode_refusal(search, search.cell(mode, search.sizes[0])))}
    if not refused or len(refused) == len(search.base_modes):
        return
    search.base_modes = [mode for mode in search.base_modes if mode not in refused]
    for mode, reason in refused.items():
        search.prune("device", mode, ["any batch size or variant"], reason)


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


__all__ = [
    "DOMINANCE_MARGIN",
    "GRAPH_SUFFIXES",
    "IMPLEMENTATIONS",
    "MAX_FREEZE_FAMILIES",
    "MAX_TRAIN_STEP_FAMILIES",
    "TRAIN_STEP_SUFFIXES",
    "best_compiled_families",
    "dominated",
    "drop_refused_modes",
    "eager_stage",
    "freeze_suffixes",
    "mode_refusal",
    "optimizer_implementation",
    "proposed_by_another_kind",
    "reference_index",
    "train_step_cells",
    "variant_cells",
]
