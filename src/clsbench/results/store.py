"""An embedded SQLite index of result files, for ``clsbench history`` and for naming runs by a short id.

The JSON result files stay the source of truth: the index holds a copy of each run's key facts and of each
measurement's headline figures, plus the absolute path of the file they came from, and can always be rebuilt
by importing the files again (``clsbench import FILE...``). Nothing here ever writes a result file.

Where the index lives (:func:`store_path`): the ``db`` argument if given, else ``$CLSBENCH_DB``, else
``$XDG_DATA_HOME/clsbench/index.sqlite3``, else ``~/.local/share/clsbench/index.sqlite3``.

A run is named by :func:`run_id_of`: the random id it was given when it was created (12 hex digits; two runs
started in the same second on one host get two ids), or for a file from before such ids, 12 hex digits of the
SHA-256 of its creation time, host name and settings. A resume changes none of these, so importing the same file
again, or its finished version, updates the run's rows instead of adding a second run.

Every write happens in one transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a failure leaves the index as
it was. Every database problem (locked by another process, not a SQLite file, a directory that cannot be
created) becomes one :class:`StoreError` line with a hint; SQLite waits at most :data:`LOCK_TIMEOUT_S` for a
lock.

History of :data:`INDEX_SCHEMA_VERSION` (kept in the ``meta`` table):

* 1 (clsbench 0.1): tables ``meta``, ``runs`` and ``measurements``.
* 2: ``measurements.backend``, the inference backend (``eager`` for every measurement of an older file). An index
  of format 1 is migrated in place when opened (the column is added with ``eager``), in one transaction.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from clsbench.core.vocab import Status
from clsbench.errors import EXIT_FILE, ClsbenchError, InvalidInputError, ResultFileError
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

__all__ = [
    "DB_ENV_VAR",
    "INDEX_SCHEMA_VERSION",
    "AmbiguousRunError",
    "ImportOutcome",
    "StoreError",
    "UnknownRunError",
    "history",
    "import_files",
    "index_result",
    "resolve_run",
    "run_id_of",
    "store_path",
]

INDEX_SCHEMA_VERSION = 2
DB_ENV_VAR = "CLSBENCH_DB"
DB_FILE_NAME = "index.sqlite3"
#: How long SQLite waits for another process's lock before giving up. Writes take milliseconds, so a lock held
#: longer than this belongs to a stuck or interactive session; saying so beats hanging.
LOCK_TIMEOUT_S = 2.0
#: Hex digits in a run id: 48 bits, so a collision needs about 16 million runs in one index (birthday bound).
RUN_ID_LENGTH = 12
#: Shortest run id prefix accepted; shorter ones are too likely to match several runs, or a word by accident.
MIN_PREFIX_LENGTH = 4
DEFAULT_HISTORY_LIMIT = 50

IMPORTED, UPDATED, ERROR = "imported", "updated", "error"
#: Errors that come from one file's values rather than from the database: that file fails, the others go on.
_FILE_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError, TypeError, ValueError)

_DB_HINT = f"use --db PATH or ${DB_ENV_VAR} for another index; it can be rebuilt with `clsbench import FILE...`"

RUN_COLUMNS: tuple[str, ...] = (
    "run_id", "path", "created_utc", "hostname", "gpu_name", "cpu_model", "device", "torch", "cuda", "driver",
    "clsbench_version", "git_commit", "suite", "measurements", "ok", "failed", "skipped", "unstable",
    "imported_utc",
)
MEASUREMENT_COLUMNS: tuple[str, ...] = (
    "run_id", "ordinal", "model", "workload", "mode", "backend", "batch_size", "device", "input_size", "status",
    "reason",
    "throughput_img_s", "latency_p50_ms", "latency_p99_ms", "spread_pct", "unstable",
    "peak_memory_allocated_bytes", "power_avg_w", "joules_per_image", "mfu_datasheet_pct", "bound_by",
)

_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    created_utc TEXT NOT NULL,
    hostname TEXT,
    gpu_name TEXT,
    cpu_model TEXT,
    device TEXT,
    torch TEXT,
    cuda TEXT,
    driver TEXT,
    clsbench_version TEXT,
    git_commit TEXT,
    suite TEXT,
    measurements INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    unstable INTEGER NOT NULL,
    imported_utc TEXT NOT NULL
);
CREATE TABLE measurements (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    model TEXT NOT NULL,
    workload TEXT NOT NULL,
    mode TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT 'eager',
    batch_size INTEGER NOT NULL,
    device TEXT NOT NULL,
    input_size INTEGER,
    status TEXT NOT NULL,
    reason TEXT,
    throughput_img_s REAL,
    latency_p50_ms REAL,
    latency_p99_ms REAL,
    spread_pct REAL,
    unstable INTEGER,
    peak_memory_allocated_bytes INTEGER,
    power_avg_w REAL,
    joules_per_image REAL,
    mfu_datasheet_pct REAL,
    bound_by TEXT,
    PRIMARY KEY (run_id, ordinal)
);
CREATE INDEX runs_by_created ON runs (created_utc);
CREATE INDEX measurements_by_model ON measurements (model);
"""


# ----------------------------------------------------------------------------------------------------------
# errors and outcomes


class StoreError(ClsbenchError):
    """The index cannot be used: locked, not a clsbench index, newer than this clsbench, or not writable."""

    exit_code = EXIT_FILE


class UnknownRunError(InvalidInputError):
    """A reference that is neither an existing file nor the id (or id prefix) of an indexed run."""


class AmbiguousRunError(InvalidInputError):
    """A run id prefix that matches several runs; carries their ids."""

    def __init__(self, ref: str, run_ids: list[str]) -> None:
        shown = ", ".join(run_ids[:5]) + (", ..." if len(run_ids) > 5 else "")
        super().__init__(f"run id prefix {ref!r} matches {len(run_ids)} runs: {shown}",
                         "give more characters of the id (see `clsbench history`)")
        self.ref = ref
        self.run_ids = run_ids


@dataclass(frozen=True)
class ImportOutcome:
    """What importing one file did.

    Attributes:
        path: the file as it was given.
        status: ``imported`` (a new run), ``updated`` (a run already indexed, rows replaced) or ``error``.
        run_id: the run's id; None on error.
        message: on error the one-line reason; otherwise a short description of the run.
    """

    path: Path
    status: str
    run_id: str | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.status != ERROR


# ----------------------------------------------------------------------------------------------------------
# public functions


def store_path(db: str | Path | None = None) -> Path:
    """Where the index lives: ``db``, else ``$CLSBENCH_DB``, else the XDG data directory (see the module doc)."""
    if db is not None and str(db):
        return Path(db).expanduser()
    env = os.environ.get(DB_ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    # The XDG base directory spec says a relative $XDG_DATA_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "clsbench" / DB_FILE_NAME


def run_id_of(result: BenchmarkResult) -> str:
    """A run's short id: the random one it was given when it was created, or, for a file from before run ids, one
    derived from its creation time, host name and settings (none of which a resume changes)."""
    if result.run_id:
        return result.run_id
    settings = json.dumps(_canonical(result.settings), sort_keys=True, separators=(",", ":"))
    key = "\n".join((result.created_utc, str(_get(result.environment, "os", "hostname") or ""), settings))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:RUN_ID_LENGTH]


def import_files(paths: Iterable[str | Path], db: str | Path | None = None) -> list[ImportOutcome]:
    """Index result files; a directory stands for the ``*.json`` files directly inside it.

    A file that cannot be read, or whose values the index refuses, is reported in its outcome and never stops
    the others. All files are written in one transaction: on a database problem (locked, disk full) none is.

    Raises:
        StoreError: the index cannot be opened or written (then nothing was written).
    """
    path = store_path(db)
    with _open(path) as conn:
        loaded: list[tuple[Path, BenchmarkResult | None, str]] = []
        for given in _expand(paths):
            try:
                loaded.append((given, result_io.load(given), ""))
            except ClsbenchError as exc:
                loaded.append((given, None, exc.message))
        outcomes = []
        with _errors(path), _transaction(conn):
            for given, result, reason in loaded:
                if result is None:
                    outcomes.append(ImportOutcome(given, ERROR, None, reason))
                    continue
                # A file whose values the index refuses (a model that is null, a figure that is an object)
                # is one error; the savepoint undoes its rows only. Database errors end the whole import.
                conn.execute("SAVEPOINT one_file")
                try:
                    outcomes.append(_write_run(conn, given, result))
                except _FILE_ERRORS as exc:
                    conn.execute("ROLLBACK TO one_file")
                    detail = " ".join(str(exc).split())
                    outcomes.append(ImportOutcome(given, ERROR, None, f"{given} cannot be indexed: {detail}"))
                conn.execute("RELEASE one_file")
    return outcomes


def index_result(path: str | Path, result: BenchmarkResult, db: str | Path | None = None) -> ImportOutcome:
    """Index a result just saved to ``path`` (``clsbench run`` calls this after writing the file).

    Raises:
        StoreError: the index cannot be opened or written (the result file itself is untouched).
    """
    index = store_path(db)
    with _open(index) as conn:
        with _errors(index), _transaction(conn):
            return _write_run(conn, Path(path), result)


def history(db: str | Path | None = None, *, model: str | None = None, gpu: str | None = None,
            limit: int | None = DEFAULT_HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The indexed runs, newest first, each a dict of the ``runs`` columns plus ``models`` and ``headline``.

    Args:
        db: the index (see :func:`store_path`).
        model: only runs that measured a model matching this ``fnmatch`` pattern (whole name, any case), the
            way ``clsbench models`` matches: ``resnet*``, ``timm/vit_*``.
        gpu: only runs on matching hardware: the GPU name, or for a CPU run the device (``cpu``) or CPU model.
            Any case; a pattern without wildcards matches anywhere in the name (``h200`` finds
            ``NVIDIA H200``), one with wildcards must match the whole name.
        limit: at most this many runs; None for all.

    ``headline`` is the first ok measurement in file order (of a matching model when ``model`` is given): a dict
    of its ``measurements`` columns, or None when the run has no ok measurement. ``models`` lists the run's
    models in file order.

    Raises:
        InvalidInputError: ``limit`` below 1.
        StoreError: the index cannot be read.
    """
    if limit is not None and limit < 1:
        raise InvalidInputError(f"--limit must be at least 1, not {limit}", "e.g. --limit 20")
    path = store_path(db)
    if not _exists(path):
        return []
    with _open(path) as conn:
        query = "SELECT * FROM runs WHERE 1"
        params: dict[str, Any] = {"model": model, "gpu": gpu, "limit": -1 if limit is None else limit}
        if model is not None:
            query += (" AND EXISTS (SELECT 1 FROM measurements m WHERE m.run_id = runs.run_id"
                      " AND clsbench_match(:model, m.model, 0))")
        if gpu is not None:
            query += (" AND (clsbench_match(:gpu, gpu_name, 1) OR (gpu_name IS NULL"
                      " AND (clsbench_match(:gpu, device, 1) OR clsbench_match(:gpu, cpu_model, 1))))")
        query += " ORDER BY created_utc DESC, imported_utc DESC, run_id LIMIT :limit"
        with _errors(path):
            runs = [dict(row) for row in conn.execute(query, params)]
            for run in runs:
                rows = [dict(r) for r in conn.execute(
                    "SELECT * FROM measurements WHERE run_id = ? ORDER BY ordinal", (run["run_id"],))]
                run["models"] = list(dict.fromkeys(r["model"] for r in rows))
                run["headline"] = next((_public(r) for r in rows if r["status"] == Status.OK
                                        and (model is None or _match(model, r["model"], False))), None)
    return runs


def resolve_run(ref: str, db: str | Path | None = None) -> Path:
    """The result file named by ``ref``: an existing file path, or a run id (or a prefix of at least 4 digits).

    An existing file wins over a run id of the same spelling.

    Raises:
        ResultFileError: ``ref`` looks like a path but there is no such file, or the run's file has moved.
        UnknownRunError: no file and no indexed run of that id.
        AmbiguousRunError: the prefix matches several runs.
        InvalidInputError: a prefix shorter than :data:`MIN_PREFIX_LENGTH`.
        StoreError: the index cannot be read.
    """
    candidate = Path(ref).expanduser()
    if candidate.is_file():
        return candidate
    if candidate.is_dir():
        raise ResultFileError(f"{ref} is a directory, not a result file", "pass a JSON file written by `clsbench run`")
    prefix = ref.strip().lower()
    if "/" in ref or os.sep in ref or ref.lower().endswith(".json") or not _is_hex(prefix):
        raise ResultFileError(f"{ref} does not exist", "check the path, or give a run id from `clsbench history`")
    if len(prefix) < MIN_PREFIX_LENGTH:
        raise InvalidInputError(f"run id prefix {ref!r} is too short (at least {MIN_PREFIX_LENGTH} characters)",
                                "copy the id from `clsbench history`")
    path = store_path(db)
    if not _exists(path):
        raise UnknownRunError(f"no file and no run named {ref!r}",
                              f"there is no index at {path} yet; add files with `clsbench import FILE...`")
    with _open(path) as conn:
        with _errors(path):
            # The prefix is plain hex (checked above), so it holds no LIKE wildcards.
            rows = conn.execute("SELECT run_id, path FROM runs WHERE run_id LIKE ? ORDER BY run_id",
                                (prefix + "%",)).fetchall()
    if not rows:
        raise UnknownRunError(f"no file and no run named {ref!r}", f"see `clsbench history` (index: {path})")
    if len(rows) > 1:
        raise AmbiguousRunError(ref, [row["run_id"] for row in rows])
    found = Path(rows[0]["path"])
    if not found.is_file():
        raise ResultFileError(f"run {rows[0]['run_id']} was indexed from {found}, which no longer exists",
                              "if the file moved, index it again with `clsbench import FILE`")
    return found


# ----------------------------------------------------------------------------------------------------------
# rows


def _write_run(conn: sqlite3.Connection, given: Path, result: BenchmarkResult) -> ImportOutcome:
    """Insert or replace one run and its measurements; the caller holds the transaction."""
    run_id = run_id_of(result)
    absolute = given.expanduser().resolve()
    previous = conn.execute("SELECT path FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    run = _run_row(run_id, absolute, result)
    conn.execute(f"INSERT OR REPLACE INTO runs ({', '.join(RUN_COLUMNS)}) "
                 f"VALUES ({', '.join(':' + c for c in RUN_COLUMNS)})", run)
    # INSERT OR REPLACE deletes the old runs row, but cascades only fire with foreign keys on; be explicit.
    conn.execute("DELETE FROM measurements WHERE run_id = ?", (run_id,))
    conn.executemany(f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "
                     f"VALUES ({', '.join(':' + c for c in MEASUREMENT_COLUMNS)})",
                     [_measurement_row(run_id, i, m) for i, m in enumerate(result.measurements)])
    counts = f"{run['measurements']} measurement(s): {run['ok']} ok, {run['failed']} failed, " \
             f"{run['skipped']} skipped, {run['unstable']} unstable"
    if previous is None:
        return ImportOutcome(given, IMPORTED, run_id, counts)
    moved = f"; was indexed from {previous['path']}" if previous["path"] != str(absolute) else ""
    return ImportOutcome(given, UPDATED, run_id, counts + moved)


def _run_row(run_id: str, path: Path, result: BenchmarkResult) -> dict[str, Any]:
    env = result.environment
    measurements = result.measurements
    version = _text(_get(env, "clsbench", "version"))
    if version in (None, "unknown"):
        version = _text(result.tool.get("version")) or version
    return {
        "run_id": run_id,
        "path": str(path),
        "created_utc": result.created_utc,
        "hostname": _text(_get(env, "os", "hostname")),
        "gpu_name": _text(_get(env, "gpu", "name")),
        "cpu_model": _text(_get(env, "cpu", "model")),
        "device": _text(env.get("device")),
        "torch": _text(_get(env, "software", "torch")),
        "cuda": _text(_get(env, "software", "torch_cuda_version")),
        "driver": _text(_get(env, "gpu", "driver_version")),
        "clsbench_version": version,
        "git_commit": _text(_get(env, "clsbench", "git_commit")),
        "suite": _text(result.settings.get("suite")),
        "measurements": len(measurements),
        "ok": sum(m.status == Status.OK for m in measurements),
        "failed": sum(m.status == Status.FAILED for m in measurements),
        "skipped": sum(m.status == Status.SKIPPED for m in measurements),
        "unstable": sum(m.status == Status.OK and _get(m.summary, "unstable") is True for m in measurements),
        "imported_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _measurement_row(run_id: str, ordinal: int, m: Measurement) -> dict[str, Any]:
    s = m.summary or {}
    unstable = s.get("unstable")
    return {
        "run_id": run_id,
        "ordinal": ordinal,
        "model": m.model,
        "workload": m.workload,
        "mode": m.mode,
        "backend": m.backend,
        "batch_size": m.batch_size,
        "device": m.device,
        "input_size": _integer(m.input_size),
        "status": m.status,
        "reason": _text(m.reason),
        "throughput_img_s": _real(s.get("throughput_img_s")),
        "latency_p50_ms": _real(_get(s, "latency_ms", "p50")),
        "latency_p99_ms": _real(_get(s, "latency_ms", "p99")),
        "spread_pct": _real(s.get("spread_pct")),
        "unstable": int(unstable) if isinstance(unstable, bool) else None,
        "peak_memory_allocated_bytes": _integer(s.get("peak_memory_allocated_bytes")),
        "power_avg_w": _real(_get(s, "telemetry", "power_avg_w")),
        "joules_per_image": _real(_get(s, "telemetry", "joules_per_image")),
        "mfu_datasheet_pct": _real(_get(s, "efficiency", "mfu_datasheet_pct")),
        "bound_by": _text(_get(s, "efficiency", "bound_by")),
    }


def _public(row: dict[str, Any]) -> dict[str, Any]:
    """A measurements row as history shows it: without its keys, ``unstable`` as a bool (or None)."""
    out = {k: v for k, v in row.items() if k not in ("run_id", "ordinal")}
    out["unstable"] = None if out["unstable"] is None else bool(out["unstable"])
    return out


def _get(data: Any, *keys: str) -> Any:
    """``data[k1][k2]...``, or None where a level is missing or not a dict (older and CPU files lack some)."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _real(value: Any) -> float | None:
    """A finite number as stored (never rounded); None for absent, non-finite ("nan" in JSON) or non-numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    return int(value) if isinstance(value, float) and value.is_integer() else None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _canonical(value: Any) -> Any:
    """The settings as the saved file holds them, so a result in memory and its file give the same run id."""
    # result_io.jsonable is the exact transformation io.save applies (non-finite floats become strings);
    # the JSON round trip turns tuples into lists.
    return json.loads(json.dumps(result_io.jsonable(value), allow_nan=False, default=str))


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdef" for c in text)


def _match(pattern: str | None, value: str | None, substring: bool) -> bool:
    """fnmatch, ignoring case; with ``substring``, a pattern without wildcards matches anywhere in ``value``."""
    if pattern is None or value is None:
        return False
    pattern, value = pattern.lower(), value.lower()
    if substring and not any(c in pattern for c in "*?["):
        return pattern in value
    return fnmatchcase(value, pattern)


# ----------------------------------------------------------------------------------------------------------
# the database


@contextlib.contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    """A checked connection to the index at ``path``, creating its directory, file and tables where missing.

    Readers call it only when the file exists (see :func:`_exists`), so that reading never creates an index.
    """
    if path.is_dir():
        raise StoreError(f"index path {path} is a directory", f"give a file name; {_DB_HINT}")
    if not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create directory {path.parent} for the index: {exc.strerror or exc}",
                             _DB_HINT) from None
    with _errors(path):
        conn = sqlite3.connect(str(path), timeout=LOCK_TIMEOUT_S, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.create_function("clsbench_match", 3, lambda p, v, s: _match(p, v, bool(s)), deterministic=True)
        with _errors(path):
            _check_schema(conn, path)
        yield conn
    finally:
        conn.close()


def _exists(path: Path) -> bool:
    """Whether there is an index to read at ``path`` (a directory there is an error, not an empty index)."""
    if path.is_dir():
        raise StoreError(f"index path {path} is a directory", f"give a file name; {_DB_HINT}")
    return path.exists()


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables in an empty database; refuse a foreign, newer or older one."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        with _transaction(conn):
            # Another process may have created the tables while this one waited for the write lock.
            if conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'meta'").fetchone()[0] == 0:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                             (str(INDEX_SCHEMA_VERSION),))
        return
    if "meta" not in tables:
        raise StoreError(f"{path} is a SQLite database but not a clsbench index", _DB_HINT)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        version = int(row[0]) if row is not None else None
    except (TypeError, ValueError):
        version = None
    if version is None:
        raise StoreError(f"{path} is not a clsbench index (no schema version)", _DB_HINT)
    if version > INDEX_SCHEMA_VERSION:
        raise StoreError(f"index {path} has format {version}, newer than this clsbench reads "
                         f"(<= {INDEX_SCHEMA_VERSION})", f"upgrade clsbench, or {_DB_HINT}")
    if version < INDEX_SCHEMA_VERSION:
        _migrate(conn, path, version)


#: Statements that bring an index from the format of the key to the next one (:data:`INDEX_SCHEMA_VERSION`).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE measurements ADD COLUMN backend TEXT NOT NULL DEFAULT 'eager'",),
}


def _migrate(conn: sqlite3.Connection, path: Path, version: int) -> None:
    """Bring an older index up to :data:`INDEX_SCHEMA_VERSION`, one format at a time, in one transaction; an index
    another process migrated meanwhile is left as it is."""
    with _transaction(conn):
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        current = int(row[0])
        while current < INDEX_SCHEMA_VERSION:
            steps = MIGRATIONS.get(current)
            if steps is None:
                raise StoreError(f"index {path} has the old format {current}, which this clsbench cannot migrate",
                                 "delete it and import the result files again with `clsbench import FILE...`")
            for statement in steps:
                conn.execute(statement)
            current += 1
            conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(current),))


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction; IMMEDIATE takes the write lock up front, so a locked index fails before any work."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. after a full disk)
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _errors(path: Path) -> Iterator[None]:
    """Turn SQLite's exceptions into one StoreError line each."""
    try:
        yield
    except sqlite3.Error as exc:
        text = str(exc)
        lower = text.lower()
        if "locked" in lower or "busy" in lower:
            raise StoreError(f"index {path} is locked by another process (waited {LOCK_TIMEOUT_S:g} s)",
                             f"wait for the other clsbench command to finish, or {_DB_HINT}") from None
        if "not a database" in lower or "malformed" in lower or "encrypted" in lower:
            raise StoreError(f"{path} is not a clsbench index (not a SQLite database, or damaged)",
                             f"move it away, or {_DB_HINT}") from None
        if "readonly" in lower or "read-only" in lower:
            raise StoreError(f"index {path} is read-only", f"check its permissions, or {_DB_HINT}") from None
        if "unable to open" in lower:
            raise StoreError(f"cannot open index {path}", f"check the directory's permissions, or {_DB_HINT}") from None
        raise StoreError(f"index {path}: {text}", _DB_HINT) from None


def _expand(paths: Iterable[str | Path]) -> list[Path]:
    """The paths, with each directory replaced by the ``*.json`` files directly inside it, sorted."""
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            out.extend(sorted(p for p in path.glob("*.json") if p.is_file()) or [path])
        else:
            out.append(path)
    return out
