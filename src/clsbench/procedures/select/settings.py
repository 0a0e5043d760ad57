"""``SelectSettings``: every setting of ``clsbench select`` once, checked once on construction."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from clsbench.errors import InvalidInputError
from clsbench.procedures.select.candidates import Filters
from clsbench.procedures.select.kinds import REQUIREMENTS, kind_for
from clsbench.procedures.select.prices import Price, check_kwh_price, parse_price, parse_price_file

#: The result file's ``settings["select"]["format"]``: its layout's version (see docs/select.md).
SELECT_FORMAT = 1


@dataclass(frozen=True)
class SelectSettings:
    """What ``clsbench select`` is asked.

    Attributes:
        inputs: result files, directories (every clsbench result file in them, recursively) and run ids.
        model: the model the requirement is for.
        requirement: the requirement's options by name (``throughput``, ``qps``, ``p99_ms``, ``epochs``,
            ``dataset_images``, ``deadline``); None or absent: not given. Exactly one kind's options.
        workload: the workload a throughput requirement is of (default: its kind's).
        modes, precisions, backends: allowed ones (empty: any).
        no_compile: leave out modes that compile (``+compile``, ``+freeze``, ``+compiled-step``).
        input_size: the input size the cells must have (None: the one size the results hold).
        prices: ``--price NAME=2.49/h`` texts; ``prices_file``: a TOML file of prices (docs/select.md).
        kwh_price: the price of a kWh (wins over the file's).
        currency: printed before every cost (default ``$``, or the file's).
        headroom: spare capacity asked on top of the requirement, as a fraction (0.2: 20% more).
        max_cards: most cards a card may need to count as meeting the requirement (None: no limit).
        from_history: also read every run of the model the history index (``--db``) holds.
        db: the history index (as ``history --db``).
    """

    inputs: tuple[str, ...]
    model: str
    requirement: dict[str, Any]
    workload: str | None = None
    modes: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    backends: tuple[str, ...] = ()
    no_compile: bool = False
    input_size: int | None = None
    prices: tuple[str, ...] = ()
    prices_file: str | None = None
    kwh_price: float | None = None
    currency: str | None = None
    headroom: float = 0.0
    max_cards: int | None = None
    from_history: bool = False
    db: str | None = None
    #: Derived on construction: the requirement's kind, the stored requirement, the prices as given.
    kind: str = field(init=False, default="")
    need: dict[str, Any] = field(init=False, default_factory=dict)
    price_list: tuple[Price, ...] = field(init=False, default=())
    kwh: float | None = field(init=False, default=None)
    symbol: str = field(init=False, default="$")

    def __post_init__(self) -> None:
        if not self.inputs and not self.from_history:
            raise InvalidInputError("no results to select from",
                                    "name result files, directories or run ids, or add --from-history")
        if not self.model or not self.model.strip():
            raise InvalidInputError("--model is empty", "e.g. --model resnet50")
        if not (isinstance(self.headroom, (int, float)) and math.isfinite(self.headroom) and 0 <= self.headroom < 10):
            raise InvalidInputError(f"--headroom must be a fraction from 0 up to 10, not {self.headroom}",
                                    "e.g. --headroom 0.2 for 20% spare capacity")
        if self.max_cards is not None and self.max_cards < 1:
            raise InvalidInputError(f"--max-cards must be at least 1, not {self.max_cards}", "e.g. --max-cards 8")
        if self.input_size is not None and self.input_size < 1:
            raise InvalidInputError(f"--input-size must be at least 1, not {self.input_size}", "e.g. --input-size 224")
        name, kind = kind_for(self.requirement)
        need = kind.requirement(self.requirement, self.workload)
        prices = [parse_price(text) for text in self.prices]
        kwh, currency = None, None
        if self.prices_file is not None:
            listed, kwh, currency = parse_price_file(self.prices_file)
            prices = listed + prices  # --price after the file: a card in both is an error below
        seen: dict[str, str] = {}
        for price in prices:
            key = price.name.strip().lower()
            if key in seen:
                raise InvalidInputError(f"{price.name} is priced twice ({seen[key]} and {price.source})",
                                        "give each card one price")
            seen[key] = price.source
        given_kwh = check_kwh_price(self.kwh_price)
        object.__setattr__(self, "kind", name)
        object.__setattr__(self, "need", need)
        object.__setattr__(self, "price_list", tuple(prices))
        object.__setattr__(self, "kwh", given_kwh if given_kwh is not None else kwh)
        object.__setattr__(self, "symbol", self.currency if self.currency is not None else currency or "$")

    @property
    def filters(self) -> Filters:
        return Filters(model=self.model.strip(), modes=self.modes, precisions=self.precisions, backends=self.backends,
                       no_compile=self.no_compile, input_size=self.input_size)

    @property
    def requirement_kind(self) -> Any:
        return REQUIREMENTS.get(self.kind)

    def replace(self, **changes: Any) -> SelectSettings:
        return dataclasses.replace(self, **changes)
