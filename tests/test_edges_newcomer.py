"""A newcomer's first hour (issue 38, items 15-17): how to call clsbench after `make run`, what set-up costs in disk
and time, and where the history index lives (shared by every checkout of the user), in the README and in `env`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from clsbench.cli import main
from clsbench.system.environment_text import history_index_line, redact_url

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def _section(heading: str) -> str:
    """The README's text from ``## heading`` up to the next ``## `` heading."""
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


# ----------------------------------------------------------------------------------------------------------
# item 15: clsbench is in .venv/bin, not on PATH


def test_readme_quick_start_says_how_to_call_clsbench_after_make():
    quick_start = _section("Quick start")
    assert ".venv/bin/clsbench" in quick_start
    assert "source .venv/bin/activate" in quick_start


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_run_prints_how_to_call_clsbench_and_keeps_its_exit_status(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    fake = venv / "bin" / "clsbench"
    fake.write_text('#!/bin/sh\necho "called with: $*"\nexit 3\n', encoding="utf-8")
    fake.chmod(0o755)
    stamp = venv / ".clsbench-installed"  # set-up counts as done: newer than pyproject.toml
    stamp.touch()
    later = time.time() + 3600
    os.utime(stamp, (later, later))

    done = subprocess.run(["make", "-s", "-C", str(ROOT), "run", f"VENV={venv}", "ARGS=--suite quick"],
                          capture_output=True, text=True, timeout=60)

    assert done.returncode != 0  # make's own status for a failed recipe; the recipe exits with clsbench's 3
    assert "Error 3" in done.stderr, done.stderr
    assert "called with: run --suite quick" in done.stdout
    assert f"call {venv}/bin/clsbench" in done.stdout
    assert f"source {venv}/bin/activate" in done.stdout


# ----------------------------------------------------------------------------------------------------------
# item 16: what set-up installs and how long the CPU quick suite takes


def test_readme_quick_start_states_setup_size_and_a_time_range():
    quick_start = _section("Quick start")
    assert re.search(r"about \d+(\.\d+)? GB into `\.venv`", quick_start), "set-up's disk size is not stated"
    assert re.search(r"CUDA libraries", quick_start)
    assert re.search(r"`quick` suite takes \d+ to \d+ minutes", quick_start), "no time range for the CPU suite"


# ----------------------------------------------------------------------------------------------------------
# item 17: where the history index lives


def test_readme_results_section_says_where_the_shared_history_index_is():
    results = " ".join(_section("Where results go").split())
    assert "~/.local/share/clsbench/index.sqlite3" in results
    assert "shared by every checkout" in results
    assert "`clsbench env`" in results


@pytest.mark.parametrize(("location", "shown"), [
    ("postgresql://bench:s3cret@db.lab/clsbench", "postgresql://bench:***@db.lab/clsbench"),
    ("postgresql:/bench:s3cret@db.lab:5432/clsbench", "postgresql:/bench:***@db.lab:5432/clsbench"),
    ("postgresql://bench:p@ss@db.lab/clsbench", "postgresql://bench:***@db.lab/clsbench"),
    ("postgresql://db.lab/clsbench?sslmode=require&password=s3cret", "postgresql://db.lab/clsbench?sslmode=require&password=***"),
    ("postgresql://bench@db.lab/clsbench", "postgresql://bench@db.lab/clsbench"),
    ("sqlite:///home/me/index.sqlite3", "sqlite:///home/me/index.sqlite3"),
    ("/home/me:2/a@b/index.sqlite3", "/home/me:2/a@b/index.sqlite3"),
])
def test_a_password_in_an_index_url_is_redacted(location, shown):
    assert redact_url(location) == shown
    assert redact_url(Path(location)) == redact_url(str(Path(location)))


def test_history_index_line_says_who_chose_the_index():
    default = history_index_line(Path("/home/me/.local/share/clsbench/index.sqlite3"), "CLSBENCH_DB", from_env=False)
    assert default == ("/home/me/.local/share/clsbench/index.sqlite3 (shared by every checkout of this user; "
                       "--db / $CLSBENCH_DB for another)")
    chosen = history_index_line("postgresql://u:pw@h/db", "CLSBENCH_DB", from_env=True)
    assert chosen.startswith("postgresql://u:***@h/db (from $CLSBENCH_DB;")


def _history_index_row(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("history index "))


def test_env_prints_the_default_history_index(monkeypatch, tmp_path):
    monkeypatch.delenv("CLSBENCH_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    result = CliRunner().invoke(main, ["env", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    row = _history_index_row(result.stdout)
    assert f"{tmp_path / 'clsbench' / 'index.sqlite3'} (shared by every checkout of this user" in row


def test_env_prints_an_index_url_from_the_environment_without_its_password(monkeypatch):
    monkeypatch.setenv("CLSBENCH_DB", "postgresql://bench:Planted-Secret-42@db.lab/clsbench")
    result = CliRunner().invoke(main, ["env", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "Planted-Secret-42" not in result.output
    row = _history_index_row(result.stdout)
    assert "bench:***@db.lab/clsbench (from $CLSBENCH_DB" in row
