"""The facts a scale result adds to the environment, under ``environment["distributed"]``.

* ``nccl_version``: the NCCL that torch carries (``torch.cuda.nccl.version()``), read without a CUDA context;
* ``communication_env``: every variable in force that changes how NCCL, gloo, torch.distributed or NVSHMEM
  behave (``NCCL_*``, ``TORCH_NCCL_*``, ``TORCH_DISTRIBUTED_*``, ``TORCH_SYMM_MEM_*``, ``NVSHMEM_*``, ``GLOO_*``)
  plus the few general ones that matter here (``CUDA_VISIBLE_DEVICES``, ``OMP_NUM_THREADS``, ...). Each rank
  records the same set again as it sees it (torchrun adds ``OMP_NUM_THREADS`` for several ranks per node);
* ``gpu_topology``: ``nvidia-smi topo -m`` (how the GPUs are linked: NVLink, PCIe switch, ...), when readable;
* ``gpus``: index, name, PCI bus id and UUID of every visible GPU, from ``nvidia-smi``.

Like ``clsbench.system.environment``, it never fails: a fact it cannot read is ``None``, and
``unavailable`` says why.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

#: Prefixes of the variables recorded as the communication environment.
COMM_ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_SYMM_MEM_", "NVSHMEM_", "GLOO_")
#: Single variables recorded with them.
COMM_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT")

NVIDIA_SMI_TIMEOUT_S = 10.0


def communication_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The communication-related variables that are set, sorted by name."""
    source = os.environ if environ is None else environ
    found = {k: v for k, v in source.items() if k.startswith(COMM_ENV_PREFIXES) or k in COMM_ENV_NAMES}
    return dict(sorted(found.items()))


def nccl_version() -> str | None:
    """NCCL's version as ``major.minor.patch``, or None when torch has no NCCL."""
    import torch

    try:
        version: Any = torch.cuda.nccl.version()
    except Exception:  # noqa: BLE001 - a CPU-only build has no NCCL
        return None
    if isinstance(version, tuple):
        return ".".join(str(part) for part in version)
    if isinstance(version, int):  # older torch: 2.18.3 as 21803
        major, rest = divmod(version, 10000) if version >= 10000 else divmod(version, 1000)
        minor, patch = divmod(rest, 100)
        return f"{major}.{minor}.{patch}"
    return str(version)


def _nvidia_smi(*args: str) -> str:
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S,
                              check=False)
    except FileNotFoundError:
        raise LookupError("nvidia-smi not found") from None
    except subprocess.TimeoutExpired:
        raise LookupError(f"nvidia-smi took more than {NVIDIA_SMI_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise LookupError(f"nvidia-smi could not run: {exc.strerror or exc}") from None
    if done.returncode != 0:
        first = (done.stderr or done.stdout).strip().splitlines()
        raise LookupError(f"nvidia-smi failed: {first[0] if first else f'exit code {done.returncode}'}")
    return done.stdout


def distributed_facts(device: str) -> dict[str, Any]:
    """Everything above, for a run on ``device`` (``cuda`` or ``cpu``)."""
    import torch

    unavailable: dict[str, str] = {}
    facts: dict[str, Any] = {
        "launcher": "torch.distributed.run (torchrun)",
        "torch_distributed": bool(torch.distributed.is_available()),
        "nccl_available": bool(torch.distributed.is_available() and torch.distributed.is_nccl_available()),
        "gloo_available": bool(torch.distributed.is_available() and torch.distributed.is_gloo_available()),
        "nccl_version": nccl_version(),
        "communication_env": communication_env(),
        "gpu_topology": None,
        "gpus": None,
    }
    if facts["nccl_version"] is None:
        unavailable["nccl_version"] = "this torch build has no NCCL"
    if device == "cuda":
        try:
            facts["gpu_topology"] = _nvidia_smi("topo", "-m").rstrip()
        except LookupError as exc:
            unavailable["gpu_topology"] = str(exc)
        try:
            rows = _nvidia_smi("--query-gpu=index,name,pci.bus_id,uuid", "--format=csv,noheader").strip()
            facts["gpus"] = [dict(zip(("index", "name", "pci_bus_id", "uuid"), (p.strip() for p in line.split(",")),
                                      strict=False)) for line in rows.splitlines() if line.strip()]
        except LookupError as exc:
            unavailable["gpus"] = str(exc)
    else:
        unavailable["gpu_topology"] = unavailable["gpus"] = "device is cpu"
    facts["unavailable"] = unavailable
    return facts


def multicast_note(environ: dict[str, str] | None = None) -> str | None:
    """A note when NCCL may use NVLink multicast (NVLS) because ``NCCL_NVLS_ENABLE`` is not ``0``, else None.

    NVLS changes how all-reduce runs (so it belongs in the record), and on shared machines it must stay off;
    clsbench never sets it, so it says so before it launches.
    """
    source = os.environ if environ is None else environ
    if source.get("NCCL_NVLS_ENABLE") == "0":
        return None
    return ("NCCL_NVLS_ENABLE is not 0, so NCCL may use NVLink multicast (NVLS) where the GPUs offer it; "
            "export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 to keep it off "
            "(required on shared machines, see docs/scale.md)")
