"""What a test that interrupts a command needs of a terminal: the command starts as a terminal's foreground job."""

from __future__ import annotations

import signal


def as_a_terminal_starts_it() -> None:
    """``preexec_fn`` of a command a test interrupts as a terminal would: Ctrl-C at its default disposition and not
    blocked, whatever the test runner inherited (a job started in the background without job control ignores
    SIGINT, and a blocked mask survives exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
