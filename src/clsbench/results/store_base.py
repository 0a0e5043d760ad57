"""What every results store shares, whatever database holds it: the location (a path or a URL, and how it is shown
with its password redacted), the one schema definition and its migrations, the connection interface each database
dialect implements, and the registry of dialects (:data:`BACKENDS`, one module each under
``clsbench/results/store_backends/``).

The schema is written once, in SQL both SQLite and PostgreSQL accept (``BIGINT`` and ``DOUBLE PRECISION`` are
plain integers and reals to SQLite; an upsert is ``INSERT ... ON CONFLICT ... DO UPDATE`` on both). Statements use
named ``:name`` placeholders; a dialect rewrites them into its driver's style. Where the dialects must differ
(placeholders, transactions, locking the schema, listing tables, turning driver errors into one line) each does it
in its own module.

History of :data:`INDEX_SCHEMA_VERSION` (kept in the ``meta`` table):

* 1 (clsbench 0.1): tables ``meta``, ``runs`` and ``measurements``.
* 2: ``measurements.backend``, the inference backend (``eager`` for every measurement of an older file).
* 3: table ``documents``: the whole result JSON of each run, so that a run can be pulled or compared on another
  machine than the one that wrote it (runs indexed before have none until their file is imported again).

An older index is migrated in place when opened, one format at a time, in one transaction.
"""

from __future__ import annotations

import abc
import contextlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from clsbench.core.registry import Registry
from clsbench.errors import EXIT_FILE, ClsbenchError

__all__ = [
    "BACKENDS",
    "DB_ENV_VAR",
    "INDEX_SCHEMA_VERSION",
    "MIGRATIONS",
    "SCHEMA",
    "SECRET_MASK",
    "Location",
    "StoreBackend",
    "StoreConnection",
    "StoreError",
    "check_schema",
    "parse_location",
    "redact",
]

INDEX_SCHEMA_VERSION = 3
DB_ENV_VAR = "CLSBENCH_DB"
DB_FILE_NAME = "index.sqlite3"
#: What stands where a password was, in every line and row clsbench writes.
SECRET_MASK = "***"

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
DOCUMENT_COLUMNS: tuple[str, ...] = ("run_id", "sha256", "result_json")

_DOCUMENTS_TABLE = """CREATE TABLE IF NOT EXISTS documents (
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id) ON DELETE CASCADE,
    sha256 TEXT NOT NULL,
    result_json TEXT NOT NULL
)"""

#: The one schema, for both dialects. Figures are DOUBLE PRECISION (PostgreSQL's REAL has 24 bits: a figure is
#: never rounded in the store) and byte counts BIGINT.
SCHEMA = """
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
    measurements BIGINT NOT NULL,
    ok BIGINT NOT NULL,
    failed BIGINT NOT NULL,
    skipped BIGINT NOT NULL,
    unstable BIGINT NOT NULL,
    imported_utc TEXT NOT NULL
);
CREATE TABLE measurements (
    run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
    ordinal BIGINT NOT NULL,
    model TEXT NOT NULL,
    workload TEXT NOT NULL,
    mode TEXT NOT NULL,
    backend TEXT NOT NULL DEFAULT 'eager',
    batch_size BIGINT NOT NULL,
    device TEXT NOT NULL,
    input_size BIGINT,
    status TEXT NOT NULL,
    reason TEXT,
    throughput_img_s DOUBLE PRECISION,
    latency_p50_ms DOUBLE PRECISION,
    latency_p99_ms DOUBLE PRECISION,
    spread_pct DOUBLE PRECISION,
    unstable BIGINT,
    peak_memory_allocated_bytes BIGINT,
    power_avg_w DOUBLE PRECISION,
    joules_per_image DOUBLE PRECISION,
    mfu_datasheet_pct DOUBLE PRECISION,
    bound_by TEXT,
    PRIMARY KEY (run_id, ordinal)
);
CREATE INDEX runs_by_created ON runs (created_utc);
CREATE INDEX measurements_by_model ON measurements (model);
""" + _DOCUMENTS_TABLE + ";\n"

#: Statements that bring an index from the format of the key to the next one (:data:`INDEX_SCHEMA_VERSION`).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE measurements ADD COLUMN backend TEXT NOT NULL DEFAULT 'eager'",),
    2: (_DOCUMENTS_TABLE,),
}

DB_HINT = f"use --db PATH|URL or ${DB_ENV_VAR} for another store; it can be rebuilt with `clsbench import FILE...`"


class StoreError(ClsbenchError):
    """The store cannot be used: unreachable, refused, locked, not a clsbench index, newer than this clsbench."""

    exit_code = EXIT_FILE


# ----------------------------------------------------------------------------------------------------------
# where the store is


@dataclass(frozen=True)
class Location:
    """A store: which dialect, what it connects to, and how it is shown.

    Attributes:
        scheme: the registered dialect (``sqlite``, ``postgresql``).
        target: what the dialect connects to: a path for SQLite, the URL for PostgreSQL. It may hold a password,
            so it is never shown (not even by ``repr``); show :attr:`shown`.
        shown: the location with any password replaced by :data:`SECRET_MASK`, for every printed line.
        secrets: the secret strings in ``target``, which no message may contain.
    """

    scheme: str
    target: str = field(repr=False)
    shown: str
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def __str__(self) -> str:
        return self.shown

    def scrub(self, text: str) -> str:
        """``text`` with every secret of this location (and any URL password) replaced by the mask."""
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, SECRET_MASK)
        return redact(text)


#: A URL's scheme at the start of a location (``postgresql://``, ``sqlite:///``).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
#: The user information of a URL anywhere in a text: ``scheme://user:password@`` (up to the last ``@`` before the
#: path: a password may hold one).
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^/@:?#\s]*):[^/?#\s]*@")
#: Query parameters of a database URL that carry a secret (libpq takes ``?password=`` and ``?sslpassword=``).
_SECRET_QUERY = re.compile(r"(?i)([?&](?:ssl)?password)=[^&#\s]*")
#: Scheme spellings of each dialect.
SCHEME_ALIASES: Mapping[str, str] = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql"}


def redact(text: str) -> str:
    """``text`` with every URL password in it (``user:PASSWORD@``, ``?password=``) replaced by the mask."""
    return _SECRET_QUERY.sub(rf"\1={SECRET_MASK}", _URL_PASSWORD.sub(rf"\1:{SECRET_MASK}@", text))


def default_path() -> Path:
    """The default SQLite index: ``$XDG_DATA_HOME/clsbench/index.sqlite3``, else under ``~/.local/share``."""
    xdg = os.environ.get("XDG_DATA_HOME")
    # The XDG base directory spec says a relative $XDG_DATA_HOME is invalid and must be ignored.
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "clsbench" / DB_FILE_NAME


def given_location(db: str | Path | None) -> str | Path:
    """The location as given: ``db``, else ``$CLSBENCH_DB``, else the default SQLite file."""
    if db is not None and str(db):
        return db
    return os.environ.get(DB_ENV_VAR) or default_path()


def parse_location(db: str | Path | None = None) -> Location:
    """The store named by ``db`` (else ``$CLSBENCH_DB``, else the default file): a plain path or ``sqlite:///PATH``
    is SQLite, ``postgresql://`` (or ``postgres://``) is PostgreSQL.

    Raises:
        StoreError: a URL of another scheme (it is never taken for a file name).
    """
    given = given_location(db)
    if isinstance(given, Path):
        return Location("sqlite", str(given.expanduser()), str(given.expanduser()))
    match = _SCHEME.match(given)
    if match is None:
        if given.lower().startswith(tuple(f"{s}:" for s in SCHEME_ALIASES if s != "sqlite")):
            raise StoreError(f"store URL {redact(given)!r} is missing '//' after the scheme",
                             "write postgresql://USER@HOST/DB")
        path = Path(given).expanduser()
        return Location("sqlite", str(path), str(path))
    scheme = SCHEME_ALIASES.get(match.group(1).lower())
    if scheme is None:
        raise StoreError(f"unknown store URL scheme {match.group(1)!r} in {redact(given)!r}",
                         "give a file path, sqlite:///PATH or postgresql://USER@HOST/DB")
    if scheme == "sqlite":
        path = Path(given[match.end():]).expanduser()
        if not str(path) or str(path) == ".":
            raise StoreError(f"store URL {given!r} names no file", "write sqlite:///PATH/TO/index.sqlite3")
        return Location("sqlite", str(path), str(path))
    return Location(scheme, given, redact(given), _secrets_of(given))


def _secrets_of(url: str) -> tuple[str, ...]:
    from urllib.parse import parse_qsl, unquote, urlsplit

    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
        found += [value for key, value in parse_qsl(parts.query) if key.lower() in ("password", "sslpassword")]
    except ValueError:
        return ()
    # Percent-encoded and decoded spellings both, longest first (so no secret is half-replaced).
    spelled = {s for secret in found if secret for s in (secret, unquote(secret))}
    return tuple(sorted(spelled, key=len, reverse=True))


# ----------------------------------------------------------------------------------------------------------
# the interface a dialect implements


class StoreConnection(abc.ABC):
    """One open connection to a store. Statements use ``:name`` placeholders and the shared :data:`SCHEMA`'s SQL.

    Attributes:
        location: the store.
        file_errors: the driver's exceptions that mean "this row's values are refused" (one file fails, the
            others go on), as opposed to a problem with the database.
    """

    location: Location
    file_errors: tuple[type[BaseException], ...] = ()

    @abc.abstractmethod
    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run one statement; its rows as dicts (none for a statement that returns none)."""

    @abc.abstractmethod
    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run one statement once per row of parameters."""

    @abc.abstractmethod
    def transaction(self) -> contextlib.AbstractContextManager[None]:
        """One write transaction: committed at the end, rolled back on any exception."""

    @abc.abstractmethod
    def errors(self) -> contextlib.AbstractContextManager[None]:
        """Turn the driver's exceptions inside the block into one :class:`StoreError` line each."""

    @abc.abstractmethod
    def table_names(self) -> set[str]:
        """The tables of the store's schema."""

    def lock_schema(self) -> None:  # noqa: B027 - a dialect whose transactions already exclude others needs none
        """Inside a transaction: keep other writers from creating or migrating the schema at the same time."""

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection (errors while closing are ignored)."""


class StoreBackend(Protocol):
    """A database dialect: registered in :data:`BACKENDS` under its URL scheme."""

    def check(self, location: Location) -> None:
        """Before any work, without connecting: StoreError where this store cannot be used (a missing driver)."""
        ...

    def exists(self, location: Location) -> bool:
        """Whether there may be an index to read (SQLite: the file exists; a server: always)."""
        ...

    def connect(self, location: Location, timeout_s: float) -> StoreConnection:
        """An open connection, waiting at most ``timeout_s`` for the server or a lock.

        Raises:
            StoreError: the store cannot be reached, refuses the login, or is not a database.
        """
        ...


BACKENDS: Registry[StoreBackend] = Registry("store URL scheme", package="clsbench.results.store_backends",
                                            option="--db")


# ----------------------------------------------------------------------------------------------------------
# the schema, the same on every dialect


def check_schema(conn: StoreConnection, *, create: bool) -> bool:
    """Create the tables in an empty store (when ``create``), migrate an older one, refuse a foreign or newer one.

    Returns:
        whether there is an index to use (False only for an empty store when not ``create``).
    """
    shown = conn.location.shown
    tables = conn.table_names()
    if not tables:
        if not create:
            return False
        with conn.transaction():
            conn.lock_schema()
            # Another process may have created the tables while this one waited for the lock.
            if "meta" not in conn.table_names():
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', :v)",
                             {"v": str(INDEX_SCHEMA_VERSION)})
        return True
    if "meta" not in tables:
        raise StoreError(f"{shown} is a {conn_kind(conn)} database but not a clsbench index", DB_HINT)
    version = _version(conn)
    if version is None:
        raise StoreError(f"{shown} is not a clsbench index (no schema version)", DB_HINT)
    if version > INDEX_SCHEMA_VERSION:
        raise StoreError(f"index {shown} has format {version}, newer than this clsbench reads "
                         f"(<= {INDEX_SCHEMA_VERSION})", f"upgrade clsbench, or {DB_HINT}")
    if version < INDEX_SCHEMA_VERSION:
        _migrate(conn)
    return True


def conn_kind(conn: StoreConnection) -> str:
    return {"sqlite": "SQLite", "postgresql": "PostgreSQL"}.get(conn.location.scheme, conn.location.scheme)


def _version(conn: StoreConnection) -> int | None:
    rows = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    try:
        return int(rows[0]["value"]) if rows else None
    except (TypeError, ValueError):
        return None


def _migrate(conn: StoreConnection) -> None:
    """Bring an older index up to :data:`INDEX_SCHEMA_VERSION`, one format at a time, in one transaction; an index
    another process migrated meanwhile is left as it is."""
    with conn.transaction():
        conn.lock_schema()
        current = _version(conn) or INDEX_SCHEMA_VERSION
        while current < INDEX_SCHEMA_VERSION:
            steps = MIGRATIONS.get(current)
            if steps is None:
                raise StoreError(f"index {conn.location.shown} has the old format {current}, which this clsbench "
                                 "cannot migrate",
                                 "delete it and import the result files again with `clsbench import FILE...`")
            for statement in steps:
                conn.execute(statement)
            current += 1
            conn.execute("UPDATE meta SET value = :v WHERE key = 'schema_version'", {"v": str(current)})


@contextlib.contextmanager
def opened(location: Location, timeout_s: float, *, create: bool) -> Iterator[StoreConnection | None]:
    """A checked connection to the store (see :func:`check_schema`); None when there is no index to read."""
    backend = BACKENDS.get(location.scheme)
    if not create and not backend.exists(location):
        yield None
        return
    conn = backend.connect(location, timeout_s)
    try:
        with conn.errors():
            usable = check_schema(conn, create=create)
        yield conn if usable else None
    finally:
        conn.close()

