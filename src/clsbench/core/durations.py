"""Durations on the command line: ``90s``, ``10m``, ``1h``, ``1h30m``, ``2.5m`` or plain seconds (``600``).

One parser for every option that takes a length of time (``tune --budget``, ``soak --duration`` and ``--window``).
"""

from __future__ import annotations

import math
import re

from clsbench.errors import InvalidInputError

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([hms]?)")


def parse_duration(value: str | float, option: str = "--duration", name: str | None = None) -> float:
    """Seconds from a duration (case and spaces ignored) or a number of seconds.

    A bare number stands alone: ``5s10`` is a typo, not 15 seconds.

    Args:
        option: the command-line option the hint shows.
        name: what the error calls the value (default: ``option``).

    Raises:
        InvalidInputError: not a duration, or not a finite number of seconds above 0.
    """
    name = name or option
    hint = f"e.g. {option} 90s, {option} 10m, {option} 1h30m or seconds"
    if isinstance(value, bool):
        raise InvalidInputError(f"{name} {value!r} is not a duration", hint)
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if not text:
            raise InvalidInputError(f"{name} is empty", hint)
        seconds, position = 0.0, 0
        while position < len(text):
            match = _PART.match(text, position)
            if match is None or (not match.group(2) and (position > 0 or match.end() != len(text))):
                raise InvalidInputError(f"{name} {value!r} is not a duration", hint)
            seconds += float(match.group(1)) * _UNITS[match.group(2) or "s"]
            position = match.end()
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidInputError(f"{name} must be more than 0 seconds, got {value!r}", hint)
    return seconds


__all__ = ["parse_duration"]
