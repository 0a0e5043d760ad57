"""The execution candidates of the H200 issue as ordinary modes: Inductor freezing (``+freeze``), the optimizer's
implementation (``+foreach``, ``+fused``), the optimizer step inside the compiled region (``+compiled-step``) and
the whole training step captured as a CUDA graph (``+cudagraph`` for train); and the training parity helper."""

from __future__ import annotations

import importlib
import shutil

import pytest
import torch
from click.testing import CliRunner

import clsbench
from clsbench.analysis.compare import compare
from clsbench.cli import main
from clsbench.core.plan import Cell, StopRule, TrainSettings
from clsbench.engine.worker import Job, execute
from clsbench.errors import InvalidInputError
from clsbench.measure.clock import FakeClock
from clsbench.modes import MODIFIERS, Modifier, Prepared, parse_mode
from clsbench.modes.base import ModeContext
from clsbench.modes.compile import compile_kwargs
from clsbench.procedures.tune import OUTPUT_RTOL, TRAIN_LOSS_RTOL, output_errors
from clsbench.procedures.tune.guard import compare_losses, train_parity
from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.workloads import step as step_module
from clsbench.workloads.step import build_optimizer, make_step

TINY = "clsbench_testmodels:tiny"
RULE = StopRule(warmup=1, min_iterations=3, min_seconds=0.0)
#: Inductor builds CPU kernels with a C++ compiler; without one a compiled mode cannot run on this machine.
NO_CXX = not any(shutil.which(name) for name in ("g++", "c++", "clang++"))
needs_cpu_inductor = pytest.mark.skipif(NO_CXX, reason="no C++ compiler: Inductor cannot build CPU kernels here")


def run_cell(workload: str, mode: str, batch: int = 4) -> dict:
    return execute(Job(cell=Cell(TINY, workload, mode, batch, "cpu"), repeat=1, stop=RULE,
                       clock=FakeClock((1_000_000,)), telemetry=False))


# ------------------------------------------------------------------------------------------------ the grammar


@pytest.mark.parametrize(("given", "canonical"), [
    ("fp32+fused+compile+cl", "fp32+cl+compile+fused"),
    ("bf16+freeze+cl+compile", "bf16+cl+compile+freeze"),
    ("bf16+cudagraph+freeze+compile:max-autotune-no-cudagraphs",
     "bf16+compile:max-autotune-no-cudagraphs+freeze+cudagraph"),
    ("amp-bf16+compiled-step+cudagraph+foreach+compile", "amp-bf16+compile+cudagraph+foreach+compiled-step"),
    ("fp32+cudagraph+compile+cl", "fp32+cl+compile+cudagraph"),  # the modes there were before keep their names
])
def test_canonical_spelling(given, canonical):
    assert parse_mode(given).name == canonical


@pytest.mark.parametrize(("mode", "words"), [
    ("bf16+freeze", r"needs \+compile"),
    ("amp-bf16+compiled-step", r"needs \+compile"),
    ("amp-bf16+fused+foreach", "both choose the optimizer implementation"),
    ("amp-bf16+fused:yes", "takes no argument"),
])
def test_bad_combinations_are_one_error(mode, words):
    with pytest.raises(InvalidInputError, match=words):
        parse_mode(mode)


def test_each_modifier_refuses_the_other_workload_kind():
    assert "not a way to train" in parse_mode("bf16+compile+freeze").refusal("train")
    assert parse_mode("bf16+compile+freeze").refusal("inference") is None
    for mode in ("amp-bf16+fused", "amp-bf16+foreach", "amp-bf16+compile+compiled-step"):
        assert "train workloads only" in parse_mode(mode).refusal("inference")
        assert parse_mode(mode).refusal("train") is None
    assert parse_mode("amp-bf16+cl+compile+cudagraph").refusal("train") is None


def test_freezing_is_one_compile_option_and_changes_nothing_global():
    assert compile_kwargs("max-autotune-no-cudagraphs", freezing=False) == {"mode": "max-autotune-no-cudagraphs"}
    frozen = compile_kwargs("max-autotune-no-cudagraphs", freezing=True)["options"]
    assert frozen["freezing"] is True and frozen["max_autotune"] is True and "triton.cudagraphs" not in frozen
    assert compile_kwargs("default", freezing=True) == {"options": {"freezing": True}}


def test_train_cudagraph_keeps_the_compile_mode_and_refuses_graphing_ones():
    compile_mod = importlib.import_module("clsbench.modes.compile")
    ctx = ModeContext(device=torch.device("cuda"), workload_kind="train", bf16_supported=True, tf32_supported=True,
                      modifiers=frozenset({"compile", "cudagraph"}))
    assert compile_mod.Compile().effective_mode(ctx) == "default"  # inference would take reduce-overhead
    assert "CUDA graphs of its own" in compile_mod.Compile("max-autotune").unsupported_reason(ctx)
    inference = ModeContext(device=torch.device("cuda"), workload_kind="inference", bf16_supported=True,
                            tf32_supported=True, modifiers=frozenset({"compile", "cudagraph"}))
    assert compile_mod.Compile().effective_mode(inference) == "reduce-overhead"


# ------------------------------------------------------------------------------------------------ planning


def test_planning_refuses_freezing_for_train_in_one_line():
    with pytest.raises(InvalidInputError, match="cannot run the train workload.*not a way to train"):
        clsbench.plan_run(models=[TINY], workloads=["train"], modes=["fp32+compile+freeze"], device="cpu")
    with pytest.raises(InvalidInputError, match="cannot run the infer-latency workload"):
        clsbench.plan_run(models=[TINY], workloads=["train", "infer-latency"], modes=["fp32+fused"], device="cpu")


def test_default_workloads_keep_each_mode_to_its_kind():
    plan = clsbench.plan_run(models=[TINY], modes=["fp32", "fp32+fused", "fp32+compile+freeze"], device="cpu")
    pairs = {(c.mode, c.workload) for c in plan.cells}
    assert {w for m, w in pairs if m == "fp32"} == {"infer-latency", "infer-throughput", "train"}
    assert {w for m, w in pairs if m == "fp32+fused"} == {"train"}
    assert {w for m, w in pairs if m == "fp32+compile+freeze"} == {"infer-latency", "infer-throughput"}


def test_cli_error_is_one_line():
    result = CliRunner().invoke(main, ["run", "--model", TINY, "--workload", "train", "--mode",
                                       "bf16+cl+compile+freeze", "--device", "cpu", "--isolation", "inline"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "not a way to train" in errors[0]


# ------------------------------------------------------------------------------------------------ the worker


@pytest.mark.parametrize("implementation", ["foreach", "fused"])
def test_train_with_an_optimizer_implementation(implementation):
    record = run_cell("train", f"fp32+{implementation}")
    assert record["status"] == "ok", record
    assert record["mode_notes"]["optimizer_implementation"] == implementation
    assert record["samples"]["loss_last"] > 0


def test_optimizer_gets_the_implementation_flag():
    model = torch.nn.Linear(4, 2)
    for options, flag in (({"fused": True}, "fused"), ({"foreach": True}, "foreach")):
        optimizer = build_optimizer(Prepared(model=model, forward=model, optimizer_options=options), TrainSettings())
        assert optimizer.defaults[flag] is True
    plain = build_optimizer(Prepared(model=model, forward=model), TrainSettings())
    assert plain.defaults["fused"] is None and plain.defaults["foreach"] is None


def test_capturable_only_where_the_optimizer_has_it():
    model = torch.nn.Linear(4, 2)
    adamw = build_optimizer(Prepared(model=model, forward=model, capture_step=True), TrainSettings("adamw"))
    assert adamw.defaults["capturable"] is True
    assert "capturable" not in build_optimizer(Prepared(model=model, forward=model, capture_step=True),
                                               TrainSettings()).defaults


def test_an_implementation_torch_refuses_is_skipped_with_its_words(monkeypatch):
    class Refusing(torch.optim.SGD):
        def __init__(self, params, **kwargs):
            if kwargs.get("fused"):
                raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                                   "devices: ['cuda']")
            super().__init__(params, **kwargs)

    monkeypatch.setitem(step_module.OPTIMIZERS, "sgd", (Refusing, step_module.OPTIMIZERS["sgd"][1]))
    record = run_cell("train", "fp32+fused")
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")
    assert "fused sgd is not available here" in record["detail"] and "supported devices" in record["detail"]
    assert run_cell("train", "fp32")["status"] == "ok"  # the default implementation is not refused


def test_train_cudagraph_is_skipped_on_a_cpu_with_the_reason():
    record = run_cell("train", "fp32+cudagraph")
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")
    assert "CUDA device" in record["detail"]


def test_a_gradient_scaler_cannot_be_captured():
    model = torch.nn.Linear(4, 2)
    prepared = Prepared(model=model, forward=model, capture_step=True)
    scaler = torch.amp.GradScaler("cpu")
    with pytest.raises(clsbench.errors.ClsbenchError, match="gradient scaler"):
        make_step(prepared, build_optimizer(prepared, TrainSettings()), scaler, torch.device("cpu"))


def test_a_worker_given_a_refused_pair_skips_it():
    """Cells made without planning (tune and sweep build their own) meet the same reason in the worker."""
    record = run_cell("train", "fp32+compile+freeze")
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")
    assert "not a way to train" in record["detail"]


@needs_cpu_inductor
def test_freezing_runs_and_is_noted():
    record = run_cell("infer-throughput", "fp32+compile+freeze")
    assert record["status"] == "ok", record
    assert record["mode_notes"]["inductor_freezing"] is True
    assert record["flags"]["inductor_freezing"] is True
    assert importlib.import_module("torch._inductor.config").freezing is False  # scoped to that compile


class ConvNorm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x)).relu()


@needs_cpu_inductor
@pytest.mark.parametrize(("mode", "frozen"), [("fp32+compile+freeze", True), ("fp32+compile", False)])
def test_freezing_takes_effect_the_frozen_forward_ignores_changed_weights(mode, frozen):
    """Freezing folds the weights into the compiled code: changing them afterwards changes nothing. Without the
    first-call scope (``freezing`` in torch.compile's options alone) the frozen forward followed the weights."""
    torch.manual_seed(0)
    parsed = parse_mode(mode)
    model = ConvNorm().eval()
    ctx = parsed.context(torch.device("cpu"), "inference", bf16_supported=False, tf32_supported=False)
    prepared = parsed.prepare(model, ctx)
    x = torch.randn(2, 3, 8, 8)
    with torch.inference_mode():
        before = prepared.forward(x)
        with torch.no_grad():
            model.conv.weight.mul_(2.0)
        after = prepared.forward(x)
    assert torch.equal(before, after) is frozen
    assert importlib.import_module("torch._inductor.config").freezing is False  # scoped to that first call


def test_first_calls_on_threads_leave_freezing_off_and_each_compiles_under_it():
    """Serving starts model instances on threads: overlapping first calls must not leave the global setting on."""
    import threading
    import time

    from clsbench.modes.freeze import FrozenOnFirstCall

    config = importlib.import_module("torch._inductor.config")
    seen: list[bool] = []

    def compiled(x: int) -> int:
        seen.append(config.freezing)
        time.sleep(0.05)  # a compile takes a while: the other thread's first call arrives meanwhile
        return x

    wrappers = [FrozenOnFirstCall(compiled) for _ in range(3)]
    threads = [threading.Thread(target=w, args=(1,)) for w in wrappers for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert config.freezing is False
    assert seen.count(True) == 3 and all(w.called for w in wrappers)  # one frozen first call per wrapper
    assert wrappers[0](2) == 2 and seen[-1] is False  # later calls run outside the patch


@needs_cpu_inductor
def test_frozen_outputs_match_eager_within_the_fp32_tolerance():
    check = output_errors(TINY, "infer-throughput", "cpu", [("fp32+compile+freeze", 4)])[("fp32+compile+freeze", 4)]
    assert check["detail"] is None, check
    assert check["error"] <= OUTPUT_RTOL["fp32"]


@pytest.mark.slow  # a cold compile of forward, backward and optimizer step: about 11 s on 2 cores
@needs_cpu_inductor
def test_compiled_step_trains():
    record = run_cell("train", "fp32+compile+compiled-step")
    assert record["status"] == "ok", record
    assert record["mode_notes"]["compiled_step"] is True
    assert record["timings"]["compile_s"] is not None


# ------------------------------------------------------------------------------------------------ parity


def test_optimizer_implementations_train_like_fp32_eager():
    cases = [("fp32+foreach", 4), ("fp32+fused", 4), ("amp-bf16+fused", 4)]
    checks = train_parity(TINY, "cpu", cases)
    for case in cases:
        assert checks[case]["ok"], (case, checks[case])
        assert checks[case]["error_last"] <= TRAIN_LOSS_RTOL and checks[case]["steps"] == 3
    assert checks[("fp32+fused", 4)]["error_last"] < 1e-5  # the same update in other kernels


@needs_cpu_inductor
def test_compiled_step_trains_like_fp32_eager():
    check = train_parity(TINY, "cpu", [("fp32+compile+compiled-step", 4)])[("fp32+compile+compiled-step", 4)]
    assert check["ok"], check
    assert check["error_last"] < 1e-4


def test_parity_catches_a_step_that_does_not_train(monkeypatch):
    """A modifier whose optimizer climbs the loss (``maximize``) is caught by the loss after the steps."""

    class Ascent:
        name = "ascent"

        def unsupported_reason(self, ctx):
            return None

        def configure(self, ctx):
            return {}

        def apply(self, prepared, ctx):
            prepared.optimizer_options = {"maximize": True}
            return prepared

    MODIFIERS.register("ascent", Modifier(order=9, build=lambda arg: Ascent(), kinds=frozenset({"train"})))
    try:
        check = train_parity(TINY, "cpu", [("fp32+ascent", 8)], steps=5,
                             train=TrainSettings(lr=0.5, momentum=0.9))[("fp32+ascent", 8)]
    finally:
        MODIFIERS.unregister("ascent")
    assert check["error"] == 0.0  # the first forward is the same network
    assert not check["ok"] and "after 5 steps" in check["reason"], check


def test_parity_reports_a_mode_this_device_cannot_run():
    check = train_parity(TINY, "cpu", [("fp32+cudagraph", 4)])[("fp32+cudagraph", 4)]
    assert not check["ok"] and "CUDA device" in check["detail"] and check["error"] is None


def test_compare_losses_counts_every_update():
    """A captured step's warm-up updates count: its last loss is compared with the reference's at that step."""
    entry = compare_losses("fp32", [2.0, 1.9, 1.8, 1.7], [2.0, 1.9, 1.8, 1.7, 1.6, 1.5])
    assert entry["steps"] == 4 and entry["error_last"] == 0.0 and entry["ok"]
    assert not compare_losses("fp32", [2.0, float("nan")], [2.0, 1.9])["ok"]


# ------------------------------------------------------------------------------------------------ compare


def _measurement(mode: str, figures: tuple[float, ...]) -> Measurement:
    repeats = tuple({"status": "ok"} for _ in figures)
    return Measurement(TINY, "train", mode, 4, "cpu", "ok", input_size=32, repeats=repeats,
                       summary={"throughput_img_s": sorted(figures)[len(figures) // 2],
                                "throughput_img_s_by_repeat": list(figures)})


def test_compare_never_pairs_a_fused_run_with_a_default_one():
    env = {"gpu": None, "cpu": {"model": "x"}}
    default = BenchmarkResult(environment=env, settings={}, measurements=(_measurement("amp-bf16+cl+compile",
                                                                                        (100.0, 101.0)),))
    fused = BenchmarkResult(environment=env, settings={}, measurements=(
        _measurement("amp-bf16+cl+compile", (100.0, 100.5)),
        _measurement("amp-bf16+cl+compile+fused", (120.0, 121.0))))
    rows = [row for table in compare([default, fused], ["a.json", "b.json"]).tables for row in table.rows]
    by_mode = {row.mode: row for row in rows}
    assert set(by_mode) == {"amp-bf16+cl+compile", "amp-bf16+cl+compile+fused"}
    assert by_mode["amp-bf16+cl+compile+fused"].cells[0].status == "missing"  # the default run measured no fused


# ------------------------------------------------------------------------------------------------ on a GPU


def run_gpu(workload: str, mode: str, batch: int = 16, model: str = "resnet18") -> dict:
    return execute(Job(cell=Cell(model, workload, mode, batch, "cuda"), repeat=0,
                       stop=StopRule(warmup=3, min_iterations=10, min_seconds=0.2)))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["amp-bf16+cl+foreach", "amp-bf16+cl+fused", "amp-bf16+cl+compile+compiled-step",
                                  "amp-bf16+cl+cudagraph", "amp-bf16+cl+compile+cudagraph",
                                  "amp-bf16+cl+compile+cudagraph+fused"])
def test_gpu_training_candidates_run(mode):
    record = run_gpu("train", mode)
    assert record["status"] == "ok", record
    assert record["samples"]["loss_last"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize(("mode", "words"), [
    ("amp-fp16+cudagraph", "gradient scaler"),
    ("amp-bf16+compile:max-autotune+cudagraph", "CUDA graphs of its own"),
])
def test_gpu_training_captures_it_cannot_make_are_skipped(mode, words):
    record = run_gpu("train", mode)
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")
    assert words in record["detail"]


@pytest.mark.gpu
def test_gpu_freezing_runs_and_matches_eager():
    record = run_gpu("infer-throughput", "bf16+cl+compile+freeze", batch=32)
    assert record["status"] == "ok", record
    assert record["mode_notes"]["inductor_freezing"] is True
    case = ("bf16+cl+compile+freeze", 8)
    check = output_errors("resnet18", "infer-throughput", "cuda", [case])[case]
    assert check["detail"] is None and check["error"] <= OUTPUT_RTOL["bf16"], check


@pytest.mark.gpu
def test_gpu_training_candidates_train_like_fp32_eager():
    cases = [("amp-bf16+cl+fused", 8), ("amp-bf16+cl+compile+compiled-step", 8), ("amp-bf16+cl+cudagraph", 8),
             ("fp32+cudagraph", 8)]
    checks = train_parity("resnet18", "cuda", cases)
    for case in cases:
        assert checks[case]["ok"], (case, checks[case])
    assert checks[("fp32+cudagraph", 8)]["steps"] == 3 + step_module.CAPTURE_WARMUP_STEPS
