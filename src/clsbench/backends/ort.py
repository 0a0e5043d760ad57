"""``onnxruntime``: ONNX export with PyTorch's current exporter, run by an ONNX Runtime ``InferenceSession``.

Build (in the build process): ``torch.onnx.export(..., dynamo=True)`` (the torch.export-based exporter, which
needs ``onnxscript``) writes ``model.onnx`` with a static input shape; with the TensorRT execution provider the
build also creates a session once, so TensorRT builds its engines into the artifact's ``trt/`` folder and a load
only deserialises them.

Load (in the measuring process): a session with every graph optimisation on (``ORT_ENABLE_ALL``) on the best
execution provider installed, in the order TensorRT, CUDA, CPU; the provider the session actually uses is recorded
(ONNX Runtime falls back silently when a provider's libraries are missing). On a GPU, inputs and outputs stay on
the device through IO binding: the session reads a bound input buffer and writes a bound output buffer, both torch
tensors, by address. A call copies its input into the bound buffer unless the caller passes that buffer
(``static_input``, as the throughput workload does), runs, and returns the bound output, overwritten by the next
call. ONNX Runtime runs on a stream of its own (``user_compute_stream``); the call orders it after and before the
caller's stream with stream waits, not host synchronisations. On a CPU the same binding runs without copies.

Modes: fp32, tf32 (CUDA's ``use_tf32``, which ONNX Runtime otherwise turns on even for fp32) and fp16 (the graph
is exported in fp16). bf16 is refused: ONNX Runtime has no bfloat16 convolution kernel in its CPU or CUDA
provider. ``+cl`` on a GPU asks the CUDA provider for NHWC kernels (``prefer_nhwc``); the input stays NCHW at the
boundary, as ONNX defines it. On a CPU ``+cl`` is refused: ONNX Runtime picks its own blocked layout there.
``+cudagraph`` uses the provider's own CUDA graphs (``enable_cuda_graph``, which needs the IO binding above).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from clsbench.backends.base import (
    BACKENDS,
    FAILED_EXPORT,
    ONNX_INSTALL_HINT,
    BackendRequest,
    BuildStepError,
    Loaded,
    distribution_version,
    first_line,
    has_module,
    torch_versions,
)

ARTIFACT = "model.onnx"
TRT_CACHE_DIR = "trt"
INPUT_NAME = "images"
OUTPUT_NAME = "logits"
#: The symbolic name of the batch dimension of a dynamic-batch export (``export_onnx(dynamic_batch=True)``).
DYNAMIC_BATCH_DIM = "batch"
TRT_EP = "TensorrtExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
#: Execution providers in the order of preference on a GPU (the issue's: TensorRT, then CUDA).
GPU_PROVIDERS = (TRT_EP, CUDA_EP)
#: ONNX element types of the dtypes a session may take or return.
_ONNX_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}


def onnx_libraries_missing() -> str | None:
    """What is missing for ONNX export and ONNX Runtime, with the install command; None when all is there."""
    missing = [m for m in ("onnx", "onnxscript", "onnxruntime") if not has_module(m)]
    if missing:
        return f"{', '.join(missing)} not installed: {ONNX_INSTALL_HINT}"
    return None


def onnx_unsupported_reason(request: BackendRequest, bf16_alternative: str) -> str | None:
    """What every ONNX artifact refuses, whoever builds it (this backend, ``export --triton-repo``): missing
    libraries, and bf16, which ONNX Runtime cannot convolve; ``bf16_alternative`` ends that line with what to use."""
    missing = onnx_libraries_missing()
    if missing:
        return missing
    if request.dtype_name == "bfloat16":
        return f"ONNX Runtime has no bfloat16 convolution kernel (CPU or CUDA provider): {bf16_alternative}"
    return None


def onnx_versions() -> dict[str, str]:
    versions = torch_versions()
    for dist in ("onnx", "onnxscript"):
        version = distribution_version(dist)
        if version:
            versions[dist] = version
    runtime = distribution_version("onnxruntime-gpu", "onnxruntime")
    if runtime:
        versions["onnxruntime"] = runtime
    return versions


def available_providers() -> list[str]:
    import onnxruntime

    return list(onnxruntime.get_available_providers())


def planned_provider(request: BackendRequest, available: list[str] | None = None) -> str | None:
    """The provider a session for ``request`` will ask for first, or None when none fits the device."""
    if request.device_type != "cuda":
        return CPU_EP
    available = available_providers() if available is None else available
    return next((p for p in GPU_PROVIDERS if p in available), None)


def export_onnx(model: Any, example: Any, path: Path, *, dynamic_batch: bool = False) -> dict[str, Any]:
    """Export ``model`` for ``example``'s static shape to ``path`` (``model.onnx``, weights beside it if large).

    Args:
        model: the prepared module (its dtype is the graph's).
        example: the tracing input.
        path: the ``.onnx`` file to write.
        dynamic_batch: make the first input dimension a symbol (``batch``) instead of ``example``'s batch size, as
            a server's dynamic batcher needs (``clsbench export --triton-repo``); the measured backend keeps static
            shapes. ``example`` must then have a batch of at least 2: torch.export specialises a dimension of 1.

    Raises:
        BuildStepError: the exporter refused the model (``export_error``, with its first line).
    """
    import torch

    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if dynamic_batch:
        extra["dynamic_shapes"] = ({0: torch.export.Dim(DYNAMIC_BATCH_DIM)},)
    try:
        with torch.no_grad():
            torch.onnx.export(model, (example,), str(path), dynamo=True, input_names=[INPUT_NAME],
                              output_names=[OUTPUT_NAME], verbose=False, **extra)
    except Exception as exc:  # noqa: BLE001 - an unsupported operator is the model's export error
        raise BuildStepError(FAILED_EXPORT, f"torch.onnx.export: {first_line(exc)}") from exc
    facts: dict[str, Any] = {"exporter": "torch.onnx.export(dynamo=True)", "export_s": time.perf_counter() - t0}
    if dynamic_batch:
        facts["dynamic_batch"] = True
    try:
        import onnx

        graph = onnx.load(str(path), load_external_data=False)
        facts["opset"] = next((o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")), None)
        facts["nodes"] = len(graph.graph.node)
    except Exception as exc:  # noqa: BLE001 - descriptive extras only
        facts["opset"] = f"unreadable: {first_line(exc)}"
    return facts


def provider_options(provider: str, request: BackendRequest, path: Path, stream: int | None) -> dict[str, Any]:
    """The options of one execution provider for ``request`` (see the module's docstring for each choice)."""
    options: dict[str, Any] = {}
    if provider in (CUDA_EP, TRT_EP):
        options["device_id"] = request.device_index
        if stream is not None:
            options["user_compute_stream"] = str(stream)
    if provider == CUDA_EP:
        options["use_tf32"] = 1 if request.precision == "tf32" else 0  # ONNX Runtime's default is on, even for fp32
        if request.channels_last:
            options["prefer_nhwc"] = 1
        if request.cudagraph:
            options["enable_cuda_graph"] = 1
    if provider == TRT_EP:
        options.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(path / TRT_CACHE_DIR),
                       trt_timing_cache_enable=True, trt_timing_cache_path=str(path / TRT_CACHE_DIR))
        if request.dtype_name == "float16":
            options["trt_fp16_enable"] = True
        if request.cudagraph:
            options["trt_cuda_graph_enable"] = True
    return options


def make_session(path: Path, request: BackendRequest, providers: list[str], stream: int | None) -> Any:
    """An InferenceSession on ``path/model.onnx`` with ``ORT_ENABLE_ALL`` and the providers in order."""
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: fallbacks are recorded as facts, not printed
    if request.device_type == "cpu":
        # The same thread budget as torch gets in the worker, so the CPU comparison is like for like.
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
    chain = [(p, provider_options(p, request, path, stream)) for p in providers]
    return onnxruntime.InferenceSession(str(path / ARTIFACT), options, providers=chain)


class OrtForward:
    """``forward(x) -> logits`` on a session through IO binding (see the module's docstring)."""

    def __init__(self, session: Any, request: BackendRequest, stream: Any) -> None:
        import numpy as np
        import onnxruntime
        import torch

        self.session = session
        device = torch.device(request.device)
        inp, out = session.get_inputs()[0], session.get_outputs()[0]
        in_dtype = getattr(torch, _ONNX_TYPES.get(inp.type, "float32"))
        out_dtype = getattr(torch, _ONNX_TYPES.get(out.type, "float32"))
        out_shape = [d if isinstance(d, int) else None for d in out.shape]
        if None in out_shape:  # a static export has none; fall back to (batch, classes)
            out_shape = [request.batch_size, request.num_classes]
        self.static_input = torch.empty(request.input_shape, dtype=in_dtype, device=device)
        self.output = torch.empty(out_shape, dtype=out_dtype, device=device)
        kind = "cuda" if device.type == "cuda" else "cpu"
        self._binding = session.io_binding()
        self._binding.bind_input(inp.name, kind, request.device_index, np.dtype(_ONNX_TYPES.get(inp.type, "float32")),
                                 list(self.static_input.shape), self.static_input.data_ptr())
        self._binding.bind_output(out.name, kind, request.device_index,
                                  np.dtype(_ONNX_TYPES.get(out.type, "float32")), list(self.output.shape),
                                  self.output.data_ptr())
        self._run_options = onnxruntime.RunOptions()
        self._stream = stream  # ONNX Runtime's stream on a GPU (a torch.cuda.Stream), None on a CPU
        if stream is not None:
            # Ordering is kept with stream waits below; the host need not wait for every run.
            self._run_options.add_run_config_entry("disable_synchronize_execution_providers", "1")

    def __call__(self, x: Any) -> Any:
        import torch

        if x is not self.static_input:
            if tuple(x.shape) != tuple(self.static_input.shape):
                raise ValueError(f"session built for {tuple(self.static_input.shape)}, got {tuple(x.shape)}")
            self.static_input.copy_(x, non_blocking=True)
        if self._stream is None:
            self.session.run_with_iobinding(self._binding, self._run_options)
            return self.output
        caller = torch.cuda.current_stream()
        self._stream.wait_stream(caller)
        self.session.run_with_iobinding(self._binding, self._run_options)
        caller.wait_stream(self._stream)
        return self.output


def load_session(path: Path, request: BackendRequest, providers: list[str]) -> Loaded:
    """A session on ``providers`` (in order) wrapped in :class:`OrtForward`; the facts say what it really uses."""
    import torch

    stream = torch.cuda.Stream(device=request.device) if request.device_type == "cuda" else None
    session = make_session(path, request, providers, stream.cuda_stream if stream is not None else None)
    used = session.get_providers()
    forward = OrtForward(session, request, stream)
    facts: dict[str, Any] = {"runner": "onnxruntime.InferenceSession", "provider": used[0] if used else None,
                             "providers_requested": providers, "providers_in_session": used,
                             "graph_optimization_level": "ORT_ENABLE_ALL", "io_binding": True}
    if request.device_type == "cpu":
        facts["intra_op_num_threads"] = torch.get_num_threads()
    if request.cudagraph and used and used[0] in (CUDA_EP, TRT_EP):
        option = "enable_cuda_graph" if used[0] == CUDA_EP else "trt_cuda_graph_enable"
        facts["cuda_graph"] = f"{used[0]}'s own ({option})"
    if used and providers and used[0] != providers[0]:
        facts["provider_fallback"] = f"asked for {providers[0]}, the session runs on {used[0]}"
    if request.device_type == "cuda" and not set(used) & set(GPU_PROVIDERS):
        raise RuntimeError(f"the session runs on {used[0] if used else 'nothing'}, not on the GPU (its provider's "
                           "CUDA libraries may be missing)")
    return Loaded(forward=forward, memory_format=torch.contiguous_format, facts=facts)


class OnnxRuntime:
    name = "onnxruntime"
    builds_artifact = True
    #: ``tune`` tries it after the torch.export backends (ranks 20 and 30), which are measured on the GPUs here;
    #: ONNX Runtime's GPU providers are not (onnxruntime-gpu is not on the device machine).
    tune_rank = 40
    build_imports = ("torch.onnx", "onnxscript", "onnx", "onnxruntime")

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        reason = onnx_unsupported_reason(request, "use fp16 or fp32 with --backend onnxruntime")
        if reason:
            return reason
        if request.device_type == "cpu" and request.channels_last:
            return ("+cl: ONNX Runtime's CPU provider chooses its own (blocked) layout at ORT_ENABLE_ALL; "
                    "measure onnxruntime on a CPU without +cl")
        if request.device_type == "cuda" and planned_provider(request) is None:
            installed = ", ".join(available_providers())
            return (f"this onnxruntime has no GPU execution provider (installed: {installed}): "
                    "pip install onnxruntime-gpu")
        return None

    def versions(self) -> dict[str, str]:
        return onnx_versions()

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("default",)

    def providers(self, request: BackendRequest) -> list[str]:
        """The providers a session asks for, in order: the planned one, then the fallbacks ONNX Runtime may use."""
        if request.device_type != "cuda":
            return [CPU_EP]
        available = available_providers()
        return [p for p in (*GPU_PROVIDERS, CPU_EP) if p in available]

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        facts = export_onnx(model, example, path / ARTIFACT)
        providers = self.providers(request)
        facts["provider_planned"] = providers[0]
        if providers[0] == TRT_EP:
            facts.update(build_trt_engines(path, request, providers))
        return facts

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        return load_session(path, request, self.providers(request))


def build_trt_engines(path: Path, request: BackendRequest, providers: list[str]) -> dict[str, Any]:
    """Create a TensorRT-provider session once and run it, so its engines are built into ``path/trt``."""
    import torch

    t0 = time.perf_counter()
    (path / TRT_CACHE_DIR).mkdir(exist_ok=True)
    loaded = load_session(path, request, providers)
    loaded.forward(request.example().contiguous())
    torch.cuda.synchronize()
    return {"trt_engine_build_s": time.perf_counter() - t0, "trt_provider_used": loaded.facts.get("provider")}


BACKENDS.register("onnxruntime", OnnxRuntime())
