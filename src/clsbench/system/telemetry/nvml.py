"""NVML telemetry: a daemon thread samples one GPU at a fixed interval between ``start()`` and ``stop()``.

Every NVML call is a ctypes call, which releases the GIL while the driver answers, and the per-sample Python
work is a few appends to preallocated lists, so the thread takes little from the measurement it runs beside.
NVML talks to the driver without the CUDA runtime, so sampling creates no CUDA context.

Each series is read by its own guarded call. A call that fails leaves ``None`` for that sample; a failure that
will not go away (the GPU or driver does not support the query, no permission, a function this driver or
nvidia-ml-py lacks) also stops further calls for that series and is recorded in ``series_unavailable``.

Opening NVML and the CUDA-index → NVML-device mapping (honouring ``CUDA_VISIBLE_DEVICES``) are
:mod:`clsbench.system.nvml`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from clsbench.errors import InvalidInputError, short_reason
from clsbench.results.telemetry import SERIES, make_record
from clsbench.system.nvml import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    is_permanent,
    nvml_reason,
    nvml_text,
    open_nvml,
    open_nvml_handle,
    shutdown,
)
from clsbench.system.telemetry.base import DEFAULT_INTERVAL_S, SOURCES
from clsbench.system.telemetry.none import NoneSource

__all__ = ["NvmlSource", "source_for_cuda_index"]

_JOIN_TIMEOUT_MIN_S = 2.0  # one NVML call can take tens of ms on a busy driver; never hang the run for long


def source_for_cuda_index(cuda_index: int, *, interval_s: float = DEFAULT_INTERVAL_S) -> NvmlSource | NoneSource:
    """An ``NvmlSource`` for ``cuda:N`` when NVML works and the index maps, else a ``NoneSource`` saying why.

    NVML is initialised only to resolve the GPU (by UUID, which stays valid however the process enumerates
    devices) and shut down again; ``start()`` opens it anew.
    """
    nvml, why = open_nvml()
    if nvml is None:
        return NoneSource(why, interval_s=interval_s)
    try:
        handle, nvml_index, why = open_nvml_handle(nvml, cuda_index)
        if handle is None or nvml_index is None:
            return NoneSource(why, interval_s=interval_s)
        try:
            uuid: str | None = nvml_text(nvml.nvmlDeviceGetUUID(handle))
        except Exception:  # the index alone still names the GPU within this process
            uuid = None
        return NvmlSource(nvml_index=nvml_index, uuid=uuid, interval_s=interval_s)
    finally:
        shutdown(nvml)


class _Series:
    """One guarded NVML query feeding one list (``fields is None``) or several (one attribute each)."""

    __slots__ = ("read", "targets", "fields", "names")

    def __init__(
        self, names: tuple[str, ...], read: Callable[[], Any], targets: tuple[list[Any], ...], fields: Any = None
    ) -> None:
        self.names = names
        self.read: Callable[[], Any] | None = read
        self.targets = targets
        self.fields: tuple[str, ...] | None = fields


class NvmlSource:
    """Samples power, utilisation, clocks, temperature, clock-event reasons and, where the board has one, the fan
    speed of one GPU through NVML.

    Use ``make_source`` (or ``source_for_cuda_index``) rather than building it directly: they resolve the GPU.

    Args:
        nvml_index: NVML's index of the GPU (used when there is no UUID or it cannot be opened).
        uuid: the GPU's UUID; preferred, because it names the same GPU in every process.
        interval_s: seconds between samples (default 0.05: 20 Hz).

    Raises:
        InvalidInputError: ``interval_s`` is not positive.
    """

    name = "nvml"

    def __init__(self, *, nvml_index: int, uuid: str | None = None, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise InvalidInputError(f"telemetry interval must be positive, got {interval_s!r}")
        self.nvml_index = nvml_index
        self.uuid = uuid
        self.interval_s = float(interval_s)
        self._reset()

    def __repr__(self) -> str:
        return f"NvmlSource(nvml_index={self.nvml_index}, uuid={self.uuid!r}, interval_s={self.interval_s})"

    # ------------------------------------------------------------------------------------------------------
    # start / stop

    def start(self) -> None:
        """Initialises NVML, reads the energy counter and starts the sampling thread. Never raises.

        A failure (no driver, the GPU vanished) is kept and reported by ``stop()`` in ``unavailable``.
        Calling ``start()`` again after ``stop()`` begins a new record.
        """
        if self._thread is not None:
            return  # already sampling
        if self._initialised:  # a failed start left NVML open: close it before beginning again
            self._shutdown()
        self._reset()
        try:
            self._open()
        except Exception as exc:  # never fail the measurement for telemetry
            self._unavailable = f"telemetry failed to start: {short_reason(exc)}"

    def stop(self) -> dict:
        """Reads the energy counter, stops and joins the thread, takes a last sample, shuts NVML down.

        Never raises. Calling it without a successful ``start()`` returns a record saying why there are no
        samples; calling it twice returns the same record again.
        """
        if self._record is not None:
            return self._record
        try:
            self._record = self._finish()
        except Exception as exc:  # a bug here must cost the telemetry, never the measurement
            self._record = make_record(
                self.name, self.interval_s, unavailable=f"telemetry failed: {short_reason(exc)}"
            )
        return self._record

    def recent(self) -> dict[str, list[Any]]:
        """The samples taken since the previous call (or since ``start()``), as a ``samples`` dict: what a soak's
        progress line shows for the window that just ended. Never raises; the full record still comes from
        ``stop()``.

        The sampling thread appends to the series one after another, so only the samples every series has
        already received are handed out; the rest come with the next call.
        """
        try:
            samples = self._samples
            if not samples:
                return {}
            end = min(len(values) for values in samples.values())
            out = {key: values[self._cursor:end] for key, values in samples.items()}
            self._cursor = end
            return out
        except Exception:  # a progress figure is never worth a failed measurement
            return {}

    # ------------------------------------------------------------------------------------------------------
    # internals

    def _reset(self) -> None:
        self._nvml: Any = None
        self._initialised = False
        self._thread: threading.Thread | None = None
        self._stop_event = threading.Event()
        self._t0 = 0.0
        self._energy_read: Callable[[], Any] | None = None
        self._energy_start_mj: int | None = None
        self._energy_reason = ""
        self._unavailable: str | None = None
        self._series: list[_Series] = []
        self._series_unavailable: dict[str, str] = {}
        self._thread_error: str | None = None
        self._record: dict | None = None
        self._samples: dict[str, list[Any]] = {}
        self._cursor = 0  # recent(): the samples handed out so far

    def _open(self) -> None:
        import pynvml  # lazy: only GPU runs need it; a missing module is a reason, not an error

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._initialised = True
        handle = self._handle(pynvml)
        self._build_series(pynvml, handle)
        self._energy_read = self._energy_reader(pynvml, handle)
        self._energy_start_mj = self._read_energy()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="clsbench-telemetry", daemon=True)
        self._thread.start()

    def _shutdown(self) -> None:
        if self._initialised:
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # the samples are read; a failed shutdown changes none of them
                pass
            self._initialised = False

    def _handle(self, nvml: Any) -> Any:
        if self.uuid:
            try:
                return nvml.nvmlDeviceGetHandleByUUID(self.uuid)
            except Exception:  # fall back to the index resolved in this process
                pass
        return nvml.nvmlDeviceGetHandleByIndex(self.nvml_index)

    def _build_series(self, nvml: Any, handle: Any) -> None:
        s = self._samples = {key: [] for key in SERIES}
        power = nvml.nvmlDeviceGetPowerUsage
        utilization = nvml.nvmlDeviceGetUtilizationRates
        clock = nvml.nvmlDeviceGetClockInfo
        temperature = nvml.nvmlDeviceGetTemperature
        sm, mem, gpu_sensor = nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU
        reasons = self._reasons_reader(nvml, handle)
        self._series = [
            _Series(("power_w",), lambda: power(handle) / 1000.0, (s["power_w"],)),  # NVML gives milliwatts
            _Series(
                ("gpu_util_pct", "mem_util_pct"),
                lambda: utilization(handle),
                (s["gpu_util_pct"], s["mem_util_pct"]),
                ("gpu", "memory"),
            ),
            _Series(("sm_clock_mhz",), lambda: clock(handle, sm), (s["sm_clock_mhz"],)),
            _Series(("mem_clock_mhz",), lambda: clock(handle, mem), (s["mem_clock_mhz"],)),
            _Series(("temperature_c",), lambda: temperature(handle, gpu_sensor), (s["temperature_c"],)),
            _Series(("clock_event_reasons",), reasons, (s["clock_event_reasons"],)),
        ]
        fan = self._fan_reader(nvml, handle)
        if fan is not None:  # an optional series (results.telemetry.OPTIONAL_SERIES): only where there is a fan
            s["fan_pct"] = []
            self._series.append(_Series(("fan_pct",), fan, (s["fan_pct"],)))

    @staticmethod
    def _fan_reader(nvml: Any, handle: Any) -> Callable[[], Any] | None:
        """``nvmlDeviceGetFanSpeed`` when one probe answers, else None: a board without a fan (SXM modules) is no
        fault, so its records simply have no ``fan_pct``."""
        fan_speed = getattr(nvml, "nvmlDeviceGetFanSpeed", None)
        if fan_speed is None:
            return None
        try:
            fan_speed(handle)
        except Exception:  # NOT_SUPPORTED on fanless boards; any other failure also just leaves the series out
            return None
        return lambda: fan_speed(handle)

    def _reasons_reader(self, nvml: Any, handle: Any) -> Callable[[], Any]:
        """``nvmlDeviceGetCurrentClocksEventReasons`` (driver 535+), else the older ``...ThrottleReasons``."""
        event = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        throttle = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if event is None and throttle is None:

            def missing() -> Any:
                raise AttributeError("nvmlDeviceGetCurrentClocksEventReasons")  # disables the series, with why

            return missing
        if event is None:
            return lambda: throttle(handle)
        if throttle is not None:
            try:
                event(handle)
            except Exception as exc:
                if getattr(exc, "value", None) == getattr(
                    nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND
                ):
                    return lambda: throttle(handle)
        return lambda: event(handle)

    def _energy_reader(self, nvml: Any, handle: Any) -> Callable[[], Any]:
        energy = nvml.nvmlDeviceGetTotalEnergyConsumption
        return lambda: energy(handle)

    def _read_energy(self) -> int | None:
        """The total-energy counter in mJ, or None (pre-Volta GPUs and some boards do not have it)."""
        try:
            if self._energy_read is None:
                return None
            return int(self._energy_read())
        except Exception as exc:
            self._energy_reason = nvml_reason(self._nvml)(exc)
            return None

    def _run(self) -> None:
        interval = self.interval_s
        clock = time.perf_counter
        wait = self._stop_event.wait
        due = clock()
        try:
            while True:
                self._sample()
                due += interval
                delay = due - clock()
                if delay < 0.0:  # a slow NVML call: carry on from now rather than burst to catch up
                    due = clock()
                    delay = 0.0
                if wait(delay):
                    return
        except Exception as exc:  # a bug must not kill the process; the record says sampling stopped early
            self._thread_error = f"sampling stopped early: {short_reason(exc)}"

    def _sample(self) -> None:
        """One sample: the time, then each series' value or None. Kept tiny: it runs beside the measurement."""
        self._samples["t_s"].append(time.perf_counter() - self._t0)
        for series in self._series:
            read = series.read
            if read is not None:
                try:
                    value = read()
                except Exception as exc:
                    self._failed(series, exc)
                else:
                    if series.fields is None:
                        series.targets[0].append(value)
                    else:
                        for target, field in zip(series.targets, series.fields, strict=True):
                            target.append(getattr(value, field))
                    continue
            for target in series.targets:
                target.append(None)

    def _failed(self, series: _Series, exc: Exception) -> None:
        """Stops calling a query whose failure is permanent; a transient error only loses this sample."""
        nvml = self._nvml
        if isinstance(exc, TypeError) or is_permanent(nvml, exc):
            series.read = None
            for name in series.names:
                self._series_unavailable[name] = nvml_reason(nvml)(exc)

    def _finish(self) -> dict:
        thread = self._thread
        if thread is None and not self._initialised:
            reason = self._unavailable or "telemetry was not started"
            return make_record(self.name, self.interval_s, unavailable=reason)

        energy_end_mj = self._read_energy() if self._energy_start_mj is not None else None
        joined = True
        if thread is not None:
            self._stop_event.set()
            thread.join(max(_JOIN_TIMEOUT_MIN_S, 10 * self.interval_s))
            joined = not thread.is_alive()
            if joined:
                self._sample()  # closes the series at the end of the region, so integration covers all of it
            self._thread = None
        if joined:
            self._shutdown()
        self._initialised = False

        energy_j: float | None = None
        if self._energy_start_mj is not None and energy_end_mj is not None:
            delta_mj = energy_end_mj - self._energy_start_mj
            if delta_mj >= 0:  # a counter that went backwards (reset, wrap) says nothing about this region
                energy_j = delta_mj / 1000.0
        series_unavailable = dict(self._series_unavailable)
        if energy_j is None and self._energy_reason:
            series_unavailable["energy_counter_j"] = self._energy_reason
        unavailable = self._unavailable
        if not joined:
            series_unavailable["t_s"] = "the sampling thread did not stop in time; samples may be cut short"
        if self._thread_error:
            series_unavailable["t_s"] = self._thread_error
        samples = {key: list(values) for key, values in self._samples.items()} if self._samples else None
        return make_record(
            self.name,
            self.interval_s,
            unavailable=unavailable,
            energy_counter_j=energy_j,
            samples=samples,
            series_unavailable=series_unavailable,
        )


SOURCES.register("nvml", lambda cuda_index, interval_s: source_for_cuda_index(cuda_index, interval_s=interval_s))
