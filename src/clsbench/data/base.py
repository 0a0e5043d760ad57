"""The two data interfaces: a *source* gives encoded images, a *pipeline* turns them into batches on the device.

* :class:`DataSource` (``sources/``: ``synthetic``, ``folder``, ``memory``): ``open(settings)`` returns an
  :class:`EncodedDataset` (``read(i)`` gives file ``i``'s encoded bytes as a 1-D uint8 CPU tensor), or None for the
  synthetic source, which has no files (the workload then keeps its resident random batch).
* :class:`Pipeline` (``pipelines/``: ``cpu``, ``gpu``, ``dali``; each also says which of its settings ``clsbench
  diagnose`` should try, :meth:`Pipeline.candidates`): ``open(dataset, spec)``
  returns a :class:`BatchStream` whose ``next()`` gives ``(images, labels)`` on the device, images normalised in
  float32 in the mode's memory format, labels int64; epochs follow one another forever (each a fresh seeded
  permutation, ``drop_last``).

Augmentation is the same everywhere (:mod:`clsbench.data.augment`): RandomResizedCrop to the model's input size
(scale 0.08-1, aspect ratio 3/4-4/3, bilinear with antialiasing), a horizontal flip with probability 1/2, then
normalisation with the ImageNet mean and standard deviation. The crop and flip of image ``i`` in epoch ``e`` come
from a generator seeded with (data seed, e, i), so they do not depend on which worker or thread prepares it.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from clsbench.core.data_settings import DataSettings
from clsbench.core.registry import Registry
from clsbench.data.scan import DatasetIndex
from clsbench.errors import InvalidInputError

#: Where images come from, by name; each module of ``data/sources/`` registers its own.
SOURCES: Registry[Any] = Registry("data source", package="clsbench.data.sources", option="--data-source")
#: How images reach the model, by name; each module of ``data/pipelines/`` registers its own.
PIPELINES: Registry[Any] = Registry("pipeline", package="clsbench.data.pipelines", option="--pipeline")
#: How the gpu pipeline crops, resizes, flips and normalises a decoded batch, by name (``data/augments/``).
AUGMENTS: Registry[Any] = Registry("gpu augmentation", package="clsbench.data.augments", option="--gpu-augment")
#: The augmentation the gpu pipeline uses when the settings name none.
DEFAULT_AUGMENT = "batched"
#: Where the gpu pipeline decodes its JPEGs, by name (``data/decoders/``).
DECODERS: Registry[Any] = Registry("gpu decoder", package="clsbench.data.decoders", option="--gpu-decode")
#: The decoder the gpu pipeline uses when the settings name none.
DEFAULT_DECODER = "nvjpeg"


def ordered_pipelines(names: Iterable[str] | None = None) -> list[Any]:
    """The pipelines (all, or those named), in their :attr:`priority` order: the order diagnose tries them in."""
    chosen = [PIPELINES.get(n) for n in (names if names is not None else PIPELINES.names())]
    return sorted(chosen, key=lambda pipeline: pipeline.priority)


@dataclass(frozen=True)
class BatchSpec:
    """What a pipeline must produce."""

    batch_size: int
    input_size: int
    device: torch.device
    memory_format: torch.memory_format
    dtype: torch.dtype
    seed: int
    settings: DataSettings


class EncodedDataset(Protocol):
    """Encoded images and their labels (``index`` holds names, labels, formats and sizes)."""

    index: DatasetIndex

    def __len__(self) -> int: ...

    def read(self, i: int) -> torch.Tensor:
        """File ``i``'s bytes as a 1-D uint8 CPU tensor (raises OSError when it cannot be read)."""

    def facts(self) -> dict[str, Any]:
        """What the result records about the source (setup times, bytes held in RAM...)."""


class Augment(Protocol):
    """One way to turn decoded images of different sizes into a training batch (``AUGMENTS``)."""

    name: str
    resize: str  # what its resize computes, in words (recorded in the pipeline's facts)

    def apply(self, images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]],
              flips: Sequence[bool], size: int, memory_format: torch.memory_format,
              dtype: torch.dtype) -> torch.Tensor:
        """Crop image ``i`` (uint8, (3, H, W)) to ``boxes[i]`` = (top, left, height, width), resize it to ``size`` x
        ``size``, flip it horizontally where ``flips[i]``, normalise (:data:`clsbench.data.augment.MEAN`, ``STD``);
        return the batch (N, 3, size, size) in ``dtype`` and ``memory_format`` on the images' device."""


class DataSource(Protocol):
    name: str

    def open(self, settings: DataSettings) -> EncodedDataset | None: ...


class BatchStream(Protocol):
    """An endless stream of device batches; ``close()`` stops every worker and thread it started.

    ``next()`` is ``place(take())``: ``take`` waits for the next prepared batch, ``place`` hands it to the device
    (the cpu pipeline's host-to-device copy; the gpu pipeline's stream hand-over), so the two can be timed apart.
    """

    def take(self) -> Any: ...

    def place(self, item: Any) -> tuple[torch.Tensor, torch.Tensor]: ...

    def next(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def drain(self, max_batches: int, wait_s: float) -> int:
        """Throw away the batches already prepared ahead, so timing starts from the pipeline's steady pace."""

    def take_failures(self) -> list[str]:
        """Names of the files that failed to decode since the last call (each was replaced by another image)."""

    def facts(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class StreamRecord:
    """What every stream keeps for its result: epochs started, its facts, and the files that failed to decode."""

    def __init__(self, facts: dict[str, Any]) -> None:
        self.epochs = 0
        self._facts = facts
        self._failures: list[str] = []

    def take_failures(self) -> list[str]:
        out, self._failures = self._failures, []
        return out

    def facts(self) -> dict[str, Any]:
        return {**self._facts, "epochs_started": self.epochs}


class Pipeline(Protocol):
    name: str
    priority: int  # the order pipelines are listed and tried in (lowest first)

    def unsupported_reason(self, device: torch.device, settings: DataSettings) -> str | None:
        """Why this pipeline cannot run here (the measurement is skipped with it), or None."""

    def open(self, dataset: EncodedDataset, spec: BatchSpec) -> BatchStream: ...

    def candidates(self, base: DataSettings, device: str, workers: Sequence[int]) -> list[DataSettings]:
        """The settings of this pipeline that ``clsbench diagnose`` measures, given the worker counts to sweep."""

    def check(self, settings: DataSettings) -> None:
        """Raise InvalidInputError on a setting this pipeline cannot use (``DataSettings.validate`` checks the rest)."""


def check_device_pipeline(name: str, settings: DataSettings) -> None:
    """The cpu pipeline's host-side settings mean nothing to a pipeline that decodes on the device: refuse them."""
    if settings.pin_memory:
        raise InvalidInputError(f"--pin-memory applies to the cpu pipeline, not {name!r}",
                                "the gpu and dali pipelines decode into device memory; drop --pin-memory")
    if settings.normalize != "worker":
        raise InvalidInputError(f"--normalize-on applies to the cpu pipeline, not {name!r}",
                                "the gpu and dali pipelines normalise on the device already; drop it")


def check_no_augment(name: str, settings: DataSettings) -> None:
    """``--gpu-augment`` and ``--gpu-decode`` choose the gpu pipeline's augmentation and decoder: refuse them for
    another pipeline."""
    for option, value in (("--gpu-augment", settings.augment), ("--gpu-decode", settings.decoder)):
        if value is not None:
            raise InvalidInputError(f"{option} applies to the gpu pipeline, not {name!r}",
                                    f"use --pipeline gpu, or drop {option}")


def drain_ready(pop: Any, max_batches: int, wait_s: float) -> int:
    """Pop and discard batches while they come without waiting; stop at the first that took ``wait_s`` or more.

    Returns how many were discarded. Used by every stream's ``drain``: whatever was prepared during the first call
    and warm-up (when the GPU waited on each step's synchronisation) would otherwise be consumed at the start of
    the timed region at no cost, making a slow pipeline look fast for as long as that buffer lasts.
    """
    dropped = 0
    while dropped < max_batches:
        t0 = time.perf_counter()
        pop()
        dropped += 1
        if time.perf_counter() - t0 >= wait_s:
            break
    return dropped


def loader_context() -> object | None:
    """The multiprocessing context for DataLoader workers: ``fork`` where it exists (Linux), so workers start fast and
    share the memory source's buffer without pickling it; else the platform default."""
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def shutdown_loader(iterator: Any, loader: torch.utils.data.DataLoader) -> None:
    """Shut a DataLoader's workers down now rather than at garbage collection (the workloads run with gc disabled):
    those of ``iterator`` and of the loader's own (persistent-workers) iterator; a hung worker is terminated after
    torch's join timeout. Never raises: closing must not mask the measurement's own outcome."""
    for it in (iterator, getattr(loader, "_iterator", None)):
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            try:
                shutdown()
            except Exception:  # noqa: BLE001 - see the docstring
                pass
