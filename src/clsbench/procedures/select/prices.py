"""Prices of cards: ``--price NAME=2.49/h`` (repeatable), a ``--prices FILE`` (TOML) and ``--kwh-price``.

A card's price is an hourly price (what a cloud bills), or a purchase price spread over its amortisation years at a
utilisation: ``hourly = purchase / (years x HOURS_PER_YEAR x utilisation)``, the price of each hour the card is
actually used. The file::

    currency = "$"          # optional; printed before every cost
    kwh_price = 0.30        # optional; --kwh-price wins over it

    [cards.H100]            # a card, named as results record it or by a short alias (see cards.py)
    hourly = 2.49

    [cards."NVIDIA H200"]
    purchase = 35000
    years = 4
    utilisation = 0.6       # share of the hours the card works (0 < u <= 1)

Pure: no card is matched here (:mod:`clsbench.procedures.select.cards` does that against the results).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.errors import InvalidInputError

#: Hours in a year of 365.25 days: the amortisation of a purchase price runs over calendar years.
HOURS_PER_YEAR = 365.25 * 24

_PRICE = re.compile(r"^\s*(?P<name>[^=]+?)\s*=\s*(?P<value>[^/\s]+)\s*(?:/\s*(?P<unit>h|hr|hour))?\s*$", re.I)
PRICE_HINT = "e.g. --price H100=2.49/h (an hourly price; a purchase price goes in --prices FILE)"


@dataclass(frozen=True)
class Price:
    """One card's price as given, and the hourly price it comes to.

    Attributes:
        name: the card as the user named it (a recorded GPU name or an alias such as ``H100``).
        hourly: the price of one card for one hour of use.
        source: where it was given (``--price`` or the file), for the output.
        purchase, years, utilisation: the purchase price and its amortisation, when the price was given so.
    """

    name: str
    hourly: float
    source: str
    purchase: float | None = None
    years: float | None = None
    utilisation: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "hourly": self.hourly, "source": self.source}
        if self.purchase is not None:
            out.update(purchase=self.purchase, years=self.years, utilisation=self.utilisation)
        return out

    def basis(self, currency: str) -> str:
        """How the hourly price was reached, in words."""
        if self.purchase is None:
            return f"{currency}{self.hourly:,.2f}/h ({self.source})"
        return (f"{currency}{self.hourly:,.2f}/h = {currency}{self.purchase:,.0f} / ({self.years:g} y x "
                f"{HOURS_PER_YEAR:,.0f} h x {self.utilisation:.0%} used) ({self.source})")


def _number(value: Any, what: str, hint: str, *, positive: bool = False) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise InvalidInputError(f"{what} {value!r} is not a number", hint)
    if number < 0 or (positive and number == 0):
        raise InvalidInputError(f"{what} is {'not above 0' if number == 0 else 'negative'} ({value})", hint)
    return number


def parse_price(text: str) -> Price:
    """``NAME=2.49/h`` or ``NAME=2.49`` (hourly) as a :class:`Price`.

    Raises:
        InvalidInputError: not ``NAME=NUMBER[/h]``, or a negative price.
    """
    match = _PRICE.match(text)
    if match is None:
        raise InvalidInputError(f"--price {text!r} is not NAME=PRICE/h", PRICE_HINT)
    value = match["value"].lstrip("$€£")
    hourly = _number(value, f"--price {match['name']}", PRICE_HINT)
    return Price(name=match["name"], hourly=hourly, source="--price")


def _file_price(name: str, entry: Any, source: str) -> Price:
    hint = (f"in {source}, give [cards.\"{name}\"] either hourly = 2.49, or purchase = 35000 with years = 4 and "
            "utilisation = 0.6")
    if not isinstance(entry, dict):
        raise InvalidInputError(f"{source}: cards.{name} is not a table", hint)
    unknown = sorted(set(entry) - {"hourly", "purchase", "years", "utilisation"})
    if unknown:
        raise InvalidInputError(f"{source}: cards.{name} has unknown keys {', '.join(unknown)}", hint)
    if "hourly" in entry and "purchase" in entry:
        raise InvalidInputError(f"{source}: cards.{name} gives both an hourly and a purchase price", hint)
    if "hourly" in entry:
        return Price(name=name, hourly=_number(entry["hourly"], f"{source}: cards.{name}.hourly", hint), source=source)
    if "purchase" not in entry or "years" not in entry or "utilisation" not in entry:
        raise InvalidInputError(f"{source}: cards.{name} needs hourly, or purchase with years and utilisation", hint)
    purchase = _number(entry["purchase"], f"{source}: cards.{name}.purchase", hint)
    years = _number(entry["years"], f"{source}: cards.{name}.years", hint, positive=True)
    utilisation = _number(entry["utilisation"], f"{source}: cards.{name}.utilisation", hint, positive=True)
    if utilisation > 1:
        raise InvalidInputError(f"{source}: cards.{name}.utilisation is {utilisation:g}, above 1", hint)
    return Price(name=name, hourly=purchase / (years * HOURS_PER_YEAR * utilisation), source=source,
                 purchase=purchase, years=years, utilisation=utilisation)


def read_toml(path: Path) -> dict[str, Any]:
    """The TOML file ``path`` as a dict (tomllib, or tomli on Python 3.10).

    Raises:
        InvalidInputError: missing, unreadable or not TOML (one line naming the file and the place).
    """
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]
        except ImportError:
            raise InvalidInputError("--prices needs Python 3.11, or the tomli package on Python 3.10",
                                    "pip install tomli, or give the prices with --price NAME=2.49/h") from None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError(f"--prices {path} cannot be read: {exc.strerror or exc}", "check the path") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInputError(f"--prices {path} is not TOML: {exc}", "see docs/select.md for the format") from None


def parse_price_file(path: str | Path) -> tuple[list[Price], float | None, str | None]:
    """The prices, the kWh price and the currency a ``--prices`` file gives (None: not given).

    Raises:
        InvalidInputError: see :func:`read_toml`; unknown keys, a negative price, a malformed card entry.
    """
    path = Path(path)
    data = read_toml(path)
    source = path.name
    unknown = sorted(set(data) - {"cards", "kwh_price", "currency"})
    if unknown:
        raise InvalidInputError(f"{source}: unknown keys {', '.join(unknown)}",
                                "the file holds [cards.NAME] tables, kwh_price and currency (docs/select.md)")
    cards = data.get("cards") or {}
    if not isinstance(cards, dict):
        raise InvalidInputError(f"{source}: cards is not a table", "write [cards.H100] then hourly = 2.49")
    prices = [_file_price(str(name), entry, source) for name, entry in cards.items()]
    kwh = data.get("kwh_price")
    kwh_price = None if kwh is None else _number(kwh, f"{source}: kwh_price", "e.g. kwh_price = 0.30")
    currency = data.get("currency")
    return prices, kwh_price, None if currency is None else str(currency)


def check_kwh_price(value: float | None) -> float | None:
    """``--kwh-price``: None or a price that is not negative."""
    return None if value is None else _number(value, "--kwh-price", "e.g. --kwh-price 0.30")
