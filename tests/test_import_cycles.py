"""No import cycle inside clsbench, counting every import: at module level and inside functions alike.

tests/test_architecture.py imports each module alone, which catches a cycle only when it breaks an import at
module level; an import inside a function hides a cycle until the function runs, and a cycle of lazy imports still
ties the modules together (neither can be understood, moved or tested without the other). This walks the source
instead: every ``import``/``from`` of a clsbench module anywhere in a module is an edge (imports under
``if TYPE_CHECKING:`` are annotations and are not), ``from package import name`` counts as an import of the package
and, when ``name`` is a module, of that module too, and any strongly connected component of more than one module
is a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "clsbench"


def _module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module under ``root / PACKAGE``."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree``, at any depth, except those under ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        for child in ast.iter_child_nodes(pending.pop()):
            if isinstance(child, ast.If) and _is_type_checking(child):
                pending.extend(child.orelse)
            elif isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            else:
                pending.append(child)
    return found


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The dotted names one import statement may load: ``from p import n`` gives ``p`` and ``p.n``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    return [source] + [f"{source}.{alias.name}" for alias in node.names]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Each clsbench module under ``root`` -> the clsbench modules it imports anywhere (TYPE_CHECKING aside)."""
    files = _module_files(root)

    def known(name: str) -> str | None:
        """The longest prefix of ``name`` that is a module here (``a.b.C`` -> ``a.b``)."""
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = [t for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8")))
                   for t in _targets(node, package) if t == PACKAGE or t.startswith(PACKAGE + ".")]
        graph[module] = {m for m in map(known, targets) if m and m != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle_in_clsbench() -> None:
    graph = import_graph(SRC)
    found = cycles(graph)
    described = ["\n".join(f"  {m} -> {', '.join(sorted(graph[m] & set(c)))}" for m in c) for c in found]
    assert not found, "import cycles (function-level imports count):\n" + "\n\n".join(described)


def test_the_walk_sees_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    package = tmp_path / PACKAGE
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("from clsbench.inner.b import B\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from clsbench import c\n"
                                  "\n\ndef f():\n    from clsbench.inner import b\n    return b\n")
    (package / "inner" / "b.py").write_text("from clsbench import a\nB = 1\n")
    (package / "c.py").write_text("from clsbench import a\n")
    graph = import_graph(tmp_path)
    assert graph["clsbench.a"] == {"clsbench.inner", "clsbench.inner.b"}  # the TYPE_CHECKING import is not an edge
    assert cycles(graph) == [["clsbench.a", "clsbench.inner", "clsbench.inner.b"]]
