"""The built-in ``pipeline`` kind of ``clsbench tune`` (``tune --data DIR``, train only; the last kind registered):
the best compute candidates (with a captured step among them where one was measured: :func:`pipeline_leaders`)
measured again on real data under each pipeline's most tuned setting (:func:`pipeline_settings`); the synthetic cells
stay in the file as the ceilings of those real-data cells. It keeps its :data:`PIPELINE_LEADERS` in an exhaustive
search too: it measures the winners' input pipelines, not more candidates.

It registers after the backend kind (:mod:`clsbench.procedures.tune.backend_kind`, imported here for that order).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import clsbench.procedures.tune.backend_kind  # noqa: F401 - the other kinds register first: the registry keeps the order
from clsbench.procedures.tune.kinds import PRIORITY, CandidateKind, Rounds, register_kind

if TYPE_CHECKING:
    from clsbench.core.data_settings import DataSettings
    from clsbench.procedures.tune.search import Search
    from clsbench.results.schema import Measurement

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


__all__ = ["PIPELINE_LEADERS", "PIPELINE_START_S", "pipeline_leaders", "pipeline_settings", "pipeline_skip_reason",
           "pipeline_workers", "stored_settings"]
