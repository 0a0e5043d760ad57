"""The time budget of ``clsbench tune`` and the cost model that estimates a candidate before it starts (pure).

A candidate's cost, per repeat (each repeat is one fresh worker process), is its **overhead** (starting the process,
importing torch, the device context, building the network, and for some kinds a build: torch.compile, an exported
artifact...) plus its **window** (warm-up and the timed region its stop rule asks for). Before anything was measured
on this machine the overhead is a per-kind default (:data:`PROCESS_S` plus the kind's build estimate); every
finished candidate refines it with what it really cost here (:meth:`CostModel.observe`): the estimate of a kind is
the mean overhead observed for that kind, and a kind not measured yet gets the mean eager overhead observed here plus
its build estimate. A candidate built once before (the same mode measured again at a later rung) counts its build at
:data:`WARM_BUILD_FRACTION`, since torch.compile's and the artifact cache's files are warm by then, until such a
rebuild was observed too. An artifact backend's candidate says what its build took (the isolated build process, which a
cache hit skips whole): its rebuild costs what it observed less that (on an H100, ResNet-50 export-frozen at batch
512 cost 86 s cold with a 69 s build, and a cached repeat about 17 s; the fraction would have said 37 s).

The clock is injectable (:class:`Budget`): the search never reads the wall clock itself, so tests drive it exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.durations import parse_duration
from clsbench.core.plan import StopRule
from clsbench.errors import InvalidInputError

#: The budget when none is given, per device type: 10 minutes on a GPU (one device call), 3 minutes on a CPU.
DEFAULT_BUDGET_S = {"cuda": 600.0, "cpu": 180.0}
#: Seconds a fresh worker costs besides its timed window, per device type, until one was observed here: interpreter
#: and torch import, CUDA context, building the network, cuDNN's autotuning in the first iteration. The first
#: budgeted ResNet-50 train tune on the H200 (2026-12-02) observed 12.9 s on average over 24 eager workers (median
#: 11.5 s; 15.7 s for the first 16, whose fp32 and tf32 modes autotune longest); 7 s, the prior before it, made the
#: plan promise stages it could not hold.
PROCESS_S = {"cuda": 12.0, "cpu": 2.0}
#: Seconds of one correctness check (a fresh process running fp32 eager and the candidate on one batch), before the
#: first one was observed here.
CHECK_S = {"cuda": 15.0, "cpu": 4.0}
#: Build priors of the candidate kinds that modify a compiled mode, per device type, before one was observed here (each
#: kind's ``build_s``, :mod:`clsbench.procedures.tune.mode_kinds`). ``+compile+freeze``: the compile kind's 45 s / 30 s
#: plus the 12 s the issue's H200 run (ResNet-50 bf16+cl, batch 512) took to build compile+freeze; an overestimate
#: keeps the budget safe, and the first frozen candidate measured here replaces it.
FREEZE_BUILD_S = {"cuda": 57.0, "cpu": 40.0}
#: ``train-step``: its candidates are the optimizer implementation (no build), the compiled forward and backward
#: with it (the compile kind's 45 s / 30 s), the whole step compiled (a second graph for the optimizer step: about
#: 11 s for the tiny test network on 2 CPU cores, more than the forward alone), the captured step (a few warm-up
#: steps and one capture) and the compiled step captured (a compile and a capture); one prior covers them all, so it
#: is their rough mean, and the cost model replaces it with the mean observed here after the first one.
TRAIN_STEP_BUILD_S = {"cuda": 35.0, "cpu": 20.0}
#: A candidate built once before rebuilds in this fraction of its first build (warm compile and artifact caches).
WARM_BUILD_FRACTION = 0.3
#: Seconds per iteration assumed when nothing is known about a mode yet (only the stop rule's minimum time counts).
UNKNOWN_ITERATION_S = 0.0
#: The screening rule's share of the full rule's timed minima (iterations and seconds); warm-up is kept whole, so
#: that cuDNN's autotuning and clock ramp-up stay out of the timed region.
SCREEN_FRACTION = 0.25


def parse_budget(value: str | float | int | None) -> float | None:
    """A budget in seconds from ``10m``, ``600s``, ``600``, ``1h``, ``1h30m`` or a number; None stays None.

    Raises:
        InvalidInputError: not a duration, or not > 0.
    """
    return None if value is None else parse_duration(value, "--budget", "budget")


def screen_rule(rule: StopRule) -> StopRule:
    """The screening rung's stop rule: :data:`SCREEN_FRACTION` of the timed minima, the same warm-up and cap."""
    return dataclasses.replace(rule, min_iterations=max(1, math.ceil(rule.min_iterations * SCREEN_FRACTION)),
                               min_seconds=rule.min_seconds * SCREEN_FRACTION)


def smallest_budget_s(device: str, rule: StopRule) -> float:
    """Seconds the first measurement of a search costs before anything was observed on this machine: one fresh eager
    worker (:data:`PROCESS_S`) for one repeat under ``rule`` (the screening rule; the full one for an exhaustive
    search), with the iteration time unknown. A budget below it cannot start a single candidate."""
    return CostModel(device, {}).estimate_s("eager", Window.of(rule), 1)


def check_budget(budget_s: float, device: str, rule: StopRule) -> None:
    """Refuse, before a search starts, a budget too small for its first measurement (:func:`smallest_budget_s`).

    Raises:
        InvalidInputError: naming the smallest budget that fits, in whole seconds.
    """
    need = smallest_budget_s(device, rule)
    if budget_s >= need:
        return
    fits = math.ceil(need)
    raise InvalidInputError(
        f"--budget {format_seconds(budget_s)} is too small for one screening measurement on {device_type(device)} "
        f"(about {need:.1f} s: a fresh worker and its warm-up and timed minimum), so nothing would be measured",
        f"give --budget {fits}s or more (the default on {device_type(device)} is "
        f"{format_seconds(default_budget(device))})")


def device_type(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def default_budget(device: str) -> float:
    """:data:`DEFAULT_BUDGET_S` for the device."""
    return DEFAULT_BUDGET_S[device_type(device)]


def format_seconds(seconds: float | None) -> str:
    """``75`` -> ``1m15s``; ``9.5`` -> ``9.5s``; None -> ``-``; infinity (no budget) -> ``unlimited``."""
    if seconds is None:
        return "-"
    if math.isinf(seconds) and seconds > 0:
        return "unlimited"
    seconds = max(0.0, float(seconds))
    if seconds >= 60:
        whole = int(round(seconds))
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{seconds:.1f}s"


class Budget:
    """Seconds to spend, read from an injectable clock; ``spent_before_s`` is what an interrupted search spent.

    Args:
        total_s: the whole budget, what an interrupted search spent included.
        clock: seconds, monotonic (``time.monotonic`` by default; a fake in tests).
        spent_before_s: seconds an earlier part of the search spent (``tune --resume``).
    """

    def __init__(self, total_s: float, clock: Callable[[], float] | None = None, spent_before_s: float = 0.0) -> None:
        self.total_s = float(total_s)
        self.clock = clock or time.monotonic
        self.spent_before_s = float(spent_before_s)
        self.started = self.clock()

    def spent_s(self) -> float:
        return self.spent_before_s + (self.clock() - self.started)

    def left_s(self) -> float:
        return self.total_s - self.spent_s()

    def fits(self, estimate_s: float, reserve_s: float = 0.0) -> bool:
        """Whether a candidate estimated at ``estimate_s`` can finish with ``reserve_s`` still left afterwards."""
        return estimate_s + reserve_s <= self.left_s()


@dataclass(frozen=True)
class Window:
    """What a stop rule asks of one repeat: warm-up and timed minima (iterations and seconds), and its cap."""

    warmup: int
    warmup_seconds: float
    min_iterations: int
    min_seconds: float
    max_seconds: float | None = None

    @classmethod
    def of(cls, rule: Any) -> Window:
        return cls(rule.warmup, rule.warmup_seconds, rule.min_iterations, rule.min_seconds, rule.max_seconds)

    def seconds(self, iteration_s: float | None) -> float:
        """Seconds of warm-up plus timed region, for iterations lasting ``iteration_s`` (None: unknown)."""
        per = UNKNOWN_ITERATION_S if iteration_s is None else max(0.0, iteration_s)
        timed = max(self.min_seconds, self.min_iterations * per)
        if self.max_seconds is not None:
            timed = min(timed, self.max_seconds)
        return max(self.warmup_seconds, self.warmup * per) + timed


@dataclass
class CostModel:
    """Estimates a candidate's seconds before it starts; refined by what candidates cost on this machine.

    Args:
        device: the device the search runs on (its type picks the defaults).
        build_s: each kind's build estimate in seconds on this device type (0 for eager), from the kinds.
        observed: overhead seconds observed per repeat, by ``kind`` or ``kind:warm`` (a rebuild); stored in
            ``settings["tune"]["cost_model"]`` so that a resumed search starts from them.
    """

    device: str
    build_s: Mapping[str, float]
    observed: dict[str, list[float]] = field(default_factory=dict)

    @property
    def process_s(self) -> float:
        eager = self.observed.get("eager")
        return sum(eager) / len(eager) if eager else PROCESS_S[device_type(self.device)]

    def overhead_s(self, kind: str, *, warm: bool = False) -> float:
        """Seconds per repeat before the timed work: observed for this kind here, else the eager overhead
        observed here (or the default) plus the kind's build estimate."""
        name = f"{kind}:warm" if warm else kind
        seen = self.observed.get(name)
        if seen:
            return sum(seen) / len(seen)
        build = self.build_prior_s(kind)
        if warm:
            cold = self.observed.get(kind)
            saved = self.observed.get(f"{kind}:build")
            if cold and saved:  # a cache hit skips the build this kind's candidates said they took
                return max(self.process_s, sum(cold) / len(cold) - sum(saved) / len(saved))
            if cold:  # a rebuild saves part of the build observed for this kind, nothing of the process start
                return max(self.process_s, sum(cold) / len(cold) - (1.0 - WARM_BUILD_FRACTION) * build)
            build *= WARM_BUILD_FRACTION
        return self.process_s + build

    def build_prior_s(self, kind: str) -> float:
        """The build estimate of ``kind`` (a kind's name, or a finer key such as ``backend:export``, which falls back
        to the estimate of its kind, ``backend``, when it has none of its own)."""
        if kind in self.build_s:
            return float(self.build_s[kind])
        return float(self.build_s.get(kind.split(":", 1)[0], 0.0))

    def estimate_s(self, kind: str, window: Window, repeats: int, iteration_s: float | None = None, *,
                   warm: bool = False) -> float:
        """Seconds a candidate of ``kind`` costs for ``repeats`` fresh repeats under ``window``."""
        return repeats * (self.overhead_s(kind, warm=warm) + window.seconds(iteration_s))

    def check_s(self) -> float:
        """Seconds of one correctness-check process."""
        seen = self.observed.get("check")
        return sum(seen) / len(seen) if seen else CHECK_S[device_type(self.device)]

    def observe(self, kind: str, actual_s: float, window: Window, repeats: int, iteration_s: float | None = None,
                *, warm: bool = False) -> None:
        """Record what a candidate really cost: its overhead per repeat is what its window does not explain."""
        if repeats < 1 or not math.isfinite(actual_s):
            return
        overhead = max(0.0, actual_s / repeats - window.seconds(iteration_s))
        self.observed.setdefault(f"{kind}:warm" if warm else kind, []).append(overhead)

    def observe_build(self, kind: str, build_s: float) -> None:
        """Record the seconds a candidate of ``kind`` spent building what a cache keeps whole (an artifact backend's
        build process): a warm repeat of that kind skips them."""
        if math.isfinite(build_s) and build_s > 0:
            self.observed.setdefault(f"{kind}:build", []).append(build_s)

    def observe_check(self, actual_s: float) -> None:
        if math.isfinite(actual_s):
            self.observed.setdefault("check", []).append(max(0.0, actual_s))

    def to_dict(self) -> dict[str, Any]:
        return {"process_s_default": PROCESS_S[device_type(self.device)], "build_s": dict(self.build_s),
                "warm_build_fraction": WARM_BUILD_FRACTION, "observed_overhead_s": {
                    k: list(v) for k, v in self.observed.items()}}

    def restore(self, stored: Mapping[str, Any] | None) -> None:
        """Take the observations of an interrupted search (``to_dict``'s ``observed_overhead_s``)."""
        for kind, values in ((stored or {}).get("observed_overhead_s") or {}).items():
            numbers = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if numbers:
                self.observed[str(kind)] = numbers


__all__ = [
    "DEFAULT_BUDGET_S",
    "FREEZE_BUILD_S",
    "TRAIN_STEP_BUILD_S",
    "Budget",
    "CostModel",
    "SCREEN_FRACTION",
    "Window",
    "check_budget",
    "default_budget",
    "format_seconds",
    "parse_budget",
    "screen_rule",
    "smallest_budget_s",
]
