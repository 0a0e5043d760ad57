"""``tensorrt``: a TensorRT engine, through torch-tensorrt if it is installed, else ONNX Runtime's TensorRT
execution provider if that is installed; with neither, the measurement is skipped with that reason.

TensorRT cannot be installed on the project's machines, so this module is written for a user who has it and
tested up to the library calls (tests/test_backends.py replaces the libraries with stand-ins).

- **torch-tensorrt** (``route: torch_tensorrt``): ``torch_tensorrt.compile(model, ir="dynamo", ...)`` with the
  request's static input (``torch_tensorrt.Input`` in its dtype and memory format, so ``+cl`` means an NHWC input
  binding), the mode's precision as the enabled precision, and TF32 disabled for fp32 (TensorRT allows TF32 by
  default, which would make "fp32" TF32); saved with ``torch_tensorrt.save`` as an exported program (``model.ep``)
  and loaded with ``torch_tensorrt.load(...).module()``. ``+cudagraph`` is a capture around the loaded module.
- **ONNX Runtime's TensorRT provider** (``route: onnxruntime-trt``): the ONNX export of the ``onnxruntime``
  backend, a session on ``TensorrtExecutionProvider`` that builds its engines into the artifact at build time
  (``trt_engine_cache_path``), IO binding at run time; fp16 through ``trt_fp16_enable``; bf16 refused (the ONNX
  graph cannot carry bf16 convolutions); ``+cudagraph`` through ``trt_cuda_graph_enable``. This provider has no
  TF32 switch: fp32 there runs with TensorRT's default (TF32 allowed), which the parity check will show.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from clsbench.backends.base import (
    BACKENDS,
    FAILED_EXPORT,
    BackendRequest,
    BuildStepError,
    Loaded,
    distribution_version,
    first_line,
    has_module,
)
from clsbench.backends.ort import (
    ARTIFACT as ONNX_ARTIFACT,
)
from clsbench.backends.ort import (
    CPU_EP,
    CUDA_EP,
    TRT_EP,
    available_providers,
    build_trt_engines,
    export_onnx,
    load_session,
    onnx_versions,
)

ARTIFACT = "model.ep"
TORCH_TRT = "torch_tensorrt"
ORT_TRT = "onnxruntime-trt"
#: What a user without TensorRT reads (docs/backends.md says the same).
INSTALL_HINT = ("install torch-tensorrt matching your torch (pip install torch-tensorrt), or onnxruntime-gpu with "
                "TensorRT's libraries; TensorRT is user-installed, not a clsbench extra")


def route() -> str | None:
    """Which TensorRT is installed: torch-tensorrt first (it keeps the PyTorch graph), else ONNX Runtime's."""
    if has_module("torch_tensorrt"):
        return TORCH_TRT
    if has_module("onnxruntime"):
        try:
            if TRT_EP in available_providers():
                return ORT_TRT
        except Exception:  # noqa: BLE001 - a broken onnxruntime means no TensorRT through it
            return None
    return None


class TensorRT:
    name = "tensorrt"
    builds_artifact = True
    #: ``tune`` tries it first where it is installed: NVIDIA's inference compiler, what MLPerf's H100 ResNet-50
    #: submissions run. A prior, not a measurement here: TensorRT is not installable on the device machine.
    tune_rank = 10

    @property
    def build_imports(self) -> tuple[str, ...]:
        return ("torch_tensorrt",) if route() == TORCH_TRT else ("torch.onnx", "onnxscript", "onnxruntime")

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        which = route()
        if which is None:
            return f"TensorRT is not installed (neither torch-tensorrt nor onnxruntime's TensorRT provider): " \
                   f"{INSTALL_HINT}"
        if request.device_type != "cuda":
            return f"TensorRT runs on NVIDIA GPUs only; this device is {request.device_type}"
        if which == ORT_TRT:
            if not has_module("onnxscript"):
                return "the ONNX export for onnxruntime's TensorRT provider needs onnxscript: pip install onnxscript"
            if request.dtype_name == "bfloat16":
                return ("bf16 through onnxruntime's TensorRT provider is not expressible (the ONNX graph cannot carry "
                        "bf16 convolutions): use fp16, or install torch-tensorrt")
        return None

    def versions(self) -> dict[str, str]:
        which = route()
        versions: dict[str, str] = {"route": which or "none"}
        if which == TORCH_TRT:
            import torch

            versions["torch"] = torch.__version__
            versions["torch_tensorrt"] = distribution_version("torch-tensorrt", "torch_tensorrt") or "unknown"
            versions["tensorrt"] = distribution_version("tensorrt", "tensorrt-cu12", "tensorrt-cu13") or "unknown"
        elif which == ORT_TRT:
            versions.update(onnx_versions())
            versions["tensorrt"] = distribution_version("tensorrt", "tensorrt-cu12", "tensorrt-cu13") or "unknown"
        return versions

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return (route() or "none",)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        if variant == ORT_TRT:
            facts = export_onnx(model, example, path / ONNX_ARTIFACT)
            facts.update(build_trt_engines(path, request, self._ort_providers()))
            return {"route": ORT_TRT, **facts}
        return build_torch_tensorrt(model, example, request, path)

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        if build_facts.get("route") == ORT_TRT:
            return load_session(path, request, self._ort_providers())
        import torch_tensorrt

        module = torch_tensorrt.load(str(path / ARTIFACT)).module()
        return Loaded(forward=module, facts={"runner": "torch_tensorrt.load(...).module()", "route": TORCH_TRT})

    @staticmethod
    def _ort_providers() -> list[str]:
        available = available_providers()
        return [p for p in (TRT_EP, CUDA_EP, CPU_EP) if p in available]


def build_torch_tensorrt(model: Any, example: Any, request: BackendRequest, path: Path) -> dict[str, Any]:
    """Compile with torch-tensorrt's dynamo front end and save an exported program (see the module's docstring)."""
    import torch
    import torch_tensorrt

    fmt = torch.channels_last if request.channels_last else torch.contiguous_format
    inputs = [torch_tensorrt.Input(shape=tuple(example.shape), dtype=example.dtype, format=fmt)]
    settings: dict[str, Any] = {"enabled_precisions": {request.dtype}}
    if request.precision == "fp32":
        settings["disable_tf32"] = True
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            compiled = torch_tensorrt.compile(model, ir="dynamo", inputs=inputs, **settings)
    except Exception as exc:  # noqa: BLE001 - torch-tensorrt's export or conversion refused the model
        raise BuildStepError(FAILED_EXPORT, f"torch_tensorrt.compile: {first_line(exc)}") from exc
    compile_s = time.perf_counter() - t0
    torch_tensorrt.save(compiled, str(path / ARTIFACT), output_format="exported_program", inputs=[example])
    return {"route": TORCH_TRT, "method": "torch_tensorrt.compile(ir='dynamo') + torch_tensorrt.save",
            "compile_s": compile_s, "enabled_precisions": [str(request.dtype)],
            "disable_tf32": settings.get("disable_tf32", False), "input_format": str(fmt)}


BACKENDS.register("tensorrt", TensorRT())
