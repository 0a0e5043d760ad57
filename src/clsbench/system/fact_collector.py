"""Reading facts one at a time: a fact that cannot be read becomes ``None`` and a short reason, never an exception.

Environment capture (:mod:`clsbench.system.environment` and its GPU section, :mod:`clsbench.system.environment_gpu`)
runs right before a benchmark, so one unreadable fact must cost that fact alone: each reader either returns the value
or raises :class:`FactUnavailable` with the reason to record, and :class:`FactCollector` stores the one or the other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clsbench.errors import REASON_MAX_CHARS, short_reason

__all__ = ["FactCollector", "FactUnavailable", "import_optional"]


class FactUnavailable(Exception):
    """Raised inside a fact reader to say the fact is absent, with the reason to record."""


class FactCollector:
    """Fills sections fact by fact and keeps the ``unavailable`` map; one failing fact never stops others."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def missing(self, section: dict[str, Any], path: str, reason: str) -> None:
        """Stores ``None`` for ``path`` and records why."""
        section[path.rsplit(".", 1)[-1]] = None
        self.unavailable[path] = reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 1] + "…"

    def read(
        self,
        section: dict[str, Any],
        path: str,
        reader: Callable[[], Any],
        reason_of: Callable[[Exception], str] | None = None,
    ) -> Any:
        """Stores ``reader()`` under the last part of ``path``; any exception becomes ``None`` plus a reason.

        Args:
            section: the dict that receives the value.
            path: dotted path of the fact, e.g. ``"gpu.clock_sm_mhz"``; the key is its last part.
            reader: returns the value, or raises ``FactUnavailable`` (or anything else) when it cannot.
            reason_of: turns an exception other than ``FactUnavailable`` into a reason; default: its message.

        Returns:
            The stored value.
        """
        try:
            value = reader()
        except FactUnavailable as exc:
            self.missing(section, path, str(exc))
            return None
        except Exception as exc:  # a fact that cannot be read must not stop the collection
            self.missing(section, path, reason_of(exc) if reason_of else short_reason(exc))
            return None
        if value is None:
            self.missing(section, path, "not reported")
            return None
        section[path.rsplit(".", 1)[-1]] = value
        return value


def import_optional(name: str) -> Any:
    """Imports a module, or returns None when it is not installed or fails to import."""
    try:
        return __import__(name)
    except Exception:  # an optional module that fails to import is a missing fact
        return None
