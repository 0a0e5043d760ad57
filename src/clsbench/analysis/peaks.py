"""Datasheet peak rates of common NVIDIA GPUs: dense FLOP/s per precision and memory bandwidth.

What the figures are:

- **Dense** tensor-core rates, never the "with sparsity" ones: NVIDIA's Hopper, Ada datacenter (L4) and H200
  datasheets print only the 2:4-structured-sparsity figure, marked with an asterisk; the dense rate is half of
  it, and is what a dense network can reach. Where a datasheet prints both (A100, L40S, L40, and the Ada and
  RTX Blackwell whitepapers) the dense one is taken as printed.
- ``fp32``: the CUDA-core (non-tensor) FP32 rate. clsbench's ``fp32`` mode switches TF32 off, so this is the
  ceiling of that mode.
- ``tf32``: TF32 tensor-core rate (None where the GPU has no TF32 tensor cores: V100, T4).
- ``fp16`` / ``bf16``: FP16 / BF16 tensor-core rate **with FP32 accumulate**, which is what PyTorch's GEMMs and
  cuDNN convolutions use for fp16 and bf16 inputs (AMP included). Datacenter GPUs run FP32 accumulate at full
  rate and their datasheets print one figure; GeForce cards (RTX 4090, RTX 5090) run it at half the rate of
  FP16 accumulate, and their whitepapers print both: the FP32-accumulate figure is taken. V100 and T4 print
  one "mixed precision (FP16/FP32)" tensor figure and have no BF16 (None).
- ``memory_bandwidth_bytes_s``: peak DRAM (HBM/GDDR) bandwidth, bytes per second, 1 GB/s = 1e9 B/s as the
  datasheets use.

All rates are at the boost clock, as printed; a card running at a lower clock or power limit has a lower
ceiling, which is why ``clsbench probe`` also measures one. 1 TFLOPS = 1e12 FLOP/s.

Bump :data:`PEAKS_TABLE_VERSION` when a figure changes, so stored results say which table they used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from clsbench.errors import InvalidInputError

#: Version of the table below; stored next to every MFU computed from it.
PEAKS_TABLE_VERSION = 1

#: The precision keys of :attr:`GpuPeak.peak_flop_s`, i.e. the units doing the work in each clsbench mode.
PRECISION_KEYS = ("fp32", "tf32", "fp16", "bf16")

_T = 1e12  # TFLOPS -> FLOP/s
_GB_S = 1e9  # GB/s -> bytes/s


@dataclass(frozen=True)
class GpuPeak:
    """Datasheet peaks of one GPU model.

    Attributes:
        name: the model, e.g. ``"H100 SXM"``.
        peak_flop_s: dense peak FLOP/s per precision key (``fp32``, ``tf32``, ``fp16``, ``bf16``); None where
            the GPU has no such unit.
        memory_bandwidth_bytes_s: peak DRAM bandwidth in bytes per second.
        source: the document and the figures the row was taken from.
        pattern: regular expression matched against the normalised NVML name (see :func:`normalise_name`).
    """

    name: str
    peak_flop_s: Mapping[str, float | None]
    memory_bandwidth_bytes_s: float
    source: str
    pattern: str = field(repr=False, compare=False)

    def flop_s(self, key: str) -> float | None:
        """Dense peak FLOP/s for a precision key (see :func:`precision_key`); None if the GPU lacks the unit."""
        if key not in PRECISION_KEYS:
            raise InvalidInputError(f"unknown precision key {key!r}", "one of " + ", ".join(PRECISION_KEYS))
        return self.peak_flop_s[key]

    @property
    def ridge_point_flop_per_byte(self) -> dict[str, float | None]:
        """Peak FLOP/s over peak bandwidth per precision: the roofline's ridge point, FLOP per byte."""
        return {k: (v / self.memory_bandwidth_bytes_s if v else None) for k, v in self.peak_flop_s.items()}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready copy, with the table version, for storing next to a result."""
        return {
            "name": self.name,
            "peak_flop_s": dict(self.peak_flop_s),
            "memory_bandwidth_bytes_s": self.memory_bandwidth_bytes_s,
            "source": self.source,
            "table_version": PEAKS_TABLE_VERSION,
        }


def _row(name: str, pattern: str, *, fp32: float, tf32: float | None, fp16: float | None, bf16: float | None,
         bandwidth_gb_s: float, source: str) -> GpuPeak:
    """One table row; rates in TFLOPS (dense) and bandwidth in GB/s, as datasheets print them."""
    rates = {"fp32": fp32, "tf32": tf32, "fp16": fp16, "bf16": bf16}
    return GpuPeak(
        name=name,
        peak_flop_s=MappingProxyType({k: (v * _T if v is not None else None) for k, v in rates.items()}),
        memory_bandwidth_bytes_s=bandwidth_gb_s * _GB_S,
        source=source,
        pattern=pattern,
    )


# Order matters: the first row whose pattern matches wins, so a specific name (H100 NVL, A100 ... 80GB, L40S)
# comes before the general one (H100, A100 ... SXM, L40, L4). Patterns see the normalised name: upper case,
# "-", "_" and "/" turned into spaces, vendor words (NVIDIA, Tesla, GeForce) removed.
GPU_PEAKS: tuple[GpuPeak, ...] = (
    # NVIDIA H200 Tensor Core GPU datasheet (H200 NVL column): FP32 60 TFLOPS; TF32 835, BF16 1,671,
    # FP16 1,671 TFLOPS with sparsity -> 417.5, 835.5, 835.5 dense; GPU memory bandwidth 4.8 TB/s.
    _row("H200 NVL", r"\bH200\b.*\bNVL\b", fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, bandwidth_gb_s=4800,
         source="NVIDIA H200 Tensor Core GPU datasheet, H200 NVL: FP32 60; TF32 835*, BF16/FP16 1,671* "
                "(*with sparsity, halved); 4.8 TB/s"),
    # NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column; nvidia-smi says "NVIDIA H200"): FP32 67 TFLOPS;
    # TF32 989, BF16 1,979, FP16 1,979 TFLOPS with sparsity -> 494.5, 989.5, 989.5 dense; 4.8 TB/s.
    _row("H200 SXM", r"\bH200\b", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, bandwidth_gb_s=4800,
         source="NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: FP32 67; TF32 989*, BF16/FP16 1,979* "
                "(*with sparsity, halved); 4.8 TB/s"),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 NVL column): FP32 60 TFLOPS; TF32 835, BF16 1,671,
    # FP16 1,671 TFLOPS with sparsity -> 417.5, 835.5, 835.5 dense; 3.9 TB/s.
    _row("H100 NVL", r"\bH100\b.*\bNVL\b", fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, bandwidth_gb_s=3900,
         source="NVIDIA H100 Tensor Core GPU datasheet, H100 NVL: FP32 60; TF32 835*, BF16/FP16 1,671* "
                "(*with sparsity, halved); 3.9 TB/s"),
    # NVIDIA H100 Tensor Core GPU datasheet (2022 edition, H100 PCIe column): FP32 51 TFLOPS; TF32 756,
    # BF16 1,513, FP16 1,513 TFLOPS with sparsity -> 378, 756.5, 756.5 dense; 2 TB/s.
    _row("H100 PCIe", r"\bH100\b.*\bPCIE\b", fp32=51, tf32=378, fp16=756.5, bf16=756.5, bandwidth_gb_s=2000,
         source="NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe: FP32 51; TF32 756*, BF16/FP16 1,513* "
                "(*with sparsity, halved); 2 TB/s"),
    # NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column; nvidia-smi says "NVIDIA H100 80GB HBM3"):
    # FP32 67 TFLOPS; TF32 989, BF16 1,979, FP16 1,979 TFLOPS with sparsity -> 494.5, 989.5, 989.5; 3.35 TB/s.
    _row("H100 SXM", r"\bH100\b", fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, bandwidth_gb_s=3350,
         source="NVIDIA H100 Tensor Core GPU datasheet, H100 SXM: FP32 67; TF32 989*, BF16/FP16 1,979* "
                "(*with sparsity, halved); 3.35 TB/s"),
    # NVIDIA A100 Tensor Core GPU datasheet (prints dense | sparse): FP32 19.5 TFLOPS; TF32 156 | 312;
    # BF16 312 | 624; FP16 312 | 624; A100 80GB SXM 2,039 GB/s.
    _row("A100 SXM 80GB", r"\bA100\b(?=.*\bSXM\d?\b)(?=.*\b80GB\b)", fp32=19.5, tf32=156, fp16=312, bf16=312,
         bandwidth_gb_s=2039,
         source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB SXM: FP32 19.5; TF32 156, BF16/FP16 312 "
                "(dense); 2,039 GB/s"),
    # Same datasheet, 40GB edition (A100 40GB SXM): same rates; 1,555 GB/s.
    _row("A100 SXM 40GB", r"\bA100\b.*\bSXM\d?\b", fp32=19.5, tf32=156, fp16=312, bf16=312, bandwidth_gb_s=1555,
         source="NVIDIA A100 Tensor Core GPU datasheet (40GB edition), A100 40GB SXM: FP32 19.5; TF32 156, "
                "BF16/FP16 312 (dense); 1,555 GB/s"),
    # Same datasheet, A100 80GB PCIe: same rates; 1,935 GB/s.
    _row("A100 PCIe 80GB", r"\bA100\b(?=.*\bPCIE\b)(?=.*\b80GB\b)", fp32=19.5, tf32=156, fp16=312, bf16=312,
         bandwidth_gb_s=1935,
         source="NVIDIA A100 Tensor Core GPU datasheet, A100 80GB PCIe: FP32 19.5; TF32 156, BF16/FP16 312 "
                "(dense); 1,935 GB/s"),
    # Same datasheet, 40GB edition (A100 40GB PCIe): same rates; 1,555 GB/s.
    _row("A100 PCIe 40GB", r"\bA100\b.*\bPCIE\b", fp32=19.5, tf32=156, fp16=312, bf16=312, bandwidth_gb_s=1555,
         source="NVIDIA A100 Tensor Core GPU datasheet (40GB edition), A100 40GB PCIe: FP32 19.5; TF32 156, "
                "BF16/FP16 312 (dense); 1,555 GB/s"),
    # NVIDIA L40S GPU datasheet (prints dense | sparse): FP32 91.6 TFLOPS; TF32 183 | 366; BF16 362.05 | 733;
    # FP16 362.05 | 733; 864 GB/s.
    _row("L40S", r"\bL40S\b", fp32=91.6, tf32=183, fp16=362.05, bf16=362.05, bandwidth_gb_s=864,
         source="NVIDIA L40S GPU datasheet: FP32 91.6; TF32 183, BF16/FP16 362.05 (dense); 864 GB/s"),
    # NVIDIA L40 GPU datasheet (prints dense | sparse): FP32 90.5 TFLOPS; TF32 90.5 | 181; BF16 181.05 | 362.1;
    # FP16 181.05 | 362.1; 864 GB/s. Listed so that "NVIDIA L40" is not taken for an L4 or an L40S.
    _row("L40", r"\bL40\b", fp32=90.5, tf32=90.5, fp16=181.05, bf16=181.05, bandwidth_gb_s=864,
         source="NVIDIA L40 GPU datasheet: FP32 90.5; TF32 90.5, BF16/FP16 181.05 (dense); 864 GB/s"),
    # NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3 TFLOPS; TF32 120, BF16 242, FP16 242 TFLOPS with sparsity
    # -> 60, 121, 121 dense; 300 GB/s.
    _row("L4", r"\bL4\b", fp32=30.3, tf32=60, fp16=121, bf16=121, bandwidth_gb_s=300,
         source="NVIDIA L4 Tensor Core GPU datasheet: FP32 30.3; TF32 120*, BF16/FP16 242* "
                "(*with sparsity, halved); 300 GB/s"),
    # NVIDIA Ada GPU Architecture whitepaper, appendix table (GeForce RTX 4090, dense | sparse): FP32 82.6;
    # TF32 82.6 | 165.2; FP16 with FP32 accumulate 165.2 | 330.4 (FP16 accumulate 330.3 | 660.6);
    # BF16 with FP32 accumulate 165.2 | 330.4; 1,008 GB/s. Anchored at the end: "RTX 4090 D" and the laptop
    # part are different chips.
    _row("RTX 4090", r"\bRTX 4090$", fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, bandwidth_gb_s=1008,
         source="NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090: FP32 82.6; TF32 82.6, BF16/FP16 "
                "with FP32 accumulate 165.2 (dense); 1,008 GB/s"),
    # NVIDIA RTX Blackwell GPU Architecture whitepaper, appendix table (GeForce RTX 5090, dense | sparse):
    # FP32 104.8; TF32 104.8 | 209.5; FP16/BF16 with FP32 accumulate 209.5 | 419 (FP16 accumulate
    # 419 | 838, the "838 TFLOPS FP16" of the spec sheet); 1,792 GB/s.
    _row("RTX 5090", r"\bRTX 5090$", fp32=104.8, tf32=104.8, fp16=209.5, bf16=209.5, bandwidth_gb_s=1792,
         source="NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090: FP32 104.8; TF32 104.8, "
                "BF16/FP16 with FP32 accumulate 209.5 (dense); 1,792 GB/s"),
    # NVIDIA Tesla V100 GPU datasheet (V100 SXM2): FP32 15.7 TFLOPS; Tensor Performance (FP16 multiply, FP32
    # accumulate) 125 TFLOPS; no TF32, no BF16; 900 GB/s.
    _row("V100 SXM2", r"\bV100\b.*\bSXM2\b", fp32=15.7, tf32=None, fp16=125, bf16=None, bandwidth_gb_s=900,
         source="NVIDIA Tesla V100 GPU datasheet, V100 SXM2: FP32 15.7; Tensor 125 (FP16/FP32 mixed); 900 GB/s"),
    # Same datasheet (V100 PCIe): FP32 14 TFLOPS; Tensor Performance 112 TFLOPS; 900 GB/s.
    _row("V100 PCIe", r"\bV100\b.*\bPCIE\b", fp32=14, tf32=None, fp16=112, bf16=None, bandwidth_gb_s=900,
         source="NVIDIA Tesla V100 GPU datasheet, V100 PCIe: FP32 14; Tensor 112 (FP16/FP32 mixed); 900 GB/s"),
    # NVIDIA T4 Tensor Core GPU datasheet: single precision 8.1 TFLOPS; mixed precision (FP16/FP32) 65 TFLOPS;
    # no TF32, no BF16; GPU memory bandwidth 320+ GB/s.
    _row("T4", r"\bT4\b", fp32=8.1, tf32=None, fp16=65, bf16=None, bandwidth_gb_s=320,
         source="NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1; FP16/FP32 mixed 65; 320 GB/s"),
)

_VENDOR_WORDS = re.compile(r"\b(NVIDIA|TESLA|GEFORCE)\b")


def normalise_name(name: str) -> str:
    """An NVML/nvidia-smi GPU name reduced to what the table's patterns match.

    ``"NVIDIA A100-SXM4-80GB"`` -> ``"A100 SXM4 80GB"``; ``"Tesla V100-SXM2-16GB"`` -> ``"V100 SXM2 16GB"``;
    ``"NVIDIA GeForce RTX 4090"`` -> ``"RTX 4090"``.
    """
    text = re.sub(r"[-_/]", " ", name.upper())
    text = _VENDOR_WORDS.sub(" ", text)
    return " ".join(text.split())


def lookup_gpu(name: str) -> GpuPeak | None:
    """The datasheet row for a GPU name as NVML or nvidia-smi prints it; None for a GPU not in the table.

    Examples: ``"NVIDIA H100 80GB HBM3"`` -> H100 SXM, ``"NVIDIA H100 PCIe"`` -> H100 PCIe,
    ``"NVIDIA H200"`` -> H200 SXM, ``"NVIDIA A100-SXM4-80GB"`` -> A100 SXM 80GB, ``"Tesla T4"`` -> T4.
    A name that could be either of two rows with different figures (a bare ``"NVIDIA A100"``) gives None
    rather than a guess.
    """
    normalised = normalise_name(name)
    if not normalised:
        return None
    for row in GPU_PEAKS:
        if re.search(row.pattern, normalised):
            return row
    return None


def mode_precision(mode_name: str) -> str:
    """The precision token of a clsbench mode name, lower case, modifiers after ``+`` and ``amp-`` dropped:
    ``AMP-BF16+cl`` -> ``bf16``, ``fp8+compile`` -> ``fp8``, ``amp-fp32`` -> ``amp-fp32`` (not a precision)."""
    precision = mode_name.strip().lower().split("+", 1)[0]
    if precision.startswith("amp-") and precision[len("amp-"):] in ("fp16", "bf16"):
        precision = precision[len("amp-"):]
    return precision


def precision_key(mode_name: str) -> str:
    """The precision key (unit doing the work) of a clsbench mode name; modifiers after ``+`` are ignored.

    ``fp32`` -> ``fp32``; ``tf32`` -> ``tf32``; ``amp-bf16``, ``bf16`` -> ``bf16``; ``amp-fp16``, ``fp16`` ->
    ``fp16``; e.g. ``amp-bf16+cl+compile`` -> ``bf16``.

    Raises:
        InvalidInputError: a mode whose precision is none of these.
    """
    precision = mode_precision(mode_name)
    if precision in PRECISION_KEYS:
        return precision
    raise InvalidInputError(f"no precision key for mode {mode_name!r}",
                            "modes start with fp32, tf32, amp-fp16, amp-bf16, fp16 or bf16")
