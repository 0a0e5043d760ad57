"""The Python that shell scripts run inline (CI's container test, the benchmark scripts) imports names that exist.

Those snippets are strings to the linter and to the import-cycle test, so a module split can break them unseen: CI's
container test failed once on ``from clsbench.system.container import container_lines`` after the name moved. This
test reads every ``from clsbench.X import a, b`` in ``.ci/`` and ``benchmarks/`` shell scripts and imports it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*ROOT.glob(".ci/*.sh"), *ROOT.glob("benchmarks/*.sh")])
FROM_IMPORT = re.compile(r"from\s+(clsbench(?:\.\w+)*)\s+import\s+([\w\s,]+?)(?=$|[;'\"\n)])", re.M)


def script_imports(text: str) -> list[tuple[str, list[str]]]:
    found = []
    for module, names in FROM_IMPORT.findall(text):
        found.append((module, [n.split(" as ")[0].strip() for n in names.split(",") if n.strip()]))
    return found


CASES = [(script.relative_to(ROOT).as_posix(), module, names)
         for script in SCRIPTS for module, names in script_imports(script.read_text())]


def test_scripts_were_found():
    assert any(path.startswith(".ci/") for path, _, _ in CASES)
    assert any(path.startswith("benchmarks/") for path, _, _ in CASES)


def test_the_pattern_reads_a_multi_name_import_and_stops_at_the_quote():
    text = "python -c 'from clsbench.a.b import x, y_z\nprint(1)'; $PY -c \"from clsbench.c import w as v\""
    assert script_imports(text) == [("clsbench.a.b", ["x", "y_z"]), ("clsbench.c", ["w"])]


@pytest.mark.parametrize(("script", "module", "names"), CASES, ids=[f"{p}:{m}" for p, m, _ in CASES])
def test_each_inline_import_resolves(script, module, names):
    imported = importlib.import_module(module)
    missing = [name for name in names if not hasattr(imported, name)
               and importlib.util.find_spec(f"{module}.{name}") is None]
    assert not missing, f"{script}: {module} has no {', '.join(missing)}"
