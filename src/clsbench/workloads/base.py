"""The workload interface and what the workloads share: the stop rule and block planning.

A workload runs inside a worker process on a model already prepared for its mode, and returns raw samples.
It never summarises: statistics are derived later (``clsbench.analysis.summary``) from what it returns.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from clsbench.core.plan import Cell, StopRule, TrainSettings
from clsbench.core.registry import Registry
from clsbench.measure.clock import NS_PER_S, Clock
from clsbench.modes.base import Prepared

#: Planned timed blocks are sized for this much more than the remaining minimum time, so that one block usually
#: satisfies the stop rule despite small differences between warm-up and timed iterations.
BLOCK_MARGIN = 1.05

#: The workloads, by name; each module of this folder registers its own (``WORKLOADS.register(name, obj)``).
WORKLOADS: Registry[Workload] = Registry("workload", package="clsbench.workloads", option="--workload")


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass
class WorkloadContext:
    """Everything a workload needs; built by the worker for one repeat."""

    cell: Cell
    stop: StopRule
    clock: Clock
    device: torch.device
    prepared: Prepared
    input_size: int
    num_classes: int
    data_seed: int
    train: TrainSettings
    compiled: bool = False
    telemetry: Any = None  # a clsbench.system.telemetry TelemetrySource sampling only the timed region, or None
    profile_busy: bool = True  # profile a few extra iterations after the timed region for GPU busy time
    profile: Any = None  # a core.plan.ProfileSettings: profile a few more steps after the timed region (first repeat)
    host_calibration: bool = True  # time a tiny CPU-dispatch loop at both edges of the timed region
    host_cpu: dict[str, Any] | None = None  # set at the region's end: contention and calibration (measure/hostcpu.py)
    gate: Any = None  # with overlap, worker.Gate: "timed" stops the worker preparing ahead before the region starts
    window_s: float | None = None  # a soak: the timed region is split into windows of this length (WindowLog)
    early_stop: EarlyStop | None = None  # a soak: ends the region after the current window (Ctrl-C)
    on_window: Callable[[dict[str, Any]], None] | None = None  # a soak: told each window's figures as it ends
    _host_start: Any = None
    _calibration_before_us: float | None = None
    _region_origin_ns: int | None = None

    @property
    def stop_requested(self) -> bool:
        """A soak was asked to end early: the loop ends the region after the window in flight."""
        return self.early_stop is not None and self.early_stop.requested

    def windows(self) -> WindowLog | None:
        """The window log of a soak's timed region (call after :meth:`timed_region_started`), None otherwise."""
        if self.window_s is None:
            return None
        return WindowLog(self, self.window_s, self._region_origin_ns or 0)

    def recent_telemetry(self) -> dict[str, Any]:
        """The telemetry samples taken since the previous call (a soak's window figures); empty without any."""
        recent = getattr(self.telemetry, "recent", None)
        try:
            return recent() if recent is not None else {}
        except Exception:  # noqa: BLE001 - progress figures are extras
            return {}

    def timed_region_started(self) -> None:
        from clsbench.system import hostcpu

        if self.gate is not None:
            self.gate("timed")

        try:  # host readings are extras: like telemetry, they never fail a measurement
            if self.host_calibration:
                self._calibration_before_us = hostcpu.calibrate()
            self._host_start = hostcpu.snapshot()
        except Exception as exc:  # noqa: BLE001
            self.host_cpu = {"unavailable": f"{type(exc).__name__}: {exc}"[:200]}
        if self.telemetry is not None:
            self.telemetry.start()
        if self.window_s is not None:  # a soak: the windows' time axis starts with the telemetry's
            self._region_origin_ns = self.clock.now_ns()
            if self.early_stop is not None:
                self.early_stop.in_region = True

    def timed_region_ended(self) -> dict[str, Any] | None:
        telemetry = self.telemetry.stop() if self.telemetry is not None else None
        if self._host_start is not None:
            from clsbench.system import hostcpu

            try:
                host = hostcpu.contention(self._host_start, hostcpu.snapshot())
                if self.host_calibration:
                    after = hostcpu.calibrate()
                    before = self._calibration_before_us
                    host["calibration_us_per_op_before"] = before
                    host["calibration_us_per_op_after"] = after
                    host["calibration_us_per_op"] = (before + after) / 2 if before is not None else after
                self.host_cpu = host
            except Exception as exc:  # noqa: BLE001 - an extra; the measurement goes on without it
                self.host_cpu = {"unavailable": f"{type(exc).__name__}: {exc}"[:200]}
        return telemetry

    def busy_time(self, run_once: Any) -> dict[str, Any] | None:
        """GPU busy time per iteration, from a short profile after the timed region (CUDA only)."""
        if self.device.type != "cuda" or not self.profile_busy:
            return None
        from clsbench.measure.busy import gpu_busy_per_iteration

        t0 = time.perf_counter()
        busy = gpu_busy_per_iteration(run_once)
        return {**busy, "profile_s": time.perf_counter() - t0}  # untimed, but part of the suite's wall time

    def profile_steps(self, run_once: Any, measured_step_ms: float | None = None) -> dict[str, Any] | None:
        """Where a step's time goes, from a short torch.profiler trace after the timed region
        (:mod:`clsbench.measure.profiler`); None unless this repeat profiles, never raises."""
        if self.profile is None:
            return None
        from clsbench.measure.profiler import profile_steps

        return profile_steps(run_once, steps=self.profile.steps, warmup=self.profile.warmup,
                             cuda=self.device.type == "cuda", trace_path=self.profile.trace_path,
                             measured_step_ms=measured_step_ms)

    def make_images(self, *, pinned: bool = False, on_device: bool = True) -> torch.Tensor:
        """A seeded batch of images in the mode's dtype and memory format (standard normal noise, the range of
        ImageNet-normalised pixels)."""
        generator = torch.Generator().manual_seed(self.data_seed)
        shape = (self.cell.batch_size, 3, self.input_size, self.input_size)
        images = torch.randn(shape, generator=generator).to(dtype=self.prepared.input_dtype)
        images = images.contiguous(memory_format=self.prepared.memory_format)
        if on_device:
            return images.to(self.device)
        return images.pin_memory() if pinned and self.device.type == "cuda" else images


@dataclass
class WorkloadOutput:
    """Raw samples and the facts a workload observed; all times unrounded, units in the names."""

    samples: dict[str, Any]
    timings: dict[str, float | None] = field(default_factory=dict)
    validity: dict[str, Any] = field(default_factory=dict)
    telemetry: dict[str, Any] | None = None  # the raw telemetry record of the timed region
    busy: dict[str, Any] | None = None  # GPU busy time per iteration (measure/busy.py)
    profile: dict[str, Any] | None = None  # the profile summary (measure/profiler.py), when this repeat profiled
    data: dict[str, Any] | None = None  # real-data facts (workloads/train_data.py): settings, dataset, pipeline


class EarlyStop:
    """Ctrl-C for a soak: end the timed region after the window in flight, keeping every finished window.

    The worker process ignores SIGINT (the run handles Ctrl-C); on Ctrl-C the parent sends it SIGUSR1, whose
    handler calls :meth:`request`. Inside the timed region that only sets :attr:`requested`, which the loop checks
    after each window; before it there is nothing to keep, so the request raises KeyboardInterrupt and the worker
    ends at once.
    """

    def __init__(self) -> None:
        self.requested = False
        self.in_region = False

    def request(self) -> None:
        self.requested = True
        if not self.in_region:
            raise KeyboardInterrupt

    def handler(self, signum: int, frame: Any) -> None:
        """A signal handler that requests the stop (``signal.signal(SIGUSR1, early_stop.handler)``)."""
        self.request()


class WindowLog:
    """The windows of a soak's timed region: where each began (seconds since the region began, the telemetry's time
    axis), its timed seconds and its iterations; each finished window is handed to the context's ``on_window``
    with its throughput and the telemetry figures of its samples.

    A loop adds timed work with :meth:`add` and ends a window with :meth:`close` (the block loop after every block,
    each sized to one window; the latency loop when :attr:`full`).
    """

    def __init__(self, ctx: WorkloadContext, window_s: float, origin_ns: int) -> None:
        self.ctx = ctx
        self.window_s = window_s
        self.window_ns = int(window_s * NS_PER_S)
        self.origin_ns = origin_ns
        self.start_s: list[float] = []
        self.wall_s: list[float] = []
        self.iterations: list[int] = []
        self._open_ns: int | None = None
        self._elapsed_ns = 0
        self._count = 0

    def open(self) -> None:
        """Begin a window now (the block loop calls it right before each block)."""
        if self._open_ns is None:
            self._open_ns = self.ctx.clock.now_ns()

    def add(self, iterations: int, elapsed_ns: int) -> None:
        self.open()
        self._count += iterations
        self._elapsed_ns += elapsed_ns

    @property
    def elapsed_ns(self) -> int:
        """Timed nanoseconds of the window in flight."""
        return self._elapsed_ns

    @property
    def full(self) -> bool:
        return self._elapsed_ns >= self.window_ns

    @property
    def finished(self) -> int:
        return len(self.wall_s)

    def close(self) -> None:
        """End the window in flight (nothing when it holds no work) and report it."""
        if self._open_ns is None or self._count == 0:
            return
        start_s = (self._open_ns - self.origin_ns) / NS_PER_S
        wall_s = self._elapsed_ns / NS_PER_S
        self.start_s.append(start_s)
        self.wall_s.append(wall_s)
        self.iterations.append(self._count)
        figures = {"index": len(self.wall_s) - 1, "start_s": start_s, "wall_s": wall_s, "iterations": self._count,
                   "images": self._count * self.ctx.cell.batch_size,
                   "throughput_img_s": self._count * self.ctx.cell.batch_size / wall_s if wall_s > 0 else None,
                   "telemetry": self.ctx.recent_telemetry()}
        self._open_ns, self._count, self._elapsed_ns = None, 0, 0
        if self.ctx.on_window is not None:
            self.ctx.on_window(figures)

    def samples(self) -> dict[str, Any]:
        """What the repeat stores under ``samples["windows"]`` (parallel lists, never rounded)."""
        return {"window_s": self.window_s, "start_s": list(self.start_s), "wall_s": list(self.wall_s),
                "iterations": list(self.iterations)}


class Workload(Protocol):
    name: str
    kind: str  # "inference" or "train"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput: ...


class StopWatch:
    """Tracks the stop rule of a timed region from clock readings taken by the workload."""

    def __init__(self, rule: StopRule, *, warmup: bool = False) -> None:
        self.min_iterations = rule.warmup if warmup else rule.min_iterations
        self.min_ns = int((rule.warmup_seconds if warmup else rule.min_seconds) * NS_PER_S)
        self.max_iterations = None if warmup else rule.max_iterations
        self.max_ns = None if warmup or rule.max_seconds is None else int(rule.max_seconds * NS_PER_S)
        self.iterations = 0
        self.elapsed_ns = 0

    def add(self, iterations: int, elapsed_ns: int) -> None:
        self.iterations += iterations
        self.elapsed_ns += elapsed_ns

    @property
    def rule_met(self) -> bool:
        return self.iterations >= self.min_iterations and self.elapsed_ns >= self.min_ns

    @property
    def hit_maximum(self) -> bool:
        if self.max_iterations is not None and self.iterations >= self.max_iterations:
            return True
        return self.max_ns is not None and self.elapsed_ns >= self.max_ns

    @property
    def done(self) -> bool:
        return self.rule_met or self.hit_maximum

    def plan_block(self, per_iteration_ns: float) -> int:
        """How many iterations the next synchronised block should run to meet the rule (at least one)."""
        needed = max(self.min_iterations - self.iterations, 0)
        remaining_ns = self.min_ns - self.elapsed_ns
        if remaining_ns > 0 and per_iteration_ns > 0:
            needed = max(needed, math.ceil(remaining_ns * BLOCK_MARGIN / per_iteration_ns))
        if self.max_iterations is not None:
            needed = min(needed, self.max_iterations - self.iterations)
        if self.max_ns is not None and per_iteration_ns > 0:
            needed = min(needed, max(1, int((self.max_ns - self.elapsed_ns) / per_iteration_ns)))
        return max(needed, 1)

    def validity(self) -> dict[str, Any]:
        return {
            "stop_rule_met": self.rule_met,
            "stopped_by_maximum": self.hit_maximum and not self.rule_met,
            "timed_iterations": self.iterations,
            "timed_seconds": self.elapsed_ns / NS_PER_S,
        }
