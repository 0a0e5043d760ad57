"""The selection (pure): from loaded results, the settings and the prices, one ranked row per card that meets the
requirement with its best configuration, each other card with the reason it is excluded, the points of the cost
against latency chart, and a one-line verdict. The answer is JSON-ready: it is stored in the result file, and
``show``, the exports, the report and ``compare`` read it from there.

Definitions (docs/select.md has the long form):

* need = the requirement's img/s x (1 + headroom); cards needed = the fewest cards n with
  n x capacity x efficiency(n) >= need (efficiency 1 but for training with a ``scale`` result).
* A card's best configuration: the fewest cards, then the least energy per image, then the highest capacity.
* cost/h = n x the card's hourly price; cost per million images = cost/h over the images the n cards process in an
  hour (the required rate; for training, their whole rate: the job ends early) x 10^6.
* energy per million images (kWh) = measured J/img x 10^6 / 3.6 x 10^6 (GPU board energy at the measured load);
  its cost = that x the kWh price.
* ranges: the same figures from the slowest and the fastest repeat of the configuration.
* rank: priced cards by cost per million images plus its energy cost where measured and priced, then unpriced cards
  by cards needed and capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.analysis.knee import knee
from clsbench.core.text_table import fmt_rate
from clsbench.errors import InvalidInputError
from clsbench.procedures.select.candidates import Candidate, CardCells, Source, cells_of
from clsbench.procedures.select.cards import match_card
from clsbench.procedures.select.prices import Price
from clsbench.procedures.select.scaling import LINEAR_NOTE, MAX_CARDS_CONSIDERED, Scaling, cards_needed, scaling_of
from clsbench.procedures.select.settings import SelectSettings

#: Joules in a kilowatt-hour.
J_PER_KWH = 3.6e6
MILLION = 1e6


class RequirementNotMetError(InvalidInputError):
    """No card the results hold meets the requirement (exit 2, with every card's reason in the line)."""


def _reason(cells: CardCells, model: str, what: str) -> str:
    """Why a card with no candidate is excluded (see docs/select.md for the wording)."""
    if not cells.measured_model:
        return f"not measured: no result of {model}"
    if not cells.measured_kind:
        return f"not measured: no {what} result of {model}"
    if cells.why:
        return cells.why
    if cells.failed:
        if all(r == "oom" for r in cells.failed):
            return "out of memory at every batch measured"
        return f"every measurement failed ({', '.join(sorted(set(cells.failed)))})"
    if cells.other_sizes:
        return f"measured only at input size {', '.join(str(s) for s in sorted(cells.other_sizes))}"
    if cells.filtered:
        return f"all {cells.filtered} configurations left out by the filters"
    return f"no usable {what} figure of {model}"


def _prices(settings: SelectSettings, cards: Sequence[str]) -> dict[str, Price]:
    out: dict[str, Price] = {}
    for price in settings.price_list:
        card = match_card(price.name, cards, what=f"{price.source} {price.name}")
        if card in out:
            raise InvalidInputError(f"{card} is priced twice ({out[card].name} and {price.name})",
                                    "give each card one price")
        out[card] = price
    return out


def _knee(chosen: Candidate, stable: Sequence[Candidate]) -> int | None:
    if chosen.setting is not None:
        return None
    points = [(c.batch_size, c.capacity_img_s) for c in stable if c.line == chosen.line and c.setting is None]
    if len({b for b, _ in points}) < 2:
        return None
    found = knee(points)
    return found[0] if found else None


class _Costing:
    """The figures of one candidate at the cards it needs (see the module docstring)."""

    def __init__(self, settings: SelectSettings, candidate: Candidate, scaling: Scaling | None,
                 price: Price | None) -> None:
        need = settings.need
        self.need_img_s = float(need["target_img_s"]) * (1 + settings.headroom)
        self.kind = settings.requirement_kind
        self.settings, self.c, self.scaling, self.price = settings, candidate, scaling, price
        self.cards = cards_needed(self.need_img_s, candidate.capacity_img_s, scaling)
        self.cards_low = cards_needed(self.need_img_s, candidate.capacity_max, scaling)
        self.cards_high = cards_needed(self.need_img_s, candidate.capacity_min, scaling)

    def fits(self) -> bool:
        limit = self.settings.max_cards
        return self.cards is not None and (limit is None or self.cards <= limit)

    def efficiency(self, cards: int) -> float:
        return self.scaling.efficiency(cards) if self.scaling is not None else 1.0

    def cost_per_m(self, cards: int | None, capacity: float) -> float | None:
        if self.price is None or cards is None:
            return None
        rate = self.kind.rate(self.settings.need, cards, capacity, self.efficiency(cards))
        return cards * self.price.hourly / (rate * 3600) * MILLION

    def kwh_per_m(self) -> float | None:
        jpi = self.c.joules_per_image
        return None if jpi is None else jpi * MILLION / J_PER_KWH

    def energy_cost_per_m(self) -> float | None:
        kwh = self.kwh_per_m()
        return None if kwh is None or self.settings.kwh is None else kwh * self.settings.kwh

    def rank_key(self) -> tuple[float, ...]:
        energy = self.kwh_per_m()
        return (float(self.cards or 0), energy if energy is not None else float("inf"), -self.c.capacity_img_s,
                self.c.p99_ms if self.c.p99_ms is not None else float("inf"))

    def row(self, stable: Sequence[Candidate], unstable: int) -> dict[str, Any]:
        c, n = self.c, int(self.cards or 0)
        hourly = self.price.hourly if self.price is not None else None
        rate = self.kind.rate(self.settings.need, n, c.capacity_img_s, self.efficiency(n))
        notes = [c.estimate] if c.estimate else []
        if self.kind.scaling:
            notes.append(self.scaling.note(n) if self.scaling is not None else LINEAR_NOTE)
        if unstable:
            notes.append(f"{unstable} UNSTABLE configuration{'s' if unstable > 1 else ''} left out")
        row: dict[str, Any] = {
            "card": c.card, "source": c.source, "config": c.config, "mode": c.mode, "backend": c.backend,
            "batch_size": c.batch_size, "setting": c.setting, "input_size": c.input_size, "data": c.data,
            "knee_batch": _knee(c, stable), "capacity_img_s": c.capacity_img_s,
            "capacity_min_img_s": c.capacity_min, "capacity_max_img_s": c.capacity_max,
            "cards": n, "cards_min": self.cards_low, "cards_max": self.cards_high,
            "efficiency": self.efficiency(n), "scaling": self.scaling.to_dict() if self.scaling else None,
            "rate_img_s": rate, "price_per_card_h": hourly,
            "cost_per_h": None if hourly is None else n * hourly,
            "cost_per_h_min": None if hourly is None or self.cards_low is None else self.cards_low * hourly,
            "cost_per_h_max": None if hourly is None or self.cards_high is None else self.cards_high * hourly,
            "cost_per_m_images": self.cost_per_m(n, c.capacity_img_s),
            "cost_per_m_images_min": self.cost_per_m(self.cards_low, c.capacity_max),
            "cost_per_m_images_max": self.cost_per_m(self.cards_high, c.capacity_min),
            "joules_per_image": c.joules_per_image, "kwh_per_m_images": self.kwh_per_m(),
            "energy_cost_per_m_images": self.energy_cost_per_m(), "p99_ms": c.p99_ms,
            "estimate": c.estimate, "notes": notes,
        }
        total = self.settings.need.get("total_images")
        if total:
            row["job_hours"] = float(total) / rate / 3600
            row["job_cost"] = None if hourly is None else row["job_hours"] * n * hourly
            currency = self.settings.symbol
            notes.insert(0, f"job {row['job_hours']:.3g} h" + ("" if row["job_cost"] is None else
                                                              f", {currency}{row['job_cost']:,.0f} in all"))
        return row


def _total(row: dict[str, Any]) -> float:
    return (row["cost_per_m_images"] or 0.0) + (row["energy_cost_per_m_images"] or 0.0)


def _rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    priced = sorted((r for r in rows if r["cost_per_m_images"] is not None), key=lambda r: (_total(r), r["cards"]))
    unpriced = sorted((r for r in rows if r["cost_per_m_images"] is None),
                      key=lambda r: (r["cards"], -r["capacity_img_s"]))
    ranked = priced + unpriced
    for index, row in enumerate(ranked, 1):
        row["rank"] = index
    return ranked


def verdict(rows: Sequence[dict[str, Any]], requirement_text: str, names: dict[str, str], currency: str) -> str:
    """The one-line answer: the first card, how many, at what cost, and how the next compares."""
    first = rows[0]
    name = names.get(first["card"], first["card"])
    if first["cost_per_h"] is None:
        return (f"{name} x{first['cards']} meets {requirement_text} with the fewest cards "
                "(no prices given: ranked by cards needed)")
    line = f"{name} x{first['cards']} at {currency}{first['cost_per_h']:,.2f}/h meets {requirement_text}"
    if len(rows) < 2:
        return line + "; no other card meets it"
    second = rows[1]
    other = f"{names.get(second['card'], second['card'])} x{second['cards']}"
    if second["cost_per_h"] is None:
        return line + f"; {other} also meets it (no price given)"
    more = _total(second) / _total(first) - 1 if _total(first) else 0.0
    return line + f"; {other} costs {more:.0%} more per image"


def _sizes_check(cells: dict[str, CardCells], settings: SelectSettings) -> None:
    sizes = sorted({c.input_size for card in cells.values() for c in card.candidates if c.input_size is not None})
    if settings.input_size is None and len(sizes) > 1:
        raise InvalidInputError(f"the results measured {settings.model} at input sizes "
                                f"{', '.join(str(s) for s in sizes)}: a card's figures at one size say nothing of "
                                "another", f"choose one with --input-size, e.g. --input-size {sizes[-1]}")


def select_answer(settings: SelectSettings, sources: Sequence[Source]) -> dict[str, Any]:
    """The answer (see the module docstring).

    Raises:
        InvalidInputError: no input holds the model; mixed input sizes; a price for a card with no results.
        RequirementNotMetError: no card meets the requirement (every card's reason in the line).
    """
    model = settings.filters.model
    if not any(m.model == model for s in sources for m in s.result.measurements):
        held = sorted({m.model for s in sources for m in s.result.measurements})
        raise InvalidInputError(f"no result file here holds {model} (they hold: {', '.join(held) or 'nothing'})",
                                "add result files that measured it, or check --model")
    kind = settings.requirement_kind
    cells = cells_of(sources)
    notes = kind.gather(sources, settings.filters, settings.need, cells)
    _sizes_check(cells, settings)
    prices = _prices(settings, list(cells))
    rows, excluded, points = [], [], []
    what = settings.need["workload"] if kind.workloads or kind.scaling else "serve or inference"
    for card, found in cells.items():
        stable = [c for c in found.candidates if not c.unstable]
        unstable = len(found.candidates) - len(stable)
        if not found.candidates:
            excluded.append({"card": card, "reason": _reason(found, model, what)})
            continue
        if not stable:
            excluded.append({"card": card, "reason": f"only UNSTABLE figures ({unstable} configuration"
                                                     f"{'s' if unstable > 1 else ''}): re-measure with more repeats "
                                                     "on a quiet machine"})
            continue
        scaling = scaling_of(sources, model, card) if kind.scaling else None
        costed = [_Costing(settings, c, scaling, prices.get(card)) for c in stable]
        fitting = [c for c in costed if c.fits()]
        for c in fitting:
            cost = c.cost_per_m(c.cards, c.c.capacity_img_s)
            if cost is not None:
                points.append({"card": card, "config": c.c.config, "cost_per_m_images": cost, "p99_ms": c.c.p99_ms,
                               "cards": c.cards, "estimate": c.c.estimate is not None})
        if not fitting:
            fewest = min((c.cards for c in costed if c.cards is not None), default=None)
            excluded.append({"card": card, "reason": (
                f"needs more than {MAX_CARDS_CONSIDERED:,} cards" if fewest is None else
                f"needs {fewest} cards at best, more than --max-cards {settings.max_cards}")})
            continue
        best = min(fitting, key=lambda c: c.rank_key())
        rows.append(best.row(stable, unstable))
    names = {card: price.name for card, price in prices.items()}
    if not rows:
        reasons = "; ".join(f"{e['card']}: {e['reason']}" for e in excluded)
        raise RequirementNotMetError(f"no card meets {settings.need['text']} for {model}: {reasons}",
                                     "relax the requirement or the filters, or measure more cards")
    ranked = _rank(rows)
    if any(r["capacity_min_img_s"] != r["capacity_max_img_s"] for r in ranked):
        notes.append("ranges in parentheses: the same figures from the slowest and the fastest repeat")
    return {"rows": ranked, "excluded": excluded, "points": points, "notes": notes,
            "need_img_s": float(settings.need["target_img_s"]) * (1 + settings.headroom),
            "priced_as": names, "prices": {card: price.to_dict() for card, price in prices.items()},
            "unpriced": [r["card"] for r in ranked if r["cost_per_h"] is None],
            "verdict": verdict(ranked, settings.need["text"], names, settings.symbol),
            "need_text": f"{fmt_rate(float(settings.need['target_img_s']) * (1 + settings.headroom))} img/s"}
