"""The results store on a real PostgreSQL server (tests/pg_server.py starts one per session), store URLs and their
secrets, push/pull/migrate, concurrent writers, and the faults a shared store meets. No mock stands in for the
database; without a server these tests skip with the reason.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from clsbench.errors import EXIT_FILE
from clsbench.results import io as result_io
from clsbench.results import store, store_transfer
from clsbench.results.schema import BenchmarkResult
from clsbench.results.store_base import SCHEMA, StoreError, parse_location

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "benchmarks" / "results" / "h200"
SEED = H200 / "seed-suite.json"
TINY = "clsbench_testmodels:tiny"
SECRET = "Pl4nted-S3cret-pw"


@pytest.fixture(scope="session")
def pg() -> Iterator[object]:
    from pg_server import running_server

    with running_server() as server:
        yield server


@pytest.fixture
def pgpass(pg, monkeypatch: pytest.MonkeyPatch) -> object:
    """The server, with its password where libpq reads it ($PGPASSWORD), so URLs need none."""
    monkeypatch.setenv("PGPASSWORD", pg.password)
    monkeypatch.delenv("PGSERVICE", raising=False)
    return pg


@pytest.fixture
def url(pgpass) -> str:
    """A fresh database of the session's server, as a URL without a password."""
    return pgpass.url(pgpass.create_database())


def cli(*args: str) -> Result:
    from clsbench.cli.store_cmds import register

    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


def one_error(result: Result, *words: str) -> str:
    """Exit 3, one ``error:`` line and one ``hint:`` line, no traceback; the error line."""
    assert result.exit_code == EXIT_FILE, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1 and sum(line.startswith("hint: ") for line in lines) == 1, result.stderr
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def cpu_copy(tmp_path: Path, data_dir: Path, name: str, host: str, created: str) -> Path:
    data = json.loads((data_dir / "result_v1.json").read_text(encoding="utf-8"))
    data["run_id"] = os.urandom(6).hex()
    data["created_utc"] = created
    data["environment"]["os"]["hostname"] = host
    data["environment"]["device"] = "cpu"
    data["environment"].setdefault("clsbench", {})["git_commit"] = "4e65182" + host.encode().hex()
    data["environment"]["gpu"] = {"count": 0, "name": None, "driver_version": None}
    path = tmp_path / name
    result_io.save(BenchmarkResult.from_dict(data), path)
    return path


# ----------------------------------------------------------------------------------------------------------
# URLs (no server)


def test_store_urls_choose_the_dialect_and_never_show_the_password(tmp_path: Path):
    assert parse_location(tmp_path / "a.sqlite3").scheme == "sqlite"
    assert parse_location(f"sqlite://{tmp_path}/b.sqlite3").target == str(tmp_path / "b.sqlite3")
    pg = parse_location(f"postgresql://ann:{SECRET}@db.lab:5433/bench?sslmode=require&password={SECRET}")
    assert pg.scheme == "postgresql" and SECRET not in pg.shown and SECRET not in repr(pg)
    assert pg.shown == "postgresql://ann:***@db.lab:5433/bench?sslmode=require&password=***"
    assert parse_location("postgres://ann@h/db").scheme == "postgresql"
    for bad, words in (("mysql://u@h/db", "unknown store URL scheme 'mysql'"), ("postgresql:db", "missing '//'")):
        with pytest.raises(StoreError, match=words):
            parse_location(bad)


def test_a_postgresql_url_reaches_the_server_or_fails_in_one_line_and_writes_no_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CLSBENCH_DB", f"postgresql://ann:{SECRET}@127.0.0.1:1/bench")  # nothing listens on port 1
    result = cli("import", str(data_dir / "result_v1.json"))
    line = one_error(result, "cannot reach the store postgresql://ann:***@127.0.0.1:1/bench")
    assert SECRET not in result.output and SECRET not in line
    assert list(tmp_path.iterdir()) == []  # no folder named 'postgresql:'


# ----------------------------------------------------------------------------------------------------------
# on the server


def test_import_history_filters_and_pull_on_postgresql(url: str, tmp_path: Path, data_dir: Path):
    a = cpu_copy(tmp_path, data_dir, "a.json", "host-a", "2026-12-01T08:00:00+00:00")
    b = cpu_copy(tmp_path, data_dir, "b.json", "host-b", "2026-12-03T08:00:00+00:00")
    outcomes = store.import_files([a, b, SEED], db=url)
    assert [o.status for o in outcomes] == ["imported"] * 3
    sqlite_db = tmp_path / "same.sqlite3"
    store.import_files([a, b, SEED], db=sqlite_db)
    strip = [{k: v for k, v in run.items() if k != "imported_utc"} for run in store.history(url)]
    assert strip == [{k: v for k, v in run.items() if k != "imported_utc"} for run in store.history(sqlite_db)]
    assert [r["hostname"] for r in store.history(url, since="2026-12-02")] == ["host-b"]
    assert [r["run_id"] for r in store.history(url, gpu="*h2??")] == [outcomes[2].run_id]
    assert [r["hostname"] for r in store.history(url, gpu="cpu")] == ["host-b", "host-a"]
    assert {r["run_id"] for r in store.history(url, model="[r]esnet50")} == {o.run_id for o in outcomes}
    assert [r["hostname"] for r in store.history(url, commit="4E65182")] == ["host-b", "host-a"]
    assert [r["hostname"] for r in store.history(url, commit="4e65182" + b"host-a".hex())] == ["host-a"]
    pulled = tmp_path / "pulled.json"
    assert cli("store", "pull", outcomes[1].run_id[:6], "-o", str(pulled), "--db", url).exit_code == 0
    assert pulled.read_text(encoding="utf-8") == b.read_text(encoding="utf-8")
    again = cli("store", "pull", outcomes[1].run_id, "-o", str(pulled), "--db", url)
    assert one_error(again, "already exists")
    b.unlink()  # the file is gone from this machine: the run is read from the store's copy
    assert store.load_run(outcomes[1].run_id, url).run_id == outcomes[1].run_id


def _push(args: tuple[str, str, object, str | None]) -> list[str]:
    url, path, barrier, password = args
    if password is not None:  # a forkserver child has the environment of when the forkserver started
        os.environ["PGPASSWORD"] = password
    barrier.wait()
    return [o.run_id for o in store.import_files([path], db=url)]


@pytest.mark.parametrize("kind", ["postgresql", "sqlite"])
def test_eight_processes_writing_at_once_lose_nothing(kind: str, request: pytest.FixtureRequest, tmp_path: Path,
                                                      data_dir: Path):
    db = request.getfixturevalue("url") if kind == "postgresql" else str(tmp_path / "many.sqlite3")
    files = [cpu_copy(tmp_path, data_dir, f"r{i}.json", f"host-{i}", "2026-12-01T08:00:00+00:00") for i in range(8)]
    # Not "fork": this pytest process has threads by now (servers of other tests), and a child forked while one of
    # them held a lock hung a CI run; "forkserver" forks from a fresh single-threaded process.
    context = multiprocessing.get_context("forkserver")
    with context.Manager() as manager, context.Pool(8) as pool:
        barrier = manager.Barrier(8)
        password = os.environ.get("PGPASSWORD")
        ids = [run_id for got in pool.map(_push, [(db, str(f), barrier, password) for f in files]) for run_id in got]
    expected = [result_io.load(f).run_id for f in files]
    assert sorted(ids) == sorted(expected) and len(set(ids)) == 8
    assert sorted(r["run_id"] for r in store.history(db, limit=None)) == sorted(expected)


def test_migrate_copies_a_sqlite_history_to_postgresql_without_loss(url: str, tmp_path: Path, data_dir: Path):
    source = tmp_path / "old.sqlite3"
    store.import_files([data_dir / "result_v1.json", SEED, H200 / "telemetry-check-resnet50.json"], db=source)
    result = cli("store", "migrate", "--from", f"sqlite://{source}", "--to", url)
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first.startswith("copied 3 run(s), 37 measurement(s), 3 result document(s) from ")
    with store.open_store(source, create=False) as conn:
        _, expected = store_transfer.checksum(conn)
    assert second == f"checksum sha256:{expected} (source and copy agree)"
    assert store.history(url, limit=None) == store.history(source, limit=None)


def test_a_postgresql_store_of_format_2_is_migrated(pgpass, tmp_path: Path, data_dir: Path):
    pg = pgpass
    name = pg.create_database()
    with pg.admin(name) as conn:
        conn.execute("SET ROLE clsbench")
        for statement in SCHEMA.split(";"):
            if statement.strip() and "documents" not in statement:
                conn.execute(statement)
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
    [outcome] = store.import_files([data_dir / "result_v1.json"], db=pg.url(name))
    with store.open_store(pg.url(name)) as conn:
        assert conn.execute("SELECT value FROM meta")[0]["value"] == str(store.INDEX_SCHEMA_VERSION)
        assert len(conn.execute("SELECT run_id FROM documents")) == 1 and outcome.status == "imported"


# ----------------------------------------------------------------------------------------------------------
# faults: one line each, nothing half-written


def test_bad_credentials_and_a_newer_store_are_one_line_each(pg, url: str, data_dir: Path):
    wrong = url.replace("clsbench@", f"clsbench:{SECRET}@")
    result = cli("history", "--db", wrong)
    assert SECRET not in result.output
    one_error(result, "refused the login", "password authentication failed")
    store.import_files([data_dir / "result_v1.json"], db=url)
    with pg.admin(url.rsplit("/", 1)[1]) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    one_error(cli("history", "--db", url), "format 99, newer than this clsbench")


def test_a_connection_dropped_mid_write_is_one_line_and_the_store_keeps_nothing_of_it(
        pg, url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch):
    store.import_files([data_dir / "result_v1.json"], db=url)
    write_run, calls = store._write_run, []

    def dropped_after_the_first(conn, given, result):
        calls.append(given)
        if len(calls) == 2:  # the first file's rows are written by now, inside the transaction
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        return write_run(conn, given, result)

    monkeypatch.setattr(store, "_write_run", dropped_after_the_first)
    one_error(cli("import", "--db", url, str(SEED), str(H200 / "telemetry-check-resnet50.json")),
              "connection to store", "was lost")
    monkeypatch.setattr(store, "_write_run", write_run)
    assert len(calls) == 2 and len(store.history(url)) == 1  # nothing of the interrupted import


# ----------------------------------------------------------------------------------------------------------
# the bar: two hosts, one store, a third process


@pytest.mark.slow
def test_two_hosts_one_store_history_and_compare_from_a_third_process(pg, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch):
    """Two CPU runs from two "hosts" into a throwaway PostgreSQL, the password only in CLSBENCH_DB (to show it
    never leaks); then history and compare from a third process, the first host's file gone."""
    from clsbench.cli import main

    name = pg.create_database()
    secret_url = pg.url(name, password=True)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("CLSBENCH_DB", secret_url)
    outputs, files = [], []
    for host in ("lab-a100", "cloud-h100"):
        monkeypatch.setenv("CLSBENCH_HOSTNAME", host)
        path = tmp_path / f"{host}.json"
        run = CliRunner().invoke(main, ["run", "--model", TINY, "--workload", "infer-throughput", "--device", "cpu",
                                        "--repeats", "2", "--warmup", "1", "--iterations", "2", "--min-time", "0",
                                        "--isolation", "inline", "-q", "-o", str(path)])
        assert run.exit_code == 0, run.output
        outputs.append(run.output)
        files.append(path)
    ids = [result_io.load(f).run_id for f in files]
    days = [result_io.load(f).created_utc[:10] for f in files]
    (tmp_path / "elsewhere").mkdir()
    files[0].rename(tmp_path / "elsewhere" / files[0].name)  # host A's file is not on the third machine
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), str(REPO / "tests")]),
           "CLSBENCH_HOSTNAME": "laptop"}
    third = [subprocess.run([sys.executable, "-m", "clsbench", *args], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)
             for args in (["history"], ["compare", ids[0], ids[1]])]
    print("\n".join(p.stdout + p.stderr for p in third))
    history, compare = third
    assert history.returncode == 0 and compare.returncode == 0, history.stderr + compare.stderr
    assert [line.split()[:3] for line in history.stdout.splitlines()[2:]] == [
        [ids[1], days[1], "cloud-h100"], [ids[0], days[0], "lab-a100"]]
    assert f"A = {ids[0]}" in compare.stdout and f"B = {ids[1]}" in compare.stdout
    printed = "".join(outputs) + "".join(p.stdout + p.stderr for p in third)
    with pg.admin(name) as conn:
        rows = [str(row) for table in ("meta", "runs", "measurements", "documents")
                for row in conn.execute(f"SELECT * FROM {table}").fetchall()]
    written = [p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
    assert all(pg.password not in text for text in [printed, *rows, *written])
    assert "***@" in history.stderr  # the store is named, its password masked


def test_a_run_whose_store_is_down_keeps_its_file_and_exits_3_without_the_password(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch):
    from clsbench.cli import main

    monkeypatch.setenv("CLSBENCH_DB", f"postgresql://ann:{SECRET}@127.0.0.1:1/bench")  # nothing listens on port 1
    path = tmp_path / "run.json"
    run = CliRunner().invoke(main, ["run", "--model", TINY, "--workload", "infer-throughput", "--device", "cpu",
                                    "--repeats", "1", "--warmup", "1", "--iterations", "2", "--min-time", "0",
                                    "--isolation", "inline", "-q", "-o", str(path)])
    one_error(run, "cannot reach the store postgresql://ann:***@127.0.0.1:1/bench", f"saved in {path}")
    assert result_io.load(path).measurements[0].status == "ok"
    assert SECRET not in run.output and SECRET not in path.read_text(encoding="utf-8") and "store push" in run.stderr
