"""The embedded default: the store in one SQLite file (a plain path, or ``sqlite:///PATH``).

Every write takes SQLite's write lock up front (``BEGIN IMMEDIATE``), so a locked index fails before any work, and
waits at most the caller's timeout for it. Every SQLite problem (locked, not a database, read-only, a directory that
cannot be created) becomes one :class:`~clsbench.results.store_base.StoreError` line with a hint.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clsbench.results.store_base import BACKENDS, DB_HINT, Location, StoreConnection, StoreError

__all__ = ["SqliteBackend", "SqliteConnection"]


class SqliteConnection(StoreConnection):
    """A connection to an index file, in autocommit mode with explicit transactions."""

    file_errors = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError)

    def __init__(self, location: Location, raw: sqlite3.Connection, timeout_s: float) -> None:
        self.location = location
        self.raw = raw
        self.timeout_s = timeout_s
        raw.row_factory = sqlite3.Row

    def execute(self, sql: str, params: Mapping[str, Any] | Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.raw.execute(sql, params)
        return [dict(row) for row in cursor.fetchall()] if cursor.description else []

    def executemany(self, sql: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.raw.executemany(sql, rows)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.raw.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if self.raw.in_transaction:  # SQLite may already have rolled back (e.g. after a full disk)
                self.raw.execute("ROLLBACK")
            raise
        self.raw.execute("COMMIT")

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise translate(exc, self.location.shown, self.timeout_s) from None

    def table_names(self) -> set[str]:
        return {row["name"] for row in self.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def close(self) -> None:
        self.raw.close()


def translate(exc: sqlite3.Error, shown: str, timeout_s: float) -> StoreError:
    """One line for a SQLite error."""
    text = str(exc)
    lower = text.lower()
    if "locked" in lower or "busy" in lower:
        return StoreError(f"index {shown} is locked by another process (waited {timeout_s:g} s)",
                          f"wait for the other clsbench command to finish, or {DB_HINT}")
    if "not a database" in lower or "malformed" in lower or "encrypted" in lower:
        return StoreError(f"{shown} is not a clsbench index (not a SQLite database, or damaged)",
                          f"move it away, or {DB_HINT}")
    if "readonly" in lower or "read-only" in lower:
        return StoreError(f"index {shown} is read-only", f"check its permissions, or {DB_HINT}")
    if "unable to open" in lower:
        return StoreError(f"cannot open index {shown}", f"check the directory's permissions, or {DB_HINT}")
    return StoreError(f"index {shown}: {text}", DB_HINT)


class SqliteBackend:
    """Registered as ``sqlite``: the location's target is the file's path."""

    def check(self, location: Location) -> None:
        if Path(location.target).is_dir():
            raise StoreError(f"index path {location.shown} is a directory", f"give a file name; {DB_HINT}")

    def exists(self, location: Location) -> bool:
        path = Path(location.target)
        if path.is_dir():
            raise StoreError(f"index path {location.shown} is a directory", f"give a file name; {DB_HINT}")
        return path.exists()

    def connect(self, location: Location, timeout_s: float) -> StoreConnection:
        path = Path(location.target)
        if path.is_dir():
            raise StoreError(f"index path {location.shown} is a directory", f"give a file name; {DB_HINT}")
        if not path.exists():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create directory {path.parent} for the index: {exc.strerror or exc}",
                                 DB_HINT) from None
        try:
            raw = sqlite3.connect(str(path), timeout=timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise translate(exc, location.shown, timeout_s) from None
        return SqliteConnection(location, raw, timeout_s)


BACKENDS.register("sqlite", SqliteBackend())
