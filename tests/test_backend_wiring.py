"""The inference-backend axis wired into clsbench: cells, plans and result files carry the backend (and leave it out
for eager, so older files and the golden files do not change); ``clsbench run --backend`` measures a backend
registered from this module end to end; a missing library, a failing build and a parity failure become records;
``--resume`` finishes a file with backend cells; the table, exports, HTML report, compare, the history index,
sweep and tune read the backend facts.

The backends here build in the real isolated build process (a ``spawn`` child per build: a few seconds each), so
each test builds as few artifacts as it can.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch
from click.testing import CliRunner

from clsbench import api
from clsbench.backends import BACKENDS, BackendRequest, Loaded
from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions, reproduce_command
from clsbench.core.plan import Cell, RunPlan
from clsbench.core.vocab import Reason, Status
from clsbench.errors import InvalidInputError
from clsbench.measure.clock import FakeClock
from clsbench.models import get_model_spec
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement

TINY = "clsbench_testmodels:tiny"
SHORT = MeasureOptions(repeats=2, warmup=1, iterations=3, min_time=0.0)


class Dummy:
    """A backend registered from this module: its artifact is the model's state; it runs the network built anew.

    Args:
        name: the registry name.
        scale: multiplies the logits (anything but 1 fails parity).
        refuse: the skip reason it gives for every request (as a backend whose library is missing).
        fail: its build raises.
        cost_module, speed: with the cost-clock model of test_sweep.py, each call costs ``speed`` times eager's.
    """

    builds_artifact = True
    build_imports = ()

    def __init__(self, name: str = "dummy", *, scale: float = 1.0, refuse: str | None = None, fail: bool = False,
                 cost_module: str | None = None, speed: float = 1.0, load_crash: bool = False,
                 build_s: dict[str, float] | None = None) -> None:
        self.name, self.scale, self.refuse, self.fail = name, scale, refuse, fail
        self.cost_module, self.speed, self.load_crash = cost_module, speed, load_crash
        if build_s is not None:  # the optional prior of tune's cost model; without it, DEFAULT_BUILD_S
            self.build_s = build_s

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return self.refuse

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__, "dummy": "1.0"}

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("first", "second")

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        if self.fail:
            raise RuntimeError("the dummy compiler broke\nand said more on a second line")
        torch.save(model.state_dict(), path / "state.pt")
        return {"method": "state dict"}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        if self.load_crash:  # as torch 2.11's aoti_load_package did on the H200 image
            os.kill(os.getpid(), signal.SIGSEGV)
        spec = get_model_spec(request.model)
        model = spec.build(seed=request.seed, num_classes=request.num_classes, input_size=request.input_size)
        model = model.to(device=request.device, dtype=request.dtype)
        model.load_state_dict(torch.load(path / "state.pt", weights_only=True), assign=True)
        model.eval()
        state = importlib.import_module(self.cost_module).STATE if self.cost_module else None
        scale, speed = self.scale, self.speed

        def forward(x: torch.Tensor) -> torch.Tensor:
            before = state["ns"] if state is not None else 0
            out = model(x)
            if state is not None:
                state["ns"] = before + int((state["ns"] - before) * speed)
            return out * scale if scale != 1.0 else out

        return Loaded(forward=forward, facts={"runner": "dummy"})


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Register backends for one test, with an artifact cache of its own."""
    monkeypatch.setenv("CLSBENCH_CACHE", str(tmp_path / "artifacts"))
    names: list[str] = []

    def add(backend: Dummy) -> Dummy:
        BACKENDS.register(backend.name, backend, replace=True)
        names.append(backend.name)
        return backend

    yield add
    for name in names:
        BACKENDS.unregister(name)


def inline(clock: Any = None, env: dict[str, Any] | None = None) -> Execution:
    return Execution(isolation="inline", clock=clock or FakeClock(), env=env or {"device": "cpu"}, probe=False)


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def run_args(out: Path, *extra: str) -> list[str]:
    return ["run", "--model", TINY, "--mode", "fp32", "--batch-size", "2", "--device", "cpu", "--repeats", "2",
            "--warmup", "1", "--iterations", "3", "--min-time", "0", "--isolation", "inline", "--clock", "fake:1ms",
            "--no-probe", "-q", "-o", str(out), *extra]


# ---------------------------------------------------------------------------------------- cells and measurements


def test_eager_cells_and_measurements_read_and_write_as_before() -> None:
    cell = Cell(TINY, "infer-latency", "fp32", 2, "cpu")
    assert cell.backend == "eager" and cell.key == (TINY, "infer-latency", "fp32", 2, "cpu")
    assert "backend" not in cell.to_dict() and cell.label() == f"{TINY} infer-latency fp32 bs2"
    m = Measurement(TINY, "infer-latency", "fp32", 2, "cpu", status="ok")
    assert "backend" not in m.to_dict() and m.key == cell.key
    assert "no_cache" not in RunPlan(cells=(cell,)).to_dict() and "cache_dir" not in RunPlan(cells=(cell,)).to_dict()


def test_a_backend_cell_round_trips_through_its_dict() -> None:
    cell = Cell(TINY, "infer-latency", "bf16+cl", 1, "cpu", backend="export")
    assert cell.key[-1] == "backend:export" and cell.key != dataclasses.replace(cell, backend="eager").key
    assert cell.label() == f"{TINY} infer-latency bf16+cl bs1 @export"
    assert cell.to_dict()["backend"] == "export" and Cell.from_dict(cell.to_dict()) == cell
    m = Measurement(TINY, "infer-latency", "bf16+cl", 1, "cpu", status="ok", backend="export")
    again = Measurement.from_dict(json.loads(json.dumps(m.to_dict())))
    assert again == m and again.key == cell.key and Cell.of(again) == cell
    plan = RunPlan(cells=(cell,), no_cache=True, cache_dir="/tmp/artifacts")
    assert RunPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_reproduce_line_names_the_backend() -> None:
    plan = RunPlan(cells=())
    assert "--backend" not in reproduce_command(plan, Cell(TINY, "infer-latency", "fp32", 1, "cpu"))
    line = reproduce_command(plan, Cell(TINY, "infer-latency", "fp32", 1, "cpu", backend="export"))
    assert "--device cpu --backend export" in line


# -------------------------------------------------------------------------------------------------- planning


def test_plan_crosses_backends_and_refuses_train() -> None:
    plan = api.plan_run(models=[TINY], workloads=["infer-latency", "infer-throughput"], modes=["fp32"],
                        batch_sizes=[2], device="cpu", backends=["eager", "torchscript"])
    assert [(c.workload, c.backend) for c in plan.cells] == [
        ("infer-latency", "eager"), ("infer-latency", "torchscript"), ("infer-throughput", "eager"),
        ("infer-throughput", "torchscript")]
    # Without --workload, a backend measures the inference workloads only.
    plan = api.plan_run(models=[TINY], modes=["fp32"], batch_sizes=[2], device="cpu", backends=["torchscript"])
    assert {c.workload for c in plan.cells} == {"infer-latency", "infer-throughput"}
    with pytest.raises(InvalidInputError, match="inference workloads only"):
        api.plan_run(models=[TINY], workloads=["train"], device="cpu", backends=["torchscript"])


@pytest.mark.parametrize(("extra", "words"), [
    (["--workload", "train", "--backend", "torchscript"], "--backend applies to inference workloads only"),
    (["--workload", "infer-latency", "--backend", "onnxruntim"], "unknown backend 'onnxruntim'"),
])
def test_cli_backend_errors_are_one_line(tmp_path: Path, extra: list[str], words: str) -> None:
    result = invoke(*run_args(tmp_path / "x.json", *extra))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and words in errors[0], result.stderr
    assert not (tmp_path / "x.json").exists()


# -------------------------------------------------------------------------------------------------- end to end


def test_run_backend_dummy_inline_end_to_end(register: Any, tmp_path: Path) -> None:
    """`clsbench run --backend dummy`: the axis takes a backend nothing else in clsbench knows of."""
    register(Dummy())
    out = tmp_path / "r.json"
    # Cell order: which cell builds the shared artifact and which finds it cached depends on the run order.
    result = invoke(*run_args(out, "--workload", "infer-latency,infer-throughput", "--backend", "eager,dummy",
                              "--order", "cell"))
    assert result.exit_code == 0, result.output
    stored = result_io.load(out)
    assert [(m.workload, m.backend, m.status) for m in stored.measurements] == [
        ("infer-latency", "eager", "ok"), ("infer-latency", "dummy", "ok"), ("infer-throughput", "eager", "ok"),
        ("infer-throughput", "dummy", "ok")]
    raw = json.loads(out.read_text())
    assert ["backend" in c for c in raw["settings"]["cells"]] == [False, True, False, True]
    assert ["backend" in m for m in raw["measurements"]] == [False, True, False, True]
    eager, dummy = stored.measurements[0], stored.measurements[1]
    assert "backend" not in eager.summary and all("backend" not in r for r in eager.repeats)
    first, second = dummy.repeats
    assert first["backend"]["built_now"] and not first["backend"]["cache_hit"]
    assert second["backend"]["cache_hit"] and not second["backend"]["built_now"]  # one build per cell
    assert "parity" in first and "parity" not in second and first["timings"]["backend_s"] > 0
    backend = dummy.summary["backend"]
    assert backend["name"] == "dummy" and backend["build"] == {"method": "state dict"}
    assert backend["attempts"][0]["smoke_load_s"] > 0  # the build process loaded and ran it once
    assert backend["parity"]["passed"] and backend["parity"]["max_abs_err_rel"] <= 1e-4
    assert backend["versions"]["dummy"] == "1.0" and backend["runtime"] == {"runner": "dummy"}
    assert backend["artifact_bytes"] > 0 and backend["cache_hit"] is False and backend["cache_hits"] == 1
    assert dummy.validity["parity_passed"] is True and dummy.validity["valid"]
    assert first["mode_notes"]["backend"] == "dummy"
    # The table: a backend column, the backend section, the cell labelled with its backend in warnings.
    text = result.stdout
    header = next(line for line in text.splitlines() if line.startswith("model "))
    assert header.split()[:5] == ["model", "workload", "mode", "backend", "batch"]
    assert "inference backends (build s" in text and "ok (<= 0.0001)" in text
    shown = invoke("show", str(out))
    assert shown.exit_code == 0 and shown.stdout == text
    assert "--backend dummy" in reproduce_command(RunPlan.from_dict(stored.settings), Cell.of(dummy))


def test_resume_finishes_a_file_with_backend_cells(register: Any, tmp_path: Path) -> None:
    register(Dummy())
    plan = api.plan_run(models=[TINY], workloads=["infer-latency"], modes=["fp32"], batch_sizes=[2], device="cpu",
                        options=SHORT, backends=["dummy", "eager"])
    full = api.run(plan, None, execution=inline(env=api.environment("cpu")))  # resume checks the environment
    # As an interrupted run leaves it: the plan stored, the dummy measurement missing.
    partial = tmp_path / "partial.json"
    result_io.save(dataclasses.replace(full, measurements=full.measurements[1:]), partial)
    result = invoke("run", "--resume", str(partial), "--isolation", "inline", "--clock", "fake:1ms", "-q")
    assert result.exit_code == 0, result.output
    resumed = result_io.load(partial)
    assert [m.key for m in resumed.measurements] == [c.key for c in plan.cells]  # plan order after a resume
    assert resumed.find(plan.cells[0].key).backend == "dummy"
    assert [Cell.from_dict(c) for c in resumed.settings["cells"]] == list(plan.cells)
    # A finished file resumes to itself: nothing is measured again.
    again = invoke("run", "--resume", str(partial), "--isolation", "inline", "--clock", "fake:1ms", "-q")
    assert again.exit_code == 0 and result_io.load(partial).measurements == resumed.measurements
    refused = invoke("run", "--resume", str(partial), "--backend", "dummy")
    assert refused.exit_code == 2 and "drop --backend" in refused.stderr


def test_missing_library_is_skipped_without_a_worker(register: Any, tmp_path: Path) -> None:
    register(Dummy("absent", refuse="libabsent is not installed: pip install libabsent"))
    plan = api.plan_run(models=[TINY], workloads=["infer-latency"], modes=["fp32"], batch_sizes=[2], device="cpu",
                        options=SHORT, backends=["absent"])
    result = api.run(plan, None, execution=dataclasses.replace(inline(), isolation="process"))
    (m,) = result.measurements
    assert (m.status, m.reason) == ("skipped", Reason.UNSUPPORTED_BACKEND)
    assert m.detail == "libabsent is not installed: pip install libabsent"
    assert len(m.repeats) == 1 and "pid" not in m.repeats[0]  # no worker process was started


def test_failing_build_and_parity_failure_are_records(register: Any, tmp_path: Path) -> None:
    register(Dummy("broken", fail=True))
    register(Dummy("wrong", scale=1.5))
    out = tmp_path / "r.json"
    result = invoke(*run_args(out, "--workload", "infer-throughput", "--backend", "broken,wrong"))
    assert result.exit_code == 4, result.output  # a measurement failed
    broken, wrong = result_io.load(out).measurements
    assert (broken.status, broken.reason) == ("failed", Reason.BUILD_ERROR)
    assert "RuntimeError: the dummy compiler broke" in broken.detail and "second line" not in broken.detail
    assert [a["ok"] for a in broken.repeats[0]["backend"]["attempts"]] == [False, False]  # each variant tried
    assert len(broken.repeats) == 1
    assert wrong.status == Status.OK and wrong.summary["backend"]["parity"]["passed"] is False
    assert wrong.validity["parity_passed"] is False and wrong.validity["valid"] is False
    assert "PARITY_FAILED" in result.stdout and "FAILED: build_error" in result.stdout
    lines = result.stdout.splitlines()
    assert any(line.startswith("PARITY") and "@wrong" in line and "differ from fp32 eager" in line for line in lines)


def test_an_artifact_that_crashes_its_loader_fails_in_the_build_process(register: Any, tmp_path: Path) -> None:
    """The build process loads and runs the new artifact once: a loader that dies takes that process, not the
    worker, and the record says load_error (another build variant is not tried: it would load the same way)."""
    from clsbench.backends import ArtifactCache, BackendNotRun, apply_backend
    from clsbench.modes import parse_mode

    register(Dummy("crashy", load_crash=True))
    req = BackendRequest(model=TINY, mode="fp32", batch_size=2, input_size=32, device="cpu", num_classes=10)
    mode = parse_mode("fp32")
    ctx = mode.context(torch.device("cpu"), "inference", bf16_supported=True, tf32_supported=False)
    prepared = mode.prepare(get_model_spec(TINY).build(seed=0, num_classes=10).eval(), ctx)
    with pytest.raises(BackendNotRun) as caught:
        apply_backend("crashy", prepared, req, cache=ArtifactCache(tmp_path / "cache"))
    record = caught.value.record()
    assert (record["status"], record["reason"]) == ("failed", Reason.LOAD_ERROR)
    assert "loading it killed the build process (SIGSEGV)" in record["detail"]
    assert [a["variant"] for a in record["backend"]["attempts"]] == ["first"]
    assert not [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]  # nothing committed


# ------------------------------------------------------------------------------------------------- readers


def _measurement(backend: str, throughput: float, *, parity: bool | None = None) -> Measurement:
    summary: dict[str, Any] = {"throughput_img_s": throughput, "throughput_img_s_by_repeat": [throughput] * 3,
                               "latency_ms": {"p50": 1.0, "p99": 2.0, "n": 30}, "repeats": 3, "spread_pct": 0.0}
    if backend != "eager":
        summary["backend"] = {"name": backend, "build_s": 12.5, "load_s": 0.25, "artifact_bytes": 51_200_000,
                              "cache_hit": True, "parity": None if parity is None else {
                                  "passed": parity, "max_abs_err_rel": 1e-3 if parity else 0.5,
                                  "top1_agreement_pct": 100.0, "tolerance": 5e-2, "detail": None if parity else
                                  "outputs differ from fp32 eager by 0.5 of the logits' scale"}}
    return Measurement("resnet50", "infer-throughput", "bf16+cl", 256, "cuda", status="ok", backend=backend,
                       summary=summary, validity={"stop_rule_met": True})


def _result(*measurements: Measurement) -> BenchmarkResult:
    return BenchmarkResult(environment={"gpu": {"name": "NVIDIA H200"}}, settings={}, measurements=measurements,
                           tool={"name": "clsbench", "version": "t"})


def test_exports_and_html_carry_the_backend() -> None:
    from clsbench.report import export
    from clsbench.report.html import render_report

    result = _result(_measurement("eager", 3000.0), _measurement("export", 3600.0, parity=True))
    rows = export.rows([result], ["r.json"])
    assert [r["backend"] for r in rows] == ["eager", "export"]
    assert rows[1]["backend_build_s"] == 12.5 and rows[1]["parity_passed"] is True
    assert rows[1]["artifact_bytes"] == 51_200_000 and rows[0]["parity_passed"] is None
    assert "backend" in export.to_markdown(rows).splitlines()[0]
    eager_only = export.rows([_result(_measurement("eager", 1.0))], ["r.json"])
    assert "backend" not in export.to_markdown(eager_only).splitlines()[0].split("|")[8]
    html = render_report([result], ["r.json"])
    assert "bf16+cl @export" in html and "<th>backend</th>" in html and "artifact MB" in html


def test_compare_matches_on_the_backend() -> None:
    from clsbench.analysis.compare import compare

    a = _result(_measurement("eager", 3000.0), _measurement("export", 3600.0, parity=True))
    b = _result(_measurement("eager", 3000.0), _measurement("export", 4000.0, parity=True))
    comparison = compare([a, b], ["a.json", "b.json"])
    rows = comparison.rows()
    assert [(r.backend, r.cells[1].value) for r in rows] == [("eager", 3000.0), ("export", 4000.0)]
    assert rows[1].label().endswith("@export") and rows[1].to_dict()["backend"] == "export"
    assert "backend" not in rows[0].to_dict()


def test_table_flags_a_parity_failure() -> None:
    from clsbench.report import table

    text = table.render(_result(_measurement("eager", 3000.0), _measurement("export", 9000.0, parity=False)))
    row = next(line for line in text.splitlines() if line.startswith("resnet50") and " export " in line)
    assert row.endswith("PARITY_FAILED")
    assert "PARITY    resnet50 infer-throughput bf16+cl bs256 @export: outputs differ" in text
    eager_only = table.render(_result(_measurement("eager", 3000.0)))
    assert "backend" not in eager_only and "inference backends" not in eager_only


def test_history_index_has_a_backend_column_and_migrates_format_1(tmp_path: Path) -> None:
    from clsbench.results import store

    old = tmp_path / "old.sqlite3"
    conn = sqlite3.connect(old)
    schema = store._SCHEMA.replace("    backend TEXT NOT NULL DEFAULT 'eager',\n", "")  # format 1
    conn.executescript(schema)
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO runs (run_id, path, created_utc, measurements, ok, failed, skipped, unstable, "
                 "imported_utc) VALUES ('abc', '/x.json', '2026-01-01', 1, 1, 0, 0, 0, '2026-01-01')")
    conn.execute("INSERT INTO measurements (run_id, ordinal, model, workload, mode, batch_size, device, status) "
                 "VALUES ('abc', 0, 'resnet50', 'train', 'fp32', 32, 'cuda', 'ok')")
    conn.commit()
    conn.close()
    (run,) = store.history(old)
    assert run["headline"]["backend"] == "eager"
    with sqlite3.connect(old) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(store.INDEX_SCHEMA_VERSION)
    path = tmp_path / "r.json"
    result_io.save(dataclasses.replace(_result(_measurement("export", 3600.0, parity=True)),
                                       created_utc="2026-12-01T00:00:00+00:00"), path)
    store.import_files([path], old)
    newest = store.history(old)[0]
    assert newest["headline"]["backend"] == "export"


def test_environment_records_the_backend_libraries() -> None:
    from clsbench.results.facts import KEY_FIELDS, environment_lines
    from clsbench.system.environment import collect_environment

    env = collect_environment("cpu")
    assert isinstance(env["backend_libraries"], dict)
    assert not any(field.startswith("backend_libraries") for field in KEY_FIELDS)  # not a resume key
    assert "Backend libraries" in dict(environment_lines(env))


# --------------------------------------------------------------------------------------------- sweep and tune


def test_sweep_carries_the_backend(register: Any) -> None:
    from clsbench.procedures.sweep import render_sweep, sweep

    register(Dummy())
    outcome = sweep(TINY, "infer-throughput", "fp32", "cpu", "1,2", options=SHORT, execution=inline(),
                    backend="dummy")
    assert [(m.batch_size, m.backend, m.status) for m in outcome.result.measurements] == [
        (1, "dummy", "ok"), (2, "dummy", "ok")]
    assert outcome.result.settings["sweep"]["backend"] == "dummy" and outcome.analysis["backend"] == "dummy"
    assert "fp32 @dummy on cpu" in render_sweep(outcome.analysis)


def test_tune_backend_phase_picks_a_correct_backend_and_rejects_a_wrong_one(register: Any, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.procedures.tune import TuneSettings, render_tune, tune
    from test_sweep import load_costed

    costed = load_costed(tmp_path, monkeypatch)
    costed.STATE["cost"] = lambda mode, batch: int(500_000 + {"fp32": 4.0, "fp32+cl": 1.0}[mode] * 1e6 * batch)
    register(Dummy("fast", cost_module=costed.__name__, speed=0.5))
    register(Dummy("wrong", cost_module=costed.__name__, speed=0.25, scale=1.5))
    env = api.environment("cpu")
    settings = TuneSettings(f"{costed.__name__}:costed", "infer-throughput", "cpu", modes=["fp32", "fp32+cl"],
                            batch_sizes=[2], options=MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0),
                            variants=["cudagraph"], max_autotune=False, backends=["fast", "wrong"], budget="1h")
    outcome = tune(settings, execution=Execution(isolation="inline", clock=costed.CostClock(), env=env))
    verdicts = {(c["mode"], c["backend"]): (c["verdict"], c["reason"]) for c in outcome.candidates}
    assert verdicts[("fp32+cl", "fast")] == ("winner", None)
    assert verdicts[("fp32+cl", "wrong")] == ("rejected", Reason.PARITY_FAILED)
    assert verdicts[("fp32", "wrong")] == ("rejected", Reason.PARITY_FAILED)
    assert "--mode fp32+cl --batch-size 2 --device cpu --backend fast --repeats 1" in outcome.command
    facts = outcome.result.settings["tune"]
    assert facts["rules"]["backends"] == ["fast", "wrong"]
    backend = next(p for p in facts["phases"] if p["phase"] == "backend")
    # Mode by mode, the most promising layout first (tune.backend_kind.backend_layouts), every backend of each.
    assert backend["candidates"] == ["fp32+cl @fast bs2", "fp32+cl @wrong bs2", "fp32 @fast bs2", "fp32 @wrong bs2"]
    text = render_tune(outcome.analysis)
    assert "winner: fp32+cl @fast at batch 2" in text and "rejected: fp32+cl @wrong batch 2: outputs differ" in text
    assert outcome.search_s > 0


def test_tune_prices_each_backend_apart_and_plans_only_those_that_run_here(register: Any, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.backends.base import DEFAULT_BUILD_S
    from clsbench.procedures.tune import TuneSettings, tune
    from test_sweep import load_costed

    costed = load_costed(tmp_path, monkeypatch)
    costed.STATE["cost"] = lambda mode, batch: int(500_000 + {"fp32": 4.0, "fp32+cl": 1.0}[mode] * 1e6 * batch)
    register(Dummy("dear", cost_module=costed.__name__, speed=0.5, build_s={"cpu": 50.0}))
    register(Dummy("cheap", cost_module=costed.__name__, speed=0.6))
    register(Dummy("absent", refuse="absent is not installed: pip install absent"))
    lines: list[str] = []
    settings = TuneSettings(f"{costed.__name__}:costed", "infer-throughput", "cpu", modes=["fp32", "fp32+cl"],
                            batch_sizes=[2], options=MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0),
                            variants=["cudagraph"], max_autotune=False, backends=["dear", "cheap", "absent"],
                            budget="1h")
    outcome = tune(settings, announce=lines.append,
                   execution=Execution(isolation="inline", clock=costed.CostClock(), env=api.environment("cpu")))
    facts = outcome.result.settings["tune"]
    stage = next(s for s in facts["plan"] if s["stage"] == "backend")
    # The backend that cannot run here is not in the plan; each other one is priced at its own build estimate.
    assert stage["costs"] == [["backend:dear", False], ["backend:cheap", False], ["backend:dear", False],
                              ["backend:cheap", False]]
    assert any(line.startswith("  try backend: up to 4 candidate(s)") for line in lines)
    priors = facts["cost_model"]["build_s"]
    assert (priors["backend:dear"], priors["backend:cheap"]) == (50.0, DEFAULT_BUILD_S["cpu"])
    observed = facts["cost_model"]["observed_overhead_s"]
    assert {"backend:dear", "backend:cheap"} <= set(observed)
    # Each first build says what it took (the isolated build process): a cached repeat of that backend skips it.
    built: dict[str, list[float]] = {}
    for m in outcome.result.measurements:
        if m.backend in ("dear", "cheap") and m.summary["backend"].get("built_now"):
            built.setdefault(m.backend, []).append(m.summary["backend"]["build_process_s"])
    assert {name: len(times) for name, times in built.items()} == {"dear": 2, "cheap": 2}  # fp32+cl and fp32
    assert sorted(observed["backend:dear:build"]) == sorted(built["dear"])
    assert sorted(observed["backend:cheap:build"]) == sorted(built["cheap"])
    assert any(p["mode"] == "absent" and "pip install absent" in p["reason"] for p in facts["pruned"])
    backend = next(p for p in facts["phases"] if p["phase"] == "backend")
    assert backend["candidates"] == ["fp32+cl @dear bs2", "fp32+cl @cheap bs2", "fp32 @dear bs2", "fp32 @cheap bs2"]
