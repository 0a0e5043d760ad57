"""Every setting of one ``clsbench tune`` search, spelt and checked once: :class:`TuneSettings` (pure but for the
device lookup of :meth:`TuneSettings.resolve`).

The CLI (``clsbench tune``) and the library (:func:`clsbench.api.tune`) build one frozen :class:`TuneSettings`; its
construction checks every field in a fixed order and raises :class:`~clsbench.errors.InvalidInputError` at the first
that is wrong, before anything is read or measured. :meth:`TuneSettings.resolve` makes concrete what the machine
decides (the device, the default modes, batch sizes and backends); the search (:mod:`clsbench.procedures.tune.search`)
and the stored facts (``settings["tune"]``, :mod:`clsbench.procedures.tune.run`) read that one object, and a resumed
search rebuilds it from the file (:meth:`TuneSettings.from_facts`).

The constants here are the search's rules that the settings, the kinds and the stored facts share (what is explored,
how much is compiled, the tolerances of the correctness guard).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.backends.parity import PARITY_TOLERANCE
from clsbench.core.data_settings import DataSettings
from clsbench.core.options import MeasureOptions
from clsbench.errors import InvalidInputError
from clsbench.procedures.sweep import parse_batch_sizes
from clsbench.procedures.tune.budget import check_budget, default_budget, parse_budget, screen_rule
from clsbench.results.schema import DEFAULT_BACKEND

#: Precisions explored for every workload, each with and without ``+cl``.
TUNE_PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16")
#: Weight-cast precisions, explored for inference only (casting the weights is not a way to train). They avoid
#: autocast's per-forward weight casts, which dominate batch-1 latency on fast GPUs (docs/methodology/modes.md).
INFERENCE_CAST_PRECISIONS = ("fp16", "bf16")
#: Precisions explored only on a device that can run them, for every workload and without ``+cl`` (channels_last
#: changes only convolutions; these precisions change the Linear layers): ``fp8`` (torchao, NVIDIA GPUs of compute
#: capability 8.9+; docs/fp8.md). A CPU, or a GPU without them, explores exactly what it explored before.
DEVICE_PRECISIONS = ("fp8",)

#: A mode whose eager result lost by more than this fraction to the best result so far is not compiled: on
#: ResNet-50 class networks torch.compile gains well under 1 / (1 - 0.25) = 1.33x over eager of the same
#: precision, so such a mode cannot catch up, and each compile costs a minute or more per worker process.
PRUNE_LOSS_FRACTION = 0.25
#: Compile variants are tried for at most this many eager modes (the best ones): each compile is a cold
#: compilation in a fresh process, and a search on one model must fit in one 10-minute device call (issue #5).
MAX_COMPILE_FAMILIES = 2
#: ``+compile:max-autotune`` is tried for at most this many modes: it benchmarks kernel choices and is the slowest
#: compilation of all (minutes for a ResNet-50).
MAX_AUTOTUNE_FAMILIES = 1

#: First batch size of the short doubling for infer-throughput and train, per device type, and how many doublings
#: follow (64..512 on a GPU, where ResNet-50 throughput is flat within a few % beyond 256; 8..64 on a CPU).
START_BATCH = {"cuda": 64, "cpu": 8}
BATCH_DOUBLINGS = 3
#: infer-latency serves one request at a time: batch 1 only, unless batch sizes are given.
LATENCY_BATCH = 1
#: The backend phase tries the weight-cast form of this many of the best eager precisions: each is one artifact
#: build per backend and layout (AOTInductor and TensorRT take a minute or more on a ResNet-50).
MAX_BACKEND_FAMILIES = 1
#: The precision an artifact runs each eager precision in: autocast is a run-time policy of eager PyTorch, so an
#: exported artifact gets the weights cast instead.
BACKEND_PRECISION = {"amp-bf16": "bf16", "amp-fp16": "fp16"}
#: The full protocol: repeats (each a fresh worker) the confirmation rung gives the best candidates, so that the
#: winner's figure has a spread; the screening and longer rungs take one repeat each (search.py).
DEFAULT_TUNE_REPEATS = 3
TUNE_OPTIONS = MeasureOptions(repeats=DEFAULT_TUNE_REPEATS)

#: Maximum relative error of the logits against fp32 eager, by precision: max |out - ref| / max |ref| over the
#: batch (normalised by the largest reference logit, since single logits near zero make elementwise relative
#: errors meaningless). The inference backends' parity tolerances, so a backend and an eager mode are held to the
#: same standard (the reasoning, and what was measured, are at :data:`clsbench.backends.parity.PARITY_TOLERANCE`).
OUTPUT_RTOL: dict[str, float] = PARITY_TOLERANCE
#: Training is checked by the loss: the first step's loss (the forward in train mode, before any update) against
#: :data:`OUTPUT_RTOL`, and the loss after :data:`TRAIN_CHECK_STEPS` optimizer steps against
#: :data:`TRAIN_LOSS_RTOL`. Random-weight networks amplify rounding differences in their first large updates:
#: fp32+cl, mathematically identical to fp32, ended 3.7% away after 3 steps on resnet50 (CPU, batch 4), so the
#: later loss only catches a mode that does not train (a NaN, a loss that does not fall) and gets a 10% tolerance.
TRAIN_CHECK_STEPS = 3
TRAIN_LOSS_RTOL = 0.1
#: settings["tune"] format: 1 (one repeat per candidate, phases), 2 (a budget, rungs, trials and what was left out).
TUNE_FORMAT = 2


# ------------------------------------------------------------------------------------------------- input


def validate_limit(name: str, value: float | None) -> float | None:
    """A limit as a float; None stays None. Raises InvalidInputError unless it is a finite number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"{name} must be a number > 0, got {value!r}", f"e.g. --{name.replace('_', '-')} 10")
    return float(value)


def default_modes(workload: str, device: str | None = None) -> list[str]:
    """The eager modes the first phase explores for ``workload``; on ``device``, the :data:`DEVICE_PRECISIONS` it
    can run too (judged as the runner judges a mode without a worker: no CUDA context is created)."""
    precisions = TUNE_PRECISIONS + (INFERENCE_CAST_PRECISIONS if workload != "train" else ())
    modes = [p + suffix for p in precisions for suffix in ("", "+cl")]
    if device is None:
        return modes
    import torch

    from clsbench.modes import ModeContext, parse_mode
    from clsbench.workloads import get_workload

    ctx = ModeContext(device=torch.device(device), workload_kind=get_workload(workload).kind, bf16_supported=True,
                      tf32_supported=True)
    return modes + [p for p in DEVICE_PRECISIONS if parse_mode(p).unsupported_reason(ctx) is None]


def variant_of(base: str, suffix: str) -> str | None:
    """``base`` with the modifiers of ``suffix`` added, canonically spelt; None when ``base`` already has one, or
    one of the same group (``+foreach`` for ``+fused``: both choose the optimizer implementation)."""
    from clsbench.modes import MODIFIERS, parse_mode

    have = {m.split(":")[0] for m in parse_mode(base).modifier_names}
    groups = {MODIFIERS.get(name).group for name in have} - {None}
    for token in suffix.strip("+").split("+"):
        name = token.split(":")[0]
        if name in have or (name in MODIFIERS and MODIFIERS.get(name).group in groups):
            return None
    return parse_mode(base + suffix).name


def _compile_suffixes(workload: str) -> tuple[str, ...]:
    return ("+compile", "+cudagraph", "+compile+cudagraph") if workload != "train" else ("+compile",)


def parse_variants(workload: str, variants: Sequence[str] | None) -> tuple[str, ...]:
    """The phase-2 suffixes to try: all of :func:`_compile_suffixes` by default, else the named subset.

    Names are written without the leading ``+`` (``compile``, ``cudagraph``, ``compile+cudagraph``).
    """
    allowed = _compile_suffixes(workload)
    if variants is None:
        return allowed
    chosen = []
    for name in variants:
        suffix = "+" + name.strip().lstrip("+")
        if suffix not in allowed:
            names = ", ".join(a.lstrip("+") for a in allowed)
            raise InvalidInputError(f"unknown variant {name!r} for {workload}", f"choose from: {names}")
        if suffix not in chosen:
            chosen.append(suffix)
    if not chosen:
        raise InvalidInputError("--variants names no variant", "e.g. --variants compile+cudagraph")
    return tuple(chosen)


def tolerance_for(mode: str, tolerances: Mapping[str, float] | None = None) -> float:
    """The output tolerance of a mode: by its precision, from ``tolerances`` first, else :data:`OUTPUT_RTOL`."""
    precision = mode.split("+")[0]
    table = {**OUTPUT_RTOL, **(tolerances or {})}
    return float(table.get(precision, OUTPUT_RTOL["fp32"]))


def validate_tolerances(tolerances: Mapping[str, float] | None) -> None:
    """Raise InvalidInputError unless every per-precision output tolerance is a number >= 0."""
    for key, value in (tolerances or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidInputError(f"tolerance for {key!r} must be a number >= 0, got {value!r}")


def canonical_modes(modes: Sequence[str]) -> list[str]:
    """The eager modes of phase 1, canonically spelt, without repeats."""
    from clsbench.modes import parse_mode

    chosen = list(dict.fromkeys(parse_mode(m).name for m in modes))
    if not chosen:
        raise InvalidInputError("no modes to explore", "leave out --mode, or name some, e.g. --mode fp32,amp-bf16")
    return chosen


def backend_names(workload: str, backends: Sequence[str] | None) -> tuple[str, ...]:
    """The backends of phase 4: the named ones (checked), else every registered one but eager, in the order the
    search tries them (:func:`clsbench.backends.base.tune_rank`, lowest first); none for train."""
    from clsbench.backends import BACKENDS, get_backend
    from clsbench.backends.base import tune_rank
    from clsbench.workloads import get_workload

    if backends is not None:
        for name in backends:
            get_backend(name)  # an unknown name is one error line with the closest names
    if get_workload(workload).kind != "inference":
        if backends:
            raise InvalidInputError("--backend applies to inference workloads only, not train",
                                    "drop --backend, or tune infer-throughput / infer-latency")
        return ()
    names = list(dict.fromkeys(n for n in (backends if backends is not None else BACKENDS.names())
                               if n != DEFAULT_BACKEND))
    # Most promising first (each backend's tune_rank), named or not: a budget that runs out leaves out the last.
    return tuple(sorted(names, key=lambda n: tune_rank(BACKENDS.get(n))))


def named_batch_sizes(batch_sizes: Sequence[int] | str) -> list[int]:
    """The batch sizes the user named, parsed as ``sweep`` parses them; ``auto`` is refused (tune chooses)."""
    parsed = parse_batch_sizes(batch_sizes if isinstance(batch_sizes, str) else list(batch_sizes))
    if parsed == "auto":
        raise InvalidInputError("tune chooses its batch sizes itself; give a list or leave it out",
                                "e.g. --batch-size 32,64,128")
    return list(parsed)


def default_batch_sizes(workload: str, device: str) -> list[int]:
    """Batch 1 for infer-latency; otherwise the short doubling from :data:`START_BATCH` of the device type."""
    if workload == "infer-latency":
        return [LATENCY_BATCH]
    start = START_BATCH["cuda" if device.startswith("cuda") else "cpu"]
    return [start * 2 ** i for i in range(BATCH_DOUBLINGS + 1)]


@dataclass(frozen=True)
class TuneSettings:
    """Everything one ``clsbench tune`` search is asked to do, checked on construction (:meth:`__post_init__`).

    Attributes:
        model, workload, device: what to tune, and where (``auto``: :func:`clsbench.system.machine.resolve_device`).
        max_latency_ms: p50 request latency (infer-latency) or p99 latency per batch (otherwise), at most.
        max_memory_gb: peak reserved memory (GPU) or worker peak RSS (CPU), in 10^9 bytes, at most.
        modes: the eager modes of the first phase (None: :func:`default_modes` of the device).
        batch_sizes: the sizes to try, a list or ``"4,8"`` (None: batch 1 for infer-latency, a short doubling
            otherwise: :func:`default_batch_sizes`).
        options: what each measurement does; ``repeats`` is the full protocol the confirmation rung gives the best
            candidates (the screening and longer rungs take one repeat each).
        compile_variants: try the compile, freeze, train-step, max-autotune and (inference) backend kinds.
        variants: the compile variants to try, e.g. ``["cudagraph", "compile+cudagraph"]`` (None: all;
            :func:`parse_variants`); fewer variants, fewer cold compilations.
        max_autotune: try ``+compile:max-autotune``.
        check_outputs: run the correctness guard (off: the winner's outputs are not compared).
        tolerances: per-precision output tolerances replacing :data:`OUTPUT_RTOL` entries.
        backends: the inference backends to try (None: every registered one but ``eager``; empty: none).
        budget: seconds, or a duration such as ``10m`` (None: :data:`clsbench.procedures.tune.budget.DEFAULT_BUDGET_S`
            of the device type; none at all when exhaustive).
        exhaustive: cut nothing for speed (:mod:`clsbench.procedures.tune.search`, "Exhaustive"): every candidate at
            the longer rung, no plateau, dominance, halving or family limit; no budget unless ``budget`` is given.
        data: train on real data too (train only): the directory, source, data timeout and cache priming of every
            real-data cell (``--data DIR``); the winner is then a real-data cell.
        pipelines: with ``data``, the pipelines to try (None: every registered one; those that cannot run here are
            pruned with their reason).
        workers: with ``data``, the DataLoader workers of the cpu pipeline (and dali's threads); None: the CPU count
            (:func:`clsbench.procedures.tune.pipeline_kind.pipeline_workers`).
        sizes_named: whether the user named the batch sizes (then growth does not stop on a plateau and the eager
            kind starts at the first size); None: whether ``batch_sizes`` is given. :meth:`resolve` fills in the
            default sizes and keeps this flag, so that the resolved settings say what the user asked.

    Raises:
        InvalidInputError: on construction, at the first field that is wrong (:meth:`__post_init__`).
    """

    model: str
    workload: str = "infer-throughput"
    device: str = "auto"
    max_latency_ms: float | None = None
    max_memory_gb: float | None = None
    modes: Sequence[str] | None = None
    batch_sizes: Sequence[int] | str | None = None
    options: MeasureOptions = TUNE_OPTIONS
    compile_variants: bool = True
    variants: Sequence[str] | None = None
    max_autotune: bool = True
    check_outputs: bool = True
    tolerances: Mapping[str, float] | None = None
    backends: Sequence[str] | None = None
    budget: float | str | None = None
    exhaustive: bool = False
    data: DataSettings | None = None
    pipelines: Sequence[str] | None = None
    workers: int | None = None
    sizes_named: bool | None = None

    def __post_init__(self) -> None:
        """Check every field, the first wrong one raising: the budget, the model, the limits, the batch sizes and
        the variants (the order ``clsbench tune`` checked its options in), then the workload, the tolerances, the
        modes, the backends and the data options (the order the library checked them in)."""
        from clsbench.workloads import WORKLOADS

        parse_budget(self.budget)
        if not self.model:
            raise InvalidInputError("--model is required", "e.g. clsbench tune --model resnet50, or --resume FILE")
        validate_limit("max_latency_ms", self.max_latency_ms)
        validate_limit("max_memory_gb", self.max_memory_gb)
        if self.batch_sizes is not None:
            named_batch_sizes(self.batch_sizes)
        parse_variants(self.workload, self.variants)
        WORKLOADS.get(self.workload)
        validate_tolerances(self.tolerances)
        if self.modes is not None:
            canonical_modes(self.modes)
        if self.compile_variants:
            backend_names(self.workload, self.backends)
        if self.wants_data:
            self._check_data()

    def _check_data(self) -> None:
        """The real-data options: data for training only, a valid worker count, registered pipelines."""
        from clsbench.procedures.diagnose import parse_pipelines
        from clsbench.workloads import get_workload

        if self.data is None:
            raise InvalidInputError("the pipeline options of tune need --data DIR",
                                    "e.g. --data ./images --pipeline cpu")
        if get_workload(self.workload).kind != "train":
            raise InvalidInputError(f"--data searches the input pipeline of training, not of {self.workload}",
                                    "drop --data, or tune --workload train --data DIR")
        workers = self.workers
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
            raise InvalidInputError(f"the worker count must be a whole number >= 0, got {workers!r}",
                                    "e.g. --num-workers 8")
        if self.pipelines is not None:
            parse_pipelines(self.pipelines)

    # ------------------------------------------------------------------------------------------- derived

    @property
    def wants_data(self) -> bool:
        """Whether any real-data option is given (then the pipeline kind runs, or the options are refused)."""
        return self.data is not None or self.pipelines is not None or self.workers is not None

    @property
    def limits(self) -> dict[str, float | None]:
        """The limits as stored: ``max_latency_ms`` and ``max_memory_gb``, floats or None."""
        return {"max_latency_ms": validate_limit("max_latency_ms", self.max_latency_ms),
                "max_memory_gb": validate_limit("max_memory_gb", self.max_memory_gb)}

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The compile kind's suffixes (``+compile``...), from :attr:`variants` (:func:`parse_variants`)."""
        return parse_variants(self.workload, self.variants)

    @property
    def explicit(self) -> bool:
        """Whether the user named the batch sizes (:attr:`sizes_named`)."""
        return self.batch_sizes is not None if self.sizes_named is None else bool(self.sizes_named)

    def budget_s(self, device: str) -> float:
        """The budget in seconds on ``device``: the given one, else the device type's default; infinite (no budget)
        for an exhaustive search without one.

        Raises:
            InvalidInputError: a given budget too small for the search's first measurement (one fresh worker under
                the screening rule, the full rule when exhaustive: :func:`clsbench.procedures.tune.budget.
                check_budget`), naming the smallest that fits; refused before anything starts.
        """
        given = parse_budget(self.budget)
        if given is None:
            return math.inf if self.exhaustive else default_budget(device)
        from clsbench.core.plan import default_stop_rules

        rule = default_stop_rules(device, self.options.protocol).get(self.workload)
        if rule is not None:
            rule = rule.with_overrides(**self.options.stop_overrides())
            check_budget(given, device, rule if self.exhaustive else screen_rule(rule))
        return given

    def resolve(self) -> TuneSettings:
        """These settings with what the machine decides made concrete: the device resolved, and the modes, batch
        sizes and backends filled in where they were left to their defaults (:attr:`sizes_named` keeps whether the
        sizes were named)."""
        from clsbench.system.machine import resolve_device

        device = resolve_device(self.device)
        modes = canonical_modes(self.modes if self.modes is not None else default_modes(self.workload, device))
        sizes = named_batch_sizes(self.batch_sizes) if self.batch_sizes is not None else \
            default_batch_sizes(self.workload, device)
        backends = backend_names(self.workload, self.backends) if self.compile_variants else ()
        return dataclasses.replace(self, device=device, modes=modes, batch_sizes=sizes, sizes_named=self.explicit,
                                   backends=backends)

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any], options: MeasureOptions = TUNE_OPTIONS) -> TuneSettings:
        """The resolved settings of a stored search (``settings["tune"]``), for ``tune --resume``: the file says
        what the search was asked (its tolerances are the stored table; its budget is decided by the resume, and its
        real-data settings stay in the file, where the pipeline kind reads them)."""
        rules = facts.get("rules") or {}
        limits = facts.get("limits") or {}
        return cls(model=str(facts["model"]), workload=str(facts["workload"]), device=str(facts["device"]),
                   max_latency_ms=limits.get("max_latency_ms"), max_memory_gb=limits.get("max_memory_gb"),
                   modes=list(facts["modes"]), batch_sizes=list(facts["batch_sizes"]),
                   options=dataclasses.replace(options, input_size=facts.get("input_size")),
                   compile_variants=bool(rules.get("compile_variants")), variants=list(rules.get("variants") or ()),
                   max_autotune=bool(rules.get("max_autotune")), check_outputs=facts.get("correctness_guard", True),
                   tolerances=rules.get("output_rtol"), backends=list(rules.get("backends") or ()),
                   exhaustive=bool(facts.get("exhaustive")), sizes_named=bool(facts.get("batch_sizes_explicit")))


__all__ = [
    "BACKEND_PRECISION",
    "DEFAULT_TUNE_REPEATS",
    "DEVICE_PRECISIONS",
    "INFERENCE_CAST_PRECISIONS",
    "MAX_AUTOTUNE_FAMILIES",
    "MAX_BACKEND_FAMILIES",
    "MAX_COMPILE_FAMILIES",
    "OUTPUT_RTOL",
    "PRUNE_LOSS_FRACTION",
    "TRAIN_CHECK_STEPS",
    "TRAIN_LOSS_RTOL",
    "TUNE_FORMAT",
    "TUNE_OPTIONS",
    "TUNE_PRECISIONS",
    "TuneSettings",
    "default_modes",
    "parse_variants",
    "tolerance_for",
    "validate_limit",
    "variant_of",
]
