"""Reading and writing result files: atomic, never silently overwriting."""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import json
import math
import os
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from clsbench.errors import ResultFileError
from clsbench.results.schema import BenchmarkResult

#: Where a result goes when no ``--output`` is given.
DEFAULT_RESULTS_DIR = Path("clsbench-results")


def jsonable(value: Any) -> Any:
    """JSON has no NaN/Infinity: store them as strings so the file stays standard JSON, not Python's dialect."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def check_writable(path: Path, *, overwrite: bool = False,
                   exists_hint: str = "choose another --output, or finish it with --resume") -> None:
    """Fail early, before any work, if ``path`` is a folder, exists (unless ``overwrite``) or cannot be written."""
    if path.is_dir():
        raise ResultFileError(f"{path} is a folder, and the output is one file",
                              f"name a file inside it, e.g. -o {path / 'result.json'}")
    if path.exists() and not overwrite:
        raise ResultFileError(f"{path} already exists; clsbench never overwrites a file silently", exists_hint)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ResultFileError(f"cannot create directory {parent}: {exc.strerror}", "choose another --output") from None
    if not os.access(parent, os.W_OK):
        raise ResultFileError(f"cannot write to directory {parent}: permission denied", "choose another --output")


def write_text_atomic(path: Path, text: str) -> int:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in the same directory and a rename.

    A crash or a full disk leaves the old file or none, never half a file. Returns the bytes written.
    """
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes, *, durable: bool = True) -> int:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename (see
    :func:`write_text_atomic`). ``durable=False`` skips the fsync: the file is still whole or absent after a full
    disk or a crash of this process, though not after a power cut (what a generated dataset needs).

    Raises:
        ResultFileError: the file cannot be written (full disk, permissions), naming the path and the reason.
    """
    directory = path.parent if str(path.parent) else Path(".")
    tmp = directory / f".{path.name}.{secrets.token_hex(6)}.tmp"
    try:
        # os.open with 0o666 honours the umask (mkstemp would make the file private to its owner).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ResultFileError(f"cannot write {path}: {exc.strerror or exc}", "check the disk and permissions") from None
    return len(data)


def save(result: BenchmarkResult, path: Path) -> None:
    """Write ``result`` to ``path`` atomically (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(jsonable(result.to_dict()), indent=1, allow_nan=False) + "\n")


def load(path: str | Path) -> BenchmarkResult:
    """Read and validate a result file; every problem becomes one ResultFileError line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultFileError(f"{path} does not exist", "check the path") from None
    except IsADirectoryError:
        raise ResultFileError(f"{path} is a directory, not a result file",
                              "pass a JSON file written by `clsbench run`") from None
    except PermissionError:
        raise ResultFileError(f"{path} cannot be read: permission denied") from None
    except UnicodeDecodeError:
        raise ResultFileError(f"{path} is not a text file", "pass a JSON file written by `clsbench run`") from None
    except OSError as exc:
        raise ResultFileError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); truncated or foreign?",
                              "pass a file written by `clsbench run`") from None
    return BenchmarkResult.from_dict(data, source=str(path))


def default_output_path(device: str, directory: Path = DEFAULT_RESULTS_DIR) -> Path:
    """A new file name that does not exist yet: clsbench-results/<UTC time>-<host>-<device>.json."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = socket.gethostname().split(".")[0] or "host"
    stem = f"{stamp}-{host}-{device.replace(':', '')}"
    path = directory / f"{stem}.json"
    for n in itertools.count(2):
        if not path.exists():
            return path
        path = directory / f"{stem}-{n}.json"
    raise AssertionError("unreachable")


@contextlib.contextmanager
def writer_lock(path: Path) -> Iterator[None]:
    """Hold the right to write ``path`` for the block: one clsbench process writes a result file at a time.

    The lock is an ``flock`` on ``.NAME.lock`` beside the file (the file itself is replaced at every save, so it
    cannot carry the lock); the kernel releases it when the holder exits, however it exits. Without ``fcntl``
    (Windows) the block runs unlocked.

    Raises:
        ResultFileError: another process holds the lock (a live run writing the file a ``--resume`` names).
    """
    try:
        import fcntl
    except ImportError:  # no advisory locks here: nothing to hold
        yield
        return
    lock_path = path.parent / f".{path.name}.lock"
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ResultFileError(f"cannot lock {path}: {exc.strerror or exc}", "check the folder's permissions") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            raise ResultFileError(f"{path} is being written by another clsbench process (pid {holder})",
                                  "wait for that run to finish (or end it), then resume") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode("ascii"))
        try:
            yield
        finally:
            lock_path.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the flock
