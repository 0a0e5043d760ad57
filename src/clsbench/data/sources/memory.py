"""The ``memory`` source: every usable file read once into RAM, still encoded, before anything is timed.

The "preload the dataset into memory" practice: the timed region never touches the file system. The bytes live
in one uint8 tensor with an offset per file, so DataLoader workers forked from the training process share it
without copying and without touching a Python object per file. Reading it is ``load_s``; a file that can no
longer be read at that moment is left out and named, like the files the scan skipped.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from clsbench.core.data_settings import DataSettings
from clsbench.data.base import SOURCES
from clsbench.data.errors import DataError
from clsbench.data.scan import DatasetIndex, Skipped, scan_folder


class MemoryDataset:
    def __init__(self, index: DatasetIndex, buffer: torch.Tensor, offsets: list[int], setup: dict[str, Any]) -> None:
        self.index = index
        self.buffer = buffer
        self.offsets = offsets  # len(index) + 1 entries
        self._facts = setup

    def __len__(self) -> int:
        return len(self.index)

    def read(self, i: int) -> torch.Tensor:
        return self.buffer[self.offsets[i]:self.offsets[i + 1]]

    def facts(self) -> dict[str, Any]:
        return dict(self._facts)


def _compact(index: DatasetIndex, keep: list[int], lost: list[Skipped]) -> DatasetIndex:
    import dataclasses

    return dataclasses.replace(
        index, files=tuple(index.files[i] for i in keep), labels=tuple(index.labels[i] for i in keep),
        kinds=tuple(index.kinds[i] for i in keep), sizes=tuple(index.sizes[i] for i in keep),
        skipped=index.skipped + tuple(lost))


class MemorySource:
    name = "memory"

    def open(self, settings: DataSettings) -> MemoryDataset:
        t0 = time.perf_counter()
        index = scan_folder(settings.directory)
        scan_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        array = np.empty(index.total_bytes, dtype=np.uint8)
        offsets = [0]
        keep: list[int] = []
        lost: list[Skipped] = []
        for i in range(len(index)):
            start = offsets[-1]
            try:
                with open(index.path(i), "rb", buffering=0) as fh:
                    got = fh.readinto(memoryview(array[start:start + index.sizes[i]]))
                if got != index.sizes[i]:
                    raise OSError(f"read {got} of {index.sizes[i]} bytes (the file changed)")
            except OSError as exc:
                lost.append(Skipped(index.files[i], f"unreadable when loading into memory: {exc}"))
                continue
            keep.append(i)
            offsets.append(start + index.sizes[i])
        if lost:
            if not keep:
                raise DataError(f"no file of {index.root} could be read into memory: {lost[0].reason}")
            index = _compact(index, keep, lost)
        buffer = torch.from_numpy(array[:offsets[-1]])
        setup = {"scan_s": scan_s, "load_s": time.perf_counter() - t1, "bytes_in_memory": int(offsets[-1])}
        return MemoryDataset(index, buffer, offsets, setup)


SOURCES.register(MemorySource.name, MemorySource())
