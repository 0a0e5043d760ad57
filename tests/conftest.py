"""Shared fixtures. Tests marked ``gpu`` are skipped where CUDA is absent (they run on the GPU machine)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

TESTS_DIR = Path(__file__).parent
if str(TESTS_DIR) not in sys.path:  # so worker processes can import the tiny test models by module name
    sys.path.insert(0, str(TESTS_DIR))

# One real Triton test server of each kind for the whole session (tests/triton_fixture.py starts them on first use).
from triton_fixture import triton_open, triton_restricted  # noqa: E402, F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `make test-gpu` on the GPU machine)")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def data_dir() -> Path:
    return TESTS_DIR / "data"


@pytest.fixture(autouse=True)
def _private_history_index(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs made by tests are indexed in a throw-away database, never in the user's history."""
    monkeypatch.setenv("CLSBENCH_DB", str(tmp_path_factory.mktemp("index") / "index.sqlite3"))


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    """This machine's environment facts for a CPU run, captured once per test module."""
    from clsbench import api

    return api.environment("cpu")


@pytest.fixture
def costed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Any:
    """The costed test model (``test_sweep.load_costed``), priced by the requesting module's ``PER_IMAGE_MS``."""
    from test_sweep import load_costed

    return load_costed(tmp_path, monkeypatch, per_image_ms=request.module.PER_IMAGE_MS)
