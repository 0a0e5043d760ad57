"""The built-in ``backend`` kind of ``clsbench tune`` (inference only): every inference backend the search names, in
the weight-cast form of the best eager precision (:data:`clsbench.procedures.tune.settings.BACKEND_PRECISION`), with
and without ``+cl``, and for infer-latency on a GPU replayed as CUDA graphs too, at the batch size of the best eager
result. What a backend cannot express here is pruned with its reason, without a worker.

It registers after the mode kinds (:mod:`clsbench.procedures.tune.mode_kinds`, imported here for that order) and
before the pipeline kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import clsbench.procedures.tune.mode_kinds  # noqa: F401 - the mode kinds register first: the registry keeps the order
from clsbench.procedures.tune.kinds import PRIORITY, CandidateKind, Rounds, Stage, register_kind
from clsbench.procedures.tune.settings import BACKEND_PRECISION, MAX_BACKEND_FAMILIES
from clsbench.results.schema import DEFAULT_BACKEND

if TYPE_CHECKING:
    from clsbench.core.plan import Cell
    from clsbench.procedures.tune.search import Search


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
    """``backend:FAMILY``: each build family is priced apart (a TorchScript trace took 1-5 s on the H200, an
    AOTInductor build 54-72 s), the backends of one family as one (``export`` and ``export-frozen``: on an H100 a tune
    observed export's build at 107 s and still priced export-frozen at its 70 s prior;
    :func:`clsbench.backends.base.build_family`)."""
    return _cost_key(cell.backend)


def _cost_key(backend: str) -> str:
    from clsbench.backends.base import build_family

    return f"backend:{build_family(backend)}"


def artifact_key(cell: Cell) -> tuple[str, str, int]:
    """(backend, mode without ``+cudagraph``, batch): what decides a backend candidate's artifact in this search."""
    from clsbench.backends.base import artifact_mode

    return (cell.backend, artifact_mode(cell.mode), cell.batch_size)


def _backend_priors(device_type: str) -> dict[str, float]:
    from clsbench.backends import BACKENDS
    from clsbench.backends.base import build_prior_s

    # By name, not registration order, so the stored cost model reads the same whatever registered when; a family
    # of several backends takes the largest of their estimates.
    priors: dict[str, float] = {}
    for name in sorted(BACKENDS.names()):
        if name != DEFAULT_BACKEND:
            key = _cost_key(name)
            priors[key] = max(priors.get(key, 0.0), build_prior_s(BACKENDS.get(name), device_type))
    return priors


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
                costs.append((_cost_key(name), (name, layout) in built))
                built.add((name, layout))
    return [Stage("backend", len(costs), _backend_priority(search), tuple(costs))]


register_kind(CandidateKind(
    name="backend", rung="longer", build_s={"cuda": 90.0, "cpu": 30.0},
    stages=_backend_stages, rounds=_backend_rounds, enabled=lambda s: bool(s.backends),
    cost_key=backend_cost_key, priors=_backend_priors, build_key=artifact_key))


__all__ = ["artifact_key", "backend_cost_key", "backend_layouts", "backend_modes", "backend_precisions",
           "runnable_backends"]
