"""The real-data options ``clsbench run`` shares with ``diagnose`` (click only; no clsbench CLI import, so cli.py can
use them without an import cycle), and the :class:`~clsbench.core.data_settings.DataSettings` they describe."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from clsbench.core.data_settings import DEFAULT_DATA_TIMEOUT_S, NORMALIZE_WHERE, SYNTHETIC, DataSettings
from clsbench.errors import InvalidInputError

RUN_DATA_OPTIONS = [
    click.option("--data", "data_dir", metavar="DIR",
                 help="Train on the images in DIR (ImageFolder layout: DIR/<class>/<image>) through a real input "
                      "pipeline instead of the resident synthetic batch."),
    click.option("--data-source",
                 help="folder: read the files while training (default with --data); memory: read them into RAM "
                      "first; synthetic: no files (the default without --data)."),
    click.option("--pipeline",
                 help="cpu: decode and augment in DataLoader workers (default); gpu: decode with nvJPEG on the GPU; "
                      "dali: NVIDIA DALI, if installed."),
    click.option("--num-workers", type=int, help="DataLoader workers (default 0, PyTorch's default)."),
    click.option("--pin-memory/--no-pin-memory", default=None,
                 help="Page-locked batches for an asynchronous copy to the GPU (cpu pipeline; default off)."),
    click.option("--persistent-workers/--no-persistent-workers", default=None,
                 help="Keep DataLoader workers alive between epochs (default off)."),
    click.option("--prefetch-factor", type=int,
                 help="Batches prepared ahead per worker (default: PyTorch's 2); gpu pipeline: batches ready ahead."),
    click.option("--prime-cache/--no-prime-cache", default=None,
                 help="Read every file once before timing, so the timed region never sees a cold first pass "
                      "(folder source; default on; the pass is reported as cache_prime_s)."),
    click.option("--normalize-on", "normalize_on", type=click.Choice(NORMALIZE_WHERE),
                 help="cpu pipeline: normalise in the workers (default; float32 batches) or on the device after the "
                      "copy (uint8 batches: a quarter of the bytes to move)."),
    click.option("--gpu-augment", "gpu_augment",
                 help="gpu pipeline: batched (default: a few batched operations per batch, roi_align), separable "
                      "(the antialiased resize as two batched matmuls) or per-image (one antialiased resize per "
                      "image)."),
    click.option("--gpu-decode", "gpu_decode",
                 help="gpu pipeline: nvjpeg (default: nvJPEG on the GPU, in batches), cpu (libjpeg-turbo on a pool "
                      "of threads in the training process, the crops uploaded in one copy per batch) or split (each "
                      "batch shared between the two at once)."),
    click.option("--data-timeout", type=float,
                 help=f"Seconds one batch may take before the measurement fails as data_loader_timeout (default "
                      f"{DEFAULT_DATA_TIMEOUT_S:g})."),
]


def data_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the real-data options to a command (they arrive as keyword arguments; see :func:`data_settings`)."""
    for option in reversed(RUN_DATA_OPTIONS):
        func = option(func)
    return func


def data_settings(data_dir: str | None = None, data_source: str | None = None, pipeline: str | None = None,
                  num_workers: int | None = None, pin_memory: bool | None = None,
                  persistent_workers: bool | None = None, prefetch_factor: int | None = None,
                  prime_cache: bool | None = None, normalize_on: str | None = None,
                  data_timeout: float | None = None, gpu_augment: str | None = None,
                  gpu_decode: str | None = None) -> DataSettings | None:
    """The settings the options describe, or None for synthetic data (no --data, no other data option)."""
    others = {"--pipeline": pipeline, "--num-workers": num_workers, "--pin-memory": pin_memory,
              "--persistent-workers": persistent_workers, "--prefetch-factor": prefetch_factor,
              "--prime-cache": prime_cache, "--normalize-on": normalize_on, "--data-timeout": data_timeout,
              "--gpu-augment": gpu_augment, "--gpu-decode": gpu_decode}
    if data_dir is None:
        given = [name for name, value in others.items() if value is not None]
        if data_source in ("folder", "memory"):
            given.insert(0, f"--data-source {data_source}")
        if given:
            raise InvalidInputError(f"{given[0]} needs --data DIR", "e.g. --data ./images --num-workers 8")
        return None
    if data_source == SYNTHETIC:
        raise InvalidInputError("--data-source synthetic reads no directory", "drop --data, or use folder or memory")
    settings = DataSettings(
        directory=data_dir, source=data_source or "folder", pipeline=pipeline or "cpu",
        num_workers=0 if num_workers is None else num_workers, pin_memory=bool(pin_memory),
        persistent_workers=bool(persistent_workers), prefetch_factor=prefetch_factor,
        prime_cache=True if prime_cache is None else prime_cache, normalize=normalize_on or "worker",
        augment=gpu_augment, decoder=gpu_decode,
        timeout_s=DEFAULT_DATA_TIMEOUT_S if data_timeout is None else data_timeout)
    from clsbench import api

    return api.check_data_settings(settings)


def given(options: dict[str, Any]) -> list[str]:
    """The data options set on the command line (for refusing them where they do not apply)."""
    names = {"data_dir": "--data", "data_source": "--data-source", "pipeline": "--pipeline",
             "num_workers": "--num-workers", "pin_memory": "--pin-memory", "persistent_workers":
             "--persistent-workers", "prefetch_factor": "--prefetch-factor", "prime_cache": "--prime-cache",
             "normalize_on": "--normalize-on", "data_timeout": "--data-timeout",
             "gpu_augment": "--gpu-augment", "gpu_decode": "--gpu-decode"}
    return [names[k] for k, v in options.items() if v is not None and k in names]
