"""The settings of one real-data measurement: a frozen dataclass, pure Python (no torch), stored in every cell.

A cell without data settings (``Cell.data is None``) trains on the synthetic batch resident on the device, exactly
as before real pipelines existed. A cell with them trains on the images of ``directory``; its settings are part of
the cell's identity (two cells that differ only in ``num_workers`` are two measurements), except the data timeout,
which does not change what is measured, and the dataset fingerprint, which is recorded to refuse a resume after the
files changed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from clsbench.errors import InvalidInputError
from clsbench.results.schema import data_label

#: The source that reads no files (the resident random batch); a setting with real data never names it.
SYNTHETIC = "synthetic"
#: Where the cpu pipeline turns uint8 pixels into normalised floats: in its workers (torchvision's recipe; float32
#: batches cross to the training process and the device) or on the device after the copy (uint8 batches, a quarter
#: of the bytes to move, as the NVIDIA, timm and FFCV loaders do).
NORMALIZE_WHERE = ("worker", "device")

#: Seconds a DataLoader (or a pipeline's producer thread) may take to deliver one batch before the measurement
#: fails as ``data_loader_timeout``. A batch of 256 ImageNet-sized JPEGs takes about 1.5 s on one core, so two
#: minutes only ever trips on a worker that hangs.
DEFAULT_DATA_TIMEOUT_S = 120.0

#: Settings added after result files already held data settings: left out of a stored dict while None, so files
#: written before them (and golden files) keep their bytes, and such files still read back as equal settings.
OMITTED_WHEN_NONE = ("augment", "decoder")

#: Upper limit on DataLoader workers and prefetch: far above any machine's useful values, it only catches typos.
MAX_WORKERS = 1024
MAX_PREFETCH = 64


@dataclass(frozen=True)
class DataSettings:
    """One real-data configuration (the PyTorch DataLoader defaults unless told otherwise).

    Attributes:
        directory: the dataset root (ImageFolder layout: one sub-folder per class), stored absolute.
        source: ``folder`` (files read during training) or ``memory`` (read into RAM, encoded, before timing).
        pipeline: ``cpu``, ``gpu`` or ``dali``.
        num_workers: DataLoader worker processes (cpu: decode and augment; gpu: read encoded bytes; dali: its CPU
            threads, at least 1). 0, PyTorch's default, does the work in the training process.
        pin_memory: page-locked host batches so the copy to the GPU is asynchronous (cpu pipeline only).
        persistent_workers: keep the workers alive from one epoch to the next (needs num_workers > 0).
        prefetch_factor: batches each worker prepares ahead (PyTorch's default 2 when None); for the gpu pipeline,
            the batches decoded ahead on the side stream.
        prime_cache: read every file once before timing (folder source), so the timed region never pays for the
            first, cold pass over the files; that pass is reported as ``cache_prime_s``.
        normalize: cpu pipeline: ``worker`` (float32 batches, normalised in the workers) or ``device`` (uint8
            batches, converted and normalised on the device after the copy).
        augment: gpu pipeline: how it crops, resizes, flips and normalises a decoded batch (``--gpu-augment``, a name
            of :data:`clsbench.data.base.AUGMENTS`: ``batched``, ``separable`` or ``per-image``); None: the
            pipeline's default (``batched``).
        decoder: gpu pipeline: where its JPEGs are decoded (``--gpu-decode``, a name of
            :data:`clsbench.data.base.DECODERS`: ``nvjpeg`` on the GPU, ``cpu`` on a pool of threads, or ``split``
            between the two); None: the pipeline's default (``nvjpeg``).
        timeout_s: seconds one batch may take before the measurement fails (``data_loader_timeout``).
        fingerprint: the dataset's file list and sizes, hashed when the run was planned (not part of the identity).
    """

    directory: str
    source: str = "folder"
    pipeline: str = "cpu"
    num_workers: int = 0
    pin_memory: bool = False
    persistent_workers: bool = False
    prefetch_factor: int | None = None
    prime_cache: bool = True
    normalize: str = "worker"
    augment: str | None = None
    decoder: str | None = None
    timeout_s: float = field(default=DEFAULT_DATA_TIMEOUT_S, compare=False)
    fingerprint: str | None = field(default=None, compare=False)

    def validate(self) -> DataSettings:
        """Raise InvalidInputError on a setting that cannot work whatever the pipeline; return self. The rules of
        one pipeline are that pipeline's (``Pipeline.check``; :func:`clsbench.data.plan.check_settings` runs both)."""
        if self.source == SYNTHETIC:
            raise InvalidInputError(f"data source {self.source!r} does not read a directory",
                                    "use --data-source folder or memory with --data")
        for name, value in (("num_workers", self.num_workers), ("prefetch_factor", self.prefetch_factor)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidInputError(f"{name} must be a whole number, got {value!r}", "e.g. --num-workers 4")
        if not 0 <= self.num_workers <= MAX_WORKERS:
            raise InvalidInputError(f"num_workers must lie in 0..{MAX_WORKERS}, got {self.num_workers}",
                                    "e.g. --num-workers 8")
        if self.prefetch_factor is not None and not 1 <= self.prefetch_factor <= MAX_PREFETCH:
            raise InvalidInputError(f"prefetch_factor must lie in 1..{MAX_PREFETCH}, got {self.prefetch_factor}",
                                    "e.g. --prefetch-factor 4")
        if self.persistent_workers and self.num_workers == 0:
            raise InvalidInputError("persistent workers need num_workers > 0",
                                    "add --num-workers 4, or drop --persistent-workers")
        if self.normalize not in NORMALIZE_WHERE:
            raise InvalidInputError(f"unknown place to normalise {self.normalize!r}",
                                    "choose --normalize-on worker or device")
        if self.augment is not None and (not isinstance(self.augment, str) or not self.augment.strip()):
            raise InvalidInputError(f"the gpu augmentation must be a name, got {self.augment!r}",
                                    "e.g. --gpu-augment batched")
        if self.decoder is not None and (not isinstance(self.decoder, str) or not self.decoder.strip()):
            raise InvalidInputError(f"the gpu decoder must be a name, got {self.decoder!r}", "e.g. --gpu-decode cpu")
        if not self.timeout_s > 0:
            raise InvalidInputError(f"the data timeout must be > 0 seconds, got {self.timeout_s}",
                                    "e.g. --data-timeout 120")
        return self

    def label(self) -> str:
        """Short and unique among the settings that change a measurement
        (:func:`clsbench.results.schema.data_label`)."""
        return data_label(self.to_dict()) or ""

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for name in OMITTED_WHEN_NONE:
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DataSettings:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown data settings {sorted(unknown)}")
        return cls(**data)

