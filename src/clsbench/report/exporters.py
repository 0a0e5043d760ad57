"""The formats ``show`` writes, one registry (:data:`EXPORTERS`): each takes the loaded results and the names they
were read from, and returns the text. ``extra`` adds to each run's table what the procedures say about it
(:func:`clsbench.report.views.sections`); the flat formats leave it out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from clsbench.core.registry import Registry
from clsbench.results.schema import BenchmarkResult

#: ``render(results, names, extra) -> text``.
Exporter = Callable[[Sequence[BenchmarkResult], Sequence[str], Callable[[BenchmarkResult], str]], str]

EXPORTERS: Registry[Exporter] = Registry("format", option="--format")


@EXPORTERS.register("table")
def table_text(results: Sequence[BenchmarkResult], names: Sequence[str],
               extra: Callable[[BenchmarkResult], str]) -> str:
    """For people: each run's table and warnings, then what its procedure found (a heading per file when many)."""
    from clsbench.report import table
    from clsbench.report.views import views_of

    parts = []
    for name, result in zip(names, results, strict=True):
        heading = f"== {name}\n" if len(names) > 1 else ""
        views = views_of(result)
        if views and not result.measurements and not any(view.measures for view in views):
            runs = f"clsbench {result.tool.get('version', '?')} | {result.created_utc or '-'}\n"
        else:
            runs = table.render(result)
        parts.append(heading + runs + extra(result))
    return "\n".join(parts)


@EXPORTERS.register("json")
def json_text(results: Sequence[BenchmarkResult], names: Sequence[str],
              extra: Callable[[BenchmarkResult], str]) -> str:
    """The result file(s) as stored (a list when there are several)."""
    documents = [result.to_dict() for result in results]
    return json.dumps(documents[0] if len(documents) == 1 else documents, indent=1) + "\n"


@EXPORTERS.register("csv")
def csv_text(results: Sequence[BenchmarkResult], names: Sequence[str],
             extra: Callable[[BenchmarkResult], str]) -> str:
    """One flat row per measurement, units in the column names (or a procedure's own rows:
    :func:`clsbench.report.export.export_results`)."""
    from clsbench.report.export import export_results

    return export_results(results, list(names), "csv")


@EXPORTERS.register("markdown")
def markdown_text(results: Sequence[BenchmarkResult], names: Sequence[str],
                  extra: Callable[[BenchmarkResult], str]) -> str:
    """The flat rows as a Markdown table."""
    from clsbench.report.export import export_results

    return export_results(results, list(names), "markdown")
