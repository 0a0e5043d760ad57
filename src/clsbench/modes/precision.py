"""Numeric precisions: fp32, tf32, amp-fp16, amp-bf16 (autocast) and fp16, bf16 (weights cast, inference only).

TF32 is switched OFF for every precision except ``tf32``, for convolutions as well as matmuls: PyTorch's default
lets cuDNN use TF32 for convolutions, which would make "fp32" silently mean "TF32 convolutions".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from clsbench.measure.device import set_tf32
from clsbench.modes.base import PRECISIONS, ModeContext, Prepared


@dataclass(frozen=True)
class Precision:
    """One numeric precision.

    Attributes:
        name: the mode token.
        autocast_dtype: dtype for autocast, or None.
        cast_dtype: dtype the weights and inputs are cast to (inference only), or None.
        tf32: whether TF32 tensor cores may be used for fp32 work.
    """

    name: str
    autocast_dtype: torch.dtype | None = None
    cast_dtype: torch.dtype | None = None
    tf32: bool = False

    def _dtype(self) -> torch.dtype | None:
        return self.autocast_dtype or self.cast_dtype

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        if self.cast_dtype is not None and ctx.workload_kind == "train":
            amp = "amp-" + self.name
            return f"{self.name} casts the weights, which is for inference only; train with {amp} instead"
        if self.tf32 and ctx.device.type != "cuda":
            return "TF32 is a tensor-core mode of NVIDIA GPUs; this device is " + ctx.device.type
        if self.tf32 and not ctx.tf32_supported:
            return "this GPU has no TF32 tensor cores (needs compute capability 8.0 or newer)"
        if self._dtype() == torch.bfloat16 and ctx.device.type == "cuda" and not ctx.bf16_supported:
            return "this GPU does not support bfloat16; use amp-fp16"
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return set_tf32(self.tf32)

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        if self.cast_dtype is not None:
            prepared.model = prepared.model.to(dtype=self.cast_dtype)
            prepared.forward = prepared.model
            prepared.input_dtype = self.cast_dtype
        if self.autocast_dtype is not None:
            prepared.autocast_dtype = self.autocast_dtype
            # A gradient scaler keeps small fp16 gradients from flushing to zero; bf16 has fp32's range.
            prepared.grad_scaler = self.autocast_dtype == torch.float16 and ctx.workload_kind == "train"
        return prepared


for _precision in (
    Precision("fp32"),
    Precision("tf32", tf32=True),
    Precision("amp-fp16", autocast_dtype=torch.float16),
    Precision("amp-bf16", autocast_dtype=torch.bfloat16),
    Precision("fp16", cast_dtype=torch.float16),
    Precision("bf16", cast_dtype=torch.bfloat16),
):
    PRECISIONS.register(_precision.name, _precision)
