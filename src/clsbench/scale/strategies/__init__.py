"""The strategies of ``clsbench scale``, one module each, behind :class:`~clsbench.scale.strategies.base.Strategy`."""

from __future__ import annotations

from ...errors import InvalidInputError
from .base import WORKER_MODULE, Session, Strategy
from .ddp import DistributedDataParallelStrategy
from .dp import DataParallelStrategy

STRATEGIES: dict[str, Strategy] = {s.name: s for s in (DistributedDataParallelStrategy(), DataParallelStrategy())}

__all__ = ["STRATEGIES", "WORKER_MODULE", "Session", "Strategy", "get_strategy"]


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InvalidInputError(f"unknown strategy {name!r}", "choose from: " + ", ".join(STRATEGIES)) from None
