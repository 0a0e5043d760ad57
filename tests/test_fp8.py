"""The ``fp8`` precision (torchao float8 for the Linear layers): its refusals, the layer filter, the parity entry,
the mode string, tune's enumeration, and a CPU run that records the cell as skipped with the reason.

The CPU tests need no torchao (the refusals come before any import of it). The GPU tests need an sm_89+ card and
torchao (the carried wheel: benchmarks/fp8_vit.sh installs it) and are skipped otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from torch import nn

from clsbench.backends.parity import PARITY_TOLERANCE
from clsbench.cli import main
from clsbench.engine.worker import failure_record
from clsbench.errors import ClsbenchError, InvalidInputError
from clsbench.modes import ModeContext, Prepared, fp8, known_mode_tokens, parse_mode
from clsbench.procedures import tune
from clsbench.procedures.tune.guard import compare_losses

TINY = "clsbench_testmodels:tiny"
#: The suite's light vision Transformer (core/suites.py, the seed suite): 48 Linear layers in 12 blocks
#: (qkv 192x576, proj 192x192, fc1 192x768, fc2 768x192), all multiples of 16, and the 192x1000 head, which is not.
VIT = "timm/vit_tiny_patch16_224"


def context(device: str = "cpu", kind: str = "inference") -> ModeContext:
    return ModeContext(device=torch.device(device), workload_kind=kind, bf16_supported=True, tf32_supported=True)


class TwoLinears(nn.Module):
    """One layer fp8 can take (32x64) and one it cannot (30x10: neither dimension a multiple of 16)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(32, 64)
        self.act = nn.ReLU()
        self.head = nn.Linear(30, 10)


class WithAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(64, 4)
        self.mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64))


# ------------------------------------------------------------------------------------------------------ refusals


def test_a_cpu_is_refused_with_its_reason():
    reason = parse_mode("fp8").unsupported_reason(context("cpu"))
    assert reason is not None
    assert "compute capability 8.9" in reason and "this device is cpu" in reason


def test_a_gpu_before_sm89_is_refused_naming_its_capability(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (8, 0))
    monkeypatch.setattr(fp8, "torchao_available", lambda: True)
    reason = parse_mode("fp8+compile").unsupported_reason(context("cuda", "train"))
    assert reason is not None
    assert "8.9 or newer" in reason and "this GPU has 8.0" in reason


def test_a_missing_torchao_is_refused_with_the_install_command(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(fp8, "torchao_available", lambda: False)
    reason = parse_mode("fp8").unsupported_reason(context("cuda"))
    assert reason is not None
    assert "torchao" in reason and "pip install torchao" in reason


def test_an_sm90_with_torchao_is_accepted(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(fp8, "torchao_available", lambda: True)
    assert parse_mode("fp8+compile").unsupported_reason(context("cuda")) is None
    # Ada is the first generation with fp8 tensor cores.
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (8, 9))
    assert parse_mode("fp8").unsupported_reason(context("cuda", "train")) is None


def test_an_unknown_capability_is_left_to_the_worker(monkeypatch: pytest.MonkeyPatch):
    # The parent cannot read NVML (or must not create a CUDA context): the worker, which has one, decides.
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: None)
    monkeypatch.setattr(fp8, "torchao_available", lambda: True)
    assert fp8.device_refusal(torch.device("cuda")) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")
def test_the_capability_query_creates_no_cuda_context():
    assert fp8.cuda_capability(torch.device("cuda:0")) is None  # no GPU to read here
    assert not torch.cuda.is_initialized()


def test_a_network_without_an_eligible_linear_layer_is_refused_as_skipped():
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8, 1000))  # 1000 classes: not a multiple of 16
    with pytest.raises(ClsbenchError) as raised:
        parse_mode("fp8").prepare(model, context("cpu"))
    message = str(raised.value)
    assert "converts Linear layers only" in message and "1 Linear layer" in message and "nothing to measure" in message
    assert "8x1000" in message
    record = failure_record(raised.value)  # how the worker records it
    assert (record["status"], record["reason"]) == ("skipped", "unsupported_mode")


def test_a_network_without_any_linear_layer_is_refused():
    reason = fp8.refusal_for_model(nn.Conv2d(3, 8, 3), fp8.linear_choices(nn.Conv2d(3, 8, 3)))
    assert reason is not None and "has none" in reason


# -------------------------------------------------------------------------------------------------- the filter


def test_the_filter_converts_the_layer_whose_dims_are_multiples_of_16_and_skips_the_other():
    model = TwoLinears()
    choices = fp8.linear_choices(model)
    assert [(c.name, c.in_features, c.out_features, c.converted) for c in choices] == [
        ("body", 32, 64, True), ("head", 30, 10, False)]
    assert "multiples of 16" in (choices[1].skip_reason or "")
    keep = fp8.module_filter(choices)
    assert keep(model.body, "body") is True
    assert keep(model.head, "head") is False
    assert keep(model.act, "act") is False  # torchao's quantize_ asks about every module
    facts = fp8.conversion_facts(model, choices)
    assert (facts["linear_layers"], facts["converted"], facts["skipped"]) == (2, 1, 1)
    assert list(facts["skipped_layers"]) == ["head"]
    params = sum(p.numel() for p in model.parameters())
    assert facts["converted_weight_share"] == pytest.approx(32 * 64 / params)
    assert fp8.refusal_for_model(model, choices) is None


def test_one_dimension_off_is_enough_to_skip():
    assert fp8.linear_skip_reason(nn.Linear(32, 1000), None) is not None
    assert fp8.linear_skip_reason(nn.Linear(24, 64), None) is not None
    assert fp8.linear_skip_reason(nn.Linear(768, 3072), None) is None


def test_multihead_attention_out_projection_is_skipped_because_it_is_never_called():
    choices = {c.name: c for c in fp8.linear_choices(WithAttention())}
    assert set(choices) == {"attn.out_proj", "mlp.0", "mlp.2"}
    assert not choices["attn.out_proj"].converted
    assert "MultiheadAttention" in (choices["attn.out_proj"].skip_reason or "")
    assert choices["mlp.0"].converted and choices["mlp.2"].converted


def test_a_shared_layer_is_counted_once():
    shared = nn.Linear(16, 16)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    assert [c.name for c in fp8.linear_choices(model)] == ["0"]


def test_the_suite_vit_converts_every_block_layer_and_skips_the_head():
    pytest.importorskip("timm")
    from clsbench.models import get_model_spec

    model = get_model_spec(VIT).build(seed=0, num_classes=1000, input_size=None)
    choices = fp8.linear_choices(model)
    converted = [c for c in choices if c.converted]
    assert len(converted) == 48
    assert [c.name for c in choices if not c.converted] == ["head"]


# ----------------------------------------------------------------------------------------- parity and mode string


def test_parity_tolerance_has_an_fp8_entry_wider_than_bf16():
    assert PARITY_TOLERANCE["fp8"] > PARITY_TOLERANCE["bf16"]
    assert PARITY_TOLERANCE["fp8"] < 1.0  # a network that computes something else still fails
    assert tune.OUTPUT_RTOL["fp8"] == PARITY_TOLERANCE["fp8"]
    assert tune.tolerance_for("fp8+compile") == PARITY_TOLERANCE["fp8"]
    assert tune.tolerance_for("fp8+cl+compile", {"fp8": 0.5}) == 0.5


def test_training_parity_holds_the_first_loss_to_the_fp8_tolerance():
    inside = 0.9 * PARITY_TOLERANCE["fp8"]
    entry = compare_losses("fp8+compile", [6.9 * (1 + inside), 6.0], [6.9, 6.0])
    assert entry["ok"] and entry["tolerance"] == PARITY_TOLERANCE["fp8"]
    outside = compare_losses("fp8", [6.9 * (1 + 1.2 * PARITY_TOLERANCE["fp8"]), 6.0], [6.9, 6.0])
    assert not outside["ok"] and "first-step loss" in outside["reason"]


@pytest.mark.parametrize(("text", "name"), [
    ("fp8", "fp8"),
    ("fp8+compile", "fp8+compile"),
    ("FP8+compile+cl", "fp8+cl+compile"),
    ("fp8+compile:max-autotune", "fp8+compile:max-autotune"),
    ("fp8+fused+compile", "fp8+compile+fused"),
])
def test_the_mode_string_parses(text: str, name: str):
    mode = parse_mode(text)
    assert mode.name == name
    assert mode.components[0].name == "fp8"


def test_fp8_is_listed_after_the_plain_precisions():
    tokens = known_mode_tokens()
    assert "bf16, fp8;" in tokens


def test_fp8_freeze_is_refused_for_training_as_every_freeze_is():
    assert parse_mode("fp8+compile+freeze").refusal("train") is not None
    with pytest.raises(InvalidInputError):
        parse_mode("fp8+freeze")  # freeze needs compile


# ---------------------------------------------------------------------------------------------------------- tune


@pytest.mark.parametrize("workload", ["infer-throughput", "infer-latency", "train"])
def test_tune_leaves_fp8_out_on_a_cpu(workload: str):
    assert tune.default_modes(workload, "cpu") == tune.default_modes(workload)
    assert not any(m.startswith("fp8") for m in tune.default_modes(workload, "cpu"))


@pytest.mark.parametrize("workload", ["infer-throughput", "train"])
def test_tune_tries_fp8_where_it_runs(monkeypatch: pytest.MonkeyPatch, workload: str):
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (9, 0))
    monkeypatch.setattr(fp8, "torchao_available", lambda: True)
    modes = tune.default_modes(workload, "cuda")
    assert modes == [*tune.default_modes(workload), "fp8"]
    monkeypatch.setattr(fp8, "torchao_available", lambda: False)
    assert "fp8" not in tune.default_modes(workload, "cuda")
    monkeypatch.setattr(fp8, "torchao_available", lambda: True)
    monkeypatch.setattr(fp8, "cuda_capability", lambda device: (8, 0))
    assert "fp8" not in tune.default_modes(workload, "cuda")


# ---------------------------------------------------------------------------------------------------- end to end


def test_run_records_fp8_on_a_cpu_as_skipped_with_the_reason(tmp_path: Path):
    out = tmp_path / "fp8.json"
    result = CliRunner().invoke(main, [
        "run", "--model", TINY, "--workload", "infer-throughput,train", "--mode", "fp8,fp8+compile",
        "--batch-size", "2", "--device", "cpu", "--isolation", "inline", "--clock", "fake:1ms", "--repeats", "1",
        "--iterations", "2", "--warmup", "1", "--min-time", "0", "-o", str(out)])
    assert "Traceback" not in result.output
    # a skipped cell is a property of the device, not a failure (never exit 4); with every cell skipped the run
    # measured nothing, which exit 7 says (issue 38), and the file with the reasons is written all the same
    assert result.exit_code == 7, result.output
    data = json.loads(out.read_text(encoding="utf-8"))
    measurements = data["measurements"]
    assert sorted((m["mode"], m["workload"]) for m in measurements) == [
        ("fp8", "infer-throughput"), ("fp8", "train"), ("fp8+compile", "infer-throughput"), ("fp8+compile", "train")]
    for m in measurements:
        assert (m["status"], m["reason"]) == ("skipped", "unsupported_mode")
        assert "this device is cpu" in m["detail"]
    assert "skipped" in result.output


# ---------------------------------------------------------------------------------------------------------- GPU


def _sm89_with_torchao() -> None:
    pytest.importorskip("torchao")
    pytest.importorskip("timm")
    if torch.cuda.get_device_capability() < fp8.FP8_MIN_CAPABILITY:
        pytest.skip("needs compute capability 8.9 or newer")


@pytest.mark.gpu
def test_gpu_vit_fp8_inference_passes_parity():
    _sm89_with_torchao()
    checks = tune.output_errors(VIT, "infer-throughput", "cuda", [("fp8", 16), ("fp8+compile", 16)])
    for mode in ("fp8", "fp8+compile"):
        verdict = tune.judge(checks[(mode, 16)], mode)
        assert verdict["ok"], (mode, checks[(mode, 16)], verdict)
        assert verdict["error"] > 0  # fp8 rounds: an error of exactly zero would mean nothing was converted


@pytest.mark.gpu
def test_gpu_vit_fp8_training_step_passes_parity():
    _sm89_with_torchao()
    from clsbench.procedures.tune.guard import train_parity

    checks = train_parity(VIT, "cuda", [("fp8", 16)], steps=1)
    entry = checks[("fp8", 16)]
    assert entry["ok"], entry
    assert entry["steps"] == 1


@pytest.mark.gpu
def test_gpu_vit_fp8_records_what_it_converted():
    _sm89_with_torchao()
    from clsbench.models import get_model_spec

    model = get_model_spec(VIT).build(seed=0, num_classes=1000, input_size=None).cuda().eval()
    ctx = context("cuda")
    prepared = parse_mode("fp8").prepare(model, ctx)
    assert isinstance(prepared, Prepared)
    notes = prepared.notes["fp8"]
    assert (notes["converted"], notes["skipped"]) == (48, 1)
    assert prepared.input_dtype == torch.bfloat16
    with torch.inference_mode():
        out = prepared.forward(torch.randn(4, 3, 224, 224, device="cuda", dtype=torch.bfloat16))
    assert out.shape == (4, 1000) and out.dtype == torch.bfloat16
