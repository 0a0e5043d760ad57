"""The configurations a card offers for a requirement: one :class:`Candidate` per measured cell (or serve setting),
with what the selection needs of it, and per card what was left out and why (:class:`CardCells`).

Pure: reads loaded results. Which cells a requirement takes is its kind's business
(:mod:`clsbench.procedures.select.kinds`); this module holds what every kind shares: the filters, the figures of
an ordinary cell, the reasons a card has nothing to offer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.vocab import Status
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, data_label

#: Mode modifiers that compile with torch.compile (``+freeze`` and ``+compiled-step`` need ``+compile``).
COMPILING_MODIFIERS = frozenset({"compile", "freeze", "compiled-step"})


@dataclass(frozen=True)
class Source:
    """One loaded input: the name it was given by (a path or a run id), the result and its card."""

    name: str
    result: BenchmarkResult
    card: str


@dataclass(frozen=True)
class Filters:
    """Which configurations may answer: the model, the allowed modes, precisions and backends, no compile, the
    input size (None: the one size the results hold)."""

    model: str
    modes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    no_compile: bool = False
    input_size: int | None = None

    def allows(self, mode: str, backend: str | None) -> bool:
        """Whether ``mode`` on ``backend`` passes the mode, precision, backend and compile filters."""
        tokens = mode.split("+")
        modifiers = {token.split(":")[0] for token in tokens[1:]}
        backend = backend or DEFAULT_BACKEND
        return ((not self.modes or mode in self.modes)
                and (not self.precisions or tokens[0] in self.precisions)
                and (not self.backends or backend in self.backends)
                and not (self.no_compile and modifiers & COMPILING_MODIFIERS))

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "modes": list(self.modes), "precisions": list(self.precisions),
                "backends": list(self.backends), "no_compile": self.no_compile, "input_size": self.input_size}


@dataclass(frozen=True)
class Candidate:
    """One configuration of one card that could answer the requirement.

    Attributes:
        capacity_img_s: what one card delivers in it (median over repeats; served: QPS within the bound).
        capacity_min, capacity_max: the lowest and highest repeat (equal to ``capacity_img_s`` for one figure).
        p99_ms: the 99th percentile latency the kind's heading names (None: not recorded).
        joules_per_image: measured GPU board energy per image (None: no telemetry).
        setting: a serve result's batching setting (``b128 d2ms i2``), else None.
        estimate: None for a measured answer; else how the figure was estimated, said in the row and the file.
        unstable: the figures were flagged UNSTABLE; such a candidate is listed, never used.
    """

    card: str
    source: str
    model: str
    workload: str
    mode: str
    backend: str
    batch_size: int
    input_size: int | None
    capacity_img_s: float
    capacity_min: float
    capacity_max: float
    p99_ms: float | None
    joules_per_image: float | None = None
    setting: str | None = None
    estimate: str | None = None
    unstable: bool = False
    data: str | None = None

    @property
    def config(self) -> str:
        """The configuration in words: mode, `` @backend`` unless eager, batch or serve setting, real data."""
        backend = "" if self.backend == DEFAULT_BACKEND else f" @{self.backend}"
        where = self.setting if self.setting else f"b{self.batch_size}"
        data = f" [{self.data}]" if self.data else ""
        return f"{self.mode}{backend} {where}{data}"

    @property
    def line(self) -> tuple[Any, ...]:
        """What a batch sweep varies over: the configuration but its batch size (for the knee)."""
        return (self.card, self.workload, self.mode, self.backend, self.input_size, self.data, self.setting is None)


@dataclass
class CardCells:
    """What one card's results hold for the requirement.

    Attributes:
        candidates: every usable configuration (stable or not: unstable ones are kept to be counted and named).
        measured_model: the card has some measurement of the model.
        measured_kind: ... of a workload the requirement takes.
        filtered: how many such cells the filters left out.
        failed: the reasons of cells that failed (``oom``, ``crash``, ...).
        other_sizes: input sizes of cells left out for being at another size.
        why: a kind's own reason the card offers nothing (a bound no setting meets), when it has one.
    """

    card: str
    candidates: list[Candidate] = field(default_factory=list)
    measured_model: bool = False
    measured_kind: bool = False
    filtered: int = 0
    failed: list[str] = field(default_factory=list)
    other_sizes: set[int] = field(default_factory=set)
    why: str | None = None


def cells_of(sources: Iterable[Source]) -> dict[str, CardCells]:
    """An empty :class:`CardCells` for every card of ``sources``, in the order first seen."""
    out: dict[str, CardCells] = {}
    for source in sources:
        out.setdefault(source.card, CardCells(source.card))
    return out


def _figure(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        else None


def run_candidate(source: Source, m: Measurement, *, p99_factor: float = 1.0,
                  estimate: str | None = None) -> Candidate | None:
    """A candidate from an ordinary ok cell (run, sweep, tune, soak): its median img/s, the lowest and highest
    repeat, its p99 (times ``p99_factor`` for an estimate), its J/img; None without a throughput."""
    summary = m.summary
    capacity = _figure(summary.get("throughput_img_s"))
    if capacity is None or capacity <= 0:
        return None
    by_repeat = [v for v in (_figure(x) for x in summary.get("throughput_img_s_by_repeat") or ()) if v]
    p99 = _figure((summary.get("latency_ms") or {}).get("p99"))
    return Candidate(
        card=source.card, source=source.name, model=m.model, workload=m.workload, mode=m.mode,
        backend=m.backend or DEFAULT_BACKEND, batch_size=m.batch_size, input_size=m.input_size,
        capacity_img_s=capacity, capacity_min=min(by_repeat, default=capacity),
        capacity_max=max(by_repeat, default=capacity), p99_ms=None if p99 is None else p99 * p99_factor,
        joules_per_image=_figure((summary.get("telemetry") or {}).get("joules_per_image")), estimate=estimate,
        unstable=bool(summary.get("unstable")), data=data_label(m.data))


def filtered(sources: Iterable[Source], filters: Filters, workloads: Iterable[str],
             cells: dict[str, CardCells]) -> Iterator[tuple[Source, CardCells, Measurement]]:
    """Each measurement of ``filters.model`` in ``workloads`` that the filters allow, whatever its status, with its
    card's :class:`CardCells`; on the way, each card records what it measured and what the filters left out."""
    wanted = set(workloads)
    for source in sources:
        card = cells[source.card]
        for m in source.result.measurements:
            if m.model != filters.model:
                continue
            card.measured_model = True
            if m.workload not in wanted:
                continue
            card.measured_kind = True
            if not filters.allows(m.mode, m.backend):
                card.filtered += 1
                continue
            if filters.input_size is not None and m.input_size is not None and m.input_size != filters.input_size:
                card.other_sizes.add(m.input_size)
                continue
            yield source, card, m


def gather_cells(sources: Iterable[Source], filters: Filters, workloads: Iterable[str], cells: dict[str, CardCells],
                 *, p99_factor: float = 1.0, estimate: str | None = None) -> None:
    """Add every ordinary cell of ``filters.model`` in ``workloads`` to its card's :class:`CardCells`: usable ones
    as candidates, the rest counted with their reason."""
    for source, card, m in filtered(sources, filters, workloads, cells):
        if m.status != Status.OK:
            card.failed.append(m.reason or m.status)
            continue
        candidate = run_candidate(source, m, p99_factor=p99_factor, estimate=estimate)
        if candidate is not None:
            card.candidates.append(candidate)
