"""Inference backends: the axis "how is the network run" (eager PyTorch, TorchScript, torch.export + AOTInductor,
ONNX Runtime, TensorRT), measured by the same inference workloads as the modes.

One module per backend registers itself in :data:`BACKENDS` (``clsbench.core.registry``); the shared machinery
is here: the interface (:mod:`.base`), building in an isolated process (:mod:`.isolate`), the artifact cache
(:mod:`.cache`), output parity against fp32 eager (:mod:`.parity`) and the entry point the worker calls
(:mod:`.apply`). Importing this package imports torch, but no backend library (ONNX Runtime, torch-tensorrt): those
are imported when a backend is asked to build or load.
"""

from clsbench.backends.apply import (
    BackendNotRun,
    apply_backend,
    backend_unsupported_reason,
    check_backend_selection,
    library_versions,
)
from clsbench.backends.base import BACKENDS, Backend, BackendRequest, BuildStepError, Loaded, get_backend
from clsbench.backends.cache import ArtifactCache, default_cache_dir
from clsbench.backends.parity import PARITY_TOLERANCE, check_parity

__all__ = [
    "BACKENDS",
    "PARITY_TOLERANCE",
    "ArtifactCache",
    "Backend",
    "BackendNotRun",
    "BackendRequest",
    "BuildStepError",
    "Loaded",
    "apply_backend",
    "backend_unsupported_reason",
    "check_backend_selection",
    "check_parity",
    "default_cache_dir",
    "get_backend",
    "library_versions",
]
