"""The inference-backend interface: one small protocol, one module per backend, one registry.

A *backend* turns a model that a mode has prepared (precision cast, memory format, eval, on its device) into
something the inference workloads call in place of the module: ``eager`` is the module itself; the others export
or compile it into an *artifact* on disk (a frozen TorchScript file, an AOTInductor package, an ONNX graph, a
TensorRT engine), then load that artifact the way a deployment would and run it. Building happens in a child
process (:mod:`clsbench.backends.isolate`), loading and running in the measuring process
(:mod:`clsbench.backends.apply`).

Adding a backend is adding one module to this folder that registers an object with the :class:`Backend` shape in
:data:`BACKENDS`; nothing else changes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from clsbench.core.registry import Registry
from clsbench.core.vocab import Reason
from clsbench.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

#: Reason codes of backend records (the stored vocabulary, :class:`clsbench.core.vocab.Reason`). Skipped: the
#: backend cannot express the request here. Failed: it tried.
SKIPPED_UNSUPPORTED = Reason.UNSUPPORTED_BACKEND  # library missing, device or mode the backend cannot express
FAILED_EXPORT = Reason.EXPORT_ERROR  # the exporter (torch.jit.trace, torch.export, torch.onnx.export) raised
FAILED_BUILD = Reason.BUILD_ERROR  # compiling or serialising the exported graph raised
FAILED_CRASH = Reason.BUILD_CRASH  # the build process died (a signal such as SIGSEGV, or an abrupt exit)
FAILED_TIMEOUT = Reason.BUILD_TIMEOUT  # the build process ran past its time limit and was killed
FAILED_LOAD = Reason.LOAD_ERROR  # the artifact was built but cannot be loaded or run in the measuring process
PARITY_FAILED = Reason.PARITY_FAILED  # outputs outside the documented tolerance: figures kept, never a tune winner
#: The default backend: the prepared PyTorch module itself (no artifact).
EAGER = "eager"

#: Precision tokens of a mode (clsbench.modes.precision) and the dtype of the weights and inputs they run in.
#: amp-* keep fp32 weights and inputs; autocast decides per operator at run time.
PRECISION_DTYPES = {"fp32": "float32", "tf32": "float32", "amp-fp16": "float32", "amp-bf16": "float32",
                    "fp16": "float16", "bf16": "bfloat16"}

#: How a skipped backend tells the user to get its library (also in docs/backends.md).
ONNX_INSTALL_HINT = "pip install 'clsbench[onnx]'"
#: Seconds a build is expected to take, per device type, for a backend that declares no ``build_s`` of its own
#: (tune's cost model before a build of it was observed here). Generous on purpose: an underestimate makes a
#: budgeted search promise what it cannot hold, an overestimate only defers a candidate until the first build of its
#: kind was measured.
DEFAULT_BUILD_S = {"cuda": 90.0, "cpu": 30.0}


def artifact_mode(mode: str) -> str:
    """``mode`` without ``+cudagraph``: what decides an artifact (a CUDA graph is captured around the loaded one)."""
    return "+".join(t for t in mode.split("+") if t.split(":", 1)[0] != "cudagraph")


@dataclass(frozen=True)
class BackendRequest:
    """What one backend measurement asks for: everything that decides the artifact, and nothing that does not.

    Attributes:
        model: the model's canonical name (``resnet50``, ``clsbench_testmodels:tiny``); the build process rebuilds
            the architecture from it (the weights travel separately, see :mod:`clsbench.backends.isolate`).
        mode: the canonical mode name (``bf16+cl``, ``fp32+cudagraph``), as :func:`clsbench.modes.parse_mode`
            spells it.
        batch_size: the batch the artifact is built for; artifacts have static shapes, which lets compilers
            specialise, so another batch size is another artifact.
        input_size: the square input side in pixels.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        seed: seed of the model's random weights (the reference of the parity check is built from it).
        num_classes: size of the classification head.
        workload_kind: ``inference`` (backends apply to inference workloads only).
    """

    model: str
    mode: str
    batch_size: int
    input_size: int
    device: str = "cpu"
    seed: int = 0
    num_classes: int = 1000
    workload_kind: str = "inference"

    @property
    def precision(self) -> str:
        return self.mode.split("+", 1)[0]

    @property
    def modifiers(self) -> frozenset[str]:
        """The mode's modifiers without arguments: ``{"cl", "compile", "cudagraph"}`` or a subset."""
        return frozenset(token.split(":", 1)[0] for token in self.mode.split("+")[1:])

    @property
    def dtype_name(self) -> str:
        """The dtype of the weights and inputs (``float32``, ``float16``, ``bfloat16``)."""
        return PRECISION_DTYPES.get(self.precision, "float32")

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return getattr(torch, self.dtype_name)

    @property
    def channels_last(self) -> bool:
        return "cl" in self.modifiers

    @property
    def cudagraph(self) -> bool:
        return "cudagraph" in self.modifiers

    @property
    def autocast(self) -> bool:
        return self.precision.startswith("amp-")

    @property
    def device_type(self) -> str:
        return self.device.split(":", 1)[0]

    @property
    def device_index(self) -> int:
        """The CUDA device index (0 for a bare ``cuda``); 0 on a CPU."""
        _, _, index = self.device.partition(":")
        return int(index) if index else 0

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch_size, 3, self.input_size, self.input_size)

    @property
    def artifact_mode(self) -> str:
        """The mode without ``+cudagraph``: graph capture wraps a loaded artifact, so both share one build."""
        return artifact_mode(self.mode)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def example(self, *, seed: int = 0) -> torch.Tensor:
        """A seeded batch in the request's dtype and memory format, on its device (the tracing/export input)."""
        import torch

        images = torch.randn(self.input_shape, generator=torch.Generator().manual_seed(seed))
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        return images.to(dtype=self.dtype).contiguous(memory_format=fmt).to(self.device)


@dataclass
class Loaded:
    """A loaded artifact, ready to run in the measuring process.

    Attributes:
        forward: ``forward(x) -> logits``; what the workloads call. It may return a buffer that the next call
            overwrites (IO binding, CUDA graphs), as :class:`clsbench.modes.cudagraph.GraphedForward` does.
        memory_format: the memory format the runner wants its input in (ONNX Runtime and TensorRT take NCHW at
            their boundary whatever layout they use inside); the workloads build inputs in it.
        facts: how it runs, for the result file (``provider``, ``io_binding``, ``cuda_graph``, ...).
    """

    forward: Callable[[Any], Any]
    memory_format: Any = None  # torch.memory_format; None: the request's (channels_last with +cl)
    facts: dict[str, Any] = field(default_factory=dict)


class Backend(Protocol):
    """One inference backend. Implementations are plain classes registered in :data:`BACKENDS`.

    A backend object must be picklable (it travels to the build process) and cheap to construct; importing its
    library happens inside its methods, never at module import, so a missing library only skips that backend.
    """

    name: str
    """The registry name, as ``--backend`` takes it."""

    builds_artifact: bool
    """False for ``eager``, which runs the prepared module itself: no build, no load, no cache."""

    build_imports: tuple[str, ...]
    """Modules the build process imports before its timer starts: importing a library is not build cost."""

    build_s: dict[str, float]
    """Seconds one build typically takes, by device type (``cuda``, ``cpu``), for a ResNet-50 class network: the prior
    of ``clsbench tune``'s cost model until a build of this backend was observed on the machine. Optional: a backend
    without it is priced at :data:`DEFAULT_BUILD_S` (:func:`build_prior_s`)."""

    build_family: str
    """The name of the build process this backend shares with others, whose build times are alike (``export`` and
    ``export-frozen`` are both torch.export + AOTInductor builds): ``clsbench tune`` prices them as one, so a build
    observed for one prices the other. Optional: a backend without it is its own family (:func:`build_family`)."""

    tune_rank: int
    """Where ``clsbench tune`` tries this backend among the others for one mode, lowest first: the one measured
    fastest first, so a budget that runs out leaves out the least promising. Optional: a backend without it comes
    after every ranked one (:func:`tune_rank`)."""

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        """Why this backend cannot run ``request`` here (the measurement is then skipped), or None.

        Cheap and side-effect free: it may look for a library (``importlib.util.find_spec``) but not build.
        A missing library's reason names the install command.
        """
        ...

    def versions(self) -> dict[str, str]:
        """Versions of the libraries the artifact depends on (part of the cache key and of the environment)."""
        ...

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        """Build configurations to try in order; the next one is tried when a build crashes or fails."""
        ...

    def build(self, model: torch.nn.Module, example: torch.Tensor, request: BackendRequest, path: Path,
              variant: str) -> dict[str, Any]:
        """Export/compile ``model`` for ``example``'s shape into files under the folder ``path``.

        Runs in the build process. Raise :class:`BuildStepError` with :data:`FAILED_EXPORT` when the exporter
        itself refuses the model (its first line becomes the record's detail); any other exception is a
        :data:`FAILED_BUILD`.

        Returns:
            Facts about the build (choices made and why), stored with the artifact and in the result.
        """
        ...

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        """Load the artifact in ``path`` (a folder :meth:`build` filled) onto the request's device."""
        ...


class BuildStepError(Exception):
    """A build step failed for a known reason (raised inside :meth:`Backend.build`).

    Args:
        reason: a reason code, :data:`FAILED_EXPORT` or :data:`FAILED_BUILD`.
        detail: one line saying what failed (the library's first line).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


BACKENDS: Registry[Backend] = Registry("backend", package="clsbench.backends", option="--backend")


def build_prior_s(backend: Any, device_type: str) -> float:
    """``backend``'s expected build seconds on ``device_type`` (its ``build_s``, else :data:`DEFAULT_BUILD_S`)."""
    default = DEFAULT_BUILD_S.get(device_type, DEFAULT_BUILD_S["cpu"])
    if not getattr(backend, "builds_artifact", True):
        return 0.0
    return float((getattr(backend, "build_s", None) or {}).get(device_type, default))


def build_family(name: str) -> str:
    """The build family of the backend registered as ``name`` (its ``build_family``, else ``name``; an unknown name
    as it is)."""
    if name not in BACKENDS:
        return name
    return str(getattr(BACKENDS.get(name), "build_family", name))


#: The rank of a backend that states none: after every ranked one, in registration order among themselves.
UNRANKED = 1000


def tune_rank(backend: Any) -> int:
    """``backend``'s place in ``clsbench tune``'s order (its ``tune_rank``, else :data:`UNRANKED`)."""
    return int(getattr(backend, "tune_rank", UNRANKED))


def backend_label(name: str) -> str:
    """``name`` as tables print it: `` (legacy)`` after a backend its library deprecated (TorchScript); an unknown
    name (a file from another clsbench) as it is."""
    if name not in BACKENDS:
        return name
    return f"{name} (legacy)" if getattr(BACKENDS.get(name), "legacy", False) else name


def get_backend(name: str) -> Backend:
    """The backend registered as ``name``.

    Raises:
        InvalidInputError: no such backend; the message is one line with the closest names.
    """
    return BACKENDS.get(name)


def first_line(exc: BaseException, limit: int = 500) -> str:
    """``Type: first line of the message``, the one line a record keeps of an exception."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}"[:limit] if line else type(exc).__name__


def has_module(name: str) -> bool:
    """Whether ``name`` can be imported, without importing it (a broken install counts as missing)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def distribution_version(*names: str) -> str | None:
    """The installed version of the first distribution of ``names`` that is installed, else None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def torch_versions() -> dict[str, str]:
    """torch's version and the CUDA it was built with: every artifact depends on both."""
    import torch

    return {"torch": torch.__version__, "torch_cuda": str(torch.version.cuda)}


def check_inference(request: BackendRequest) -> None:
    """Backends measure inference; raise the one line the CLI prints for a training workload.

    Raises:
        InvalidInputError: the request is for a training workload.
    """
    if request.workload_kind != "inference":
        raise InvalidInputError(
            f"--backend applies to inference workloads only, not {request.workload_kind}",
            "drop --backend for train, or measure infer-latency / infer-throughput",
        )
