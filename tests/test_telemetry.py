"""Tests of GPU telemetry (``clsbench.system.telemetry``) and the pre-flight checks (``clsbench.system.preflight``).

They run on a CPU-only machine. Summaries are checked on scripted records with exact numbers; the NVML sampler
and the pre-flight checks run against a fake ``pynvml`` module put into ``sys.modules``, which answers like NVML
(milliwatts, millijoules, MHz, NVMLError with a return code) and records every call.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import types
from typing import Any

import pytest
import torch

from clsbench.analysis.telemetry import SUMMARY_KEYS, THROTTLE_MIN_FRACTION, summarize_telemetry
from clsbench.errors import InvalidInputError
from clsbench.results.telemetry import REASON_BITS, SERIES, reason_names
from clsbench.system import preflight
from clsbench.system.preflight import GPU_HOT_C, preflight_checks
from clsbench.system.telemetry import FakeSource, NoneSource, TelemetrySource, make_source
from clsbench.system.telemetry.nvml import NvmlSource

SW_POWER_CAP = 0x4
HW_THERMAL_SLOWDOWN = 0x40
GPU_IDLE = 0x1

# ----------------------------------------------------------------------------------------------------------
# A fake pynvml


class FakeNVMLError(Exception):
    """Mirrors pynvml.NVMLError: carries the NVML return code in ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 999: "Unknown Error"}.get(self.value, f"NVML Error with code {self.value}")


def fake_gpu(number: int = 0, **overrides: Any) -> dict[str, Any]:
    """One GPU's state: an idle, cool H200 at its default power limit unless overridden."""
    gpu = {
        "name": "NVIDIA H200",
        "uuid": f"GPU-{number}{number}{number}{number}aaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "power_mw": 250_500,
        "energy_mj": [5_000_000, 5_012_345],  # successive reads of the total-energy counter
        "util": (0, 0),
        "sm_clock": 345,
        "mem_clock": 3201,
        "sm_max": 1980,
        "mem_max": 3201,
        "sm_app": 1755,
        "temperature": 31,
        "reasons": GPU_IDLE,
        "processes": [],  # (pid, used bytes)
        "persistence": 1,
        "mig": [0, 0],
        "ecc": [1, 1],
        "enforced_mw": 700_000,
        "default_mw": 700_000,
        "fan": None,  # an SXM module has no fan: nvmlDeviceGetFanSpeed is not supported
    }
    gpu.update(overrides)
    return gpu


class FakeNVML(types.ModuleType):
    """A stand-in for nvidia-ml-py's ``pynvml``: same names and return shapes, calls recorded.

    Args:
        gpus: one state dict per GPU (see ``fake_gpu``).
        not_supported: functions that raise NVML_ERROR_NOT_SUPPORTED, as on GPUs lacking the query.
        errors: per function, the return code to raise on each successive call (None: answer normally).
        init_error: a return code for ``nvmlInit`` to fail with.
    """

    _FUNCTIONS = (
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetMaxClockInfo",
        "nvmlDeviceGetApplicationsClock",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetFanSpeed",
    )

    def __init__(
        self,
        gpus: list[dict[str, Any]] | None = None,
        *,
        not_supported: tuple[str, ...] = (),
        errors: dict[str, list[int | None]] | None = None,
        init_error: int | None = None,
    ) -> None:
        super().__init__("pynvml")
        self.gpus = gpus if gpus is not None else [fake_gpu(0)]
        self.not_supported = set(not_supported)
        self.errors = {name: list(codes) for name, codes in (errors or {}).items()}
        self.init_error = init_error
        self.calls: list[str] = []
        self.missing: list[str] = []
        self.init_count = 0
        self.shutdown_count = 0
        self.NVMLError = FakeNVMLError
        self.NVML_ERROR_NOT_SUPPORTED = 3
        self.NVML_ERROR_NO_PERMISSION = 4
        self.NVML_ERROR_FUNCTION_NOT_FOUND = 13
        self.NVML_FEATURE_DISABLED = 0
        self.NVML_FEATURE_ENABLED = 1
        self.NVML_DEVICE_MIG_DISABLE = 0
        self.NVML_DEVICE_MIG_ENABLE = 1
        self.NVML_CLOCK_SM = 1
        self.NVML_CLOCK_MEM = 2
        self.NVML_TEMPERATURE_GPU = 0
        for name in self._FUNCTIONS:
            setattr(self, name, self._call(name, getattr(self, "_" + name)))

    def __getattr__(self, name: str) -> Any:  # only reached for names the fake does not define
        if not name.startswith("__"):
            self.missing.append(name)
        raise AttributeError(name)

    def _call(self, name: str, implementation: Any) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append(name)
            if name in self.not_supported:
                raise FakeNVMLError(3)
            codes = self.errors.get(name)
            if codes:
                code = codes.pop(0)
                if code is not None:
                    raise FakeNVMLError(code)
            return implementation(*args)

        return call

    def count(self, name: str) -> int:
        return self.calls.count(name)

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self.shutdown_count += 1

    def _nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def _nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        if not 0 <= index < len(self.gpus):
            raise FakeNVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return self.gpus[index]

    def _nvmlDeviceGetHandleByUUID(self, uuid: str) -> dict[str, Any]:
        for gpu in self.gpus:
            if gpu["uuid"] == uuid:
                return gpu
        raise FakeNVMLError(6)  # NVML_ERROR_NOT_FOUND

    def _nvmlDeviceGetName(self, handle: dict[str, Any]) -> str:
        return handle["name"]

    def _nvmlDeviceGetUUID(self, handle: dict[str, Any]) -> str:
        return handle["uuid"]

    def _nvmlDeviceGetPowerUsage(self, handle: dict[str, Any]) -> int:
        return handle["power_mw"]

    def _nvmlDeviceGetTotalEnergyConsumption(self, handle: dict[str, Any]) -> int:
        readings = handle["energy_mj"]
        return readings.pop(0) if len(readings) > 1 else readings[0]

    def _nvmlDeviceGetUtilizationRates(self, handle: dict[str, Any]) -> Any:
        gpu, memory = handle["util"]
        return types.SimpleNamespace(gpu=gpu, memory=memory)

    def _nvmlDeviceGetClockInfo(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: handle["sm_clock"], self.NVML_CLOCK_MEM: handle["mem_clock"]}[clock]

    def _nvmlDeviceGetMaxClockInfo(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: handle["sm_max"], self.NVML_CLOCK_MEM: handle["mem_max"]}[clock]

    def _nvmlDeviceGetApplicationsClock(self, handle: dict[str, Any], clock: int) -> int:
        return {self.NVML_CLOCK_SM: handle["sm_app"], self.NVML_CLOCK_MEM: handle["mem_max"]}[clock]

    def _nvmlDeviceGetTemperature(self, handle: dict[str, Any], sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return handle["temperature"]

    def _nvmlDeviceGetCurrentClocksEventReasons(self, handle: dict[str, Any]) -> int:
        return handle["reasons"]

    def _nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: dict[str, Any]) -> int:
        return handle["reasons"]

    def _nvmlDeviceGetComputeRunningProcesses(self, handle: dict[str, Any]) -> list[Any]:
        return [types.SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in handle["processes"]]

    def _nvmlDeviceGetGraphicsRunningProcesses(self, handle: dict[str, Any]) -> list[Any]:
        return []

    def _nvmlDeviceGetPersistenceMode(self, handle: dict[str, Any]) -> int:
        return handle["persistence"]

    def _nvmlDeviceGetMigMode(self, handle: dict[str, Any]) -> list[int]:
        return list(handle["mig"])

    def _nvmlDeviceGetEccMode(self, handle: dict[str, Any]) -> list[int]:
        return list(handle["ecc"])

    def _nvmlDeviceGetEnforcedPowerLimit(self, handle: dict[str, Any]) -> int:
        return handle["enforced_mw"]

    def _nvmlDeviceGetPowerManagementDefaultLimit(self, handle: dict[str, Any]) -> int:
        return handle["default_mw"]

    def _nvmlDeviceGetFanSpeed(self, handle: dict[str, Any]) -> int:
        if handle["fan"] is None:
            raise FakeNVMLError(3)
        return handle["fan"]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER from the machine running the tests."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    return monkeypatch


@pytest.fixture
def torch_cuda_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every call to the torch.cuda functions that would initialise CUDA in this process."""
    calls: list[str] = []
    for name in ("get_device_properties", "is_available", "device_count", "init", "_lazy_init", "current_device"):

        def record(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            raise RuntimeError("telemetry and pre-flight checks must not touch CUDA")

        monkeypatch.setattr(torch.cuda, name, record)
    return calls


def install(monkeypatch: pytest.MonkeyPatch, nvml: types.ModuleType | None) -> Any:
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def no_telemetry_threads() -> bool:
    return not any(thread.name == "clsbench-telemetry" for thread in threading.enumerate())


# ----------------------------------------------------------------------------------------------------------
# reason_names


@pytest.mark.parametrize(
    ("bitmask", "names"),
    [
        (0, []),
        (GPU_IDLE, ["gpu_idle"]),
        (0x2, ["applications_clocks_setting"]),
        (SW_POWER_CAP | HW_THERMAL_SLOWDOWN, ["sw_power_cap", "hw_thermal_slowdown"]),
        (0x8 | 0x20 | 0x80, ["hw_slowdown", "sw_thermal_slowdown", "hw_power_brake_slowdown"]),
        (0x10 | 0x100, ["sync_boost", "display_clock_setting"]),
        (0x800 | SW_POWER_CAP, ["sw_power_cap", "unknown_0x800"]),
    ],
)
def test_reason_names_decode_bits(bitmask: int, names: list[str]) -> None:
    assert reason_names(bitmask) == names


def test_reason_bits_match_pynvml_constants() -> None:
    pynvml = pytest.importorskip("pynvml")
    for bit, name, _ in REASON_BITS:
        camel = "".join(part.capitalize() for part in name.split("_"))
        value = getattr(pynvml, f"nvmlClocksEventReason{camel}", None)
        if value is None:
            value = getattr(pynvml, f"nvmlClocksThrottleReason{camel}")
        assert value == bit, name


# ----------------------------------------------------------------------------------------------------------
# summarize_telemetry


def scripted_record(**overrides: Any) -> dict:
    samples = {
        "t_s": [0.0, 0.5, 1.0, 1.5, 2.0],
        "power_w": [100.0, 200.0, 300.0, None, 200.0],
        "gpu_util_pct": [90, 100, None, 100, 95],
        "mem_util_pct": [40, 50, 60, 50, 50],
        "sm_clock_mhz": [1980, 1755, 1600, 1980, 1830],
        "mem_clock_mhz": [3201, 3201, 3201, 3201, 3201],
        "temperature_c": [None, 45, 50, 55, 52],
        "clock_event_reasons": [0, SW_POWER_CAP, SW_POWER_CAP, SW_POWER_CAP | HW_THERMAL_SLOWDOWN, GPU_IDLE],
    }
    energy = overrides.pop("energy_counter_j", None)
    samples.update(overrides)
    return FakeSource(samples, energy_counter_j=energy).stop()


def test_summary_integrates_power_when_there_is_no_counter() -> None:
    summary = summarize_telemetry(scripted_record(), images=900, wall_s=2.0)

    assert list(summary) == list(SUMMARY_KEYS)
    assert summary["source"] == "fake"
    assert summary["samples_n"] == 5
    assert summary["power_avg_w"] == 200.0  # (100 + 200 + 300 + 200) / 4: the unread sample is left out
    assert summary["power_peak_w"] == 300.0
    # Trapezoids over the read samples: 0.5 s × 150 W + 0.5 s × 250 W + 1.0 s × 250 W.
    assert summary["energy_j"] == 450.0
    assert summary["energy_method"] == "integrated"
    assert summary["gpu_util_avg_pct"] == 96.25
    assert summary["mem_util_avg_pct"] == 50.0
    assert (summary["sm_clock_min_mhz"], summary["sm_clock_median_mhz"]) == (1600, 1830)
    assert (summary["mem_clock_min_mhz"], summary["mem_clock_median_mhz"]) == (3201, 3201)
    assert (summary["temperature_start_c"], summary["temperature_max_c"]) == (45, 55)
    assert summary["joules_per_image"] == 0.5
    assert summary["images_per_s_per_w"] == 2.0
    assert summary["unavailable"] is None
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary


def test_summary_prefers_the_energy_counter() -> None:
    summary = summarize_telemetry(scripted_record(energy_counter_j=12.5), images=25)

    assert summary["energy_j"] == 12.5
    assert summary["energy_method"] == "counter"
    assert summary["joules_per_image"] == 0.5
    assert summary["images_per_s_per_w"] == 2.0
    assert summary["power_avg_w"] == 200.0  # still the samples' mean


def test_summary_throttle_fractions_and_words() -> None:
    summary = summarize_telemetry(scripted_record())

    assert summary["throttle_reasons"] == {"sw_power_cap": 0.6, "gpu_idle": 0.2, "hw_thermal_slowdown": 0.2}
    assert list(summary["throttle_reasons"]) == ["sw_power_cap", "gpu_idle", "hw_thermal_slowdown"]
    assert summary["throttled"] is True
    assert summary["throttle_summary"] == "power cap 60%, thermal slowdown (hardware) 20% of samples"


@pytest.mark.parametrize(
    ("reasons", "throttled", "words"),
    [
        ([SW_POWER_CAP] + [0] * 19, False, None),  # 5%: not more than THROTTLE_MIN_FRACTION
        ([SW_POWER_CAP] * 2 + [0] * 18, True, "power cap 10% of samples"),
        (
            [SW_POWER_CAP, HW_THERMAL_SLOWDOWN] + [0] * 18,
            True,
            "thermal slowdown (hardware) 5%, power cap 5% of samples",  # ties: by name
        ),
        ([GPU_IDLE] * 20, False, None),  # idle and application clocks are not throttling
        ([0x2] * 20, False, None),
    ],
)
def test_throttled_needs_power_or_thermal_reasons_above_the_threshold(
    reasons: list[int], throttled: bool, words: str | None
) -> None:
    assert THROTTLE_MIN_FRACTION == 0.05
    summary = summarize_telemetry(FakeSource({"clock_event_reasons": reasons}).stop())

    assert summary["throttled"] is throttled
    assert summary["throttle_summary"] == words


def test_summary_without_readable_reasons_says_throttling_is_unknown() -> None:
    summary = summarize_telemetry(FakeSource({"power_w": [100.0, 100.0]}).stop())

    assert summary["throttled"] is None
    assert summary["throttle_reasons"] == {}
    assert summary["energy_j"] == pytest.approx(5.0)  # 100 W over the 0.05 s between the two samples


def test_summary_of_a_single_power_sample_uses_the_wall_time() -> None:
    record = FakeSource({"power_w": [150.0]}).stop()

    assert summarize_telemetry(record)["energy_j"] is None
    summary = summarize_telemetry(record, images=100, wall_s=2.0)
    assert (summary["energy_j"], summary["energy_method"]) == (300.0, "integrated")
    assert summary["joules_per_image"] == 3.0


def test_summary_of_no_record_and_of_an_unavailable_one() -> None:
    missing = summarize_telemetry(None, images=10, wall_s=1.0)
    assert missing["unavailable"] == "no telemetry recorded"
    assert missing["samples_n"] == 0
    assert missing["energy_j"] is None and missing["joules_per_image"] is None and missing["throttled"] is None

    summary = summarize_telemetry(NoneSource("device is cpu").stop(), images=10, wall_s=1.0)
    assert summary["source"] == "none"
    assert summary["unavailable"] == "device is cpu"
    assert summary["samples_n"] == 0
    assert summary["power_avg_w"] is None and summary["energy_method"] is None


def test_summary_reads_a_partial_record() -> None:
    """An older or hand-trimmed record (series missing, no series_unavailable) still summarises."""
    record = {"source": "nvml", "interval_s": 0.05, "samples": {"t_s": [0.0, 1.0], "power_w": [10.0, 30.0]}}
    summary = summarize_telemetry(record, images=4)
    assert summary["energy_j"] == 20.0
    assert summary["joules_per_image"] == 5.0
    assert summary["sm_clock_min_mhz"] is None


# ----------------------------------------------------------------------------------------------------------
# Fake and none sources


def test_fake_source_fills_missing_series_and_counts_calls() -> None:
    source = FakeSource({"power_w": [1.0, 2.0, 3.0]}, interval_s=0.1, energy_counter_j=7.0)
    assert isinstance(source, TelemetrySource)
    source.start()
    record = source.stop()

    assert (source.starts, source.stops) == (1, 1)
    assert list(record["samples"]) == list(SERIES)
    assert record["samples"]["t_s"] == pytest.approx([0.0, 0.1, 0.2])
    assert record["samples"]["temperature_c"] == [None, None, None]
    assert record["energy_counter_j"] == 7.0
    record["samples"]["power_w"].append(4.0)  # the caller's copy: the next stop() is unchanged
    assert source.stop()["samples"]["power_w"] == [1.0, 2.0, 3.0]

    with pytest.raises(ValueError, match="differ in length"):
        FakeSource({"power_w": [1.0], "t_s": [0.0, 1.0]})


def test_make_source_for_cpu_is_none_with_a_reason(clean_env: pytest.MonkeyPatch) -> None:
    source = make_source("cpu")
    assert isinstance(source, NoneSource) and isinstance(source, TelemetrySource)
    source.start()
    record = source.stop()
    assert record["source"] == "none"
    assert record["unavailable"] == "device is cpu"
    assert record["energy_counter_j"] is None
    assert record["samples"] == {key: [] for key in SERIES}
    assert json.loads(json.dumps(record)) == record

    assert make_source("mps").stop()["unavailable"] == "no GPU telemetry for device 'mps'"
    with pytest.raises(InvalidInputError):
        make_source("cpu", interval_s=0)


# ----------------------------------------------------------------------------------------------------------
# make_source and the NVML sampler, against the fake pynvml


def test_make_source_without_nvidia_ml_py(clean_env: pytest.MonkeyPatch) -> None:
    install(clean_env, None)  # `import pynvml` raises ImportError
    source = make_source("cuda")
    assert isinstance(source, NoneSource)
    assert source.reason.startswith("NVML not installed")


def test_make_source_without_a_driver(clean_env: pytest.MonkeyPatch) -> None:
    install(clean_env, FakeNVML(init_error=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    source = make_source("cuda:0")
    assert isinstance(source, NoneSource)
    assert source.reason.startswith("NVML unavailable")


@pytest.mark.parametrize(
    ("device", "visible", "reason"),
    [
        ("cuda:2", None, "no CUDA device cuda:2 (2 visible)"),
        ("cuda:1", "1", "no CUDA device cuda:1 (1 visible)"),
        ("cuda:0", "MIG-12345678-aaaa-bbbb-cccc-dddddddddddd", "names a MIG instance"),
    ],
)
def test_make_source_for_a_gpu_nvml_cannot_map(
    clean_env: pytest.MonkeyPatch, device: str, visible: str | None, reason: str
) -> None:
    nvml = install(clean_env, FakeNVML([fake_gpu(0), fake_gpu(1)]))
    if visible is not None:
        clean_env.setenv("CUDA_VISIBLE_DEVICES", visible)
    source = make_source(device)
    assert isinstance(source, NoneSource)
    assert reason in source.reason
    assert nvml.init_count == nvml.shutdown_count == 1


def test_make_source_honours_cuda_visible_devices(clean_env: pytest.MonkeyPatch, torch_cuda_calls: list[str]) -> None:
    nvml = install(clean_env, FakeNVML([fake_gpu(0), fake_gpu(1), fake_gpu(2)]))
    clean_env.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    source = make_source("cuda:0", interval_s=0.02)

    assert isinstance(source, NvmlSource)
    assert (source.nvml_index, source.uuid, source.interval_s) == (2, nvml.gpus[2]["uuid"], 0.02)
    assert nvml.init_count == nvml.shutdown_count == 1  # NVML is opened again by start()
    assert torch_cuda_calls == []


def test_nvml_sampler_records_a_time_series(clean_env: pytest.MonkeyPatch, torch_cuda_calls: list[str]) -> None:
    gpu = fake_gpu(0, util=(97, 41), sm_clock=1980, temperature=48, reasons=SW_POWER_CAP)
    nvml = install(clean_env, FakeNVML([gpu], not_supported=("nvmlDeviceGetTemperature",)))
    source = make_source("cuda")
    assert isinstance(source, NvmlSource) and isinstance(source, TelemetrySource)

    source.start()
    time.sleep(0.3)
    record = source.stop()

    samples = record["samples"]
    n = len(samples["t_s"])
    assert n >= 4  # 20 Hz over 0.3 s gives about 7
    assert all(len(samples[key]) == n for key in SERIES)
    assert samples["t_s"] == sorted(samples["t_s"]) and 0.0 <= samples["t_s"][0] < 0.1
    assert samples["t_s"][-1] >= 0.25
    assert samples["power_w"] == [250.5] * n  # 250500 mW
    assert samples["gpu_util_pct"] == [97] * n and samples["mem_util_pct"] == [41] * n
    assert samples["sm_clock_mhz"] == [1980] * n and samples["mem_clock_mhz"] == [3201] * n
    assert samples["clock_event_reasons"] == [SW_POWER_CAP] * n
    assert samples["temperature_c"] == [None] * n
    assert nvml.count("nvmlDeviceGetTemperature") == 1  # not called again after "not supported"
    assert record["series_unavailable"] == {"temperature_c": "not supported on this GPU"}
    assert record["energy_counter_j"] == 12.345  # (5012345 - 5000000) mJ
    assert (record["source"], record["interval_s"], record["unavailable"]) == ("nvml", 0.05, None)
    assert json.loads(json.dumps(record, allow_nan=False)) == record

    assert nvml.init_count == nvml.shutdown_count == 2  # make_source, then start/stop
    assert nvml.count("nvmlDeviceGetHandleByUUID") == 1
    assert no_telemetry_threads()
    assert nvml.missing == []
    assert torch_cuda_calls == []
    assert source.stop() is record  # a second stop returns the same record

    summary = summarize_telemetry(record, images=1000)
    assert summary["energy_method"] == "counter"
    assert summary["throttled"] is True and summary["throttle_summary"] == "power cap 100% of samples"


def test_nvml_sampler_keeps_going_after_a_transient_error(clean_env: pytest.MonkeyPatch) -> None:
    nvml = install(
        clean_env,
        FakeNVML(
            [fake_gpu(0, energy_mj=[1000])],
            errors={"nvmlDeviceGetPowerUsage": [None, 999], "nvmlDeviceGetTotalEnergyConsumption": [3]},
        ),
    )
    source = make_source("cuda:0", interval_s=0.01)
    source.start()
    time.sleep(0.1)
    record = source.stop()

    power = record["samples"]["power_w"]
    assert power[:2] == [250.5, None]  # the second read failed (NVML_ERROR_UNKNOWN) ...
    assert power[2:] and all(value == 250.5 for value in power[2:])  # ... and reading went on
    assert record["energy_counter_j"] is None  # no counter at start: nothing to subtract
    assert record["series_unavailable"] == {"energy_counter_j": "not supported on this GPU"}
    assert nvml.count("nvmlDeviceGetTotalEnergyConsumption") == 1
    assert summarize_telemetry(record)["energy_method"] == "integrated"


def test_nvml_sampler_falls_back_to_throttle_reasons_on_an_old_driver(clean_env: pytest.MonkeyPatch) -> None:
    nvml = install(clean_env, FakeNVML([fake_gpu(0, reasons=HW_THERMAL_SLOWDOWN)], not_supported=()))
    nvml.errors["nvmlDeviceGetCurrentClocksEventReasons"] = [13] * 1000  # NVML_ERROR_FUNCTION_NOT_FOUND
    source = make_source("cuda:0")
    source.start()
    record = source.stop()

    assert record["samples"]["clock_event_reasons"] and set(record["samples"]["clock_event_reasons"]) == {
        HW_THERMAL_SLOWDOWN
    }
    assert nvml.count("nvmlDeviceGetCurrentClocksEventReasons") == 1  # probed once in start()


def test_nvml_source_never_raises(clean_env: pytest.MonkeyPatch) -> None:
    nvml = install(clean_env, FakeNVML([fake_gpu(0)]))
    source = make_source("cuda:0")
    nvml.init_error = 9  # the driver went away between make_source and start

    source.start()
    record = source.stop()
    assert record["unavailable"].startswith("telemetry failed to start")
    assert record["samples"] == {key: [] for key in SERIES}

    unstarted = NvmlSource(nvml_index=0)
    assert unstarted.stop()["unavailable"] == "telemetry was not started"
    with pytest.raises(InvalidInputError):
        NvmlSource(nvml_index=0, interval_s=-1.0)


def test_nvml_source_can_be_restarted(clean_env: pytest.MonkeyPatch) -> None:
    nvml = install(clean_env, FakeNVML([fake_gpu(0, energy_mj=[0, 1000, 1000, 3500])]))
    source = make_source("cuda:0")
    source.start()
    first = source.stop()
    source.start()
    second = source.stop()

    assert (first["energy_counter_j"], second["energy_counter_j"]) == (1.0, 2.5)
    assert first["samples"]["t_s"] and second["samples"]["t_s"]
    assert nvml.init_count == nvml.shutdown_count == 3
    assert no_telemetry_threads()


# ----------------------------------------------------------------------------------------------------------
# Pre-flight checks


CHECK_NAMES = ["other_processes", "gpu_busy", "gpu_hot", "clocks", "power_limit", "persistence", "ecc", "mig"]


def checks_for(monkeypatch: pytest.MonkeyPatch, device: str = "cuda", **gpu: Any) -> tuple[dict, FakeNVML]:
    nvml = install(monkeypatch, FakeNVML([fake_gpu(0, **gpu)]))
    entries = preflight_checks(device)
    assert [entry["check"] for entry in entries] == CHECK_NAMES
    return {entry["check"]: entry for entry in entries}, nvml


def test_preflight_all_good(clean_env: pytest.MonkeyPatch, torch_cuda_calls: list[str]) -> None:
    checks, nvml = checks_for(clean_env, processes=[(os.getpid(), 2**30)])

    statuses = {name: entry["status"] for name, entry in checks.items()}
    assert statuses == {
        "other_processes": "ok",  # this process itself does not count
        "gpu_busy": "ok",
        "gpu_hot": "ok",
        "clocks": "info",
        "power_limit": "ok",
        "persistence": "ok",
        "ecc": "ok",
        "mig": "ok",
    }
    assert (
        checks["clocks"]["message"] == "SM 345 MHz now (max 1980, application 1755 MHz), memory 3201 MHz (max 3201 MHz)"
    )
    assert checks["power_limit"]["message"] == "power limit 700 W enforced (default 700 W)"
    assert checks["gpu_hot"]["message"] == "GPU at 31 °C"
    assert all(isinstance(entry["message"], str) and entry["message"] for entry in checks.values())
    # Read-only: nothing but getters, and NVML closed again.
    assert all(call.startswith("nvmlDeviceGet") for call in nvml.calls)
    assert nvml.init_count == nvml.shutdown_count == 1
    assert nvml.missing == []
    assert torch_cuda_calls == []


def test_preflight_warns_about_other_processes(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, processes=[(os.getpid(), 2**30), (4242, 3 * 2**30), (4343, None)])
    entry = checks["other_processes"]
    assert entry["status"] == "warn"
    assert entry["message"].startswith("2 other processes on this GPU (pid 4242")
    assert "3.0 GiB" in entry["message"] and "pid 4343" in entry["message"]
    assert f"pid {os.getpid()}" not in entry["message"]


def test_preflight_warns_about_a_busy_gpu(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, util=(80, 30))
    assert checks["gpu_busy"]["status"] == "warn"
    assert "80% utilisation" in checks["gpu_busy"]["message"]


def test_preflight_warns_about_a_hot_gpu(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, temperature=GPU_HOT_C + 12)
    assert checks["gpu_hot"]["status"] == "warn"
    assert checks["gpu_hot"]["message"].startswith(f"GPU already hot: {GPU_HOT_C + 12} °C")
    assert checks_for(clean_env, temperature=GPU_HOT_C)[0]["gpu_hot"]["status"] == "ok"


def test_preflight_warns_about_a_lowered_power_limit(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, enforced_mw=400_000)
    assert checks["power_limit"]["status"] == "warn"
    assert checks["power_limit"]["message"].startswith("power limit lowered: 400 W enforced, default 700 W")
    # Within POWER_LIMIT_TOLERANCE of the default: not lowered.
    assert checks_for(clean_env, enforced_mw=699_500)[0]["power_limit"]["status"] == "ok"


def test_preflight_warns_about_mig(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, mig=[1, 1])
    assert checks["mig"]["status"] == "warn"
    assert "slice" in checks["mig"]["message"]


def test_preflight_reports_clock_throttling_persistence_and_ecc(clean_env: pytest.MonkeyPatch) -> None:
    checks, _ = checks_for(clean_env, reasons=GPU_IDLE | HW_THERMAL_SLOWDOWN, persistence=0, ecc=[0, 1])
    assert checks["clocks"]["status"] == "warn"
    assert checks["clocks"]["message"].endswith("clocks held down now by thermal slowdown (hardware)")
    assert checks["persistence"]["status"] == "info"
    assert checks["persistence"]["message"].startswith("persistence mode off")
    assert checks["ecc"]["status"] == "info"
    assert checks["ecc"]["message"].startswith("ECC off (turns on at the next reset)")


def test_preflight_marks_unreadable_facts(clean_env: pytest.MonkeyPatch) -> None:
    nvml = install(
        clean_env,
        FakeNVML([fake_gpu(0)], not_supported=("nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode")),
    )
    checks = {entry["check"]: entry for entry in preflight_checks("cuda:0")}
    assert checks["ecc"] == {"check": "ecc", "status": "unavailable", "message": "not supported on this GPU"}
    assert checks["mig"]["status"] == "ok" and "not supported" in checks["mig"]["message"]
    assert checks["gpu_hot"]["status"] == "ok"
    assert nvml.init_count == nvml.shutdown_count == 1


@pytest.mark.parametrize(
    ("device", "nvml", "reason"),
    [
        ("cpu", FakeNVML(), "no GPU checks: device is cpu"),
        ("cuda", None, "no GPU checks: NVML not installed"),
        ("cuda:3", FakeNVML(), "no GPU checks: no CUDA device cuda:3 (1 visible)"),
        ("tpu", FakeNVML(), "no GPU checks: unknown device 'tpu'"),
    ],
)
def test_preflight_without_a_readable_gpu(
    clean_env: pytest.MonkeyPatch, device: str, nvml: FakeNVML | None, reason: str
) -> None:
    install(clean_env, nvml)
    entries = preflight_checks(device)
    assert len(entries) == 1
    assert entries[0]["check"] == "nvml" and entries[0]["status"] == "unavailable"
    assert entries[0]["message"].startswith(reason)
    if nvml is not None:
        assert nvml.init_count == nvml.shutdown_count


def test_preflight_thresholds_are_named() -> None:
    assert preflight.GPU_HOT_C == 60
    assert 0 < preflight.GPU_BUSY_UTIL_PCT < 100
    assert 0 < preflight.POWER_LIMIT_TOLERANCE < 0.05


def test_nvml_reads_the_fan_where_there_is_one_and_hands_out_recent_samples(clean_env: pytest.MonkeyPatch) -> None:
    install(clean_env, FakeNVML([fake_gpu(0, fan=37)]))
    source = make_source("cuda:0", interval_s=0.01)
    source.start()
    time.sleep(0.1)
    first = source.recent()
    time.sleep(0.05)
    second = source.recent()
    rec = source.stop()
    assert first["fan_pct"] and set(first["fan_pct"]) == {37}
    assert first["t_s"] and second["t_s"] and second["t_s"][0] > first["t_s"][-1]
    assert rec["samples"]["t_s"][:len(first["t_s"]) + len(second["t_s"])] == first["t_s"] + second["t_s"]
    assert set(rec["samples"]["fan_pct"]) == {37}

    install(clean_env, FakeNVML([fake_gpu(0)]))  # an SXM module: no fan, no series, no complaint
    source = make_source("cuda:0", interval_s=0.01)
    source.start()
    fanless = source.stop()
    assert "fan_pct" not in fanless["samples"] and "fan_pct" not in fanless["series_unavailable"]
