"""A real, throwaway PostgreSQL server for the store's tests: one per test session, on a free port of 127.0.0.1,
in a temporary directory, removed at the end. No mock stands in for the database.

It needs PostgreSQL's ``initdb`` and ``pg_ctl`` (on PATH, or under ``/usr/lib/postgresql/*/bin`` where Debian puts
them) and psycopg 3 (``clsbench[postgres]``); without either, or where the server does not start, the tests that
use it skip with the reason. PostgreSQL refuses to run as root: as root the server runs as the ``postgres`` user
(``runuser``). Password logins are checked (scram-sha-256) on TCP, so a wrong password is really refused.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

#: Seconds for initdb and for the server to start; a busy 2-core CI machine takes 2-4 s for both.
START_TIMEOUT_S = 60
SUPERUSER = "postgres"
#: The role the tests log in as, with a password (checked by the server).
USER = "clsbench"


@dataclass(frozen=True)
class PgServer:
    """A running server: where it listens and the password of :data:`USER`."""

    host: str
    port: int
    password: str
    admin_url: str

    def url(self, database: str, *, password: bool = False) -> str:
        auth = f"{USER}:{self.password}" if password else USER
        return f"postgresql://{auth}@{self.host}:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database owned by :data:`USER`; its name."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}" OWNER {USER}')
        return name

    def admin(self, database: str) -> object:
        """A superuser connection (autocommit) to ``database``."""
        import psycopg

        return psycopg.connect(self.admin_url.rsplit("/", 1)[0] + f"/{database}", autocommit=True)


def find_binaries() -> tuple[Path, Path] | None:
    """(initdb, pg_ctl) on PATH, else the newest under /usr/lib/postgresql/*/bin; None when there are none."""
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl:
        return Path(initdb), Path(pg_ctl)
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2] or 0),
                         reverse=True):
        if os.access(f"{folder}/initdb", os.X_OK) and os.access(f"{folder}/pg_ctl", os.X_OK):
            return Path(folder, "initdb"), Path(folder, "pg_ctl")
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_server_user(argv: list[str]) -> list[str]:
    """``argv`` run as the ``postgres`` user when this process is root (PostgreSQL refuses root)."""
    if os.geteuid() != 0:
        return argv
    if shutil.which("runuser") is None:
        raise RuntimeError("running as root and there is no runuser to start PostgreSQL as another user")
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise RuntimeError(f"running as root and there is no {SUPERUSER!r} user to run PostgreSQL") from None
    return ["runuser", "-u", SUPERUSER, "--", *argv]


def _run(argv: list[str]) -> None:
    done = subprocess.run(_as_server_user(argv), capture_output=True, text=True, timeout=START_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"{Path(argv[0]).name} failed (exit {done.returncode}): {tail}")


@contextlib.contextmanager
def running_server() -> Iterator[PgServer]:
    """Start a server in a temporary directory; stop it and remove the directory afterwards.

    Raises:
        pytest.skip.Exception: no binaries, no psycopg, or the server did not start (with the reason).
    """
    binaries = find_binaries()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin")
    try:
        import psycopg  # noqa: F401 - the store's driver, needed to talk to the server
    except ImportError:
        pytest.skip("psycopg 3 is not installed (pip install 'clsbench[postgres]')")
    initdb, pg_ctl = binaries
    root = Path(tempfile.mkdtemp(prefix="clsbench-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    admin_password = secrets.token_hex(16)
    (root / "pw").write_text(admin_password + "\n", encoding="utf-8")
    if os.geteuid() == 0:
        entry = pwd.getpwnam(SUPERUSER)
        for path in (root, sockets, root / "pw"):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    port = _free_port()
    started = False
    try:
        try:
            _run([str(initdb), "-D", str(data), "-U", SUPERUSER, f"--pwfile={root / 'pw'}", "--auth-local=trust",
                  "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8", "--locale=C"])
            options = (f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off "
                       "-c synchronous_commit=off -c full_page_writes=off -c max_connections=40")
            _run([str(pg_ctl), "-D", str(data), "-l", str(root / "log"), "-o", options, "-w",
                  "-t", str(START_TIMEOUT_S), "start"])
            started = True
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            log = root / "log"
            detail = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:]) if log.exists() else ""
            pytest.skip(f"could not start a PostgreSQL server: {exc} {detail}".strip())
        admin_url = f"postgresql://{SUPERUSER}:{admin_password}@127.0.0.1:{port}/postgres"
        password = secrets.token_hex(12)
        import psycopg

        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {USER} LOGIN PASSWORD '{password}'")
        yield PgServer("127.0.0.1", port, password, admin_url)
    finally:
        if started:
            with contextlib.suppress(Exception):
                _run([str(pg_ctl), "-D", str(data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(root, ignore_errors=True)
