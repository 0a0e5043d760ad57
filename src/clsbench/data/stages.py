"""Each stage of a decode-on-device pipeline measured alone: read, decode, augment, one after the other.

A pipeline's stages overlap while it runs, so its pace is that of the slowest stage; which one that is cannot be
seen from the running pipeline. :func:`measure_stages` runs them one at a time on the same images, in the training
process before training starts (nothing else runs), on ``batches`` batches of the first seeded epoch, after one
untimed batch per stage (decoder start-up, first kernel launches):

* **read**: the encoded bytes of each file of the batch from the source, on one thread (``dataset.read``);
* **decode**: the batch's bytes to uint8 images, on the device (``decode``: the gpu pipeline's decoder, by default its
  batched nvJPEG call; the ``cpu`` decoder's threads and its copy of the whole images to the device; in CPU tests,
  torchvision's CPU decoder); a file that fails is named and replaced by another image of the batch;
* **augment**: each given augmentation (:data:`clsbench.data.base.AUGMENTS`) on the last decoded batch, with the
  crops and flips of a different epoch for every timed batch.

Per stage it stores the images and the host seconds (the device synchronised at both ends), and from the
:class:`DeviceMeter`: the device time of each batch (CUDA events around it, on the current stream: the GPU time the
stage takes from the model when they share the GPU; on a GPU with a hardware JPEG decoder the decode's events also
span the decoder's own work) and the peak device memory allocated above what was allocated before the stage, with
the bytes of the batch it leaves (decoded images; the augmented batch). Raw figures only: rates and the slowest
stage are derived by :func:`clsbench.analysis.data.stage_figures`.

The event span of a batch is not the GPU time it takes from the model: a stage whose host work (Python, kernel
launches) is slower than its kernels spans more than it computes. :func:`measure_stage_busy` measures, after the
timed region (so that a profiler never runs before or during it), the decode and each augmentation alone again
under ``busy`` (the union of the GPU's kernel and copy intervals per batch,
:func:`clsbench.measure.busy.gpu_busy_per_iteration`): the SM and copy-engine time each really takes. The hardware
JPEG decoder's own work is not a kernel, so the decode's figure is what it adds on the SMs and copy engines.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from clsbench.data.augment import EpochSampler, choices
from clsbench.data.base import Augment, BatchSpec, EncodedDataset
from clsbench.data.errors import DataError
from clsbench.measure.clock import NS_PER_S

#: Timed batches per stage (each after one untimed batch): enough to average a few batches of a GPU stage, short
#: enough (well under a second per stage at batch 256 on an H200) to run before every gpu-pipeline measurement.
STAGE_BATCHES = 4
#: Batches profiled per stage by :func:`measure_stage_busy` (after one untimed batch).
BUSY_BATCHES = 2

#: ``busy(run_once, iterations)``: the GPU's busy time per call of ``run_once``
#: (:func:`clsbench.measure.busy.gpu_busy_per_iteration`'s record).
BusyMeter = Callable[[Callable[[], Any], int], dict[str, Any]]

#: ``decode(encoded, positions)``: the images of a batch (None where decoding failed) from its encoded bytes (None
#: where a file could not be read).
Decoder = Callable[[Sequence[torch.Tensor | None], Sequence[int]], list[torch.Tensor | None]]


class DeviceMeter(Protocol):
    """What the device says about a stage: its time per batch and its memory."""

    timer: str  # how batches are timed on the device ("cuda_events"), or "none"

    def synchronize(self) -> None: ...

    def begin(self) -> None:
        """Mark the start of one batch's device work (on the current stream)."""

    def end(self) -> None:
        """Mark its end."""

    def batch_ms(self) -> list[float] | None:
        """Device milliseconds of each batch marked since :meth:`reset` (after :meth:`synchronize`), or None."""

    def reset(self) -> None:
        """Forget the batches marked, and start the peak-memory reading from what is allocated now."""

    def peak_bytes(self) -> int | None:
        """Peak bytes allocated since :meth:`reset`, above what was allocated then, or None."""

    def release(self) -> None:
        """Give cached memory back and clear the peak readings (the measurement's own peak starts afterwards)."""


class HostMeter:
    """A CPU: its work is synchronous and host-timed; there is no device time or device memory to read."""

    timer = "none"

    def synchronize(self) -> None:
        pass

    def begin(self) -> None:
        pass

    def end(self) -> None:
        pass

    def batch_ms(self) -> list[float] | None:
        return None

    def reset(self) -> None:
        pass

    def peak_bytes(self) -> int | None:
        return None

    def release(self) -> None:
        pass


class CudaMeter:
    """CUDA events on the current stream around each batch; ``torch.cuda`` peak-allocation statistics."""

    timer = "cuda_events"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._marks: list[tuple[Any, Any]] = []
        self._base = 0

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def begin(self) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._marks.append((event, None))

    def end(self) -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        self._marks[-1] = (self._marks[-1][0], event)

    def batch_ms(self) -> list[float] | None:
        return [float(start.elapsed_time(stop)) for start, stop in self._marks if stop is not None]

    def reset(self) -> None:
        self._marks = []
        torch.cuda.reset_peak_memory_stats(self.device)
        self._base = int(torch.cuda.memory_allocated(self.device))

    def peak_bytes(self) -> int | None:
        return int(torch.cuda.max_memory_allocated(self.device)) - self._base

    def release(self) -> None:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)


def stage_batches(dataset: EncodedDataset, spec: BatchSpec, batches: int) -> list[list[tuple[int, int]]]:
    """The ``(epoch, index)`` keys of the first ``batches`` batches of the seeded order (as the pipeline would take
    them; fewer when the dataset holds fewer, at least one)."""
    keys = list(EpochSampler(len(dataset), spec.seed))
    count = max(1, min(batches, len(keys) // spec.batch_size))
    return [keys[b * spec.batch_size:(b + 1) * spec.batch_size] for b in range(count)]


def _timed(meter: DeviceMeter, clock: Any, work: Callable[[int], Any], count: int) -> tuple[float, Any]:
    """Run ``work(b)`` for b in 0..count-1 between two synchronisations, each batch marked on the device; return
    the host seconds and the last result."""
    meter.synchronize()
    meter.reset()
    start = clock.now_ns()
    last = None
    for b in range(count):
        last = None  # the previous batch's memory is free before the next one starts
        meter.begin()
        last = work(b)
        meter.end()
    meter.synchronize()
    return (clock.now_ns() - start) / NS_PER_S, last


def _record(stage: str, images: int, seconds: float, meter: DeviceMeter, **extra: Any) -> dict[str, Any]:
    return {"stage": stage, **extra, "images": images, "seconds": seconds, "batch_ms": meter.batch_ms(),
            "peak_bytes": meter.peak_bytes()}


def _complete(images: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """Put another image of the batch in the place of each image that did not decode (as the pipeline does)."""
    good = [i for i, image in enumerate(images) if image is not None]
    if not good:
        raise DataError(f"no image of a batch of {len(images)} could be decoded",
                        "check the dataset with `clsbench data check DIR`")
    return [image if image is not None else images[good[n % len(good)]]  # type: ignore[misc]
            for n, image in enumerate(images)]


def _read(dataset: EncodedDataset, keys: list[tuple[int, int]]) -> list[torch.Tensor | None]:
    out: list[torch.Tensor | None] = []
    for _, index in keys:
        try:
            out.append(dataset.read(index))
        except OSError:
            out.append(None)  # named with the decode failures
    return out


def measure_stages(dataset: EncodedDataset, spec: BatchSpec, *, decode: Decoder, augments: Sequence[Augment],
                   meter: DeviceMeter, clock: Any, batches: int = STAGE_BATCHES) -> dict[str, Any]:
    """Read, decode and augment (each of ``augments``; the first is the one the pipeline uses) measured alone
    (module docstring). Returns the raw record stored in the result's data facts (``data.stages``)."""
    keys = stage_batches(dataset, spec, batches + 1)
    warm, work = keys[0], (keys[1:] if len(keys) > 1 else keys)  # one batch: it warms up and is timed
    count, images_n = len(work), len(work) * spec.batch_size
    failures: set[str] = set()

    def decode_batch(encoded: list[torch.Tensor | None], batch: list[tuple[int, int]]) -> list[torch.Tensor | None]:
        out = decode(encoded, [index for _, index in batch])
        failures.update(dataset.index.files[index] for (_, index), image in zip(batch, out, strict=True)
                        if image is None)
        return out

    decode_batch(_read(dataset, warm), warm)  # warm-up: the file cache, the decoder's start-up
    start = clock.now_ns()
    encoded = [_read(dataset, batch) for batch in work]
    stages = [{"stage": "read", "images": images_n, "seconds": (clock.now_ns() - start) / NS_PER_S,
               "batch_ms": None, "peak_bytes": None}]

    decode_s, decoded = _timed(meter, clock, lambda b: decode_batch(encoded[b], work[b]), count)
    images = _complete(decoded)
    stages.append(_record("decode", images_n, decode_s, meter,
                          batch_bytes=sum(int(image.numel()) * image.element_size() for image in images)))

    def augment_batch(augment: Augment, epoch: int) -> torch.Tensor:
        picked = [choices(spec.seed, epoch, index, int(image.shape[-2]), int(image.shape[-1]))
                  for (_, index), image in zip(work[-1], images, strict=True)]
        return augment.apply(images, [box for box, _ in picked], [flip for _, flip in picked], spec.input_size,
                             spec.memory_format, spec.dtype)

    for augment in augments:
        augment_batch(augment, 0)  # warm-up
        augment_s, out = _timed(meter, clock, lambda b, a=augment: augment_batch(a, b + 1), count)
        stages.append(_record("augment", images_n, augment_s, meter, augment=augment.name,
                              batch_bytes=int(out.numel()) * out.element_size()))
        del out
    meter.release()
    return {"batch_size": spec.batch_size, "batches": count, "read_threads": 1, "device_timer": meter.timer,
            "augment": augments[0].name if augments else None, "stages": stages,
            "decode_failures": sorted(failures)}


def measure_stage_busy(dataset: EncodedDataset, spec: BatchSpec, *, decode: Decoder, augments: Sequence[Augment],
                       busy: BusyMeter, batches: int = BUSY_BATCHES) -> dict[str, Any]:
    """The GPU busy time per batch of the decode and of each augmentation, each alone (module docstring), on the
    first batch of the seeded order (the crops of epochs 1, 2, ... for the augmentations). Returns
    ``{"batches": n, "decode": record, "augment": {name: record}}`` with ``busy``'s records."""
    (keys,) = stage_batches(dataset, spec, 1)
    encoded = _read(dataset, keys)
    indices = [index for _, index in keys]
    images = _complete(decode(encoded, indices))  # untimed: the decoder's start-up
    out: dict[str, Any] = {"batches": batches, "decode": busy(lambda: decode(encoded, indices), batches),
                           "augment": {}}
    epoch = itertools.count(1)

    def augment_batch(augment: Augment) -> torch.Tensor:
        e = next(epoch)
        picked = [choices(spec.seed, e, index, int(image.shape[-2]), int(image.shape[-1]))
                  for index, image in zip(indices, images, strict=True)]
        return augment.apply(images, [box for box, _ in picked], [flip for _, flip in picked], spec.input_size,
                             spec.memory_format, spec.dtype)

    for augment in augments:
        augment_batch(augment)  # untimed
        out["augment"][augment.name] = busy(lambda a=augment: augment_batch(a), batches)
    return out
