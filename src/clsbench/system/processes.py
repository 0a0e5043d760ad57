"""Child processes of a clsbench worker.

clsbench's runner starts each measurement in a daemonic process (it dies with the parent), and multiprocessing
refuses children to a daemonic process. Two kinds of child are started from a worker all the same, each of which
cannot outlive it: DataLoader workers (daemonic themselves, and torch's watchdog ends them when their parent
disappears) and an inference backend's build process (tied to its parent with ``PR_SET_PDEATHSIG``,
:mod:`clsbench.backends.isolate`). :func:`worker_processes_allowed` lifts the refusal while they start.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from collections.abc import Iterator


@contextlib.contextmanager
def worker_processes_allowed() -> Iterator[None]:
    """Let this process start child processes even when it is a daemonic clsbench worker (see the module)."""
    config = getattr(multiprocessing.current_process(), "_config", None)
    daemonic = bool(config and config.get("daemon"))
    if daemonic:
        config["daemon"] = False
    try:
        yield
    finally:
        if daemonic:
            config["daemon"] = True
