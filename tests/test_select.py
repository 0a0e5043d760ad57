"""``clsbench select`` (issue 39): which card, how many, at what cost, from stored results.

The committed results (an H100 and an H200 measured ResNet-50) answer the issue's Done bar through the CLI; small
result files written here check each rule: served answers from serve results and estimates from run cells, scaling
from a scale result, UNSTABLE figures never used, prices by alias, purchase prices, bad input in one line.
The table's golden copy is ``tests/golden/select-throughput.txt``; after an intended change to the table, regenerate
it with the command in :func:`test_done_bar_ranked_table_file_and_impossible_requirement` and say why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clsbench import api
from clsbench.cli import main
from clsbench.procedures.select import SelectSettings
from clsbench.procedures.select.cards import match_card, means
from clsbench.procedures.select.prices import HOURS_PER_YEAR, parse_price
from clsbench.procedures.select.view import pareto_front
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
H100_RUN = RESULTS / "h100" / "serve-backends-resnet50-20261206T050041Z" / "run.json"
H100_SERVE = RESULTS / "h100" / "serve-backends-resnet50-20261206T050041Z" / "serve.json"
H200_SWEEP = RESULTS / "h200" / "sweep-resnet50-infer-throughput.json"
H200_SCALE = RESULTS / "h200" / "scale-resnet50-x2.json"
GOLDEN = ROOT / "tests" / "golden" / "select-throughput.txt"

A100 = "NVIDIA A100-SXM4-80GB"
L4 = "NVIDIA L4"


def cli(*args: str, tmp_path: Path) -> Result:
    return CliRunner().invoke(main, ["select", *args], env={"CLSBENCH_DB": str(tmp_path / "index.sqlite3")})


def cell(workload: str, mode: str, batch: int, img_s: float | list[float], *, p99: float | None = 5.0,
         unstable: bool = False, status: str = "ok", reason: str | None = None, jpi: float | None = None,
         model: str = "resnet50", **summary: Any) -> Measurement:
    by_repeat = img_s if isinstance(img_s, list) else [img_s]
    median = sorted(by_repeat)[len(by_repeat) // 2]
    s: dict[str, Any] = {"throughput_img_s": median, "throughput_img_s_by_repeat": by_repeat, "unstable": unstable,
                         "latency_ms": {"p99": p99} if p99 is not None else {}, **summary}
    if jpi is not None:
        s["telemetry"] = {"joules_per_image": jpi, "samples_n": 10}
    return Measurement(model=model, workload=workload, mode=mode, batch_size=batch, device="cuda",
                       status=status, reason=reason, input_size=224, summary=s if status == "ok" else {})


def write(path: Path, gpu: str, *cells: Measurement, settings: dict[str, Any] | None = None) -> str:
    result = BenchmarkResult(environment={"device": "cuda", "gpu": {"name": gpu}, "cpu": {"model": "x86"}},
                             settings=settings or {}, measurements=tuple(cells), created_utc="2026-12-01T00:00:00")
    result_io.save(result, path)
    return str(path)


def test_done_bar_ranked_table_file_and_impossible_requirement(tmp_path: Path) -> None:
    """``clsbench select`` over the committed files for one model on two devices, with prices: the ranked table
    with cards needed and cost per million images (its golden copy), the result file written; an impossible
    requirement exits non-zero with the reason. Regenerate the golden copy with ``clsbench select
    benchmarks/results/h100/serve-backends-resnet50-20261206T050041Z/run.json
    benchmarks/results/h200/sweep-resnet50-infer-throughput.json --model resnet50 --throughput 20000 --headroom 0.2
    --price H100=2.49/h --price H200=3.50/h --kwh-price 0.30 -o /tmp/x.json > tests/golden/select-throughput.txt``
    (run from the repository root)."""
    out = tmp_path / "select.json"
    rel = [str(p.relative_to(ROOT)) for p in (H100_RUN, H200_SWEEP)]
    args = [*rel, "--model", "resnet50", "--throughput", "20000", "--headroom", "0.2", "--price", "H100=2.49/h",
            "--price", "H200=3.50/h", "--kwh-price", "0.30", "-o", str(out)]
    import os

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        done = cli(*args, tmp_path=tmp_path)
    finally:
        os.chdir(cwd)
    assert done.exit_code == 0, done.output
    assert done.stdout == GOLDEN.read_text(encoding="utf-8")
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    assert "cards" in header and "cost/M img" in header
    first = lines[lines.index(header) + 2]
    assert first.split()[:2] == ["1", "NVIDIA"] and "H100" in first and "$2.49" in first
    # 24,000 img/s needed: one H100 at 25,979 img/s, two H200 at 16,208.
    facts = api.load(out).settings["select"]
    assert [(r["card"], r["cards"]) for r in facts["answer"]["rows"]] == [
        ("NVIDIA H100 80GB HBM3", 1), ("NVIDIA H200", 2)]
    assert facts["answer"]["rows"][1]["kwh_per_m_images"] == pytest.approx(0.0400859375 * 1e6 / 3.6e6)
    assert "H100 x1 at $2.49/h meets 20,000 img/s" in facts["answer"]["verdict"]
    again = cli(str(H100_RUN), "--model", "resnet50", "--throughput", "1", "-o", str(out), tmp_path=tmp_path)
    assert again.exit_code == 3 and "never overwrites" in again.stderr
    impossible = cli(str(H100_SERVE), "--model", "resnet50", "--qps", "5000", "--p99-ms", "1", "-o",
                     str(tmp_path / "none.json"), tmp_path=tmp_path)
    assert impossible.exit_code == 2
    assert impossible.stderr.startswith("error: no card meets 5,000 qps at p99 <= 1 ms for resnet50: NVIDIA H100 "
                                        "80GB HBM3: p99 <= 1 ms not met at any serve setting")
    assert "Traceback" not in impossible.output and not (tmp_path / "none.json").exists()


def test_served_from_serve_results_and_estimates_from_run_cells(tmp_path: Path) -> None:
    """A card with a serve result answers from its VALID Server runs within the bound; a card with only run cells
    is estimated (p99 ~ 2 x batch time) and says so in the row and the file; a card never measured is "not
    measured"."""
    l4 = write(tmp_path / "l4.json", L4, cell("infer-throughput", "fp16", 64, 3000.0, p99=6.0),
               cell("infer-throughput", "fp16", 256, 3600.0, p99=40.0))
    other = write(tmp_path / "a100.json", A100, cell("infer-throughput", "fp16", 64, 9000.0, model="resnet18"))
    settings = SelectSettings(inputs=(str(H100_SERVE), l4, other), model="resnet50",
                              requirement={"qps": 20000, "p99_ms": 15}, prices=("H100=2.49/h", "L4=0.8/h"))
    facts = api.select(settings, tmp_path / "s.json").facts
    rows = {r["card"]: r for r in facts["answer"]["rows"]}
    h100 = rows["NVIDIA H100 80GB HBM3"]
    assert h100["capacity_img_s"] == pytest.approx(12984.46875) and h100["cards"] == 2 and h100["estimate"] is None
    assert h100["p99_ms"] <= 15
    est = rows[L4]
    assert est["batch_size"] == 64 and est["p99_ms"] == pytest.approx(12.0) and est["cards"] == 7
    assert "estimate" in est["estimate"]
    assert {"card": A100, "reason": "not measured: no result of resnet50"} in facts["answer"]["excluded"]
    text = api.select_text(facts)
    assert "estimate from run cells" in text and "no serve result of resnet50" in text


def test_unstable_never_used_spread_gives_a_range_and_oom_is_a_reason(tmp_path: Path) -> None:
    """UNSTABLE figures are flagged and never used (a card with only those is excluded for it); the spread over
    repeats becomes a range of cards and cost; a card whose every cell ran out of memory says so."""
    a100 = write(tmp_path / "a.json", A100, cell("infer-throughput", "bf16", 128, 50000.0, unstable=True),
                 cell("infer-throughput", "bf16", 64, [9000.0, 10000.0, 11000.0]))
    l4 = write(tmp_path / "l4.json", L4, cell("infer-throughput", "bf16", 64, 9000.0, unstable=True))
    oom = write(tmp_path / "h.json", "NVIDIA H200", cell("infer-throughput", "fp32", 1024, 0, status="failed",
                                                         reason="oom"))
    facts = api.select(SelectSettings(inputs=(a100, l4, oom), model="resnet50", requirement={"throughput": 30000},
                                      prices=("A100=1.5",)), None).facts
    row = facts["answer"]["rows"][0]
    assert row["batch_size"] == 64 and row["cards"] == 3 and (row["cards_min"], row["cards_max"]) == (3, 4)
    assert row["cost_per_h_max"] == pytest.approx(6.0) and "1 UNSTABLE configuration left out" in row["notes"]
    reasons = {e["card"]: e["reason"] for e in facts["answer"]["excluded"]}
    assert reasons[L4].startswith("only UNSTABLE figures")
    assert reasons["NVIDIA H200"] == "out of memory at every batch measured"
    assert "3 (3-4)" in api.select_text(facts)


def test_training_uses_scale_efficiency_else_says_linear(tmp_path: Path) -> None:
    """A training job: cards needed uses the H200's measured DDP efficiency (scale result); a card without one
    says in its row that it assumes linear scaling."""
    l4 = write(tmp_path / "l4.json", L4, cell("train", "amp-bf16", 256, 1000.0))
    facts = api.select(SelectSettings(inputs=(str(H200_SCALE), str(H200_SWEEP.parent / "sweep-resnet50-train.json"),
                                              l4), model="resnet50",
                                      requirement={"epochs": 90, "dataset_images": 1281167, "deadline": "4h"}),
                       None).facts
    rows = {r["card"]: r for r in facts["answer"]["rows"]}
    need = 90 * 1281167 / (4 * 3600)
    assert facts["requirement"]["target_img_s"] == pytest.approx(need)
    h200 = rows["NVIDIA H200"]
    assert h200["scaling"]["strategy"] == "ddp" and h200["efficiency"] == pytest.approx(0.9926884192521438)
    assert h200["cards"] * h200["capacity_img_s"] * h200["efficiency"] >= need
    assert any(n.startswith("scaling 99.3% measured at 2 GPUs (ddp") for n in h200["notes"])
    assert rows[L4]["cards"] == 9 and "assumes linear scaling (no scale result for this card)" in rows[L4]["notes"]


def test_prices_file_purchase_energy_cost_and_filters(tmp_path: Path) -> None:
    """A TOML price list (hourly, or purchase / (years x hours x utilisation)), its kWh price and currency; the
    mode, precision, backend and no-compile filters choose among configurations."""
    a100 = write(tmp_path / "a.json", A100, cell("infer-throughput", "fp32", 64, 2000.0, jpi=0.36),
                 cell("infer-throughput", "bf16+compile", 64, 8000.0, jpi=0.09))
    l4 = write(tmp_path / "l4.json", L4, cell("infer-throughput", "fp32", 64, 1000.0, jpi=0.18))
    prices = tmp_path / "prices.toml"
    prices.write_text('currency = "EUR "\nkwh_price = 0.5\n[cards.A100]\nhourly = 2.0\n'
                      '[cards."NVIDIA L4"]\npurchase = 10000\nyears = 2\nutilisation = 0.5\n', encoding="utf-8")
    facts = api.select(SelectSettings(inputs=(a100, l4), model="resnet50", requirement={"throughput": 4000},
                                      prices_file=str(prices)), None).facts
    rows = {r["card"]: r for r in facts["answer"]["rows"]}
    assert rows[A100]["mode"] == "bf16+compile" and rows[A100]["cards"] == 1
    assert rows[L4]["price_per_card_h"] == pytest.approx(10000 / (2 * HOURS_PER_YEAR * 0.5))
    assert rows[L4]["energy_cost_per_m_images"] == pytest.approx(0.18 / 3.6 * 0.5)
    assert rows[A100]["cost_per_m_images"] == pytest.approx(2.0 / (4000 * 3600) * 1e6)
    assert "EUR 2.00/h" in api.select_text(facts)
    fp32 = api.select(SelectSettings(inputs=(a100,), model="resnet50", requirement={"throughput": 4000},
                                     precisions=("fp32",)), None).facts
    assert fp32["answer"]["rows"][0]["mode"] == "fp32" and fp32["answer"]["rows"][0]["cards"] == 2
    nocompile = api.select(SelectSettings(inputs=(a100,), model="resnet50", requirement={"throughput": 4000},
                                          no_compile=True), None).facts
    assert nocompile["answer"]["rows"][0]["mode"] == "fp32"


@pytest.mark.parametrize(("args", "message"), [
    (["--throughput", "100", "--price", "H100=-2/h"], "error: --price H100 is negative (-2)"),
    (["--throughput", "100", "--price", "A100=2/h"], "error: --price A100: no results for a card named 'A100'"),
    (["--throughput", "100", "--price", "NVIDIA=2/h"], "error: --price NVIDIA: 'NVIDIA' is ambiguous"),
    (["--throughput", "100", "--model", "vgg16"], "error: no result file here holds vgg16"),
    (["--throughput", "100", "--qps", "5"], "error: options of two requirements given"),
    (["--qps", "5"], "error: the served requirement also needs --p99-ms"),
    (["--throughput", "100", "--workload", "serve-server"], "error: --workload serve-server does not apply"),
    (["--throughput", "-3"], "error: --throughput must be above 0"),
])
def test_bad_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    model = [] if "--model" in args else ["--model", "resnet50"]
    done = cli(str(H100_RUN), str(H200_SWEEP), *model, *args, "-o", str(tmp_path / "x.json"), tmp_path=tmp_path)
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(message) and "Traceback" not in done.output
    assert not (tmp_path / "x.json").exists()


def test_card_names_and_aliases() -> None:
    assert means("H100", "NVIDIA H100 80GB HBM3") and means("h100 80gb", "NVIDIA H100 80GB HBM3")
    assert not means("H10", "NVIDIA H100 80GB HBM3") and not means("80GB H100", "NVIDIA H100 80GB HBM3")
    assert match_card("nvidia h200", ["NVIDIA H200", "NVIDIA H200 NVL"], what="x") == "NVIDIA H200"
    assert parse_price("H100 = $2.49/h").hourly == pytest.approx(2.49)


def test_show_exports_compare_and_report(tmp_path: Path) -> None:
    """The result file is shown by ``show`` (table, csv, markdown), ``compare`` of two selections says what
    changed, and the HTML report has the cost-against-p99 chart with its Pareto front."""
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    inputs = (str(H100_RUN), str(H200_SWEEP))
    api.select(SelectSettings(inputs=inputs, model="resnet50", requirement={"throughput": 20000},
                              prices=("H100=2.49/h", "H200=3.5/h")), a)
    api.select(SelectSettings(inputs=inputs, model="resnet50", requirement={"throughput": 40000},
                              prices=("H100=2.49/h", "H200=1.0/h")), b)
    shown = api.show([str(a)])
    assert "select: resnet50, 20,000 img/s of infer-throughput" in shown and "verdict: H100 x1" in shown
    # no run header (machine, device, torch are not this file's) and no empty run table before the answer
    assert shown.startswith("clsbench ") and "unknown CPU" not in shown and "(no measurements)" not in shown
    csv = api.show([str(a)], fmt="csv")
    assert csv.splitlines()[0].startswith("result_file,rank,card,status,config")
    assert "NVIDIA H200" in api.show([str(a)], fmt="markdown")
    compared = api.compare([str(a), str(b)]).text
    assert "requirement: 20,000 img/s of infer-throughput -> 40,000 img/s of infer-throughput" in compared
    assert "price of NVIDIA H200: $3.50/h -> $1.00/h" in compared and "winner: NVIDIA H100 80GB HBM3 -> NVIDIA H200" \
        in compared
    html = tmp_path / "r.html"
    api.report([str(a)], html)
    page = html.read_text(encoding="utf-8")
    assert "Card selection" in page and "Pareto front" in page and "<svg" in page


def test_pareto_front() -> None:
    points = [{"p99_ms": 1.0, "cost_per_m_images": 5.0}, {"p99_ms": 2.0, "cost_per_m_images": 3.0},
              {"p99_ms": 3.0, "cost_per_m_images": 4.0}, {"p99_ms": 4.0, "cost_per_m_images": 1.0}]
    assert [p["p99_ms"] for p in pareto_front(points)] == [1.0, 2.0, 4.0]


def test_directory_input_skips_foreign_json(tmp_path: Path) -> None:
    write(tmp_path / "a.json", A100, cell("infer-throughput", "fp32", 64, 2000.0))
    (tmp_path / "notes.json").write_text(json.dumps({"hello": 1}), encoding="utf-8")
    outcome = api.select(SelectSettings(inputs=(str(tmp_path),), model="resnet50",
                                        requirement={"throughput": 3000}), None)
    assert outcome.facts["answer"]["rows"][0]["cards"] == 2
    assert outcome.skipped == (f"{tmp_path}: 1 JSON file under it is not clsbench results; left out",)
