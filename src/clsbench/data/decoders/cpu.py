"""``cpu``: decode on a pool of threads in the training process, crop there, send the crops to the GPU in one copy.

Why: on the H200, torchvision's nvJPEG decode makes about 250 round trips through the GPU per batch of 256, and
beside a training step captured as a CUDA graph each one waits (docs/investigations.md, "nvJPEG's decode beside a
captured step": 13-18 ms per batch alone, about 450 ms beside a busy GPU); the decode thread became the pipeline's
limit (55 ms per batch while training).
Decoding on the host needs the GPU only for one copy per batch, and the augmentation then works on crops.

Per batch, on ``threads`` threads (one contiguous share of the batch each; the training thread and the pipeline's
stage threads keep their CPUs):

1. :meth:`CpuSession.decode`: libjpeg-turbo through ``torchvision.io.decode_jpeg`` on CPU tensors (a damaged file
   is found and reported as by the ``nvjpeg`` decoder: :func:`clsbench.data.decoders.nvjpeg.decode_batch` on the
   CPU). torchvision's decode gives up the interpreter's lock (the GIL) while it decodes, so the threads decode in
   parallel;
2. :meth:`CpuSession.place`: each image's crop box (chosen by the pipeline from the image's size) is copied out of
   the decoded image, row by row in the decoder's own height x width x channel layout, into one page-locked buffer
   (NumPy copies, which also run without the GIL and without PyTorch's intra-op thread pool); the buffer goes to the
   device in one asynchronous copy on the current stream (the pipeline's decode stream). PyTorch's caching host
   allocator keeps the buffer from reuse until that copy has completed. The augmentation gets each crop as a
   (3, h, w) view on the device with the box (0, 0, h, w): the same pixels as the box of the decoded image, so every
   augmentation computes the same batch from either decoder (tests/test_augment.py holds this).

Off a GPU (CPU tests) the buffer is ordinary memory and stays where it is.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from clsbench.data.base import DECODERS
from clsbench.data.decoders.nvjpeg import decode_batch
from clsbench.errors import InvalidInputError

#: CPUs left to the training thread and the pipeline's read, decode and augment threads.
RESERVED_CPUS = 4
#: Environment variable that sets the number of decode threads (default: the usable CPUs less RESERVED_CPUS).
THREADS_ENV = "CLSBENCH_GPU_DECODE_THREADS"
#: The most decode threads the variable accepts (only catches typos).
MAX_THREADS = 512

Box = tuple[int, int, int, int]


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def decode_threads(environ: Any = None) -> int:
    """The number of decode threads: :data:`THREADS_ENV`, else the usable CPUs less :data:`RESERVED_CPUS` (>= 1)."""
    raw = (os.environ if environ is None else environ).get(THREADS_ENV, "").strip()
    if not raw:
        return max(1, usable_cpus() - RESERVED_CPUS)
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_THREADS:
        raise InvalidInputError(f"{THREADS_ENV}={raw!r} is not a number of threads",
                                f"set it to a whole number from 1 to {MAX_THREADS}, or unset it")
    return int(raw)


def shares(n: int, parts: int) -> list[range]:
    """``range(n)`` cut into at most ``parts`` contiguous, non-empty pieces of nearly equal size."""
    parts = max(1, min(parts, n))
    bounds = [n * k // parts for k in range(parts + 1)]
    return [range(a, b) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


class CpuSession:
    """A pool of decode threads for one pipeline (:meth:`close` ends them)."""

    def __init__(self, device: torch.device, threads: int) -> None:
        self.device = device
        self.threads = threads
        self.pool = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix="clsbench-gpu-decode-cpu")
        self.facts: dict[str, Any] = {"decode_threads": threads}

    def decode(self, encoded: Sequence[torch.Tensor | None], kinds: Sequence[str]) -> list[torch.Tensor | None]:
        """Step 1 of the module docstring: host images (3, H, W) uint8, None where a file failed."""
        return self.decode_async(encoded, kinds)()[0]

    def decode_async(self, encoded: Sequence[torch.Tensor | None], kinds: Sequence[str]) -> Any:
        """Start step 1 on the pool and return at once; calling the result waits and returns ``(images, done_at)``:
        the images as :meth:`decode` returns them and the ``time.perf_counter()`` at which the last thread finished
        (the ``split`` decoder's balance of the two decoders)."""
        cpu = torch.device("cpu")
        parts = shares(len(encoded), self.threads)

        def work(r: range) -> tuple[list[torch.Tensor | None], float]:
            return decode_batch([encoded[i] for i in r], [kinds[i] for i in r], cpu), time.perf_counter()

        futures = [self.pool.submit(work, r) for r in parts]

        def result() -> tuple[list[torch.Tensor | None], float]:
            out: list[torch.Tensor | None] = [None] * len(encoded)
            finished = [] if futures else [time.perf_counter()]
            for r, future in zip(parts, futures, strict=True):
                images, at = future.result()
                finished.append(at)
                for i, image in zip(r, images, strict=True):
                    out[i] = image
            return out, max(finished)

        return result

    def place(self, images: Sequence[torch.Tensor], boxes: Sequence[Box]) -> tuple[list[torch.Tensor], list[Box]]:
        """Step 2 of the module docstring: the crops on the device and their boxes (each the whole crop). Images that
        are on a GPU already (the ``split`` decoder's nvJPEG share) are handed on with their boxes."""
        on_gpu = self.device.type == "cuda"
        host = [i for i, image in enumerate(images) if not (on_gpu and image.is_cuda)]
        if not host:
            return list(images), list(boxes)
        sizes = [3 * boxes[i][2] * boxes[i][3] for i in host]
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        buffer = torch.empty(offsets[-1], dtype=torch.uint8, pin_memory=on_gpu)
        flat = buffer.numpy()

        def copy(r: range) -> None:
            for n in r:
                top, left, h, w = boxes[host[n]]
                source = images[host[n]].permute(1, 2, 0).numpy()  # the decoder's height x width x channel layout
                np.copyto(flat[offsets[n]:offsets[n + 1]].reshape(h, w, 3), source[top:top + h, left:left + w])

        for _ in self.pool.map(copy, shares(len(host), self.threads)):
            pass
        placed = buffer.to(self.device, non_blocking=True) if on_gpu else buffer
        crops, crop_boxes = list(images), list(boxes)
        for n, i in enumerate(host):
            _, _, h, w = boxes[i]
            crops[i] = placed[offsets[n]:offsets[n + 1]].view(h, w, 3).permute(2, 0, 1)
            crop_boxes[i] = (0, 0, h, w)
        return crops, crop_boxes

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class CpuDecoder:
    name = "cpu"
    description = "torchvision.io.decode_jpeg on the CPU (libjpeg-turbo), on a pool of threads; crops uploaded"

    def check(self, device: torch.device) -> None:
        decode_threads()

    def open(self, device: torch.device) -> CpuSession:
        return CpuSession(device, decode_threads())


DECODERS.register(CpuDecoder.name, CpuDecoder())
