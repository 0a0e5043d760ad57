"""The self-contained HTML report: sections, numbers, escaping, no external resources, determinism, the CLI,
and (where Debian's chromium is installed) a real headless browser opening the file.

Runs on a CPU from the committed result files; each report is rendered once per module.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench.cli.report_cmds import register
from clsbench.report import html as report_html
from clsbench.report.html import MAX_POINTS_PER_CURVE, knee, render_report
from clsbench.report.html_parts import thin
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "data" / "result_v1.json"
H200 = REPO / "benchmarks" / "results" / "h200"
SEED = H200 / "seed-suite.json"
TELEMETRY = H200 / "telemetry-check-resnet50.json"
INJECTION = "<script>alert(1)</script>"
#: Closes an XML comment and opens markup: must come out escaped wherever it lands (HTML or SVG).
COMMENT_BREAKER = "--><img src=x>"
SECTIONS = ("summary", "throughput", "sweeps", "latency", "power", "roofline", "warnings", "environment")


class _Text(HTMLParser):
    """The page's visible text (what a reader, or a browser's innerText, sees), for number checks."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("style", "script")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("style", "script")

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.parts.append(data)


def page_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return " ".join(" ".join(parser.parts).split())


def render_files(*paths: Path) -> str:
    return render_report([result_io.load(p) for p in paths], [str(p.relative_to(REPO)) for p in paths])


@pytest.fixture(scope="module")
def fixture_html() -> str:
    return render_files(FIXTURE)


@pytest.fixture(scope="module")
def h200_html() -> str:
    """The seed suite, the telemetry check and the fixture (failed and skipped cases) in one report."""
    return render_files(SEED, TELEMETRY, FIXTURE)


def _injected() -> BenchmarkResult:
    """The fixture with hostile strings as model, GPU, CPU, mode, reason and environment values."""
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    data["environment"]["gpu"]["name"] = INJECTION
    data["environment"]["cpu"]["model"] = COMMENT_BREAKER
    data["environment"]["env_vars"] = {INJECTION: INJECTION}
    data["environment"]["preflight"] = [{"check": INJECTION, "status": "warn", "message": INJECTION}]
    for m in data["measurements"]:
        m["model"] = INJECTION
        if m["status"] != "ok":
            m["detail"] = INJECTION
    data["measurements"][1]["model"] = f"{COMMENT_BREAKER} $x^2$"
    data["measurements"][2]["mode"] = INJECTION
    return BenchmarkResult.from_dict(data)


def _sweep_result() -> BenchmarkResult:
    """One model's infer-throughput at five batch sizes: 100, 180, 270, 290, 300 img/s."""
    base = result_io.load(FIXTURE)
    template = next(m for m in base.measurements if m.workload == "infer-throughput")
    sweep = []
    for batch, rate in ((1, 100.0), (2, 180.0), (4, 270.0), (8, 290.0), (16, 300.0)):
        summary = copy.deepcopy(template.summary)
        summary["throughput_img_s"] = rate
        summary["throughput_img_s_by_repeat"] = [rate * 0.99, rate * 1.01]
        summary["unstable"] = False
        sweep.append(Measurement(model="sweepnet", workload="infer-throughput", mode="fp32", batch_size=batch,
                                 device="cuda", status="ok", summary=summary, validity={"stop_rule_met": True}))
    return BenchmarkResult(environment=base.environment, settings=base.settings, measurements=tuple(sweep),
                           created_utc=base.created_utc, tool=base.tool)


# -------------------------------------------------------------------------------------------------- content


def test_fixture_report_has_every_section_and_its_figures(fixture_html: str) -> None:
    text = page_text(fixture_html)
    for section in SECTIONS:
        assert f'<section id="{section}">' in fixture_html
    # Summary rows of the fixture (the same figures as `clsbench show`).
    for figure in ("3,389", "22.5%", "6.396", "7.057", "1,674", "2,410 MiB"):
        assert figure in text
    assert "no sweep in these files" in text
    assert "resnet50: infer-latency CDF" in fixture_html


def test_fixture_warnings_name_failures_skips_and_instability(fixture_html: str) -> None:
    text = page_text(fixture_html)
    assert "FAILED (1)" in text and "SKIPPED (1)" in text and "UNSTABLE (1)" in text
    assert "resnet152 train fp32 bs1024: oom: OutOfMemoryError: CUDA out of memory" in text
    assert "resnet50 train bf16 bs32: unsupported_mode: bf16 casts the weights" in text
    assert "resnet50 infer-throughput fp32 bs256: spread 22.5%" in text
    assert "What to do:" in text


def test_unstable_items_say_how_far_the_speed_moved_within_a_repeat() -> None:
    """Cells that differ in cause each say theirs, and the group says each distinct advice once."""
    base = result_io.load(FIXTURE)
    template = next(m for m in base.measurements if m.status == "ok")
    cells = []
    for model, drift in (("drifting", 40.0), ("steady", 2.0)):
        summary = {**copy.deepcopy(template.summary), "unstable": True, "spread_pct": 30.0,
                   "within_repeat_drift_pct_max": drift}
        cells.append(Measurement(model=model, workload="infer-latency", mode="fp32", batch_size=1, device="cuda",
                                 status="ok", summary=summary,
                                 validity={"stop_rule_met": True, "advice": f"{model} advice"}))
    result = BenchmarkResult(environment=base.environment, settings=base.settings, measurements=tuple(cells),
                             created_utc=base.created_utc, tool=base.tool)
    text = page_text(render_report([result], ["drift.json"]))
    assert "drifting infer-latency fp32 bs1: spread 30.0%" in text
    assert "up to 40.0% within a repeat (time-varying cause)" in text
    assert "up to 2.0% within a repeat (steady repeats: per-process cause)" in text
    assert text.count("drifting advice") == 1 and text.count("steady advice") == 1


def test_h200_report_has_charts_and_key_numbers(h200_html: str) -> None:
    text = page_text(h200_html)
    # img/s of the seed suite and of the telemetry check, as the summary tables print them.
    for figure in ("10,258", "35,523", "20,383", "15,574", "836"):
        assert figure in text
    # One throughput chart per workload, a latency CDF per model, power and roofline from the telemetry check.
    for title in ("train: throughput by mode", "infer-latency: throughput by mode",
                  "infer-throughput: throughput by mode", "resnet50: infer-latency CDF",
                  "timm/vit_tiny_patch16_224: infer-latency CDF", "B H200: power over time",
                  "B H200: roofline (NVIDIA H200)"):
        assert title in h200_html, title
    assert "power limit 700 W" in h200_html
    assert "bf16 roof, measured: 768.6 TFLOP/s, 4.22 TB/s" in h200_html
    assert "no sweep in these files" in text
    # Environment of every run, with the pre-flight checks where the run made them.
    assert h200_html.count("<details>") == 3
    assert "Pre-flight checks" in text and "power limit 700 W enforced (default 700 W)" in text
    assert "gpu.driver_version" in text and "580.159.04" in text
    assert "probe.copy_bytes_s" in text


def test_report_is_a_reasonable_size(h200_html: str) -> None:
    # 30 measurements with ~90,000 raw latency samples: thinned curves keep the page well under a megabyte.
    assert len(h200_html.encode()) < 1_500_000


def test_latency_curves_are_thinned_and_charts_capped() -> None:
    base = result_io.load(FIXTURE)
    latency = next(m for m in base.measurements if m.workload == "infer-latency")
    samples = [1.0 + (i % 997) / 100 for i in range(50_000)]
    many = []
    for index in range(report_html.MAX_CURVES_PER_CHART + 1):
        repeat = {"status": "ok", "samples": {"wall_ms": samples}}
        many.append(Measurement(model="big", workload="infer-latency", mode=f"mode{index}", batch_size=1,
                                device="cuda", status="ok", repeats=(repeat,), summary=latency.summary))
    result = BenchmarkResult(environment=base.environment, settings=base.settings, measurements=tuple(many))
    html = render_report([result], ["big.json"])
    assert "big: infer-latency CDF (1/2)" in html and "big: infer-latency CDF (2/2)" in html
    # 7 curves of 50,000 samples each: unthinned, the SVG paths alone would take 7 x 50,000 x ~15 bytes (5 MB).
    assert len(html.encode()) < 7 * MAX_POINTS_PER_CURVE * 40 < 7 * 50_000 * 15


def _busy_latency_result() -> BenchmarkResult:
    """One infer-latency measurement whose repeats differ, as on a busy host: 10 requests at 600 ms, 10 at 590 ms,
    100 at 800 ms. The table's p50 is the median of the repeats' p50s (600 ms); the pooled p50 is 800 ms."""
    from test_compare import measurement, result

    def record(values: list[float]) -> dict[str, object]:
        return {"status": "ok", "reason": None, "detail": None, "validity": {"stop_rule_met": True},
                "samples": {"wall_ms": values, "images": len(values), "wall_s": sum(values) / 1000}}

    records = [record([600.0] * 10), record([590.0] * 10), record([800.0] * 100)]
    return result([measurement("busynet", "infer-latency", records, batch=1, device="cpu")])


def test_latency_chart_names_the_tables_p50_and_the_pooled_one() -> None:
    """Item 5 of issue 38: the chart said `p50 800.0 ms` (pooled) where the table says 600.0 (median of repeats)."""
    text = page_text(render_report([_busy_latency_result()], ["busy.json"]))
    summary, chart = text.split("busynet: infer-latency CDF", 1)
    assert "600.0" in summary and "800.0" not in summary  # the summary table's p50
    chart = "busynet: infer-latency CDF" + chart
    assert chart.startswith("busynet: infer-latency CDF fp32: table p50 600.0 ms (median of 3 repeats) pooled ● p50 "
                            "800.0, ▲ p99 800.0 ms (n=120)")
    assert "request latency, wall clock (ms); markers: pooled percentiles" in summary  # the x label, drawn first


def test_roofline_tflops_and_mfu_are_the_efficiency_tables() -> None:
    from clsbench.report.table import EFFICIENCY_COLUMNS, efficiency_row

    run = result_io.load(TELEMETRY)
    html = render_report([run], ["telemetry.json"])
    roofline = html[html.index('<table class="roofline">'):]
    rows = re.findall(r"<tr><td class=\"num\">\d+</td><td>([^<]*)</td>.*?</tr>", roofline, re.S)
    cells = re.findall(r"<tr><td class=\"num\">\d+</td>.*?</tr>", roofline, re.S)
    assert rows and len(rows) == len(cells)
    by_label = {report_html.label_of(m): m for m in run.measurements}
    for label, row in zip(rows, cells, strict=True):
        expected = dict(zip(EFFICIENCY_COLUMNS, efficiency_row(by_label[label]), strict=True))
        numbers = re.findall(r'<td class="num">([^<]*)</td>', row)
        assert numbers[2:4] == [expected["TFLOP/s"], expected["MFU %"]], label


# --------------------------------------------------------------------------------- throughput bar geometry

_BAR = re.compile(r'<g id="patch_\d+">\s*<path d="M ([-\d.]+) ([-\d.]+) \s*L ([-\d.]+) [-\d.]+ \s*L [-\d.]+ ([-\d.]+) '
                  r'\s*L [-\d.]+ [-\d.]+ \s*z\s*"[^>]*style="fill: (#[0-9a-f]{6})"')
_LABEL = re.compile(r'<text [^>]*x="([-\d.]+)" y="([-\d.]+)"[^>]*>([^<]*\(bs\d+\))</text>')
_WHISKER = re.compile(r'<g id="LineCollection_\d+">\s*<path d="M ([-\d.]+) ([-\d.]+) \s*L ([-\d.]+) ')


def _bars_chart(measurements: list[tuple[str, float, list[float], str]]) -> str:
    """The SVG of the throughput chart of one run of infer-throughput measurements (model, img/s, per repeat,
    device)."""
    base = result_io.load(FIXTURE)
    template = next(m for m in base.measurements if m.workload == "infer-throughput")
    built = []
    for model, rate, repeats, device in measurements:
        summary = copy.deepcopy(template.summary)
        summary.update(throughput_img_s=rate, throughput_img_s_by_repeat=repeats, unstable=max(repeats) > rate * 1.1)
        built.append(Measurement(model=model, workload="infer-throughput", mode="fp32", batch_size=2, device=device,
                                 status="ok", summary=summary, validity={"stop_rule_met": True}))
    result = BenchmarkResult(environment=base.environment, settings=base.settings, measurements=tuple(built))
    html = render_report([result], ["bars.json"])
    title = html.index("infer-throughput: throughput by mode")
    return html[html.rfind("<svg", 0, title):html.index("</svg>", title)]


@pytest.mark.parametrize("measurements", [
    # An UNSTABLE CPU figure (2 to 60 img/s over repeats, median 20) beside a GPU: a log axis, whose lower whisker
    # passed the axis' left end before.
    [("gpunet", 3000.0, [2990.0, 3000.0, 3010.0], "cuda"), ("cpunet", 20.0, [2.0, 20.0, 60.0], "cpu")],
    # Two CPU figures on a linear axis, one whose upper whisker (60) reached past the axis (1.3 x the longest bar).
    [("steady", 30.0, [29.0, 30.0, 31.0], "cpu"), ("cpunet", 20.0, [2.0, 20.0, 60.0], "cpu")],
], ids=["log", "linear"])
def test_bar_labels_sit_at_their_bars_end_whatever_the_whisker(measurements: list[Any]) -> None:
    """Item 19 of issue 38: labels floated far from their bars where a whisker was long, and whiskers were cut."""
    svg = _bars_chart(measurements)
    axes = svg[svg.index('<g id="axes_1">'):svg.index('<g id="matplotlib.axis_1">')]  # the background and bars
    left, _, right, _, _ = _BAR.findall(axes)[0]  # the axes' background comes first
    left, right = float(left), float(right)
    bars = [tuple(map(float, b[:4])) for b in _BAR.findall(axes)[1:]]
    labels = [(float(x), float(y), text) for x, y, text in _LABEL.findall(svg)]
    whiskers = [tuple(map(float, w)) for w in _WHISKER.findall(svg)]
    assert len(bars) == len(labels) == len(whiskers) == 2
    for (_, top, end, bottom), (x, baseline, text), (w_low, w_y, w_high) in zip(bars, labels, whiskers, strict=True):
        centre = (top + bottom) / 2
        assert x - end == pytest.approx(3.0, abs=0.01), text  # 3 pt right of the bar's end, not the whisker's
        assert top < baseline < centre and w_y == pytest.approx(centre), text  # above the whisker's line
        assert x + 7 * 0.62 * len(text) < right, text  # inside the axes (7 pt DejaVu Sans, ~0.62 em a character)
        assert left <= w_low < w_high <= right, text  # the whisker is drawn whole
    unstable = labels[1]
    assert whiskers[1][2] > unstable[0] + 20  # its whisker reaches well past where its label starts


def test_thin_keeps_first_and_last_and_the_limit() -> None:
    kept = thin(100_000)
    assert len(kept) <= MAX_POINTS_PER_CURVE
    assert kept[0] == 0 and kept[-1] == 99_999 and kept == sorted(set(kept))
    assert thin(10) == list(range(10))


def test_knee_is_the_smallest_batch_reaching_ninety_percent_of_the_best() -> None:
    assert knee([(1, 100.0), (2, 180.0), (4, 270.0), (8, 290.0), (16, 300.0)]) == (4, 270.0)
    assert knee([(8, 300.0), (1, 299.0)]) == (1, 299.0)  # order does not matter
    assert knee([(4, 100.0), (8, 89.0)]) == (4, 100.0)
    assert knee([]) is None


def test_sweep_is_drawn_with_its_knee() -> None:
    html = render_report([_sweep_result()], ["sweep.json"])
    text = page_text(html)
    assert "no sweep in these files" not in text
    assert "infer-throughput: throughput vs batch size" in html
    assert "knee bs4" in html  # the marker's label in the SVG
    assert "1, 2, 4, 8, 16" in text and "300 at bs16" in text and "bs4 (270 img/s)" in text


def test_names_must_match_results() -> None:
    from clsbench.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        render_report([result_io.load(FIXTURE)], [])
    with pytest.raises(InvalidInputError):
        render_report([], [])


# ---------------------------------------------------------------------------------------- safety and offline


def test_every_string_from_a_result_file_is_escaped() -> None:
    html = render_report([_injected()], [INJECTION])
    assert "<script" not in html.lower()
    assert "<img" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # The hostile model name is drawn inside the charts too (bars, CDF title), escaped there by matplotlib.
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    assert svgs and any("&lt;script&gt;alert(1)&lt;/script&gt;" in svg for svg in svgs)
    # Math text is off: "$x^2$" is printed verbatim, not typeset.
    assert "$x^2$" in html


def test_no_external_resources(h200_html: str, fixture_html: str) -> None:
    for html in (h200_html, fixture_html):
        lowered = html.lower()
        for tag in ("<script", "<link", "<img", "<iframe", "<object", "<embed", "@import", "@font-face"):
            assert tag not in lowered, tag
        # url(...) only ever points inside the page (matplotlib's clip paths: url(#id)).
        assert all(ref.startswith("#") for ref in re.findall(r"url\(\s*['\"]?([^)'\"]*)", html))
        # The only URLs are the SVG/XLink namespace names, which no browser fetches.
        urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
        assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}, urls
        assert not re.search(r"(?:href|src)\s*=\s*[\"']?\s*(?:https?:)?//", lowered)


def test_output_is_deterministic(fixture_html: str) -> None:
    again = render_files(FIXTURE)
    assert again == fixture_html
    assert "<metadata>" not in fixture_html and "dc:date" not in fixture_html
    # Distinct fixed salts per figure: no two charts share an element id.
    ids = re.findall(r'<clipPath id="([^"]+)"', fixture_html)
    assert len(ids) == len(set(ids))


def test_template_ships_with_the_package() -> None:
    from importlib import resources

    assert resources.files("clsbench.report").joinpath("templates", report_html.TEMPLATE).is_file()
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'clsbench = ["report/templates/*.j2"]' in pyproject


# ------------------------------------------------------------------------------------------------------ CLI


def _cli() -> click.Group:
    group = click.Group()
    register(group)
    return group


def test_cli_writes_the_report_and_refuses_to_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "report.html"
    result = CliRunner().invoke(_cli(), ["report", str(FIXTURE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    size = out.stat().st_size
    assert f"wrote {out} ({size:,} bytes, " in result.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")

    again = CliRunner().invoke(_cli(), ["report", str(FIXTURE), "-o", str(out)])
    assert again.exit_code == 3
    assert "error: " in again.output and "already exists" in again.output and "--force" in again.output
    assert out.stat().st_size == size

    forced = CliRunner().invoke(_cli(), ["report", str(FIXTURE), str(TELEMETRY), "-o", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    assert out.stat().st_size != size
    assert not list(out.parent.glob(".*.tmp"))


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": 1, "tool": {"name": "other"}}'])
def test_cli_bad_input_writes_nothing(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(_cli(), ["report", str(FIXTURE), str(bad), "-o", str(out)])
    assert result.exit_code == 3
    assert "error: " in result.output and "Traceback" not in result.output
    assert not out.exists() and not list(tmp_path.glob(".*.tmp"))


def test_cli_output_directory_is_an_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(_cli(), ["report", str(FIXTURE), "-o", str(tmp_path)])
    assert result.exit_code == 3
    assert "is a directory" in result.output


# -------------------------------------------------------------------------------------------------- browser

CHROMIUM = shutil.which("chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-logging=stderr", "--v=0", "--window-size=1280,2000"]


def _chromium(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{name}"
    return subprocess.run([CHROMIUM or "chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it; else apt-get install "
                                             "chromium)")
def test_report_opens_in_a_headless_browser(tmp_path: Path, h200_html: str) -> None:
    page = tmp_path / "report.html"
    page.write_text(h200_html, encoding="utf-8")
    url = page.as_uri()

    dom = _chromium(tmp_path, "dom", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = page_text(dom.stdout)
    for figure in ("10,258", "35,523", "15,574", "3,389", "resnet152 train fp32 bs1024: oom"):
        assert figure in text, figure
    assert "clsbench report" in text

    png = tmp_path / "shot.png"
    shot = _chromium(tmp_path, "shot", f"--screenshot={png}", url)
    assert shot.returncode == 0, shot.stderr[-2000:]
    for stderr in (dom.stderr, shot.stderr):
        # The page has no script, so any console message at all (console.error logs at INFO:CONSOLE) is wrong.
        bad = [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert not bad, bad
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # a blank page compresses to a few KiB; tables and charts do not
