"""Run one launch (torchrun and its ranks, or the DataParallel process) with a wall-clock limit; leave nothing behind.

The command starts in a session of its own (``start_new_session``), its output going to ``launch.log`` in the
launch's folder, so Ctrl-C in the terminal reaches only clsbench, which then ends the launch itself.
torchrun starts each rank in yet another session, so ending the launch's process group is not enough. Every
process of the launch is found three ways: the descendants of the command (watched while it runs, since a
rank whose parent died is no longer anyone's descendant), and the ``pid-RANK`` files each rank writes first
thing (checked against its command line, so a recycled pid is never touched). To end a launch:

1. SIGTERM to the command: torchrun's agent then stops its ranks in order;
2. after :data:`TERMINATE_GRACE_S`, SIGKILL to every process of the launch still alive.

The same sweep runs after a launch that ended by itself, in case a rank outlived its agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from clsbench.procedures.scale.files import GATHERED_FILE, LOG_FILE, PID_FILE, RANK_FILE
from clsbench.system.lifetime import die_with_parent

#: Seconds the launch gets to stop its ranks after SIGTERM before everything left is killed.
TERMINATE_GRACE_S = 3.0
#: Seconds to wait for killed processes to disappear.
KILL_WAIT_S = 5.0
#: How often the running launch is looked at (its exit, the deadline, new descendants).
POLL_S = 0.2
#: Lines of the launch's output kept in a failed measurement's record.
LOG_TAIL_LINES = 20
#: What identifies a process of a launch when it is found through a pid file.
WORKER_MARK = "clsbench.procedures.scale.rank"


@dataclass
class LaunchOutcome:
    """How a launch ended, and the records it left."""

    exit_code: int | None
    timed_out: bool
    wall_s: float
    records: dict[int, dict[str, Any]]  # by global rank
    source: str  # "gathered" (rank 0's collection of every rank) or "rank files" (this node's ranks)
    log_tail: list[str] = field(default_factory=list)
    killed: int = 0  # processes that had to be killed (after a timeout, or left behind)
    started: int = 0  # processes that wrote their pid file, i.e. got past torchrun's rendezvous


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The launch's environment: this one, with Python's import path passed on.

    A custom model the parent could import (``module:function`` from the working directory or PYTHONPATH) must
    import in every rank too, as multiprocessing's spawn does for its children.
    """
    env = dict(os.environ)
    entries: list[str] = []
    for entry in [*sys.path, *env.get("PYTHONPATH", "").split(os.pathsep)]:
        path = os.path.abspath(entry or os.getcwd())
        if path not in entries and os.path.exists(path):
            entries.append(path)
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pid_file_processes(folder: Path) -> list[psutil.Process]:
    found = []
    for pid_file in folder.glob(PID_FILE.format(rank="*")):
        try:
            process = psutil.Process(int(pid_file.read_text(encoding="utf-8").strip()))
            if WORKER_MARK in " ".join(process.cmdline()) and str(folder) in " ".join(process.cmdline()):
                found.append(process)
        except (ValueError, OSError, psutil.Error):
            continue
    return found


class _Tree:
    """Every process seen belonging to one launch."""

    def __init__(self, root: subprocess.Popen[bytes], folder: Path) -> None:
        self.root = root
        self.folder = folder
        self.known: dict[int, psutil.Process] = {}
        try:
            self.known[root.pid] = psutil.Process(root.pid)
        except psutil.Error:
            pass

    def refresh(self) -> None:
        candidates: list[psutil.Process] = []
        for process in list(self.known.values()):
            try:
                candidates.extend(process.children(recursive=True))
            except psutil.Error:
                continue
        candidates.extend(_pid_file_processes(self.folder))
        for process in candidates:
            self.known.setdefault(process.pid, process)

    def end(self) -> int:
        """SIGTERM to the command, then SIGKILL to everything still alive; returns how many were killed."""
        self.refresh()
        if self.root.poll() is None:
            try:
                self.root.send_signal(signal.SIGTERM)
                self.root.wait(TERMINATE_GRACE_S)
            except (subprocess.TimeoutExpired, OSError):
                pass
        self.refresh()
        left = [p for p in self.known.values() if _alive(p)]
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=KILL_WAIT_S)
        try:
            self.root.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass
        return len(left)

    def sweep(self) -> int:
        """After the command ended: kill whatever of the launch is still alive (nothing, normally)."""
        self.refresh()
        left = [p for pid, p in self.known.items() if pid != self.root.pid and _alive(p)]
        for process in left:
            try:
                process.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(left, timeout=KILL_WAIT_S)
        return len(left)


def read_records(folder: Path) -> tuple[dict[int, dict[str, Any]], str]:
    """Rank 0's gathered records when present (every rank, every node), else the rank files of this node."""
    gathered = folder / GATHERED_FILE
    if gathered.exists():
        try:
            records = json.loads(gathered.read_text(encoding="utf-8"))
            return {int(r["rank"]): r for r in records if isinstance(r, dict) and "rank" in r}, "gathered"
        except (OSError, ValueError, KeyError, TypeError):
            pass
    out: dict[int, dict[str, Any]] = {}
    for path in folder.glob(RANK_FILE.format(rank="*")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            out[int(record["rank"])] = record
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out, "rank files"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def launch(command: list[str], folder: Path, *, timeout_s: float, env: dict[str, str] | None = None) -> LaunchOutcome:
    """Run ``command`` in ``folder``'s launch and wait at most ``timeout_s``; never leaves a process behind.

    Raises:
        KeyboardInterrupt: after ending the launch, when interrupted while waiting.
    """
    log_path = folder / LOG_FILE
    started = time.monotonic()
    with open(log_path, "ab") as log:
        # The launcher dies with this process (a killed `clsbench scale` leaves no launch running); each rank does the
        # same with the launcher (scale/rank.py).
        root = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env if env is not None else child_env(), start_new_session=True,
                                preexec_fn=die_with_parent)
    tree = _Tree(root, folder)
    timed_out = False
    killed = 0
    try:
        deadline = started + timeout_s
        next_refresh = 0.0
        while root.poll() is None:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if now >= next_refresh:
                tree.refresh()
                next_refresh = now + 1.0
            time.sleep(min(POLL_S, max(deadline - now, 0.0)))
    except BaseException:
        tree.end()
        raise
    if timed_out:
        killed = tree.end()
    else:
        killed = tree.sweep()
    wall_s = time.monotonic() - started
    records, source = read_records(folder)
    started = len(list(folder.glob(PID_FILE.format(rank="*"))))
    return LaunchOutcome(exit_code=None if timed_out else root.returncode, timed_out=timed_out, wall_s=wall_s,
                         records=records, source=source, log_tail=log_tail(log_path), killed=killed, started=started)
