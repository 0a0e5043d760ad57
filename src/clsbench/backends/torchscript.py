"""``torchscript``: ``torch.jit.trace`` then ``torch.jit.freeze``, saved to ``model.pt`` and loaded with
``torch.jit.load``, as a C++ or Python deployment would load it.

Trace, not script: classification networks are static graphs, and tracing works for every torchvision and timm
model, where scripting fails on many. Freezing inlines the weights as constants, which lets the JIT fold batch norm
into the preceding convolution and drop the module hierarchy.

``torch.jit.optimize_for_inference`` (after freezing) was measured and is off by default: on a CPU it converts
convolutions to MKL-DNN's blocked layout with conversions at the edges, which made ResNet-18 (batch 4, 112x112,
fp32, 2 threads) 1.6x *slower* than freeze alone (527 ms vs 337 ms per batch; eager 368 ms) and MobileNetV3-Small
no faster beyond noise (116 ms vs 124 ms, on a shared 2-core machine); on CUDA it adds conv-add-relu fusions whose
worth against cuDNN's own kernels is not known yet. :data:`OPTIMIZE_FOR_INFERENCE` holds the choice
per device type, and a GPU measurement of both variants is still open (docs/investigations.md, "Backend build variants
outside a run"). The variant that was used is in the result (``variant``: ``freeze`` or ``freeze+optimize``).

TorchScript is deprecated in recent PyTorch (``torch.jit.trace`` warns); it is measured because deployments still
run it. Its profiling executor optimises the graph on the second call; the workloads' warm-up covers that.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from clsbench.backends.base import (
    BACKENDS,
    FAILED_EXPORT,
    BackendRequest,
    BuildStepError,
    Loaded,
    first_line,
    torch_versions,
)

ARTIFACT = "model.pt"
FREEZE = "freeze"
FREEZE_OPTIMIZE = "freeze+optimize"
#: Whether ``optimize_for_inference`` follows freezing, by device type (see the module's docstring for why).
OPTIMIZE_FOR_INFERENCE = {"cpu": False, "cuda": False}


class TorchScript:
    name = "torchscript"
    #: TorchScript is deprecated upstream (PyTorch 2.11 onward): still measured, since deployments still run it,
    #: and labelled so in help texts and tables (:func:`clsbench.backends.base.backend_label`).
    legacy = True
    builds_artifact = True
    build_imports = ("torch.jit",)
    #: Trace and freeze took 1.3-5.0 s on the H200 (ResNet-50 and MobileNetV3-Large, bf16+cl,
    #: benchmarks/results/h200/backends-20261203T185814Z).
    build_s = {"cuda": 5.0, "cpu": 5.0}
    #: ``tune`` tries it last of the ranked backends: on the H100 (ResNet-50 fp16+cl, batch 512, one tune call) it ran
    #: 12,500 img/s against export's 25,661 (benchmarks/results/h100/tune-resnet50-infer-throughput-20261206T193805Z).
    tune_rank = 90

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        import torch

        if not hasattr(torch, "jit") or not hasattr(torch.jit, "freeze"):
            return "this torch has no TorchScript (torch.jit.trace / torch.jit.freeze)"
        return None

    def versions(self) -> dict[str, str]:
        return torch_versions()

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        # The chosen variant first; the other one if it fails (optimize_for_inference has refused models before).
        if OPTIMIZE_FOR_INFERENCE.get(request.device_type, False):
            return (FREEZE_OPTIMIZE, FREEZE)
        return (FREEZE,)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        import torch

        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the deprecation warning of torch.jit.trace, once per build
            try:
                traced = torch.jit.trace(model, example, check_trace=False)
            except Exception as exc:  # noqa: BLE001 - the tracer's refusal is the model's export error
                raise BuildStepError(FAILED_EXPORT, f"torch.jit.trace: {first_line(exc)}") from exc
            frozen = torch.jit.freeze(traced.eval())
            if variant == FREEZE_OPTIMIZE:
                frozen = torch.jit.optimize_for_inference(frozen)
            torch.jit.save(frozen, str(path / ARTIFACT))
        return {"method": "torch.jit.trace + torch.jit.freeze", "optimize_for_inference": variant == FREEZE_OPTIMIZE,
                "why": "optimize_for_inference measured slower on CPU (MKL-DNN layout conversions); see docstring"}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.load's deprecation warning
            module = torch.jit.load(str(path / ARTIFACT), map_location=torch.device(request.device))
        module.eval()
        return Loaded(forward=module, facts={"runner": "torch.jit.load"})


BACKENDS.register("torchscript", TorchScript())
