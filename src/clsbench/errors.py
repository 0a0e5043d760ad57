"""Typed errors. The CLI turns each into one ``error:`` line plus a hint and a documented exit code."""

from __future__ import annotations

# Exit codes, documented in docs/exit-codes.md and docs/methodology/exit-codes.md.
EXIT_OK = 0
EXIT_INTERNAL = 1  # a bug in clsbench: please report it
EXIT_INVALID_INPUT = 2  # bad argument or option, unknown name, device not present
EXIT_FILE = 3  # a result file is unreadable/foreign/newer, or the output cannot be written / already exists
EXIT_MEASUREMENT_FAILED = 4  # the run finished and its file was written, but some measurements failed
EXIT_REGRESSION = 5  # `compare --fail-if-slower`: a significant slowdown beyond the threshold
EXIT_INCONCLUSIVE = 6  # `compare --fail-if-slower`: the repeats are too noisy to judge the threshold either way
EXIT_NOTHING_MEASURED = 7  # the command ran to its end but measured nothing (every measurement skipped)
EXIT_INTERRUPTED = 130  # Ctrl-C: everything finished so far is in the output file


class ClsbenchError(Exception):
    """Base class of every error clsbench raises on purpose.

    Args:
        message: what is wrong, in one line.
        hint: how to fix it, in one line (optional).
    """

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} ({self.hint})"


class InvalidInputError(ClsbenchError):
    """An argument, option or name that clsbench cannot accept."""


class UnknownModelError(InvalidInputError):
    """A model name that no registered source knows; carries the closest known names."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        hint = ("did you mean: " + ", ".join(suggestions) + "?") if suggestions else "see `clsbench models`"
        super().__init__(f"unknown model {name!r}", hint)
        self.name = name
        self.suggestions = suggestions


class DeviceUnavailableError(InvalidInputError):
    """The requested device is not present on this machine."""


class ResultFileError(ClsbenchError):
    """A result file that cannot be read, is not a clsbench file, or cannot be written."""

    exit_code = EXIT_FILE


#: Longest reason text kept for a fact or a failure that could not be read (one line in a table or an env dump).
REASON_MAX_CHARS = 160


def short_reason(exc: BaseException) -> str:
    """One line for an exception: its type and the first line of its message, cut at :data:`REASON_MAX_CHARS`."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 1] + "…"
