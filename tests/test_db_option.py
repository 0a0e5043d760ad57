"""``--db PATH|URL`` on every command that measures and saves a result, with ``run``'s meaning: the history store the
finished result is indexed in (default: ``$CLSBENCH_DB``), checked before anything is measured.

Fast and CPU-only: ``--help``, refusals that come before the environment is read, and one tiny inline sweep.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from clsbench.cli import main
from clsbench.errors import EXIT_FILE
from clsbench.results import store

TINY = "clsbench_testmodels:tiny"

#: Every command that measures and saves a result.
MEASURING = ("run", "sweep", "tune", "serve", "soak", "diagnose", "scale", "profile")


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize("command", MEASURING)
def test_help_of_every_measuring_command_lists_db(command: str) -> None:
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    assert "--db PATH|URL" in result.stdout
    assert "$CLSBENCH_DB" in result.stdout


def minimal_args(command: str, tmp_path: Path) -> list[str]:
    """Otherwise valid arguments of ``command`` on the CPU, writing under ``tmp_path/out``."""
    out = str(tmp_path / "out")
    return {
        "run": ["run", "--model", TINY, "--device", "cpu", "-o", out],
        "sweep": ["sweep", "--model", TINY, "--batch-size", "1", "--device", "cpu", "-o", out],
        "tune": ["tune", "--model", TINY, "--device", "cpu", "-o", out],
        "tune --resume": ["tune", "--resume", str(tmp_path / "tune.json")],
        "serve": ["serve", "--model", TINY, "--device", "cpu", "-o", out],
        "soak": ["soak", "--model", TINY, "--duration", "20s", "--device", "cpu", "-o", out],
        "diagnose": ["diagnose", TINY, "--data", str(tmp_path), "--device", "cpu", "-o", out],
        "scale": ["scale", "--model", TINY, "--gpus", "1", "--batch-size-per-gpu", "2", "--device", "cpu", "-o", out],
        "profile": ["profile", "--model", TINY, "--device", "cpu", "-o", out],
    }[command]


@pytest.mark.parametrize("command", [*MEASURING, "tune --resume"])
def test_an_unusable_db_is_one_error_line_before_anything_is_measured(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench import api

    def measured(*args: object, **kwargs: object) -> None:
        raise AssertionError("the environment was read: the store must be checked before")

    monkeypatch.setattr(api, "environment", measured)  # every command reads it before it builds or measures
    result = invoke(*minimal_args(command, tmp_path), "--db", "ftp://x")
    assert result.exit_code == EXIT_FILE, result.output  # as `run --db ftp://x`
    assert isinstance(result.exception, SystemExit) and "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == ["error: unknown store URL scheme 'ftp' in 'ftp://x'"], result.stderr
    assert not (tmp_path / "out").exists()


def test_sweep_indexes_its_result_in_the_db_it_is_given(tmp_path: Path) -> None:
    db = tmp_path / "index.sqlite3"
    path = tmp_path / "sweep.json"
    result = invoke("sweep", "--model", TINY, "--device", "cpu", "--batch-size", "1,2", "--repeats", "1",
                    "--warmup", "1", "--iterations", "2", "--min-time", "0", "--isolation", "inline",
                    "--clock", "fake:1ms", "-q", "-o", str(path), "--db", str(db))
    assert result.exit_code == 0, result.output
    assert path.exists() and db.exists()
    assert store.history() == []  # not in $CLSBENCH_DB (the tests' private index): in --db
    rows = store.history(db)
    assert len(rows) == 1
    shown = invoke("history", "--db", str(db))
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.stdout.splitlines() if rows[0]["run_id"][:6] in line)
    assert " 2/0/0 " in line  # the sweep's two batch sizes, both measured
