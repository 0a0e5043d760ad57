"""``--qps N --p99-ms B``: N queries per second (one image each) with the 99th percentile latency within B ms.

From ``serve`` results: per served line (mode @backend) and batching setting, the highest target QPS of a VALID
LoadGen Server run whose p99 was within B (a run VALID under its own bound and within B meets B too; a run made
INVALID only by a bound tighter than B is not counted: conservative). A card with no serve result of the model is
estimated from its ``infer-throughput`` and ``infer-latency`` cells: capacity = img/s at that batch, p99 under load
= :data:`ESTIMATE_P99_FACTOR` x the batch's measured p99 time (a query waits for the batch in service, then rides
in its own). Every such row says it is an estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.text_table import fmt_ms, fmt_rate
from clsbench.core.vocab import Status
from clsbench.procedures.select.candidates import Candidate, CardCells, Filters, Source, filtered, gather_cells
from clsbench.procedures.select.kinds import REQUIREMENTS, RequirementKind, positive, workload_for
from clsbench.results.schema import DEFAULT_BACKEND, Measurement
from clsbench.serving.serve_rows import step_row

#: An estimate's p99 under load: the batch in service plus the query's own batch (see the module docstring).
ESTIMATE_P99_FACTOR = 2.0
ESTIMATE_NOTE = f"estimate from run cells (p99 ~ {ESTIMATE_P99_FACTOR:g} x batch time)"
SERVER_WORKLOAD = "serve-server"


def _setting_candidates(source: Source, m: Measurement, bound_ms: float) -> tuple[list[Candidate], float | None]:
    """One candidate per batching setting of a Server measurement that met the bound, and the lowest p99 of any
    VALID run (for the reason when none did)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for step in m.repeats:
        row = step_row(dict(step))
        groups.setdefault(row["setting"] or "-", []).append({**row, "max_batch": (step.get("setting") or {})
                                                             .get("max_batch")})
    out, lowest = [], None
    for setting, rows in groups.items():
        valid = [r for r in rows if r["valid"] and r["p99_ms"] is not None and r["target_qps"]]
        if valid:
            p99 = min(r["p99_ms"] for r in valid)
            lowest = p99 if lowest is None else min(lowest, p99)
        meeting = [r for r in valid if r["p99_ms"] <= bound_ms]
        if not meeting:
            continue
        best = max(meeting, key=lambda r: r["target_qps"])
        qps = float(best["target_qps"])
        out.append(Candidate(
            card=source.card, source=source.name, model=m.model, workload=SERVER_WORKLOAD, mode=m.mode,
            backend=m.backend or DEFAULT_BACKEND, batch_size=int(best["max_batch"] or m.batch_size),
            input_size=m.input_size, capacity_img_s=qps, capacity_min=qps, capacity_max=qps,
            p99_ms=float(best["p99_ms"]), setting=setting))
    return out, lowest


class Served(RequirementKind):
    options = ("qps", "p99_ms")
    latency_heading = "p99 ms"

    def requirement(self, given: Mapping[str, Any], workload: str | None) -> dict[str, Any]:
        workload_for("served", self, workload)  # it takes none: one line if one was given
        qps = positive(given["qps"], "qps", "5000")
        bound = positive(given["p99_ms"], "p99_ms", "15")
        return {"kind": "served", "qps": qps, "p99_ms": bound, "target_img_s": qps, "workload": SERVER_WORKLOAD,
                "text": f"{fmt_rate(qps)} qps at p99 <= {bound:g} ms"}

    def gather(self, sources: Sequence[Source], filters: Filters, requirement: Mapping[str, Any],
               cells: dict[str, CardCells]) -> list[str]:
        bound = float(requirement["p99_ms"])
        served: set[str] = set()
        lowest: dict[str, float] = {}
        for source, card, m in filtered(sources, filters, [SERVER_WORKLOAD], cells):
            served.add(source.card)
            if m.status != Status.OK:
                card.failed.append(m.reason or m.status)
                continue
            found, low = _setting_candidates(source, m, bound)
            card.candidates.extend(found)
            if low is not None:
                lowest[source.card] = min(low, lowest.get(source.card, low))
        for name in served:
            if not cells[name].candidates:
                best = lowest.get(name)
                cells[name].why = (f"p99 <= {bound:g} ms not met at any serve setting"
                                   + (f" (lowest p99 of a VALID run: {fmt_ms(best)} ms)" if best is not None else
                                      " (no VALID Server run)"))
        return self._estimates(sources, filters, bound, cells, served)

    def _estimates(self, sources: Sequence[Source], filters: Filters, bound: float, cells: dict[str, CardCells],
                   served: set[str]) -> list[str]:
        """Estimates for the cards without a serve result of the model (see the module docstring)."""
        unserved = [source for source in sources if source.card not in served]
        if not unserved:
            return []
        estimated: dict[str, CardCells] = {name: CardCells(name) for name in {s.card for s in unserved}}
        gather_cells(unserved, filters, ["infer-throughput", "infer-latency"], estimated,
                     p99_factor=ESTIMATE_P99_FACTOR, estimate=ESTIMATE_NOTE)
        notes = []
        for name, found in estimated.items():
            card = cells[name]
            card.measured_model = card.measured_model or found.measured_model
            card.measured_kind = card.measured_kind or found.measured_kind
            card.filtered += found.filtered
            card.failed += found.failed
            card.other_sizes |= found.other_sizes
            within = [c for c in found.candidates if c.p99_ms is not None and c.p99_ms <= bound]
            card.candidates.extend(within)
            if found.candidates and not within:
                best = min((c.p99_ms for c in found.candidates if c.p99_ms is not None), default=None)
                card.why = (f"estimated p99 <= {bound:g} ms not met at any batch (no serve result; lowest "
                            f"estimate {fmt_ms(best)} ms)")
            if within:
                notes.append(f"{name}: no serve result of {filters.model}; its rows are estimates from run cells "
                             f"(p99 under load ~ {ESTIMATE_P99_FACTOR:g} x the batch's measured p99 time)")
        return notes


REQUIREMENTS.register("served", Served())
