"""What every part of the HTML report shares: the runs as the report names them, figures as inline SVG, colours, axes,
small number helpers, and HTML fragments rendered with autoescaping.

The generic measurement charts (:mod:`clsbench.report.html_charts`), the page (:mod:`clsbench.report.html`) and each
procedure's own section (its :class:`~clsbench.report.views.HtmlSection`, next to the procedure) are built from
these, so that every chart of the page looks alike and every string from a result file is escaped the same way.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.core.vocab import Status
from clsbench.results.schema import BenchmarkResult, Measurement, backend_suffix

#: Most points drawn per curve; longer series are thinned evenly (first and last point kept).
MAX_POINTS_PER_CURVE = 2000

#: Most curves in one chart; more are split over several charts so that every curve stays legible.
MAX_CURVES_PER_CHART = 6

#: Colours (matplotlib's tab10, written out so the report does not depend on the user's matplotlib style).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")

#: matplotlib settings for every figure: text as text, fixed ids, no math text, small fonts.
RC_PARAMS: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "clsbench-report",
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "path.simplify": True,
}


def finite(value: Any) -> float | None:
    """A finite number from a result file, or None (missing, a bool, a string such as "nan", infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def label_of(m: Measurement) -> str:
    return f"{m.model} {m.workload} {m.mode} bs{m.batch_size}{backend_suffix(m.backend)}"


def mode_of(m: Measurement) -> str:
    """The mode, and the inference backend when it is not eager (``bf16+cl @export``): one series in a chart."""
    return m.mode + backend_suffix(m.backend)



def fmt_g(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def thin(n: int, limit: int = MAX_POINTS_PER_CURVE) -> list[int]:
    """Indices of at most ``limit`` points spread evenly over ``n``, always keeping the first and the last."""
    if n <= limit:
        return list(range(n))
    step = (n - 1) / (limit - 1)
    return sorted({round(i * step) for i in range(limit)})


def chunks(items: Sequence[Any], size: int = MAX_CURVES_PER_CHART) -> list[Sequence[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def succeeded(m: Measurement) -> bool:
    return m.status == Status.OK


def rate_of(m: Measurement) -> float | None:
    """The measurement's img/s (median over repeats) if it succeeded with a positive figure, else None."""
    value = finite(m.summary.get("throughput_img_s")) if succeeded(m) else None
    return value if value is not None and value > 0 else None


# ----------------------------------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class ReportRun:
    """One result file as the report shows it: a letter, the name it was given, the hardware, a short tag."""

    letter: str
    name: str
    result: BenchmarkResult
    hardware: str
    tag: str

    @property
    def measurements(self) -> tuple[Measurement, ...]:
        return self.result.measurements


def hardware_of(result: BenchmarkResult) -> tuple[str, str]:
    """(full name, short name) of what the run measured: the GPU for a CUDA run, else the CPU."""
    env = result.environment
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    cpu = env.get("cpu") if isinstance(env.get("cpu"), dict) else {}
    devices = [m.device for m in result.measurements] or [str(env.get("device", ""))]
    if any(str(d).startswith("cuda") for d in devices) and gpu.get("name"):
        name = str(gpu["name"])
        return name, re.sub(r"^NVIDIA\s+(GeForce\s+)?", "", name) or name
    return str(cpu.get("model") or "unknown CPU"), "CPU"


def report_runs(results: Sequence[BenchmarkResult], names: Sequence[str]) -> list[ReportRun]:
    runs = []
    for index, (result, name) in enumerate(zip(results, names, strict=True)):
        letter = chr(ord("A") + index) if index < 26 else f"R{index + 1}"
        hardware, short = hardware_of(result)
        runs.append(ReportRun(letter, str(name), result, hardware, f"{letter} {short}"))
    return runs


def series_name(run: ReportRun, text: str, many_runs: bool) -> str:
    return f"{run.tag} · {text}" if many_runs else text


# ------------------------------------------------------------------------------------------------- figures


class Figures:
    """Makes figures and turns them into inline SVG; each figure gets its own fixed hash salt."""

    def __init__(self) -> None:
        self.count = 0

    def new(self, width_in: float, height_in: float) -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasAgg(fig)  # the Agg canvas, set on this figure only: no global backend switch, no pyplot
        return fig

    def svg(self, fig: Any) -> Any:
        import matplotlib
        from markupsafe import Markup

        self.count += 1
        buf = io.StringIO()
        # A distinct, fixed salt per figure: ids stay reproducible and never collide between the page's SVGs.
        with matplotlib.rc_context({"svg.hashsalt": f"{RC_PARAMS['svg.hashsalt']}-{self.count}"}):
            fig.savefig(buf, format="svg", metadata={"Date": None})
        text = buf.getvalue()
        text = text[text.index("<svg"):]  # drop the XML declaration and DOCTYPE: not valid inside HTML
        text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, count=1, flags=re.S)
        # Matplotlib escapes every text it writes (``_escape_cdata``), so the SVG is safe to inline as is.
        return Markup(text.strip())


def series_color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def plain_tick(value: float, _pos: Any = None) -> str:
    """Plain tick labels (1,000 rather than 10^3: math text is off so that result strings print verbatim)."""
    if value >= 1000:
        return f"{value:,.0f}"
    return f"{value:g}"


def log_axis(axis: Any, low: float, high: float) -> None:
    """A log scale in plain numbers, labelled at 1, 2 and 5 times each power of ten over a short range and at the
    powers of ten only over more than three decades (where 1-2-5 labels would run into each other)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    subs = (1.0, 2.0, 5.0) if high / max(low, 1e-300) <= 1e3 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(plain_tick))
    axis.set_minor_formatter(NullFormatter())


def legend_patch(color: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(facecolor=color, label=label)


# ---------------------------------------------------------------------------------------------- fragments


def jinja_environment() -> Any:
    """The one Jinja2 environment of the report: autoescaping on (every string from a result file is escaped),
    undefined names an error, block tags leaving no blank lines."""
    from jinja2 import Environment, StrictUndefined

    return Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                       keep_trailing_newline=True)


def render_fragment(source: str, **context: Any) -> Any:
    """A piece of the page (a procedure's section) from a Jinja2 template ``source``, as safe HTML: values are
    escaped unless marked safe (the SVG of :class:`Figures`)."""
    from markupsafe import Markup

    return Markup(jinja_environment().from_string(source).render(**context))
