"""Tests of environment capture (``clsbench.system.environment``).

They run on a CPU-only machine: the GPU branch is driven by a fake ``pynvml`` module put into ``sys.modules``,
which answers like NVML does (milliwatts, bytes, MHz, bytes for some strings) and raises its own ``NVMLError``
where a real GPU says "not supported". Tests marked ``gpu`` read the real GPU and run on the GPU machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from clsbench.errors import InvalidInputError
from clsbench.results.facts import KEY_FIELDS, environment_lines, get_field
from clsbench.system import environment
from clsbench.system.environment import collect_environment

MIB = 2**20
H200_MEMORY_BYTES = 143771 * MIB  # what NVML reports for an H200


# ----------------------------------------------------------------------------------------------------------
# A fake pynvml


class FakeNVMLError(Exception):
    """Mirrors pynvml.NVMLError: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 9: "Driver Not Loaded"}.get(
            self.value, f"NVML Error with code {self.value}"
        )


class FakeNVMLErrorNotSupported(FakeNVMLError):
    def __init__(self) -> None:
        super().__init__(3)


class FakeNVML(types.ModuleType):
    """A stand-in for the ``pynvml`` module of nvidia-ml-py: same (camelCase) names and return shapes.

    Any attribute the code asks for that the fake lacks is recorded in ``missing``: the tests check it stays
    empty, so the code uses only functions named here (all of them getters of the documented API).
    """

    def __init__(self, devices: list[dict[str, Any]], not_supported: tuple[str, ...] = ()) -> None:
        super().__init__("pynvml")
        self.devices = devices
        self.not_supported = set(not_supported)
        self.calls: list[str] = []
        self.init_count = 0
        self.shutdown_count = 0
        self.missing: list[str] = []
        self.NVMLError = FakeNVMLError
        self.NVMLError_NotSupported = FakeNVMLErrorNotSupported
        self.NVML_ERROR_NOT_SUPPORTED = 3
        self.NVML_ERROR_NO_PERMISSION = 4
        self.NVML_ERROR_FUNCTION_NOT_FOUND = 13
        self.NVML_FEATURE_DISABLED = 0
        self.NVML_FEATURE_ENABLED = 1
        self.NVML_DEVICE_MIG_DISABLE = 0
        self.NVML_DEVICE_MIG_ENABLE = 1
        self.NVML_CLOCK_GRAPHICS = 0
        self.NVML_CLOCK_SM = 1
        self.NVML_CLOCK_MEM = 2
        self.NVML_TEMPERATURE_GPU = 0
        for name in (
            "nvmlDeviceGetCount",
            "nvmlDeviceGetHandleByIndex",
            "nvmlDeviceGetName",
            "nvmlDeviceGetUUID",
            "nvmlDeviceGetPciInfo",
            "nvmlDeviceGetMemoryInfo",
            "nvmlDeviceGetCudaComputeCapability",
            "nvmlDeviceGetAttributes",
            "nvmlSystemGetDriverVersion",
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetNVMLVersion",
            "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetMaxClockInfo",
            "nvmlDeviceGetApplicationsClock",
            "nvmlDeviceGetEnforcedPowerLimit",
            "nvmlDeviceGetPowerManagementDefaultLimit",
            "nvmlDeviceGetPowerManagementLimitConstraints",
            "nvmlDeviceGetPersistenceMode",
            "nvmlDeviceGetMigMode",
            "nvmlDeviceGetEccMode",
            "nvmlDeviceGetTemperature",
            "nvmlDeviceGetPerformanceState",
            "nvmlDeviceGetComputeMode",
        ):
            setattr(self, name, self._call(name, getattr(self, "_" + name)))

    def __getattr__(self, name: str) -> Any:  # only reached for names the fake does not define
        if not name.startswith("__"):
            self.missing.append(name)
        raise AttributeError(name)

    def _call(self, name: str, implementation: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name in self.not_supported:
                raise FakeNVMLErrorNotSupported()
            return implementation(*args)

        return call

    def nvmlInit(self) -> None:
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    def _nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.devices):
            raise FakeNVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return self.devices[index]

    def _nvmlDeviceGetName(self, handle: dict[str, Any]) -> str:
        return handle["name"]

    def _nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str:
        return handle["uuid"]

    def _nvmlDeviceGetPciInfo(self, handle: dict[str, Any]) -> Any:
        return types.SimpleNamespace(busId=handle["bus_id"])  # a ctypes char array: bytes

    def _nvmlDeviceGetMemoryInfo(self, handle: dict[str, Any]) -> Any:
        return types.SimpleNamespace(
            total=handle["memory"], free=handle["memory"] - 600 * MIB, used=600 * MIB
        )

    def _nvmlDeviceGetCudaComputeCapability(self, handle: dict[str, Any]) -> tuple[int, int]:
        return handle["cc"]

    def _nvmlDeviceGetAttributes(self, handle: dict[str, Any]) -> Any:
        raise FakeNVMLErrorNotSupported()  # documented for MIG handles only

    def _nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.03"

    def _nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def _nvmlSystemGetNVMLVersion(self) -> bytes:
        return b"13.580.159.03"  # older nvidia-ml-py versions return bytes

    def _nvmlDeviceGetClockInfo(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: 345, self.NVML_CLOCK_MEM: 3201}[clock]

    def _nvmlDeviceGetMaxClockInfo(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: 1980, self.NVML_CLOCK_MEM: 3201}[clock]

    def _nvmlDeviceGetApplicationsClock(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: 1755, self.NVML_CLOCK_MEM: 3201}[clock]

    def _nvmlDeviceGetEnforcedPowerLimit(self, handle: dict[str, Any]) -> int:
        return 699500  # milliwatts

    def _nvmlDeviceGetPowerManagementDefaultLimit(self, handle: dict[str, Any]) -> int:
        return 700000

    def _nvmlDeviceGetPowerManagementLimitConstraints(self, handle: dict[str, Any]) -> list[int]:
        return [200000, 700000]

    def _nvmlDeviceGetPersistenceMode(self, handle: dict[str, Any]) -> int:
        return self.NVML_FEATURE_ENABLED

    def _nvmlDeviceGetMigMode(self, handle: dict[str, Any]) -> list[int]:
        return [self.NVML_DEVICE_MIG_DISABLE, self.NVML_DEVICE_MIG_DISABLE]

    def _nvmlDeviceGetEccMode(self, handle: dict[str, Any]) -> list[int]:
        return [self.NVML_FEATURE_ENABLED, self.NVML_FEATURE_ENABLED]

    def _nvmlDeviceGetTemperature(self, handle: dict[str, Any], sensor: int) -> int:
        return 31

    def _nvmlDeviceGetPerformanceState(self, handle: dict[str, Any]) -> int:
        return 0

    def _nvmlDeviceGetComputeMode(self, handle: dict[str, Any]) -> int:
        return 0


def h200(number: int) -> dict[str, Any]:
    return {
        "name": "NVIDIA H200",
        "uuid": f"GPU-{number}{number}{number}{number}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "bus_id": f"00000000:{0x19 + number:02X}:00.0".encode(),
        "memory": H200_MEMORY_BYTES,
        "cc": (9, 0),
    }


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER from the machine running the tests."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.delenv("CLSBENCH_GIT_COMMIT", raising=False)
    return monkeypatch


@pytest.fixture
def torch_cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every call to the torch.cuda functions that would initialise CUDA in this process."""
    calls: list[str] = []
    names = (
        "get_device_properties",
        "get_device_capability",
        "is_available",
        "device_count",
        "init",
        "_lazy_init",
    )
    for name in names:

        def record(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            raise RuntimeError("torch.cuda must not be used while NVML answers")

        monkeypatch.setattr(torch.cuda, name, record)
    return calls


def install_nvml(monkeypatch: pytest.MonkeyPatch, nvml: types.ModuleType | None) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)


def gpu_env(monkeypatch: pytest.MonkeyPatch, device: str = "cuda", **fake: Any) -> tuple[dict, FakeNVML]:
    nvml = FakeNVML(fake.pop("devices", [h200(0), h200(1)]), **fake)
    install_nvml(monkeypatch, nvml)
    return collect_environment(device), nvml


def none_leaves(node: Any, prefix: str = "") -> set[str]:
    if isinstance(node, dict):
        found: set[str] = set()
        for key, value in node.items():
            found |= none_leaves(value, f"{prefix}{key}.")
        return found
    return {prefix[:-1]} if node is None else set()


def assert_every_none_has_a_reason(env: dict) -> None:
    facts = {key: value for key, value in env.items() if key not in ("unavailable", "env_vars")}
    assert none_leaves(facts) == set(env["unavailable"])


# ----------------------------------------------------------------------------------------------------------
# CPU-only machine


def test_cpu_environment_is_json_and_filled(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)  # as on a machine without nvidia-ml-py
    env = collect_environment("cpu")

    assert json.loads(json.dumps(env, allow_nan=False)) == env
    assert list(env) == [
        "device",
        "clsbench",
        "python",
        "os",
        "cpu",
        "software",
        "backend_libraries",
        "torch_flags",
        "env_vars",
        "gpu",
        "container",
        "unavailable",
    ]
    assert isinstance(env["container"]["in_container"], bool)
    assert env["device"] == "cpu"
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert env["python"]["executable"] == sys.executable
    assert env["os"]["hostname"]
    assert env["cpu"]["model"]
    assert env["cpu"]["logical_cores"] >= 1
    assert env["cpu"]["memory_total_bytes"] > 2**27
    assert env["software"]["torch"] == torch.__version__
    assert env["software"]["torch_cuda_version"] == torch.version.cuda
    assert env["software"]["torch_built_with_cuda"] is torch.backends.cuda.is_built()
    assert env["software"]["torchvision"]
    if torch.backends.cudnn.is_available():
        assert env["software"]["cudnn_version"] == torch._C._cudnn.getVersionInt()
    assert env["gpu"]["name"] is None
    assert env["unavailable"]["gpu.name"] == "device is cpu"
    assert env["unavailable"]["gpu.count"].startswith("NVML not installed")
    assert_every_none_has_a_reason(env)


def test_cpu_device_reads_only_the_gpu_count(
    clean_env: pytest.MonkeyPatch, torch_cuda_calls: list[str]
) -> None:
    env, nvml = gpu_env(clean_env, device="cpu")

    assert env["gpu"]["count"] == 2
    assert env["gpu"]["name"] is None and env["gpu"]["driver_version"] is None
    assert env["unavailable"]["gpu.driver_version"] == "device is cpu"
    assert nvml.calls == ["nvmlDeviceGetCount"]
    assert (nvml.init_count, nvml.shutdown_count) == (1, 1)
    assert torch_cuda_calls == []
    assert_every_none_has_a_reason(env)


def test_torch_flags_are_read_and_left_unchanged(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    before = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
    )
    flags = collect_environment("cpu")["torch_flags"]
    after = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.deterministic,
        torch.get_float32_matmul_precision(),
        torch.get_num_threads(),
    )
    assert before == after
    assert (
        flags["cudnn_benchmark"],
        flags["cudnn_deterministic"],
        flags["float32_matmul_precision"],
        flags["num_threads"],
    ) == before
    assert flags["num_interop_threads"] == torch.get_num_interop_threads()


def test_recorded_environment_variables(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    clean_env.setenv("NCCL_DEBUG", "INFO")
    clean_env.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/inductor")
    clean_env.setenv("OMP_NUM_THREADS", "4")
    clean_env.setenv("CLSBENCH_TEST_UNRELATED", "1")
    env_vars = collect_environment("cpu")["env_vars"]

    assert env_vars["NCCL_DEBUG"] == "INFO"
    assert env_vars["TORCHINDUCTOR_CACHE_DIR"] == "/tmp/inductor"
    assert env_vars["OMP_NUM_THREADS"] == "4"
    assert "CLSBENCH_TEST_UNRELATED" not in env_vars
    assert "CUDA_VISIBLE_DEVICES" not in env_vars  # unset variables are absent, not None
    assert list(env_vars) == sorted(env_vars)


def test_a_failing_fact_or_section_never_raises(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    psutil = pytest.importorskip("psutil")

    def broken() -> None:
        raise RuntimeError("simulated failure\nsecond line")

    clean_env.setattr(psutil, "virtual_memory", broken)
    clean_env.setattr(environment, "_collect_os", lambda collector: broken())
    env = collect_environment("cpu")

    assert env["cpu"]["memory_total_bytes"] is None
    assert env["unavailable"]["cpu.memory_total_bytes"] == "RuntimeError: simulated failure"
    assert env["os"] == {}
    assert env["unavailable"]["os"] == "collection failed: RuntimeError: simulated failure"
    assert env["cpu"]["logical_cores"] >= 1  # the other facts are still there


@pytest.mark.parametrize("device", ["nvidia", "cuda:", "cuda:-1", "cuda:0:1", "mps", "CUDA:0", ""])
def test_unknown_device_is_rejected(device: str) -> None:
    with pytest.raises(InvalidInputError):
        collect_environment(device)


# ----------------------------------------------------------------------------------------------------------
# GPU facts through a fake NVML


def test_nvml_facts_and_unit_conversions(clean_env: pytest.MonkeyPatch, torch_cuda_calls: list[str]) -> None:
    env, nvml = gpu_env(
        clean_env, device="cuda:1", not_supported=("nvmlDeviceGetApplicationsClock", "nvmlDeviceGetEccMode")
    )
    gpu = env["gpu"]

    assert json.loads(json.dumps(env, allow_nan=False)) == env
    assert gpu["source"] == "nvml"
    assert (gpu["count"], gpu["visible_count"], gpu["index"], gpu["nvml_index"]) == (2, 2, 1, 1)
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["uuid"] == h200(1)["uuid"]
    assert gpu["pci_bus_id"] == "00000000:1A:00.0"  # bytes from the ctypes field, decoded
    assert gpu["memory_total_bytes"] == H200_MEMORY_BYTES
    assert gpu["compute_capability"] == "9.0"
    assert gpu["driver_version"] == "580.159.03"
    assert gpu["cuda_driver_version"] == "13.0"
    assert gpu["nvml_version"] == "13.580.159.03"
    assert (gpu["clock_sm_mhz"], gpu["clock_mem_mhz"]) == (345, 3201)
    assert (gpu["clock_sm_max_mhz"], gpu["clock_mem_max_mhz"]) == (1980, 3201)
    assert gpu["power_limit_enforced_w"] == 699.5  # 699500 mW, not rounded
    assert gpu["power_limit_default_w"] == 700.0
    assert (gpu["power_limit_min_w"], gpu["power_limit_max_w"]) == (200.0, 700.0)
    assert gpu["persistence_enabled"] is True
    assert gpu["mig_enabled"] is False
    assert gpu["temperature_c"] == 31
    assert gpu["performance_state"] == "P0"
    assert gpu["compute_mode"] == "default"

    for path in ("gpu.clock_sm_app_mhz", "gpu.clock_mem_app_mhz", "gpu.ecc_enabled"):
        assert get_field(env, path) is None
        assert env["unavailable"][path] == "not supported on this GPU"
    assert gpu["multiprocessor_count"] is None
    assert "MIG" in env["unavailable"]["gpu.multiprocessor_count"]

    assert nvml.missing == []  # only documented pynvml getters were used
    assert (nvml.init_count, nvml.shutdown_count) == (1, 1)
    assert torch_cuda_calls == []  # no CUDA context in the calling process
    assert_every_none_has_a_reason(env)


def test_other_nvml_errors_give_their_own_reason(clean_env: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML([h200(0)])

    def no_permission(handle: Any) -> int:
        raise FakeNVMLError(4)

    def gpu_lost(handle: Any) -> int:
        raise FakeNVMLError(15)

    nvml.nvmlDeviceGetPersistenceMode = no_permission
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: gpu_lost(handle)
    nvml.nvmlDeviceGetPerformanceState = lambda handle: 32  # NVML_PSTATE_UNKNOWN
    install_nvml(clean_env, nvml)
    env = collect_environment("cuda")

    assert env["unavailable"]["gpu.persistence_enabled"] == "no permission to read it"
    assert env["unavailable"]["gpu.temperature_c"] == "NVML error: FakeNVMLError: NVML Error with code 15"
    assert env["unavailable"]["gpu.performance_state"] == "reported as unknown"
    assert env["gpu"]["name"] == "NVIDIA H200"


@pytest.mark.parametrize(
    ("visible", "device", "nvml_index", "visible_count"),
    [
        ("1", "cuda", 1, 1),
        ("1,0", "cuda:1", 0, 2),
        (" 1 ", "cuda:0", 1, 1),
        ("GPU-1111", "cuda", 1, 1),  # a UUID prefix, as CUDA accepts
        ("0,7,1", "cuda:0", 0, 1),  # CUDA stops at the first entry that names no GPU
    ],
)
def test_cuda_visible_devices_selects_the_nvml_gpu(
    clean_env: pytest.MonkeyPatch, visible: str, device: str, nvml_index: int, visible_count: int
) -> None:
    clean_env.setenv("CUDA_VISIBLE_DEVICES", visible)
    env, _ = gpu_env(clean_env, device=device)

    assert env["gpu"]["nvml_index"] == nvml_index
    assert env["gpu"]["uuid"] == h200(nvml_index)["uuid"]
    assert env["gpu"]["visible_count"] == visible_count
    assert env["gpu"]["count"] == 2
    assert env["env_vars"]["CUDA_VISIBLE_DEVICES"] == visible


@pytest.mark.parametrize(
    ("visible", "device", "reason"),
    [
        ("", "cuda", "no CUDA device cuda:0 (0 visible)"),
        ("1", "cuda:1", "no CUDA device cuda:1 (1 visible)"),
        (
            "MIG-12345678-aaaa",
            "cuda",
            "CUDA_VISIBLE_DEVICES names a MIG instance, which is not mapped to a GPU",
        ),
    ],
)
def test_a_gpu_that_is_not_visible_has_no_facts(
    clean_env: pytest.MonkeyPatch, visible: str, device: str, reason: str
) -> None:
    clean_env.setenv("CUDA_VISIBLE_DEVICES", visible)
    env, _ = gpu_env(clean_env, device=device)

    assert env["gpu"]["name"] is None
    assert env["unavailable"]["gpu.name"] == reason
    assert env["gpu"]["count"] == 2
    assert_every_none_has_a_reason(env)


def test_mixed_gpus_need_pci_bus_order(clean_env: pytest.MonkeyPatch) -> None:
    a100 = {**h200(1), "name": "NVIDIA A100-SXM4-80GB", "cc": (8, 0)}
    env, _ = gpu_env(clean_env, device="cuda:1", devices=[h200(0), a100])
    assert env["gpu"]["name"] is None
    assert "CUDA_DEVICE_ORDER" in env["unavailable"]["gpu.name"]

    clean_env.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env, _ = gpu_env(clean_env, device="cuda:1", devices=[h200(0), a100])
    assert env["gpu"]["name"] == "NVIDIA A100-SXM4-80GB"
    assert env["gpu"]["compute_capability"] == "8.0"


def test_without_nvml_torch_is_asked(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    props = types.SimpleNamespace(
        name="NVIDIA H200",
        total_memory=150_000_000_000,
        major=9,
        minor=0,
        multi_processor_count=132,
        uuid="1111aaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        pci_domain_id=0,
        pci_bus_id=0x19,
        pci_device_id=0,
    )
    clean_env.setattr(torch.backends.cuda, "is_built", lambda: True)
    clean_env.setattr(torch.cuda, "is_available", lambda: True)
    clean_env.setattr(torch.cuda, "device_count", lambda: 1)
    clean_env.setattr(torch.cuda, "get_device_properties", lambda index: props)
    clean_env.setattr(torch._C, "_cuda_getDriverVersion", lambda: 12040, raising=False)
    env = collect_environment("cuda:0")
    gpu = env["gpu"]

    assert gpu["source"] == "torch"
    assert (gpu["name"], gpu["memory_total_bytes"], gpu["compute_capability"]) == (
        "NVIDIA H200",
        150e9,
        "9.0",
    )
    assert gpu["multiprocessor_count"] == 132
    assert gpu["uuid"] == "GPU-1111aaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
    assert gpu["pci_bus_id"] == "00000000:19:00.0"
    assert gpu["cuda_driver_version"] == "12.4"
    assert gpu["count"] == gpu["visible_count"] == 1
    assert gpu["driver_version"] is None
    assert env["unavailable"]["gpu.power_limit_enforced_w"].startswith("NVML not installed")
    assert_every_none_has_a_reason(env)


def test_nvml_that_fails_to_start_falls_back_to_torch(clean_env: pytest.MonkeyPatch) -> None:
    nvml = FakeNVML([h200(0)])

    def driver_not_loaded() -> None:
        raise FakeNVMLError(9)

    nvml.nvmlInit = driver_not_loaded
    install_nvml(clean_env, nvml)
    clean_env.setattr(torch.backends.cuda, "is_built", lambda: False)
    env = collect_environment("cuda")
    assert env["gpu"]["name"] is None
    assert env["unavailable"]["gpu.name"] == (
        "NVML unavailable: FakeNVMLError: Driver Not Loaded; torch built without CUDA"
    )

    clean_env.setattr(torch.backends.cuda, "is_built", lambda: True)
    clean_env.setattr(torch.cuda, "is_available", lambda: False)
    env = collect_environment("cuda")
    assert env["gpu"]["name"] is None
    assert env["unavailable"]["gpu.name"] == "no CUDA device"
    assert nvml.calls == []
    assert_every_none_has_a_reason(env)


# ----------------------------------------------------------------------------------------------------------
# Git commit


def test_commit_from_environment_variable_when_git_is_missing(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    clean_env.setattr(environment, "_GIT_EXECUTABLE", "/nonexistent/git")
    clean_env.setenv("CLSBENCH_GIT_COMMIT", "0123456789abcdef0123456789abcdef01234567")
    section = collect_environment("cpu")["clsbench"]
    assert section["git_commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert section["git_commit_source"] == "CLSBENCH_GIT_COMMIT"
    assert section["git_dirty"] is None

    clean_env.delenv("CLSBENCH_GIT_COMMIT")
    env = collect_environment("cpu")
    assert env["clsbench"]["git_commit"] is None
    assert env["unavailable"]["clsbench.git_commit"] == "git not installed"
    assert env["clsbench"]["version"]  # from the installed metadata, or "unknown"


def test_environment_variable_wins_over_a_stale_checkout(clean_env: pytest.MonkeyPatch) -> None:
    install_nvml(clean_env, None)
    clean_env.setattr(environment, "_git_state", lambda path: ("a" * 40, True, ""))
    clean_env.setenv("CLSBENCH_GIT_COMMIT", "b" * 40)
    env = collect_environment("cpu")
    assert env["clsbench"]["git_commit"] == "b" * 40
    assert env["clsbench"]["git_commit_source"] == "CLSBENCH_GIT_COMMIT"
    assert env["clsbench"]["git_dirty"] is None
    assert env["unavailable"]["clsbench.git_dirty"] == ("commit taken from CLSBENCH_GIT_COMMIT; the checkout's .git "
                                                       "names aaaaaaaaaaaa (dirty)")


def test_commit_from_the_source_checkout(clean_env: pytest.MonkeyPatch) -> None:
    package_dir = Path(environment.__file__).resolve().parent
    git = shutil.which("git")
    head = subprocess.run(
        [git or "git", "-C", str(package_dir), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    if git is None or head.returncode != 0:
        pytest.skip("not run from a git checkout")
    install_nvml(clean_env, None)
    section = collect_environment("cpu")["clsbench"]
    assert section["git_commit"] == head.stdout.strip()
    assert section["git_commit_source"] == "git"
    assert isinstance(section["git_dirty"], bool)


def test_another_repository_is_not_taken_for_clsbench(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(tmp_path),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "x",
        ],
        check=True,
    )
    commit, dirty, reason = environment._git_state(tmp_path)
    assert (commit, dirty, reason) == (None, None, "not run from a clsbench checkout")


# ----------------------------------------------------------------------------------------------------------
# Rows, key fields, get_field


def test_environment_lines_for_a_gpu_machine(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLSBENCH_TEST_UNRELATED", "1")
    env, _ = gpu_env(clean_env, device="cuda:1", not_supported=("nvmlDeviceGetEccMode",))
    lines = environment_lines(env)
    rows = dict(lines)

    assert [label for label, _ in lines] == [
        "clsbench",
        "Python",
        "OS",
        "Host",
        "CPU",
        "RAM",
        "torch",
        "Libraries",
        "Backend libraries",
        "Torch flags",
        "GPU",
        "GPU device",
        "Driver",
        "Clocks",
        "Power limit",
        "GPU state",
        "Env vars",
        "Unavailable",
    ]
    assert rows["GPU"] == "NVIDIA H200 ×2, 143771 MiB, cc 9.0"
    assert rows["GPU device"] == f"cuda:1 (NVML 1, via nvml), {h200(1)['uuid']}, PCI 00000000:1A:00.0"
    assert rows["Driver"] == "580.159.03, CUDA 13.0, NVML 13.580.159.03"
    assert rows["Clocks"] == "SM 345 (max 1980, app 1755) MHz, memory 3201 (max 3201, app 3201) MHz"
    assert rows["Power limit"] == "699.5 W (default 700 W, range 200–700 W)"
    assert rows["GPU state"] == "persistence on, MIG off, ECC n/a, P0, 31 °C, compute mode default"
    assert rows["torch"].startswith(f"{torch.__version__}, CUDA ")
    assert all(isinstance(label, str) and isinstance(value, str) for label, value in lines)

    # Deterministic: the same dict, or the same dict read back from JSON, gives the same rows.
    assert environment_lines(env) == lines
    assert environment_lines(json.loads(json.dumps(env))) == lines


def test_environment_lines_without_gpu_and_for_partial_dicts(clean_env: pytest.MonkeyPatch) -> None:
    env, _ = gpu_env(clean_env, device="cpu")
    rows = dict(environment_lines(env))
    assert rows["GPU"] == "none (device is cpu); 2 GPUs present"
    assert "GPU state" not in rows

    rows = dict(environment_lines({}))  # an old or foreign file: every fact absent, no error
    assert rows["GPU"] == "none (not recorded)"
    assert rows["CPU"] == "n/a, n/a cores / n/a threads, n/a allowed"
    assert rows["Unavailable"] == "0 facts (reasons under `unavailable`)"


def test_key_fields_resolve_on_a_gpu_environment(clean_env: pytest.MonkeyPatch) -> None:
    env, _ = gpu_env(clean_env, device="cuda")
    assert len(set(KEY_FIELDS)) == len(KEY_FIELDS)
    for path in KEY_FIELDS:
        parent, _, key = path.rpartition(".")
        assert key in get_field(env, parent), path  # the path exists, even where the value is absent
        if path.startswith("gpu.") or path in ("software.torch", "cpu.model"):
            assert get_field(env, path) is not None, path
        if get_field(env, path) is None:
            assert path in env["unavailable"], path


def test_get_field() -> None:
    env = {"gpu": {"name": "NVIDIA H200", "mig_enabled": False}, "cpu": "not a dict"}
    assert get_field(env, "gpu.name") == "NVIDIA H200"
    assert get_field(env, "gpu.mig_enabled") is False
    assert get_field(env, "gpu") == {"name": "NVIDIA H200", "mig_enabled": False}
    assert get_field(env, "gpu.missing") is None
    assert get_field(env, "missing.name") is None
    assert get_field(env, "cpu.model") is None


# ----------------------------------------------------------------------------------------------------------
# The real GPU (run on the GPU machine)


FORK_AFTER_COLLECTION = """
import json, multiprocessing, torch
from clsbench.system.environment import collect_environment

env = collect_environment("cuda")

def child(queue):
    queue.put(torch.ones(4, device="cuda").sum().item())

context = multiprocessing.get_context("fork")
queue = context.Queue()
process = context.Process(target=child, args=(queue,))
process.start()
process.join(120)
print(json.dumps({"env": env, "initialised": torch.cuda.is_initialized(), "child": queue.get(timeout=5)}))
"""


@pytest.mark.gpu
def test_real_gpu_through_nvml_leaves_cuda_uninitialised() -> None:
    """The caller forks benchmark workers after collecting: a CUDA context here would make them fail."""
    pytest.importorskip("pynvml")
    src_dir = Path(environment.__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_COLLECTION],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(src_dir), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    env = report["env"]

    assert report["initialised"] is False
    assert report["child"] == 4.0  # the forked worker could use CUDA
    assert env["gpu"]["source"] == "nvml"
    assert env["gpu"]["name"] and env["gpu"]["driver_version"] and env["gpu"]["memory_total_bytes"] > 0
    assert env["software"]["cudnn_version"] is None or env["software"]["cudnn_version"] > 0
    assert_every_none_has_a_reason(env)
    props = torch.cuda.get_device_properties(env["gpu"]["index"])
    assert env["gpu"]["name"] == props.name
    assert env["gpu"]["compute_capability"] == f"{props.major}.{props.minor}"
