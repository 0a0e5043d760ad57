"""``clsbench tune``: the fastest way to run one model on this device, within latency and memory limits.

The search measures ordinary cells (each repeat in a fresh worker, :func:`clsbench.engine.runner.run_plan`) into one
result file, within a time budget, screening first and confirming last: every candidate enters a rung (a short
screening window, or the full window at once for candidates whose build dominates their cost), the best third of
the screened ones are measured for longer, the outputs of the best are checked, and the best two that pass get the
full repeat protocol (:mod:`clsbench.procedures.tune.search`; the budget and cost model:
:mod:`clsbench.procedures.tune.budget`). The candidates come from kinds (:mod:`clsbench.procedures.tune.kinds`),
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
   Then, refining the best compiled family (:mod:`clsbench.procedures.tune.mode_kinds`): for inference **freeze**,
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
passes; a train candidate is checked by training parity (:mod:`clsbench.procedures.tune.guard`: its training
step as the worker runs it, optimizer implementation, compiled and captured step included); a rejected candidate
keeps its figures and carries the reason. A backend candidate is judged by the parity check its own measurement
made (:mod:`clsbench.backends.parity`, the same tolerances); one whose parity failed is ``rejected`` (reason
``parity_failed``) whether the guard is on or not, so it can never win.

Like a sweep, the procedure's own facts go under ``settings["tune"]`` (limits, rules, pruned branches, the
correctness checks, the budget, the plan, every trial with its estimated and actual cost, what was left out, how
long the search took); the ranking (highest rung first, then score), the winner (confirmed or not) and the command
that reproduces it are derived on reading by the pure function :func:`analyze_tune`
(:mod:`clsbench.procedures.tune.analysis`). ``tune --resume FILE``
continues a search (:func:`resume_tune`).

**Exhaustive** (``tune --exhaustive``, ``exhaustive=True``): the same kinds and candidate space with nothing cut for
speed (no screen rung and so no halving, no plateau or dominance stop, every family in the kinds that limit them, no
pruning margin, no budget unless one is given), recorded as ``settings["tune"]["exhaustive"]`` so that
``tune --resume`` continues it as such: the reference a default search's winner is judged against
(:mod:`clsbench.procedures.tune.compare`).


**The package**, its modules importing one way only (each imports only modules to its left; ``text`` and
``analysis`` are pure, ``compare`` reads two files through ``analysis``)::

    budget <- settings <- figures <- kinds <- search <- mode_kinds <- backend_kind <- pipeline_kind
           <- guard <- analysis <- text <- run <- __init__ (this module)
                        analysis <- compare

- ``settings``: :class:`TuneSettings`, every setting once and its checks, and the rules shared by the modules;
- ``budget``: the time budget and the cost model; ``figures``: a candidate's figures, limits and rank;
- ``kinds``: the registry of candidate kinds (:data:`TUNE_KINDS`, :func:`register_kind`); ``mode_kinds``,
  ``backend_kind``, ``pipeline_kind``: the built-in kinds, registered in that order;
- ``search``: the budgeted screen-then-confirm search; ``guard``: the correctness guard and training parity;
- ``analysis``: :func:`analyze_tune`; ``text``: :func:`render_tune`; ``compare``: a default search's winner against an
  exhaustive search's best; ``run``: :func:`tune` and :func:`resume_tune`.
"""

from __future__ import annotations

from clsbench.core.options import reproduce_command
from clsbench.procedures.base import PROCEDURES, HtmlSection, ProcedureView
from clsbench.procedures.tune.analysis import analyze_tune
from clsbench.procedures.tune.budget import DEFAULT_BUDGET_S, Budget, CostModel, default_budget, parse_budget
from clsbench.procedures.tune.figures import (
    GB,
    candidate_figures,
    candidate_key,
    limit_violations,
    parity_verdict,
    rank_key,
)
from clsbench.procedures.tune.guard import (
    CHECK_GROUP,
    judge,
    output_errors,
    output_errors_in_subprocess,
    train_parity,
)
from clsbench.procedures.tune.kinds import TUNE_KINDS, CandidateKind, Stage, register_kind
from clsbench.procedures.tune.run import (
    NoConfigurationError,
    TuneInterrupted,
    TuneResult,
    plan_tune,
    resume_tune,
    tune,
)
from clsbench.procedures.tune.settings import (
    BACKEND_PRECISION,
    BATCH_DOUBLINGS,
    DEFAULT_TUNE_REPEATS,
    DEVICE_PRECISIONS,
    INFERENCE_CAST_PRECISIONS,
    LATENCY_BATCH,
    MAX_AUTOTUNE_FAMILIES,
    MAX_BACKEND_FAMILIES,
    MAX_COMPILE_FAMILIES,
    OUTPUT_RTOL,
    PRUNE_LOSS_FRACTION,
    START_BATCH,
    TRAIN_CHECK_STEPS,
    TRAIN_LOSS_RTOL,
    TUNE_FORMAT,
    TUNE_OPTIONS,
    TUNE_PRECISIONS,
    TuneSettings,
    default_modes,
    parse_variants,
    tolerance_for,
    validate_limit,
    variant_of,
)
from clsbench.procedures.tune.text import no_winner_message, render_tune
from clsbench.procedures.tune.view import tune_section

__all__ = [
    "BACKEND_PRECISION",
    "BATCH_DOUBLINGS",
    "CHECK_GROUP",
    "DEFAULT_BUDGET_S",
    "DEFAULT_TUNE_REPEATS",
    "DEVICE_PRECISIONS",
    "GB",
    "INFERENCE_CAST_PRECISIONS",
    "LATENCY_BATCH",
    "MAX_AUTOTUNE_FAMILIES",
    "MAX_BACKEND_FAMILIES",
    "MAX_COMPILE_FAMILIES",
    "OUTPUT_RTOL",
    "PRUNE_LOSS_FRACTION",
    "START_BATCH",
    "TRAIN_CHECK_STEPS",
    "TRAIN_LOSS_RTOL",
    "TUNE_FORMAT",
    "TUNE_KINDS",
    "TUNE_OPTIONS",
    "TUNE_PRECISIONS",
    "Budget",
    "CandidateKind",
    "CostModel",
    "NoConfigurationError",
    "Stage",
    "TuneInterrupted",
    "TuneResult",
    "TuneSettings",
    "analyze_tune",
    "candidate_figures",
    "candidate_key",
    "default_budget",
    "default_modes",
    "judge",
    "limit_violations",
    "no_winner_message",
    "output_errors",
    "output_errors_in_subprocess",
    "parity_verdict",
    "parse_budget",
    "parse_variants",
    "plan_tune",
    "rank_key",
    "register_kind",
    "render_tune",
    "reproduce_command",
    "resume_tune",
    "tolerance_for",
    "train_parity",
    "tune",
    "validate_limit",
    "variant_of",
]


#: Where tune's section stands in the HTML report: the first of the procedures' sections, after the batch sweeps.
TUNE_SECTION_ORDER = 10

PROCEDURES.register("tune", ProcedureView("tune", lambda result: render_tune(analyze_tune(result)),
                                          html=HtmlSection("tune", "Tune searches", TUNE_SECTION_ORDER, tune_section)))
