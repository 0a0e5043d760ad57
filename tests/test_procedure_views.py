"""One view per procedure (issue 34, item 2): a procedure registered from this test module, with a ``show`` section,
an HTML section and flat rows of its own, appears in ``clsbench show`` (table, csv, markdown, json), in ``clsbench
report`` and in the export functions, with no edit to the report, the exports or the CLI; and those modules name no
procedure (they loop over :data:`clsbench.report.views.PROCEDURES`).
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from clsbench.report.export import COLUMNS, export_results
from clsbench.report.html import render_report
from clsbench.report.html_parts import Figures, ReportRun, render_fragment
from clsbench.report.views import PROCEDURES, HtmlSection, ProcedureView, comparer, rows_view, sections
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "data" / "result_v1.json"
REPORT = ROOT / "src" / "clsbench" / "report"

#: A note with markup in it: the report must print it, escaped, never as HTML.
NOTE = "<b>dummy</b> & co"


def _text(result: BenchmarkResult) -> str:
    facts = result.settings["dummy"]
    return f"dummy procedure: {facts['widgets']} widgets ({facts['note']})\n"


def _body(runs: Sequence[ReportRun], figs: Figures) -> Any:
    parts = [{"tag": run.tag, "widgets": run.result.settings["dummy"]["widgets"],
              "note": run.result.settings["dummy"]["note"]} for run in runs]
    return render_fragment('{% for p in parts %}<p class="dummy">{{ p.tag }}: {{ p.widgets }} widgets, '
                           "{{ p.note }}</p>\n{% endfor %}", parts=parts)


def _rows(result: BenchmarkResult, result_file: str) -> list[dict[str, Any]]:
    facts = result.settings["dummy"]
    return [{"result_file": result_file, "widget": index, "weight_g": 1.5 * index} for index in range(facts["widgets"])]


@pytest.fixture()
def dummy() -> Iterator[ProcedureView]:
    view = ProcedureView("dummy", _text, html=HtmlSection("dummy", "Dummy widgets", 99, _body), rows=_rows,
                         first_columns=("result_file", "widget"))
    PROCEDURES.register("dummy", view)
    try:
        yield view
    finally:
        PROCEDURES.unregister("dummy")


def _dummy_result(widgets: int = 3) -> BenchmarkResult:
    base = result_io.load(FIXTURE)
    return dataclasses.replace(base, settings={**base.settings, "dummy": {"widgets": widgets, "note": NOTE}})


def _cli(args: list[str], tmp_path: Path) -> Any:
    from clsbench.cli import main

    return CliRunner().invoke(main, args, env={"CLSBENCH_DB": str(tmp_path / "index.sqlite3")})


def test_show_prints_a_registered_procedure_in_every_format(dummy: ProcedureView, tmp_path: Path) -> None:
    path = tmp_path / "dummy.json"
    result_io.save(_dummy_result(), path)

    out = _cli(["show", str(path)], tmp_path)
    assert out.exit_code == 0, out.output
    assert f"dummy procedure: 3 widgets ({NOTE})" in out.output
    assert out.output.index("model") < out.output.index("dummy procedure")  # after the generic table

    out = _cli(["show", str(path), "--format", "csv"], tmp_path)
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == "result_file,widget,weight_g"
    assert lines[1:] == [f"{path},0,0.0", f"{path},1,1.5", f"{path},2,3.0"]

    out = _cli(["show", str(path), "--format", "markdown"], tmp_path)
    assert out.exit_code == 0, out.output
    assert out.output.startswith("| result_file | widget | weight_g |") and out.output.count("\n") == 2 + 3

    out = _cli(["show", str(path), "--format", "json"], tmp_path)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["settings"]["dummy"] == {"widgets": 3, "note": NOTE}


def test_the_report_has_the_registered_procedure_section(dummy: ProcedureView, tmp_path: Path) -> None:
    path = tmp_path / "dummy.json"
    result_io.save(_dummy_result(), path)
    page_path = tmp_path / "report.html"
    out = _cli(["report", str(path), "-o", str(page_path)], tmp_path)
    assert out.exit_code == 0, out.output
    page = page_path.read_text(encoding="utf-8")
    assert '<li><a href="#dummy">Dummy widgets</a></li>' in page
    assert '<section id="dummy">\n<h2>Dummy widgets</h2>\n<p class="dummy">A ' in page
    assert "3 widgets, &lt;b&gt;dummy&lt;/b&gt; &amp; co</p>" in page and NOTE not in page
    # Procedures' sections stand between the batch sweeps and the latency distributions.
    assert page.index('id="sweeps"') < page.index('id="dummy"') < page.index('id="latency"')


def test_a_file_without_the_procedure_has_no_section_and_generic_rows(dummy: ProcedureView) -> None:
    plain = result_io.load(FIXTURE)
    page = render_report([plain], ["plain.json"])
    assert 'id="dummy"' not in page and 'href="#dummy"' not in page
    assert sections(plain) == ""
    assert export_results([plain], ["plain.json"], "csv").splitlines()[0] == ",".join(COLUMNS)
    # Own rows only when every exported file holds the procedure's facts.
    mixed = export_results([_dummy_result(), plain], ["d.json", "plain.json"], "csv")
    assert mixed.splitlines()[0] == ",".join(COLUMNS) and rows_view([_dummy_result(), plain]) is None


def test_the_export_functions_use_the_registered_view(dummy: ProcedureView) -> None:
    results = [_dummy_result(2), _dummy_result(1)]
    assert rows_view(results) is dummy
    assert export_results(results, ["a.json", "b.json"], "csv").splitlines() == [
        "result_file,widget,weight_g", "a.json,0,0.0", "a.json,1,1.5", "b.json,0,0.0"]
    rows = json.loads(export_results(results, ["a.json", "b.json"], "json"))
    assert rows[-1] == {"result_file": "b.json", "widget": 0, "weight_g": 0.0}
    assert sections(results[0]) == f"\ndummy procedure: 2 widgets ({NOTE})\n"
    assert comparer(results) is None  # no compare hook: compare matches the measurements as for any run


def test_unregistered_the_procedure_is_gone(tmp_path: Path) -> None:
    assert "dummy" not in PROCEDURES
    result = _dummy_result()
    assert "dummy procedure" not in sections(result)
    assert 'id="dummy"' not in render_report([result], ["dummy.json"])
    assert export_results([result], ["d.json"], "csv").splitlines()[0] == ",".join(COLUMNS)


def test_every_built_in_procedure_is_registered_with_a_view() -> None:
    names = set(PROCEDURES.names())
    assert {"sweep", "tune", "diagnose", "scale", "serve", "soak", "profile"} <= names
    with_html = {name for name, view in PROCEDURES.items() if view.html is not None}
    assert {"tune", "serve", "soak"} <= with_html
    orders = [view.html.order for _, view in PROCEDURES.items() if view.html is not None]
    assert len(orders) == len(set(orders)), "two procedures' report sections share an order"


# ------------------------------------------------------------------------------ the report names no procedure


def _report_modules() -> list[Path]:
    """The report's page, charts, views and exports: the modules that must loop over the registry."""
    return sorted(REPORT.glob("html*.py")) + [REPORT / "export.py", REPORT / "exporters.py", REPORT / "views.py"]


def _literals_and_imports(path: Path) -> tuple[set[str], set[str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    literals = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    return literals, imported


@pytest.mark.parametrize("path", _report_modules(), ids=lambda p: p.name)
def test_report_modules_name_no_procedure(path: Path) -> None:
    names = set(PROCEDURES.names()) - {"dummy"}
    literals, imported = _literals_and_imports(path)
    assert not names & literals, f"{path.name} names a procedure: {sorted(names & literals)}"
    below = [m for m in imported if m.startswith(("clsbench.procedures", "clsbench.serving", "clsbench.analysis.soak"))]
    assert not below, f"{path.name} imports a procedure's own modules: {below}"
    # The settings block of a procedure is read through its view, never by name.
    text = path.read_text(encoding="utf-8")
    for name in names:
        assert f'settings["{name}"]' not in text and f'settings.get("{name}"' not in text


def test_no_report_module_is_over_700_lines() -> None:
    for path in sorted(REPORT.glob("*.py")):
        lines = path.read_text(encoding="utf-8").count("\n")
        assert lines <= 700, f"{path.name} has {lines} lines"
