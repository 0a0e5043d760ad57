"""``onnxruntime`` deployed: ``1/model.onnx`` for Triton's onnxruntime backend (platform ``onnxruntime_onnx``).

The graph is the one ``--backend onnxruntime`` measures, exported by the same function
(:func:`clsbench.backends.ort.export_onnx`: ``torch.onnx.export(dynamo=True)``, the same input and output names),
with one difference: its batch dimension is a symbol (``batch``), so Triton's dynamic batcher may hand it any batch.

One file: the exporter writes large weights beside the graph (``model.onnx.data``). A self-contained
``1/model.onnx`` is the layout every Triton release loads; whether a file beside it resolves depends on how the
server's backend opens the graph, which was not checked here, so the weights are folded back into the graph. A
protobuf message, and so one ONNX file, cannot exceed 2 GiB: a network whose weights do is refused with that
reason rather than written in an unchecked layout.

The check loads the file in an ONNX Runtime CPU session (every install has that provider) with every graph
optimisation on, as the server's session will be, and runs it at batch sizes other than the one it was traced at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clsbench.backends.base import FAILED_BUILD, BackendRequest, BuildStepError, Loaded
from clsbench.backends.ort import (
    ARTIFACT,
    CPU_EP,
    INPUT_NAME,
    OUTPUT_NAME,
    export_onnx,
    onnx_unsupported_reason,
)
from clsbench.deploy.base import FORMATS, TRITON_TYPES, TensorSpec

#: protobuf's limit on one serialised message (2 GiB - 1 byte), and so on one ONNX file with its weights inside.
PROTOBUF_LIMIT_BYTES = 2**31 - 1
#: ONNX element types (``onnx.TensorProto.DataType``) as ONNX Runtime names them, and the dtypes they are.
ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16"}


def external_locations(graph: Any) -> set[str]:
    """The files (relative to the graph's folder) that ``graph``'s initialisers keep their data in."""
    import onnx

    return {entry.value for tensor in graph.graph.initializer if tensor.data_location == onnx.TensorProto.EXTERNAL
            for entry in tensor.external_data if entry.key == "location"}


def inline_weights(path: Path) -> dict[str, Any]:
    """Fold weights the exporter wrote beside ``path`` back into it (see the module's docstring); their facts.

    Raises:
        BuildStepError: the weights do not fit in one ONNX file (``build_error``).
    """
    import onnx

    locations = external_locations(onnx.load(str(path), load_external_data=False))
    if not locations:
        return {"weights": "inside model.onnx"}
    data_bytes = sum((path.parent / name).stat().st_size for name in locations)
    if data_bytes + path.stat().st_size > PROTOBUF_LIMIT_BYTES:
        raise BuildStepError(FAILED_BUILD, f"the weights ({data_bytes / 2**30:.2f} GiB) do not fit in one ONNX file "
                                           "(protobuf's 2 GiB limit), which is what Triton's onnxruntime backend reads")
    full = onnx.load(str(path))  # reads the external data and marks every tensor as held inside
    onnx.save_model(full, str(path))
    for name in locations:
        (path.parent / name).unlink()
    return {"weights": f"inside model.onnx (the exporter wrote {data_bytes} bytes beside it; folded in)"}


class OnnxCpuForward:
    """``forward(x) -> logits`` through a CPU session: numpy in, numpy out, any batch size."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.input_name = session.get_inputs()[0].name

    def __call__(self, x: Any) -> Any:
        import torch

        out = self.session.run(None, {self.input_name: x.detach().cpu().contiguous().numpy()})[0]
        return torch.from_numpy(out)


def describe(args: Any) -> list[dict[str, Any]]:
    """Name, dtype and shape (a symbol where dynamic) of a session's inputs or outputs."""
    return [{"name": a.name, "dtype": ORT_TYPES.get(a.type, a.type), "shape": list(a.shape)} for a in args]


class OnnxRepo:
    name = "onnxruntime"
    platform = "onnxruntime_onnx"
    artifact = ARTIFACT
    legacy = False
    summary = "ONNX for Triton's onnxruntime backend (platform onnxruntime_onnx), exported as --backend onnxruntime"
    build_imports = ("torch.onnx", "onnxscript", "onnx", "onnxruntime")

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return onnx_unsupported_reason(request, "export fp16 or fp32 with --backend onnxruntime, or bf16 with "
                                                "--backend torchscript")

    def tensors(self, request: BackendRequest) -> tuple[TensorSpec, TensorSpec]:
        kind = TRITON_TYPES[request.dtype_name]
        return (TensorSpec(INPUT_NAME, kind, (3, request.input_size, request.input_size)),
                TensorSpec(OUTPUT_NAME, kind, (request.num_classes,)))

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("default",)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        # NCHW at the boundary whatever the mode's layout: ONNX defines its inputs so, and Triton hands them so.
        target = path / ARTIFACT
        facts = export_onnx(model, example.contiguous(), target, dynamic_batch=True)
        facts.update(inline_weights(target))
        return facts

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        import onnxruntime
        import torch

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only
        session = onnxruntime.InferenceSession(str(path / ARTIFACT), options, providers=[CPU_EP])
        return Loaded(forward=OnnxCpuForward(session), memory_format=torch.contiguous_format,
                      facts={"runner": f"onnxruntime {onnxruntime.__version__} InferenceSession ({CPU_EP})",
                             "inputs": describe(session.get_inputs()), "outputs": describe(session.get_outputs())})

    def readme_notes(self, request: BackendRequest) -> list[str]:
        notes = []
        if request.channels_last:
            notes.append("+cl: the graph takes NCHW, as ONNX defines its inputs; whether the server runs NHWC kernels "
                         "inside is its ONNX Runtime's choice (clsbench measured the CUDA provider's prefer_nhwc)")
        if request.precision in ("fp32", "tf32"):
            notes.append("fp32 graph: whether its convolutions and matmuls run in TF32 on the GPU is the server's "
                         "ONNX Runtime setting (CUDA provider use_tf32), not the file's")
        return notes


FORMATS.register("onnxruntime", OnnxRepo())
