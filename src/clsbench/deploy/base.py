"""The deployable-format interface: one small protocol, one module per format, one registry keyed by backend name.

A *deployable format* turns the model a measured backend ran (``--backend onnxruntime``, ``--backend torchscript``)
into the file a Triton Inference Server backend loads: ``onnxruntime_onnx`` reads ``model.onnx``,
``pytorch_libtorch`` reads ``model.pt``. Unlike ``run --backend``'s artifacts, which have static shapes so that
compilers may specialise, a deployed artifact takes a *dynamic* batch dimension: Triton's dynamic batcher forms
batches of any size up to ``max_batch_size`` and hands each to the model as it is.

Adding a format is adding one module to this folder that registers an object with the :class:`DeployFormat` shape
in :data:`FORMATS` under the name of the backend it deploys; nothing else changes. A backend that has no format
(``eager``, ``export``, ``export-frozen``) is refused by :func:`get_format` with one line naming those that exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from clsbench.core.registry import Registry
from clsbench.errors import ClsbenchError, InvalidInputError

if TYPE_CHECKING:
    import torch

    from clsbench.backends.base import BackendRequest, Loaded

#: Triton's tensor data types (``model_config.proto``, enum ``DataType``) of the dtypes an artifact may take.
TRITON_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16", "bfloat16": "TYPE_BF16"}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output as Triton's config declares it.

    Attributes:
        name: the tensor's name in the artifact, which the config must repeat exactly.
        data_type: Triton's ``TYPE_*`` name.
        dims: the shape without the batch dimension (Triton adds it when ``max_batch_size`` > 0).
    """

    name: str
    data_type: str
    dims: tuple[int, ...]


class DeployFormat(Protocol):
    """One deployable format. Implementations are plain classes registered in :data:`FORMATS`.

    The object travels to the build process (:mod:`clsbench.backends.isolate`), so it must be picklable; its
    library is imported inside its methods, never at module import, so a missing library refuses only that format.
    """

    name: str
    """The backend it deploys, as ``--backend`` names it (the registry key)."""

    platform: str
    """Triton's ``platform`` value (``onnxruntime_onnx``, ``pytorch_libtorch``)."""

    artifact: str
    """The file inside the version folder (``1/model.onnx``), Triton's default file name for the platform."""

    legacy: bool
    """Deprecated upstream (TorchScript): said in the help text and in the written README."""

    summary: str
    """One line for help texts and the README: what the format is and what serves it."""

    build_imports: tuple[str, ...]
    """Modules the build process imports before its timer starts (as :class:`clsbench.backends.base.Backend`)."""

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        """Why this format cannot deploy ``request`` (one line that says what to use instead), or None.

        Cheap: it may look for a library but not build.
        """
        ...

    def tensors(self, request: BackendRequest) -> tuple[TensorSpec, TensorSpec]:
        """The artifact's input and output as the config declares them."""
        ...

    def build(self, model: torch.nn.Module, example: torch.Tensor, request: BackendRequest, path: Path,
              variant: str) -> dict[str, Any]:
        """Write :attr:`artifact` into the folder ``path`` with a dynamic batch dimension (in the build process).

        Raises :class:`clsbench.backends.base.BuildStepError` for the exporter's refusal, as a backend's build does.

        Returns:
            Facts about the build (exporter, opset, variant), written into the README.
        """
        ...

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        """Load the artifact in ``path`` on the CPU as a check would: ``forward(x) -> logits`` for any batch."""
        ...

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        """Build configurations to try in order (the backend's own, so the artifact is the one measured)."""
        ...

    def readme_notes(self, request: BackendRequest) -> list[str]:
        """Lines the README adds for this format: what the server decides that the artifact does not."""
        ...


class ExportFailedError(ClsbenchError):
    """The artifact could not be built, or it was built and does not compute the measured network (its outputs
    differ from fp32 eager beyond the parity tolerance). Nothing was written."""

    exit_code = 4  # clsbench.errors.EXIT_MEASUREMENT_FAILED: the work ran and its result is a failure


FORMATS: Registry[DeployFormat] = Registry("deployable format", package="clsbench.deploy", option="--backend")


#: Backends with a Triton format that this clsbench does not write, and why, in one line. A TensorRT plan
#: (``tensorrt_plan``) is an engine TensorRT builds for one GPU model and one TensorRT version, so it must be built
#: where it will be served, with TensorRT, which these machines cannot install: writing one here would mean writing
#: a file nobody checked. The ONNX file serves as well, and Triton's onnxruntime backend can hand it to TensorRT.
NOT_WRITTEN = {
    "tensorrt": ("a TensorRT plan (tensorrt_plan) is built by TensorRT for one GPU model and TensorRT version, on the "
                 "serving machine; clsbench has no TensorRT here to build or check one"),
}


def format_names() -> list[str]:
    """The backends whose Triton format this clsbench writes, in registration order."""
    return FORMATS.names()


def get_format(backend: str) -> DeployFormat:
    """The format that deploys ``backend``.

    Raises:
        InvalidInputError: an unknown backend (one line with the closest names), or a backend that has no Triton
            format (one line naming the formats that exist).
    """
    from clsbench.backends import BACKENDS

    if backend in NOT_WRITTEN:
        raise InvalidInputError(f"--backend {backend}: {NOT_WRITTEN[backend]}",
                                "export with --backend onnxruntime (Triton's onnxruntime backend can run it through "
                                "TensorRT: its optimization.execution_accelerators setting)")
    if backend not in FORMATS:  # `in` loads the folder's modules, so format_names() below is complete
        BACKENDS.get(backend)  # an unknown name: the backends' own line, with the closest names
        names = ", ".join(f"{name} ({FORMATS.get(name).platform})" for name in format_names())
        raise InvalidInputError(
            f"--backend {backend} has no Triton model format: Triton serves {names}",
            f"export with --backend {format_names()[0]}")
    return FORMATS.get(backend)
