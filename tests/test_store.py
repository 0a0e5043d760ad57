"""The SQLite index (clsbench.results.store) and its commands ``import`` and ``history``.

Fast and CPU-only: every test uses its own database under ``tmp_path``, given by the ``db`` argument, by
``--db`` or by ``$CLSBENCH_DB``. The result files are the committed fixture and H200 results; a CPU result and
a resumed (partial) run are derived from the fixture in memory.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import sqlite3
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from clsbench.cli.store_cmds import TABLE_WIDTH, register
from clsbench.errors import EXIT_FILE, EXIT_INVALID_INPUT, InvalidInputError, ResultFileError
from clsbench.results import io as result_io
from clsbench.results import store
from clsbench.results.schema import BenchmarkResult

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "benchmarks" / "results" / "h200"
SEED = H200 / "seed-suite.json"
TELEMETRY = H200 / "telemetry-check-resnet50.json"
#: Named one by one, so that a result file added to benchmarks/ later does not change these tests.
H200_FILES = [SEED, TELEMETRY, H200 / "telemetry-check-mobilenet-latency.json", H200 / "fidelity-resnet50.json",
              H200 / "launch-bound-rerun.json", H200 / "resnet50-latency-modes.json"]


@pytest.fixture
def fixture_file(data_dir: Path) -> Path:
    return data_dir / "result_v1.json"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "index" / "index.sqlite3"


@pytest.fixture
def cpu_file(tmp_path: Path, fixture_file: Path) -> Path:
    """A CPU run, in the shape CPU and older files have: no GPU name, no telemetry or efficiency summaries."""
    data = json.loads(fixture_file.read_text(encoding="utf-8"))
    data["created_utc"] = "2026-12-01T08:00:00+00:00"
    data["environment"]["device"] = "cpu"
    data["environment"]["gpu"] = {"count": 0, "name": None, "driver_version": None}
    for m in data["measurements"]:
        m["device"] = "cpu"
        m["summary"].pop("telemetry", None)
        m["summary"].pop("efficiency", None)
    path = tmp_path / "cpu-run.json"
    result_io.save(BenchmarkResult.from_dict(data), path)
    return path


def count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def cli(*args: str) -> Result:
    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


def assert_clean_error(result: Result, code: int, *words: str) -> None:
    """Exit ``code``, one ``error:`` line then one ``hint:`` line on stderr, no traceback."""
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    hints = [i for i, line in enumerate(lines) if line.startswith("hint: ")]
    assert len(errors) == 1 and hints == [errors[0] + 1], result.stderr
    for word in words:
        assert word in lines[errors[0]] + lines[hints[0]], result.stderr


def lock(db: Path) -> sqlite3.Connection:
    """Another process's exclusive lock on ``db`` (a second connection behaves the same for SQLite)."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


# ----------------------------------------------------------------------------------------------------------
# where the index lives


def test_store_path_prefers_the_argument_then_the_variable_then_xdg(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CLSBENCH_DB", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert store.store_path() == tmp_path / "home" / ".local" / "share" / "clsbench" / "index.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: relative paths are invalid
    assert store.store_path() == tmp_path / "home" / ".local" / "share" / "clsbench" / "index.sqlite3"
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert store.store_path() == tmp_path / "xdg" / "clsbench" / "index.sqlite3"
    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path / "env.sqlite3"))
    assert store.store_path() == tmp_path / "env.sqlite3"
    assert store.store_path(tmp_path / "arg.sqlite3") == tmp_path / "arg.sqlite3"


def test_reading_a_missing_index_creates_nothing(db: Path):
    assert store.history(db) == []
    with pytest.raises(store.UnknownRunError, match="no file and no run"):
        store.resolve_run("abcdef", db)
    assert not db.exists() and not db.parent.exists()


# ----------------------------------------------------------------------------------------------------------
# import


def test_import_indexes_the_fixture_and_the_h200_files(db: Path, fixture_file: Path):
    outcomes = store.import_files([fixture_file, *H200_FILES], db=db)
    assert [o.status for o in outcomes] == ["imported"] * 7
    assert all(re.fullmatch(r"[0-9a-f]{12}", o.run_id or "") for o in outcomes)
    assert len({o.run_id for o in outcomes}) == 7
    assert count(db, "runs") == 7
    results = [result_io.load(p) for p in [fixture_file, *H200_FILES]]
    assert count(db, "measurements") == sum(len(r.measurements) for r in results)
    with sqlite3.connect(db) as conn:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
        run = conn.execute("SELECT path, gpu_name, device, torch, cuda, driver, suite, ok, failed, unstable "
                           "FROM runs WHERE run_id = ?", (outcomes[1].run_id,)).fetchone()
    assert version == str(store.INDEX_SCHEMA_VERSION)
    unstable = sum(bool(m.summary.get("unstable")) for m in results[1].measurements)
    assert run == (str(SEED), "NVIDIA H200", "cuda", "2.11.0+cu130", "13.0", "580.159.04", "seed", 30, 0, unstable)


def test_import_stores_the_figures_unrounded_and_none_where_a_file_has_none(db: Path, fixture_file: Path):
    outcomes = store.import_files([TELEMETRY, fixture_file], db=db)
    telemetry = result_io.load(TELEMETRY).measurements[0].summary
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = [dict(r) for r in conn.execute("SELECT * FROM measurements WHERE run_id = ? ORDER BY ordinal",
                                              (outcomes[0].run_id,))]
        old = [dict(r) for r in conn.execute("SELECT * FROM measurements WHERE run_id = ? ORDER BY ordinal",
                                             (outcomes[1].run_id,))]
    assert rows[0]["throughput_img_s"] == telemetry["throughput_img_s"]
    assert rows[0]["latency_p50_ms"] == telemetry["latency_ms"]["p50"]
    assert rows[0]["peak_memory_allocated_bytes"] == telemetry["peak_memory_allocated_bytes"]
    assert rows[0]["power_avg_w"] == telemetry["telemetry"]["power_avg_w"]
    assert rows[0]["joules_per_image"] == telemetry["telemetry"]["joules_per_image"]
    assert rows[0]["mfu_datasheet_pct"] == telemetry["efficiency"]["mfu_datasheet_pct"]
    assert rows[0]["bound_by"] == "memory"
    # The fixture: telemetry without a source, efficiency "unavailable"; a failed and a skipped measurement.
    assert [r["status"] for r in old] == ["ok", "ok", "ok", "failed", "skipped"]
    assert old[0]["power_avg_w"] is None and old[0]["mfu_datasheet_pct"] is None and old[0]["bound_by"] is None
    assert (old[3]["reason"], old[3]["throughput_img_s"], old[3]["unstable"]) == ("oom", None, None)


def test_reimporting_updates_instead_of_duplicating(db: Path, fixture_file: Path):
    first = store.import_files([fixture_file, SEED], db=db)
    again = store.import_files([SEED, fixture_file, SEED], db=db)
    assert [o.status for o in again] == ["updated"] * 3
    assert [o.run_id for o in again] == [first[1].run_id, first[0].run_id, first[1].run_id]
    assert count(db, "runs") == 2
    assert count(db, "measurements") == 5 + 30


def test_a_resumed_run_keeps_its_id_and_grows(db: Path, tmp_path: Path, fixture_file: Path):
    full = result_io.load(fixture_file)
    partial_path, full_path = tmp_path / "partial.json", tmp_path / "moved" / "full.json"
    result_io.save(dataclasses.replace(full, measurements=full.measurements[:2]), partial_path)
    full_path.parent.mkdir()
    result_io.save(full, full_path)
    [partial] = store.import_files([partial_path], db=db)
    assert partial.status == "imported" and partial.message.startswith("2 measurement(s)")
    [grown] = store.import_files([full_path], db=db)
    assert (grown.status, grown.run_id) == ("updated", partial.run_id)
    assert f"was indexed from {partial_path}" in grown.message
    assert count(db, "runs") == 1 and count(db, "measurements") == 5
    assert store.resolve_run(grown.run_id or "", db) == full_path


def test_index_result_gives_the_id_that_importing_the_saved_file_gives(db: Path, tmp_path: Path,
                                                                        fixture_file: Path):
    result = result_io.load(fixture_file)
    # Settings as `run` holds them in memory: tuples, and an infinity that the file stores as a string.
    settings = {**copy.deepcopy(result.settings), "extra": (1, 2), "limit_s": float("inf")}
    result = dataclasses.replace(result, settings=settings)
    path = tmp_path / "run.json"
    result_io.save(result, path)
    indexed = store.index_result(path, result, db=db)
    assert indexed.status == "imported" and indexed.run_id == store.run_id_of(result)
    [imported] = store.import_files([path], db=db)
    assert (imported.status, imported.run_id) == ("updated", indexed.run_id)


def test_a_directory_stands_for_its_json_files(db: Path, tmp_path: Path, fixture_file: Path):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "a.json").write_bytes(fixture_file.read_bytes())
    (folder / "notes.txt").write_text("not a result\n", encoding="utf-8")
    [outcome] = store.import_files([folder], db=db)
    assert (outcome.path, outcome.status) == (folder / "a.json", "imported")


def test_a_corrupt_file_among_several_is_reported_and_the_rest_imported(db: Path, tmp_path: Path,
                                                                        fixture_file: Path):
    truncated = tmp_path / "truncated.json"
    truncated.write_text(fixture_file.read_text(encoding="utf-8")[:500], encoding="utf-8")
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": "world"}\n', encoding="utf-8")
    outcomes = store.import_files([fixture_file, truncated, tmp_path / "missing.json", foreign, SEED], db=db)
    assert [o.status for o in outcomes] == ["imported", "error", "error", "error", "imported"]
    assert "is not valid JSON" in outcomes[1].message and "\n" not in outcomes[1].message
    assert "does not exist" in outcomes[2].message
    assert "not a clsbench result file" in outcomes[3].message
    assert count(db, "runs") == 2


def test_a_file_the_index_refuses_is_one_error_and_the_rest_imported(db: Path, tmp_path: Path,
                                                                      fixture_file: Path):
    data = json.loads(fixture_file.read_text(encoding="utf-8"))
    data["created_utc"] = "2026-12-02T00:00:00+00:00"
    data["measurements"][2]["model"] = None  # a model name must be text: the file is refused when read
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps(data), encoding="utf-8")
    outcomes = store.import_files([fixture_file, odd, SEED], db=db)
    assert [o.status for o in outcomes] == ["imported", "error", "imported"]
    assert outcomes[1].message.startswith(f"{odd} is damaged: ValueError: measurement field 'model' must be str")
    assert count(db, "runs") == 2 and count(db, "measurements") == 5 + 30  # nothing of odd.json


def test_a_database_failure_while_writing_leaves_the_index_as_it_was(db: Path, fixture_file: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    store.import_files([fixture_file], db=db)
    rows = count(db, "measurements")
    write_run = store._write_run
    calls: list[Path] = []

    def failing(conn: sqlite3.Connection, given: Path, result: BenchmarkResult) -> store.ImportOutcome:
        calls.append(given)
        if len(calls) == 2:  # the first file's rows are written by now, inside the transaction
            raise sqlite3.OperationalError("disk I/O error")
        return write_run(conn, given, result)

    monkeypatch.setattr(store, "_write_run", failing)
    with pytest.raises(store.StoreError, match="disk I/O error"):
        store.import_files([SEED, fixture_file], db=db)
    assert len(calls) == 2
    assert count(db, "runs") == 1 and count(db, "measurements") == rows


# ----------------------------------------------------------------------------------------------------------
# history


@pytest.fixture
def indexed(db: Path, fixture_file: Path, cpu_file: Path) -> dict[str, str]:
    """Fixture, CPU run and H200 files indexed; file name -> run id."""
    outcomes = store.import_files([fixture_file, cpu_file, *H200_FILES], db=db)
    return {o.path.name: o.run_id or "" for o in outcomes}


def test_history_is_newest_first_with_counts_and_headline(db: Path, indexed: dict[str, str]):
    runs = store.history(db)
    assert [r["created_utc"] for r in runs] == sorted((r["created_utc"] for r in runs), reverse=True)
    assert runs[0]["run_id"] == indexed["cpu-run.json"]  # created 2026-12-01, the newest
    seed = next(r for r in runs if r["run_id"] == indexed["seed-suite.json"])
    assert (seed["suite"], seed["measurements"], seed["ok"], seed["failed"]) == ("seed", 30, 30, 0)
    first = result_io.load(SEED).measurements[0]
    assert seed["headline"]["model"] == first.model and seed["headline"]["workload"] == first.workload
    assert seed["headline"]["throughput_img_s"] == first.summary["throughput_img_s"]
    assert seed["models"][:2] == ["resnet50", "resnet101"]
    assert len(store.history(db, limit=3)) == 3
    assert len(store.history(db, limit=None)) == 8
    with pytest.raises(InvalidInputError, match="--limit"):
        store.history(db, limit=0)


def test_history_filters_by_model_with_wildcards_ignoring_case(db: Path, indexed: dict[str, str]):
    mobilenet = store.history(db, model="MOBILENET*")
    assert {r["run_id"] for r in mobilenet} == {indexed[n] for n in ("seed-suite.json", "launch-bound-rerun.json",
                                                                     "telemetry-check-mobilenet-latency.json")}
    # The headline is then the first ok measurement of a matching model.
    assert all(r["headline"]["model"] == "mobilenet_v3_large" for r in mobilenet)
    assert {r["run_id"] for r in store.history(db, model="resnet152")} == {indexed["result_v1.json"],
                                                                          indexed["cpu-run.json"]}
    assert store.history(db, model="resnet") == []  # no wildcard: the whole name, as `clsbench models` does
    assert [r["run_id"] for r in store.history(db, model="timm/vit_*")] == [indexed["seed-suite.json"]]


def test_history_filters_by_gpu_substring_or_wildcard(db: Path, indexed: dict[str, str]):
    gpu_runs = {v for k, v in indexed.items() if k != "cpu-run.json"}
    assert {r["run_id"] for r in store.history(db, gpu="h200")} == gpu_runs
    assert {r["run_id"] for r in store.history(db, gpu="NVIDIA*")} == gpu_runs
    assert store.history(db, gpu="h2*") == []  # a wildcard pattern matches the whole name
    assert store.history(db, gpu="*A100*") == []
    assert [r["run_id"] for r in store.history(db, gpu="cpu")] == [indexed["cpu-run.json"]]
    assert [r["run_id"] for r in store.history(db, gpu="*xeon*")] == [indexed["cpu-run.json"]]
    both = store.history(db, gpu="h200", model="mobilenet*")
    assert len(both) == 3


# ----------------------------------------------------------------------------------------------------------
# resolve_run


def test_resolve_run_by_file_id_and_prefix(db: Path, indexed: dict[str, str], fixture_file: Path):
    seed_id = indexed["seed-suite.json"]
    assert store.resolve_run(str(fixture_file), db) == fixture_file
    assert store.resolve_run(seed_id, db) == SEED
    assert store.resolve_run(seed_id[:4].upper(), db) == SEED
    with pytest.raises(InvalidInputError, match="too short"):
        store.resolve_run(seed_id[:3], db)
    with pytest.raises(store.UnknownRunError, match="no file and no run named 'ffffffffffff'"):
        store.resolve_run("ffffffffffff", db)
    with pytest.raises(ResultFileError, match="does not exist"):
        store.resolve_run("results/nothing-here.json", db)


def test_resolve_run_refuses_an_ambiguous_prefix(db: Path, tmp_path: Path, fixture_file: Path):
    base = result_io.load(fixture_file)
    seen: dict[str, BenchmarkResult] = {}
    for n in range(100_000):  # two runs whose ids share 4 digits: about 300 tries by the birthday bound
        result = dataclasses.replace(base, created_utc=f"2026-01-01T00:00:00.{n:06d}+00:00")
        prefix = store.run_id_of(result)[:4]
        if prefix in seen:
            break
        seen[prefix] = result
    pair = [seen[prefix], result]
    for i, r in enumerate(pair):
        store.index_result(tmp_path / f"run{i}.json", r, db=db)
    with pytest.raises(store.AmbiguousRunError, match=f"run id prefix '{prefix}' matches 2 runs") as caught:
        store.resolve_run(prefix, db)
    assert sorted(caught.value.run_ids) == sorted(store.run_id_of(r) for r in pair)
    assert caught.value.exit_code == EXIT_INVALID_INPUT


def test_resolve_run_says_when_the_indexed_file_is_gone(db: Path, tmp_path: Path, fixture_file: Path):
    path = tmp_path / "gone.json"
    path.write_bytes(fixture_file.read_bytes())
    [outcome] = store.import_files([path], db=db)
    path.unlink()
    with pytest.raises(ResultFileError, match="no longer exists") as caught:
        store.resolve_run(outcome.run_id or "", db)
    assert caught.value.hint and "clsbench import" in caught.value.hint


# ----------------------------------------------------------------------------------------------------------
# a bad database


def test_a_file_that_is_not_sqlite_is_refused_and_left_alone(db: Path, fixture_file: Path):
    db.parent.mkdir(parents=True)
    db.write_text("these are my notes, not a database\n" * 100, encoding="utf-8")
    before = db.read_bytes()
    for call in (lambda: store.import_files([fixture_file], db=db), lambda: store.history(db)):
        with pytest.raises(store.StoreError, match="not a clsbench index") as caught:
            call()
        assert caught.value.exit_code == EXIT_FILE and caught.value.hint
    assert db.read_bytes() == before


def test_a_foreign_sqlite_database_is_refused(db: Path, fixture_file: Path):
    db.parent.mkdir(parents=True)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE photos (name TEXT)")
    with pytest.raises(store.StoreError, match="SQLite database but not a clsbench index"):
        store.import_files([fixture_file], db=db)


def test_an_index_from_a_newer_clsbench_is_refused(db: Path, fixture_file: Path):
    store.import_files([fixture_file], db=db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(store.StoreError, match="format 99, newer than this clsbench") as caught:
        store.history(db)
    assert "upgrade clsbench" in (caught.value.hint or "")


def test_a_directory_that_cannot_be_created_is_one_clear_error(tmp_path: Path, fixture_file: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(store.StoreError, match="cannot create directory") as caught:
        store.import_files([fixture_file], db=blocker / "sub" / "index.sqlite3")
    assert caught.value.exit_code == EXIT_FILE
    with pytest.raises(store.StoreError, match="is a directory"):
        store.import_files([fixture_file], db=tmp_path)


def test_a_locked_index_is_a_clear_error_within_the_timeout(db: Path, fixture_file: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    store.import_files([fixture_file], db=db)
    holder = lock(db)
    try:
        start = time.monotonic()
        with pytest.raises(store.StoreError, match="locked by another process") as caught:
            store.import_files([SEED], db=db)
        waited = time.monotonic() - start
        monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.2)  # the default was shown above; readers wait as long
        with pytest.raises(store.StoreError, match="locked"):
            store.history(db)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert caught.value.exit_code == EXIT_FILE and "wait for the other" in (caught.value.hint or "")
    assert waited < 10 * 2.0  # a bound against hanging (the default timeout is 2 s), not a timing measurement
    assert count(db, "runs") == 1  # nothing of SEED was written


# ----------------------------------------------------------------------------------------------------------
# the commands


def test_cli_import_prints_a_line_per_file_and_a_count(db: Path, fixture_file: Path):
    result = cli("import", "--db", str(db), str(fixture_file), str(SEED))
    assert result.exit_code == 0, result.output
    ids = {o["path"]: o["run_id"] for o in store.history(db)}
    lines = result.stdout.splitlines()
    assert lines[0] == (f"imported  {ids[str(fixture_file)]}  {fixture_file}  "
                        "(5 measurement(s): 3 ok, 1 failed, 1 skipped, 1 unstable)")
    assert lines[1].startswith(f"imported  {ids[str(SEED)]}  {SEED}  (30 measurement(s): 30 ok")
    assert lines[2] == f"2 file(s): 2 imported, 0 updated, 0 failed; index: {db}"
    again = cli("import", "--db", str(db), str(SEED))
    assert again.exit_code == 0 and again.stdout.startswith("updated ")


def test_cli_import_exits_3_after_importing_the_good_files(tmp_path: Path, fixture_file: Path,
                                                           monkeypatch: pytest.MonkeyPatch):
    db = tmp_path / "env.sqlite3"
    monkeypatch.setenv("CLSBENCH_DB", str(db))
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    result = cli("import", str(bad), str(fixture_file))
    assert_clean_error(result, EXIT_FILE, "1 of 2 file(s) could not be imported")
    assert result.stdout.splitlines()[0].startswith(f"failed    -             {bad}: {bad} is not valid JSON")
    assert "1 imported, 0 updated, 1 failed" in result.stdout
    assert count(db, "runs") == 1


def test_cli_history_table(db: Path, fixture_file: Path):
    outcomes = store.import_files([fixture_file, SEED, TELEMETRY], db=db)
    fixture_id, seed_id, telemetry_id = (o.run_id for o in outcomes)
    result = cli("history", "--db", str(db))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "run id        date        host        device       torch         suite  ok/fail/unst        figure  "
        "first ok measurement",
        "------------  ----------  ----------  -----------  ------------  -----  ------------  ------------  "
        + "-" * 20,
        f"{fixture_id}  2026-11-30  fixture-..  NVIDIA H200  2.11.0+cu130  -             3/1/1  p50 6.396 ms  "
        "resnet50 infer-lat..",
        f"{telemetry_id}  2026-11-30  vm          NVIDIA H200  2.11.0+cu130  -             2/0/0  15,574 img/s  "
        "resnet50 infer-thr..",
        f"{seed_id}  2026-11-30  vm          NVIDIA H200  2.11.0+cu130  seed        30/0/13     836 img/s  "
        "resnet50 train fp3..",
    ]
    assert all(len(line) <= TABLE_WIDTH for line in result.stdout.splitlines())
    assert result.stderr == f"3 run(s); index: {db}\n"


def test_cli_history_shows_a_cpu_run_and_says_when_more_exist(db: Path, indexed: dict[str, str]):
    result = cli("history", "--db", str(db), "--limit", "2")
    assert result.exit_code == 0, result.output
    rows = result.stdout.splitlines()[2:]
    assert len(rows) == 2 and rows[0].startswith(f"{indexed['cpu-run.json']}  2026-12-01  fixture-..  "
                                                 "cpu Intel(R) Xeon(R)..")
    assert "the newest 2 run(s) shown; --limit N for more" in result.stderr


def test_cli_history_filters_and_json(db: Path, indexed: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CLSBENCH_DB", str(db))
    result = cli("history", "--model", "mobilenet*", "--gpu", "h200", "--format", "json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    assert runs == store.history(db, model="mobilenet*", gpu="h200")
    assert {r["run_id"] for r in runs} == {indexed[n] for n in ("seed-suite.json", "launch-bound-rerun.json",
                                                                "telemetry-check-mobilenet-latency.json")}
    none = cli("history", "--gpu", "a100")
    assert none.exit_code == 0 and none.stdout == "" and "no runs match the filters" in none.stderr


def test_cli_history_of_an_empty_index_says_how_to_fill_it(db: Path):
    result = cli("history", "--db", str(db))
    assert result.exit_code == 0 and result.stdout == ""
    assert "no runs indexed" in result.stderr and "clsbench import" in result.stderr


def test_cli_bad_database_and_bad_limit_are_one_clear_line(db: Path, fixture_file: Path):
    db.parent.mkdir(parents=True)
    db.write_bytes(b"\x00garbage" * 512)
    assert_clean_error(cli("history", "--db", str(db)), EXIT_FILE, "not a clsbench index", "--db")
    assert_clean_error(cli("import", "--db", str(db), str(fixture_file)), EXIT_FILE, "not a clsbench index")
    assert_clean_error(cli("history", "--db", str(db), "--limit", "0"), EXIT_INVALID_INPUT, "--limit")


def test_cli_locked_index_is_one_clear_line(db: Path, fixture_file: Path, monkeypatch: pytest.MonkeyPatch):
    store.import_files([fixture_file], db=db)
    monkeypatch.setattr(store, "LOCK_TIMEOUT_S", 0.2)
    holder = lock(db)
    try:
        result = cli("import", "--db", str(db), str(SEED))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_clean_error(result, EXIT_FILE, "locked by another process", "wait for the other")


def test_two_runs_started_in_the_same_second_are_two_runs(db: Path, tmp_path: Path) -> None:
    """One run per GPU, started together on a multi-GPU box: same second, host and settings, two history rows."""
    import dataclasses

    from clsbench import api
    from clsbench.engine.runner import new_result
    from clsbench.results import io as result_io

    plan = api.plan_run(models=["clsbench_testmodels:tiny"], workloads=["infer-throughput"], device="cpu")
    env = {"device": "cpu", "os": {"hostname": "box"}}
    paths = []
    for name in ("a.json", "b.json"):
        result = dataclasses.replace(new_result(plan, env), created_utc="2026-12-01T10:00:00+00:00")
        result_io.save(result, tmp_path / name)
        paths.append(tmp_path / name)
    outcomes = store.import_files(paths, db=db)
    assert [o.status for o in outcomes] == ["imported", "imported"]
    assert count(db, "runs") == 2
    assert len({row["run_id"] for row in store.history(db)}) == 2


@pytest.mark.parametrize("command", [("sweep", "--batch-size", "1,2"), ("soak", "--duration", "20s")])
def test_a_store_url_that_cannot_work_is_refused_before_any_command_measures(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: tuple[str, ...]) -> None:
    """Every command that saves a result checks $CLSBENCH_DB first (as run checks --db): never after a long run."""
    from clsbench.cli import main

    monkeypatch.setenv(store.DB_ENV_VAR, "mysql://user:secret@host/db")
    out = tmp_path / "out.json"
    result = CliRunner().invoke(main, [command[0], "--model", "clsbench_testmodels:tiny", *command[1:], "--device",
                                       "cpu", "-o", str(out)])
    assert result.exit_code == EXIT_FILE, result.output
    assert "unknown store URL scheme 'mysql'" in result.output and "secret" not in result.output
    assert not out.exists() and "Traceback" not in result.output
