"""The machine a run measures: which device ``auto`` means, and the facts recorded with every result (the
environment, the pre-flight checks and, on a GPU, the measured ceilings of the probe). Read-only: clsbench reports
the GPU's state and never changes it."""

from __future__ import annotations

from typing import Any

from clsbench.errors import DeviceUnavailableError, InvalidInputError


def resolve_device(device: str = "auto") -> str:
    """Turn "auto" into "cuda" when a GPU is present (else "cpu") and check that a named device exists."""
    import torch

    text = device.strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "cuda" or text.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"--device {device} was asked for, but this machine has no usable CUDA GPU",
                                         "use --device cpu, or check the driver with nvidia-smi")
        if ":" in text:
            index_text = text.split(":", 1)[1]
            if not index_text.isdigit():
                raise InvalidInputError(f"bad device {device!r}", "use cuda, cuda:0, cuda:1, ... or cpu")
            count = torch.cuda.device_count()
            if int(index_text) >= count:
                raise DeviceUnavailableError(f"{device} does not exist: this machine has {count} GPU(s)",
                                             f"use cuda:0 ... cuda:{count - 1}")
        return text
    raise InvalidInputError(f"unknown device {device!r}", "use auto, cpu, cuda or cuda:N")


def bf16_supported(environment: dict[str, Any], device: str) -> bool:
    """Whether the GPU supports bfloat16 (compute capability >= 8.0), read from the recorded environment."""
    if not device.startswith("cuda"):
        return True
    capability = (environment.get("gpu") or {}).get("compute_capability")
    if capability is None:
        return True  # unknown: try bf16; the worker skips it with a reason if the GPU refuses
    try:
        return float(str(capability)) >= 8.0
    except ValueError:
        return True


def environment(device: str = "cpu") -> dict[str, Any]:
    """The environment that would be recorded for a run on ``device``, with the pre-flight checks under
    ``preflight``."""
    from clsbench.system.container_checks import container_checks
    from clsbench.system.environment import collect_environment
    from clsbench.system.preflight import preflight_checks

    facts = collect_environment(device)
    threads = (facts.get("torch_flags") or {}).get("num_threads")
    facts["preflight"] = preflight_checks(device) + container_checks(facts.get("container") or {}, device=device,
                                                                     cpu_threads=threads)
    return facts


def preflight_warnings(facts: dict[str, Any]) -> list[str]:
    """The pre-flight checks that deserve the user's attention before measuring, as lines of text."""
    return [f"{c['check']}: {c['message']}" for c in facts.get("preflight") or [] if c.get("status") == "warn"]


def run_facts(device: str, env: dict[str, Any] | None = None, *, probe: bool = True) -> dict[str, Any]:
    """The facts a result records: ``env`` (read now when None) plus, on a GPU with ``probe``, the matmul and copy
    ceilings measured in a separate process (:mod:`clsbench.system.probe`), for MFU against measured peaks."""
    facts = env if env is not None else environment(device)
    if probe and device.startswith("cuda") and "probe" not in facts:
        from clsbench.system.probe import probe_in_subprocess

        facts = {**facts, "probe": probe_in_subprocess(device)}
    return facts
