"""``select()``: the selection over loaded results, written as a versioned result file (atomically, never over an
existing file): ``settings["select"]`` holds the inputs, prices, requirement, filters and the answer; the file has
no measurements of its own."""

from __future__ import annotations

import datetime as _dt
import platform
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.errors import InvalidInputError
from clsbench.procedures.select.analysis import select_answer
from clsbench.procedures.select.candidates import Source
from clsbench.procedures.select.cards import card_of
from clsbench.procedures.select.settings import SELECT_FORMAT, SelectSettings
from clsbench.results import io as result_io
from clsbench.results.schema import TOOL_NAME, BenchmarkResult
from clsbench.results.store import RUN_ID_LENGTH
from clsbench.version import __version__


@dataclass(frozen=True)
class SelectOutcome:
    """What ``select`` returns: the result written (``path``; None when not written) and its facts."""

    result: BenchmarkResult
    facts: dict[str, Any]
    path: Path | None
    skipped: tuple[str, ...] = ()


def sources_of(loaded: Sequence[tuple[str, BenchmarkResult]]) -> tuple[list[Source], list[str]]:
    """The inputs with their card; a file that records no card is skipped with a note."""
    sources, skipped = [], []
    for name, result in loaded:
        card = card_of(result)
        if card is None:
            skipped.append(f"{name}: records no GPU or CPU name; left out")
            continue
        sources.append(Source(name, result, card))
    return sources, skipped


def _kind_of(result: BenchmarkResult) -> str:
    for key in ("serve", "scale", "sweep", "tune", "soak", "diagnose", "select"):
        if key in result.settings:
            return key
    return "run"


def select(settings: SelectSettings, loaded: Sequence[tuple[str, BenchmarkResult]], output: str | Path | None,
           *, skipped: Sequence[str] = ()) -> SelectOutcome:
    """Select over ``loaded`` (name, result) pairs and write the answer to ``output`` (None: not written).

    Raises:
        ResultFileError: ``output`` exists or cannot be written (checked before anything is selected).
        InvalidInputError: no input, no input holding the model, a price for a card with no results, ...
        RequirementNotMetError: no card meets the requirement.
    """
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path, exists_hint="choose another -o/--output")
    sources, more = sources_of(loaded)
    if not sources:
        raise InvalidInputError("no result file to select from", "name result files, directories or run ids")
    answer = select_answer(settings, sources)
    kind = settings.requirement_kind
    facts = {
        "format": SELECT_FORMAT, "model": settings.filters.model,
        "requirement": {**settings.need, "latency_heading": kind.latency_heading},
        "filters": settings.filters.to_dict(), "headroom": settings.headroom, "max_cards": settings.max_cards,
        "currency": settings.symbol, "kwh_price": settings.kwh,
        "prices_given": [p.to_dict() for p in settings.price_list],
        "inputs": [{"name": s.name, "card": s.card, "run_id": s.result.run_id or None,
                    "created_utc": s.result.created_utc, "kind": _kind_of(s.result)} for s in sources],
        "skipped": list(skipped) + more, "answer": answer,
    }
    result = BenchmarkResult(
        environment={"device": "none", "clsbench": {"version": __version__},
                     "python": {"version": platform.python_version()},
                     "os": {"hostname": socket.gethostname().split(".")[0]}},
        settings={"select": facts}, measurements=(), tool={"name": TOOL_NAME, "version": __version__},
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        run_id=secrets.token_hex(RUN_ID_LENGTH // 2))
    if path is not None:
        result_io.save(result, path)
    return SelectOutcome(result=result, facts=facts, path=path, skipped=tuple(facts["skipped"]))
