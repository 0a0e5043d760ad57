"""Processes that must not outlive the run that started them.

A worker whose parent was killed (SIGKILL, the OOM killer, a closed terminal) must not go on holding a GPU's
memory, or sleep forever in a hung forward pass. Two mechanisms, used together:

* :func:`exit_with_parent_process`: a daemon thread waits on the multiprocessing parent's sentinel (the pipe end
  that closes when the parent exits, however it exits) and ends this process at once;
* :func:`die_with_parent`: Linux's ``PR_SET_PDEATHSIG``, the kernel's own signal to a child whose parent thread
  exits, for processes started with ``subprocess`` (torchrun and its ranks), where there is no sentinel. It is a
  no-op elsewhere.

And a child the run ends without waiting (a finished worker, tune's output check) must not leave named semaphores
behind, which Python's resource tracker reports as "leaked" at the end of the run: see
:func:`thread_lock_for_progress_bars` and :func:`release_compile_workers`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
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


def thread_lock_for_progress_bars() -> None:
    """Give tqdm (Inductor's compile progress bar) a thread lock instead of the multiprocessing lock it would create.

    That lock is a named semaphore, released only when the process exits normally; the run kills a finished worker
    without waiting, and Python's resource tracker then warns about a "leaked semaphore" at the end of every run
    with a compiled mode. A worker draws no progress bars shared with other processes, so a thread lock is enough.
    """
    if importlib.util.find_spec("tqdm") is None:
        return
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())


def release_compile_workers() -> None:
    """Shut Inductor's compile-worker pool down, where a compiled mode started one.

    The run kills a worker once its result has arrived, without waiting for it to exit; a pool still open then
    leaves its semaphores to Python's resource tracker, which warns about "leaked semaphore objects" at the end of
    every run with a compiled mode. Best effort: a failure here costs nothing but that warning.
    """
    module = sys.modules.get("torch._inductor.async_compile")
    shutdown = getattr(module, "shutdown_compile_workers", None)
    if shutdown is None:
        return
    try:
        shutdown()
    except Exception:  # noqa: BLE001 - see above
        pass
