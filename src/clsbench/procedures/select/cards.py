"""Which card a result was measured on, and which card a name given by the user means.

A card is named as its results record it: the GPU's name (``NVIDIA H100 80GB HBM3``) for a result measured on a
CUDA device, else the CPU's model (``AMD EPYC``), the same name ``show``'s header line prints.

The matching rule for a name the user gives (``--price H100=2.49/h``, a ``[cards.H100]`` table): case does not
matter; a name equal to a recorded name means that card; otherwise the name's words (letters and digits, split at
anything else) must appear as consecutive whole words of the recorded name, so ``H100`` and ``h100 80gb`` mean
``NVIDIA H100 80GB HBM3`` while ``H10`` means nothing. A name that means two or more recorded cards
(``NVIDIA`` with an H100 and an H200 among the results) is an error naming them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from clsbench.errors import InvalidInputError
from clsbench.results.schema import BenchmarkResult

_WORD = re.compile(r"[a-z0-9]+")


def card_of(result: BenchmarkResult) -> str | None:
    """The card ``result`` was measured on (see the module docstring); None when the file records neither name."""
    gpu = (result.environment.get("gpu") or {}).get("name")
    on_gpu = any(m.device.startswith("cuda") for m in result.measurements)
    serve_device = str(((result.settings.get("serve") or {}).get("settings") or {}).get("device") or "")
    if gpu and (on_gpu or serve_device.startswith("cuda")):
        return str(gpu)
    cpu = (result.environment.get("cpu") or {}).get("model")
    return str(cpu) if cpu else None


def words(name: str) -> list[str]:
    return _WORD.findall(name.lower())


def means(alias: str, card: str) -> bool:
    """Whether the user's name ``alias`` means the recorded card ``card`` (see the module docstring)."""
    if alias.strip().lower() == card.strip().lower():
        return True
    want, have = words(alias), words(card)
    if not want:
        return False
    return any(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1))


def match_card(alias: str, cards: Iterable[str], *, what: str) -> str:
    """The one recorded card in ``cards`` that ``alias`` means.

    Args:
        what: where the name was given, for the error (``--price H100``).

    Raises:
        InvalidInputError: no card or several cards match.
    """
    known = sorted(set(cards))
    exact = [card for card in known if card.lower() == alias.strip().lower()]
    found = exact or [card for card in known if means(alias, card)]
    if not found:
        listed = "; ".join(known) if known else "none"
        raise InvalidInputError(f"{what}: no results for a card named {alias!r} (the results hold: {listed})",
                                "price a card the results hold, or add its result files")
    if len(found) > 1:
        raise InvalidInputError(f"{what}: {alias!r} is ambiguous: it means {'; '.join(found)}",
                                "give more of the name, e.g. the whole name as `clsbench show` prints it")
    return found[0]
