"""The strategies of ``clsbench scale``, one module each, behind
:class:`~clsbench.procedures.scale.strategies.base.Strategy`."""

from __future__ import annotations

from clsbench.errors import InvalidInputError
from clsbench.procedures.scale.strategies.base import WORKER_MODULE, Session, Strategy
from clsbench.procedures.scale.strategies.ddp import DistributedDataParallelStrategy
from clsbench.procedures.scale.strategies.dp import DataParallelStrategy

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (DistributedDataParallelStrategy(), DataParallelStrategy())}

__all__ = ["STRATEGIES", "WORKER_MODULE", "Session", "Strategy", "get_strategy"]


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InvalidInputError(f"unknown strategy {name!r}", "choose from: " + ", ".join(STRATEGIES)) from None
