"""The architecture, checked: every module imports on its own, no private name crosses a module boundary, and
imports only point down the layers that docs/architecture.md lists.

The layer table below is the one in docs/architecture.md; a module may import its own layer and the layers
above it in the table (lower ones), never one below. Imports under ``if TYPE_CHECKING:`` are annotations only
and are not counted.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "clsbench"

#: Layers, lowest first: (name, module prefixes). The first matching prefix, longest first, decides a module's layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("clsbench.errors", "clsbench.version", "clsbench.core.registry", "clsbench.core.vocab")),
    ("results", ("clsbench.results",)),
    ("plan", ("clsbench.core",)),
    ("analysis", ("clsbench.analysis",)),
    ("machine", ("clsbench.measure", "clsbench.system")),
    ("axes", ("clsbench.models", "clsbench.modes", "clsbench.backends", "clsbench.data")),
    ("workloads", ("clsbench.workloads", "clsbench.scenarios", "clsbench.serving")),
    ("engine", ("clsbench.engine",)),
    ("report", ("clsbench.report",)),
    ("procedures", ("clsbench.procedures", "clsbench.deploy")),
    ("api", ("clsbench.api",)),
    ("cli", ("clsbench.cli", "clsbench.__main__")),
    ("package", ("clsbench",)),
)


def module_names() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return names


def source_of(module: str) -> Path:
    base = SRC / Path(*module.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return best[0]


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names imported from it) for every runtime import in ``module``."""
    tree = ast.parse(source_of(module).read_text(encoding="utf-8"))
    package = module if source_of(module).name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name, []) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                found.append((child.lineno, target, [alias.name for alias in child.names]))
            visit(child)

    visit(tree)
    return found


MODULES = module_names()


def _import_alone(name: str) -> str | None:
    """In a forked child with no clsbench module loaded yet: import ``name``; the error text, or None."""
    import importlib
    import traceback

    for loaded in [m for m in sys.modules if m == "clsbench" or m.startswith("clsbench.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:  # noqa: BLE001 - reported to the parent as text
        return traceback.format_exc(limit=3)
    return None


def test_every_module_imports_on_its_own() -> None:
    # Third-party packages are imported once here; each module then imports in a forked child whose clsbench
    # modules are all unloaded, so an import cycle inside clsbench shows up as it would in a fresh interpreter.
    import torch  # noqa: F401
    import torchvision  # noqa: F401

    context = multiprocessing.get_context("fork")
    with context.Pool(processes=min(4, os.cpu_count() or 1), maxtasksperchild=1) as pool:
        errors = dict(zip(MODULES, pool.map(_import_alone, MODULES), strict=True))
    failed = {name: text for name, text in errors.items() if text}
    assert not failed, "\n".join(f"{name}:\n{text}" for name, text in failed.items())


def test_the_import_check_would_see_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cyc_a.py").write_text("from cyc_b import B\nA = 1\n")
    (tmp_path / "cyc_b.py").write_text("from cyc_a import A\nB = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with multiprocessing.get_context("fork").Pool(processes=1) as pool:  # never unload clsbench in this process
        assert "ImportError" in (pool.apply(_import_alone, ("cyc_a",)) or "")


def test_no_private_name_is_imported_across_modules() -> None:
    offences = []
    for module in MODULES:
        for line, target, names in imports_of(module):
            if not target.startswith("clsbench") or target == module:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                offences.append(f"{module}:{line} imports {', '.join(private)} from {target}")
    assert not offences, "\n".join(offences)


def test_imports_point_down_the_layers() -> None:
    offences = []
    for module in MODULES:
        own = layer_of(module)
        for line, target, names in imports_of(module):
            if not target.startswith("clsbench"):
                continue
            targets = [target]
            if target == "clsbench" or not source_of(target).exists():
                # `from clsbench.x import y` where y is a module: judge y itself.
                targets = [f"{target}.{n}" for n in names if source_of(f"{target}.{n}").exists()] or [target]
            for name in targets:
                if layer_of(name) > own:
                    offences.append(f"{module}:{line} ({LAYERS[own][0]}) imports {name} ({LAYERS[layer_of(name)][0]})")
    assert not offences, "\n".join(offences)


def test_the_layer_table_is_the_documented_one() -> None:
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if not any(m == prefix or m.startswith(prefix + ".") for m in MODULES):
                continue  # a layer's place for a folder that does not exist yet
            folder = prefix.removeprefix("clsbench").lstrip(".").replace(".", "/") or "clsbench"
            assert f"`{folder}" in text, f"docs/architecture.md does not mention {folder} (layer {name})"


#: The most lines a module may hold (issue 34): past it, a module mixes what should be split by what each part does.
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_line_limit() -> None:
    long = {str(path.relative_to(SRC)): n for path in PACKAGE.rglob("*.py")
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by what each part does): {long}"
