"""A card's measured training scaling efficiency, from ``scale`` results (:mod:`clsbench.procedures.scale`), and
the cards a training requirement needs with it.

The efficiency at k GPUs is the scale result's ``scaling_efficiency`` (img/s per GPU at k over img/s per GPU at its
baseline). For n cards the selection uses the efficiency measured at the smallest GPU count >= n, else (n beyond
every count measured) at the largest count: the only figure there is, said in the row. Of the strategies measured,
the one with the better efficiency at the largest count is used (DDP, normally). UNSTABLE or failed scale
measurements are not used. Without a scale result the selection assumes linear scaling and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.core.vocab import Status
from clsbench.procedures.select.candidates import Source

#: Most cards the selection considers for one requirement; beyond it a card is "too many".
MAX_CARDS_CONSIDERED = 100_000


@dataclass(frozen=True)
class Scaling:
    """Measured efficiencies of one card and model: ``points`` (GPU count, efficiency), counts above 1 only."""

    source: str
    strategy: str
    mode: str
    points: tuple[tuple[int, float], ...]

    def efficiency(self, cards: int) -> float:
        if cards <= 1:
            return 1.0
        above = [eff for gpus, eff in self.points if gpus >= cards]
        return above[0] if above else self.points[-1][1]

    def note(self, cards: int) -> str:
        if cards <= 1:
            return "one card: no scaling"
        gpus = next((g for g, _ in self.points if g >= cards), self.points[-1][0])
        held = "" if gpus >= cards else f", held for {cards}"
        return (f"scaling {self.efficiency(cards):.1%} measured at {gpus} GPUs ({self.strategy}, {self.mode}, "
                f"{self.source}{held})")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "strategy": self.strategy, "mode": self.mode,
                "points": [list(p) for p in self.points]}


LINEAR_NOTE = "assumes linear scaling (no scale result for this card)"


def scaling_of(sources: Sequence[Source], model: str, card: str) -> Scaling | None:
    """The card's scaling for ``model`` (see the module docstring), or None without a usable scale result."""
    best: Scaling | None = None
    for source in sources:
        if source.card != card or not isinstance(source.result.settings.get("scale"), dict):
            continue
        by_strategy: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for m in source.result.measurements:
            s = m.summary
            eff, gpus = s.get("scaling_efficiency"), s.get("gpus")
            if m.model != model or m.status != Status.OK or s.get("unstable") or not isinstance(gpus, int) \
                    or gpus < 2 or not isinstance(eff, (int, float)) or not eff > 0:
                continue
            by_strategy.setdefault((m.workload.removeprefix("train-"), m.mode), []).append((gpus, float(eff)))
        for (strategy, mode), points in by_strategy.items():
            found = Scaling(source.name, strategy, mode, tuple(sorted(points)))
            if best is None or found.points[-1][1] > best.points[-1][1]:
                best = found
    return best


def cards_needed(need_img_s: float, capacity: float, scaling: Scaling | None) -> int | None:
    """The fewest cards whose capacity, times the scaling efficiency at that count, reaches ``need_img_s``; None
    beyond :data:`MAX_CARDS_CONSIDERED`."""
    n = max(1, math.ceil(need_img_s / capacity - 1e-9))
    if scaling is None:
        return n if n <= MAX_CARDS_CONSIDERED else None
    while n <= MAX_CARDS_CONSIDERED:
        if n * capacity * scaling.efficiency(n) >= need_img_s * (1 - 1e-12):
            return n
        n += 1
    return None
