"""Processes that must not outlive the run that started them.

A worker whose parent was killed (SIGKILL, the OOM killer, a closed terminal) must not go on holding a GPU's
memory, or sleep forever in a hung forward pass. Two mechanisms, used together:

* :func:`exit_with_parent_process`: a daemon thread waits on the multiprocessing parent's sentinel (the pipe end
  that closes when the parent exits, however it exits) and ends this process at once;
* :func:`die_with_parent`: Linux's ``PR_SET_PDEATHSIG``, the kernel's own signal to a child whose parent thread
  exits, for processes started with ``subprocess`` (torchrun and its ranks), where there is no sentinel. It is a
  no-op elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

#: prctl(2): deliver a signal to this process when its parent dies.
PR_SET_PDEATHSIG = 1
#: Exit code of a process that ended because the run that started it is gone.
EXIT_ORPHANED = 70


def exit_with_parent_process() -> bool:
    """In a multiprocessing child: end this process as soon as its parent process has exited.

    Returns:
        Whether a parent to watch was found (False in the main process).
    """
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:
        return False

    def watch() -> None:
        parent.join()  # waits on the parent's sentinel: returns only once the parent process is gone
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="clsbench-parent-watch", daemon=True).start()
    return True


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


#: Loaded once at import, so that :func:`die_with_parent` does nothing but one system call: it runs as a
#: ``preexec_fn`` between fork and exec, where taking a lock another thread held at the fork could hang.
_LIBC = _libc()


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux; usable as a ``preexec_fn``).

    The kernel ties the signal to the parent *thread*: start such processes from a thread that lives as long as the
    run (clsbench starts them from the main thread).

    Returns:
        Whether the request was accepted.
    """
    return _LIBC is not None and _LIBC.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
