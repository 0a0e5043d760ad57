"""The options every procedure shares, declared once: what a measurement does and how a run executes.

:class:`MeasureOptions` holds what changes the figures (repeats, the stop rule's overrides, input size, timeout,
compile mode, seed, cuDNN autotuning, telemetry); :class:`Execution` how a procedure runs without changing what it
measures (isolation, overlapped preparation, the GPU probe, and the testing hooks: a fake clock, a progress
callback, a pre-read environment). ``run``, ``sweep``, ``tune``, ``diagnose`` and ``scale`` take these two objects;
the CLI declares their options from the field metadata below (:mod:`clsbench.cli.options`), and every "reproduce
this" line renders them back with :meth:`MeasureOptions.to_cli_args`. A new option is one field here.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clsbench.core.plan import DEFAULT_PROTOCOL, ORDERS, PRE_PROTOCOL_EQUIVALENT, PROTOCOL_NAMES, PROTOCOLS
from clsbench.errors import InvalidInputError

if TYPE_CHECKING:
    from clsbench.core.data_settings import DataSettings
    from clsbench.core.plan import Cell, RunPlan

#: Seconds a worker (one repeat, compilation included) may take before it is killed and recorded as ``timeout``.
DEFAULT_TIMEOUT_S = 900.0
#: The torch.compile mode used when a mode names ``+compile`` without its own.
DEFAULT_COMPILE_MODE = "default"


def _option(flag: str, help: str, *, negative: str | None = None, metavar: str | None = None,
            choices: tuple[str, ...] | None = None, opt_in: bool = False) -> dict[str, Any]:
    """Field metadata: the command-line flag, its help text, for a switch the flag that turns it off, for a choice
    its values, and whether only the commands that name it declare it (``opt_in``: it means something to some
    commands only, as ``--protocol`` does where the stop rules come from the workloads' defaults)."""
    return {"flag": flag, "help": help, "negative": negative, "metavar": metavar, "choices": choices,
            "opt_in": opt_in}


@dataclass(frozen=True)
class MeasureOptions:
    """What every measurement does and when it stops.

    ``protocol`` names the set of stop-rule defaults (:data:`~clsbench.core.plan.PROTOCOLS`); ``warmup``,
    ``iterations``, ``min_time`` and ``max_time`` override the fields of the workload's stop rule under it
    (:class:`~clsbench.core.plan.StopRule`); None keeps the protocol's rule for the device.
    """

    repeats: int = field(default=3, metadata=_option("--repeats", "Fresh worker processes per measurement."))
    protocol: str = field(default=DEFAULT_PROTOCOL, metadata=_option(
        "--protocol", "Stop-rule defaults: default (GPU latency repeats of >= 300 requests: p99, no p99.9) or "
                      "thorough (>= 1000 requests, as before protocols: p99.9 too). --iterations etc. still override.",
        choices=PROTOCOL_NAMES, opt_in=True))
    warmup: int | None = field(default=None, metadata=_option(
        "--warmup", "Warm-up iterations (requests) before timing; default: the workload's rule."))
    iterations: int | None = field(default=None, metadata=_option(
        "--iterations", "Minimum timed iterations (requests) per repeat; default: the workload's rule."))
    min_time: float | None = field(default=None, metadata=_option(
        "--min-time", "Minimum timed seconds per repeat; default: the workload's rule."))
    max_time: float | None = field(default=None, metadata=_option(
        "--max-time", "Stop a repeat after this many timed seconds."))
    input_size: int | None = field(default=None, metadata=_option(
        "--input-size", "Square input side; default: the model's own (usually 224)."))
    seed: int = field(default=0, metadata=_option("--seed", "Seed for weights and synthetic data."))
    compile_mode: str = field(default=DEFAULT_COMPILE_MODE, metadata=_option(
        "--compile-mode", "torch.compile mode for +compile."))
    timeout_s: float = field(default=DEFAULT_TIMEOUT_S, metadata=_option(
        "--timeout", "Seconds before a worker is killed and the repeat recorded as failed (timeout)."))
    cudnn_benchmark: bool | None = field(default=True, metadata=_option(
        "--cudnn-benchmark", "Let cuDNN autotune convolution algorithms (in the untimed first iteration).",
        negative="--no-cudnn-benchmark"))
    telemetry: bool = field(default=True, metadata=_option(
        "--telemetry", "On a GPU, sample power, clocks, temperature and throttling over each timed region (NVML).",
        negative="--no-telemetry"))

    def validate(self) -> MeasureOptions:
        """Raise InvalidInputError on a value no measurement can use; return self."""
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise InvalidInputError(f"repeats must be >= 1, got {self.repeats}", "e.g. --repeats 3")
        if not self.timeout_s > 0:
            raise InvalidInputError("timeout must be > 0 seconds", "e.g. --timeout 600")
        if self.protocol not in PROTOCOLS:
            raise InvalidInputError(f"unknown protocol {self.protocol!r}",
                                    "use --protocol " + " or --protocol ".join(PROTOCOL_NAMES))
        if self.min_time is not None and self.max_time is not None and self.max_time < self.min_time:
            raise InvalidInputError(f"--max-time {self.max_time:g} is below --min-time {self.min_time:g}: every "
                                    "repeat would stop before its minimum time",
                                    f"raise --max-time to {self.min_time:g} or more, or lower --min-time to "
                                    f"{self.max_time:g} or less")
        if self.input_size is not None and not 16 <= self.input_size <= 4096:
            raise InvalidInputError(f"input size {self.input_size} is out of range",
                                    "use 16..4096, e.g. --input-size 224")
        return self

    def stop_overrides(self) -> dict[str, Any]:
        """The stop-rule fields these options replace, as :meth:`StopRule.with_overrides` takes them."""
        return {"warmup": self.warmup, "min_iterations": self.iterations, "min_seconds": self.min_time,
                "max_seconds": self.max_time}

    @classmethod
    def of_plan(cls, plan: RunPlan, workload: str) -> MeasureOptions:
        """The options that made ``plan`` (for ``workload``'s stop rule): what a reproduce line must say.

        A plan read from a file written before protocols gives ``thorough``, the protocol whose rules it ran under.
        """
        from clsbench.core.plan import default_stop_rules

        device = plan.cells[0].device if plan.cells else "cpu"
        protocol = plan.protocol if plan.protocol in PROTOCOLS else PRE_PROTOCOL_EQUIVALENT
        rule = plan.stop_rules.get(workload)
        default = default_stop_rules(device, protocol).get(workload)
        overrides: dict[str, Any] = {}
        if rule is not None and default is not None:
            overrides = {
                "warmup": rule.warmup if rule.warmup != default.warmup else None,
                "iterations": rule.min_iterations if rule.min_iterations != default.min_iterations else None,
                "min_time": rule.min_seconds if rule.min_seconds != default.min_seconds else None,
                "max_time": rule.max_seconds if rule.max_seconds is not None
                and rule.max_seconds != default.max_seconds else None,
            }
        return cls(repeats=plan.repeats, protocol=protocol, timeout_s=plan.timeout_s, compile_mode=plan.compile_mode,
                   seed=plan.seed, cudnn_benchmark=plan.cudnn_benchmark, telemetry=plan.telemetry, **overrides)

    def to_cli_args(self, *, skip: frozenset[str] = frozenset()) -> list[str]:
        """The command-line flags that give these options, leaving out defaults (and the fields in ``skip``)."""
        return _cli_args(self, MeasureOptions(), skip)


@dataclass(frozen=True)
class Execution:
    """How a procedure runs, without changing what it measures.

    Attributes:
        isolation: ``process`` (a fresh worker per repeat; the default) or ``inline`` (this process: debugging
            and tests only).
        overlap: on a GPU, prepare the next worker while the current one starts up and warms up
            (:mod:`clsbench.engine.executor`); recorded in the plan.
        probe: on a GPU, measure the matmul and copy ceilings first (about 10 s), for MFU against them.
        clock: the clock the workloads read (a :class:`~clsbench.measure.clock.FakeClock` in tests); None: wall.
        progress: called with each :class:`~clsbench.engine.events.ProgressEvent` (``serve``: with each event dict
            of :func:`clsbench.procedures.serve.serve`).
        env: the environment to record; None reads it now.
    """

    isolation: str = field(default="process", metadata=_option(
        "--isolation", "process: a fresh worker per repeat; inline: this process (debugging only).",
        choices=("process", "inline")))
    overlap: bool = field(default=True, metadata=_option(
        "--overlap", "On a GPU, fork the next worker and build its model while the current one starts up and warms "
                     "up; it is stopped during the timed region (0.57 s hidden per repeat in the H200 seed suite).",
        negative="--no-overlap"))
    order: str = field(default="round", metadata=_option(
        "--order", "round: repeat 1 of every measurement, then repeat 2..., each round shuffled by --seed, so a "
                   "slow spell of the host hits different measurements; cell: all repeats of one, then the next.",
        choices=ORDERS))
    probe: bool = field(default=True, metadata=_option(
        "--probe", "On a GPU, first measure the matmul and copy ceilings (about 10 s), for MFU against them.",
        negative="--no-probe"))
    clock: Any = None
    progress: Any = None
    env: dict[str, Any] | None = None

    def validate(self) -> Execution:
        if self.isolation not in ("process", "inline"):
            raise InvalidInputError(f"unknown isolation {self.isolation!r}", "use process or inline")
        if self.order not in ORDERS:
            raise InvalidInputError(f"unknown order {self.order!r}", "use --order round or --order cell")
        return self

    def to_cli_args(self) -> list[str]:
        """The flags that matter to what a reproduce line measures (``--no-overlap``); the rest are left out."""
        return _cli_args(self, Execution(), frozenset({"isolation", "probe"}))


def _cli_args(options: Any, defaults: Any, skip: frozenset[str]) -> list[str]:
    args: list[str] = []
    for f in dataclasses.fields(options):
        flag = f.metadata.get("flag")
        value = getattr(options, f.name)
        if flag is None or f.name in skip or value is None or value == getattr(defaults, f.name):
            continue
        if isinstance(value, bool):
            args.append(flag if value else f.metadata["negative"])
        else:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return args


def data_cli_args(data: DataSettings) -> list[str]:
    """The ``run`` flags that select the real-data settings ``data``."""
    from clsbench.core.data_settings import DEFAULT_DATA_TIMEOUT_S

    args = ["--data", data.directory, "--data-source", data.source, "--pipeline", data.pipeline, "--num-workers",
            str(data.num_workers)]
    if data.pin_memory:
        args.append("--pin-memory")
    if data.persistent_workers:
        args.append("--persistent-workers")
    if data.prefetch_factor is not None:
        args += ["--prefetch-factor", str(data.prefetch_factor)]
    if not data.prime_cache:
        args.append("--no-prime-cache")
    if data.normalize != "worker":
        args += ["--normalize-on", data.normalize]
    if data.augment is not None:
        args += ["--gpu-augment", data.augment]
    if data.decoder is not None:
        args += ["--gpu-decode", data.decoder]
    if data.timeout_s != DEFAULT_DATA_TIMEOUT_S:
        args += ["--data-timeout", f"{data.timeout_s:g}"]
    return args


def reproduce_command(plan: RunPlan, cell: Cell) -> str:
    """The ``clsbench run`` command that measures ``cell`` again with ``plan``'s settings (defaults left out).

    A real-data cell adds its data flags; ``run --data`` turns overlapped preparation off by itself, so such a
    line never says ``--no-overlap``. A cell on an inference backend other than ``eager`` says ``--backend``.
    """
    args = ["clsbench", "run", "--model", cell.model, "--workload", cell.workload, "--mode", cell.mode,
            "--batch-size", str(cell.batch_size), "--device", cell.device]
    if cell.backend != "eager":
        args += ["--backend", cell.backend]
    if cell.input_size is not None:
        args += ["--input-size", str(cell.input_size)]
    args += MeasureOptions.of_plan(plan, cell.workload).to_cli_args()
    if cell.data is None:
        args += Execution(overlap=plan.overlap_prepare, order=plan.order).to_cli_args()
    else:
        args += data_cli_args(cell.data)
    return " ".join(shlex.quote(a) for a in args)


#: ``run`` flags (with the number of values each takes) that ``clsbench profile`` has no use for: it measures one
#: repeat, in one worker, with nothing to overlap or order, and profiles steps after its timed region, whose length
#: (the protocol's) does not change what the profile shows.
RUN_ONLY_FLAGS = {"--repeats": 1, "--overlap": 0, "--no-overlap": 0, "--order": 1, "--protocol": 1}


def profile_command(run_command: str, directory: str | None = None) -> str:
    """The ``clsbench profile`` command for the cell a ``clsbench run`` reproduce line measures (as
    :func:`reproduce_command` writes it), into ``directory`` (default: ``profile-<model>-<mode>-bs<batch>``)."""
    args = shlex.split(run_command)
    if args[:2] != ["clsbench", "run"]:
        raise ValueError(f"not a clsbench run command: {run_command!r}")
    kept: list[str] = ["clsbench", "profile"]
    rest = iter(args[2:])
    values: dict[str, str] = {}
    for arg in rest:
        if arg in RUN_ONLY_FLAGS:
            for _ in range(RUN_ONLY_FLAGS[arg]):
                next(rest, None)
            continue
        kept.append(arg)
        if arg in ("--model", "--mode", "--batch-size"):
            values[arg] = next(rest, "")
            kept.append(values[arg])
    if directory is None:
        name = "-".join(values.get(flag, "") for flag in ("--model", "--mode"))
        directory = "profile-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in name) \
            + f"-bs{values.get('--batch-size', '')}"
    return " ".join(shlex.quote(a) for a in [*kept, "-o", directory])
