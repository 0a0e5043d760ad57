"""The ``folder`` source: an ImageFolder-style directory, each file read from disk (or the OS cache) when needed.

Opening scans the directory (:func:`clsbench.data.scan.scan_folder`: usable files, skipped ones named). With
``prime_cache`` (the default) it then reads every file once, in a few threads, before anything is timed, so the
timed region never pays for the first, cold pass over the files; how long that pass took is reported as
``cache_prime_s`` (seconds, large when the files came from disk, small when the OS already cached them). clsbench
never drops the OS cache; a dataset larger than RAM cannot stay cached, and ``--no-prime-cache`` leaves it alone.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from clsbench.core.data_settings import DataSettings
from clsbench.data.base import SOURCES
from clsbench.data.scan import DatasetIndex, scan_folder

#: Threads that read the files once before timing (file reads release the GIL).
PRIME_THREADS = 8
PRIME_CHUNK = 1 << 20


def read_file(path: str) -> torch.Tensor:
    """A file's bytes as a 1-D uint8 tensor (one read into a fresh, writable buffer)."""
    with open(path, "rb") as fh:
        data = bytearray(fh.read())
    return torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _touch(path: str) -> int:
    total = 0
    try:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(PRIME_CHUNK):
                total += len(chunk)
    except OSError:
        pass  # the pipeline names the file if it still cannot be read when its turn comes
    return total


class FolderDataset:
    """Encoded images read from their files on every access."""

    def __init__(self, index: DatasetIndex, setup: dict[str, Any]) -> None:
        self.index = index
        self._facts = setup

    def __len__(self) -> int:
        return len(self.index)

    def read(self, i: int) -> torch.Tensor:
        return read_file(self.index.path(i))

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)


class FolderSource:
    name = "folder"

    def open(self, settings: DataSettings) -> FolderDataset:
        t0 = time.perf_counter()
        index = scan_folder(settings.directory)
        setup: dict[str, Any] = {"scan_s": time.perf_counter() - t0, "cache_prime_s": None}
        if settings.prime_cache:
            t1 = time.perf_counter()
            with ThreadPoolExecutor(PRIME_THREADS) as pool:
                read = sum(pool.map(_touch, (index.path(i) for i in range(len(index))), chunksize=64))
            setup["cache_prime_s"] = time.perf_counter() - t1
            setup["cache_prime_bytes"] = read
        return FolderDataset(index, setup)


SOURCES.register(FolderSource.name, FolderSource())
