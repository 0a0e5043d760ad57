"""Environment capture: the facts stored inside every result file, so a number can be reproduced or rejected.

A benchmark number means nothing without the machine and software that produced it. ``collect_environment``
gathers those facts into one nested, JSON-serialisable dict that the result file carries;
:mod:`clsbench.results.facts` reads them back (which facts make two results not comparable, the lines people see).

Rules the collection follows, because the benchmark runs right after it:

* It never raises for a fact it cannot read. The value becomes ``None`` and ``env["unavailable"]`` maps the
  fact's dotted path to a short reason, so a reader can tell "unknown" from "off".
* It changes nothing: no torch flag, no thread count, no GPU setting is written.
* It creates no CUDA context. GPU facts come from NVML, which talks to the driver without touching the CUDA
  runtime, so the caller can still fork benchmark workers with a clean GPU. Only when NVML is missing does it
  fall back to ``torch.cuda.get_device_properties``, which does initialise CUDA in this process.
* It is fast (well under a second once torch is imported): package versions come from installed metadata
  instead of importing the packages, and py-cpuinfo, which spends about a second in a subprocess, is only
  asked when ``/proc/cpuinfo`` has no model name (e.g. on Arm).

Units live in key names: ``_bytes``, ``_mhz``, ``_w``, ``_c`` (degrees Celsius). NVML reports power in
milliwatts; it is stored in watts, unrounded.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from clsbench.errors import REASON_MAX_CHARS, short_reason
from clsbench.system.nvml import (
    cuda_index_of,
    map_cuda_index,
    nvml_reason,
    nvml_text,
    open_nvml,
    shutdown,
    visible_nvml_indices,
)

__all__ = ["collect_environment"]

ENV_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_MODULE_LOADING",
    "CUBLAS_WORKSPACE_CONFIG",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)
"""Environment variables recorded when set: each changes which GPU is used, how kernels run or how many
threads they get. ``NVIDIA_TF32_OVERRIDE`` and ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` switch TF32 behind
torch's flags."""

ENV_VAR_PREFIXES: tuple[str, ...] = ("NCCL_", "TORCHINDUCTOR_")
"""Every variable starting with one of these prefixes is recorded too."""

_GIT_EXECUTABLE = "git"
_GIT_TIMEOUT_S = 5.0  # a `git status` on a cold, large checkout can take a few seconds; never hang the run
_GIT_COMMIT_ENV = "CLSBENCH_GIT_COMMIT"

# NVML's compute modes (nvml.h, nvmlComputeMode_t).
_COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
_NVML_PSTATE_UNKNOWN = 32  # nvml.h, NVML_PSTATE_UNKNOWN

_GPU_KEYS: tuple[str, ...] = (
    "source",
    "count",
    "visible_count",
    "index",
    "nvml_index",
    "name",
    "uuid",
    "pci_bus_id",
    "memory_total_bytes",
    "compute_capability",
    "multiprocessor_count",
    "driver_version",
    "cuda_driver_version",
    "nvml_version",
    "clock_sm_mhz",
    "clock_mem_mhz",
    "clock_sm_max_mhz",
    "clock_mem_max_mhz",
    "clock_sm_app_mhz",
    "clock_mem_app_mhz",
    "power_limit_enforced_w",
    "power_limit_default_w",
    "power_limit_min_w",
    "power_limit_max_w",
    "persistence_enabled",
    "mig_enabled",
    "ecc_enabled",
    "temperature_c",
    "performance_state",
    "compute_mode",
)

class _Unavailable(Exception):
    """Raised inside a fact reader to say the fact is absent, with the reason to record."""


class _Collector:
    """Fills sections fact by fact and keeps the ``unavailable`` map; one failing fact never stops others."""

    def __init__(self) -> None:
        self.unavailable: dict[str, str] = {}

    def missing(self, section: dict[str, Any], path: str, reason: str) -> None:
        """Stores ``None`` for ``path`` and records why."""
        section[path.rsplit(".", 1)[-1]] = None
        self.unavailable[path] = reason if len(reason) <= REASON_MAX_CHARS else reason[: REASON_MAX_CHARS - 1] + "…"

    def read(
        self,
        section: dict[str, Any],
        path: str,
        reader: Callable[[], Any],
        reason_of: Callable[[Exception], str] | None = None,
    ) -> Any:
        """Stores ``reader()`` under the last part of ``path``; any exception becomes ``None`` plus a reason.

        Args:
            section: the dict that receives the value.
            path: dotted path of the fact, e.g. ``"gpu.clock_sm_mhz"``; the key is its last part.
            reader: returns the value, or raises ``_Unavailable`` (or anything else) when it cannot.
            reason_of: turns an exception other than ``_Unavailable`` into a reason; default: its message.

        Returns:
            The stored value.
        """
        try:
            value = reader()
        except _Unavailable as exc:
            self.missing(section, path, str(exc))
            return None
        except Exception as exc:  # a fact that cannot be read must not stop the collection
            self.missing(section, path, reason_of(exc) if reason_of else short_reason(exc))
            return None
        if value is None:
            self.missing(section, path, "not reported")
            return None
        section[path.rsplit(".", 1)[-1]] = value
        return value


def collect_environment(device: str = "cpu") -> dict:
    """Collects the facts about this machine and its software that a result file must carry.

    Reads only: no torch flag, thread count or GPU setting is changed, and no CUDA context is created while
    NVML can answer (see the module docstring).

    Args:
        device: ``"cpu"``, ``"cuda"`` (same as ``"cuda:0"``) or ``"cuda:N"``. For a CUDA device the GPU facts
            describe that GPU (N counts the GPUs visible to this process, as torch does) and ``gpu.count`` all
            GPUs in the machine. For ``"cpu"`` only ``gpu.count`` is read, so that a CPU result does not
            depend on the GPU driver.

    Returns:
        A JSON-serialisable nested dict with the top-level keys ``device``, ``clsbench``, ``python``, ``os``,
        ``cpu``, ``software``, ``torch_flags``, ``env_vars``, ``gpu`` and ``unavailable``. Every fact that
        could not be read is ``None`` and has its dotted path in ``unavailable`` with a short reason.

    Raises:
        InvalidInputError: ``device`` is not one of the forms above (a bad argument, not a missing fact).
    """
    cuda_index = cuda_index_of(device)
    collector = _Collector()
    env: dict[str, Any] = {"device": device}
    sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("clsbench", lambda: _collect_clsbench(collector)),
        ("python", lambda: _collect_python(collector)),
        ("os", lambda: _collect_os(collector)),
        ("cpu", lambda: _collect_cpu(collector)),
        ("software", lambda: _collect_software(collector)),
        ("backend_libraries", _collect_backend_libraries),
        ("torch_flags", lambda: _collect_torch_flags(collector)),
        ("env_vars", _collect_env_vars),
        ("gpu", lambda: _collect_gpu(cuda_index, collector)),
        ("container", lambda: _collect_container(collector)),
    ]
    for name, collect in sections:
        try:
            env[name] = collect()
        except Exception as exc:  # a bug here must cost one section, never the benchmark run
            env[name] = {}
            collector.unavailable[name] = f"collection failed: {short_reason(exc)}"
    env["unavailable"] = dict(sorted(collector.unavailable.items()))
    return env


# ----------------------------------------------------------------------------------------------------------
# Sections


def _collect_clsbench(c: _Collector) -> dict[str, Any]:
    """Version of clsbench and, when run from a checkout, the commit it was run from."""
    section: dict[str, Any] = {}
    try:
        section["version"] = importlib.metadata.version("clsbench")
    except Exception:  # not installed (run from a source tree): the brief says "unknown"
        section["version"] = "unknown"

    commit, dirty, reason = _git_state(Path(__file__).resolve().parent)
    env_commit = os.environ.get(_GIT_COMMIT_ENV, "").strip()
    if env_commit:
        # An explicit statement wins: installed copies (a wheel in a container) have no .git, and a copied tree
        # may carry a stale one (seen on the device machine: its .git named an older commit, marked dirty).
        section["git_commit"], section["git_commit_source"] = env_commit, _GIT_COMMIT_ENV
        if commit is not None and commit != env_commit and not commit.startswith(env_commit):
            why = f"commit taken from {_GIT_COMMIT_ENV}; the checkout's .git names {commit[:12]}"
            why += " (dirty)" if dirty else ""
        else:
            why = f"commit taken from {_GIT_COMMIT_ENV}; " + (reason or "git status not consulted")
        c.missing(section, "clsbench.git_dirty", why)
    elif commit is not None:
        section["git_commit"], section["git_dirty"], section["git_commit_source"] = commit, dirty, "git"
        if dirty is None:
            c.missing(section, "clsbench.git_dirty", "git status failed")
    else:
        c.missing(section, "clsbench.git_commit", reason)
        c.missing(section, "clsbench.git_dirty", reason)
        c.missing(section, "clsbench.git_commit_source", reason)
    return {key: section[key] for key in ("version", "git_commit", "git_dirty", "git_commit_source")}


def _git_state(package_dir: Path) -> tuple[str | None, bool | None, str]:
    """Returns (commit, dirty, reason-if-absent) for the clsbench checkout holding ``package_dir``.

    The checkout must be clsbench's own: a virtualenv inside some other repository would otherwise report that
    repository's commit.
    """
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # `git status` must not take index.lock from a user's git

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [_GIT_EXECUTABLE, "-C", str(package_dir), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            env=env,
            check=False,
        )

    try:
        found = git("rev-parse", "--show-toplevel", "HEAD")
    except FileNotFoundError:
        return None, None, "git not installed"
    except Exception as exc:  # timeout, permissions: the commit is simply unknown
        return None, None, f"git failed: {short_reason(exc)}"
    lines = found.stdout.split()
    if found.returncode != 0 or len(lines) != 2:
        return None, None, "not run from a git checkout"
    toplevel, commit = lines
    try:
        is_clsbench = 'name = "clsbench"' in (Path(toplevel) / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        is_clsbench = False
    if not is_clsbench:
        return None, None, "not run from a clsbench checkout"
    try:
        status = git("status", "--porcelain")
    except Exception:
        return commit, None, ""
    return commit, (bool(status.stdout.strip()) if status.returncode == 0 else None), ""


def _collect_python(c: _Collector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "python.version", platform.python_version)
    c.read(section, "python.implementation", platform.python_implementation)
    c.read(section, "python.executable", lambda: sys.executable or None)
    return section


def _collect_os(c: _Collector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "os.platform", platform.platform)
    c.read(section, "os.system", platform.system)
    c.read(section, "os.kernel_release", platform.release)
    c.read(section, "os.distribution", _os_distribution)
    c.read(section, "os.hostname", socket.gethostname)
    return section


def _os_distribution() -> str:
    if not hasattr(platform, "freedesktop_os_release"):
        raise _Unavailable("needs Python 3.10+")
    try:
        release = platform.freedesktop_os_release()
    except OSError as exc:
        raise _Unavailable("no os-release file") from exc
    return release.get("PRETTY_NAME") or release.get("NAME") or ""


def _collect_cpu(c: _Collector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "cpu.model", _cpu_model)
    c.read(section, "cpu.arch", platform.machine)
    psutil = _import_optional("psutil")
    if psutil is None:
        for key in ("logical_cores", "physical_cores", "memory_total_bytes"):
            c.missing(section, f"cpu.{key}", "psutil not installed")
    else:
        c.read(section, "cpu.logical_cores", lambda: psutil.cpu_count(logical=True))
        c.read(section, "cpu.physical_cores", lambda: psutil.cpu_count(logical=False))
        c.read(section, "cpu.memory_total_bytes", lambda: int(psutil.virtual_memory().total))
    allowed = c.read(section, "cpu.allowed_cpus", _allowed_cpus)
    c.read(section, "cpu.allowed_cpus_count", lambda: None if allowed is None else len(allowed))
    if allowed is not None:
        section["allowed_cpus"] = _compact_ranges(allowed)
    return section


def _cpu_model() -> str:
    """CPU model name: /proc/cpuinfo (instant), then py-cpuinfo (about 1 s), then ``platform.processor()``.

    py-cpuinfo comes second, not first, only because it runs a subprocess; on x86 Linux both give the same
    name.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    cpuinfo = _import_optional("cpuinfo")
    if cpuinfo is not None:
        try:
            brand = cpuinfo.get_cpu_info().get("brand_raw")
        except Exception:
            brand = None
        if brand:
            return str(brand)
    processor = platform.processor()
    if processor:
        return processor
    raise _Unavailable("no model name in /proc/cpuinfo, py-cpuinfo or platform.processor()")


def _allowed_cpus() -> list[int]:
    """The CPUs this process may run on (taskset, cgroup cpusets); stored compactly, e.g. ``0-15,32-47``."""
    if not hasattr(os, "sched_getaffinity"):
        raise _Unavailable("os.sched_getaffinity not available on this OS")
    return sorted(os.sched_getaffinity(0))


def _compact_ranges(numbers: Iterable[int]) -> str:
    parts: list[str] = []
    start = previous = None
    for number in numbers:
        if previous is not None and number == previous + 1:
            previous = number
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = number
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def _collect_software(c: _Collector) -> dict[str, Any]:
    """Versions of the libraries a number depends on.

    torch's version is ``torch.__version__`` (it carries the build tag, e.g. ``+cu130``); the other packages'
    versions come from their installed metadata, so they are not imported (torchvision and timm take seconds)
    and the value does not depend on whether something else imported them first.
    """
    section: dict[str, Any] = {}
    torch = _import_optional("torch")
    if torch is None:
        for key in ("torch", "torch_cuda_version", "cudnn_version", "torch_built_with_cuda"):
            c.missing(section, f"software.{key}", "torch not installed")
    else:
        c.read(section, "software.torch", lambda: str(torch.__version__))
        c.read(section, "software.torch_cuda_version", lambda: _torch_cuda_version(torch))
        c.read(section, "software.cudnn_version", lambda: _cudnn_version(torch))
        c.read(section, "software.torch_built_with_cuda", lambda: bool(torch.backends.cuda.is_built()))
    for key, distribution in (
        ("torchvision", "torchvision"),
        ("timm", "timm"),
        ("triton", "triton"),
        ("numpy", "numpy"),
        ("nvidia_ml_py", "nvidia-ml-py"),
    ):
        c.read(section, f"software.{key}", lambda d=distribution: _distribution_version(d))
    return section


#: Distributions the inference backends (:mod:`clsbench.backends`) load, when installed: the ONNX export and ONNX
#: Runtime (CPU or GPU build), TensorRT and torch-tensorrt. torch and triton, which the other backends use, are in
#: ``software``.
BACKEND_DISTRIBUTIONS = ("onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "tensorrt", "tensorrt-cu12",
                         "tensorrt-cu13", "torch-tensorrt")


def _collect_backend_libraries() -> dict[str, str]:
    """Versions of the inference backends' libraries that are installed, by distribution name (from their
    metadata, nothing imported). Absent ones are left out: a missing library only skips its backend, and the
    measurement that skipped says so. Not a resume key (:data:`clsbench.results.facts.KEY_FIELDS`): each backend
    measurement records the versions its artifact was built with, and its cache key includes them."""
    found = {}
    for distribution in BACKEND_DISTRIBUTIONS:
        try:
            found[distribution] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _torch_cuda_version(torch: Any) -> str:
    version = torch.version.cuda
    if version is None:
        raise _Unavailable("torch built without CUDA")
    return str(version)


def _cudnn_version(torch: Any) -> int:
    """cuDNN version as torch reports it, e.g. 91002 for 9.10.2 (see ``_format_cudnn``).

    ``torch.backends.cudnn.version()`` is not called: on its first call it checks every GPU's compute
    capability, which initialises CUDA in this process and makes forked workers fail ("Cannot re-initialize
    CUDA in forked subprocess"). The loaded library's own version is the same number.
    """
    if not torch.backends.cudnn.is_available():
        raise _Unavailable("torch built without cuDNN")
    cudnn = getattr(torch._C, "_cudnn", None)
    if cudnn is not None and hasattr(cudnn, "getVersionInt"):
        return int(cudnn.getVersionInt())
    if torch.cuda.is_initialized():  # the check has nothing left to break
        version = torch.backends.cudnn.version()
        if version is not None:
            return int(version)
    raise _Unavailable("not readable in this torch without initialising CUDA")


def _distribution_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise _Unavailable("not installed") from exc


def _collect_torch_flags(c: _Collector) -> dict[str, Any]:
    """The torch switches in force now that change speed or numerics. Read only, never set.

    torch >= 2.9 also has the ``fp32_precision`` API; mixing it with ``allow_tf32`` makes torch refuse to read
    the legacy flag, which is recorded as unavailable with torch's message.
    """
    section: dict[str, Any] = {}
    torch = _import_optional("torch")
    names = (
        "matmul_allow_tf32",
        "cudnn_allow_tf32",
        "matmul_fp32_precision",
        "cudnn_conv_fp32_precision",
        "float32_matmul_precision",
        "matmul_allow_fp16_reduced_precision_reduction",
        "matmul_allow_bf16_reduced_precision_reduction",
        "cudnn_enabled",
        "cudnn_benchmark",
        "cudnn_deterministic",
        "deterministic_algorithms",
        "num_threads",
        "num_interop_threads",
    )
    if torch is None:
        for name in names:
            c.missing(section, f"torch_flags.{name}", "torch not installed")
        return section
    backends = torch.backends
    readers: dict[str, Callable[[], Any]] = {
        "matmul_allow_tf32": lambda: bool(backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": lambda: bool(backends.cudnn.allow_tf32),
        "matmul_fp32_precision": lambda: str(_attribute(backends.cuda.matmul, "fp32_precision")),
        "cudnn_conv_fp32_precision": lambda: str(_attribute(backends.cudnn.conv, "fp32_precision")),
        "float32_matmul_precision": lambda: str(torch.get_float32_matmul_precision()),
        "matmul_allow_fp16_reduced_precision_reduction": lambda: bool(
            backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "matmul_allow_bf16_reduced_precision_reduction": lambda: bool(
            backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
        "cudnn_enabled": lambda: bool(backends.cudnn.enabled),
        "cudnn_benchmark": lambda: bool(backends.cudnn.benchmark),
        "cudnn_deterministic": lambda: bool(backends.cudnn.deterministic),
        "deterministic_algorithms": lambda: bool(torch.are_deterministic_algorithms_enabled()),
        "num_threads": lambda: int(torch.get_num_threads()),
        # Reading does not start the inter-op pool, so set_num_interop_threads stays possible afterwards.
        "num_interop_threads": lambda: int(torch.get_num_interop_threads()),
    }
    for name in names:
        c.read(section, f"torch_flags.{name}", readers[name])
    return section


def _attribute(obj: Any, name: str) -> Any:
    if not hasattr(obj, name):
        raise _Unavailable("not in this torch version")
    return getattr(obj, name)


def _collect_env_vars() -> dict[str, str]:
    """The recorded environment variables that are set, sorted by name; unset ones are simply absent."""
    found = {name: value for name, value in os.environ.items() if name.startswith(ENV_VAR_PREFIXES)}
    found.update({name: os.environ[name] for name in ENV_VARS if name in os.environ})
    return dict(sorted(found.items()))


# ----------------------------------------------------------------------------------------------------------
# GPU


def _collect_container(c: _Collector) -> dict[str, Any]:
    """Whether this runs in a container, which runtime and image, its limits, /dev/shm and the GPUs passed in
    (:mod:`clsbench.system.container`); its unread facts join the environment's ``unavailable``."""
    from clsbench.system.container import container_facts

    facts = container_facts()
    c.unavailable.update(facts.get("unavailable") or {})  # copied, not moved: the container's lines read it too
    return facts


def _collect_gpu(cuda_index: int | None, c: _Collector) -> dict[str, Any]:
    """GPU facts from NVML, or from torch when NVML is missing; every key of ``_GPU_KEYS`` is present."""
    gpu: dict[str, Any] = {}
    if cuda_index is None:
        c.missing(gpu, "gpu.index", "device is cpu")
    else:
        gpu["index"] = cuda_index

    nvml, nvml_why = open_nvml()
    if nvml is not None:
        gpu["source"] = "nvml"
        try:
            leftover_reason = _gpu_from_nvml(nvml, cuda_index, gpu, c)
        except Exception as exc:  # e.g. a GPU that falls off the bus mid-read: keep what was read
            leftover_reason = f"NVML failed: {short_reason(exc)}"
        finally:
            shutdown(nvml)
    elif cuda_index is None:
        c.missing(gpu, "gpu.count", nvml_why)
        leftover_reason = "device is cpu"
    else:
        leftover_reason = _gpu_from_torch(cuda_index, gpu, c, nvml_why)

    for key in _GPU_KEYS:
        if key not in gpu:
            c.missing(gpu, f"gpu.{key}", leftover_reason)
    return {key: gpu[key] for key in _GPU_KEYS}


def _gpu_from_nvml(nvml: Any, cuda_index: int | None, gpu: dict[str, Any], c: _Collector) -> str:
    """Fills ``gpu`` from NVML for CUDA device ``cuda_index``; returns the reason for facts left unread."""
    reason = nvml_reason(nvml)
    count = c.read(gpu, "gpu.count", lambda: int(nvml.nvmlDeviceGetCount()), reason)
    if cuda_index is None:
        return "device is cpu"
    if count is None:
        return "NVML could not count the GPUs"

    visible, why = visible_nvml_indices(nvml, count)
    if visible is None:
        return why
    gpu["visible_count"] = len(visible)
    nvml_index, why = map_cuda_index(nvml, visible, cuda_index)
    if nvml_index is None:
        return why
    gpu["nvml_index"] = nvml_index
    try:
        handle = nvml.nvmlDeviceGetHandleByIndex(nvml_index)
    except Exception as exc:
        return f"NVML could not open GPU {nvml_index}: {reason(exc)}"

    def mhz(getter: Callable[..., Any], clock_type: str) -> Callable[[], int]:
        return lambda: int(getter(handle, getattr(nvml, clock_type)))

    def watts(getter: Callable[[], Any]) -> Callable[[], float]:
        return lambda: int(getter()) / 1000.0  # NVML reports milliwatts

    def enabled(value: Any, on_value: Any) -> bool:
        return value == on_value

    feature_enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    constraints: list[Any] = []

    def power_constraint(position: int) -> float:
        if not constraints:
            constraints.extend(nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
        return int(constraints[position]) / 1000.0

    facts: list[tuple[str, Callable[[], Any]]] = [
        ("name", lambda: nvml_text(nvml.nvmlDeviceGetName(handle))),
        ("uuid", lambda: nvml_text(nvml.nvmlDeviceGetUUID(handle))),
        ("pci_bus_id", lambda: nvml_text(nvml.nvmlDeviceGetPciInfo(handle).busId)),
        ("memory_total_bytes", lambda: int(nvml.nvmlDeviceGetMemoryInfo(handle).total)),
        ("compute_capability", lambda: "{}.{}".format(*nvml.nvmlDeviceGetCudaComputeCapability(handle))),
        ("multiprocessor_count", lambda: _nvml_multiprocessors(nvml, handle)),
        ("driver_version", lambda: nvml_text(nvml.nvmlSystemGetDriverVersion())),
        ("cuda_driver_version", lambda: _format_cuda_version(nvml.nvmlSystemGetCudaDriverVersion())),
        ("nvml_version", lambda: nvml_text(nvml.nvmlSystemGetNVMLVersion())),
        ("clock_sm_mhz", mhz(nvml.nvmlDeviceGetClockInfo, "NVML_CLOCK_SM")),
        ("clock_mem_mhz", mhz(nvml.nvmlDeviceGetClockInfo, "NVML_CLOCK_MEM")),
        ("clock_sm_max_mhz", mhz(nvml.nvmlDeviceGetMaxClockInfo, "NVML_CLOCK_SM")),
        ("clock_mem_max_mhz", mhz(nvml.nvmlDeviceGetMaxClockInfo, "NVML_CLOCK_MEM")),
        ("clock_sm_app_mhz", mhz(nvml.nvmlDeviceGetApplicationsClock, "NVML_CLOCK_SM")),
        ("clock_mem_app_mhz", mhz(nvml.nvmlDeviceGetApplicationsClock, "NVML_CLOCK_MEM")),
        ("power_limit_enforced_w", watts(lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))),
        ("power_limit_default_w", watts(lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))),
        ("power_limit_min_w", lambda: power_constraint(0)),
        ("power_limit_max_w", lambda: power_constraint(1)),
        ("persistence_enabled", lambda: enabled(nvml.nvmlDeviceGetPersistenceMode(handle), feature_enabled)),
        (
            "mig_enabled",
            lambda: enabled(nvml.nvmlDeviceGetMigMode(handle)[0], getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)),
        ),
        ("ecc_enabled", lambda: enabled(nvml.nvmlDeviceGetEccMode(handle)[0], feature_enabled)),
        ("temperature_c", lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))),
        ("performance_state", lambda: _performance_state(nvml.nvmlDeviceGetPerformanceState(handle))),
        ("compute_mode", lambda: _compute_mode(nvml.nvmlDeviceGetComputeMode(handle))),
    ]
    for key, reader in facts:
        c.read(gpu, f"gpu.{key}", reader, reason)
    return "not read"


def _nvml_multiprocessors(nvml: Any, handle: Any) -> int:
    """SM count; NVML documents ``nvmlDeviceGetAttributes`` for MIG handles only: whole GPUs may say no."""
    try:
        count = int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except Exception as exc:
        if isinstance(exc, AttributeError) or getattr(exc, "value", None) is not None:
            raise _Unavailable("NVML gives it for MIG instances only; CUDA would need a context") from exc
        raise
    if count <= 0:
        raise _Unavailable("NVML gives it for MIG instances only; CUDA would need a context")
    return count


def _format_cuda_version(version: Any) -> str:
    """NVML and the CUDA driver API encode CUDA 12.4 as 12040."""
    number = int(version)
    return f"{number // 1000}.{number % 1000 // 10}"


def _performance_state(state: Any) -> str:
    if int(state) == _NVML_PSTATE_UNKNOWN:
        raise _Unavailable("reported as unknown")
    return f"P{int(state)}"


def _compute_mode(mode: Any) -> str:
    return _COMPUTE_MODES.get(int(mode), f"unknown ({int(mode)})")


def _gpu_from_torch(cuda_index: int, gpu: dict[str, Any], c: _Collector, nvml_reason: str) -> str:
    """Fallback without NVML: what ``torch.cuda.get_device_properties`` knows (this initialises CUDA)."""
    torch = _import_optional("torch")
    if torch is None:
        return f"{nvml_reason}; torch not installed"
    try:
        if not torch.backends.cuda.is_built():
            return f"{nvml_reason}; torch built without CUDA"
        if not torch.cuda.is_available():
            return "no CUDA device"
        visible = int(torch.cuda.device_count())
    except Exception as exc:
        return f"{nvml_reason}; torch.cuda failed: {short_reason(exc)}"
    gpu["source"] = "torch"
    gpu["visible_count"] = visible
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        gpu["count"] = visible
    if cuda_index >= visible:
        return f"no CUDA device cuda:{cuda_index} ({visible} visible)"
    try:
        props = torch.cuda.get_device_properties(cuda_index)
    except Exception as exc:
        return f"{nvml_reason}; torch.cuda.get_device_properties failed: {short_reason(exc)}"
    c.read(gpu, "gpu.name", lambda: str(props.name))
    c.read(gpu, "gpu.uuid", lambda: _torch_uuid(props))
    c.read(gpu, "gpu.pci_bus_id", lambda: _torch_pci_bus_id(props))
    c.read(gpu, "gpu.memory_total_bytes", lambda: int(props.total_memory))
    c.read(gpu, "gpu.compute_capability", lambda: f"{props.major}.{props.minor}")
    c.read(gpu, "gpu.multiprocessor_count", lambda: int(props.multi_processor_count))
    c.read(gpu, "gpu.cuda_driver_version", lambda: _format_cuda_version(_torch_driver_version(torch)))
    return nvml_reason


def _torch_driver_version(torch: Any) -> int:
    getter = getattr(torch._C, "_cuda_getDriverVersion", None)
    if getter is None:
        raise _Unavailable("not exposed by this torch")
    return int(getter())


def _torch_uuid(props: Any) -> str:
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        raise _Unavailable("not in this torch version")
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _torch_pci_bus_id(props: Any) -> str:
    """In NVML's format, ``00000000:19:00.0``, so that both sources give the same string."""
    if not hasattr(props, "pci_bus_id"):
        raise _Unavailable("not in this torch version")
    return f"{int(props.pci_domain_id):08X}:{int(props.pci_bus_id):02X}:{int(props.pci_device_id):02X}.0"


# ----------------------------------------------------------------------------------------------------------
# Formatting and small helpers


def _import_optional(name: str) -> Any:
    """Imports a module, or returns None when it is not installed or fails to import."""
    try:
        return __import__(name)
    except Exception:  # an optional module that fails to import is a missing fact
        return None
