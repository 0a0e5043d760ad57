"""The results store: an index of result files for ``clsbench history`` and for naming runs by a short id, in an
embedded SQLite file (the default) or shared by a team on a PostgreSQL server.

The JSON result files stay the source of truth: the store holds a copy of each run's key facts (with the host and
GPU that made it), each measurement's headline figures, the whole result JSON (so that a run can be pulled or
compared on another machine) and the path of the file it came from; it can always be rebuilt by importing the
files again (``clsbench import FILE...``). Nothing here ever writes a result file but :mod:`store_transfer`'s pull.

Where the store is (:func:`clsbench.results.store_base.parse_location`): the ``db`` argument if given, else
``$CLSBENCH_DB``, else ``$XDG_DATA_HOME/clsbench/index.sqlite3``, else ``~/.local/share/clsbench/index.sqlite3``.
A plain path or ``sqlite:///PATH`` is a SQLite file, ``postgresql://USER@HOST/DB`` a PostgreSQL database (the
dialects are in ``results/store_backends/``); any other URL is refused, never taken for a file name. A password in
a URL is never shown: every message and printed location has it as ``***``.

A run is named by :func:`run_id_of`: the random id it was given when it was created (12 hex digits; two runs
started in the same second on one host get two ids), or for a file from before such ids, 12 hex digits of the
SHA-256 of its creation time, host name and settings. A resume changes none of these, so importing the same file
again, or its finished version, updates the run's rows instead of adding a second run; so do two machines that
push the same file.

Every write happens in one transaction, so a failure (a lost connection included) leaves the store as it was.
Every database problem becomes one :class:`StoreError` line with a hint; a store waits at most
:data:`LOCK_TIMEOUT_S` for a lock or a server. The schema and its versions are in :mod:`store_base`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from clsbench.core.vocab import Status
from clsbench.errors import ClsbenchError, InvalidInputError, ResultFileError
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.results.store_base import (
    DB_ENV_VAR,
    DOCUMENT_COLUMNS,
    INDEX_SCHEMA_VERSION,
    MEASUREMENT_COLUMNS,
    MIGRATIONS,
    RUN_COLUMNS,
    SCHEMA,
    StoreConnection,
    StoreError,
    opened,
    parse_location,
)

__all__ = [
    "DB_ENV_VAR",
    "INDEX_SCHEMA_VERSION",
    "MIGRATIONS",
    "AmbiguousRunError",
    "ImportOutcome",
    "StoreError",
    "UnknownRunError",
    "describe",
    "history",
    "import_files",
    "index_result",
    "load_run",
    "lookup_run",
    "open_store",
    "resolve_run",
    "run_id_of",
    "store_path",
]

#: The schema (:data:`clsbench.results.store_base.SCHEMA`), under the name older tests and tools read.
_SCHEMA = SCHEMA
#: How long a store waits for another process's lock, or for a server to answer, before giving up. Writes take
#: milliseconds, so a lock held longer belongs to a stuck or interactive session; saying so beats hanging.
LOCK_TIMEOUT_S = 2.0
#: Hex digits in a run id: 48 bits, so a collision needs about 16 million runs in one index (birthday bound).
RUN_ID_LENGTH = 12
#: Shortest run id prefix accepted; shorter ones are too likely to match several runs, or a word by accident.
MIN_PREFIX_LENGTH = 4
DEFAULT_HISTORY_LIMIT = 50

IMPORTED, UPDATED, ERROR = "imported", "updated", "error"
#: The columns history reads and returns (the result JSON stays in ``documents``, read only by pull and load).
_UPSERT_RUN = (f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join(':' + c for c in RUN_COLUMNS)}) "
               f"ON CONFLICT (run_id) DO UPDATE SET "
               + ", ".join(f"{c} = excluded.{c}" for c in RUN_COLUMNS if c != "run_id"))
_UPSERT_DOCUMENT = (f"INSERT INTO documents ({', '.join(DOCUMENT_COLUMNS)}) "
                    f"VALUES ({', '.join(':' + c for c in DOCUMENT_COLUMNS)}) ON CONFLICT (run_id) DO UPDATE SET "
                    "sha256 = excluded.sha256, result_json = excluded.result_json")
_INSERT_MEASUREMENT = (f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) "
                       f"VALUES ({', '.join(':' + c for c in MEASUREMENT_COLUMNS)})")
#: ``--since 7d``, ``12h``, ``30m``: that long before now.
_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([dhm])\s*$", re.IGNORECASE)
_AGO_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


# ----------------------------------------------------------------------------------------------------------
# errors and outcomes


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
    """The SQLite file of the store named by ``db`` (see the module doc).

    Raises:
        StoreError: the store is not a SQLite file (a ``postgresql://`` URL), or a URL of an unknown scheme.
    """
    location = parse_location(db)
    if location.scheme != "sqlite":
        raise StoreError(f"the store {location.shown} is a {location.scheme} database, not a file",
                         "give a file path or sqlite:///PATH for a file")
    return Path(location.target)


def describe(db: str | Path | None = None) -> str:
    """The store named by ``db`` as every printed line shows it: a path, or a URL with its password as ``***``.
    A location that cannot be parsed is shown as given, redacted."""
    from clsbench.results.store_base import given_location, redact

    try:
        return parse_location(db).shown
    except StoreError:
        return redact(str(given_location(db)))


@contextlib.contextmanager
def open_store(db: str | Path | None = None, *, create: bool = True) -> Iterator[StoreConnection | None]:
    """A checked connection to the store named by ``db``: created where missing (when ``create``), migrated when
    older, refused when foreign or newer; None when ``create`` is False and there is no index yet.

    Raises:
        StoreError: the store cannot be reached, opened, read or created.
    """
    with opened(parse_location(db), LOCK_TIMEOUT_S, create=create) as conn:
        yield conn


def run_id_of(result: BenchmarkResult) -> str:
    """A run's short id: the random one it was given when it was created, or, for a file from before run ids, one
    derived from its creation time, host name and settings (none of which a resume changes)."""
    if result.run_id:
        return result.run_id
    settings = json.dumps(_canonical(result.settings), sort_keys=True, separators=(",", ":"))
    key = "\n".join((result.created_utc, str(_get(result.environment, "os", "hostname") or ""), settings))
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:RUN_ID_LENGTH]


def import_files(paths: Iterable[str | Path], db: str | Path | None = None) -> list[ImportOutcome]:
    """Index result files, each with its whole JSON (``clsbench import`` and ``clsbench store push``); a directory
    stands for the ``*.json`` files directly inside it.

    A file that cannot be read, or whose values the store refuses, is reported in its outcome and never stops
    the others. All files are written in one transaction: on a database problem (locked, disk full, the connection
    lost) none is.

    Raises:
        StoreError: the store cannot be opened or written (then nothing was written).
    """
    loaded: list[tuple[Path, BenchmarkResult | None, str]] = []
    for given in _expand(paths):
        try:
            loaded.append((given, result_io.load(given), ""))
        except ClsbenchError as exc:
            loaded.append((given, None, exc.message))
    with open_store(db) as conn:
        assert conn is not None  # created
        outcomes = []
        with conn.errors(), conn.transaction():
            for given, result, reason in loaded:
                if result is None:
                    outcomes.append(ImportOutcome(given, ERROR, None, reason))
                    continue
                # A file whose values the store refuses (a model that is null, a figure that is an object)
                # is one error; the savepoint undoes its rows only. Database errors end the whole import.
                conn.execute("SAVEPOINT one_file")
                try:
                    outcomes.append(_write_run(conn, given, result))
                except (*conn.file_errors, TypeError, ValueError) as exc:
                    conn.execute("ROLLBACK TO one_file")
                    detail = " ".join(str(exc).split())
                    outcomes.append(ImportOutcome(given, ERROR, None, f"{given} cannot be indexed: {detail}"))
                conn.execute("RELEASE one_file")
    return outcomes


def index_result(path: str | Path, result: BenchmarkResult, db: str | Path | None = None) -> ImportOutcome:
    """Index a result just saved to ``path`` (``clsbench run`` calls this after writing the file).

    Raises:
        StoreError: the store cannot be opened or written (the result file itself is untouched).
    """
    with open_store(db) as conn:
        assert conn is not None  # created
        with conn.errors(), conn.transaction():
            return _write_run(conn, Path(path), result)


def history(db: str | Path | None = None, *, model: str | None = None, gpu: str | None = None,
            since: str | None = None, commit: str | None = None,
            limit: int | None = DEFAULT_HISTORY_LIMIT) -> list[dict[str, Any]]:
    """The indexed runs of every host that wrote to the store, newest first, each a dict of the ``runs`` columns
    (``hostname`` and ``gpu_name`` among them) plus ``models`` and ``headline``.

    Args:
        db: the store (see the module doc).
        model: only runs that measured a model matching this ``fnmatch`` pattern (whole name, any case), the
            way ``clsbench models`` matches: ``resnet*``, ``timm/vit_*``.
        gpu: only runs on matching hardware: the GPU name, or for a CPU run the device (``cpu``) or CPU model.
            Any case; a pattern without wildcards matches anywhere in the name (``h200`` finds
            ``NVIDIA H200``), one with wildcards must match the whole name.
        since: only runs created at or after this: an ISO date or time (UTC unless it says otherwise), or a time
            before now (``7d``, ``12h``, ``30m``).
        commit: only runs of a clsbench commit starting with these hex digits.
        limit: at most this many runs; None for all.

    ``headline`` is the first ok measurement in file order (of a matching model when ``model`` is given): a dict
    of its ``measurements`` columns, or None when the run has no ok measurement. ``models`` lists the run's
    models in file order.

    Raises:
        InvalidInputError: ``limit`` below 1, a ``since`` or ``commit`` that is not one.
        StoreError: the store cannot be read.
    """
    if limit is not None and limit < 1:
        raise InvalidInputError(f"--limit must be at least 1, not {limit}", "e.g. --limit 20")
    where, params, exact = _filters(model, gpu, since, commit)
    query = f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE {' AND '.join(where) or '1 = 1'} " \
            "ORDER BY created_utc DESC, imported_utc DESC, run_id"
    if exact and limit is not None:
        query += f" LIMIT {int(limit)}"
    found: list[dict[str, Any]] = []
    with open_store(db, create=False) as conn:
        if conn is None:
            return []
        with conn.errors():
            for run in conn.execute(query, params):
                if limit is not None and len(found) >= limit:
                    break
                if not exact and not _matches(run, gpu):
                    continue
                rows = conn.execute("SELECT * FROM measurements WHERE run_id = :run_id ORDER BY ordinal",
                                    {"run_id": run["run_id"]})
                if not exact and model is not None and not any(_match(model, r["model"], False) for r in rows):
                    continue
                run["models"] = list(dict.fromkeys(r["model"] for r in rows))
                run["headline"] = next((_public(r) for r in rows if r["status"] == Status.OK
                                        and (model is None or _match(model, r["model"], False))), None)
                found.append(run)
    return found


def resolve_run(ref: str, db: str | Path | None = None) -> Path:
    """The result file named by ``ref``: an existing file path, or a run id (or a prefix of at least 4 digits)
    whose file is on this machine. :func:`load_run` also loads a run from the store's copy.

    An existing file wins over a run id of the same spelling.

    Raises:
        ResultFileError: ``ref`` looks like a path but there is no such file, or the run's file has moved.
        UnknownRunError: no file and no indexed run of that id.
        AmbiguousRunError: the prefix matches several runs.
        InvalidInputError: a prefix shorter than :data:`MIN_PREFIX_LENGTH`.
        StoreError: the store cannot be read.
    """
    found = lookup_run(ref, db, with_document=False)
    if isinstance(found, Path):
        return found
    path = Path(found["path"])
    if not path.is_file():
        raise ResultFileError(f"run {found['run_id']} was indexed from {path}, which no longer exists",
                              "if the file moved, index it again with `clsbench import FILE`")
    return path


def load_run(ref: str, db: str | Path | None = None) -> BenchmarkResult:
    """The run named by ``ref`` (see :func:`resolve_run`): from its file when that is on this machine and still
    holds the run, else from the copy the store keeps (a run another machine wrote).

    Raises:
        the errors of :func:`resolve_run`; ResultFileError: neither the file nor a stored copy.
    """
    found = lookup_run(ref, db, with_document=True)
    if isinstance(found, Path):
        return result_io.load(found)
    path = Path(found["path"])
    if path.is_file():
        with contextlib.suppress(ClsbenchError):
            local = result_io.load(path)
            if run_id_of(local) == found["run_id"]:
                return local
    if found.get("result_json") is None:
        raise ResultFileError(f"run {found['run_id']} was indexed from {path} on {found['hostname'] or 'a host'}, "
                              "and the store has no copy of it",
                              f"push the file there with `clsbench store push {path}`")
    return result_from_json(found["result_json"], f"run {found['run_id']} in {describe(db)}")


def result_from_json(text: str, source: str) -> BenchmarkResult:
    """A result from the JSON text a store keeps (the errors name ``source``)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(f"{source} is not valid JSON ({exc.msg})", "push its file again") from None
    return BenchmarkResult.from_dict(data, source=source)


def lookup_run(ref: str, db: str | Path | None, *, with_document: bool) -> Path | dict[str, Any]:
    """An existing file (a Path), or the one store row of the run id prefix ``ref`` (a dict)."""
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
    shown = describe(db)
    document = ", d.result_json" if with_document else ""
    with open_store(db, create=False) as conn:
        if conn is None:
            raise UnknownRunError(f"no file and no run named {ref!r}",
                                  f"there is no index at {shown} yet; add files with `clsbench import FILE...`")
        with conn.errors():
            # The prefix is plain hex (checked above), so it holds no LIKE wildcards.
            rows = conn.execute(f"SELECT r.run_id, r.path, r.hostname{document} FROM runs r "
                                "LEFT JOIN documents d ON d.run_id = r.run_id WHERE r.run_id LIKE :prefix "
                                "ORDER BY r.run_id", {"prefix": prefix + "%"})
    if not rows:
        raise UnknownRunError(f"no file and no run named {ref!r}", f"see `clsbench history` (index: {shown})")
    if len(rows) > 1:
        raise AmbiguousRunError(ref, [row["run_id"] for row in rows])
    return rows[0]


# ----------------------------------------------------------------------------------------------------------
# rows


def _write_run(conn: StoreConnection, given: Path, result: BenchmarkResult) -> ImportOutcome:
    """Insert or replace one run, its measurements and its whole JSON; the caller holds the transaction."""
    run_id = run_id_of(result)
    absolute = given.expanduser().resolve()
    previous = conn.execute("SELECT path FROM runs WHERE run_id = :run_id", {"run_id": run_id})
    run = _run_row(run_id, absolute, result)
    conn.execute(_UPSERT_RUN, run)
    conn.execute("DELETE FROM measurements WHERE run_id = :run_id", {"run_id": run_id})
    conn.executemany(_INSERT_MEASUREMENT, [_measurement_row(run_id, i, m) for i, m in enumerate(result.measurements)])
    text = _document(given, result)
    conn.execute(_UPSERT_DOCUMENT, {"run_id": run_id, "result_json": text,
                                    "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()})
    counts = f"{run['measurements']} measurement(s): {run['ok']} ok, {run['failed']} failed, " \
             f"{run['skipped']} skipped, {run['unstable']} unstable"
    if not previous:
        return ImportOutcome(given, IMPORTED, run_id, counts)
    was = previous[0]["path"]
    moved = f"; was indexed from {was}" if was != str(absolute) else ""
    return ImportOutcome(given, UPDATED, run_id, counts + moved)


def _document(given: Path, result: BenchmarkResult) -> str:
    """The whole result JSON: the file as written (so nothing a newer clsbench added is lost), else as
    :func:`clsbench.results.io.save` writes ``result``."""
    try:
        text = given.read_text(encoding="utf-8")
        json.loads(text)
        return text
    except (OSError, UnicodeDecodeError, ValueError):
        return json.dumps(result_io.jsonable(result.to_dict()), indent=1, allow_nan=False) + "\n"


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
# filters


def _filters(model: str | None, gpu: str | None, since: str | None,
             commit: str | None) -> tuple[list[str], dict[str, Any], bool]:
    """The WHERE clauses and parameters of history's filters, and whether they are exact (a pattern with a
    ``[...]`` class is matched loosely in SQL, then exactly in Python)."""
    where: list[str] = []
    params: dict[str, Any] = {}
    exact = True
    if model is not None:
        params["model"], precise = _like(model, substring=False)
        exact &= precise
        where.append("EXISTS (SELECT 1 FROM measurements m WHERE m.run_id = runs.run_id "
                     "AND lower(m.model) LIKE :model ESCAPE '!')")
    if gpu is not None:
        params["gpu"], precise = _like(gpu, substring=True)
        exact &= precise
        where.append("(lower(gpu_name) LIKE :gpu ESCAPE '!' OR (gpu_name IS NULL AND "
                     "(lower(device) LIKE :gpu ESCAPE '!' OR lower(cpu_model) LIKE :gpu ESCAPE '!')))")
    if since is not None:
        params["since"] = since_utc(since)
        where.append("created_utc >= :since")
    if commit is not None:
        text = commit.strip().lower()
        if not _is_hex(text):
            raise InvalidInputError(f"--commit {commit!r} is not a commit id", "give hex digits, e.g. --commit 4e65182")
        params["commit"] = text + "%"
        where.append("lower(git_commit) LIKE :commit")
    return where, params, exact


def since_utc(text: str, now: _dt.datetime | None = None) -> str:
    """``--since``: an ISO date or time (UTC unless it names a zone), or ``7d`` / ``12h`` / ``30m`` before ``now``,
    as the ISO text result files hold (``2026-12-01T08:00:00+00:00``), which sorts as time does."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    ago = _AGO.match(text)
    if ago:
        moment = now - _dt.timedelta(**{_AGO_UNITS[ago.group(2).lower()]: float(ago.group(1))})
    else:
        try:
            moment = _dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"--since {text!r} is neither a date nor a time ago",
                                    "e.g. --since 2026-12-01, --since 2026-12-01T08:00, --since 7d") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=_dt.timezone.utc)
    return moment.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")


def _like(pattern: str, *, substring: bool) -> tuple[str, bool]:
    """An ``fnmatch`` pattern as a lower-case SQL ``LIKE`` pattern with ``!`` as the escape, and whether it is
    exact (a ``[...]`` class becomes any one character)."""
    text = pattern.lower()
    wild = any(c in text for c in "*?[")
    out, exact, i = [], True, 0
    while i < len(text):
        c = text[i]
        # fnmatch: a ']' right after '[' or '[!' is a member of the class, not its end.
        end = text.find("]", i + (3 if text[i + 1:i + 2] == "!" else 2)) if c == "[" else -1
        if c == "*":
            out.append("%")
        elif c == "?":
            out.append("_")
        elif end > 0:
            out.append("_")
            exact, i = False, end
        elif c in "%_!":
            out.append("!" + c)
        else:
            out.append(c)
        i += 1
    like = "".join(out)
    return (f"%{like}%" if substring and not wild else like), exact


def _matches(run: dict[str, Any], gpu: str | None) -> bool:
    """The GPU filter in Python, exactly (the model filter is checked against the measurements by the caller)."""
    if gpu is None:
        return True
    if run.get("gpu_name"):
        return _match(gpu, run["gpu_name"], True)
    return _match(gpu, run.get("device"), True) or _match(gpu, run.get("cpu_model"), True)


# ----------------------------------------------------------------------------------------------------------
# files


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
