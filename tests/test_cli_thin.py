"""The CLI is thin (issue 34, item 4): each command parses, builds its settings, calls one api function, prints.

The rule, read from the source of ``src/clsbench/cli/*.py`` with :mod:`ast`:

(a) Each click command calls exactly one *work* function of :mod:`clsbench.api`: a public function not in
    :data:`clsbench.api.HELPERS`. Helpers only check or resolve input, read the machine without changing it, render a
    result as text, write a printed text to a file or index a finished file; a command may call any of them around
    its one work call. The one exception is a work function's continuation (:data:`clsbench.api.CONTINUATIONS`:
    ``run --resume``, ``tune --resume``, ``profile --nsys``), allowed only in the command of the work it continues.
    What a command calls is read from its own body and from the functions of the cli package it calls (``start``,
    ``saved``, ``_finish_tune``...), followed transitively.
(b) A cli module imports from clsbench only what :data:`ALLOWED_IMPORTS` lists: the api, the cli package, errors,
    the version, and from ``clsbench.core`` the option and settings types (and the table layout and number formats
    the printers use).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from clsbench import api
from clsbench.cli import main

CLI_DIR = Path(api.__file__).resolve().parent.parent / "cli"

#: What a cli module may import from clsbench: a module (any name from it: None) or the names it may take.
ALLOWED_IMPORTS: dict[str, frozenset[str] | None] = {
    "clsbench.api": None,
    "clsbench.errors": None,
    "clsbench.version": None,
    "clsbench.core.options": frozenset({"Execution", "MeasureOptions"}),
    "clsbench.core.data_settings": frozenset({"DEFAULT_DATA_TIMEOUT_S", "NORMALIZE_WHERE", "SYNTHETIC",
                                              "DataSettings"}),
    "clsbench.core.vocab": frozenset({"Reason", "Status"}),
    "clsbench.core.plan": frozenset({"PROFILE_STEPS", "PROFILE_WARMUP"}),
    "clsbench.core.suites": frozenset({"Suite"}),
    "clsbench.core.text_table": frozenset({"cut", "fmt_ms", "fmt_rate", "text_table"}),
}


def allowed(module: str, name: str | None) -> bool:
    """Whether ``from module import name`` (``import module``: name None) is allowed in a cli module."""
    if module == "clsbench" and name == "api":
        return True
    if module == "clsbench.cli" or module.startswith("clsbench.cli."):
        return True
    if module in ALLOWED_IMPORTS:
        names = ALLOWED_IMPORTS[module]
        return names is None or (name is not None and name in names)
    return False


def clsbench_imports(tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """Every import of a clsbench module anywhere in ``tree``, as (line, module, imported name or None)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "clsbench" or node.module.startswith("clsbench."):
                for alias in node.names:
                    yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "clsbench" or alias.name.startswith("clsbench."):
                    yield node.lineno, alias.name, None


def is_command(func: ast.FunctionDef) -> bool:
    """Whether a function is decorated as a click command (``@click.command``, ``@main.command()``,
    ``@group.command("name")``...)."""
    for decorator in func.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "command":
            return True
    return False


class Package:
    """The functions of the cli modules, to follow what a command calls."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.trees = {name: ast.parse(text) for name, text in sources.items()}
        self.functions: dict[tuple[str, str], ast.FunctionDef] = {}
        self.imported: dict[str, dict[str, tuple[str, str]]] = {}
        for module, tree in self.trees.items():
            self.imported[module] = {}
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef):
                    self.functions.setdefault((module, node.name), node)
                elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clsbench.cli."):
                    source = node.module.removeprefix("clsbench.cli.")
                    for alias in node.names:
                        self.imported[module][alias.asname or alias.name] = (source, alias.name)

    def commands(self) -> Iterator[tuple[str, ast.FunctionDef]]:
        for module, tree in self.trees.items():
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and is_command(node):
                    yield module, node

    def api_calls(self, module: str, func: ast.FunctionDef) -> list[str]:
        """The ``api.NAME(...)`` calls of ``func`` and of every cli function it calls, transitively."""
        seen: set[tuple[str, str]] = set()
        found: list[str] = []
        pending = [(module, func)]
        while pending:
            where, current = pending.pop()
            for node in ast.walk(current):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                if isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) \
                        and callee.value.id == "api":
                    found.append(callee.attr)
                elif isinstance(callee, ast.Name):
                    key = (where, callee.id)
                    if key not in self.functions:
                        key = self.imported[where].get(callee.id, key)
                    if key in self.functions and key not in seen:
                        seen.add(key)
                        pending.append((key[0], self.functions[key]))
        return found


def work_functions() -> set[str]:
    """The public functions of clsbench.api that do a command's work."""
    public = {name for name in api.__all__ if inspect.isfunction(getattr(api, name))}
    return public - api.HELPERS


def violations(package: Package) -> dict[str, str]:
    """Each command that breaks rule (a), with what it calls."""
    work = work_functions()
    out = {}
    for module, func in package.commands():
        called = {name for name in package.api_calls(module, func) if name in work}
        main_work = called - set(api.CONTINUATIONS)
        continuations = called & set(api.CONTINUATIONS)
        if len(main_work) != 1 or any(api.CONTINUATIONS[c] not in main_work for c in continuations):
            out[f"{module}.{func.name}"] = ", ".join(sorted(called)) or "no work function"
    return out


def cli_sources() -> dict[str, str]:
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(CLI_DIR.glob("*.py"))}


def leaf_commands(group: click.Group, ctx: click.Context) -> Iterator[click.Command]:
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            yield from leaf_commands(command, ctx)
        elif command is not None:
            yield command


def test_helpers_and_continuations_name_public_api_functions() -> None:
    for name in api.HELPERS | set(api.CONTINUATIONS) | set(api.CONTINUATIONS.values()):
        assert name in api.__all__ and inspect.isfunction(getattr(api, name)), name
    assert set(api.CONTINUATIONS.values()) <= work_functions()
    assert set(api.CONTINUATIONS) <= work_functions()


def test_the_walk_finds_every_registered_command() -> None:
    """Every command the CLI registers is one the walk below checks (nothing is left out unseen)."""
    found = {func.name for _, func in Package(cli_sources()).commands()}
    registered = {inspect.unwrap(command.callback).__name__
                  for command in leaf_commands(main, click.Context(main)) if command.callback is not None}
    assert registered == found
    assert len(found) >= 20  # run, show, ..., serve, soak, export: the twenty commands of issue 34


def test_each_command_calls_exactly_one_api_work_function() -> None:
    assert violations(Package(cli_sources())) == {}


def test_every_api_name_the_cli_calls_exists() -> None:
    package = Package(cli_sources())
    for module, tree in package.trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
                assert node.attr in api.__all__, f"cli/{module}.py uses api.{node.attr}, which api does not export"


def test_cli_modules_import_only_the_api_errors_version_and_core_types() -> None:
    bad = [f"cli/{module}.py:{line}: {name_of}" for module, text in cli_sources().items()
           for line, source, name in clsbench_imports(ast.parse(text))
           if not allowed(source, name)
           for name_of in [f"from {source} import {name}" if name else f"import {source}"]]
    assert bad == []


FAT_COMMAND = '''
import click
from clsbench import api
from clsbench.report import table


def _work(plan):
    return api.run(plan, "out.json")


@click.command()
def fat(device):
    plan = api.plan_run(models=["m"], device=api.resolve_device(device))
    api.sweep(plan)
    print(table.render(_work(plan)))


@click.command()
def idle():
    print(api.resolve_device("cpu"))


@click.command()
def wrong_continuation(path):
    api.serve(path)
    api.resume_tune(path)
'''


def test_the_checks_catch_a_fat_command() -> None:
    """Two work calls (one through a module function), none, a continuation of another command's work, and a
    library import are each reported."""
    package = Package({"fat_cmds": FAT_COMMAND})
    found = violations(package)
    assert found == {"fat_cmds.fat": "run, sweep", "fat_cmds.idle": "no work function",
                     "fat_cmds.wrong_continuation": "resume_tune, serve"}
    assert [(module, name) for _, module, name in clsbench_imports(ast.parse(FAT_COMMAND))
            if not allowed(module, name)] == [("clsbench.report", "table")]


@pytest.mark.parametrize(("module", "name", "expected"), [
    ("clsbench", "api", True), ("clsbench.cli.common", "saved", True), ("clsbench.core.options", "Execution", True),
    ("clsbench.core.options", "reproduce_command", False), ("clsbench.procedures.serve", "serve", False),
    ("clsbench.core.durations", "parse_duration", False), ("clsbench", None, False)])
def test_the_allowed_imports(module: str, name: str | None, expected: bool) -> None:
    assert allowed(module, name) is expected
