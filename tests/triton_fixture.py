"""A real Triton Inference Server for tests: ``tests/triton_server.py`` started in a subprocess, and its fixtures.

``tests/conftest.py`` declares the two fixtures for the whole session (one server of each kind serves every test
module that asks for it: a start and a stop cost about 30 s on 2 cores); a test needing a server of its own (one it
kills) calls :func:`running_server`. Each starts
the server in its own process group (so the ``tritonserver`` and Python-stub children can be ended with it), waits
for its ``READY grpc=<port> http=<port>`` line and yields a :class:`TritonTestServer`. Teardown asks the script to
stop (a line on its stdin: it leaves PyTriton's ``with`` block normally, which stops Triton cleanly) and kills the
whole group if it has not ended in :data:`STOP_WAIT_S`. A test is skipped, with the reason, when PyTriton or the
Triton client is not installed or the server does not start; the server's log is kept in the test's temp folder.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_SCRIPT = Path(__file__).with_name("triton_server.py")
#: How long the server may take to answer (PyTriton unpacks Triton, loads the model stub; 10-15 s on 2 cores).
READY_TIMEOUT_S = 180.0
#: How long a stopping server may take to unload its model and exit before its group is killed (about 4 s seen).
STOP_WAIT_S = 20.0
MODEL = "resnet18"
#: A model the test server also serves whose input is not an image (a vector of 10 FP32).
BAD_MODEL = "vector10"
INPUT_SIZE = 64
MAX_BATCH = 16
MAX_QUEUE_DELAY_US = 2000
#: The access token of the restricted server (its statistics and model-repository endpoints need it).
ACCESS_TOKEN = "clsbench-test-token"
_READY = re.compile(r"^READY grpc=(\d+) http=(\d+)$")


@dataclass
class TritonTestServer:
    """A running test server: its ports, what it serves, and how to end it."""

    process: subprocess.Popen[str]
    grpc_port: int
    http_port: int
    log_path: Path
    access_token: str | None
    model: str = MODEL
    input_size: int = INPUT_SIZE

    def url(self, protocol: str = "grpc", model: str | None = None) -> str:
        port = self.grpc_port if protocol == "grpc" else self.http_port
        return f"triton+{protocol}://127.0.0.1:{port}/{model or self.model}"

    def headers(self, protocol: str = "grpc") -> dict[str, str]:
        """The access header Triton expects of each protocol (``--grpc-restricted-protocol`` prefixes its name)."""
        name = "triton-grpc-protocol-triton-access-token" if protocol == "grpc" else "triton-access-token"
        return {name: self.access_token or ""}

    def kill(self) -> None:
        """End the whole process group at once (the server dies as a crashed server would)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=STOP_WAIT_S)

    def stop(self) -> None:
        """Ask the script to stop; kill its group if it does not end in time."""
        if self.process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                assert self.process.stdin is not None
                self.process.stdin.write("stop\n")
                self.process.stdin.close()
            try:
                self.process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # the children, should any outlive the script
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_WAIT_S)


def missing_packages() -> str | None:
    """Why the test server cannot run here (a package is missing), or None."""
    for module, package in (("pytriton", "nvidia-pytriton"), ("tritonclient.grpc", "tritonclient[grpc]"),
                            ("tritonclient.http", "tritonclient[http]")):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:
            found = False
        if not found:
            return f"{package} is not installed (pip install 'clsbench[triton]')"
    return None


@contextlib.contextmanager
def running_server(folder: Path, *, statistics: str = "open", access_token: str | None = None,
                   ready_timeout_s: float = READY_TIMEOUT_S) -> Iterator[TritonTestServer]:
    """Start the test server, yield it once ready, stop it afterwards; skip the test if it cannot start."""
    reason = missing_packages()
    if reason:
        pytest.skip(reason)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"triton-{statistics}.log"
    args = [sys.executable, str(SERVER_SCRIPT), "--model-name", MODEL, "--input-size", str(INPUT_SIZE),
            "--max-batch", str(MAX_BATCH), "--max-queue-delay-us", str(MAX_QUEUE_DELAY_US), "--bad-model", BAD_MODEL,
            "--statistics", statistics]
    if access_token:
        args += ["--access-token", access_token]
    with open(log_path, "w") as log:
        process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                   start_new_session=True, cwd=folder)
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=read, name="triton-server-stdout", daemon=True).start()
    server = TritonTestServer(process, 0, 0, log_path, access_token if statistics == "restricted" else None)
    try:
        ports = _wait_ready(lines, ready_timeout_s)
        if ports is None:
            tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
            pytest.skip(f"the Triton test server did not start in {ready_timeout_s:g} s: {tail[-400:]}")
        server.grpc_port, server.http_port = ports
        yield server
    finally:
        server.stop()


def _wait_ready(lines: queue.Queue[str | None], timeout_s: float) -> tuple[int, int] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            return None
        if line is None:
            return None
        match = _READY.match(line)
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


@pytest.fixture(scope="session")
def triton_open(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonTestServer]:
    """A test server whose statistics and model repository answer anyone."""
    with running_server(tmp_path_factory.mktemp("triton-open"), statistics="open") as server:
        yield server


@pytest.fixture(scope="session")
def triton_restricted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonTestServer]:
    """A test server with PyTriton's default protection: statistics need the header with :data:`ACCESS_TOKEN`."""
    with running_server(tmp_path_factory.mktemp("triton-restricted"), statistics="restricted",
                        access_token=ACCESS_TOKEN) as server:
        yield server
