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

The GPU section is read in :mod:`clsbench.system.environment_gpu`, the container's in
:mod:`clsbench.system.container`; each fact goes through :class:`~clsbench.system.fact_collector.FactCollector`.
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

from clsbench.errors import short_reason
from clsbench.system.environment_gpu import collect_gpu
from clsbench.system.fact_collector import FactCollector, FactUnavailable, import_optional
from clsbench.system.nvml import cuda_index_of

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
HOSTNAME_ENV = "CLSBENCH_HOSTNAME"


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
    collector = FactCollector()
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
        ("gpu", lambda: collect_gpu(cuda_index, collector)),
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


def _collect_clsbench(c: FactCollector) -> dict[str, Any]:
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


def _collect_python(c: FactCollector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "python.version", platform.python_version)
    c.read(section, "python.implementation", platform.python_implementation)
    c.read(section, "python.executable", lambda: sys.executable or None)
    return section


def _collect_os(c: FactCollector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "os.platform", platform.platform)
    c.read(section, "os.system", platform.system)
    c.read(section, "os.kernel_release", platform.release)
    c.read(section, "os.distribution", _os_distribution)
    c.read(section, "os.hostname", _hostname)
    return section


def _hostname() -> str:
    """The host's name, or ``$CLSBENCH_HOSTNAME`` where set: the name a shared store files this machine's runs
    under (a CI runner or container whose own name changes every time)."""
    return os.environ.get(HOSTNAME_ENV, "").strip() or socket.gethostname()


def _os_distribution() -> str:
    if not hasattr(platform, "freedesktop_os_release"):
        raise FactUnavailable("needs Python 3.10+")
    try:
        release = platform.freedesktop_os_release()
    except OSError as exc:
        raise FactUnavailable("no os-release file") from exc
    return release.get("PRETTY_NAME") or release.get("NAME") or ""


def _collect_cpu(c: FactCollector) -> dict[str, Any]:
    section: dict[str, Any] = {}
    c.read(section, "cpu.model", _cpu_model)
    c.read(section, "cpu.arch", platform.machine)
    psutil = import_optional("psutil")
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
    cpuinfo = import_optional("cpuinfo")
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
    raise FactUnavailable("no model name in /proc/cpuinfo, py-cpuinfo or platform.processor()")


def _allowed_cpus() -> list[int]:
    """The CPUs this process may run on (taskset, cgroup cpusets); stored compactly, e.g. ``0-15,32-47``."""
    if not hasattr(os, "sched_getaffinity"):
        raise FactUnavailable("os.sched_getaffinity not available on this OS")
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


def _collect_software(c: FactCollector) -> dict[str, Any]:
    """Versions of the libraries a number depends on.

    torch's version is ``torch.__version__`` (it carries the build tag, e.g. ``+cu130``); the other packages'
    versions come from their installed metadata, so they are not imported (torchvision and timm take seconds)
    and the value does not depend on whether something else imported them first.
    """
    section: dict[str, Any] = {}
    torch = import_optional("torch")
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
        raise FactUnavailable("torch built without CUDA")
    return str(version)


def _cudnn_version(torch: Any) -> int:
    """cuDNN version as torch reports it, e.g. 91002 for 9.10.2 (see ``_format_cudnn``).

    ``torch.backends.cudnn.version()`` is not called: on its first call it checks every GPU's compute
    capability, which initialises CUDA in this process and makes forked workers fail ("Cannot re-initialize
    CUDA in forked subprocess"). The loaded library's own version is the same number.
    """
    if not torch.backends.cudnn.is_available():
        raise FactUnavailable("torch built without cuDNN")
    cudnn = getattr(torch._C, "_cudnn", None)
    if cudnn is not None and hasattr(cudnn, "getVersionInt"):
        return int(cudnn.getVersionInt())
    if torch.cuda.is_initialized():  # the check has nothing left to break
        version = torch.backends.cudnn.version()
        if version is not None:
            return int(version)
    raise FactUnavailable("not readable in this torch without initialising CUDA")


def _distribution_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise FactUnavailable("not installed") from exc


def _collect_torch_flags(c: FactCollector) -> dict[str, Any]:
    """The torch switches in force now that change speed or numerics. Read only, never set.

    torch >= 2.9 also has the ``fp32_precision`` API; mixing it with ``allow_tf32`` makes torch refuse to read
    the legacy flag, which is recorded as unavailable with torch's message.
    """
    section: dict[str, Any] = {}
    torch = import_optional("torch")
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
        raise FactUnavailable("not in this torch version")
    return getattr(obj, name)


def _collect_env_vars() -> dict[str, str]:
    """The recorded environment variables that are set, sorted by name; unset ones are simply absent."""
    found = {name: value for name, value in os.environ.items() if name.startswith(ENV_VAR_PREFIXES)}
    found.update({name: os.environ[name] for name in ENV_VARS if name in os.environ})
    return dict(sorted(found.items()))


# ----------------------------------------------------------------------------------------------------------
# The container


def _collect_container(c: FactCollector) -> dict[str, Any]:
    """Whether this runs in a container, which runtime and image, its limits, /dev/shm and the GPUs passed in
    (:mod:`clsbench.system.container`); its unread facts join the environment's ``unavailable``."""
    from clsbench.system.container import container_facts

    facts = container_facts()
    c.unavailable.update(facts.get("unavailable") or {})  # copied, not moved: the container's lines read it too
    return facts
