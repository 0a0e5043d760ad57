"""A shared store on a PostgreSQL server (``postgresql://USER@HOST[:PORT]/DB``), through psycopg 3: the extra
``clsbench[postgres]``.

libpq reads what the URL leaves out the usual way: the password from ``$PGPASSWORD``, ``~/.pgpass`` or a service
file (``postgresql:///?service=NAME``), so it never has to sit on a command line. A password in the URL works too,
and is never shown: every message goes through :meth:`Location.scrub`.

Writers serialise creating and migrating the schema with a transaction-scoped advisory lock; rows of different
runs never conflict, and two writers of one run meet in the upsert. Every driver problem becomes one
:class:`~clsbench.results.store_base.StoreError` line: the server cannot be reached, the login is refused, the
database does not exist, the connection was lost in the middle of a write (which the server then rolls back).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clsbench.results.store_base import BACKENDS, DB_HINT, Location, StoreConnection, StoreError

__all__ = ["PostgresBackend", "PostgresConnection", "require_driver", "translate"]

#: The advisory lock key that guards creating and migrating the schema: "clsbench" in ASCII, as a bigint.
SCHEMA_LOCK_KEY = 0x636C7362656E6368 & 0x7FFFFFFFFFFFFFFF
#: libpq's connect_timeout is whole seconds, at least 2 (libpq raises 1 to 2).
MIN_CONNECT_TIMEOUT_S = 2
#: A ``:name`` placeholder (not a ``::`` cast).
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_INSTALL_HINT = "install the extra: pip install 'clsbench[postgres]' (psycopg 3)"

_LOGIN = ("password authentication failed", "no password supplied", "authentication failed",
          "peer authentication", "no pg_hba.conf entry")
_UNREACHABLE = ("connection refused", "could not connect", "timeout expired", "could not translate host name",
                "no route to host", "name or service not known", "network is unreachable", "no such file or dir")
_LOST = ("server closed the connection", "terminating connection", "connection is lost", "consuming input failed",
         "the connection is closed", "connection already closed", "ssl syscall error", "eof detected",
         "administrator command", "sending query failed")


def require_driver() -> Any:
    """The psycopg module; StoreError with the install line where it is missing."""
    try:
        import psycopg
    except ImportError:
        raise StoreError("a postgresql:// store needs psycopg 3, which is not installed", _INSTALL_HINT) from None
    return psycopg


def to_driver(sql: str) -> str:
    """``:name`` placeholders in psycopg's ``%(name)s`` style; a literal ``%`` doubled."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))


def translate(exc: BaseException, location: Location, *, connecting: bool) -> StoreError:
    """One line for a psycopg error, with no secret of ``location`` in it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    detail = location.scrub(" ".join(lines[:2]) if lines else type(exc).__name__)
    lower = detail.lower()
    shown = location.shown
    if any(k in lower for k in _LOGIN) or ("role" in lower and "does not exist" in lower):
        return StoreError(f"store {shown} refused the login: {_reason(detail)}",
                          "check the user and its password ($PGPASSWORD, ~/.pgpass or a libpq service file; "
                          "docs/store.md)")
    if "database" in lower and "does not exist" in lower:
        return StoreError(f"store {shown}: {_reason(detail)}", "create it (createdb NAME) or name another database")
    if connecting and any(k in lower for k in _UNREACHABLE):
        return StoreError(f"cannot reach the store {shown}: {_reason(detail)}",
                          f"check that the server runs and the host and port are right; {DB_HINT}")
    if any(k in lower for k in _LOST):
        return StoreError(f"the connection to store {shown} was lost: {_reason(detail)}; the server rolled this "
                          "write back", "run the command again; `clsbench store push FILE` adds a saved result")
    if connecting:
        return StoreError(f"cannot connect to store {shown}: {_reason(detail)}", DB_HINT)
    return StoreError(f"store {shown}: {_reason(detail)}", DB_HINT)


def _reason(detail: str) -> str:
    """libpq's message without its ``connection failed: connection to server at ... failed:`` preamble."""
    text = re.sub(r'^connection failed:\s*', "", detail)
    text = re.sub(r'^connection to server (at|on) .*? failed:\s*', "", text)
    return re.sub(r"^FATAL:\s*", "", text).strip() or detail


class PostgresConnection(StoreConnection):
    """A psycopg connection in autocommit mode; :meth:`transaction` opens one transaction at a time."""

    def __init__(self, location: Location, raw: Any, psycopg: Any) -> None:
        self.location = location
        self.raw = raw
        self.psycopg = psycopg
        self.file_errors = (psycopg.DataError, psycopg.IntegrityError)

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.raw.execute(to_driver(sql) if params else sql, params or None)
        return list(cursor.fetchall()) if cursor.description else []

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            with self.raw.cursor() as cursor:
                cursor.executemany(to_driver(sql), rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        with self.raw.transaction():
            yield

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        try:
            yield
        except self.psycopg.Error as exc:
            raise translate(exc, self.location, connecting=False) from None

    def table_names(self) -> set[str]:
        rows = self.execute("SELECT table_name FROM information_schema.tables "
                            "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'")
        return {row["table_name"] for row in rows}

    def lock_schema(self) -> None:
        self.execute("SELECT pg_advisory_xact_lock(:key)", {"key": SCHEMA_LOCK_KEY})

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.raw.close()


class PostgresBackend:
    """Registered as ``postgresql``: the location's target is the URL, handed to libpq as it is."""

    def check(self, location: Location) -> None:
        require_driver()

    def exists(self, location: Location) -> bool:
        return True

    def connect(self, location: Location, timeout_s: float) -> StoreConnection:
        psycopg = require_driver()
        from psycopg.rows import dict_row

        try:
            raw = psycopg.connect(location.target, autocommit=True, row_factory=dict_row,
                                  connect_timeout=max(MIN_CONNECT_TIMEOUT_S, round(timeout_s)),
                                  application_name="clsbench")
        except psycopg.Error as exc:
            raise translate(exc, location, connecting=True) from None
        except ValueError as exc:  # a URL libpq cannot parse
            raise StoreError(f"store URL {location.shown} is not valid: {location.scrub(str(exc))}",
                             "write postgresql://USER@HOST[:PORT]/DB") from None
        return PostgresConnection(location, raw, psycopg)


BACKENDS.register("postgresql", PostgresBackend())
