"""``torchscript`` deployed (legacy): ``1/model.pt`` for Triton's PyTorch backend (platform ``pytorch_libtorch``).

TorchScript is deprecated upstream; it is written because deployments still run it, and says so in its help text
and in the README it writes. Prefer ``--backend onnxruntime``.

The file is the one ``--backend torchscript`` measures, built by that backend's own build
(:class:`clsbench.backends.torchscript.TorchScript`: ``torch.jit.trace`` then ``torch.jit.freeze``, the same variant
choice), of the network wrapped in :class:`ServedModel`, which does two things the server needs:

- its one argument is called ``images``, and the config names the tensors ``images__0`` and ``logits__0``: the
  ``<name>__<index>`` convention, which Triton's PyTorch backend maps to the module's inputs and outputs by position
  whatever the traced argument is called;
- with ``+cl`` it turns the input into channels_last inside the graph: Triton hands the model contiguous NCHW
  tensors, and the mode that was measured ran NHWC from the first convolution on.

A trace records the operations of one call; an operation that depended on the batch size would be baked in as a
constant, which is why it is traced at batch 2 and checked at other sizes before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from clsbench.backends.base import BackendRequest, Loaded
from clsbench.deploy.base import FORMATS, TRITON_TYPES, TensorSpec

ARTIFACT = "model.pt"
#: Tensor names in Triton's ``<name>__<index>`` convention for the PyTorch backend.
INPUT_NAME = "images__0"
OUTPUT_NAME = "logits__0"


class ServedModel(nn.Module):
    """The network as the server calls it: one argument ``images``; NHWC inside when the mode measured ``+cl``."""

    def __init__(self, model: nn.Module, channels_last: bool) -> None:
        super().__init__()
        self.model = model
        self.channels_last = channels_last

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return self.model(images)


def measured_backend() -> Any:
    """The ``torchscript`` backend whose build this format reuses."""
    from clsbench.backends import get_backend

    return get_backend("torchscript")


class TorchScriptRepo:
    name = "torchscript"
    platform = "pytorch_libtorch"
    artifact = ARTIFACT
    legacy = True
    summary = ("TorchScript (legacy: deprecated upstream) for Triton's PyTorch backend (platform pytorch_libtorch), "
               "traced and frozen as --backend torchscript")
    build_imports = ("torch.jit",)

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return measured_backend().unsupported_reason(request)

    def tensors(self, request: BackendRequest) -> tuple[TensorSpec, TensorSpec]:
        kind = TRITON_TYPES[request.dtype_name]
        return (TensorSpec(INPUT_NAME, kind, (3, request.input_size, request.input_size)),
                TensorSpec(OUTPUT_NAME, kind, (request.num_classes,)))

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return measured_backend().variants(request)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        served = ServedModel(model, request.channels_last).eval()
        facts = measured_backend().build(served, example.contiguous(), request, path, variant)
        return {**facts, "variant": variant, "input": "contiguous NCHW" + (", made channels_last inside the graph"
                                                                          if request.channels_last else "")}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        return measured_backend().load(path, request, build_facts)

    def readme_notes(self, request: BackendRequest) -> list[str]:
        notes = ["legacy: TorchScript is deprecated upstream; prefer --backend onnxruntime. The server's libtorch "
                 f"must read files saved by torch {torch.__version__.split('+')[0]}: a Triton release whose PyTorch "
                 "backend is at least that version"]
        if request.precision in ("fp32", "tf32"):
            notes.append("fp32 weights: whether cuDNN runs the convolutions in TF32 is the server's libtorch setting, "
                         "not the file's")
        return notes


FORMATS.register("torchscript", TorchScriptRepo())
