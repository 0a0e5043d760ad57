"""``clsbench tune --data DIR``: the pipeline kind measures the best compute candidates on real data, the winner is a
real-data cell with its share of the synthetic ceiling, gpu and dali are pruned with their reasons on a CPU,
inference with data is refused, and a stopped search resumes with the data settings of its file.

The searches run inline on the cost clock of test_sweep.py, as in test_tune_budget.py: the test model's forward
advances the clock by a cost per mode and batch, and every repeat adds a process start. Reading and decoding the
small generated JPEG set takes no time on that clock, so a real-data cell runs exactly as fast as its synthetic
ceiling unless a test makes its steps slower (``SLOWER``, applied from the progress callback while a real-data cell
runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench.core.options import Execution, MeasureOptions
from clsbench.data import DataSettings
from clsbench.data.make import MakeSpec, make_dataset
from clsbench.errors import InvalidInputError
from clsbench.procedures.tune import TuneInterrupted, analyze_tune, render_tune, resume_tune
from clsbench.procedures.tune.budget import PROCESS_S
from clsbench.procedures.tune.pipeline_kind import (
    PIPELINE_LEADERS,
    PIPELINE_START_S,
    pipeline_settings,
    pipeline_skip_reason,
    pipeline_workers,
)
from clsbench.results import io as result_io
from test_sweep import load_costed
from test_tune_budget import tune_with

MS = 1_000_000
PROCESS_NS = 5_000 * MS
OPTIONS = MeasureOptions(repeats=3, warmup=1, iterations=4, min_time=0.0)
PER_IMAGE_MS = {"fp32": 4.0, "fp32+cl": 1.0, "amp-bf16": 2.0}
TINY = "clsbench_testmodels:tiny"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tune-data") / "ds"
    make_dataset(root, MakeSpec(images=24, classes=3, seed=5, width=40, height=30), jobs=1)
    return root


@pytest.fixture
def costed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    module = load_costed(tmp_path, monkeypatch)
    slower = module.STATE.setdefault("slower", {})

    def cost(mode: str, batch: int) -> int:
        factor = slower.get(mode, 1.0) if module.STATE.get("data") else 1.0
        return int(factor * (0.5 * MS + PER_IMAGE_MS[mode] * MS * batch))

    module.STATE["cost"] = cost
    return module


def inline(costed: Any, env: dict[str, Any]) -> Execution:
    """Inline on the cost clock; each repeat costs a process start and says whether it reads real data."""
    def progress(event: Any) -> None:
        if event.kind == "repeat":
            costed.STATE["ns"] += PROCESS_NS
            costed.STATE["data"] = event.cell.data is not None
            started = costed.STATE.setdefault("started", [])
            started.append((event.cell.mode, event.cell.data.label() if event.cell.data else None))

    return Execution(isolation="inline", clock=costed.CostClock(), env=env, progress=progress)


def search(costed: Any, env: dict[str, Any], dataset: Path, **kwargs: Any) -> Any:
    options = {"modes": list(PER_IMAGE_MS), "batch_sizes": [4], "compile_variants": False, "options": OPTIONS,
               "budget": "1h", "data": DataSettings(str(dataset)), "workers": 0, **kwargs}
    return tune_with(f"{costed.__name__}:costed", "train", "cpu", execution=inline(costed, env),
                     budget_clock=lambda: costed.STATE["ns"] / 1e9, **options)


def invoke_group(*args: str) -> Any:
    from clsbench.cli.sweep_cmds import register

    group = click.Group()
    register(group)
    return CliRunner().invoke(group, list(args))


# ------------------------------------------------------------------------------------------ the settings (pure)


def test_each_pipeline_proposes_its_most_tuned_setting() -> None:
    base = DataSettings("/d")
    assert [s.label() for s in pipeline_settings(base, "cuda", 8)] == [
        "folder cpu w8 pin persistent uint8", "folder gpu w0", "folder dali w8"]
    assert [s.label() for s in pipeline_settings(base, "cpu", 2, ["cpu"])] == ["folder cpu w2 persistent uint8"]
    assert [s.label() for s in pipeline_settings(base, "cpu", 0, ["gpu", "cpu"])] == ["folder cpu w0",
                                                                                       "folder gpu w0"]
    # The worker count is diagnose's largest: the CPU count.
    assert pipeline_workers(16) == 16 and pipeline_workers(2) == 2 and pipeline_workers(None) == 1
    # On a CPU the gpu and dali pipelines say why they cannot run, without a worker.
    gpu, dali = pipeline_settings(base, "cpu", 2, ["gpu", "dali"])
    assert "needs CUDA" in (pipeline_skip_reason(gpu, "cpu") or "")
    assert "needs CUDA" in (pipeline_skip_reason(dali, "cpu") or "")
    assert pipeline_skip_reason(pipeline_settings(base, "cpu", 2, ["cpu"])[0], "cpu") is None


# ---------------------------------------------------------------------------------------------- the search


def test_the_winner_is_a_real_data_cell_judged_against_its_ceiling(costed: Any, env: dict[str, Any],
                                                                   dataset: Path, tmp_path: Path) -> None:
    # fp32+cl is the fastest on synthetic data, but the pipeline slows its steps 3x; amp-bf16 keeps its pace.
    costed.STATE["slower"]["fp32+cl"] = 3.0
    outcome = search(costed, env, dataset, output=tmp_path / "t.json")
    facts = outcome.result.settings["tune"]
    assert [s["stage"] for s in facts["plan"]].count("pipeline") == 1
    (stage,) = [s for s in facts["plan"] if s["stage"] == "pipeline"]
    assert stage["candidates"] == PIPELINE_LEADERS and stage["planned"] is True
    # Priced up front with the real-data prior (no timed minimum here: the window costs nothing on this clock); then
    # the cost model learns what a real-data cell cost.
    assert stage["estimate_s"] == pytest.approx(PIPELINE_LEADERS * (PROCESS_S["cpu"] + PIPELINE_START_S["cpu"]))
    assert facts["cost_model"]["observed_overhead_s"]["pipeline"]
    # The kind measured the two synthetic leaders under the cpu setting; gpu and dali were pruned with reasons.
    (phase,) = [p for p in facts["phases"] if p["phase"] == "pipeline"]
    assert phase["candidates"] == ["fp32+cl bs4 [folder cpu w0]", "amp-bf16 bs4 [folder cpu w0]"]
    pruned = {p["mode"]: p["reason"] for p in facts["pruned"] if p["stage"] == "pipeline"}
    assert set(pruned) == {"folder gpu w0", "folder dali w4"}
    assert all("needs CUDA" in reason for reason in pruned.values())
    assert not any(label and ("gpu" in label or "dali" in label) for _, label in costed.STATE["started"])

    winner = outcome.winner
    assert (winner["mode"], winner["batch_size"], winner["data"]) == ("amp-bf16", 4, "folder cpu w0")
    assert winner["confirmed"] is True and winner["repeats"] == 3
    assert winner["ratio_to_synthetic"] == pytest.approx(1.0) and winner["keeps_fed"] is True
    slowed = next(f for f in outcome.candidates if f["mode"] == "fp32+cl" and f["data"])
    assert slowed["ratio_to_synthetic"] == pytest.approx(1 / 3)
    assert slowed["keeps_fed"] is False
    # The synthetic cells stay as ceilings: ranked after the real-data cells, never the winner.
    ceilings = [f for f in outcome.candidates if f["data"] is None]
    assert ceilings and all(f["verdict"] in ("ceiling", "failed", "skipped") for f in ceilings)
    assert [f["data"] is None for f in outcome.candidates] == sorted(f["data"] is None for f in outcome.candidates)

    text = render_tune(outcome.analysis)
    assert "data" in text.splitlines()[2] and "vs synth" in text.splitlines()[2]
    assert "winner: amp-bf16 at batch 4 on folder cpu w0" in text
    assert "input: folder cpu w0: 100.0% of the synthetic ceiling of amp-bf16 at batch 4" in text
    assert ": kept fed (kept fed, as in diagnose: at least 90% of it" in text
    assert "pruned (pipeline): folder gpu w0 -> not tried fp32+cl bs4, amp-bf16 bs4: GPU decode needs CUDA" in text
    assert f"--data {dataset} --data-source folder --pipeline cpu --num-workers 0" in outcome.command
    # The file alone gives the same analysis.
    again = analyze_tune(result_io.load(tmp_path / "t.json"))
    assert again["winner"]["data"] == "folder cpu w0" and again["command"] == outcome.command


def test_without_a_real_data_result_there_is_no_winner(costed: Any, env: dict[str, Any], dataset: Path) -> None:
    with pytest.raises(InvalidInputError, match="no real-data setting ran") as caught:
        search(costed, env, dataset, pipelines=["gpu"])
    assert "folder gpu w0: GPU decode needs CUDA" in caught.value.message
    assert "clsbench diagnose" in (caught.value.hint or "")
    # With no compute candidate within the limits there is nothing to feed: the usual message names the closest.
    with pytest.raises(InvalidInputError, match="no configuration meets peak memory") as caught:
        search(costed, env, dataset, max_memory_gb=0.001)
    assert "--max-memory-gb to at least" in (caught.value.hint or "")


def test_data_is_refused_for_inference_and_pipeline_options_tune_chooses(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="--data searches the input pipeline of training"):
        tune_with(TINY, "infer-throughput", "cpu", data=DataSettings(str(dataset)), output=tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    refused = invoke_group("tune", "--model", TINY, "--device", "cpu", "--data", str(dataset), "-o",
                           str(tmp_path / "y.json"))
    assert refused.exit_code == 2
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --data searches the input pipeline of training, not of infer-throughput"]
    assert "Traceback" not in refused.output
    for args, words in ((["--pin-memory"], "tune chooses --pin-memory itself"),
                        (["--normalize-on", "device"], "tune chooses --normalize-on itself")):
        bad = invoke_group("tune", "--model", TINY, "--workload", "train", "--data", str(dataset), *args)
        assert bad.exit_code == 2 and words in bad.stderr
    alone = invoke_group("tune", "--model", TINY, "--workload", "train", "--num-workers", "2")
    assert alone.exit_code == 2 and "--num-workers needs --data DIR" in alone.stderr
    unknown = invoke_group("tune", "--model", TINY, "--workload", "train", "--data", str(dataset), "--pipeline",
                           "cpuu")
    assert unknown.exit_code == 2 and "cpuu" in unknown.stderr


def test_cli_tune_with_data(dataset: Path, tmp_path: Path) -> None:
    path = tmp_path / "cli.json"
    done = invoke_group("tune", "--model", TINY, "--workload", "train", "--device", "cpu", "--mode", "fp32",
                        "--batch-size", "4", "--no-compile", "--warmup", "1", "--iterations", "2", "--min-time", "0",
                        "--repeats", "2", "--data", str(dataset), "--pipeline", "cpu", "--num-workers", "0",
                        "--isolation", "inline", "--clock", "fake:1ms", "-o", str(path))
    assert done.exit_code == 0, done.output
    assert "try pipeline: up to 2 candidate(s)" in done.stderr
    assert "winner: fp32 at batch 4 on folder cpu w0" in done.stdout and "input: folder cpu w0: " in done.stdout
    reproduce = next(line for line in done.stdout.splitlines() if line.startswith("reproduce: "))
    assert f"--data {dataset} --data-source folder --pipeline cpu --num-workers 0" in reproduce
    stored = result_io.load(path)
    assert stored.settings["tune"]["data"]["pipelines"] == ["cpu"]
    assert stored.settings["overlap_prepare"] is False  # a pipeline measured needs every CPU core


def test_a_stopped_data_search_resumes_with_the_settings_of_its_file(costed: Any, env: dict[str, Any],
                                                                     dataset: Path, tmp_path: Path) -> None:
    path = tmp_path / "tune.json"
    state = {"armed": True}
    plain = costed.STATE["cost"]

    def cost(mode: str, batch: int) -> int:
        if costed.STATE.get("data") and mode == "amp-bf16" and state["armed"]:
            state["armed"] = False
            raise KeyboardInterrupt
        return plain(mode, batch)

    costed.STATE["cost"] = cost
    with pytest.raises(TuneInterrupted) as caught:
        search(costed, env, dataset, pipelines=["cpu", "gpu"], output=path)
    assert f"clsbench tune --resume {path}" in caught.value.message
    stopped = result_io.load(path).settings["tune"]
    assert [s["pipeline"] for s in stopped["data"]["settings"]] == ["cpu", "gpu"]
    done = {(t["mode"], t.get("data"), t["rung"]) for t in stopped["trials"] if t.get("actual_s") is not None}
    assert ("fp32+cl", "folder cpu w0", "longer") in done and ("amp-bf16", "folder cpu w0", "longer") not in done

    # The data settings come from the file: the command line may not name them again.
    refused = invoke_group("tune", "--resume", str(path), "--data", str(dataset), "--num-workers", "2")
    assert refused.exit_code == 2 and "it takes no --data, --num-workers" in refused.stderr

    costed.STATE["started"] = []
    outcome = resume_tune(path, execution=inline(costed, env), budget_clock=lambda: costed.STATE["ns"] / 1e9)
    assert costed.STATE["started"][0] == ("amp-bf16", "folder cpu w0")  # what finished is not measured again
    facts = result_io.load(path).settings["tune"]
    finished = [(t["mode"], t.get("data"), t["rung"]) for t in facts["trials"] if t.get("actual_s") is not None]
    assert len(finished) == len(set(finished)) and done <= set(finished)
    assert ("amp-bf16", "folder cpu w0", "longer") in finished
    assert (outcome.winner["mode"], outcome.winner["data"]) == ("fp32+cl", "folder cpu w0")
    assert outcome.winner["confirmed"] is True and outcome.winner["ratio_to_synthetic"] == pytest.approx(1.0)
    assert "input: folder cpu w0: 100.0% of the synthetic ceiling of fp32+cl at batch 4" in \
        render_tune(outcome.analysis)


def test_resume_refuses_a_dataset_that_changed(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    from clsbench.errors import ResultFileError

    root = tmp_path / "ds"
    make_dataset(root, MakeSpec(images=8, classes=2, seed=1, width=32, height=24), jobs=1)

    def stop(mode: str, batch: int) -> int:
        if costed.STATE.get("data"):
            raise KeyboardInterrupt
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = stop
    with pytest.raises(TuneInterrupted):
        search(costed, env, root, modes=["fp32"], output=tmp_path / "t.json")
    next(root.glob("*/*.jpg")).unlink()
    with pytest.raises(ResultFileError, match="files changed"):
        resume_tune(tmp_path / "t.json", execution=Execution(env=env))


# ------------------------------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_the_gpu_pipeline_is_a_candidate_on_a_gpu(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    make_dataset(root, MakeSpec(images=64, classes=4, seed=3, width=96, height=72), jobs=2)
    outcome = tune_with(TINY, "train", "cuda", modes=["fp32", "amp-bf16"], batch_sizes=[16], compile_variants=False,
                        options=MeasureOptions(repeats=2, warmup=2, iterations=5, min_time=0.0), budget="5m",
                        data=DataSettings(str(root)), pipelines=["cpu", "gpu"], workers=2, output=tmp_path / "g.json")
    measured = {f["data"]: f for f in outcome.candidates if f["data"]}
    assert "folder gpu w0" in measured and measured["folder gpu w0"]["status"] == "ok"
    assert "folder cpu w2 pin persistent uint8" in measured
    assert outcome.winner["data"] is not None and outcome.winner["ratio_to_synthetic"] is not None


# ------------------------------------------------------------------------------------------- the leaders (pure)


class RankedSearch:
    """What :func:`pipeline_leaders` reads of a search: its ranked measurements and the guard's verdicts."""

    def __init__(self, modes: list[str], rejected: tuple[str, ...] = ()) -> None:
        from clsbench.results.schema import Measurement

        self.measurements = [Measurement(model=TINY, workload="train", mode=mode, batch_size=256, device="cuda",
                                         status="ok") for mode in modes]
        self.rejected = rejected

    def ranked(self) -> list[Any]:
        return self.measurements

    def eligible(self, m: Any) -> bool:
        return m.mode not in self.rejected


def test_a_captured_and_a_launched_step_are_among_the_leaders_measured_on_real_data() -> None:
    from clsbench.modes import parse_mode
    from clsbench.procedures.tune.pipeline_kind import pipeline_leaders

    assert parse_mode("amp-bf16+cl+compile+cudagraph").captured and not parse_mode("amp-bf16+cl+compile").captured

    def modes(search: RankedSearch) -> list[str]:
        return [m.mode for m in pipeline_leaders(search)]

    # The two best launch their steps: the second place goes to the best captured one, however far down it ranks.
    launched = ["amp-bf16+cl+compile", "amp-bf16+cl+compile+foreach", "amp-bf16+cl", "amp-bf16+cl+compile+cudagraph",
                "amp-bf16+cudagraph"]
    assert modes(RankedSearch(launched)) == ["amp-bf16+cl+compile", "amp-bf16+cl+compile+cudagraph"]
    # One the guard rejected is passed over.
    assert modes(RankedSearch(launched, rejected=("amp-bf16+cl+compile+cudagraph",))) == [
        "amp-bf16+cl+compile", "amp-bf16+cudagraph"]
    # One of each kind already: the order stands.
    assert modes(RankedSearch(["amp-bf16+cudagraph", "amp-bf16+cl+compile", "amp-bf16+cl+compile+cudagraph"])) == [
        "amp-bf16+cudagraph", "amp-bf16+cl+compile"]
    # The two best both capture: the second place goes to the best launched one (over the memory source on the H200
    # the launched step was fed better, 5,383 img/s against 4,519), and a rejected one is passed over.
    captured = ["amp-bf16+cl+compile+cudagraph", "amp-bf16+cl+cudagraph", "amp-bf16+cl+compile+fused",
                "amp-bf16+cl+compile"]
    assert modes(RankedSearch(captured)) == ["amp-bf16+cl+compile+cudagraph", "amp-bf16+cl+compile+fused"]
    assert modes(RankedSearch(captured, rejected=("amp-bf16+cl+compile+fused",))) == [
        "amp-bf16+cl+compile+cudagraph", "amp-bf16+cl+compile"]
    # Only captured ones measured: the two best. None captured at all (a CPU): the two best.
    assert modes(RankedSearch(captured[:2])) == captured[:2]
    assert modes(RankedSearch(["fp32+cl", "amp-bf16", "fp32"])) == ["fp32+cl", "amp-bf16"]
    assert modes(RankedSearch(["fp32+cl"])) == ["fp32+cl"]
