"""The kinds of candidate ``clsbench tune`` tries, one registry entry each (:data:`TUNE_KINDS`).

A kind says which rung its candidates enter (``screen``: a short stop rule, for the many cheap ones; ``longer``: the
full stop rule at once, for those whose build dominates their cost, since screening them would pay the build twice),
how long its build takes before anything was measured here (the cost model's prior, per device type), what the
up-front plan expects of it (its stages, each with a count and a priority for when the budget cannot hold
everything) and, as a generator, the rounds of cells it proposes from what the search measured so far.

Adding a kind (say Inductor freezing, or a training-step option) is one :func:`register_kind` call: the search, the
budget, the plan, the halving and the result file take it from there. The built-in kinds, in the order they run, are
registered by :mod:`clsbench.procedures.tune.mode_kinds` (eager, compile, freeze, train-step, max-autotune),
:mod:`clsbench.procedures.tune.backend_kind` (backend) and :mod:`clsbench.procedures.tune.pipeline_kind` (pipeline,
the last), which the package imports in that order.

This module holds the registry only: a kind's functions take the search (:class:`clsbench.procedures.tune.search.
Search`, which imports this module) and read what they need from it, so the kinds sit above the search in the
package's import order and this module below it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from clsbench.core.registry import Registry

if TYPE_CHECKING:
    from clsbench.core.plan import Cell

#: Rounds a kind yields: (stage name, the cells to measure now). The search measures them, then resumes the
#: generator, which reads what it needs from the search.
Rounds = Iterator[tuple[str, list["Cell"]]]

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
#: With ``--data`` the winner must be a real-data cell: the pipeline stage
#: (:mod:`clsbench.procedures.tune.pipeline_kind`) is planned as early as the confirmation.
PRIORITY["pipeline"] = PRIORITY["confirm"]




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
        stages: ``search -> [Stage or (stage, expected candidates, priority)]``: what the up-front plan expects
            (``search``: the :class:`~clsbench.procedures.tune.search.Search` asking, as for the functions below).
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
    stages: Callable[[Any], list[Stage] | list[tuple[str, int, int]]]
    rounds: Callable[[Any], Rounds]
    enabled: Callable[[Any], bool] = lambda search: True
    cost_key: Callable[[Cell], str] | None = None
    priors: Callable[[str], Mapping[str, float]] = lambda device_type: {}
    build_key: Callable[[Cell], Hashable] | None = None


TUNE_KINDS: Registry[CandidateKind] = Registry("tune candidate kind")


def register_kind(kind: CandidateKind, *, replace: bool = False) -> CandidateKind:
    """Add a kind of candidate to every search (after those registered before it)."""
    if kind.rung not in ("screen", "longer"):
        raise ValueError(f"a kind enters the screen or the longer rung, not {kind.rung!r}")
    return TUNE_KINDS.register(kind.name, kind, replace=replace)


def kinds(search: Any) -> list[CandidateKind]:
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


__all__ = ["PRIORITY", "TUNE_KINDS", "CandidateKind", "Rounds", "Stage", "build_key", "cost_key", "cost_priors",
           "kinds", "register_kind"]
