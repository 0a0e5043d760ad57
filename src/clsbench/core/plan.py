"""What to measure, how, and when to stop: frozen dataclasses with documented defaults.

Follow ``batch_size`` from the command line to the timer: ``cli.run`` parses it into a :class:`Cell`, the
:class:`RunPlan` holds the cells, ``runner`` sends one cell to each fresh worker, and the workload builds its
input tensor from ``cell.batch_size``. Nothing else needs to know it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.errors import InvalidInputError
from clsbench.results.schema import DEFAULT_BACKEND, Measurement, backend_key, backend_suffix

WORKLOADS = ("infer-latency", "infer-throughput", "train")

#: Largest batch size accepted without question; far beyond what fits on any GPU at 224x224 today.
MAX_BATCH_SIZE = 65536


@dataclass(frozen=True)
class StopRule:
    """When warm-up ends and when the timed region may stop.

    Timing stops once BOTH ``min_iterations`` and ``min_seconds`` hold, or as soon as either maximum is hit
    (then the result says the stop rule was not met). Warm-up likewise runs at least ``warmup`` iterations
    AND at least ``warmup_seconds``.
    """

    warmup: int
    min_iterations: int
    min_seconds: float
    warmup_seconds: float = 0.0
    max_iterations: int | None = None
    max_seconds: float | None = None

    def validate(self) -> None:
        if self.warmup < 0:
            raise InvalidInputError(f"warm-up must be >= 0, got {self.warmup}", "e.g. --warmup 10")
        if self.min_iterations < 1:
            raise InvalidInputError(f"iterations must be >= 1, got {self.min_iterations}", "e.g. --iterations 50")
        if self.min_seconds < 0 or self.warmup_seconds < 0:
            raise InvalidInputError("durations must be >= 0 seconds", "e.g. --min-time 2")
        if self.max_iterations is not None and self.max_iterations < self.min_iterations:
            raise InvalidInputError("max iterations is below min iterations", "lower --iterations")
        if self.max_seconds is not None and self.max_seconds <= 0:
            raise InvalidInputError("max time must be > 0 seconds", "e.g. --max-time 60")
        if self.max_seconds is not None and self.max_seconds < self.min_seconds:
            raise InvalidInputError(f"the stop rule's maximum time ({self.max_seconds:g} s) is below its minimum "
                                    f"({self.min_seconds:g} s): every repeat would stop before its minimum",
                                    f"raise --max-time to {self.min_seconds:g} or more, or lower --min-time")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def with_overrides(self, **overrides: Any) -> StopRule:
        """This rule with some fields replaced, as ``--warmup``/``--iterations``/``--min-time``/``--max-time`` do.

        A maximum below a raised minimum time is dropped unless it was given too: a given maximum below the minimum
        (given or the rule's own) is refused, naming both options, since every repeat would stop before its minimum.
        No warm-up iterations means no warm-up time either.

        Raises:
            InvalidInputError: ``max_seconds`` given below the minimum time.
        """
        given = {k: v for k, v in overrides.items() if v is not None}
        updated = dataclasses.replace(self, **given)
        if updated.max_seconds is not None and updated.max_seconds < updated.min_seconds:
            if "max_seconds" not in given:
                updated = dataclasses.replace(updated, max_seconds=None)
            elif "min_seconds" in given:
                raise InvalidInputError(
                    f"--max-time {updated.max_seconds:g} is below --min-time {updated.min_seconds:g}: every repeat "
                    "would stop before its minimum time", f"raise --max-time to {updated.min_seconds:g} or more, or "
                    f"lower --min-time to {updated.max_seconds:g} or less")
            else:
                raise InvalidInputError(
                    f"--max-time {updated.max_seconds:g} is below the {updated.min_seconds:g} s every repeat is timed "
                    "at least (the workload's stop rule): every repeat would stop before its minimum time",
                    f"raise --max-time to {updated.min_seconds:g} or more, or give --min-time "
                    f"{updated.max_seconds:g} (or less) with it")
        if updated.warmup == 0:
            updated = dataclasses.replace(updated, warmup_seconds=0.0)
        return updated


#: Stop rules per workload on a GPU under the ``thorough`` protocol: the defaults of every run before protocols
#: existed (issue 35). Latency: 20 warm-up requests, then >= 1000 requests (MLPerf SingleStream's minimum query count
#: is the anchor; 1,000 is also the fewest that support a p99.9, analysis.stats.MIN_SAMPLES) AND >= 1 s. The floor was
#: 5 s until 2026-12-02 (issue 15 allowed dropping it): in the H200 seed suites of 2026-11-30, 1000 batch-1 requests
#: took 3.4-13 ms each, so the 5 s floor bound only the fastest fp32 cells (ResNet-50, ViT-Tiny, at times MobileNetV3
#: and EfficientNet: timed 5.0-5.2 s) and cost the suite about 15 s; 1 s keeps a graph-replayed request (about 0.9 ms)
#: above a second, as the batch workloads are. Throughput and training: >= 20 iterations AND >= 1 s after >= 5 warm-up
#: iterations lasting >= 0.5 s, which keeps clocks boosted and cudnn autotuning out of the timed region; the maxima
#: only stop runaway measurements. On the H200, batch-256 throughput over 2 s windows moved by 0.04-0.9% between fresh
#: processes (seed suite, 2026-11-30), so 1 s loses nothing and keeps the seed suite inside one 10-minute device call.
THOROUGH_GPU_STOP_RULES: dict[str, StopRule] = {
    "infer-latency": StopRule(warmup=20, min_iterations=1000, min_seconds=1.0, warmup_seconds=0.5,
                              max_seconds=120.0),
    "infer-throughput": StopRule(warmup=5, min_iterations=20, min_seconds=1.0, warmup_seconds=0.5,
                                 max_seconds=120.0),
    "train": StopRule(warmup=5, min_iterations=20, min_seconds=1.0, warmup_seconds=0.5, max_seconds=120.0),
}

#: Timed requests per latency repeat under the ``default`` protocol on a GPU (issue 35): the seed suite must finish in
#: <= 540 s on one H100/H200 with three fresh-process repeats per cell. 300 is three times the 100 samples a p99 needs
#: in each repeat (analysis.stats.MIN_SAMPLES, nearest rank: n >= 1 / (1 - 0.99)), so a repeat's p99 is its 297th
#: sample, not its maximum; a p99.9 (1,000 samples) is withheld, with the reason, unless the >= 1 s floor alone gave
#: 1,000 requests (requests under 1 ms). In the H200 seed suite of 2026-12-02 (benchmarks/results/h200), 1000 batch-1
#: requests took 2.9-15 s per repeat (21 latency repeats: 133 s timed); the first 300 of those same samples, with the
#: 1 s floor, take 1.0-4.6 s (41 s): about 92 s less for the suite.
DEFAULT_GPU_LATENCY_REQUESTS = 300

#: The ``default`` protocol on a GPU: the thorough rules with :data:`DEFAULT_GPU_LATENCY_REQUESTS` latency requests.
GPU_STOP_RULES: dict[str, StopRule] = {
    **THOROUGH_GPU_STOP_RULES,
    "infer-latency": dataclasses.replace(THOROUGH_GPU_STOP_RULES["infer-latency"],
                                         min_iterations=DEFAULT_GPU_LATENCY_REQUESTS),
}

#: Defaults per workload on a CPU, small enough for the quick suite (docs/run.md: time on 2 idle cores), under either
#: protocol: they never held 1,000 requests, so ``thorough`` has nothing to restore here. Latency takes >= 100
#: requests, the fewest that support a p99 (analysis.stats.MIN_SAMPLES).
CPU_STOP_RULES: dict[str, StopRule] = {
    "infer-latency": StopRule(warmup=5, min_iterations=100, min_seconds=1.0, max_seconds=30.0),
    "infer-throughput": StopRule(warmup=2, min_iterations=5, min_seconds=1.0, max_seconds=30.0),
    "train": StopRule(warmup=2, min_iterations=5, min_seconds=1.0, max_seconds=30.0),
}


@dataclass(frozen=True)
class Protocol:
    """A named set of stop-rule defaults per workload, on a GPU and on a CPU (``--protocol``; issue 35).

    Explicit ``--warmup``, ``--iterations``, ``--min-time`` and ``--max-time`` still replace the fields of the rule
    the protocol gives; the result's settings record the protocol's name (``settings["protocol"]``).
    """

    name: str
    description: str
    gpu: dict[str, StopRule]
    cpu: dict[str, StopRule]

    def rules(self, device: str) -> dict[str, StopRule]:
        """This protocol's rule per workload on ``device`` (a copy: callers may replace entries)."""
        return dict(self.gpu if device.startswith("cuda") else self.cpu)


DEFAULT_PROTOCOL = "default"
THOROUGH_PROTOCOL = "thorough"

#: The protocols, by name; the first is the default. Only the GPU latency rule tells them apart today.
PROTOCOLS: dict[str, Protocol] = {
    DEFAULT_PROTOCOL: Protocol(
        DEFAULT_PROTOCOL, f"latency repeats of >= {DEFAULT_GPU_LATENCY_REQUESTS} requests and >= 1 s on a GPU "
        "(p99 reported, p99.9 withheld below 1,000 requests)", GPU_STOP_RULES, CPU_STOP_RULES),
    THOROUGH_PROTOCOL: Protocol(
        THOROUGH_PROTOCOL, "the long defaults of every run before protocols: latency repeats of >= 1000 requests "
        "on a GPU (p99.9 reported)", THOROUGH_GPU_STOP_RULES, CPU_STOP_RULES),
}
PROTOCOL_NAMES = tuple(PROTOCOLS)

#: How a result written before protocols existed (no ``settings["protocol"]``) reads: its GPU latency rule was 1000
#: requests, the ``thorough`` one (:data:`PRE_PROTOCOL_EQUIVALENT`).
PRE_PROTOCOL_LABEL = "thorough (before protocols)"
PRE_PROTOCOL_EQUIVALENT = THOROUGH_PROTOCOL


def get_protocol(name: str) -> Protocol:
    """The protocol called ``name``; the label of a file from before protocols gives the one it matches.

    Raises:
        InvalidInputError: no protocol has that name.
    """
    if name == PRE_PROTOCOL_LABEL:
        name = PRE_PROTOCOL_EQUIVALENT
    if name not in PROTOCOLS:
        raise InvalidInputError(f"unknown protocol {name!r}", "use --protocol " + " or --protocol ".join(PROTOCOLS))
    return PROTOCOLS[name]


def protocol_of(settings: dict[str, Any]) -> str | None:
    """The protocol a result's ``settings`` ran under: the name it records; :data:`PRE_PROTOCOL_LABEL` for a file
    from before protocols that stores stop rules; None for one with no stop rules to speak of (``serve``: LoadGen
    decides how long it measures)."""
    name = settings.get("protocol")
    if isinstance(name, str) and name:
        return name
    return PRE_PROTOCOL_LABEL if settings.get("stop_rules") else None


def default_stop_rules(device: str, protocol: str = DEFAULT_PROTOCOL) -> dict[str, StopRule]:
    """The stop rule per workload on ``device`` under ``protocol`` (:data:`PROTOCOLS`)."""
    return get_protocol(protocol).rules(device)


@dataclass(frozen=True)
class Cell:
    """One measurement: a model in a mode running a workload at a batch size on a device (on an inference backend,
    ``eager`` by default)."""

    model: str
    workload: str
    mode: str
    batch_size: int
    device: str
    input_size: int | None = None  # None: the model's own default
    data: DataSettings | None = None  # None: the synthetic batch resident on the device (train only otherwise)
    backend: str = DEFAULT_BACKEND  # the inference backend (clsbench.backends); eager: the PyTorch module itself

    @property
    def key(self) -> tuple[Any, ...]:
        """(model, workload, mode, batch size, device), plus the data label for a real-data cell and the backend
        for one not eager (the key of the :class:`~clsbench.results.schema.Measurement` it becomes)."""
        base = (self.model, self.workload, self.mode, self.batch_size, self.device)
        base = base if self.data is None else (*base, self.data.label())
        return (*base, *backend_key(self.backend))

    def label(self) -> str:
        text = f"{self.model} {self.workload} {self.mode} bs{self.batch_size}"
        text = text if self.data is None else f"{text} [{self.data.label()}]"
        return text + backend_suffix(self.backend)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if self.data is None:
            del data["data"]  # files without real data read exactly as before
        else:
            data["data"] = self.data.to_dict()
        if self.backend == DEFAULT_BACKEND:
            del data["backend"]  # and eager files too
        return data

    @classmethod
    def of(cls, measurement: Measurement) -> Cell:
        """The cell a stored measurement measured."""
        m = measurement
        data = DataSettings.from_dict(m.data) if m.data is not None else None
        return cls(m.model, m.workload, m.mode, m.batch_size, m.device, m.input_size, data, m.backend)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Cell:
        fields = dict(data)
        if fields.get("data") is not None:
            fields["data"] = DataSettings.from_dict(fields["data"])
        return cls(**fields)


@dataclass(frozen=True)
class TrainSettings:
    """Optimizer used by the train workload: SGD with momentum, as in the reference ImageNet recipes."""

    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4


#: Steps profiled after the timed region, and profiler warm-up steps before them (torch.profiler's schedule: the
#: first steps under a profiler pay its start-up costs).
PROFILE_STEPS = 5
PROFILE_WARMUP = 3


@dataclass(frozen=True)
class ProfileSettings:
    """``run --profile`` and ``clsbench profile``: after the first repeat's timed region, profile ``steps`` more
    steps (after ``warmup`` profiler warm-up steps) and attach the summary (:mod:`clsbench.analysis.profile`).

    ``trace_path``: where the Chrome trace goes (``clsbench profile``: ``DIR/trace.json``); None keeps it only as
    long as it takes to summarise.
    """

    steps: int = PROFILE_STEPS
    warmup: int = PROFILE_WARMUP
    trace_path: str | None = None

    def validate(self) -> ProfileSettings:
        if self.steps < 1:
            raise InvalidInputError(f"profiled steps must be >= 1, got {self.steps}", "e.g. --steps 5")
        if self.warmup < 0:
            raise InvalidInputError(f"profiler warm-up steps must be >= 0, got {self.warmup}",
                                    "e.g. --profile-warmup 3")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileSettings:
        return cls(steps=int(data.get("steps", PROFILE_STEPS)), warmup=int(data.get("warmup", PROFILE_WARMUP)),
                   trace_path=data.get("trace_path"))


#: The orders a run's repeats can take (:func:`clsbench.engine.loop.schedule`); the first is the default.
ORDERS = ("round", "cell")


@dataclass(frozen=True)
class RunPlan:
    """Everything one ``clsbench run`` will do; stored in the result file so ``--resume`` can finish it."""

    cells: tuple[Cell, ...]
    repeats: int = 3
    stop_rules: dict[str, StopRule] = field(default_factory=dict)
    seed: int = 0  # model initialisation
    data_seed: int = 0  # synthetic inputs and labels
    timeout_s: float = 900.0  # per worker process (one repeat), compile included
    compile_mode: str = "default"  # torch.compile mode when a mode names +compile without its own
    cudnn_benchmark: bool = True
    overlap_prepare: bool = True  # on a GPU, prepare the next worker while the current one is not timed (runner.py)
    order: str = "round"  # repeats in rounds over every cell (shuffled per round by the seed), or "cell" by cell
    telemetry: bool = True  # on a GPU, sample NVML (power, clocks, temperature...) over each timed region
    train: TrainSettings = TrainSettings()
    suite: str | None = None
    no_cache: bool = False  # inference backends: build every artifact anew (the new build replaces the cached one)
    cache_dir: str | None = None  # inference backends: the artifact cache; None: $CLSBENCH_CACHE or ~/.cache/...
    profile: ProfileSettings | None = None  # profile the first repeat of each cell after its timed region
    window_s: float | None = None  # a soak: split each timed region into windows of this many seconds
    telemetry_interval_s: float | None = None  # seconds between telemetry samples; None: the sources' default
    protocol: str = DEFAULT_PROTOCOL  # the stop rules' protocol (PROTOCOLS); PRE_PROTOCOL_LABEL: an older file's

    def validate(self) -> None:
        if self.repeats < 1:
            raise InvalidInputError(f"repeats must be >= 1, got {self.repeats}", "e.g. --repeats 3")
        if self.timeout_s <= 0:
            raise InvalidInputError("timeout must be > 0 seconds", "e.g. --timeout 600")
        if self.order not in ORDERS:
            raise InvalidInputError(f"unknown order {self.order!r}", "use --order round or --order cell")
        if not self.cells:
            raise InvalidInputError("nothing to measure", "name a --model or a --suite")
        for rule in self.stop_rules.values():
            rule.validate()
        get_protocol(self.protocol)
        if self.profile is not None:
            self.profile.validate()
        if self.window_s is not None and not self.window_s > 0:
            raise InvalidInputError(f"the window must be > 0 seconds, got {self.window_s:g}", "e.g. --window 10s")
        if self.telemetry_interval_s is not None and not self.telemetry_interval_s > 0:
            raise InvalidInputError(f"the telemetry interval must be > 0 seconds, got {self.telemetry_interval_s:g}",
                                    "e.g. --sample-interval 1")
        for cell in self.cells:
            validate_batch_size(cell.batch_size)

    def stop_rule(self, workload: str) -> StopRule:
        return self.stop_rules[workload]

    def to_dict(self) -> dict[str, Any]:
        optional: dict[str, Any] = {"no_cache": True} if self.no_cache else {}
        if self.cache_dir is not None:
            optional["cache_dir"] = self.cache_dir
        if self.window_s is not None:  # a soak's
            optional["window_s"] = self.window_s
        if self.telemetry_interval_s is not None:
            optional["telemetry_interval_s"] = self.telemetry_interval_s
        # Always written (files from before protocols have none, and read as PRE_PROTOCOL_LABEL); a plan read from
        # such a file writes none either, so it reads as before.
        protocol = {"protocol": self.protocol} if self.protocol in PROTOCOLS else {}
        return {
            "suite": self.suite,
            "repeats": self.repeats,
            "seed": self.seed,
            "data_seed": self.data_seed,
            "timeout_s": self.timeout_s,
            "compile_mode": self.compile_mode,
            "cudnn_benchmark": self.cudnn_benchmark,
            "overlap_prepare": self.overlap_prepare,
            "order": self.order,
            "telemetry": self.telemetry,
            "train": dataclasses.asdict(self.train),
            "stop_rules": {name: rule.to_dict() for name, rule in self.stop_rules.items()},
            **protocol,
            **optional,  # written only when not at their defaults, so other files read as before
            **({"profile": self.profile.to_dict()} if self.profile is not None else {}),
            "cells": [cell.to_dict() for cell in self.cells],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        return cls(
            cells=tuple(Cell.from_dict(c) for c in data["cells"]),
            repeats=int(data["repeats"]),
            stop_rules={k: StopRule(**v) for k, v in data["stop_rules"].items()},
            seed=int(data["seed"]),
            data_seed=int(data["data_seed"]),
            timeout_s=float(data["timeout_s"]),
            compile_mode=str(data["compile_mode"]),
            cudnn_benchmark=bool(data["cudnn_benchmark"]),
            overlap_prepare=bool(data.get("overlap_prepare", False)),
            order=str(data.get("order", "cell")),  # files from before round order ran cell by cell
            telemetry=bool(data.get("telemetry", True)),
            train=TrainSettings(**data["train"]),
            suite=data.get("suite"),
            no_cache=bool(data.get("no_cache", False)),
            cache_dir=data.get("cache_dir"),
            profile=ProfileSettings.from_dict(data["profile"]) if data.get("profile") else None,
            window_s=data.get("window_s"),
            telemetry_interval_s=data.get("telemetry_interval_s"),
            protocol=protocol_of(data) or PRE_PROTOCOL_LABEL,
        )


def validate_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidInputError(f"batch size must be >= 1, got {batch_size}", "e.g. --batch-size 32")
    if batch_size > MAX_BATCH_SIZE:
        raise InvalidInputError(
            f"batch size {batch_size} is absurd (limit {MAX_BATCH_SIZE})", "use a batch that fits in memory"
        )


def validate_workload(name: str) -> str:
    if name not in WORKLOADS:
        raise InvalidInputError(f"unknown workload {name!r}", "choose from: " + ", ".join(WORKLOADS))
    return name
