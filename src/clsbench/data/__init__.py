"""Real data for the train workload: where images come from (*sources*) and how they reach the model (*pipelines*).

One small interface per axis (:mod:`clsbench.data.base`), one module per kind, each registered in its folder's
registry (:data:`~clsbench.data.base.SOURCES`, :data:`~clsbench.data.base.PIPELINES`):

* sources (``data/sources/``): ``synthetic`` (the default: a random batch resident on the device, no files),
  ``folder`` (an ImageFolder-style directory read during training), ``memory`` (the same files read once into RAM
  as encoded bytes before timing);
* pipelines (``data/pipelines/``): ``cpu`` (decode and augment in DataLoader workers), ``gpu`` (decode with nvJPEG
  on the GPU in batches, augment there, on a side stream), ``dali`` (NVIDIA DALI, when installed).

Importing this package imports no plug-in (and no torch): the registries load their folders when first asked.
"""

from __future__ import annotations

from typing import Any

from clsbench.core.data_settings import DataSettings

__all__ = ["DataSettings", "get_pipeline", "get_source"]


def get_source(name: str) -> Any:
    """The registered data source ``name``; an unknown name is one error line with the closest names."""
    from clsbench.data.base import SOURCES

    return SOURCES.get(name)


def get_pipeline(name: str) -> Any:
    """The registered pipeline ``name``; an unknown name is one error line with the closest names."""
    from clsbench.data.base import PIPELINES

    return PIPELINES.get(name)
