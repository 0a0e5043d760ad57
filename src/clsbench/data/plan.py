"""Checks made in the parent before real-data cells are measured, and before such a run is resumed."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path

from clsbench.core.data_settings import DataSettings
from clsbench.data.errors import DataError
from clsbench.data.scan import DatasetIndex, scan_folder
from clsbench.errors import ResultFileError


def check_settings(settings: DataSettings) -> DataSettings:
    """Validate ``settings`` in full: the rules of every setting, the source's and pipeline's names, and the
    pipeline's own rules. Returns ``settings``; raises InvalidInputError (one line) on the first problem."""
    from clsbench.data.base import PIPELINES, SOURCES

    settings.validate()
    SOURCES.get(settings.source)  # an unknown name is one error line with the closest names
    PIPELINES.get(settings.pipeline).check(settings)
    return settings


def prepare_data_settings(settings: DataSettings, batch_sizes: Sequence[int],
                          num_classes: int = 1000) -> tuple[DataSettings, DatasetIndex]:
    """Validate ``settings``, scan the dataset and return the settings to store (absolute directory, fingerprint).

    Raises:
        InvalidInputError: a setting that cannot work.
        DataError: the dataset is missing or unusable, holds fewer images than a batch, or more classes than the
            model has outputs.
    """
    check_settings(settings)
    index = scan_folder(Path(settings.directory))
    largest = max(batch_sizes, default=1)
    if len(index) < largest:
        raise DataError(f"{index.root} has {len(index)} usable images, fewer than one batch of {largest}",
                        "use a smaller --batch-size or more images")
    if len(index.classes) > num_classes:
        raise DataError(f"{index.root} has {len(index.classes)} classes; the models have {num_classes} outputs",
                        "use at most that many class folders")
    return dataclasses.replace(settings, directory=index.root, fingerprint=index.fingerprint), index


def check_data_unchanged(data: Iterable[DataSettings | None], source: str) -> None:
    """Refuse to resume when a dataset of the run is gone or its files changed since the run was planned."""
    seen: set[str] = set()
    for settings in data:
        if settings is None or settings.directory in seen:
            continue
        seen.add(settings.directory)
        try:
            index = scan_folder(settings.directory)
        except DataError as exc:
            raise ResultFileError(f"{source} measured {settings.directory}, which cannot be used now ({exc.message})",
                                  "restore the dataset, or begin a new run") from None
        if settings.fingerprint is not None and index.fingerprint != settings.fingerprint:
            raise ResultFileError(f"{source} measured {settings.directory}, whose files changed since "
                                  f"({settings.fingerprint} -> {index.fingerprint}: file names or sizes)",
                                  "restore the dataset, or begin a new run")


def dataset_warnings(data: Iterable[DataSettings | None]) -> list[str]:
    """What the scan left out of each dataset of a plan, in words (for the CLI's ``warning:`` lines)."""
    out: list[str] = []
    seen: set[str] = set()
    for settings in data:
        if settings is None or settings.directory in seen:
            continue
        seen.add(settings.directory)
        try:
            out += scan_folder(settings.directory).warnings()
        except DataError:
            continue  # planning already refused an unusable dataset; nothing to add here
    return out
