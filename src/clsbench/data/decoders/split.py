"""``split``: each batch shared between nvJPEG on the GPU and libjpeg-turbo on the host's threads, at the same time.

Why (H200, docs/methodology/data.md 16.4.4): beside a training step captured as a CUDA graph, nvJPEG's per-image round
trips pass only while the GPU is idle, so the decode alone paced the pipeline at about 55 ms per batch of 256; the
host's 16 vCPUs decoded a whole batch in about 65 ms. Each can do part of a batch in less time than the step takes,
and together they need the GPU idle for fewer round trips.

Per batch: the first ``share`` of the images (rounded) go to the ``cpu`` decoder's threads
(:meth:`clsbench.data.decoders.cpu.CpuSession.decode_async`), the rest to nvJPEG in the pipeline's decode thread
meanwhile (:func:`clsbench.data.decoders.nvjpeg.decode_batch`); :meth:`SplitSession.place` crops and uploads the
host-decoded images in one copy and hands the GPU-decoded ones on (the ``cpu`` decoder's ``place`` does both).

The share follows the two sides' rates (:func:`next_share`): after each batch, the share that would have made both
finish together, given each side's images per second in that batch, smoothed over batches. It starts at
:data:`START_SHARE` and stays within :data:`SHARE_LIMITS`; the result keeps its mean and last value
(``cpu_share_mean``, ``cpu_share``). Which decoder decoded an image therefore varies from run to run; nvJPEG and
libjpeg-turbo round a few pixel values differently (a grey level or two), which a benchmark of speed can ignore and
a correctness check must not (the pipeline's checks use one decoder).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from clsbench.data.base import DECODERS
from clsbench.data.decoders.cpu import Box, CpuSession, decode_threads
from clsbench.data.decoders.nvjpeg import check_nvjpeg, decode_batch

#: The host's share of the first batch.
START_SHARE = 0.5
#: The host's share never leaves this range (each side keeps some images, so its rate stays measured).
SHARE_LIMITS = (0.05, 0.95)
#: Weight of the latest batch in the smoothed share.
SMOOTHING = 0.3


def next_share(share: float, cpu_images: int, cpu_s: float, gpu_images: int, gpu_s: float) -> float:
    """The host's share for the next batch: the share at which both sides, at this batch's rates, would have
    finished together, smoothed by :data:`SMOOTHING` and kept within :data:`SHARE_LIMITS`. A side with no images
    or no time in this batch leaves the share as it is."""
    if min(cpu_images, gpu_images) <= 0 or min(cpu_s, gpu_s) <= 0:
        return share
    cpu_rate, gpu_rate = cpu_images / cpu_s, gpu_images / gpu_s
    balanced = cpu_rate / (cpu_rate + gpu_rate)
    mixed = (1 - SMOOTHING) * share + SMOOTHING * balanced
    return min(SHARE_LIMITS[1], max(SHARE_LIMITS[0], mixed))


class SplitSession:
    def __init__(self, device: torch.device, threads: int) -> None:
        self.device = device
        self.host = CpuSession(device, threads)
        self.share = START_SHARE
        self._shares: list[float] = []
        self.facts: dict[str, Any] = {"decode_threads": threads, "cpu_share": self.share, "cpu_share_mean": None}

    def decode(self, encoded: Sequence[torch.Tensor | None], kinds: Sequence[str]) -> list[torch.Tensor | None]:
        n = len(encoded)
        k = min(n, max(0, round(self.share * n)))
        start = time.perf_counter()  # the clock the host's threads stamp their end with
        pending = self.host.decode_async(encoded[:k], kinds[:k])
        on_gpu = decode_batch(encoded[k:], kinds[k:], self.device) if k < n else []
        gpu_s = time.perf_counter() - start
        on_host, host_done = pending()
        self._shares.append(self.share)
        self.share = next_share(self.share, k, host_done - start, n - k, gpu_s)
        self.facts.update(cpu_share=round(self.share, 4),
                          cpu_share_mean=round(sum(self._shares) / len(self._shares), 4))
        return list(on_host) + list(on_gpu)

    def place(self, images: Sequence[torch.Tensor], boxes: Sequence[Box]) -> tuple[list[torch.Tensor], list[Box]]:
        return self.host.place(images, boxes)

    def close(self) -> None:
        self.host.close()


class SplitDecoder:
    name = "split"
    description = ("each batch shared between torchvision.io.decode_jpeg on the GPU (nvJPEG) and on the CPU "
                   "(libjpeg-turbo, a pool of threads), the share following their rates")

    def check(self, device: torch.device) -> None:
        decode_threads()
        if device.type == "cuda":
            check_nvjpeg()

    def open(self, device: torch.device) -> SplitSession:
        return SplitSession(device, decode_threads())


DECODERS.register(SplitDecoder.name, SplitDecoder())
