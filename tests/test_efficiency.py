"""Compute efficiency: FLOP and byte counts, the datasheet peak table, MFU, roofline verdict, energy per image."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch
from torch import nn

from clsbench.analysis import efficiency
from clsbench.analysis.peaks import GPU_PEAKS, PRECISION_KEYS, lookup_gpu, normalise_name, precision_key
from clsbench.errors import InvalidInputError
from clsbench.measure.flops import count_model_costs
from clsbench.models import create_model

# Published multiply-accumulates per 224x224 image, GMACs (1 MAC = 2 FLOPs): the figures of issue #3, as in
# torchvision's model tables ("GFLOPS" there counts multiply-adds) and timm's results tables.
PUBLISHED_GMACS = {
    "resnet50": 4.1,
    "resnet101": 7.8,
    "mobilenet_v3_large": 0.22,
    "efficientnet_b0": 0.39,
}
PUBLISHED_TOLERANCE = 0.02  # the bound


@functools.cache
def _costs(name: str) -> dict:
    return count_model_costs(create_model(name), 224)


# --- FLOPs -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_forward_flops_agree_with_published_counts(name):
    gmacs = _costs(name)["forward_flops"] / 2e9
    assert gmacs == pytest.approx(PUBLISHED_GMACS[name], rel=PUBLISHED_TOLERANCE)
    assert _costs(name)["counted_on"] == "meta"


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_train_step_is_about_three_forward_passes(name):
    # Depthwise convolutions (MobileNetV3, EfficientNet) are what torch's stock backward formula overcounts.
    costs = _costs(name)
    assert 2.5 <= costs["train_step_flops"] / costs["forward_flops"] <= 3.5


def test_resnet50_parameters_and_bytes():
    costs = _costs("resnet50")
    assert costs["params"] == 25_557_032
    assert costs["param_bytes"] == 25_557_032 * 4
    assert costs["bytes_per_element"] == 4
    assert costs["min_bytes_forward"] == costs["param_bytes"] + costs["activation_bytes"]
    assert costs["activation_bytes"] == costs["activation_traffic_elements"] * 4
    assert costs["arithmetic_intensity_forward"] == costs["forward_flops"] / costs["min_bytes_forward"]
    for key in ("flops_method", "bytes_method"):
        assert costs[key]


def test_two_byte_precision_halves_the_bytes_not_the_flops():
    model = _Tiny()
    fp32 = count_model_costs(model, 8)
    half = count_model_costs(model, 8, bytes_per_element=2)
    assert half["param_bytes"] * 2 == fp32["param_bytes"]
    assert half["activation_bytes"] * 2 == fp32["activation_bytes"]
    assert half["forward_flops"] == fp32["forward_flops"]
    assert half["arithmetic_intensity_forward"] == pytest.approx(2 * fp32["arithmetic_intensity_forward"])


class _Tiny(nn.Module):
    """conv 3->4 (3x3, pad 1) -> ReLU -> global average pool -> linear 4->5, with hand-countable costs."""

    def __init__(self, inplace: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act = nn.ReLU(inplace=inplace)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.act(self.conv(x))), 1))


@pytest.mark.parametrize("inplace", [True, False])
def test_exact_counts_of_a_tiny_model(inplace):
    costs = count_model_costs(_Tiny(inplace), 8, num_classes=5)
    conv = 2 * 4 * 3 * 9 * 8 * 8  # 2 * C_out * C_in * k*k * H*W
    fc = 2 * 4 * 5
    assert costs["forward_flops"] == conv + fc
    # backward: the first conv needs only its weight gradient; the linear layer both gradients
    assert costs["train_step_flops"] == conv + fc + conv + 2 * fc
    assert costs["params"] == 4 * 3 * 9 + 4 + 4 * 5 + 5
    # outputs: conv 4*8*8, ReLU 4*8*8 (in place or not: same traffic), pool 4, linear 5; flatten is a view.
    outputs = 256 + 256 + 4 + 5
    assert costs["activation_traffic_elements"] == 2 * outputs + 3 * 8 * 8  # written + read; image read once


def test_grouped_convolution_backward_is_not_overcounted():
    # torch <= 2.14 counts a depthwise conv's weight gradient C times too high (pytorch/pytorch PR #183405).
    channels, size = 16, 8
    model = nn.Sequential(
        nn.Conv2d(3, channels, 1),
        nn.Conv2d(channels, channels, 3, padding=1, groups=channels),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, 10),
    )
    costs = count_model_costs(model, size)
    pointwise = 2 * channels * 3 * size * size
    depthwise = 2 * channels * 1 * 9 * size * size
    fc = 2 * channels * 10
    assert costs["forward_flops"] == pointwise + depthwise + fc
    assert costs["train_step_flops"] == (pointwise + depthwise + fc) + pointwise + 2 * depthwise + 2 * fc


def test_counting_leaves_the_model_and_the_rng_untouched():
    model = create_model("resnet18")
    model.layer1.eval()  # a mixed training state must survive too
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {name: m.training for name, m in model.named_modules()}
    rng = torch.random.get_rng_state()

    costs = count_model_costs(model, 64)

    assert costs["counted_on"] == "meta"
    assert {name: m.training for name, m in model.named_modules()} == flags
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(before[k], after[k]) and after[k].device.type == "cpu" for k in before)
    assert all(p.grad is None and p.requires_grad for p in model.parameters())
    assert torch.equal(rng, torch.random.get_rng_state())


class _NeedsCpu(nn.Module):
    """Keeps a tensor in a plain attribute (not a buffer), which the meta copy cannot move: CPU fallback."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.scale = torch.ones(1, 8, 1, 1)
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop((self.conv(x) * self.scale).mean((2, 3))))


def test_falls_back_to_the_cpu_and_says_why():
    model = _NeedsCpu()
    rng = torch.random.get_rng_state()
    costs = count_model_costs(model, 16)
    assert costs["counted_on"].startswith("cpu (the meta device failed:")
    assert costs["forward_flops"] == 2 * 8 * 3 * 9 * 16 * 16 + 2 * 8 * 10
    assert torch.equal(rng, torch.random.get_rng_state())  # dropout ran on the CPU, in a forked RNG
    assert model.training


def test_rejects_bad_arguments_and_wrong_class_count():
    with pytest.raises(InvalidInputError, match="expected 7"):
        count_model_costs(_Tiny(), 8, num_classes=7)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidInputError, match="input_size"):
            count_model_costs(_Tiny(), bad)
    with pytest.raises(InvalidInputError, match="bytes_per_element"):
        count_model_costs(_Tiny(), 8, bytes_per_element=0)


# --- peak table ------------------------------------------------------------------------------------------------

NVML_NAMES = {
    "NVIDIA H100 80GB HBM3": "H100 SXM",
    "NVIDIA H100 PCIe": "H100 PCIe",
    "NVIDIA H100 NVL": "H100 NVL",
    "NVIDIA H200": "H200 SXM",
    "NVIDIA H200 NVL": "H200 NVL",
    "NVIDIA A100-SXM4-80GB": "A100 SXM 80GB",
    "NVIDIA A100-SXM4-40GB": "A100 SXM 40GB",
    "NVIDIA A100 80GB PCIe": "A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA L40S": "L40S",
    "NVIDIA L40": "L40",
    "NVIDIA L4": "L4",
    "NVIDIA GeForce RTX 4090": "RTX 4090",
    "NVIDIA GeForce RTX 5090": "RTX 5090",
    "Tesla V100-SXM2-16GB": "V100 SXM2",
    "Tesla V100-SXM2-32GB": "V100 SXM2",
    "Tesla V100-PCIE-16GB": "V100 PCIe",
    "Tesla T4": "T4",
}


@pytest.mark.parametrize("nvml_name", sorted(NVML_NAMES))
def test_lookup_gpu_maps_nvml_names(nvml_name):
    row = lookup_gpu(nvml_name)
    assert row is not None and row.name == NVML_NAMES[nvml_name]
    assert lookup_gpu(nvml_name.lower()).name == row.name  # case does not matter


@pytest.mark.parametrize("name", ["", "AMD Instinct MI300X", "NVIDIA A100", "NVIDIA GeForce RTX 4090 D",
                                  "NVIDIA GeForce RTX 4090 Laptop GPU", "NVIDIA T400", "NVIDIA B200", "cpu"])
def test_lookup_gpu_unknown_or_ambiguous_is_none(name):
    assert lookup_gpu(name) is None


def test_normalise_name():
    assert normalise_name("NVIDIA A100-SXM4-80GB") == "A100 SXM4 80GB"
    assert normalise_name("Tesla V100-SXM2-16GB") == "V100 SXM2 16GB"
    assert normalise_name("NVIDIA GeForce RTX 4090") == "RTX 4090"


def test_peak_table_figures():
    h100 = lookup_gpu("NVIDIA H100 80GB HBM3")
    assert h100.flop_s("bf16") == 989.5e12  # 1,979 TFLOPS with sparsity, halved
    assert h100.flop_s("fp32") == 67e12
    assert h100.memory_bandwidth_bytes_s == 3.35e12
    h200 = lookup_gpu("NVIDIA H200")
    assert h200.flop_s("bf16") == 989.5e12 and h200.memory_bandwidth_bytes_s == 4.8e12
    assert h200.ridge_point_flop_per_byte["bf16"] == pytest.approx(989.5e12 / 4.8e12)
    assert lookup_gpu("NVIDIA A100-SXM4-80GB").flop_s("tf32") == 156e12
    assert lookup_gpu("NVIDIA GeForce RTX 4090").flop_s("fp16") == 165.2e12  # FP32 accumulate, not 330.3
    t4 = lookup_gpu("Tesla T4")
    assert t4.flop_s("bf16") is None and t4.flop_s("tf32") is None and t4.flop_s("fp16") == 65e12
    with pytest.raises(InvalidInputError):
        t4.flop_s("fp8")
    assert h200.to_dict()["peak_flop_s"]["bf16"] == 989.5e12 and h200.to_dict()["table_version"] >= 1


@pytest.mark.parametrize("row", GPU_PEAKS, ids=lambda r: r.name)
def test_every_row_is_plausible(row):
    assert set(row.peak_flop_s) == set(PRECISION_KEYS)
    assert 1e12 < row.peak_flop_s["fp32"] < 2e14
    for key in ("tf32", "fp16", "bf16"):
        rate = row.peak_flop_s[key]
        assert rate is None or row.peak_flop_s["fp32"] <= rate <= 1.0e15  # dense: no 2,000-TFLOPS sparse figure
    assert 1e11 < row.memory_bandwidth_bytes_s < 1e13
    assert row.source and row.name.split()[0] in row.source


@pytest.mark.parametrize(("mode", "key"), [
    ("fp32", "fp32"), ("tf32", "tf32"), ("amp-bf16", "bf16"), ("bf16", "bf16"), ("amp-fp16", "fp16"),
    ("fp16", "fp16"), ("amp-bf16+cl+compile", "bf16"), ("fp16+cudagraph", "fp16"),
    ("tf32+compile:max-autotune", "tf32"), (" AMP-FP16 ", "fp16"),
])
def test_precision_key(mode, key):
    assert precision_key(mode) == key


@pytest.mark.parametrize("mode", ["", "fp8", "int8", "amp-fp32", "+cl"])
def test_precision_key_rejects_unknown_modes(mode):
    with pytest.raises(InvalidInputError):
        precision_key(mode)


# --- efficiency ------------------------------------------------------------------------------------------------

H200_BF16 = 989.5e12
H200_BYTES_S = 4.8e12  # ridge point 206 FLOP/byte


def test_efficiency_does_not_import_torch():
    code = "import sys, clsbench.analysis.efficiency; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_achieved_and_mfu_units():
    assert efficiency.achieved_flop_s(8.2e9, 1000.0) == pytest.approx(8.2e12)
    assert efficiency.achieved_tflop_s(8.2e9, 1000.0) == pytest.approx(8.2)
    assert efficiency.mfu(494.75e12, H200_BF16) == pytest.approx(0.5)
    assert efficiency.achieved_flop_s(None, 1000.0) is None
    assert efficiency.achieved_tflop_s(8.2e9, None) is None
    assert efficiency.mfu(None, H200_BF16) is None
    assert efficiency.mfu(1e12, None) is None  # e.g. bf16 on a T4, or an unknown GPU
    with pytest.raises(InvalidInputError):
        efficiency.mfu(1e12, 0.0)
    with pytest.raises(InvalidInputError):
        efficiency.achieved_flop_s(-1.0, 10.0)


def test_min_bytes_per_image_shares_the_weights_across_the_batch():
    assert efficiency.min_bytes_per_image(param_bytes=100e6, activation_bytes=50e6, batch_size=100) == 51e6
    assert efficiency.min_bytes_per_image(param_bytes=None, activation_bytes=50e6, batch_size=1) is None
    with pytest.raises(InvalidInputError):
        efficiency.min_bytes_per_image(param_bytes=1.0, activation_bytes=1.0, batch_size=0)


def _verdict(**overrides):
    kwargs = dict(flops_per_image=8.2e9, bytes_per_image=20e6, images_per_s=10_000.0, peak_flop_s=H200_BF16,
                  peak_bytes_s=H200_BYTES_S, gpu_busy_fraction=0.95)
    kwargs.update(overrides)
    return efficiency.roofline_verdict(**kwargs)


def test_roofline_compute_bound():
    v = _verdict()  # 410 FLOP/byte > ridge 206
    assert v["bound_by"] == "compute"
    assert v["arithmetic_intensity_flop_per_byte"] == pytest.approx(410.0)
    assert v["ridge_point_flop_per_byte"] == pytest.approx(H200_BF16 / H200_BYTES_S)
    assert v["attainable_flop_s"] == H200_BF16
    assert v["achieved_flop_s"] == pytest.approx(8.2e13)
    assert v["fraction_of_attainable"] == pytest.approx(8.2e13 / H200_BF16)
    assert v["fraction_of_peak"] == pytest.approx(8.2e13 / H200_BF16)
    assert "ridge point" in v["reason"]


def test_roofline_memory_bound():
    v = _verdict(flops_per_image=0.44e9, bytes_per_image=40e6)  # MobileNetV3-like: 11 FLOP/byte
    assert v["bound_by"] == "memory"
    assert v["attainable_flop_s"] == pytest.approx(11.0 * H200_BYTES_S)
    assert v["fraction_of_attainable"] == pytest.approx(0.44e9 * 10_000 / (11.0 * H200_BYTES_S))
    assert v["fraction_of_peak"] < v["fraction_of_attainable"]


def test_roofline_launch_bound_wins_over_intensity():
    v = _verdict(gpu_busy_fraction=0.2)
    assert v["bound_by"] == "launch"
    assert "20%" in v["reason"]
    assert v["arithmetic_intensity_flop_per_byte"] == pytest.approx(410.0)  # the numbers are still there
    # at the threshold the GPU is busy half the time: not launch-bound
    assert _verdict(gpu_busy_fraction=efficiency.LAUNCH_BOUND_BUSY_FRACTION)["bound_by"] == "compute"
    # launch-bound needs only the busy fraction
    assert _verdict(gpu_busy_fraction=0.1, peak_flop_s=None, bytes_per_image=None)["bound_by"] == "launch"


def test_roofline_unknown_busy_fraction_skips_the_launch_check():
    assert _verdict(gpu_busy_fraction=None)["bound_by"] == "compute"


@pytest.mark.parametrize("missing", ["flops_per_image", "bytes_per_image", "peak_flop_s", "peak_bytes_s"])
def test_roofline_none_inputs_give_no_verdict_and_say_why(missing):
    v = _verdict(**{missing: None})
    assert v["bound_by"] is None
    assert missing in v["reason"]
    assert v["attainable_flop_s"] is None


def test_roofline_without_throughput_still_decides():
    v = _verdict(images_per_s=None)
    assert v["bound_by"] == "compute"
    assert v["achieved_flop_s"] is None and v["fraction_of_attainable"] is None and v["fraction_of_peak"] is None


@pytest.mark.parametrize("bad", [{"bytes_per_image": 0.0}, {"peak_bytes_s": -1.0}, {"gpu_busy_fraction": -0.1},
                                 {"flops_per_image": float("nan")}, {"images_per_s": "fast"}])
def test_roofline_rejects_impossible_numbers(bad):
    with pytest.raises(InvalidInputError):
        _verdict(**bad)


def test_energy_helpers():
    assert efficiency.joules_per_image(600.0, 20_000) == pytest.approx(0.03)
    assert efficiency.joules_per_image(None, 20_000) is None
    assert efficiency.joules_per_image(600.0, 0) is None
    assert efficiency.images_per_s_per_w(10_000.0, 500.0) == pytest.approx(20.0)
    assert efficiency.images_per_s_per_w(10_000.0, None) is None
    assert efficiency.images_per_s_per_w(10_000.0, 0.0) is None
    # J/img is W / (img/s), and img/s/W its inverse
    joules = efficiency.joules_per_image(500.0, 10_000.0)
    assert efficiency.images_per_s_per_w(10_000.0, 500.0) == pytest.approx(1 / joules)
    with pytest.raises(InvalidInputError):
        efficiency.joules_per_image(-1.0, 10)
