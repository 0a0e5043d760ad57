"""The ``cpu`` pipeline: a torch DataLoader whose workers decode, crop, flip and normalise, as the torchvision
reference recipes do.

Per image, in a worker (or in the training process with ``num_workers=0``): read the encoded bytes from the source,
decode them (``torchvision.io.decode_image``, libjpeg-turbo or libpng, to RGB uint8), RandomResizedCrop to the input
size on the uint8 image (``transforms.v2.functional.resized_crop``, bilinear, antialiased), flip. Per batch, still in
the worker (the collate function): stack, convert to float32 in the mode's memory format, normalise. The training
process then copies the batch to the device (``non_blocking`` when pinned) on the current stream, so a copy the
GPU waits for counts as idle time.

With ``normalize="device"`` the collate function only stacks the uint8 images (in the mode's memory format), and
the conversion to float32 and the normalisation run on the device after the copy, with the same arithmetic
(:func:`clsbench.data.augment.normalise_`): a batch of 256 at 224 x 224 is 38.5 MB instead of 154 MB to pass from
the workers, pin and copy. On the H200 the float32 batches, not decoding, capped this pipeline: 4 and 8 workers
each decoded about 370 images/s, yet 8, 12 and 16 workers all stopped near 3,000 images/s with the training
process's copy taking 38-44% of the time.

DataLoader options map one to one: ``num_workers``, ``pin_memory``, ``persistent_workers``, ``prefetch_factor``,
and ``timeout`` (the data timeout, when there are workers) so a hung worker fails the measurement as
``data_loader_timeout`` instead of hanging it. Workers are forked (the Linux default), so they share the memory
source's buffer. A file that fails to decode is replaced by the next one of the dataset and named.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from clsbench.core.data_settings import DataSettings
from clsbench.data.augment import MEAN, STD, EpochSampler, choices, normalisation_constants, normalise_
from clsbench.data.base import (
    PIPELINES,
    BatchSpec,
    EncodedDataset,
    StreamRecord,
    check_no_augment,
    drain_ready,
    loader_context,
    shutdown_loader,
)
from clsbench.data.errors import DataError, translate_loader_error
from clsbench.errors import InvalidInputError
from clsbench.system.processes import worker_processes_allowed

#: A file that fails to decode is replaced by the next one; after this many failures in a row the batch fails.
MAX_SUBSTITUTES = 16


def decode_rgb(data: torch.Tensor) -> torch.Tensor:
    """Decode JPEG or PNG bytes on the CPU to an RGB uint8 tensor (3, H, W)."""
    from torchvision.io import ImageReadMode, decode_image

    return decode_image(data, mode=ImageReadMode.RGB)


def decode_with_substitutes(dataset: EncodedDataset, index: int, decode: Any = None) -> tuple[torch.Tensor, int,
                                                                                               list[str]]:
    """Decode image ``index``, or the next ones when it fails; returns (image, the index used, names that failed)."""
    decode = decode or decode_rgb
    failures: list[str] = []
    size = len(dataset)
    for attempt in range(MAX_SUBSTITUTES):
        j = (index + attempt) % size
        try:
            return decode(dataset.read(j)), j, failures
        except Exception:  # noqa: BLE001 - a damaged or vanished file: name it and take the next one
            failures.append(dataset.index.files[j])
    raise DataError(f"{MAX_SUBSTITUTES} files in a row failed to decode in {dataset.index.root}, starting at "
                    f"{dataset.index.files[index]}", "check the dataset with `clsbench data check DIR`")


class DecodeAugment(torch.utils.data.Dataset):
    """Map-style dataset over ``(epoch, index)`` keys: one decoded, cropped and flipped uint8 image each."""

    def __init__(self, encoded: EncodedDataset, size: int, seed: int) -> None:
        self.encoded = encoded
        self.size = size
        self.seed = seed

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, int, list[str]]:
        from torchvision.transforms.v2 import functional as TF

        epoch, index = key
        image, used, failures = decode_with_substitutes(self.encoded, index)
        (top, left, h, w), flip = choices(self.seed, epoch, index, int(image.shape[-2]), int(image.shape[-1]))
        image = TF.resized_crop(image, top, left, h, w, [self.size, self.size], antialias=True)
        if flip:
            image = image.flip(-1)
        return image, self.encoded.index.labels[used], failures


def _empty_batch(shape: tuple[int, ...], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """An uninitialised tensor; in a DataLoader worker, directly in shared memory (as torch's own
    ``default_collate`` does), so handing the batch to the training process copies nothing."""
    if torch.utils.data.get_worker_info() is not None:
        try:
            numel = 1
            for n in shape:
                numel *= n
            element = torch.empty(0, dtype=dtype)
            storage = element._typed_storage()._new_shared(numel, device=element.device)
            return element.new(storage).resize_(*shape)
        except (AttributeError, RuntimeError, TypeError):  # a torch without these internals: an ordinary tensor
            pass
    return torch.empty(shape, dtype=dtype)


class Collate:
    """Normalise each image and write it into the batch in the mode's memory format (runs in the worker).

    Per image: uint8 -> float32, ``(x / 255 - mean) / std`` (small enough to stay in the CPU cache), then one copy
    into its slot of the batch. For channels_last the batch is stored as (N, H, W, C) and returned as an (N, C, H,
    W) view of it, which has channels_last strides.

    With ``normalize=False`` the images are only stacked, as uint8, in the same layout (normalised on the device).
    """

    def __init__(self, channels_last: bool, normalize: bool = True) -> None:
        self.channels_last = channels_last
        self.normalize = normalize
        self.mean = torch.tensor([255.0 * m for m in MEAN]).view(3, 1, 1)
        self.scale = torch.tensor([1.0 / (255.0 * s) for s in STD]).view(3, 1, 1)

    def _pixels(self, image: torch.Tensor) -> torch.Tensor:
        return image.to(torch.float32).sub_(self.mean).mul_(self.scale) if self.normalize else image

    def __call__(self, samples: list[tuple[torch.Tensor, int, list[str]]]) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      list[str]]:
        _, height, width = samples[0][0].shape
        n = len(samples)
        dtype = torch.float32 if self.normalize else torch.uint8
        if self.channels_last:
            storage = _empty_batch((n, height, width, 3), dtype)
            for i, (image, _, _) in enumerate(samples):
                storage[i].copy_(self._pixels(image).permute(1, 2, 0))
            images = storage.permute(0, 3, 1, 2)
        else:
            images = _empty_batch((n, 3, height, width), dtype)
            for i, (image, _, _) in enumerate(samples):
                images[i].copy_(self._pixels(image))
        labels = torch.tensor([s[1] for s in samples], dtype=torch.int64)
        return images, labels, [name for s in samples for name in s[2]]


class LoaderStream(StreamRecord):
    """Endless batches from a DataLoader, copied to the device; a new epoch starts when one ends."""

    def __init__(self, loader: torch.utils.data.DataLoader, spec: BatchSpec, facts: dict[str, Any]) -> None:
        self.loader = loader
        self.spec = spec
        StreamRecord.__init__(self, facts)
        self._iterator: Any = None
        self.began_epoch = False  # whether the last take() started a new epoch (its wait includes the restart)
        # normalize="device": made once here, since creating them copies from pageable memory (a stream sync)
        self._constants = (normalisation_constants(spec.device) if spec.settings.normalize == "device" else None)
        self._new_epoch()

    def _new_epoch(self) -> None:
        with warnings.catch_warnings():
            # torch warns when num_workers exceeds its suggestion (the CPU count); sweeping past it is deliberate.
            warnings.filterwarnings("ignore", message=".*DataLoader will create")
            with worker_processes_allowed():
                self._iterator = iter(self.loader)
        self.epochs += 1

    def _raw(self) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
        self.began_epoch = False
        try:
            try:
                return next(self._iterator)
            except StopIteration:
                self._new_epoch()
                self.began_epoch = True
                return next(self._iterator)
        except (DataError, StopIteration):
            raise
        except Exception as exc:  # noqa: BLE001 - DataLoader errors become data failures with a reason
            translated = translate_loader_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels, failures = self._raw()
        self._failures.extend(failures)
        return images, labels

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.place(self.take())

    def place(self, item: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy to the device on the current stream: asynchronous from pinned memory; from pageable memory the copy
        waits for the work already queued on the stream (the previous step), as a plain ``.to(device)`` does."""
        images, labels = item
        spec = self.spec
        if spec.device.type != "cpu":
            pinned = spec.settings.pin_memory
            images = images.to(spec.device, non_blocking=pinned)
            labels = labels.to(spec.device, non_blocking=pinned)
        if images.dtype == torch.uint8:  # normalize="device": one conversion and the normalisation, on the device
            images = normalise_(images.to(torch.float32), self._constants)
        if images.dtype != spec.dtype:
            images = images.to(spec.dtype)
        return images.contiguous(memory_format=spec.memory_format), labels

    def drain(self, max_batches: int, wait_s: float) -> int:
        if self.spec.settings.num_workers == 0:
            return 0  # nothing is prepared ahead: each batch is made when asked for
        def pop() -> None:
            self._failures.extend(self._raw()[2])

        return drain_ready(pop, max_batches, wait_s)

    def close(self) -> None:
        shutdown_loader(self._iterator, self.loader)
        self._iterator = None


def loader_options(settings: DataSettings, device: torch.device) -> dict[str, Any]:
    """The DataLoader keyword arguments for ``settings`` (timeouts only with workers, as torch requires)."""
    options: dict[str, Any] = {"num_workers": settings.num_workers,
                               "pin_memory": settings.pin_memory and device.type == "cuda"}
    if settings.num_workers > 0:
        options["multiprocessing_context"] = loader_context()
        options["timeout"] = settings.timeout_s
        options["persistent_workers"] = settings.persistent_workers
        options["prefetch_factor"] = settings.prefetch_factor  # None: torch's default (2)
    return options


class CpuPipeline:
    name = "cpu"
    priority = 10

    def candidates(self, base: DataSettings, device: str, workers: Sequence[int]) -> list[DataSettings]:
        """Every worker count, pinned and not on a GPU (persistent workers when there are any), then uint8 batches
        normalised on the device at the largest worker count: a quarter of the bytes to pass, pin and copy."""
        pins = (False, True) if device.startswith("cuda") else (False,)
        out = [dataclasses.replace(base, pipeline="cpu", num_workers=n, pin_memory=pin, persistent_workers=n > 0)
               for n in workers for pin in pins]
        most = max(workers)
        if most > 0:
            out += [dataclasses.replace(base, pipeline="cpu", num_workers=most, pin_memory=pin,
                                        persistent_workers=True, normalize="device") for pin in pins]
        return out

    def unsupported_reason(self, device: torch.device, settings: DataSettings) -> str | None:
        return None

    def check(self, settings: DataSettings) -> None:
        """Raise InvalidInputError on a setting this pipeline cannot use."""
        check_no_augment(self.name, settings)
        if settings.num_workers == 0 and settings.prefetch_factor is not None:
            raise InvalidInputError("prefetch_factor needs num_workers > 0 in the cpu pipeline",
                                    "add --num-workers 4, or drop --prefetch-factor")

    def open(self, dataset: EncodedDataset, spec: BatchSpec) -> LoaderStream:
        settings = spec.settings
        options = loader_options(settings, spec.device)
        loader = torch.utils.data.DataLoader(
            DecodeAugment(dataset, spec.input_size, spec.seed), batch_size=spec.batch_size,
            sampler=EpochSampler(len(dataset), spec.seed), drop_last=True,
            collate_fn=Collate(spec.memory_format == torch.channels_last, normalize=settings.normalize == "worker"),
            **options)
        facts = {"pipeline": "cpu", "decoder": "torchvision.io.decode_image (CPU)", "cpu_count": os.cpu_count(),
                 "normalize": settings.normalize,
                 "batch_dtype": "float32" if settings.normalize == "worker" else "uint8",
                 "pin_memory_used": options["pin_memory"],
                 "prefetch_factor_used": (settings.prefetch_factor or 2) if settings.num_workers else None}
        return LoaderStream(loader, spec, facts)


PIPELINES.register(CpuPipeline.name, CpuPipeline())
