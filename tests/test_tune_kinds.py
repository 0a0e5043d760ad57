"""The execution-mode candidates of ``clsbench tune`` beyond compile: the ``freeze`` kind (Inductor freezing, for
inference) and the ``train-step`` kind (the optimizer implementation, the compiled step, the captured step), their
place in the plan, the pruning of what a mode refuses here, and the correctness guard of train candidates, which
runs the step as the worker runs it (training parity).

The searches run inline on the cost clock of test_sweep.py. Where a test is about what a kind proposes, the search's
``measure`` is watched: eager cells are measured, the candidates of the other kinds are recorded and not measured
(no cold compile), so the test sees exactly the cells each kind asked for. A short real tune at the end measures
everything, compiles included, on the tiny CPU model.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import RunPlan
from clsbench.modes import MODIFIERS, Modifier
from clsbench.modes.optimizer import OptimizerImplementation
from clsbench.procedures.tune import TRAIN_LOSS_RTOL, judge, output_errors, resume_tune
from clsbench.procedures.tune.kinds import PRIORITY, TUNE_KINDS
from clsbench.procedures.tune.mode_kinds import freeze_suffixes
from clsbench.procedures.tune.search import Search
from clsbench.results import io as result_io
from clsbench.workloads import step as step_module
from test_tune import rerun_printed
from test_tune_budget import tune_with

TINY = "clsbench_testmodels:tiny"
MS = 1_000_000
SHORT = MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0)
#: Per-image cost in ms by precision and layout (the costed model cannot tell modifiers apart): amp-bf16 is best.
PER_IMAGE_MS = {"fp32": 4.0, "fp32+cl": 3.0, "amp-bf16": 1.0, "amp-bf16+cl": 2.0}
#: Inductor builds CPU kernels with a C++ compiler; without one a compiled mode cannot run on this machine.
NO_CXX = not any(shutil.which(name) for name in ("g++", "c++", "clang++"))


def run_tune(costed: Any, env: dict[str, Any], **kwargs: Any) -> Any:
    options = {"workload": "train", "modes": ["fp32", "amp-bf16"], "batch_sizes": [4], "compile_variants": True,
               "max_autotune": False, "options": SHORT, "backends": (), "budget": "1h", **kwargs}
    workload = options.pop("workload")
    return tune_with(f"{costed.__name__}:costed", workload, "cpu",
                     execution=Execution(isolation="inline", clock=costed.CostClock(), env=env), **options)


def watch(monkeypatch: pytest.MonkeyPatch, measured: tuple[str, ...] = ("eager",),
          measure_if: Any = None) -> dict[str, list[tuple[str, int]]]:
    """Record the cells each kind proposes; measure only the eager ones (and those ``measure_if(kind, cell)``)."""
    proposed: dict[str, list[tuple[str, int]]] = {}
    original = Search.measure

    def measure(self: Search, cells: Any, kind: str, rung: str, stage: str) -> Any:
        if kind not in measured:
            proposed.setdefault(kind, []).extend((c.mode, c.batch_size) for c in cells)
        chosen = [c for c in cells if kind in measured or (measure_if is not None and measure_if(kind, c))]
        return original(self, chosen, kind, rung, stage)

    monkeypatch.setattr(Search, "measure", measure)
    return proposed


def pruned(outcome: Any, stage: str) -> dict[str, str]:
    return {v: p["reason"] for p in outcome.result.settings["tune"]["pruned"] if p["stage"] == stage
            for v in p["variants"]}


# ------------------------------------------------------------------------------------------- what they propose


def test_train_step_kind_proposes_the_step_candidates_of_the_best_family(costed: Any, env: dict[str, Any],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    proposed = watch(monkeypatch)
    outcome = run_tune(costed, env)
    facts = outcome.result.settings["tune"]
    assert facts["kinds"] == ["eager", "compile", "train-step"]  # no freeze for train; max-autotune off
    assert (facts["rules"]["max_train_step_families"], facts["rules"]["max_freeze_families"]) == (1, 1)
    assert [p["phase"] for p in facts["phases"]] == ["eager", "longer", "compile", "train-step"]
    # amp-bf16 is the best family; fused is the implementation (this torch has CPU fused kernels for SGD).
    # Most promising first (a budget may hold only the first few): the captured steps lead where they can run.
    assert proposed["train-step"] == [("amp-bf16+compile+fused", 4), ("amp-bf16+compile+fused+compiled-step", 4),
                                      ("amp-bf16+fused", 4)]
    # The captured step is for a GPU: pruned with the mode's own reason, no worker started.
    refused = pruned(outcome, "train-step")
    for captured in ("amp-bf16+cudagraph", "amp-bf16+compile+cudagraph"):
        assert refused.pop(captured) == "CUDA graphs need a CUDA device; this device is cpu"
    # The other family lost by more than the margin: none of its step candidates is tried.
    assert set(refused) == {"fp32+fused", "fp32+compile+fused", "fp32+compile+fused+compiled-step",
                            "fp32+cudagraph", "fp32+compile+cudagraph"}
    assert all(reason.startswith("its best result is 27% of the best") for reason in refused.values())
    stage = next(s for s in facts["plan"] if s["stage"] == "train-step")
    assert (stage["kind"], stage["rung"], stage["candidates"], stage["priority"]) == \
        ("train-step", "longer", 3, PRIORITY["train-step"])
    assert facts["cost_model"]["build_s"]["train-step"] == TUNE_KINDS.get("train-step").build_s["cpu"]


def test_freeze_kind_follows_compile_and_precedes_max_autotune(costed: Any, env: dict[str, Any],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    proposed = watch(monkeypatch)
    outcome = run_tune(costed, env, workload="infer-throughput", max_autotune=True)
    facts = outcome.result.settings["tune"]
    assert facts["kinds"] == ["eager", "compile", "freeze", "max-autotune"]
    assert [p["phase"] for p in facts["phases"]] == ["eager", "longer", "compile", "freeze", "max-autotune"]
    assert proposed["freeze"] == [("amp-bf16+compile+freeze", 4)]  # the best family only, at its anchor batch
    assert PRIORITY["compile"] < PRIORITY["freeze"] < PRIORITY["max-autotune"]
    stage = next(s for s in facts["plan"] if s["stage"] == "freeze")
    assert (stage["rung"], stage["candidates"]) == ("longer", 1)


def test_freeze_variants_follow_the_compile_variants() -> None:
    every = ("+compile", "+cudagraph", "+compile+cudagraph")
    latency_gpu = SimpleNamespace(suffixes=every, workload="infer-latency", device="cuda:0")
    assert freeze_suffixes(latency_gpu) == ("+compile+freeze", "+compile+freeze+cudagraph")
    assert freeze_suffixes(SimpleNamespace(suffixes=every, workload="infer-throughput", device="cuda")) == \
        ("+compile+freeze",)
    assert freeze_suffixes(SimpleNamespace(suffixes=every, workload="infer-latency", device="cpu")) == \
        ("+compile+freeze",)
    assert freeze_suffixes(SimpleNamespace(suffixes=("+cudagraph",), workload="infer-latency", device="cuda")) == ()


def backend_search(workload: str, device: str, backends: tuple[str, ...]) -> SimpleNamespace:
    """What the backend kind's plan reads of a search, before anything was measured."""
    from clsbench.core.plan import Cell

    return SimpleNamespace(
        workload=workload, device=device, backends=backends, base_modes=["fp32", "amp-bf16+cl"], sizes=[1],
        family_count=lambda limit: limit, run=SimpleNamespace(result=SimpleNamespace(environment={})),
        cell=lambda mode, batch, backend="eager": Cell("resnet50", workload, mode, batch, device, None,
                                                       backend=backend))


def test_the_backend_plan_prices_each_backend_and_a_graph_twin_warm(monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.engine import runner
    from clsbench.procedures.tune.backend_kind import backend_layouts
    from clsbench.procedures.tune.kinds import cost_priors

    # As on the H200: TensorRT is not installed (and ONNX Runtime has no GPU provider).
    monkeypatch.setattr(runner, "static_backend_skip_reason",
                        lambda cell, environment: "not installed" if cell.backend == "tensorrt" else None)
    kind = TUNE_KINDS.get("backend")
    latency = backend_search("infer-latency", "cuda", ("export", "torchscript", "tensorrt"))
    (stage,) = kind.stages(latency)
    assert stage.priority == PRIORITY["captured-backend"] < PRIORITY["compile"]  # first after the confirmation
    assert backend_layouts(latency) == ("+cl+cudagraph", "+cudagraph", "+cl", "")
    # Mode by mode over the backends that can run here: the replays first (each a build), then the launched runs,
    # whose artifact the replay of the same layout built (warm); TensorRT costs the plan nothing.
    assert stage.costs == (("backend:export", False), ("backend:torchscript", False),
                           ("backend:export", False), ("backend:torchscript", False),
                           ("backend:export", True), ("backend:torchscript", True),
                           ("backend:export", True), ("backend:torchscript", True))
    assert stage.count == 8
    priors = cost_priors("cuda")
    assert priors["backend:torchscript"] < priors["backend:export"]  # 1-5 s against 54-72 s on the H200
    throughput = backend_search("infer-throughput", "cuda", ("export", "torchscript", "tensorrt"))
    (stage,) = kind.stages(throughput)
    assert stage.priority == PRIORITY["backend"]
    assert stage.costs == (("backend:export", False), ("backend:torchscript", False),
                           ("backend:export", False), ("backend:torchscript", False))
    latency_cpu = backend_search("infer-latency", "cpu", ("export",))
    assert backend_layouts(latency_cpu) == ("+cl", "") and kind.stages(latency_cpu)[0].priority == PRIORITY["backend"]


def test_export_and_export_frozen_are_priced_as_one_build() -> None:
    from clsbench.core.plan import Cell
    from clsbench.procedures.tune.budget import CostModel, Window
    from clsbench.procedures.tune.kinds import cost_key, cost_priors

    # On an H100 a tune observed export's build at 107 s of a 125 s candidate, then priced export-frozen (the same
    # torch.export + AOTInductor build, with freezing on) at its 70 s prior and the process start: 78 s.
    def cell(backend: str) -> Cell:
        return Cell("resnet50", "infer-throughput", "fp16+cl", 512, "cuda", None, backend=backend)

    assert cost_key("backend", cell("export")) == cost_key("backend", cell("export-frozen")) == "backend:export"
    assert cost_key("backend", cell("torchscript")) == "backend:torchscript"
    priors = cost_priors("cuda")
    assert priors["backend:export"] == 70.0 and "backend:export-frozen" not in priors
    window = Window(warmup=1, warmup_seconds=0.0, min_iterations=10, min_seconds=1.0)
    model = CostModel("cuda", priors)
    model.observe("eager", 5.0 + 1.0, window, 1, None)
    assert model.overhead_s(cost_key("backend", cell("export-frozen"))) == pytest.approx(5.0 + 70.0)  # the prior
    model.observe(cost_key("backend", cell("export")), 125.0 + 1.0, window, 1, None)
    assert model.overhead_s(cost_key("backend", cell("export-frozen"))) == pytest.approx(125.0)  # what export cost


@pytest.mark.parametrize("workload", ["train", "infer-throughput"])
def test_the_new_kinds_are_skipped_without_compile(costed: Any, env: dict[str, Any], workload: str) -> None:
    outcome = run_tune(costed, env, workload=workload, compile_variants=False)
    facts = outcome.result.settings["tune"]
    assert facts["kinds"] == ["eager"]
    assert not any(s["kind"] in ("freeze", "train-step") for s in facts["plan"])
    assert {t["kind"] for t in facts["trials"]} == {"eager"}


def test_freeze_is_skipped_when_the_variants_name_no_compile(costed: Any, env: dict[str, Any],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    proposed = watch(monkeypatch)
    outcome = run_tune(costed, env, workload="infer-throughput", variants=["cudagraph"])
    assert "freeze" not in outcome.result.settings["tune"]["kinds"] and "freeze" not in proposed


def test_foreach_replaces_fused_where_the_mode_refuses_it(costed: Any, env: dict[str, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse_fused(self: OptimizerImplementation, ctx: Any) -> str | None:
        return "fused kernels are not offered on this device (test)" if self.name == "fused" else None

    monkeypatch.setattr(OptimizerImplementation, "unsupported_reason", refuse_fused)
    proposed = watch(monkeypatch)
    outcome = run_tune(costed, env)
    assert proposed["train-step"] == [("amp-bf16+compile+foreach", 4), ("amp-bf16+compile+foreach+compiled-step", 4),
                                      ("amp-bf16+foreach", 4)]
    refused = pruned(outcome, "train-step")
    assert refused["amp-bf16+fused"] == "fused kernels are not offered on this device (test)"
    assert "CUDA device" in refused["amp-bf16+cudagraph"]


def test_a_family_naming_its_implementation_keeps_it(costed: Any, env: dict[str, Any],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The family's own implementation stays; its ``+compile`` is the compile kind's and is not proposed again."""
    proposed = watch(monkeypatch)
    outcome = run_tune(costed, env, modes=["fp32", "amp-bf16+foreach"])
    assert ("amp-bf16+compile+foreach", 4) in proposed["compile"]
    assert proposed["train-step"] == [("amp-bf16+compile+foreach+compiled-step", 4)]
    assert "CUDA device" in pruned(outcome, "train-step")["amp-bf16+cudagraph+foreach"]


def test_foreach_is_tried_after_torch_refused_fused(costed: Any, env: dict[str, Any], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """torch refuses fused only when the optimizer is built: the worker records the skip, the kind goes on with
    foreach in a second round."""
    class Refusing(torch.optim.SGD):
        def __init__(self, params: Any, **kwargs: Any) -> None:
            if kwargs.get("fused"):
                raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                                   "devices: ['cuda'] (test)")
            super().__init__(params, **kwargs)

    monkeypatch.setitem(step_module.OPTIMIZERS, "sgd", (Refusing, step_module.OPTIMIZERS["sgd"][1]))
    proposed = watch(monkeypatch, measure_if=lambda kind, cell: "compile" not in cell.mode)
    path = tmp_path / "tune.json"
    outcome = run_tune(costed, env, output=path)
    assert proposed["train-step"][-1] == ("amp-bf16+foreach", 4)
    rows = {(c["mode"], c["batch_size"]): c for c in outcome.candidates}
    assert rows[("amp-bf16+fused", 4)]["verdict"] == "skipped"
    assert "fused sgd is not available here" in rows[("amp-bf16+fused", 4)]["detail"]
    assert rows[("amp-bf16+foreach", 4)]["status"] == "ok"
    phases = [p for p in outcome.result.settings["tune"]["phases"] if p["phase"] == "train-step"]
    assert phases[-1]["candidates"] == ["amp-bf16+foreach bs4"]
    # A resumed search proposes the same rounds, and measures none of them again.
    first = list(proposed["train-step"])
    proposed["train-step"] = []
    started = len(outcome.result.settings["tune"]["trials"])
    again = resume_tune(path, execution=Execution(isolation="inline", clock=costed.CostClock(), env=env))
    assert proposed["train-step"] == first
    assert len(again.result.settings["tune"]["trials"]) == started


# ------------------------------------------------------------------------------------- the guard for train


@pytest.fixture
def lr_boost() -> Any:
    """A modifier registered here that trains with 1000 times the learning rate: the forward is untouched, the
    step is not."""

    class Boost:
        name = "lrboost"

        def unsupported_reason(self, ctx: Any) -> None:
            return None

        def configure(self, ctx: Any) -> dict[str, Any]:
            return {}

        def apply(self, prepared: Any, ctx: Any) -> Any:
            prepared.optimizer_options = {**prepared.optimizer_options, "lr": 10.0}
            return prepared

    MODIFIERS.register("lrboost", Modifier(order=9, build=lambda arg: Boost(), kinds=frozenset({"train"})))
    yield "lrboost"
    MODIFIERS.unregister("lrboost")


def test_the_guard_rejects_a_train_candidate_whose_step_changes_the_loss(costed: Any, env: dict[str, Any],
                                                                        lr_boost: str) -> None:
    outcome = run_tune(costed, env, modes=["fp32", "amp-bf16+lrboost"], compile_variants=False)
    rows = {c["mode"]: c for c in outcome.candidates}
    boosted = rows["amp-bf16+lrboost"]  # the fastest, so the first one checked
    assert boosted["verdict"] == "rejected"
    assert boosted["correctness"]["error"] <= boosted["correctness"]["tolerance"]  # the first forward agrees
    assert boosted["correctness"]["reason"].startswith("the loss after 3 steps differs from fp32 eager's by")
    assert outcome.winner["mode"] == "fp32"


def test_the_guard_runs_the_step_as_the_worker_does(lr_boost: str) -> None:
    """output_errors' train path is the training-parity check: the optimizer options of a mode count."""
    answers = output_errors(TINY, "train", "cpu", [("fp32+foreach", 4), ("fp32+lrboost", 4)])
    foreach = judge(answers[("fp32+foreach", 4)], "fp32+foreach")
    assert foreach["ok"] and foreach["steps"] == 3 and foreach["error_last"] < 1e-5
    boosted = judge(answers[("fp32+lrboost", 4)], "fp32+lrboost")
    assert not boosted["ok"] and boosted["error_last"] > TRAIN_LOSS_RTOL


def test_a_foreach_winner_passes_the_guard_and_its_command_runs(costed: Any, env: dict[str, Any],
                                                                tmp_path: Path) -> None:
    outcome = run_tune(costed, env, modes=["fp32", "amp-bf16+foreach"], compile_variants=False)
    assert outcome.winner["mode"] == "amp-bf16+foreach"
    check = outcome.winner["correctness"]
    assert check["ok"] and check["metric"] == "loss" and check["steps"] == 3
    words = shlex.split(outcome.command)
    assert words[:2] == ["clsbench", "run"] and "amp-bf16+foreach" in words
    path = tmp_path / "again.json"
    rerun_printed(words, path)
    again = result_io.load(path).measurements[0]
    assert (again.mode, again.status) == ("amp-bf16+foreach", "ok")
    assert RunPlan.from_dict(result_io.load(path).settings).cells[0].mode == "amp-bf16+foreach"


# ------------------------------------------------------------------------------------ a real tune, on a CPU


@pytest.mark.slow
@pytest.mark.skipif(NO_CXX, reason="no C++ compiler: Inductor cannot build CPU kernels here")
@pytest.mark.parametrize(("workload", "kind", "expected"), [
    ("train", "train-step", {"fp32+fused", "fp32+compile+fused", "fp32+compile+fused+compiled-step"}),
    ("infer-throughput", "freeze", {"fp32+compile+freeze"}),
])
def test_a_short_real_tune_tries_the_new_kinds_and_finishes(env: dict[str, Any], tmp_path: Path, workload: str,
                                                            kind: str, expected: set[str]) -> None:
    path = tmp_path / "tune.json"
    outcome = tune_with(TINY, workload, "cpu", modes=["fp32"], batch_sizes=[2], output=path, options=SHORT,
                        variants=["compile"], max_autotune=False, backends=(), budget="5m",
                        execution=Execution(isolation="inline", env=env))
    facts = result_io.load(path).settings["tune"]
    assert kind in facts["kinds"] and facts["search_s"] is not None
    tried = {t["mode"] for t in facts["trials"] if t["kind"] == kind}
    assert tried == expected
    rows = {c["mode"]: c for c in outcome.candidates}
    assert all(rows[mode]["status"] == "ok" for mode in expected), [rows[m] for m in expected]
    assert outcome.winner is not None and outcome.command.startswith("clsbench run ")
    if workload == "train":
        assert "fp32+cudagraph" in pruned(outcome, "train-step")


# ------------------------------------------------------------------------------------------------ on a GPU


@pytest.mark.gpu
def test_gpu_train_tune_proposes_fused_compiled_step_and_cudagraph(monkeypatch: pytest.MonkeyPatch) -> None:
    proposed = watch(monkeypatch)
    outcome = tune_with("resnet18", "train", "cuda", modes=["amp-bf16+cl"], batch_sizes=[32], options=SHORT,
                        max_autotune=False, budget="10m", check_outputs=False,
                        execution=Execution(isolation="inline"))
    assert proposed["train-step"] == [("amp-bf16+cl+fused", 32), ("amp-bf16+cl+compile+fused", 32),
                                      ("amp-bf16+cl+compile+fused+compiled-step", 32), ("amp-bf16+cl+cudagraph", 32),
                                      ("amp-bf16+cl+compile+cudagraph", 32)]
    assert not pruned(outcome, "train-step")
