"""A stored selection as text (``show``, the end of ``select``), as flat rows (``show --format csv|markdown``), and
two selections compared (``compare``). Pure: reads ``settings["select"]`` of the file alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.core.text_table import fmt_ms, fmt_rate, text_table
from clsbench.results.schema import BenchmarkResult

KEY = "select"

#: The flat rows' first columns (``show --format csv``).
FIRST_COLUMNS = ("result_file", "rank", "card", "status", "config")


def facts_of(result: BenchmarkResult) -> dict[str, Any]:
    facts = result.settings.get(KEY)
    return facts if isinstance(facts, dict) else {}


def _money(value: float | None, currency: str) -> str:
    """A cost: whole units from 100, cents from 1, three significant figures below (a cost per million images
    of a fast card is a fraction of a cent per thousand)."""
    if value is None:
        return "-"
    return f"{currency}{value:,.0f}" if value >= 100 else f"{currency}{value:.2f}" if value >= 1 else \
        f"{currency}{value:.3g}"


def _ranged(value: Any, low: Any, high: Any, fmt: Any) -> str:
    """``value`` and, when the repeats spread it, ``(low-high)``."""
    text = fmt(value)
    if value is None or low is None or high is None or fmt(low) == text == fmt(high):
        return text
    return f"{text} ({fmt(low)}-{fmt(high)})"


def _kwh(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def table_lines(facts: dict[str, Any]) -> list[str]:
    """The ranked table of a selection's answer."""
    answer = facts.get("answer") or {}
    currency = facts.get("currency") or "$"
    heading = (facts.get("requirement") or {}).get("latency_heading") or "p99 ms"
    header = ("rank", "card", "config", "knee", "img/s/card", "cards", "cost/h", "cost/M img", "kWh/M img",
              "energy/M img", heading, "note")
    rows = []
    for r in answer.get("rows") or []:
        money = (lambda v: _money(v, currency))  # noqa: E731 - one formatter per column of this table
        rows.append((
            str(r["rank"]), r["card"], r["config"], "-" if r.get("knee_batch") is None else f"b{r['knee_batch']}",
            _ranged(r["capacity_img_s"], r["capacity_min_img_s"], r["capacity_max_img_s"], fmt_rate),
            _ranged(r["cards"], r.get("cards_min"), r.get("cards_max"), str),
            _ranged(r.get("cost_per_h"), r.get("cost_per_h_min"), r.get("cost_per_h_max"), money),
            _ranged(r.get("cost_per_m_images"), r.get("cost_per_m_images_min"), r.get("cost_per_m_images_max"), money),
            _kwh(r.get("kwh_per_m_images")), money(r.get("energy_cost_per_m_images")), fmt_ms(r.get("p99_ms")),
            "; ".join(r.get("notes") or []) or "-"))
    return text_table(header, rows, right={0, 4, 5, 6, 7, 8, 9, 10})


def _prices_text(facts: dict[str, Any]) -> str:
    from clsbench.procedures.select.prices import Price

    currency = facts.get("currency") or "$"
    parts = []
    for card, p in (facts.get("answer") or {}).get("prices", {}).items():
        price = Price(name=p["name"], hourly=p["hourly"], source=p["source"], purchase=p.get("purchase"),
                      years=p.get("years"), utilisation=p.get("utilisation"))
        alias = "" if p["name"] == card else f" as {p['name']}"
        parts.append(f"{card}{alias}: {price.basis(currency)}")
    kwh = facts.get("kwh_price")
    cents = None if kwh is None else f"{kwh:.2f}" if round(kwh, 2) == kwh else f"{kwh:g}"  # $0.30, $0.125
    parts.append("electricity: " + ("not priced" if kwh is None else f"{currency}{cents}/kWh"))
    return "; ".join(parts) if parts else "none"


def _filters_text(facts: dict[str, Any]) -> str | None:
    f = facts.get("filters") or {}
    parts = [f"{name} {', '.join(f[key])}" for key, name in (("modes", "mode"), ("precisions", "precision"),
                                                             ("backends", "backend")) if f.get(key)]
    if f.get("no_compile"):
        parts.append("no compile")
    if f.get("input_size"):
        parts.append(f"input size {f['input_size']}")
    if facts.get("max_cards"):
        parts.append(f"at most {facts['max_cards']} cards")
    return "; ".join(parts) or None


def render_select(facts: dict[str, Any]) -> str:
    """Everything ``show`` prints for a selection: what was asked, the ranked table, the excluded cards, the notes
    and the verdict."""
    if not facts:
        return "select: no selection in this file\n"
    req = facts.get("requirement") or {}
    answer = facts.get("answer") or {}
    headroom = facts.get("headroom") or 0.0
    lines = [f"select: {facts.get('model')}, {req.get('text')}"
             + (f", headroom {headroom:.0%}" if headroom else "")
             + f": the cards must deliver {answer.get('need_text', '-')}"]
    lines.append(f"prices: {_prices_text(facts)}")
    filters = _filters_text(facts)
    if filters:
        lines.append(f"filters: {filters}")
    inputs = facts.get("inputs") or []
    cards = sorted({i.get("card") for i in inputs if i.get("card")})
    lines.append(f"inputs: {len(inputs)} result file{'s' if len(inputs) != 1 else ''} on {len(cards)} "
                 f"card{'s' if len(cards) != 1 else ''}")
    lines += ["", *table_lines(facts)]
    excluded = answer.get("excluded") or []
    if excluded:
        lines += ["", "excluded:"] + [f"  {e['card']}: {e['reason']}" for e in excluded]
    notes = list(answer.get("notes") or [])
    if answer.get("unpriced"):
        notes.append("no price for " + ", ".join(answer["unpriced"]) + ": listed without cost, ranked after priced "
                     "cards by cards needed")
    notes.append("energy: GPU board energy at the measured load (NVML), '-' where the results hold no telemetry")
    lines += ["", "notes:"] + [f"  {n}" for n in notes]
    lines += ["", f"verdict: {answer.get('verdict', '-')}"]
    return "\n".join(lines) + "\n"


def select_rows(result: BenchmarkResult, result_file: str) -> list[dict[str, Any]]:
    """Flat rows of a selection: one per ranked card, then one per excluded card."""
    facts = facts_of(result)
    answer = facts.get("answer") or {}
    head = {"result_file": result_file, "model": facts.get("model"),
            "requirement": (facts.get("requirement") or {}).get("text"), "currency": facts.get("currency")}
    rows = []
    for r in answer.get("rows") or []:
        flat = {k: v for k, v in r.items() if k not in ("notes", "scaling")}
        rows.append({**head, "status": "meets", **flat, "notes": "; ".join(r.get("notes") or [])})
    for e in answer.get("excluded") or []:
        rows.append({**head, "rank": None, "card": e["card"], "status": "excluded", "config": None,
                     "notes": e["reason"]})
    return rows


def _row_map(result: BenchmarkResult) -> dict[str, dict[str, Any]]:
    return {r["card"]: r for r in (facts_of(result).get("answer") or {}).get("rows") or []}


def _changed(a: dict[str, Any], b: dict[str, Any], key: str) -> bool:
    return a.get(key) != b.get(key)


def compare_selections(results: Sequence[BenchmarkResult], names: Sequence[str], alpha: float) -> Any:
    """``compare`` of selections: against the first, what changed in the question (requirement, prices, filters,
    inputs) and in the answer (the winner, each card's configuration, cards needed, cost, rank, exclusions)."""
    from clsbench.procedures.base import ProcedureComparison

    base, base_name = facts_of(results[0]), names[0]
    lines, rows, data = [f"select: compared with {base_name}"], [], {"baseline": base_name, "others": []}
    currency = base.get("currency") or "$"
    for result, name in zip(results[1:], names[1:], strict=True):
        other = facts_of(result)
        changes = []
        for key, what in (("requirement", "requirement"), ("filters", "filters"), ("headroom", "headroom"),
                          ("kwh_price", "kWh price"), ("max_cards", "--max-cards")):
            if _changed(base, other, key):
                left = (base.get(key) or {}).get("text") if key == "requirement" else base.get(key)
                right = (other.get(key) or {}).get("text") if key == "requirement" else other.get(key)
                changes.append(f"{what}: {left} -> {right}")
        base_prices = (base.get("answer") or {}).get("prices") or {}
        other_prices = (other.get("answer") or {}).get("prices") or {}
        for card in sorted(set(base_prices) | set(other_prices)):
            a, b = (base_prices.get(card) or {}).get("hourly"), (other_prices.get(card) or {}).get("hourly")
            if a != b:
                changes.append(f"price of {card}: {_money(a, currency)}/h -> {_money(b, currency)}/h")
        a_inputs = {i["name"] for i in base.get("inputs") or []}
        b_inputs = {i["name"] for i in other.get("inputs") or []}
        changes += [f"input added: {n}" for n in sorted(b_inputs - a_inputs)]
        changes += [f"input removed: {n}" for n in sorted(a_inputs - b_inputs)]
        a_rows, b_rows = _row_map(results[0]), _row_map(result)
        a_first = next(iter(a_rows.values()), None)
        b_first = next(iter(b_rows.values()), None)
        if (a_first or {}).get("card") != (b_first or {}).get("card"):
            changes.append(f"winner: {(a_first or {}).get('card')} -> {(b_first or {}).get('card')}")
        for card in list(a_rows) + [c for c in b_rows if c not in a_rows]:
            a, b = a_rows.get(card), b_rows.get(card)
            if a is None or b is None:
                changes.append(f"{card}: {'now meets it' if a is None else 'no longer meets it'}")
                rows.append({"other": name, "card": card, "what": "meets", "before": a is not None,
                             "after": b is not None})
                continue
            for key, what, fmt in (("config", "configuration", str), ("cards", "cards", str),
                                   ("cost_per_h", "cost/h", lambda v: _money(v, currency)),
                                   ("cost_per_m_images", "cost/M img", lambda v: _money(v, currency)),
                                   ("rank", "rank", str)):
                if _changed(a, b, key):
                    changes.append(f"{card}: {what} {fmt(a.get(key))} -> {fmt(b.get(key))}")
                    rows.append({"other": name, "card": card, "what": key, "before": a.get(key),
                                 "after": b.get(key)})
        verdicts = ((base.get("answer") or {}).get("verdict"), (other.get("answer") or {}).get("verdict"))
        lines += ["", f"{name}:"] + [f"  {c}" for c in changes or ["nothing changed"]]
        lines += [f"  verdict before: {verdicts[0]}", f"  verdict after:  {verdicts[1]}"]
        data["others"].append({"name": name, "changes": changes, "verdicts": list(verdicts)})
    return ProcedureComparison(text="\n".join(lines) + "\n", data=data, rows=rows)
