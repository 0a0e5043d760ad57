"""Real data for the train workload: where images come from (*sources*) and how they reach the model (*pipelines*).

One small interface per axis (:mod:`clsbench.data.base`), one module per kind:

* sources: ``synthetic`` (the default: a random batch resident on the device, no files), ``folder`` (an
  ImageFolder-style directory read during training), ``memory`` (the same files read once into RAM as encoded
  bytes before timing);
* pipelines: ``cpu`` (decode and augment in DataLoader workers), ``gpu`` (decode with nvJPEG on the GPU in
  batches, augment there, on a side stream), ``dali`` (NVIDIA DALI, when installed).

This package imports nothing heavy at import time: :mod:`clsbench.core.plan` imports its :class:`DataSettings`, and
the CLI lists the names without importing torch.
"""

from __future__ import annotations

from typing import Any

from clsbench.core.data_settings import PIPELINES, SOURCES, DataSettings

__all__ = ["PIPELINES", "SOURCES", "DataSettings", "get_pipeline", "get_source"]


def get_source(name: str) -> Any:
    """The source module's object for ``name`` (one of :data:`SOURCES`)."""
    from clsbench.errors import InvalidInputError

    if name == "synthetic":
        from clsbench.data.sources.synthetic import SyntheticSource

        return SyntheticSource()
    if name == "folder":
        from clsbench.data.sources.folder import FolderSource

        return FolderSource()
    if name == "memory":
        from clsbench.data.sources.memory import MemorySource

        return MemorySource()
    raise InvalidInputError(f"unknown data source {name!r}", "choose from: " + ", ".join(SOURCES))


def get_pipeline(name: str) -> Any:
    """The pipeline object for ``name`` (one of :data:`PIPELINES`)."""
    from clsbench.errors import InvalidInputError

    if name == "cpu":
        from clsbench.data.pipelines.cpu import CpuPipeline

        return CpuPipeline()
    if name == "gpu":
        from clsbench.data.pipelines.gpu import GpuPipeline

        return GpuPipeline()
    if name == "dali":
        from clsbench.data.pipelines.dali import DaliPipeline

        return DaliPipeline()
    raise InvalidInputError(f"unknown pipeline {name!r}", "choose from: " + ", ".join(PIPELINES))
