"""The stored bytes of run, sweep, tune, diagnose and scale results do not change unless a change means them to.

``tests/golden/generate.py`` makes the five files with fake clocks, inline, in a fixed environment; this test
makes them again and compares them with ``tests/golden/expected/`` byte for byte (after masking what only the
host decides: see ``VOLATILE`` there). A change that alters a stored file on purpose regenerates the expected
files with ``python tests/golden/generate.py tests/golden/expected`` and says why in its commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from golden.generate import NAMES, generate

EXPECTED = Path(__file__).parent / "golden" / "expected"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("golden")
    generate(directory)
    return directory


@pytest.mark.parametrize("name", NAMES)
def test_result_file_is_byte_identical_to_the_golden_copy(made: Path, name: str) -> None:
    expected = (EXPECTED / f"{name}.json").read_bytes()
    actual = (made / f"{name}.json").read_bytes()
    assert actual == expected, f"{name}.json differs from tests/golden/expected/{name}.json"
