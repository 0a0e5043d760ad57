"""What a ``clsbench scale`` run measures: a frozen plan, built and validated by :func:`plan_scale`.

One plan is one model in one mode at one batch size **per GPU**, measured with each strategy (``ddp``, ``dp``) at
each GPU count. Every (strategy, GPU count) becomes one ordinary measurement; its cell's ``batch_size`` is the
*global* batch (per-GPU batch x GPUs in total), so the cells stay distinct and the table's batch column says how
many images one step processes.

Multi-node runs: ``gpus`` counts GPUs **per node**; ``nnodes`` nodes run the same command, each with its own
``node_rank``; node 0 hosts the rendezvous at ``rdzv_endpoint`` and global rank 0, and writes the result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from clsbench.core.options import MeasureOptions
from clsbench.core.plan import Cell, StopRule, TrainSettings
from clsbench.errors import DeviceUnavailableError, InvalidInputError

#: The strategies, in the order they are measured when both are asked for.
STRATEGY_NAMES = ("ddp", "dp")

#: Seconds one launch (torchrun and all its ranks, or the DataParallel process) may take before it is killed.
DEFAULT_TIMEOUT_S = 900.0

#: Fresh launches per (strategy, GPU count). Each one starts Python, torch, the process group and cuDNN's
#: autotuning from nothing, as `run` does with its workers; three give a spread and a median.
DEFAULT_REPEATS = 3

#: The first port of a multi-node run's rendezvous when --rdzv-endpoint names none (torchrun's own default).
DEFAULT_RDZV_PORT = 29500

#: Scale's option defaults: cuDNN autotuning is left to each strategy (DataParallel on 2+ GPUs turns it off).
SCALE_OPTIONS = MeasureOptions(repeats=DEFAULT_REPEATS, timeout_s=DEFAULT_TIMEOUT_S, cudnn_benchmark=None)

#: Upper bound on processes per node on a CPU (gloo), where ``--gpus`` counts processes: far beyond any use.
MAX_CPU_PROCESSES = 256

#: Version of the ``settings["scale"]`` block.
SCALE_FORMAT = 1


@dataclass(frozen=True)
class ScalePlan:
    """Everything one ``clsbench scale`` does; stored under ``settings["scale"]`` in the result file.

    Attributes:
        model: the model name (any name ``clsbench models`` knows, or ``module:function``).
        gpus: GPU counts per node, ascending (on a CPU: processes per node).
        strategies: ``ddp`` and/or ``dp``, in measuring order.
        mode: canonical mode name, e.g. ``amp-bf16+cl``.
        batch_size_per_gpu: images per GPU per step; DataParallel splits ``batch x GPUs`` over its GPUs.
        device: ``cuda`` or ``cpu``.
        stop: warm-up and timed-region rule of every launch (the train workload's defaults unless overridden).
        repeats: fresh launches per measurement.
        timeout_s: wall-clock limit of one launch; the whole process tree is killed when it passes.
        comm_share: time gradient all-reduce with and without ``no_sync()`` after the timed region (DDP, 2+ ranks).
        nnodes, node_rank, rdzv_endpoint: torchrun's multi-node rendezvous (static: node 0 at the endpoint).
    """

    model: str
    gpus: tuple[int, ...]
    strategies: tuple[str, ...]
    mode: str
    batch_size_per_gpu: int
    device: str
    stop: StopRule
    repeats: int = DEFAULT_REPEATS
    input_size: int | None = None
    seed: int = 0
    data_seed: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    compile_mode: str = "default"
    cudnn_benchmark: bool | None = None  # None: each strategy's default (Strategy.cudnn_benchmark)
    comm_share: bool = True
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    num_classes: int = 1000
    train: TrainSettings = field(default_factory=TrainSettings)

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    def world_size(self, gpus: int) -> int:
        """GPUs (ranks) in total for ``gpus`` GPUs per node."""
        return gpus * self.nnodes

    def measurements(self) -> list[tuple[str, int]]:
        """(strategy, GPUs per node) in the order they are measured."""
        return [(strategy, gpus) for strategy in self.strategies for gpus in self.gpus]

    def cell(self, strategy: str, gpus: int) -> Cell:
        """The cell of one measurement; its batch size is the global batch of one step."""
        return Cell(self.model, workload_name(strategy), self.mode, self.batch_size_per_gpu * self.world_size(gpus),
                    self.device, self.input_size)

    def launch_index(self, strategy: str, gpus: int, repeat: int) -> int:
        """Position of a launch in the planned sequence: the same on every node, whatever fails on the way."""
        return self.measurements().index((strategy, gpus)) * self.repeats + repeat

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["gpus"] = list(self.gpus)
        data["strategies"] = list(self.strategies)
        data["format"] = SCALE_FORMAT
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScalePlan:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["gpus"] = tuple(data["gpus"])
        kwargs["strategies"] = tuple(data["strategies"])
        kwargs["stop"] = StopRule(**data["stop"])
        kwargs["train"] = TrainSettings(**data["train"])
        return cls(**kwargs)


def workload_name(strategy: str) -> str:
    """The measurement's workload name: ``train-ddp`` or ``train-dp``."""
    return f"train-{strategy}"


def parse_gpus(value: str | Sequence[int | str]) -> tuple[int, ...]:
    """GPU counts from ``"1,2,4"`` or a sequence: whole numbers >= 1, duplicates dropped, ascending.

    Raises:
        InvalidInputError: an empty list or an entry that is not a whole number >= 1.
    """
    parts: list[int | str] = [p.strip() for p in value.split(",")] if isinstance(value, str) else list(value)
    if not parts or all(isinstance(p, str) and not p for p in parts):
        raise InvalidInputError("the GPU-count list is empty", "e.g. --gpus 1,2")
    counts: set[int] = set()
    for part in parts:
        if isinstance(part, bool):
            raise InvalidInputError(f"GPU count {part!r} is not a whole number", "e.g. --gpus 1,2,4,8")
        if isinstance(part, str):
            try:
                part = int(part)
            except ValueError:
                raise InvalidInputError(f"GPU count {part!r} is not a whole number", "e.g. --gpus 1,2,4,8") from None
        if not isinstance(part, int) or part < 1:
            raise InvalidInputError(f"GPU count {part!r} must be a whole number >= 1", "e.g. --gpus 1,2,4,8")
        counts.add(part)
    return tuple(sorted(counts))


def parse_strategies(value: str | Sequence[str]) -> tuple[str, ...]:
    """``ddp``, ``dp``, ``both`` (or a list of them) -> the strategies in measuring order."""
    names = [value] if isinstance(value, str) else list(value)
    chosen: set[str] = set()
    for name in names:
        text = str(name).strip().lower()
        if text == "both":
            chosen.update(STRATEGY_NAMES)
        elif text in STRATEGY_NAMES:
            chosen.add(text)
        else:
            raise InvalidInputError(f"unknown strategy {name!r}", "choose ddp, dp or both")
    if not chosen:
        raise InvalidInputError("no strategy given", "choose ddp, dp or both")
    return tuple(s for s in STRATEGY_NAMES if s in chosen)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``HOST``, taking port 29500) -> (host, port); IPv6 hosts in brackets (``[::1]:29500``)."""
    text = endpoint.strip()
    hint = "give node 0's address as HOST:PORT, e.g. --rdzv-endpoint 10.0.0.1:29500"
    if not text:
        raise InvalidInputError("the rendezvous endpoint is empty", hint)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise InvalidInputError(f"malformed rendezvous endpoint {endpoint!r}", hint)
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    elif ":" in text:
        raise InvalidInputError(f"malformed rendezvous endpoint {endpoint!r}", "write an IPv6 host as [ADDR]:PORT")
    else:
        host, port_text = text, ""
    if not host:
        raise InvalidInputError(f"rendezvous endpoint {endpoint!r} names no host", hint)
    if not port_text:
        return host, DEFAULT_RDZV_PORT
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise InvalidInputError(f"rendezvous endpoint {endpoint!r} has a bad port", hint)
    return host, int(port_text)


def validate_nodes(nnodes: int, node_rank: int, rdzv_endpoint: str | None) -> None:
    if isinstance(nnodes, bool) or not isinstance(nnodes, int) or nnodes < 1:
        raise InvalidInputError(f"--nnodes must be a whole number >= 1, got {nnodes!r}", "e.g. --nnodes 2")
    if isinstance(node_rank, bool) or not isinstance(node_rank, int) or not 0 <= node_rank < nnodes:
        raise InvalidInputError(f"--node-rank must lie in 0..{nnodes - 1}, got {node_rank!r}",
                                "number the nodes 0, 1, ... and start node 0 with --node-rank 0")
    if nnodes > 1 and not rdzv_endpoint:
        raise InvalidInputError(f"--nnodes {nnodes} needs --rdzv-endpoint",
                                "give node 0's address, e.g. 10.0.0.1:29500")
    if rdzv_endpoint is not None:
        parse_endpoint(rdzv_endpoint)


def resolve_scale_device(device: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is present, else ``cpu``; ``cuda:N`` is refused (GPUs 0..k-1 are used)."""
    from clsbench.system.machine import resolve_device

    text = device.strip().lower()
    if text.startswith("cuda:"):
        raise InvalidInputError(f"--device {device}: scale uses GPUs 0..k-1 of those visible, not one named GPU",
                                "use --device cuda and pick the GPUs with CUDA_VISIBLE_DEVICES, e.g. =2,3")
    return resolve_device(text)


def validate_gpu_counts(gpus: Sequence[int], device: str, *, visible: int | None = None) -> None:
    """Every count must fit on this node: at most the visible GPUs (on a CPU, a sane number of processes)."""
    largest = max(gpus)
    if device == "cpu":
        if largest > MAX_CPU_PROCESSES:
            raise InvalidInputError(f"--gpus {largest} on a CPU means {largest} processes, beyond {MAX_CPU_PROCESSES}",
                                    "on a CPU --gpus counts gloo processes: e.g. --gpus 1,2")
        return
    if visible is None:
        import torch

        visible = torch.cuda.device_count()
    if largest > visible:
        fitting = ",".join(str(g) for g in gpus if g <= visible) or "1"
        raise DeviceUnavailableError(f"--gpus {largest} asks for {largest} GPUs on this node, but {visible} are "
                                     "visible", f"use --gpus {fitting}, or check CUDA_VISIBLE_DEVICES and nvidia-smi")


def plan_scale(
    *,
    model: str,
    gpus: str | Sequence[int | str],
    strategy: str | Sequence[str] = "ddp",
    mode: str = "fp32",
    batch_size_per_gpu: int,
    device: str = "auto",
    options: MeasureOptions = SCALE_OPTIONS,
    comm_share: bool = True,
    nnodes: int = 1,
    node_rank: int = 0,
    rdzv_endpoint: str | None = None,
    visible_gpus: int | None = None,
) -> ScalePlan:
    """Validate the input and build the plan; every problem is one :class:`InvalidInputError` line.

    The stop rule is the train workload's default for the device (``clsbench.core.plan``), with the options'
    ``warmup``, ``iterations``, ``min_time`` and ``max_time`` replacing its fields as they do for ``clsbench run``.
    ``options.cudnn_benchmark`` None (the default) lets each strategy decide (:meth:`Strategy.cudnn_benchmark`).

    Args:
        visible_gpus: GPUs visible on this node (default: ``torch.cuda.device_count()``); for tests.
    """
    from clsbench.engine.planning import plan_run

    counts = parse_gpus(gpus)
    strategies = parse_strategies(strategy)
    validate_nodes(nnodes, node_rank, rdzv_endpoint)
    resolved = resolve_scale_device(device)
    # The single-GPU train plan validates the model, mode, batch, input size, repeats and stop rule exactly as `run`.
    base = plan_run(models=[model], workloads=["train"], modes=[mode], batch_sizes=[batch_size_per_gpu],
                    device=resolved, options=options)
    validate_gpu_counts(counts, resolved, visible=visible_gpus)
    from clsbench.core.plan import validate_batch_size

    validate_batch_size(batch_size_per_gpu * max(counts) * nnodes)
    (cell,) = base.cells
    return ScalePlan(model=model, gpus=counts, strategies=strategies, mode=cell.mode,
                     batch_size_per_gpu=batch_size_per_gpu, device=resolved, stop=base.stop_rule("train"),
                     repeats=options.repeats, input_size=options.input_size, seed=options.seed,
                     data_seed=options.seed, timeout_s=options.timeout_s, compile_mode=options.compile_mode,
                     cudnn_benchmark=options.cudnn_benchmark, comm_share=comm_share,
                     nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint, train=base.train)
