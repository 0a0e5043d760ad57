"""The container's classic failures, checked before a run: a ``/dev/shm`` too small for the DataLoader workers' batches,
no GPU passed in (or no driver library), a CPU quota below what the run keeps busy, a memory limit below an in-memory
dataset. Each check names the flag that fixes it.

The checks read container facts (:func:`clsbench.system.container.container_facts`, or a result file's
``environment.container``) and what the run will ask for; they read no file themselves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from clsbench.errors import InvalidInputError
from clsbench.system.container_limits import NO_LIMIT
from clsbench.system.container_text import describe_container, fact_at, fact_reason, format_bytes

__all__ = [
    "DEFAULT_LOADER_BATCH_SIZE",
    "MEMORY_HEADROOM_BYTES",
    "PYTORCH_DEFAULT_PREFETCH",
    "container_checks",
    "loader_batch_bytes",
    "shm_bytes_needed",
]

PYTORCH_DEFAULT_PREFETCH = 2
"""``torch.utils.data.DataLoader``'s default ``prefetch_factor``: each worker keeps up to two finished batches
waiting for the training process."""

DEFAULT_LOADER_BATCH_SIZE = 32
"""The batch assumed for the ``/dev/shm`` estimate when the caller gives none: the seed suite's training batch."""

# One image as a cpu-pipeline worker hands it over: 3 x 224 x 224 (most torchvision models' input), float32 when
# normalised in the worker, uint8 when normalised on the device (--normalize-on device).
IMAGE_SIZE = 224
CHANNELS = 3
FLOAT32_BYTES = 4
UINT8_BYTES = 1

MEMORY_HEADROOM_BYTES = 2 * 2**30
"""What the training process needs in RAM besides an in-memory dataset: Python with torch and its libraries loaded,
the model, and batches in flight. The quick suite's CPU workers peaked at 444-878 MiB resident (ResNet-18 training
at batch 8 the most); a CUDA context adds a few hundred MiB more. Two GiB leaves room for that, not for a second
copy of the dataset."""

SHM_SUGGESTION_STEP_BYTES = 2**30
"""``--shm-size`` suggestions are rounded up to whole GiB, with room for one more batch per worker."""


def loader_batch_bytes(batch_size: int, input_size: int = IMAGE_SIZE, *, uint8: bool = False) -> int:
    """The bytes of one batch as a DataLoader worker hands it over through shared memory.

    Args:
        batch_size: images per batch.
        input_size: the side of the square input (224 for most torchvision models).
        uint8: batches normalised on the device (``--normalize-on device``) cross as uint8, a quarter of float32.
    """
    per_value = UINT8_BYTES if uint8 else FLOAT32_BYTES
    return batch_size * CHANNELS * input_size * input_size * per_value


def shm_bytes_needed(num_workers: int, batch_bytes: int, prefetch_factor: int | None = None) -> int:
    """What the DataLoader workers keep in ``/dev/shm`` at once.

    Each worker returns its batches through shared memory (torch.multiprocessing's file-descriptor strategy creates
    them in ``/dev/shm``) and keeps up to ``prefetch_factor`` of them waiting; the batch being trained on stays
    there until the training process lets it go. So: ``(workers x prefetch + 1) x batch``. Exceeding the
    file system's size kills a worker with SIGBUS ("bus error") as it writes the batch.
    """
    if num_workers <= 0:
        return 0
    prefetch = PYTORCH_DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor
    return (num_workers * prefetch + 1) * batch_bytes


def container_checks(
    facts: Mapping[str, Any],
    *,
    device: str,
    num_workers: int = 0,
    prefetch_factor: int | None = None,
    batch_bytes: int | None = None,
    data_source: str | None = None,
    dataset_bytes: int | None = None,
    cpu_threads: int | None = None,
) -> list[dict]:
    """The container's classic failures, checked against what this run will ask for, each with its fix.

    Args:
        facts: a dict from :func:`container_facts` (or read back from a result file's ``environment.container``).
        device: ``cpu``, ``cuda`` or ``cuda:N``: the device the run measures on.
        num_workers: DataLoader worker processes per measurement (0 for the synthetic batch or ``--num-workers 0``).
        prefetch_factor: batches each worker keeps ready (None: PyTorch's default, 2).
        batch_bytes: bytes of the largest batch a worker hands over (:func:`loader_batch_bytes`); None assumes the
            seed suite's training batch of 32 ImageNet-sized float32 images.
        data_source: ``memory`` when the dataset is read into RAM first (``--data-source memory``).
        dataset_bytes: the dataset's size on disk, what ``--data-source memory`` holds in RAM.
        cpu_threads: the intra-op threads torch will use (``torch.get_num_threads()``); it sets the CPU demand of
            a run on the CPU.

    Returns:
        Entries ``{"check", "status", "message"}`` in the pre-flight format, in this order: ``container`` (info
        or ok), ``shm``, ``container_gpu`` (only in a container), ``cpu_quota``, ``memory_limit``. ``warn``
        means the run will fail or be slowed by the limit; the message names the flag that fixes it.

    Raises:
        InvalidInputError: a negative worker count, prefetch factor, batch or dataset size.
    """
    for name, value in (("num_workers", num_workers), ("prefetch_factor", prefetch_factor),
                        ("batch_bytes", batch_bytes), ("dataset_bytes", dataset_bytes), ("cpu_threads", cpu_threads)):
        if value is not None and value < 0:
            raise InvalidInputError(f"{name} must not be negative, got {value}")
    inside = bool(facts.get("in_container"))
    checks = [_entry("container", *_container_check(facts))]
    checks.append(_entry("shm", *_shm_check(facts, inside, num_workers, prefetch_factor, batch_bytes)))
    if inside:
        checks.append(_entry("container_gpu", *_gpu_check(facts, device)))
    checks.append(_entry("cpu_quota", *_cpu_check(facts, inside, device, num_workers, cpu_threads)))
    checks.append(_entry("memory_limit", *_memory_check(facts, inside, data_source, dataset_bytes)))
    return checks


def _entry(check: str, status: str, message: str) -> dict:
    return {"check": check, "status": status, "message": message}


def _container_check(facts: Mapping[str, Any]) -> tuple[str, str]:
    if not facts.get("in_container"):
        return "ok", "not in a container (no marker found)"
    return "info", f"in a container: {describe_container(facts)}"


def _shm_check(facts: Mapping[str, Any], inside: bool, num_workers: int, prefetch_factor: int | None,
               batch_bytes: int | None) -> tuple[str, str]:
    size = fact_at(facts, "shm.size_bytes")
    shown = format_bytes(size) if isinstance(size, int) else None
    if num_workers == 0:
        return "ok", f"no DataLoader workers: /dev/shm ({shown or 'size unknown'}) carries no batches"
    if not isinstance(size, int):
        return "unavailable", f"/dev/shm size unknown ({fact_reason(facts, 'shm.size_bytes')})"
    batch = loader_batch_bytes(DEFAULT_LOADER_BATCH_SIZE) if batch_bytes is None else batch_bytes
    need = shm_bytes_needed(num_workers, batch, prefetch_factor)
    prefetch = PYTORCH_DEFAULT_PREFETCH if prefetch_factor is None else prefetch_factor
    workers = f"{num_workers} DataLoader worker{'s' if num_workers != 1 else ''}"
    estimate = f"{workers} with {prefetch} batches each in flight need about {format_bytes(need)} " \
               f"({num_workers * prefetch + 1} batches of {format_bytes(batch)})"
    if need <= size:
        return "ok", f"/dev/shm {shown} holds what {estimate}"
    suggested = math.ceil((need + num_workers * batch) / SHM_SUGGESTION_STEP_BYTES)
    fix = (f"start the container with --ipc=host (the host's /dev/shm) or --shm-size={suggested}g"
           if inside else f"enlarge it (mount -o remount,size={suggested}G /dev/shm)")
    return "warn", (f"/dev/shm is {shown} but {estimate}: the workers will die with \"bus error\"; {fix}, "
                    "or lower --num-workers")


def _gpu_check(facts: Mapping[str, Any], device: str) -> tuple[str, str]:
    nodes = fact_at(facts, "gpu.device_nodes") or []
    visible = fact_at(facts, "gpu.nvidia_visible_devices")
    capabilities = fact_at(facts, "gpu.nvidia_driver_capabilities")
    libcuda = fact_at(facts, "gpu.libcuda")
    fix = ("start it with --gpus all (Docker with the NVIDIA Container Toolkit) or --device nvidia.com/gpu=all "
           "(Podman or Docker with a CDI spec from `nvidia-ctk cdi generate`)")
    toolkit = f"NVIDIA_VISIBLE_DEVICES={visible}" if visible is not None else "NVIDIA_VISIBLE_DEVICES unset"
    if not nodes:
        if not device.startswith("cuda"):
            if visible is not None or fact_at(facts, "image.base_env.CUDA_VERSION"):
                return "info", f"no GPU visible in this container ({toolkit}); the run uses the CPU. To use the " \
                               f"GPUs, {fix}"
            return "ok", "device is cpu; no GPU passed into this container"
        hint = ""
        if visible in ("void", "none", ""):
            hint = f" ({toolkit} hides them even from the toolkit)"
        return "warn", f"no GPU visible in this container: no /dev/nvidia<N> device node{hint}; {fix}"
    shown = ", ".join(nodes)
    count = len(nodes)
    described = f"{count} GPU{'s' if count != 1 else ''} visible ({shown}), {toolkit}"
    driver = fact_at(facts, "gpu.driver_version")
    if driver:
        described += f", driver {driver}"
    if libcuda is None:
        caps = f"NVIDIA_DRIVER_CAPABILITIES={capabilities}" if capabilities is not None else \
            "NVIDIA_DRIVER_CAPABILITIES unset"
        return "warn", (f"{described}, but the driver library libcuda.so.1 was not mounted in ({caps}): CUDA cannot "
                        "start; set NVIDIA_DRIVER_CAPABILITIES=compute,utility (-e) and use --gpus all or the CDI "
                        "device rather than passing /dev/nvidia* by hand")
    return "ok", f"{described}, {libcuda}"


def _cpu_demand(device: str, num_workers: int, cpu_threads: int | None) -> tuple[int, str]:
    """How many CPUs the run keeps busy at once, and in words."""
    workers = f"{num_workers} DataLoader worker{'s' if num_workers != 1 else ''}" if num_workers else ""
    if not device.startswith("cuda") and cpu_threads:
        parts = [f"{cpu_threads} torch thread{'s' if cpu_threads != 1 else ''}"] + ([workers] if workers else [])
        return cpu_threads + num_workers, " + ".join(parts)
    parts = ([workers] if workers else []) + ["the training process"]
    return num_workers + 1, " + ".join(parts)


def _cpu_check(facts: Mapping[str, Any], inside: bool, device: str, num_workers: int,
               cpu_threads: int | None) -> tuple[str, str]:
    demand, who = _cpu_demand(device, num_workers, cpu_threads)
    quota = fact_at(facts, "cgroup.cpu_quota_cpus")
    cpuset = fact_at(facts, "cgroup.cpuset_count")
    where = f"cpuset {fact_at(facts, 'cgroup.cpuset_cpus')}: {cpuset} CPUs" if isinstance(cpuset, int) else "cpuset n/a"
    if quota is None:
        if fact_reason(facts, "cgroup.cpu_quota_cpus") != NO_LIMIT:
            return "unavailable", f"CPU quota unknown ({fact_reason(facts, 'cgroup.cpu_quota_cpus')}); {where}"
        return "ok", f"no CPU quota ({where})"
    throttled = fact_at(facts, "cgroup.cpu_throttled_periods")
    history = f"; throttled in {throttled} periods so far" if isinstance(throttled, int) and throttled else ""
    if quota + 1e-9 >= demand:
        return "ok", f"CPU quota {quota:g} CPUs covers {who} ({demand}){history}"
    fix = f"give it --cpus={demand}" if inside else f"raise the cgroup's CPU quota to {demand} CPUs"
    if not device.startswith("cuda") and cpu_threads:
        # torch sizes its thread pool from the CPUs it may run on (the cpuset), not from the quota.
        fix += f", or set OMP_NUM_THREADS={max(1, math.floor(quota) - num_workers)}"
    if num_workers:
        fix += f", or lower --num-workers to {max(0, math.floor(quota) - 1)}"
    period_ms = (fact_at(facts, 'cgroup.cpu_period_us') or 100000) / 1000
    return "warn", (f"CPU quota of {quota:g} CPUs is below the {demand} that {who} keep busy: the kernel stops the "
                    f"whole cgroup for the rest of each {period_ms:g} ms "
                    f"period once the quota is spent, so the run is throttled{history}; {fix}")


def _memory_check(facts: Mapping[str, Any], inside: bool, data_source: str | None,
                  dataset_bytes: int | None) -> tuple[str, str]:
    hard, high = fact_at(facts, "cgroup.memory_limit_bytes"), fact_at(facts, "cgroup.memory_high_bytes")
    usage = fact_at(facts, "cgroup.memory_usage_bytes")
    now = f", {format_bytes(usage)} in use" if isinstance(usage, int) else ""
    # memory.high (v2) does not kill: the kernel reclaims and stalls the cgroup above it, which an in-memory dataset
    # (anonymous memory, no swap in containers as a rule) turns into a crawl. The lower of the two is what counts.
    limits = [v for v in (hard, high) if isinstance(v, int)]
    limit = min(limits) if limits else None
    shown = (f"memory limit {format_bytes(limit)}" + (" (memory.high)" if limit == high and limit != hard else "")
             if limit is not None else "")
    if limit is None and fact_reason(facts, "cgroup.memory_limit_bytes") != NO_LIMIT:
        return "unavailable", f"memory limit unknown ({fact_reason(facts, 'cgroup.memory_limit_bytes')})"
    if data_source != "memory":
        return ("info", f"{shown}{now}") if limit is not None else ("ok", f"no memory limit{now}")
    if dataset_bytes is None:
        return "unavailable", "--data-source memory with a dataset of unknown size: the limit cannot be checked"
    if limit is None:
        return "ok", f"no memory limit for the {format_bytes(dataset_bytes)} dataset cache (--data-source memory)"
    need = dataset_bytes + MEMORY_HEADROOM_BYTES
    if need <= limit:
        return "ok", (f"{shown} holds the {format_bytes(dataset_bytes)} dataset cache (--data-source memory) and "
                      f"about {format_bytes(MEMORY_HEADROOM_BYTES)} for the training process")
    suggested = math.ceil(need / 2**30)
    fix = f"start the container with --memory={suggested}g" if inside else \
        f"raise the cgroup's limit to {suggested} GiB"
    ending = "the OOM killer will end the run" if limit == hard else "the kernel will stall the run reclaiming memory"
    return "warn", (f"{shown} is below the {format_bytes(dataset_bytes)} dataset cache (--data-source memory) plus "
                    f"about {format_bytes(MEMORY_HEADROOM_BYTES)} for the training process: {ending}; {fix} or use "
                    "--data-source folder")
