"""``clsbench tune``: the fastest way to run one model on this device, within latency and memory limits.

The search measures ordinary cells (each repeat in a fresh worker, :func:`clsbench.engine.runner.run_plan`) into one
result file, within a time budget, screening first and confirming last: every candidate enters a rung (a short
screening window, or the full window at once for candidates whose build dominates their cost), the best third of
the screened ones are measured for longer, the outputs of the best are checked, and the best two that pass get the
full repeat protocol (:mod:`clsbench.procedures.tune_search`; the budget and cost model:
:mod:`clsbench.procedures.tune_budget`). The candidates come from kinds (:mod:`clsbench.procedures.tune_kinds`),
one registry entry each, which propose what the phases below describe:

1. **eager** (screen rung): every precision (``fp32``, ``tf32``, ``amp-fp16``, ``amp-bf16``, and for inference
   the weight-cast ``fp16`` and ``bf16``), each with and without ``+cl``. infer-latency runs batch 1 only.
   infer-throughput and train run a short doubling (:data:`START_BATCH` up to :data:`BATCH_DOUBLINGS` doublings)
   that stops, per mode, at the first size that fails (out of memory...), breaks a limit, or raises throughput by
   less than :data:`clsbench.procedures.sweep.AUTO_MIN_GAIN`, or is beaten by more than that at two sizes in a row
   by one other mode (dominance). Modes the device cannot run are recorded as skipped by the runner.
2. **compile** (longer rung): ``+compile``, and for inference ``+cudagraph`` and ``+compile+cudagraph``, of the
   eager modes not pruned, each at the batch size where its eager form did best within the limits. A mode is pruned
   when its eager result lost by more than :data:`PRUNE_LOSS_FRACTION` to the best so far (compilation rarely gains
   that much, and costs a minute or more per process), and only the :data:`MAX_COMPILE_FAMILIES` best are compiled.
   Then, refining the best compiled family (:mod:`clsbench.procedures.tune_kinds`): for inference **freeze**,
   ``+compile+freeze`` (Inductor freezing; with ``+cudagraph`` too for infer-latency on a GPU); for train
   **train-step**, the optimizer implementation (``+fused``, or ``+foreach`` where the mode refuses it), ``+compile``
   with it, the whole step compiled (``+compile+compiled-step``) and captured (``+cudagraph``, GPU only), each
   refusal of the mode pruned with its reason.
3. **max-autotune**: ``+compile:max-autotune`` (which brings its own CUDA graphs) for the
   :data:`MAX_AUTOTUNE_FAMILIES` best precisions still within the margin: the slowest compile there is.
4. **backends** (inference only): every registered inference backend other than ``eager``
   (:data:`clsbench.backends.BACKENDS`; or those named) in the weight-cast form of the
   :data:`MAX_BACKEND_FAMILIES` best eager precisions (``amp-bf16`` becomes ``bf16``: an artifact has fixed
   dtypes), with and without ``+cl``, and for infer-latency with ``+cudagraph`` too, at the batch size of the best
   eager result. A combination a backend cannot express here (a missing library, a mode it refuses) is not measured
   and is listed as pruned with the reason. Builds run in the workers, so their time counts in the search time.
5. **pipeline** (``--data DIR``, train only; longer rung): the best synthetic candidates again on real data, under
   each pipeline's most tuned setting; a pipeline that cannot run here is pruned with its reason. Only these
   real-data cells can win; the synthetic cells are their ceilings (verdict ``ceiling``), and the analysis gives
   each real-data cell's ratio to the ceiling of its mode and batch and whether it is kept fed (diagnose's rule).

**Objective**: highest ``throughput_img_s`` for infer-throughput and train; lowest p50 request wall latency for
infer-latency (its score is 1000 / p50 ms, so "lost by 25%" means the same in both).

**Limits**: ``max_latency_ms`` applies to the p50 request wall latency for infer-latency and to the p99 latency
per batch (one iteration) for infer-throughput and train; ``max_memory_gb`` (10^9 bytes) to the peak memory
reserved by torch's caching allocator on a GPU, or the worker's peak RSS on a CPU (no reserved figure there).

**Correctness guard**: a candidate wins only if its outputs match fp32 eager on a fixed seeded input (same
weights, same seed) within a documented tolerance (:data:`OUTPUT_RTOL`, :data:`TRAIN_LOSS_RTOL`). The check runs
:func:`output_errors` in a fresh process (:func:`output_errors_in_subprocess`), top candidate first, until one
passes; a train candidate is checked by training parity (:mod:`clsbench.procedures.train_parity`: its training
step as the worker runs it, optimizer implementation, compiled and captured step included); a rejected candidate
keeps its figures and carries the reason. A backend candidate is judged by the parity check its own measurement
made (:mod:`clsbench.backends.parity`, the same tolerances); one whose parity failed is ``rejected`` (reason
``parity_failed``) whether the guard is on or not, so it can never win.

Like a sweep, the procedure's own facts go under ``settings["tune"]`` (limits, rules, pruned branches, the
correctness checks, the budget, the plan, every trial with its estimated and actual cost, what was left out, how
long the search took); the ranking (highest rung first, then score), the winner (confirmed or not) and the command
that reproduces it are derived on reading by the pure function :func:`analyze_tune`. ``tune --resume FILE``
continues a search (:func:`resume_tune`).

**Exhaustive** (``tune --exhaustive``, ``exhaustive=True``): the same kinds and candidate space with nothing cut for
speed (no screen rung and so no halving, no plateau or dominance stop, every family in the kinds that limit them, no
pruning margin, no budget unless one is given), recorded as ``settings["tune"]["exhaustive"]`` so that
``tune --resume`` continues it as such: the reference a default search's winner is judged against
(:mod:`clsbench.procedures.tune_compare`).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gc
import math
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.analysis import stats
from clsbench.backends.parity import PARITY_TOLERANCE
from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution, MeasureOptions, profile_command, reproduce_command
from clsbench.core.plan import Cell, RunPlan, TrainSettings
from clsbench.core.vocab import Reason, Status
from clsbench.engine.incremental import IncrementalRun
from clsbench.engine.planning import plan_run
from clsbench.engine.runner import RunInterrupted
from clsbench.errors import EXIT_INTERRUPTED, ClsbenchError, InvalidInputError, ResultFileError
from clsbench.procedures.base import PROCEDURES, ProcedureView
from clsbench.procedures.sweep import AUTO_MIN_GAIN, parse_batch_sizes
from clsbench.procedures.tune_budget import Budget, CostModel, default_budget, parse_budget
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement, backend_suffix, data_label
from clsbench.system.machine import resolve_device, run_facts

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
#: winner's figure has a spread; the screening and longer rungs take one repeat each (tune_search.py).
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
#: Candidates whose outputs one fresh check process compares after the top candidate was rejected (the best
#: unchecked ones, in rank order): a process costs a CUDA context and imports, each extra case perhaps a compile.
CHECK_GROUP = 3

GB = 1e9
#: settings["tune"] format: 1 (one repeat per candidate, phases), 2 (a budget, rungs, trials and what was left out).
TUNE_FORMAT = 2


class NoConfigurationError(InvalidInputError):
    """No configuration satisfies the limits (or every one that does was rejected); names the closest one.

    ``tune_result`` holds everything measured, saved as usual.
    """

    def __init__(self, message: str, hint: str | None, tune_result: TuneResult) -> None:
        super().__init__(message, hint)
        self.tune_result = tune_result


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` returns: the result (as saved) and its analysis (:func:`analyze_tune`)."""

    result: BenchmarkResult
    analysis: dict[str, Any]
    path: Path | None = None

    @property
    def winner(self) -> dict[str, Any] | None:
        return self.analysis.get("winner")

    @property
    def command(self) -> str | None:
        return self.analysis.get("command")

    @property
    def search_s(self) -> float | None:
        return self.analysis.get("search_s")

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return self.analysis.get("candidates", [])


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


# --------------------------------------------------------------------------------------- figures and limits


def _num(value: Any) -> float | None:
    """A stored number (NaN and infinities are stored as strings) as a float, or None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def candidate_figures(m: Measurement, workload: str) -> dict[str, Any]:
    """The figures a candidate is ranked and limited by (pure)."""
    s = m.summary
    latency = s.get("latency_ms") or {}
    p50, p99 = _num(latency.get("p50")), _num(latency.get("p99"))
    throughput = _num(s.get("throughput_img_s"))
    memory = s.get("peak_memory_reserved_bytes")
    memory_kind = "peak reserved"
    if memory is None:
        memory, memory_kind = s.get("host_peak_rss_bytes"), "worker peak RSS"
    # Per batch, the tail: the p99 where enough batches were timed for one, else the slowest batch (never lower).
    tail, tail_name = stats.tail_latency(latency)
    limited_latency = p50 if workload == "infer-latency" else tail
    if m.status != Status.OK:
        score = None
    elif workload == "infer-latency":
        score = 1000.0 / p50 if p50 else None
    else:
        score = throughput
    return {
        "mode": m.mode,
        "backend": m.backend,
        "batch_size": m.batch_size,
        "data": data_label(m.data),
        "status": m.status,
        "reason": m.reason,
        "detail": m.detail,
        "throughput_img_s": throughput,
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
        "limited_latency_ms": limited_latency,
        "limited_latency_name": "p50 request latency" if workload == "infer-latency" else f"{tail_name} latency per "
                                                                                          "batch",
        "memory_bytes": memory,
        "memory_kind": memory_kind,
        "spread_pct": s.get("spread_pct"),
        "unstable": bool(s.get("unstable")),
        "score": score,
    }


def limit_violations(figures: dict[str, Any], limits: Mapping[str, float | None]) -> list[str]:
    """The limits a candidate breaks, in words (empty: within every limit)."""
    out = []
    max_latency, max_memory = limits.get("max_latency_ms"), limits.get("max_memory_gb")
    latency, memory = figures.get("limited_latency_ms"), figures.get("memory_bytes")
    if max_latency is not None and latency is not None and latency > max_latency:
        out.append(f"{figures['limited_latency_name']} {latency:.3g} ms > {max_latency:g} ms")
    if max_memory is not None and memory is not None and memory > max_memory * GB:
        out.append(f"{figures['memory_kind']} {memory / GB:.3g} GB > {max_memory:g} GB")
    return out


def _overshoot(figures: dict[str, Any], limits: Mapping[str, float | None]) -> float:
    """How far a candidate is from the limits: the largest ratio of a figure to its limit (<= 1: within)."""
    ratios = [1.0]
    if limits.get("max_latency_ms") is not None and figures.get("limited_latency_ms") is not None:
        ratios.append(figures["limited_latency_ms"] / limits["max_latency_ms"])
    if limits.get("max_memory_gb") is not None and figures.get("memory_bytes") is not None:
        ratios.append(figures["memory_bytes"] / (limits["max_memory_gb"] * GB))
    return max(ratios)


def rank_key(figures: dict[str, Any]) -> tuple[Any, ...]:
    """Candidates without a score (failed, skipped) last; the others by the highest rung they reached (a confirmed
    figure before a longer one before a screened one: a candidate reached a higher rung by beating those left
    below), then by score; ties by mode, batch, then eager first."""
    backend = figures.get("backend") or DEFAULT_BACKEND
    return (figures["score"] is None, -figures.get("rung_level", -1), -(figures["score"] or 0.0), figures["mode"],
            figures["batch_size"], backend != DEFAULT_BACKEND, backend)


def candidate_key(figures: dict[str, Any]) -> tuple[str, int, str]:
    """(mode, batch size, backend): what tells two candidates apart."""
    return (figures["mode"], figures["batch_size"], figures.get("backend") or DEFAULT_BACKEND)


def parity_verdict(m: Measurement) -> dict[str, Any] | None:
    """A backend measurement's own parity check against fp32 eager as a guard verdict (pure); None when eager or
    when the measurement has no check (it did not run)."""
    parity = (m.summary.get("backend") or {}).get("parity") if m.backend != DEFAULT_BACKEND else None
    if not isinstance(parity, dict):
        return None
    passed = parity.get("passed") is True
    return {"metric": "logits", "error": _num(parity.get("max_abs_err_rel")), "tolerance": parity.get("tolerance"),
            "error_last": None, "tolerance_last": None, "ok": passed,
            "reason": None if passed else str(parity.get("detail") or Reason.PARITY_FAILED),
            "top1_agreement_pct": _num(parity.get("top1_agreement_pct")), "source": "backend parity check"}


def tolerance_for(mode: str, tolerances: Mapping[str, float] | None = None) -> float:
    """The output tolerance of a mode: by its precision, from ``tolerances`` first, else :data:`OUTPUT_RTOL`."""
    precision = mode.split("+")[0]
    table = {**OUTPUT_RTOL, **(tolerances or {})}
    return float(table.get(precision, OUTPUT_RTOL["fp32"]))


# --------------------------------------------------------------------------------------- correctness check


def _free_memory(dev: Any) -> None:
    """Collect the previous case's network and outputs, and on a GPU hand the cached blocks back, so that every
    case starts from the same memory (a case must not fail for the memory an earlier one left held)."""
    import torch

    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _case_errors(metric: str, got: Any, ref: Any) -> dict[str, Any]:
    """One inference case's entry of :func:`output_errors`: how far its logits lie from fp32 eager's.

    Args:
        metric: "logits".
        got: the case's logits, or a string saying why it could not run here (the entry's ``detail``).
        ref: fp32 eager's logits on the same input.
    """
    import torch

    if isinstance(got, str):
        return {"metric": metric, "error": None, "error_last": None, "detail": got}
    finite = bool(torch.isfinite(got).all())
    scale = float(ref.abs().max())
    diff = float((got - ref).abs().max())
    error = math.inf if not finite else (diff / scale if scale else (0.0 if diff == 0 else math.inf))
    return {"metric": metric, "error": error, "error_last": None, "detail": None}


def output_errors(
    model: str,
    workload: str,
    device: str,
    cases: Sequence[tuple[str, int]],
    *,
    seed: int = 0,
    data_seed: int = 0,
    input_size: int | None = None,
    compile_mode: str = "default",
    cudnn_benchmark: bool = True,
    train: TrainSettings | None = None,
    num_classes: int = 1000,
    train_steps: int = TRAIN_CHECK_STEPS,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Compare each ``(mode, batch_size)`` case's outputs with fp32 eager's, in this process.

    The network is built afresh for every case with the same seed (identical weights) and fed the same seeded
    input as the workloads (``randn`` from ``data_seed``); the mode is applied exactly as a worker applies it
    (``parse_mode(mode).configure`` and ``.prepare``). Inference compares logits. Train compares the loss of the
    first step and after ``train_steps`` updates through
    :func:`clsbench.procedures.train_parity.train_parity`, which builds the optimizer and the step the way the
    worker does (:mod:`clsbench.workloads.step`: ``+foreach``, ``+fused``, ``+compiled-step``, ``+cudagraph``), so
    that what is checked is what was measured; its entries also say how many updates they compared (``steps``).

    Returns:
        For each case: ``metric`` ("logits" or "loss"), ``error`` (max relative error of the logits, normalised by
        the largest reference logit; for train the first loss's relative error), ``error_last`` (train: the
        relative error of the loss after the last step), and ``detail`` (why there is no error figure, e.g. the
        mode cannot run here). A non-finite output gives an infinite error.
    """
    import torch

    from clsbench.measure.device import device_capabilities
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads import get_workload

    kind = get_workload(workload).kind
    if kind != "inference":
        from clsbench.procedures.train_parity import train_parity  # it imports this module's tolerances

        return train_parity(model, device, cases, steps=train_steps, seed=seed, data_seed=data_seed,
                            input_size=input_size, compile_mode=compile_mode, cudnn_benchmark=cudnn_benchmark,
                            train=train, num_classes=num_classes)
    dev = torch.device(device)
    spec = get_model_spec(model)
    side = input_size or spec.input_size
    bf16, tf32 = device_capabilities(dev)
    metric = "logits"

    def run(mode_name: str, batch: int) -> Any:
        mode = parse_mode(mode_name)
        ctx = mode.context(dev, kind, bf16_supported=bf16, tf32_supported=tf32, compile_mode=compile_mode)
        reason = mode.unsupported_reason(ctx)
        if reason:
            return f"unsupported here: {reason}"
        torch.backends.cudnn.benchmark = cudnn_benchmark
        mode.configure(ctx)
        net = spec.build(seed=seed, num_classes=num_classes, input_size=input_size).to(dev).eval()
        prepared = mode.prepare(net, ctx)
        images = torch.randn((batch, 3, side, side), generator=torch.Generator().manual_seed(data_seed))
        x = images.to(dtype=prepared.input_dtype).contiguous(memory_format=prepared.memory_format).to(dev)
        try:
            with torch.inference_mode(), prepared.autocast(dev.type):
                return prepared.forward(x).float().cpu()  # a copy: a graph's static output is overwritten later
        finally:
            if "compile" in {m.split(":")[0] for m in mode.modifier_names}:
                import importlib

                # Every fresh module recompiles the same forward code; without a reset dynamo's recompile limit
                # would silently fall back to eager after a few cases.
                importlib.import_module("torch._dynamo").reset()

    references: dict[int, Any] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for mode_name, batch in cases:
        key = (mode_name, batch)
        try:
            if batch not in references:
                references[batch] = run("fp32", batch)
                _free_memory(dev)
            ref = references[batch]
            got = run(mode_name, batch)
            _free_memory(dev)
            out[key] = _case_errors(metric, got, ref)
        except Exception as exc:  # noqa: BLE001 - a case that cannot run is reported, the others go on
            _free_memory(dev)
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            out[key] = {"metric": metric, "error": None, "error_last": None, "detail": f"the check failed: {text}"}
    return out



def _check_main(conn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Entry point of the fresh check process (ended without waiting once it has answered)."""
    from clsbench.system.lifetime import release_compile_workers, thread_lock_for_progress_bars

    thread_lock_for_progress_bars()
    try:
        try:
            answer: Any = output_errors(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - e.g. the model cannot be built: every case fails with the reason
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            answer = {tuple(case): {"metric": None, "error": None, "error_last": None,
                                    "detail": f"the check failed: {text}"} for case in args[3]}
        release_compile_workers()
        conn.send(answer)
    finally:
        conn.close()


def output_errors_in_subprocess(model: str, workload: str, device: str, cases: Sequence[tuple[str, int]], *,
                                timeout_s: float = 900.0, **kwargs: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """:func:`output_errors` in a fresh process (forkserver, or spawn where there is none), as the measurements
    run: a clean CUDA context and allocator, and process-wide flags (TF32, cuDNN) that do not leak."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:
        ctx = multiprocessing.get_context("spawn")
    cases = [tuple(c) for c in cases]
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_check_main, args=(sender, (model, workload, device, cases), kwargs), daemon=True,
                          name="clsbench-output-check")
    process.start()
    sender.close()
    answer = None
    try:
        if receiver.poll(timeout_s):
            answer = receiver.recv()
    except (EOFError, OSError):
        answer = None
    finally:
        if process.is_alive():
            process.kill()
        process.join(5.0)
        receiver.close()
    if answer is None:
        why = (f"the check process gave no answer within {timeout_s:g} s" if process.exitcode is None
               else f"the check process died (exit code {process.exitcode}) without an answer")
        return {case: {"metric": None, "error": None, "error_last": None, "detail": why} for case in cases}
    return answer


def judge(check: dict[str, Any], mode: str, tolerances: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Turn a raw :func:`output_errors` entry into a verdict with its tolerances and reason (pure)."""
    tolerance = tolerance_for(mode, tolerances)
    error, error_last = _num(check.get("error")), _num(check.get("error_last"))
    verdict = {"metric": check.get("metric"), "error": error, "tolerance": tolerance, "error_last": error_last,
               "tolerance_last": TRAIN_LOSS_RTOL if error_last is not None else None, "ok": False, "reason": None}
    if check.get("steps") is not None:  # train parity: the updates compared (a captured step's warm-up counts)
        verdict["steps"] = check["steps"]
    what = "logits" if check.get("metric") == "logits" else "first-step loss"
    if error is None:
        verdict["reason"] = check.get("detail") or "no output to compare"
    elif not error <= tolerance:
        verdict["reason"] = f"{what} differ from fp32 eager by {error:.3g} (relative; tolerance {tolerance:g})"
    elif error_last is not None and not error_last <= TRAIN_LOSS_RTOL:
        verdict["reason"] = (f"the loss after {check.get('steps') or TRAIN_CHECK_STEPS} steps differs from fp32 "
                             f"eager's by {error_last:.3g} (relative; tolerance {TRAIN_LOSS_RTOL:g})")
    else:
        verdict["ok"] = True
    return verdict


# ---------------------------------------------------------------------------------------------- the search


class TuneInterrupted(ClsbenchError):
    """Ctrl-C during a search: everything finished is saved; ``tune_result`` holds the table so far."""

    exit_code = EXIT_INTERRUPTED

    def __init__(self, message: str, hint: str | None, tune_result: TuneResult) -> None:
        super().__init__(message, hint)
        self.tune_result = tune_result


def tune(
    model: str,
    workload: str,
    device: str = "auto",
    *,
    max_latency_ms: float | None = None,
    max_memory_gb: float | None = None,
    modes: Sequence[str] | None = None,
    batch_sizes: Sequence[int] | str | None = None,
    output: str | Path | None = None,
    options: MeasureOptions = TUNE_OPTIONS,
    execution: Execution = Execution(),
    compile_variants: bool = True,
    variants: Sequence[str] | None = None,
    max_autotune: bool = True,
    check_outputs: bool = True,
    tolerances: Mapping[str, float] | None = None,
    backends: Sequence[str] | None = None,
    budget: float | str | None = None,
    budget_clock: Callable[[], float] | None = None,
    announce: Callable[[str], None] | None = None,
    data: DataSettings | None = None,
    pipelines: Sequence[str] | None = None,
    workers: int | None = None,
    exhaustive: bool = False,
) -> TuneResult:
    """Search execution modes x batch sizes x backends for the fastest configuration within the limits and the
    time budget (module docstring; the search itself: :mod:`clsbench.procedures.tune_search`).

    Args:
        model, workload, device: what to tune, and where.
        max_latency_ms: p50 request latency (infer-latency) or p99 latency per batch (otherwise), at most.
        max_memory_gb: peak reserved memory (GPU) or worker peak RSS (CPU), in 10^9 bytes, at most.
        modes: the eager modes of the first phase (default: :func:`default_modes`).
        batch_sizes: the sizes to try (default: batch 1 for infer-latency, a short doubling otherwise).
        output: the result file (None: memory only); never overwritten.
        options: what each measurement does; ``repeats`` is the full protocol the confirmation rung gives the best
            candidates (the screening and longer rungs take one repeat each).
        execution: isolation, clock, progress, environment and probe; with ``isolation="inline"`` the correctness
            check also runs in this process.
        compile_variants: try the compile, max-autotune and (inference) backend kinds.
        variants: the compile variants to try, e.g. ``["cudagraph", "compile+cudagraph"]`` (default: all;
            :func:`parse_variants`); fewer variants, fewer cold compilations.
        max_autotune: try ``+compile:max-autotune``.
        check_outputs: run the correctness guard (off: the winner's outputs are not compared).
        tolerances: per-precision output tolerances replacing :data:`OUTPUT_RTOL` entries.
        backends: the inference backends to try (default: every registered one but ``eager``; empty: none).
        budget: seconds, or a duration such as ``10m`` (default: :data:`clsbench.procedures.tune_budget.
            DEFAULT_BUDGET_S` of the device type).
        budget_clock: the clock the budget reads, in seconds (default ``time.monotonic``; a fake in tests).
        announce: called with each line of the up-front plan (what will be tried, what is left out), and with a
            ``warning:`` line for each file the dataset scan skipped.
        data: train on real data too (train only): the directory, source, data timeout and cache priming of every
            real-data cell (``--data DIR``); the pipeline kind measures the best compute candidates under each
            pipeline's most tuned setting, and the winner is a real-data cell.
        pipelines: with ``data``, the pipelines to try (default: every registered one; those that cannot run here
            are pruned with their reason).
        workers: with ``data``, the DataLoader workers of the cpu pipeline (and dali's threads); default: the CPU
            count (:func:`clsbench.procedures.tune_kinds.pipeline_workers`).
        exhaustive: cut nothing for speed (:mod:`clsbench.procedures.tune_search`, "Exhaustive"): every candidate at
            the longer rung, no plateau, dominance, halving or family limit; no budget unless ``budget`` is given
            (a candidate that cannot finish within it is still not started). The limits, the guard and the
            confirmation apply as usual.

    Raises:
        InvalidInputError: bad input (limits <= 0, an empty or invalid batch list, unknown names, a bad budget...).
        NoConfigurationError: nothing satisfies the limits (the message names the closest candidate), or every
            candidate that does was rejected by the correctness guard. The measurements are saved first.
        TuneInterrupted: Ctrl-C; what finished is saved, and ``tune --resume FILE`` goes on.
        ResultFileError: ``output`` exists or cannot be written.
    """
    from clsbench.workloads import WORKLOADS

    limits = {"max_latency_ms": validate_limit("max_latency_ms", max_latency_ms),
              "max_memory_gb": validate_limit("max_memory_gb", max_memory_gb)}
    WORKLOADS.get(workload)
    _validate_tolerances(tolerances)
    resolved = resolve_device(device)
    base_modes = _base_modes(workload, modes, resolved)
    suffixes = parse_variants(workload, variants)
    total = parse_budget(budget) or (math.inf if exhaustive else default_budget(resolved))
    sizes, explicit = _batch_sizes(workload, resolved, batch_sizes)
    backend_names = _backend_names(workload, backends) if compile_variants else ()
    data_facts = _data_facts(data, workload, resolved, sizes, pipelines, workers, announce) \
        if data is not None or pipelines is not None or workers is not None else None
    if data_facts is not None:  # overlapped preparation would take CPU time from the pipeline measured (diagnose)
        execution = dataclasses.replace(execution, overlap=False)
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    plan = plan_run(models=[model], workloads=[workload], modes=base_modes, batch_sizes=[sizes[0]], device=resolved,
                    options=options, execution=execution, environment=execution.env)
    facts = _facts(model, workload, resolved, options.input_size, limits, base_modes, sizes, explicit, suffixes,
                   compile_variants=compile_variants, max_autotune=max_autotune, check_outputs=check_outputs,
                   tolerances=tolerances, backends=backend_names, exhaustive=exhaustive)
    facts["budget_s"] = _stored_budget(total)
    if data_facts is not None:
        facts["data"] = data_facts
    run = IncrementalRun(plan, path, environment=run_facts(resolved, execution.env, probe=execution.probe),
                         key="tune", facts=facts, execution=execution)
    return _search(run, Budget(total, budget_clock), announce, tolerances)


def resume_tune(path: str | Path, *, budget: float | str | None = None, execution: Execution = Execution(),
                budget_clock: Callable[[], float] | None = None, announce: Callable[[str], None] | None = None,
                force: bool = False) -> TuneResult:
    """Continue an interrupted (or budget-limited) search from its result file.

    Candidates measured before are not measured again; the budget counts what the file says was spent already
    (``budget``: the new total, default the stored one). Everything else comes from the file: the search's settings
    (``settings["tune"]``) and the measuring plan.

    Raises:
        ResultFileError: not a tune file this version continues, or started in another environment (``force``).
        InvalidInputError: a bad budget.
    """
    from clsbench.engine.runner import check_resume_compatible
    from clsbench.system.machine import environment

    source = Path(path)
    result = result_io.load(source)
    facts = result.settings.get("tune")
    if not isinstance(facts, dict) or (facts.get("format") or 1) < TUNE_FORMAT:
        raise ResultFileError(f"{source} is not a tune search this clsbench can continue",
                              "start a new search: clsbench tune --model ... -o NEW.json")
    device = str(facts.get("device") or "cpu")
    current = execution.env if execution.env is not None else environment(device)
    if not force:
        check_resume_compatible(result, current, str(source))
        if facts.get("data"):
            from clsbench.data.plan import check_data_unchanged

            check_data_unchanged([DataSettings.from_dict(s) for s in facts["data"].get("settings") or []],
                                 str(source))
    stored = facts.get("budget_s")
    total = parse_budget(budget) or (float(stored) if stored else math.inf if facts.get("exhaustive")
                                     else default_budget(device))
    run = IncrementalRun.reopen(result, source, key="tune", execution=execution)
    _settle_pending(run)
    spent = float(run.facts.get("spent_s") or 0.0)
    run.facts["budget_s"] = _stored_budget(total)
    run.facts.setdefault("resumed", []).append({"spent_s": spent, "budget_s": _stored_budget(total)})
    tolerances = (run.facts.get("rules") or {}).get("output_rtol")
    return _search(run, Budget(total, budget_clock, spent_before_s=spent), announce, tolerances)


def _stored_budget(total_s: float) -> float | None:
    """``settings["tune"]["budget_s"]``: the budget in seconds, or None for none (an exhaustive search)."""
    return total_s if math.isfinite(total_s) else None


def _settle_pending(run: IncrementalRun) -> None:
    """A confirmation Ctrl-C stopped left its repeats pending: make them the candidate's measurement again (under
    the full rule they ran under), so that the candidate ranks whether or not the resumed search confirms it."""
    from clsbench.analysis.summary import build_measurement

    for pending in run.result.pending:
        cell = next((c for c in run.cells if c.key == tuple(pending.key)), None)
        if cell is not None and pending.repeats:
            m = build_measurement(cell, list(pending.repeats), run.plan.stop_rule(cell.workload),
                                  environment=run.result.environment)
            run.result = run.result.with_measurement(m)


def _search(run: IncrementalRun, budget: Budget, announce: Callable[[str], None] | None,
            tolerances: Mapping[str, float] | None) -> TuneResult:
    """Run (or go on with) the search of ``run``'s facts, check outputs, confirm, and analyse."""
    from clsbench.procedures.tune_kinds import cost_priors
    from clsbench.procedures.tune_search import Search

    facts = run.facts
    rules = facts.get("rules") or {}
    workload = facts["workload"]
    device = facts["device"]
    cost = CostModel(device, cost_priors("cuda" if device.startswith("cuda") else "cpu"))
    cost.restore(facts.get("cost_model"))
    search = Search(run, model=facts["model"], workload=workload, device=device, input_size=facts.get("input_size"),
                    limits=facts.get("limits") or {}, base_modes=list(facts["modes"]),
                    sizes=list(facts["batch_sizes"]), explicit=bool(facts.get("batch_sizes_explicit")),
                    suffixes=tuple("+" + v for v in rules.get("variants") or ()),
                    compile_variants=bool(rules.get("compile_variants")), max_autotune=bool(rules.get("max_autotune")),
                    backends=rules.get("backends") or (), repeats=run.plan.repeats, budget=budget, cost=cost,
                    announce=announce, exhaustive=bool(facts.get("exhaustive")))
    guard = None
    if facts.get("correctness_guard", True):
        def guard(s: Any, needed: int) -> None:
            _guard(s, needed, tolerances, run.execution.isolation)
    path = run.path
    try:
        search.search(guard)
    except (RunInterrupted, KeyboardInterrupt):
        search.save()
        outcome = TuneResult(result=run.result, analysis=analyze_tune(run.result), path=path)
        where = f"; continue it with: clsbench tune --resume {shlex.quote(str(path))}" if path is not None else ""
        raise TuneInterrupted(f"tune interrupted after {_duration(search.budget.spent_s())}: "
                              f"{len(run.result.measurements)} candidate(s) saved{where}", None, outcome) from None
    facts["search_s"] = search.budget.spent_s()
    search.save()
    analysis = analyze_tune(run.result)
    outcome = TuneResult(result=run.result, analysis=analysis, path=path)
    if analysis["winner"] is None:
        message, hint = no_winner_message(analysis)
        if path is not None and facts.get("left_out"):
            hint = f"{hint}; or continue with a larger budget: clsbench tune --resume {shlex.quote(str(path))} " \
                   "--budget 20m"
        raise NoConfigurationError(message, hint, outcome)
    return outcome


def _data_facts(data: DataSettings | None, workload: str, device: str, sizes: Sequence[int],
                pipelines: Sequence[str] | None, workers: int | None,
                announce: Callable[[str], None] | None) -> dict[str, Any]:
    """``settings["tune"]["data"]`` of a ``--data`` search: the scanned dataset and the real-data settings the
    pipeline kind measures (stored, so that a resumed search measures the same). Bad input raises here, before
    anything is written: data for an inference workload, an unknown pipeline, an unusable dataset."""
    import os

    from clsbench.data.base import ordered_pipelines
    from clsbench.data.plan import check_settings, prepare_data_settings
    from clsbench.procedures.diagnose import INPUT_BOUND_RATIO, parse_pipelines
    from clsbench.procedures.tune_kinds import PIPELINE_LEADERS, pipeline_settings, pipeline_workers
    from clsbench.workloads import get_workload

    if data is None:
        raise InvalidInputError("the pipeline options of tune need --data DIR", "e.g. --data ./images --pipeline cpu")
    if get_workload(workload).kind != "train":
        raise InvalidInputError(f"--data searches the input pipeline of training, not of {workload}",
                                "drop --data, or tune --workload train --data DIR")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise InvalidInputError(f"the worker count must be a whole number >= 0, got {workers!r}",
                                "e.g. --num-workers 8")
    chosen = parse_pipelines(pipelines) if pipelines is not None else [p.name for p in ordered_pipelines()]
    count = pipeline_workers(os.cpu_count()) if workers is None else workers
    base, index = prepare_data_settings(data, sizes)  # the dataset is scanned and checked here, once
    for line in index.warnings():
        if announce is not None:
            announce(f"warning: {line}")
    settings = [check_settings(s) for s in pipeline_settings(base, device, count, chosen)]
    return {"directory": base.directory, "source": base.source, "dataset": index.facts(limit=20),
            "pipelines": chosen, "workers": count, "settings": [s.to_dict() for s in settings],
            "rules": {"input_bound_ratio": INPUT_BOUND_RATIO, "pipeline_leaders": PIPELINE_LEADERS}}


def _validate_tolerances(tolerances: Mapping[str, float] | None) -> None:
    for key, value in (tolerances or {}).items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise InvalidInputError(f"tolerance for {key!r} must be a number >= 0, got {value!r}")


def _base_modes(workload: str, modes: Sequence[str] | None, device: str) -> list[str]:
    """The eager modes of phase 1, canonically spelt, without repeats."""
    from clsbench.modes import parse_mode

    named = modes if modes is not None else default_modes(workload, device)
    chosen = list(dict.fromkeys(parse_mode(m).name for m in named))
    if not chosen:
        raise InvalidInputError("no modes to explore", "leave out --mode, or name some, e.g. --mode fp32,amp-bf16")
    return chosen


def _backend_names(workload: str, backends: Sequence[str] | None) -> tuple[str, ...]:
    """The backends of phase 4: the named ones (checked), else every registered one but eager; none for train."""
    from clsbench.backends import BACKENDS, get_backend
    from clsbench.workloads import get_workload

    if backends is not None:
        for name in backends:
            get_backend(name)  # an unknown name is one error line with the closest names
    if get_workload(workload).kind != "inference":
        if backends:
            raise InvalidInputError("--backend applies to inference workloads only, not train",
                                    "drop --backend, or tune infer-throughput / infer-latency")
        return ()
    names = backends if backends is not None else BACKENDS.names()
    return tuple(dict.fromkeys(n for n in names if n != DEFAULT_BACKEND))


def _batch_sizes(workload: str, device: str, batch_sizes: Sequence[int] | str | None) -> tuple[list[int], bool]:
    """The sizes to try and whether the user named them (then growth does not stop on a plateau)."""
    if batch_sizes is None:
        if workload == "infer-latency":
            return [LATENCY_BATCH], False
        start = START_BATCH["cuda" if device.startswith("cuda") else "cpu"]
        return [start * 2 ** i for i in range(BATCH_DOUBLINGS + 1)], False
    parsed = parse_batch_sizes(batch_sizes if isinstance(batch_sizes, str) else list(batch_sizes))
    if parsed == "auto":
        raise InvalidInputError("tune chooses its batch sizes itself; give a list or leave it out",
                                "e.g. --batch-size 32,64,128")
    return list(parsed), True


def _facts(model: str, workload: str, device: str, input_size: int | None, limits: dict[str, float | None],
           base_modes: list[str], sizes: list[int], explicit: bool, suffixes: tuple[str, ...], *,
           compile_variants: bool, max_autotune: bool, check_outputs: bool,
           tolerances: Mapping[str, float] | None, backends: Sequence[str] = (),
           exhaustive: bool = False) -> dict[str, Any]:
    """What ``settings["tune"]`` records before the search starts (the search appends its phases and decisions)."""
    from clsbench.procedures.tune_kinds import DOMINANCE_MARGIN
    from clsbench.procedures.tune_search import CONFIRM_TOP, HALVING_ETA, SCREEN_FRACTION

    facts = {
        "format": TUNE_FORMAT,
        "model": model,
        "workload": workload,
        "device": device,
        "input_size": input_size,
        "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "objective": "lowest p50 request latency" if workload == "infer-latency" else "highest img/s",
        "limits": limits,
        "modes": base_modes,
        "batch_sizes": sizes,
        "batch_sizes_explicit": explicit,
        "rules": {"prune_loss_fraction": PRUNE_LOSS_FRACTION, "min_gain": AUTO_MIN_GAIN,
                  "max_compile_families": MAX_COMPILE_FAMILIES, "max_autotune_families": MAX_AUTOTUNE_FAMILIES,
                  "compile_variants": compile_variants, "variants": [v.lstrip("+") for v in suffixes],
                  "max_autotune": max_autotune,
                  "output_rtol": {p: tolerance_for(p, tolerances) for p in OUTPUT_RTOL
                                  # a device precision only where the search tries it: other files read as before
                                  if p not in DEVICE_PRECISIONS or any(m.split("+")[0] == p for m in base_modes)},
                  "train_loss_rtol": TRAIN_LOSS_RTOL, "train_check_steps": TRAIN_CHECK_STEPS,
                  "halving_eta": HALVING_ETA, "confirm_top": CONFIRM_TOP, "screen_fraction": SCREEN_FRACTION,
                  "dominance_margin": DOMINANCE_MARGIN},
        "correctness_guard": check_outputs,
        "phases": [],
        "pruned": [],
        "correctness": [],
        "search_s": None,
    }
    if compile_variants:  # the freeze and train-step kinds' limits, written only when those kinds may run
        from clsbench.procedures.tune_kinds import MAX_FREEZE_FAMILIES, MAX_TRAIN_STEP_FAMILIES

        facts["rules"]["max_freeze_families"] = MAX_FREEZE_FAMILIES
        facts["rules"]["max_train_step_families"] = MAX_TRAIN_STEP_FAMILIES
    if backends:  # written only when there is a backend phase, so other searches read as before
        facts["rules"]["backends"] = list(backends)
        facts["rules"]["max_backend_families"] = MAX_BACKEND_FAMILIES
    if exhaustive:  # written only for an exhaustive search, so other searches read as before
        facts["exhaustive"] = True
    return facts


def _guard(search: Any, needed: int, tolerances: Mapping[str, float] | None, isolation: str) -> None:
    """Check outputs, best candidate within the limits first (highest rung, then score), a group per fresh process,
    until ``needed`` candidates passed; each check process must fit in the budget, like a candidate."""
    run = search.run
    facts = run.facts
    passed = 0
    done: dict[tuple[str, int], dict[str, Any]] = {
        (c["mode"], c["batch_size"]): c for c in facts["correctness"] if (c.get("backend") or DEFAULT_BACKEND)
        == DEFAULT_BACKEND}  # checked before an interruption: not again
    ranked = search.ranked()
    for position, m in enumerate(ranked):
        if passed >= needed:
            return
        if m.backend != DEFAULT_BACKEND or m.mode == "fp32":
            verdict = _own_verdict(m, tolerances) if m.backend != DEFAULT_BACKEND else {"ok": True}
            if m.backend != DEFAULT_BACKEND and not any(
                    (c["mode"], c["batch_size"], c.get("backend")) == (m.mode, m.batch_size, m.backend)
                    for c in facts["correctness"]):
                facts["correctness"].append({"mode": m.mode, "batch_size": m.batch_size, "backend": m.backend,
                                             **verdict})
                search.save()
            passed += bool(verdict["ok"])  # fp32 eager is the reference itself; a backend has its own check
            continue
        key = (m.mode, m.batch_size)
        if key not in done:
            # The top candidate alone first (it usually passes); after a rejection, a few at a time.
            size = CHECK_GROUP if any(not v["ok"] for v in done.values()) else 1
            group = list(dict.fromkeys((x.mode, x.batch_size) for x in ranked[position:] if x.mode != "fp32"
                                       and x.backend == DEFAULT_BACKEND and (x.mode, x.batch_size) not in done))
            group = group[:size]  # a real-data cell and its synthetic ceiling are one case: the same mode and batch
            if not _check_group(search, group, done, tolerances, isolation):
                return  # the budget holds no check process more
        passed += bool(done[key]["ok"])


def _own_verdict(m: Measurement, tolerances: Mapping[str, float] | None) -> dict[str, Any]:
    """A backend's verdict: the parity check its own measurement made (repeat 0)."""
    return parity_verdict(m) or {"metric": "logits", "error": None, "tolerance": tolerance_for(m.mode, tolerances),
                                 "ok": False, "reason": "the measurement holds no parity check"}


def _check_group(search: Any, group: list[tuple[str, int]], done: dict[tuple[str, int], dict[str, Any]],
                 tolerances: Mapping[str, float] | None, isolation: str) -> bool:
    """Check one group of cases in one process if the budget holds it; record each verdict. False: no budget."""
    run = search.run
    plan, facts = run.plan, run.facts
    estimate = search.cost.check_s()
    if not search.budget.fits(estimate, search.reserve_s("check")):
        search.leave_out(None, "check", None, "check", estimate, search.reserve_s("check"))
        return False
    options = {"seed": plan.seed, "data_seed": plan.data_seed, "input_size": facts.get("input_size"),
               "compile_mode": plan.compile_mode, "cudnn_benchmark": plan.cudnn_benchmark, "train": plan.train}
    model, workload, device = facts["model"], facts["workload"], facts["device"]
    before = search.budget.clock()
    if isolation == "inline":
        answers = output_errors(model, workload, device, group, **options)
    else:
        answers = output_errors_in_subprocess(model, workload, device, group, timeout_s=plan.timeout_s, **options)
    search.cost.observe_check(search.budget.clock() - before)
    for case in group:
        verdict = judge(answers.get(case, {"detail": "no answer for this case"}), case[0], tolerances)
        done[case] = verdict
        facts["correctness"].append({"mode": case[0], "batch_size": case[1], **verdict})
    search.save()
    return True


# -------------------------------------------------------------------------------------------- analysis (pure)


_VERDICT_ORDER = {"winner": 0, "allowed": 1, "rejected": 2, "over limit": 3, "failed": 4, "skipped": 5}


def analyze_tune(result: BenchmarkResult) -> dict[str, Any]:
    """Rank a tune's candidates, pick the winner and build the command that reproduces it (pure: reads the file).

    Verdicts: ``winner``; ``allowed`` (within the limits; checked and passed, or not checked because a better
    candidate passed); ``rejected`` (the correctness guard); ``over limit``; ``failed``; ``skipped``.
    """
    facts = result.settings.get("tune") or {}
    workload = facts.get("workload") or (result.measurements[0].workload if result.measurements else None)
    limits = facts.get("limits") or {}
    guard = facts.get("correctness_guard", True)
    checks = {(c["mode"], c["batch_size"], c.get("backend") or DEFAULT_BACKEND): c
              for c in facts.get("correctness") or []}
    rungs = _latest_rungs(facts.get("trials") or [])
    candidates = []
    for m in result.measurements:
        if facts and (m.model, m.workload, m.device) != (facts.get("model"), workload, facts.get("device")):
            continue
        f = _judged_candidate(m, workload or m.workload, limits, checks, guard)
        f["rung"] = rungs.get((*candidate_key(f), f.get("data")))
        f["rung_level"] = _RUNG_LEVELS.get(f["rung"], -1)
        f["repeats"] = sum(1 for r in m.repeats if r.get("status", Status.OK) == Status.OK)
        f["data_settings"] = m.data
        f["idle_fraction"] = _num(((m.summary or {}).get("data") or {}).get("idle_fraction"))
        candidates.append(f)
    if facts.get("data"):
        _judge_against_ceilings(candidates)
    candidates.sort(key=lambda f: (bool(facts.get("data")) and f.get("data") is None, *rank_key(f)))
    winner = next((f for f in candidates if f["verdict"] == "allowed"
                   and (not guard or (f["correctness"] or {}).get("ok"))), None)
    if winner is not None:
        winner["verdict"] = "winner"
        # Confirmed: the full protocol (more than one fresh repeat) of the confirmation rung; files without rungs
        # (format 1) say nothing either way.
        winner["confirmed"] = (winner["rung"] == "confirm" and winner["repeats"] > 1) if rungs else None
    baseline = max((f["score"] for f in candidates if f["mode"] == "fp32" and f["backend"] == DEFAULT_BACKEND
                    and f.get("data") is None and f["score"] is not None), default=None)
    for rank, f in enumerate(candidates, start=1):
        f["rank"] = rank
        f["vs_fp32"] = f["score"] / baseline if baseline and f["score"] is not None else None
    command = _winner_command(result, facts, workload, winner) if winner is not None else None
    # Ceilings never win: with real-data cells measured, the closest is one of them.
    eligible = [f for f in candidates if f.get("data")] or candidates
    closest = _closest(eligible, limits) if winner is None else None
    return {
        "model": facts.get("model"),
        "workload": workload,
        "device": facts.get("device"),
        "objective": facts.get("objective"),
        "limits": limits,
        "correctness_guard": guard,
        "candidates": candidates,
        "winner": winner,
        "closest": closest,
        "command": command,
        "pruned": facts.get("pruned") or [],
        "search_s": facts.get("search_s"),
        "budget_s": facts.get("budget_s"),
        "spent_s": facts.get("spent_s"),
        "plan": facts.get("plan") or [],
        "left_out": facts.get("left_out") or [],
        "trials": facts.get("trials") or [],
        "interrupted": bool(rungs) and facts.get("search_s") is None,
        "data": facts.get("data"),
        "exhaustive": bool(facts.get("exhaustive")),
        "measurements": len(candidates),
        "checks": len(checks),
    }


_RUNG_LEVELS = {"screen": 0, "longer": 1, "confirm": 2}


def _latest_rungs(trials: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int, str, str | None], str]:
    """Each candidate's highest rung among its finished trials (pure); keyed by mode, batch, backend and the data
    label (None: synthetic)."""
    out: dict[tuple[str, int, str, str | None], str] = {}
    for t in trials:
        if t.get("actual_s") is None or t.get("rung") not in _RUNG_LEVELS:
            continue
        key = (t["mode"], int(t["batch_size"]), t.get("backend") or DEFAULT_BACKEND, t.get("data"))
        if _RUNG_LEVELS[t["rung"]] >= _RUNG_LEVELS.get(out.get(key), -1):
            out[key] = t["rung"]
    return out


def _judged_candidate(m: Measurement, workload: str, limits: Mapping[str, Any],
                      checks: Mapping[tuple[str, int, str], dict[str, Any]], guard: bool) -> dict[str, Any]:
    """One measurement as a candidate row (pure): its figures, the limits it breaks, its correctness verdict and
    its verdict before ranking (``allowed``, ``rejected``, ``over limit``, or the status when it did not run ok).

    Correctness comes from the tune's own output check, overridden by a backend's parity check when there is no
    tune check or the parity check failed; fp32 eager, never checked, is the reference when the guard is on.
    """
    f = candidate_figures(m, workload)
    f["violations"] = limit_violations(f, limits) if m.status == Status.OK else []
    f["correctness"] = checks.get(candidate_key(f))
    parity = parity_verdict(m)
    if parity is not None and (f["correctness"] is None or not parity["ok"]):
        f["correctness"] = parity  # a backend's own check, also with the guard off: a failed one never wins
    if m.mode == "fp32" and m.backend == DEFAULT_BACKEND and f["correctness"] is None and guard:
        f["correctness"] = {"ok": True, "reason": None, "error": 0.0, "reference": True}
    if m.status != Status.OK:
        f["verdict"] = m.status
    elif parity is not None and not parity["ok"]:
        f["verdict"] = "rejected"
        f["reason"] = Reason.PARITY_FAILED
    elif f["violations"]:
        f["verdict"] = "over limit"
    elif f["correctness"] is not None and not f["correctness"].get("ok"):
        f["verdict"] = "rejected"
    else:
        f["verdict"] = "allowed"
    return f


def _judge_against_ceilings(candidates: list[dict[str, Any]]) -> None:
    """``tune --data``: each real-data candidate's synthetic ceiling (the synthetic candidate of the same mode, batch
    and backend), its ratio to it and whether the pipeline keeps that ceiling fed (``diagnose``'s rule,
    :func:`clsbench.procedures.diagnose.classify`: at least :data:`~clsbench.procedures.diagnose.INPUT_BOUND_RATIO`
    of it, and not idle beyond its limit); a synthetic candidate that would have been allowed is a ``ceiling``, never
    the winner (pure)."""
    from clsbench.procedures.diagnose import classify

    ceilings = {candidate_key(f): f for f in candidates if f.get("data") is None}
    for f in candidates:
        if f.get("data") is None:
            if f["verdict"] == "allowed":
                f["verdict"] = "ceiling"
            continue
        ceiling = ceilings.get(candidate_key(f))
        rate = ceiling.get("throughput_img_s") if ceiling is not None and ceiling["status"] == Status.OK else None
        f["ceiling_img_s"] = rate
        f["ratio_to_synthetic"] = f["throughput_img_s"] / rate if rate and f["throughput_img_s"] is not None \
            else None
        verdict = classify({"ratio_to_synthetic": f["ratio_to_synthetic"], "idle_fraction": f.get("idle_fraction")},
                           None)
        f["keeps_fed"] = None if verdict is None else verdict != "input-bound"


def _winner_command(result: BenchmarkResult, facts: Mapping[str, Any], workload: str | None,
                    winner: dict[str, Any]) -> str | None:
    """The command that measures the winner again with the tune's settings; None when the file's settings do not
    make a plan (a hand-edited or partial file)."""
    try:
        plan = RunPlan.from_dict(result.settings)
    except (KeyError, TypeError, ValueError):
        return None
    from clsbench.core.data_settings import DataSettings

    data = DataSettings.from_dict(winner["data_settings"]) if winner.get("data_settings") else None
    return reproduce_command(plan, Cell(facts.get("model") or "", workload or "", winner["mode"],
                                        winner["batch_size"], facts.get("device") or "cpu",
                                        facts.get("input_size"), data=data, backend=winner["backend"]))


def _closest(candidates: list[dict[str, Any]], limits: Mapping[str, Any]) -> dict[str, Any] | None:
    """Without a winner: the candidate that ran and was not rejected and lies nearest the limits (the smallest
    overshoot, then the best score), to say how far the limits would have to move; None when there is none."""
    pool = [f for f in candidates if f["status"] == Status.OK and f["verdict"] != "rejected"]
    if not pool:
        return None
    return min(pool, key=lambda f: (_overshoot(f, limits), -(f["score"] or 0.0)))


def _describe(f: dict[str, Any]) -> str:
    parts = [f"{f['limited_latency_name']} {f['limited_latency_ms']:.3g} ms" if f.get("limited_latency_ms")
             is not None else None,
             f"{f['memory_kind']} {f['memory_bytes'] / GB:.3g} GB" if f.get("memory_bytes") is not None else None,
             f"{f['throughput_img_s']:,.1f} img/s" if f.get("throughput_img_s") is not None else None]
    figures = ", ".join(p for p in parts if p)
    data = f" on {f['data']}" if f.get("data") else ""
    return f"{f['mode']}{backend_suffix(f.get('backend'))} at batch {f['batch_size']}{data} ({figures})"


def _limits_text(limits: Mapping[str, Any], workload: str | None) -> str:
    parts = []
    if limits.get("max_latency_ms") is not None:
        what = "p50 request latency" if workload == "infer-latency" else "p99 latency per batch"
        parts.append(f"{what} <= {limits['max_latency_ms']:g} ms")
    if limits.get("max_memory_gb") is not None:
        parts.append(f"peak memory <= {limits['max_memory_gb']:g} GB")
    return " and ".join(parts) if parts else "no limits"


def no_winner_message(analysis: dict[str, Any]) -> tuple[str, str]:
    """The one-line error and hint when there is no winner (pure)."""
    limits = analysis.get("limits") or {}
    candidates = analysis.get("candidates") or []
    closest = analysis.get("closest")
    text = _limits_text(limits, analysis.get("workload"))
    real = [f for f in candidates if f.get("data")]
    ceilings = [f for f in candidates if f["verdict"] == "ceiling"]
    if analysis.get("data") and (real or ceilings) and not any(f["status"] == Status.OK for f in real):
        # Compute candidates qualified, but no pipeline fed one: say what each pipeline tried met.
        reasons = sorted({f"{f['data']}: {f['status']}: {f['detail'] or f['reason']}" for f in real} |
                         {f"{p['mode']}: {p['reason']}" for p in analysis.get("pruned") or []
                          if p.get("stage") == "pipeline"})
        return (f"no real-data setting ran successfully ({'; '.join(reasons) or 'none was measured'})",
                "see the table and the pruned lines; `clsbench diagnose MODEL --data DIR` measures the pipelines "
                "one by one")
    if not any(f["status"] == Status.OK for f in candidates):
        reasons = sorted({f"{f['status']}: {f['reason']}" for f in candidates})
        return (f"no configuration ran successfully ({'; '.join(reasons) or 'nothing measured'})",
                "see the table and each failure's reason; `clsbench run` one mode to investigate")
    if closest is None:
        rejected = [f for f in candidates if f["verdict"] == "rejected"]
        first = rejected[0] if rejected else None
        why = f": {first['mode']} batch {first['batch_size']}: {first['correctness']['reason']}" if first else ""
        return (f"every configuration within {text} was rejected by the correctness guard{why}",
                "see the table; fp32 eager is always correct, or loosen a tolerance deliberately (tolerances=...)")
    needed = []
    if limits.get("max_latency_ms") is not None and closest.get("limited_latency_ms") is not None \
            and closest["limited_latency_ms"] > limits["max_latency_ms"]:
        needed.append(f"--max-latency-ms to at least {closest['limited_latency_ms']:.3g}")
    if limits.get("max_memory_gb") is not None and closest.get("memory_bytes") is not None \
            and closest["memory_bytes"] > limits["max_memory_gb"] * GB:
        needed.append(f"--max-memory-gb to at least {closest['memory_bytes'] / GB:.3g}")
    if not needed:  # the closest is within the limits but was not checked or not correct: say so plainly
        return (f"no checked configuration meets {text}; the closest is {_describe(closest)}",
                "see the table")
    return (f"no configuration meets {text}; the closest is {_describe(closest)}",
            "raise " + " and ".join(needed) + ", or try a smaller batch with --batch-size")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s" if seconds >= 60 else f"{seconds:.1f} s"


def render_tune(analysis: dict[str, Any]) -> str:
    """The runner-up table, the winner, the command that reproduces it and how long the search took."""
    from clsbench.report.table import render_rows

    workload = analysis.get("workload")
    what = "tune (exhaustive)" if analysis.get("exhaustive") else "tune"
    lines = [f"{what}: {analysis.get('model')} {workload} on {analysis.get('device')} | objective: "
             f"{analysis.get('objective')} | limits: {_limits_text(analysis.get('limits') or {}, workload)}", ""]
    candidates = analysis.get("candidates") or []
    with_backend = any((f.get("backend") or DEFAULT_BACKEND) != DEFAULT_BACKEND for f in candidates)
    with_rung = any(f.get("rung") for f in candidates)
    with_data = any(f.get("data") for f in candidates)
    header = ("rank", "mode", *(("backend",) if with_backend else ()), "batch", *(("rung",) if with_rung else ()),
              "img/s", "vs fp32", "p50 ms", "p99 ms", "memory", "outputs", "verdict")
    rows = [_candidate_row(f, with_backend, with_rung) for f in candidates]
    if with_data:  # the pipeline setting and the share of the synthetic ceiling, after the batch column
        at = header.index("batch") + 1
        header = (*header[:at], "data", "vs synth", *header[at:])
        rows = [(*row[:at], f.get("data") or "synthetic", _pct(f.get("ratio_to_synthetic")), *row[at:])
                for row, f in zip(rows, candidates, strict=True)]
    lines += render_rows(header, rows, {"rank", "batch", "img/s", "vs fp32", "vs synth", "p50 ms", "p99 ms",
                                        "memory"})
    lines.append("")
    lines += _outcome_lines(analysis)
    for pruned in analysis.get("pruned") or []:
        lines.append(f"pruned ({pruned['stage']}): {pruned['mode']} -> not tried {', '.join(pruned['variants'])}: "
                     f"{pruned['reason']}")
    lines += _left_out_lines(analysis.get("left_out") or [], analysis.get("plan") or [])
    for f in candidates:
        if f["verdict"] == "rejected":
            lines.append(f"rejected: {f['mode']}{backend_suffix(f.get('backend'))} batch {f['batch_size']}: "
                         f"{f['correctness'].get('reason')}")
    checks = analysis.get("checks") or 0
    took = analysis.get("search_s") if analysis.get("search_s") is not None else analysis.get("spent_s")
    budget = f", budget {_duration(analysis['budget_s'])}" if analysis.get("budget_s") is not None else \
        ", no budget" if analysis.get("exhaustive") else ""
    count = analysis.get("measurements") or 0
    lines.append(f"search took {_duration(took)}{budget} ({count} candidate{'' if count == 1 else 's'}, "
                 f"{len(analysis.get('trials') or [])} measured in rungs, "
                 f"{checks} output check{'' if checks == 1 else 's'})" if analysis.get("trials") else
                 f"search took {_duration(took)} ({analysis.get('measurements')} measurements, "
                 f"{checks} output check{'' if checks == 1 else 's'})")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _left_out_lines(left_out: Sequence[Mapping[str, Any]], plan: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per stage the plan left out up front (unless its candidates are listed), and per candidate (or
    check) the budget left out while the search ran, saying why."""
    listed = {entry.get("stage") for entry in left_out}
    lines = [f"left out for the budget: {stage['stage']} (up to {stage['candidates']} candidate(s)): "
             f"{stage.get('reason')}" for stage in plan if not stage.get("planned") and stage["stage"] not in listed]
    for entry in left_out:
        data = f" on {entry['data']}" if entry.get("data") else ""
        what = entry.get("stage") if entry.get("mode") is None else \
            f"{entry['mode']}{backend_suffix(entry.get('backend'))} batch {entry['batch_size']}{data} " \
            f"({entry['stage']})"
        lines.append(f"left out for the budget: {what}: {entry.get('reason')}")
    return lines


def _candidate_row(f: dict[str, Any], with_backend: bool, with_rung: bool = False) -> tuple[str, ...]:
    """A candidate's row of the tune table (the backend column only when some candidate is not eager; the rung
    column, with the repeats behind the figure, for searches with rungs)."""
    from clsbench.report.table import fmt_ms, fmt_rate

    memory = "-" if f.get("memory_bytes") is None else f"{f['memory_bytes'] / GB:.2f} GB"
    backend = ((f.get("backend") or DEFAULT_BACKEND),) if with_backend else ()
    rung = (f"{f.get('rung') or '-'} x{f.get('repeats') or 0}",) if with_rung else ()
    return (str(f["rank"]), f["mode"], *backend, str(f["batch_size"]), *rung, fmt_rate(f.get("throughput_img_s")),
            "-" if f.get("vs_fp32") is None else f"{f['vs_fp32']:.2f}x", fmt_ms(f.get("latency_p50_ms")),
            fmt_ms(f.get("latency_p99_ms")), memory, _outputs_cell(f), _verdict_cell(f))


def _outputs_cell(f: dict[str, Any]) -> str:
    """The ``outputs`` column: the correctness check's error against fp32 eager, "reference" for fp32 eager
    itself, "check failed" when the check gave no figure, "-" when a candidate that ran was not checked."""
    correctness = f.get("correctness")
    if correctness is None:
        return "-" if f["status"] == Status.OK else ""
    if correctness.get("reference"):
        return "reference"
    if correctness.get("error") is None:
        return "check failed"
    return f"{correctness['error']:.1e}" + ("" if correctness.get("ok") else " (too far)")


def _verdict_cell(f: dict[str, Any]) -> str:
    """The ``verdict`` column: the verdict (WINNER in capitals) and, for the others that lost, why."""
    verdict = f["verdict"].upper() if f["verdict"] == "winner" else f["verdict"]
    if f["verdict"] == "failed":
        verdict += f": {f['reason']}"
    elif f["verdict"] == "skipped":
        verdict += f": {f['detail'] or f['reason']}"
    elif f["verdict"] == "over limit":
        verdict += ": " + "; ".join(f["violations"])
    elif f["verdict"] == "rejected":
        verdict += ": " + (f"{Reason.PARITY_FAILED}" if f.get("reason") == Reason.PARITY_FAILED else
                           "outputs differ from fp32 eager")
    return verdict


def _fed_line(winner: Mapping[str, Any]) -> str:
    """``tune --data``: the winner's share of the synthetic ceiling of its mode and batch, and whether it is fed."""
    from clsbench.procedures.diagnose import IDLE_LIMIT, INPUT_BOUND_RATIO

    ceiling = winner.get("ceiling_img_s")
    if ceiling is None or winner.get("ratio_to_synthetic") is None:
        return f"input: {winner['data']}: no synthetic ceiling of {winner['mode']} at batch {winner['batch_size']} " \
               "to compare with"
    idle = winner.get("idle_fraction")
    if winner.get("keeps_fed"):
        fed = "kept fed"
    elif winner["ratio_to_synthetic"] >= INPUT_BOUND_RATIO and idle is not None:
        fed = f"not kept fed: it sat idle waiting for data {_pct(idle)} of the time (above {IDLE_LIMIT:.0%})"
    else:
        fed = "not kept fed: the input pipeline limits training"
    return (f"input: {winner['data']}: {_pct(winner['ratio_to_synthetic'])} of the synthetic ceiling of "
            f"{winner['mode']} at batch {winner['batch_size']} ({ceiling:,.1f} img/s): {fed} (kept fed, as in "
            f"diagnose: at least {INPUT_BOUND_RATIO:.0%} of it, idle at most {IDLE_LIMIT:.0%})")


def _outcome_lines(analysis: dict[str, Any]) -> list[str]:
    """The lines under the table: the winner, how its outputs compare with fp32 eager's and the command that
    reproduces it; or, without a winner, why (:func:`no_winner_message`)."""
    winner = analysis.get("winner")
    if winner is None:
        message, _hint = no_winner_message(analysis)
        return [f"no winner: {message}"]
    speed = f", {winner['vs_fp32']:.2f}x fp32 eager" if winner.get("vs_fp32") is not None else ""
    confirmed = winner.get("confirmed")
    repeats = winner.get("repeats") or 0
    how = "" if confirmed is None else f"; confirmed over {repeats} repeats" if confirmed else \
        f"; from {repeats} repeat{'' if repeats == 1 else 's'}, unconfirmed"
    lines = [f"winner: {_describe(winner)}{speed}{how}"]
    if winner.get("data"):
        lines.append(_fed_line(winner))
    correctness = winner.get("correctness") or {}
    if correctness.get("reference"):
        lines.append("outputs: fp32 eager is the reference")
    elif correctness.get("error") is not None:
        lines.append(f"outputs: {correctness['metric']} within {correctness['error']:.2g} of fp32 eager "
                     f"(tolerance {correctness['tolerance']:g})")
    elif not analysis.get("correctness_guard", True):
        lines.append("outputs: not checked (correctness guard off)")
    lines.append(f"reproduce: {analysis.get('command')}")
    if analysis.get("command"):  # where the winner's step time goes: one command away
        lines.append(f"profile: {profile_command(analysis['command'])}")
    return lines


__all__ = [
    "NoConfigurationError",
    "TuneInterrupted",
    "TuneResult",
    "analyze_tune",
    "default_modes",
    "judge",
    "no_winner_message",
    "output_errors",
    "output_errors_in_subprocess",
    "render_tune",
    "reproduce_command",
    "resume_tune",
    "tune",
    "validate_limit",
    "variant_of",
]


PROCEDURES.register("tune", ProcedureView("tune", lambda result: render_tune(analyze_tune(result))))
