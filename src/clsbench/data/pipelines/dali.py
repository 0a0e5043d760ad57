"""The ``dali`` pipeline: NVIDIA DALI reads the files, decodes them (``mixed``: nvJPEG, with the hardware decoder
where there is one), crops, resizes, flips and normalises on the GPU, with its own prefetching.

Optional: used only when ``nvidia.dali`` can be imported; otherwise the measurement is skipped with the reason.
DALI reads the files itself, so only the ``folder`` source applies (``memory`` is skipped with a reason); it reads
exactly the files the scan kept, with their labels. ``num_workers`` is DALI's CPU thread count (at least 1) and
``prefetch_factor`` its prefetch queue depth (default 2). A file DALI cannot decode fails the measurement (DALI
stops the pipeline); run ``clsbench data check DIR`` first.

**Not verified on a GPU**: at this commit this module has not run (DALI is not installed on the machines it was
written on).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

import torch

from clsbench.core.data_settings import DataSettings
from clsbench.data.augment import CROP_RATIO, CROP_SCALE, FLIP_PROBABILITY, MEAN, STD
from clsbench.data.base import (
    PIPELINES,
    BatchSpec,
    EncodedDataset,
    check_device_pipeline,
    check_no_augment,
    drain_ready,
)
from clsbench.data.errors import DataError, PipelineUnsupportedError
from clsbench.errors import InvalidInputError

DEFAULT_THREADS = 4


def dali_available() -> bool:
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except (ImportError, ValueError):
        return False


#: DALI's CPU threads when no worker count above 0 was asked for.
DEFAULT_DALI_THREADS = 4


class DaliStream:
    def __init__(self, dataset: EncodedDataset, spec: BatchSpec) -> None:
        from nvidia.dali import fn, pipeline_def, types
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        settings = spec.settings
        index = dataset.index
        self.spec = spec
        device_id = spec.device.index if spec.device.index is not None else torch.cuda.current_device()
        channels_last = spec.memory_format == torch.channels_last
        files = [index.path(i) for i in range(len(index))]
        labels = list(index.labels)
        size = spec.input_size

        @pipeline_def(batch_size=spec.batch_size, num_threads=max(1, settings.num_workers or DEFAULT_THREADS),
                      device_id=device_id, seed=spec.seed, prefetch_queue_depth=settings.prefetch_factor or 2)
        def pipe() -> Any:
            jpegs, label = fn.readers.file(files=files, labels=labels, random_shuffle=True, name="reader",
                                           seed=spec.seed)
            images = fn.decoders.image_random_crop(jpegs, device="mixed", output_type=types.RGB,
                                                   random_area=list(CROP_SCALE), random_aspect_ratio=list(CROP_RATIO),
                                                   num_attempts=10)
            images = fn.resize(images, resize_x=size, resize_y=size, antialias=True)
            mirror = fn.random.coin_flip(probability=FLIP_PROBABILITY)
            images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC" if channels_last
                                              else "CHW", mean=[255.0 * m for m in MEAN],
                                              std=[255.0 * s for s in STD], mirror=mirror)
            return images, label.gpu()

        self.pipeline = pipe()
        self.pipeline.build()
        self.iterator = DALIGenericIterator([self.pipeline], ["images", "labels"], reader_name="reader",
                                            last_batch_policy=LastBatchPolicy.DROP, auto_reset=True)
        self.channels_last = channels_last
        self.epochs = 1

    def _raw(self) -> dict[str, torch.Tensor]:
        try:
            return next(self.iterator)[0]
        except StopIteration:
            self.epochs += 1
            return next(self.iterator)[0]
        except RuntimeError as exc:
            raise DataError(f"DALI stopped: {str(exc).strip().splitlines()[0][:300]}",
                            "check the dataset with `clsbench data check DIR`") from exc

    def take(self) -> dict[str, torch.Tensor]:
        return self._raw()

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.place(self.take())

    def place(self, out: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        images = out["images"]
        if self.channels_last:
            images = images.permute(0, 3, 1, 2)  # NHWC storage seen as NCHW: channels_last strides
        labels = out["labels"].reshape(-1).to(torch.int64)
        if images.dtype != self.spec.dtype:
            images = images.to(self.spec.dtype)
        return images.contiguous(memory_format=self.spec.memory_format), labels

    def drain(self, max_batches: int, wait_s: float) -> int:
        return drain_ready(self._raw, max_batches, wait_s)

    def take_failures(self) -> list[str]:
        return []

    def facts(self) -> dict[str, Any]:
        import nvidia.dali

        return {"pipeline": "dali", "dali_version": getattr(nvidia.dali, "__version__", None),
                "decoder": "fn.decoders.image_random_crop (mixed)", "cpu_count": os.cpu_count(),
                "epochs_started": self.epochs}

    def close(self) -> None:
        self.iterator = None
        self.pipeline = None


class DaliPipeline:
    name = "dali"
    priority = 30

    def check(self, settings: DataSettings) -> None:
        """Raise InvalidInputError on a setting this pipeline cannot use."""
        check_device_pipeline(self.name, settings)
        check_no_augment(self.name, settings)
        if settings.persistent_workers:
            raise InvalidInputError("--persistent-workers does not apply to dali (its threads live for the whole "
                                    "run)", "drop --persistent-workers")

    def candidates(self, base: DataSettings, device: str, workers: Sequence[int]) -> list[DataSettings]:
        """One setting: DALI reading the folder itself, with as many CPU threads as the most workers (4 if none)."""
        threads = max(workers) if max(workers) > 0 else DEFAULT_DALI_THREADS
        return [dataclasses.replace(base, source="folder", pipeline="dali", num_workers=threads, pin_memory=False,
                                    persistent_workers=False)]

    def unsupported_reason(self, device: torch.device, settings: DataSettings) -> str | None:
        if device.type != "cuda":
            return "DALI's GPU pipeline needs CUDA (this measurement runs on the CPU)"
        if not dali_available():
            return "NVIDIA DALI is not installed (pip install nvidia-dali-cuda120, or the wheel for your CUDA)"
        if settings.source != "folder":
            return "DALI reads the files itself: use --data-source folder"
        return None

    def open(self, dataset: EncodedDataset, spec: BatchSpec) -> DaliStream:
        reason = self.unsupported_reason(spec.device, spec.settings)
        if reason:
            raise PipelineUnsupportedError(reason)
        return DaliStream(dataset, spec)


PIPELINES.register(DaliPipeline.name, DaliPipeline())
