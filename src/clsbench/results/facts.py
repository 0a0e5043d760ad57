"""Reading the stored environment: a fact by its dotted path, the facts that make two results not comparable,
and the lines people see (``clsbench env``, a report's header). Pure: it reads dicts from result files, however
old or partial, and never the live machine (:mod:`clsbench.system.environment` collects those)."""

from __future__ import annotations

from typing import Any

__all__ = ["KEY_FIELDS", "environment_lines", "get_field"]

KEY_FIELDS: tuple[str, ...] = (
    "gpu.name",
    "gpu.mig_enabled",
    "gpu.power_limit_enforced_w",
    "gpu.driver_version",
    "software.torch",
    "software.torch_cuda_version",
    "software.cudnn_version",
    "software.torchvision",
    "software.timm",
    "software.triton",
    "cpu.model",
    # The container, when there is one (clsbench.system.container.KEY_FIELDS): another runtime or image is another
    # software stack, even on the same machine.
    "container.runtime",
    "container.image.name",
    "container.image.id",
    "container.image.base",
)
"""Dotted paths of the facts that make two results not comparable when they differ.

The GPU model (NVIDIA's names carry the memory size: ``A100-SXM4-40GB``), MIG slicing and the power cap
change what the hardware can do; driver, CUDA, cuDNN, torch, torchvision, timm and triton change which kernels
run; the CPU model matters for CPU runs and for input pipelines. Clocks, temperature and torch flags are
recorded but not listed: they vary from run to run or belong to the benchmark's own settings. Nor is
``gpu.memory_total_bytes``: NVML and CUDA count it differently (CUDA leaves out reserved memory), so it would
tell apart one GPU read two ways.
"""

_NOT_AVAILABLE = "n/a"


def get_field(env: dict, dotted: str) -> Any:
    """Reads a fact by its dotted path, e.g. ``get_field(env, "gpu.name")``.

    Args:
        env: a dict from ``collect_environment`` or loaded from a result file (possibly older or partial).
        dotted: keys joined by dots.

    Returns:
        The value, or ``None`` when any key on the way is absent or leads to something that is not a dict.
    """
    node: Any = env
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def environment_lines(env: dict) -> list[tuple[str, str]]:
    """Turns an environment dict into ``(label, value)`` rows for ``clsbench env`` and the header of a report.

    The rows come in a fixed order and depend on nothing but ``env``, so printed output can be compared as
    text. Absent facts print as ``n/a``; a dict from an older or partial file prints without error. When no
    GPU was described, the GPU rows collapse into one ``GPU`` row that says why.

    Args:
        env: a dict from ``collect_environment`` or loaded from a result file.

    Returns:
        The rows, e.g. ``("GPU", "NVIDIA H200 ×1, 143771 MiB, cc 9.0, 132 SMs")``.
    """

    def field(path: str) -> Any:
        return get_field(env, path)

    def text(path: str) -> str:
        value = field(path)
        return _NOT_AVAILABLE if value is None else str(value)

    rows: list[tuple[str, str]] = []

    commit = field("clsbench.git_commit")
    clsbench = text("clsbench.version")
    if commit:
        dirty = field("clsbench.git_dirty")
        clsbench += f", git {str(commit)[:12]}" + (" (dirty)" if dirty else "")
    rows.append(("clsbench", clsbench))
    rows.append(
        ("Python", f"{text('python.version')} ({text('python.implementation')}), {text('python.executable')}")
    )
    rows.append(("OS", text("os.platform")))
    rows.append(("Host", text("os.hostname")))

    cpu = text("cpu.model")
    cpu += f", {text('cpu.physical_cores')} cores / {text('cpu.logical_cores')} threads"
    cpu += f", {text('cpu.allowed_cpus_count')} allowed"
    rows.append(("CPU", cpu))
    rows.append(("RAM", _format_gib(field("cpu.memory_total_bytes"))))

    cudnn = field("software.cudnn_version")
    rows.append(
        (
            "torch",
            f"{text('software.torch')}, CUDA {text('software.torch_cuda_version')}, "
            f"cuDNN {_format_cudnn(cudnn) if isinstance(cudnn, int) else _NOT_AVAILABLE}",
        )
    )
    libraries = [
        ("torchvision", "software.torchvision"),
        ("timm", "software.timm"),
        ("triton", "software.triton"),
        ("numpy", "software.numpy"),
        ("nvidia-ml-py", "software.nvidia_ml_py"),
    ]
    rows.append(("Libraries", ", ".join(f"{label} {text(path)}" for label, path in libraries)))
    backends = field("backend_libraries")
    if isinstance(backends, dict) and backends:
        rows.append(("Backend libraries", ", ".join(f"{name} {version}" for name, version in backends.items())))
    elif isinstance(backends, dict):
        rows.append(("Backend libraries", "none installed (the onnxruntime and tensorrt backends skip)"))
    else:
        rows.append(("Backend libraries", _NOT_AVAILABLE))  # a file written before backends were recorded
    rows.append(("Torch flags", _format_torch_flags(env)))

    rows.extend(_gpu_lines(env))

    env_vars = field("env_vars")
    if isinstance(env_vars, dict) and env_vars:
        rows.append(("Env vars", ", ".join(f"{name}={value}" for name, value in sorted(env_vars.items()))))
    else:
        rows.append(("Env vars", "none of the recorded ones set"))

    unavailable = field("unavailable")
    count = len(unavailable) if isinstance(unavailable, dict) else 0
    rows.append(("Unavailable", f"{count} fact{'s' if count != 1 else ''} (reasons under `unavailable`)"))
    return rows


def _gpu_lines(env: dict) -> list[tuple[str, str]]:
    def field(path: str) -> Any:
        return get_field(env, f"gpu.{path}")

    def text(path: str, unit: str = "") -> str:
        value = field(path)
        if value is None:
            return _NOT_AVAILABLE
        if isinstance(value, float):
            value = f"{value:g}"
        return f"{value}{unit}"

    name = field("name")
    if name is None:
        unavailable = get_field(env, "unavailable")
        reason = unavailable.get("gpu.name") if isinstance(unavailable, dict) else None
        count = field("count")
        present = (
            f"; {count} GPU{'s' if count != 1 else ''} present" if isinstance(count, int) and count else ""
        )
        return [("GPU", f"none ({reason or 'not recorded'}){present}")]

    count = field("count")
    visible = field("visible_count")
    summary = f"{name} ×{count if count is not None else '?'}"
    if isinstance(visible, int) and visible != count:
        summary += f" ({visible} visible)"
    memory = field("memory_total_bytes")
    summary += f", {memory // 2**20} MiB" if isinstance(memory, int) else f", {_NOT_AVAILABLE} MiB"
    summary += f", cc {text('compute_capability')}"
    if field("multiprocessor_count") is not None:
        summary += f", {field('multiprocessor_count')} SMs"

    device = f"cuda:{text('index')} (NVML {text('nvml_index')}, via {text('source')})"
    device += f", {text('uuid')}, PCI {text('pci_bus_id')}"

    driver = f"{text('driver_version')}, CUDA {text('cuda_driver_version')}, NVML {text('nvml_version')}"

    clocks = (
        f"SM {text('clock_sm_mhz')} (max {text('clock_sm_max_mhz')}, app {text('clock_sm_app_mhz')}) MHz, "
        f"memory {text('clock_mem_mhz')} (max {text('clock_mem_max_mhz')}, "
        f"app {text('clock_mem_app_mhz')}) MHz"
    )
    power = (
        f"{text('power_limit_enforced_w', ' W')} (default {text('power_limit_default_w', ' W')}, "
        f"range {text('power_limit_min_w')}–{text('power_limit_max_w', ' W')})"
    )
    state = (
        f"persistence {_on_off(field('persistence_enabled'))}, MIG {_on_off(field('mig_enabled'))}, "
        f"ECC {_on_off(field('ecc_enabled'))}, {text('performance_state')}, {text('temperature_c', ' °C')}, "
        f"compute mode {text('compute_mode')}"
    )
    return [
        ("GPU", summary),
        ("GPU device", device),
        ("Driver", driver),
        ("Clocks", clocks),
        ("Power limit", power),
        ("GPU state", state),
    ]


def _format_torch_flags(env: dict) -> str:
    def flag(name: str) -> Any:
        return get_field(env, f"torch_flags.{name}")

    def shown(name: str) -> str:
        value = flag(name)
        return _NOT_AVAILABLE if value is None else str(value)

    return (
        f"TF32 matmul {_on_off(flag('matmul_allow_tf32'))}, TF32 cuDNN {_on_off(flag('cudnn_allow_tf32'))}, "
        f"float32 matmul precision {shown('float32_matmul_precision')}, "
        f"cudnn.benchmark {_on_off(flag('cudnn_benchmark'))}, "
        f"cudnn.deterministic {_on_off(flag('cudnn_deterministic'))}, "
        f"threads {shown('num_threads')} intra-op / {shown('num_interop_threads')} inter-op"
    )


def _on_off(value: Any) -> str:
    if value is None:
        return _NOT_AVAILABLE
    return "on" if value else "off"


def _format_gib(value: Any) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int) else _NOT_AVAILABLE


def _format_cudnn(version: int) -> str:
    """cuDNN 9 encodes 9.1.0 as 90100; cuDNN 8 and older encode 8.9.2 as 8902."""
    if version >= 10000:
        return f"{version // 10000}.{version % 10000 // 100}.{version % 100}"
    return f"{version // 1000}.{version % 1000 // 100}.{version % 100}"
