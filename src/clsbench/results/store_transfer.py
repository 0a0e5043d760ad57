"""Moving runs between stores and files: ``clsbench store pull`` writes a run the store keeps back to a result
file, ``clsbench store migrate`` copies a whole history from one store to another (SQLite to PostgreSQL, say).

``migrate`` copies the rows as they are (nothing is derived again, so nothing changes) in one transaction on the
destination, then reads them back and compares a SHA-256 checksum over every copied row with the source's: the
count and the checksum it prints are of both sides, which agree, or it fails.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.errors import ResultFileError
from clsbench.results import io as result_io
from clsbench.results import store
from clsbench.results.store_base import DOCUMENT_COLUMNS, MEASUREMENT_COLUMNS, RUN_COLUMNS, StoreConnection, StoreError

__all__ = ["MigrateOutcome", "checksum", "migrate", "pull"]

_TABLES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("runs", RUN_COLUMNS, "run_id"),
    ("measurements", MEASUREMENT_COLUMNS, "run_id, ordinal"),
    ("documents", DOCUMENT_COLUMNS, "run_id"),
)


@dataclass(frozen=True)
class MigrateOutcome:
    """What ``migrate`` copied: rows per table and the checksum both stores agree on."""

    source: str
    destination: str
    runs: int
    measurements: int
    documents: int
    checksum: str


def pull(ref: str, output: str | Path, db: str | Path | None = None) -> tuple[str, Path]:
    """Write the run named by ``ref`` (a run id or prefix) from the store's copy to ``output``, atomically; an
    existing file is never overwritten. Returns the run id and the path.

    Raises:
        ResultFileError: ``output`` exists or cannot be written, or the store has no copy of the run.
        UnknownRunError, AmbiguousRunError, StoreError: as :func:`clsbench.results.store.load_run`.
    """
    path = Path(output)
    if path.exists():
        raise ResultFileError(f"{path} already exists; pull never overwrites a file",
                              "give another -o FILE, or move the existing one away")
    result_io.check_writable(path)
    found = _document(ref, db)
    result_io.write_text_atomic(path, found["result_json"])
    return found["run_id"], path


def _document(ref: str, db: str | Path | None) -> dict[str, Any]:
    found = store.lookup_run(ref, db, with_document=True)
    if isinstance(found, Path):
        raise ResultFileError(f"{ref} is a file here, not a run id in the store",
                              "give a run id from `clsbench history`")
    if found.get("result_json") is None:
        raise ResultFileError(f"the store has no copy of run {found['run_id']} (indexed from {found['path']} before "
                              "stores kept whole results)",
                              f"push the file again on {found['hostname'] or 'its host'}: clsbench store push FILE")
    return found


def checksum(conn: StoreConnection, run_ids: list[str] | None = None) -> tuple[dict[str, int], str]:
    """Rows per table and the SHA-256 of every row (of ``run_ids``, or all) in key order, as canonical JSON."""
    digest = hashlib.sha256()
    counts: dict[str, int] = {}
    wanted = None if run_ids is None else set(run_ids)
    for table, columns, order in _TABLES:
        counts[table] = 0
        for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}"):
            if wanted is not None and row["run_id"] not in wanted:
                continue
            counts[table] += 1
            digest.update(json.dumps([table, *(row[c] for c in columns)], separators=(",", ":")).encode("utf-8"))
            digest.update(b"\n")
    return counts, digest.hexdigest()


def migrate(source: str, destination: str) -> MigrateOutcome:
    """Copy every run of the store ``source`` into ``destination`` (created where missing; a run it already holds
    is replaced by the source's), in one transaction, and check the copy by its checksum.

    Raises:
        StoreError: either store cannot be used, the source holds no index, or the copy differs from the source.
    """
    shown_from, shown_to = store.describe(source), store.describe(destination)
    if shown_from == shown_to:
        raise StoreError(f"--from and --to are the same store ({shown_from})", "name two different stores")
    with store.open_store(source, create=False) as src:
        if src is None:
            raise StoreError(f"there is no index at {shown_from} to migrate", "check --from")
        with src.errors():
            tables = {table: src.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY {order}")
                      for table, cols, order in _TABLES}
            counts, expected = checksum(src)
    run_ids = [row["run_id"] for row in tables["runs"]]
    with store.open_store(destination) as dst:
        assert dst is not None  # created
        with dst.errors():
            with dst.transaction():
                for run_id in run_ids:  # children first: SQLite enforces no foreign keys, PostgreSQL does
                    for table in ("documents", "measurements", "runs"):
                        dst.execute(f"DELETE FROM {table} WHERE run_id = :run_id", {"run_id": run_id})
                for table, columns, _ in _TABLES:
                    dst.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                                    f"VALUES ({', '.join(':' + c for c in columns)})", tables[table])
            copied, found = checksum(dst, run_ids)
    if (copied, found) != (counts, expected):
        raise StoreError(f"the copy in {shown_to} differs from {shown_from} (rows {copied} against {counts})",
                         "nothing is lost in the source; report this with both clsbench and database versions")
    return MigrateOutcome(shown_from, shown_to, counts["runs"], counts["measurements"], counts["documents"], expected)
