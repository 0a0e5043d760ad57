"""``clsbench diagnose MODEL --data DIR``: does the input pipeline keep the GPU fed, and which setting does it best?

One ordinary result file, measured like any run (each setting in fresh worker processes, :func:`runner.run_plan`):

1. the model on the **synthetic** resident batch: the ceiling, with no data cost at all;
2. the **cpu** pipeline with PyTorch's defaults (``num_workers=0``, ``pin_memory=False``): what a plain training
   loop gets;
3. the cpu pipeline over ``num_workers`` 0, 2, 4, 8, ... up to the CPU count (:func:`sweep_workers`) x
   ``pin_memory`` off/on (on a GPU; pinning means nothing on a CPU), with ``persistent_workers`` on whenever there
   are workers, so an epoch's end does not restart them inside a short timed window; then, at the largest worker
   count, the same with uint8 batches normalised on the device (``normalize="device"``);
4. the **gpu** pipeline (nvJPEG decode on the device), and **dali** when installed; each is skipped with its reason
   where it cannot run.

All settings use the same source (``folder`` by default), model, mode, batch size and stop rule. Overlapped
preparation is off: building the next worker's model would take CPU time from the pipeline being measured. The
GPU probe is not run (MFU is not the question here).

The analysis (:func:`analyze_diagnose`, pure: reads the file) gives per setting its img/s, the ratio to synthetic,
the data-wait and idle shares, then the verdict, the best setting, its gain over the default and the ``clsbench run``
command that measures it again (its text, ``show``'s diagnose section, is
:mod:`clsbench.procedures.diagnose_text`). Verdict rules, applied to a setting (the best, and the default):

* **input-bound** when it reaches less than :data:`INPUT_BOUND_RATIO` (90%) of the synthetic throughput, or the GPU
  sat idle between its steps more than :data:`IDLE_LIMIT` (10%) of the time (on a CPU: the share of time spent
  waiting for data);
* otherwise **launch-bound** when the synthetic run itself is (the roofline verdict of section 5 of the
  methodology: GPU busy less than half of each step), so the data pipeline is not what limits training;
* otherwise **compute-bound**: the pipeline keeps up and the model's own speed sets the pace.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution, MeasureOptions, reproduce_command
from clsbench.core.plan import Cell, RunPlan, StopRule
from clsbench.core.vocab import Status
from clsbench.engine.incremental import IncrementalRun
from clsbench.engine.planning import plan_run
from clsbench.errors import InvalidInputError
from clsbench.report.table import fmt_rate
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement, data_label
from clsbench.system.machine import resolve_device, run_facts

#: A real pipeline reaching less than this fraction of the synthetic throughput leaves the GPU waiting for data.
#: The issue's goal for a good pipeline ("at least 90% of synthetic") is the same line.
INPUT_BOUND_RATIO = 0.9
#: GPU idle share between steps (events; data-wait share on a CPU) above which a setting is input-bound anyway.
IDLE_LIMIT = 0.10
DIAGNOSE_FORMAT = 1
#: A part of the step time worth a sentence in the explanation: more than this share of the synthetic step.
EXPLAIN_SHARE = 0.02
#: A stage thread that used its CPU for less than this share of its work time while training mostly waited (for the
#: GIL, the GPU or the disk) rather than computing on the host.
WAITING_SHARE = 0.5
#: A setting that spent more than this share of its time on the first batch of epochs gets a note.
EPOCH_START_NOTE = 0.02

#: Stop rules of a diagnose measurement (one setting, one repeat by default): long enough for a pipeline to show its
#: steady pace (its prepared-ahead batches are drained before timing), short enough to sweep a dozen settings in a
#: few minutes. ``quick`` is for smoke tests and CI.
GPU_RULE = StopRule(warmup=3, min_iterations=5, min_seconds=3.0, warmup_seconds=0.5, max_seconds=60.0)
CPU_RULE = StopRule(warmup=2, min_iterations=5, min_seconds=1.0, max_seconds=30.0)
GPU_QUICK_RULE = StopRule(warmup=2, min_iterations=3, min_seconds=1.0, warmup_seconds=0.5, max_seconds=30.0)
#: Each setting is measured once by default: diagnose compares settings far apart, and runs many of them.
DIAGNOSE_OPTIONS = MeasureOptions(repeats=1)
CPU_QUICK_RULE = StopRule(warmup=1, min_iterations=2, min_seconds=0.2, max_seconds=10.0)


def sweep_workers(cpu_count: int | None) -> list[int]:
    """0, then 2, 4, 8, ... below the CPU count, then the CPU count itself: 16 -> 0, 2, 4, 8, 16; 12 -> 0, 2, 4,
    8, 12; 2 -> 0, 2."""
    cpus = max(1, cpu_count or 1)
    out = [0]
    n = 2
    while n < cpus:
        out.append(n)
        n *= 2
    out.append(cpus)
    return sorted(set(out))


def parse_workers(text: str | Sequence[int]) -> list[int]:
    """``"0,4,8"`` -> [0, 4, 8] (sorted, distinct)."""
    parts = [p.strip() for p in text.split(",")] if isinstance(text, str) else list(text)
    out = []
    for part in parts:
        try:
            value = int(part)
        except (TypeError, ValueError):
            raise InvalidInputError(f"worker count {part!r} is not a whole number",
                                    "e.g. --num-workers 0,4,8") from None
        if value < 0:
            raise InvalidInputError(f"worker count {value} is negative", "e.g. --num-workers 0,4,8")
        out.append(value)
    if not out:
        raise InvalidInputError("the worker list is empty", "e.g. --num-workers 0,4,8")
    return sorted(set(out))


def parse_pipelines(text: str | Sequence[str]) -> list[str]:
    """Registered pipeline names from ``"cpu,gpu"`` or a sequence, without repeats; bad input is one error line."""
    from clsbench.data.base import PIPELINES

    names = [p.strip() for p in text.split(",") if p.strip()] if isinstance(text, str) else list(text)
    if not names:
        raise InvalidInputError("the pipeline list is empty", "e.g. --pipeline cpu,gpu")
    for name in names:
        PIPELINES.get(name)
    return list(dict.fromkeys(names))


def with_gpu_decoders(settings: Sequence[DataSettings], decoders: Sequence[str] | None) -> list[DataSettings]:
    """Each gpu-pipeline setting once per decoder named (``--gpu-decode nvjpeg,split``; the default decoder is stored
    as None, as without the option); the others as they are. Unknown names and a list without the gpu pipeline to
    apply to are one error line each."""
    from clsbench.data.base import DECODERS, DEFAULT_DECODER

    if not decoders:
        return list(settings)
    names = list(dict.fromkeys(d.strip() for d in decoders if d.strip()))
    if not names:
        raise InvalidInputError("the gpu decoder list is empty", "e.g. --gpu-decode nvjpeg,split")
    for name in names:
        DECODERS.get(name)
    if not any(s.pipeline == "gpu" for s in settings):
        raise InvalidInputError("--gpu-decode applies to the gpu pipeline, which this diagnosis does not try",
                                "add gpu to --pipeline, or drop --gpu-decode")
    out: list[DataSettings] = []
    for setting in settings:
        if setting.pipeline != "gpu":
            out.append(setting)
            continue
        out += [dataclasses.replace(setting, decoder=None if name == DEFAULT_DECODER else name) for name in names]
    return out


def default_setting(directory: str, source: str) -> DataSettings:
    """PyTorch's DataLoader defaults: no workers, no pinning (the cpu pipeline)."""
    return DataSettings(directory=directory, source=source, pipeline="cpu")


def candidate_settings(base: DataSettings, device: str, workers: Sequence[int],
                       pipelines: Sequence[str] | None) -> list[DataSettings]:
    """Every setting to measure: PyTorch's default first, then what each pipeline asked for proposes
    (:meth:`clsbench.data.base.Pipeline.candidates`), in the pipelines' order; None asks every pipeline."""
    from clsbench.data.base import ordered_pipelines

    out = [dataclasses.replace(base, pipeline="cpu", num_workers=0, pin_memory=False, persistent_workers=False)]
    for pipeline in ordered_pipelines(pipelines):
        out += pipeline.candidates(base, device, workers)
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class DiagnoseResult:
    """What :func:`diagnose` returns: the result (as saved), its analysis, and the dataset's warnings."""

    result: BenchmarkResult
    analysis: dict[str, Any]
    path: Path | None = None
    dataset_warnings: tuple[str, ...] = ()


def diagnose(
    model: str,
    data_dir: str | os.PathLike[str],
    *,
    mode: str = "fp32",
    batch_size: int | None = None,
    device: str = "auto",
    source: str = "folder",
    workers: Sequence[int] | None = None,
    pipelines: Sequence[str] | None = None,
    quick: bool = False,
    options: MeasureOptions = DIAGNOSE_OPTIONS,
    execution: Execution = Execution(),
    data_timeout_s: float | None = None,
    output: str | os.PathLike[str] | None = None,
    warn: Callable[[str], None] | None = None,
    gpu_decoders: Sequence[str] | None = None,
) -> DiagnoseResult:
    """Measure the synthetic ceiling and the pipeline settings (module docstring); save one result file.

    Args:
        model, mode, batch_size, device: as for ``clsbench run`` (the batch size defaults to run's train default).
        data_dir: the dataset (ImageFolder layout).
        source: ``folder`` or ``memory`` for every setting (dali always reads the folder).
        workers: the ``num_workers`` values to sweep (default :func:`sweep_workers` of the CPU count; with
            ``quick``, 0 and the CPU count).
        pipelines: which pipelines to try besides the default.
        quick: short stop rules (smoke tests, CI).
        options: what each setting's measurement does (``repeats`` defaults to 1 here); its warmup, iterations,
            min_time and max_time override the diagnose stop rule (:data:`GPU_RULE`...).
        data_timeout_s: seconds one batch may take (default :data:`clsbench.core.data_settings.DEFAULT_DATA_TIMEOUT_S`).
        output: the result file (never overwritten); None keeps it in memory.
        execution: isolation, clock, progress and the environment to record, as for :func:`clsbench.api.run`
            (overlapped preparation and the GPU probe are never used here).
        warn: called with each warning about the dataset (files skipped...) before anything is measured.
        gpu_decoders: the gpu pipeline's decoders to compare (:func:`with_gpu_decoders`; default: its own).

    Raises:
        InvalidInputError: bad input (unknown model or mode, unusable dataset, bad lists...).
        ResultFileError: ``output`` exists or cannot be written.
    """
    from clsbench.core.suites import get_suite
    from clsbench.data.plan import prepare_data_settings
    from clsbench.modes import parse_mode

    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    resolved = resolve_device(device)
    from clsbench.data.base import ordered_pipelines

    chosen = parse_pipelines(pipelines) if pipelines is not None else [p.name for p in ordered_pipelines()]
    batch = batch_size or get_suite("seed").batch_sizes["train"]
    cpus = os.cpu_count() or 1
    sizes = parse_workers(workers) if workers is not None else (
        sorted({0, cpus}) if quick else sweep_workers(cpus))
    base = DataSettings(directory=str(data_dir), source=source, pipeline="cpu")
    if data_timeout_s is not None:
        base = dataclasses.replace(base, timeout_s=data_timeout_s)
    base, index = prepare_data_settings(base, [batch])  # bad input fails here, before anything runs
    for line in index.warnings():
        if warn is not None:
            warn(line)
    on_gpu = resolved.startswith("cuda")
    rule = (GPU_QUICK_RULE if quick else GPU_RULE) if on_gpu else (CPU_QUICK_RULE if quick else CPU_RULE)
    rule = rule.with_overrides(**options.stop_overrides())
    plan = plan_run(models=[model], workloads=["train"], modes=[mode], batch_sizes=[batch], device=resolved,
                    options=options, execution=dataclasses.replace(execution, overlap=False),
                    environment=execution.env)
    plan = dataclasses.replace(plan, stop_rules={"train": rule})
    plan.validate()
    synthetic = plan.cells[0]
    settings = with_gpu_decoders(candidate_settings(base, resolved, sizes, chosen), gpu_decoders)
    cells = [synthetic] + [dataclasses.replace(synthetic, data=s) for s in settings]
    facts: dict[str, Any] = {
        "format": DIAGNOSE_FORMAT,
        "model": model,
        "workload": "train",
        "mode": parse_mode(mode).name,
        "batch_size": batch,
        "device": resolved,
        "input_size": options.input_size,
        "directory": base.directory,
        "source": source,
        "dataset": index.facts(limit=20),
        "workers": sizes,
        "pin_memory": [False, True] if on_gpu else [False],
        "pipelines": chosen,
        "quick": quick,
        "cpu_count": cpus,
        "default": default_setting(base.directory, source).label(),
        "rules": {"input_bound_ratio": INPUT_BOUND_RATIO, "idle_limit": IDLE_LIMIT},
    }
    environment = run_facts(resolved, execution.env, probe=False)
    run = IncrementalRun(plan, path, environment=environment, key="diagnose", facts=facts, execution=execution)
    run.measure(cells)
    return DiagnoseResult(result=run.result, analysis=analyze_diagnose(run.result), path=path,
                          dataset_warnings=tuple(index.warnings()))


# ------------------------------------------------------------------------------------------- analysis (pure)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _row(m: Measurement, ceiling: float | None, default_label: str | None) -> dict[str, Any]:
    s = m.summary or {}
    d = s.get("data") or {}
    rate = _number(s.get("throughput_img_s")) if m.status == Status.OK else None
    label = data_label(m.data) if m.data is not None else None
    return {
        "label": label or "synthetic",
        "data": m.data,
        "pipeline": (m.data or {}).get("pipeline"),
        "status": m.status,
        "reason": m.reason,
        "detail": m.detail,
        "throughput_img_s": rate,
        "ratio_to_synthetic": rate / ceiling if rate is not None and ceiling else None,
        "data_wait_fraction": _number(d.get("data_wait_fraction")),
        "copy_fraction": _number(d.get("copy_fraction")),
        "epoch_start_wait_fraction": _number(d.get("epoch_start_wait_fraction")),
        "idle_fraction": _number(d.get("idle_fraction")),
        "idle_method": d.get("idle_method"),
        "step_ms_mean": _number(d.get("step_ms_mean")),
        "data_startup_s": _number(d.get("data_startup_s")),
        "decode_failures_n": d.get("decode_failures_n") or 0,
        "stages": d.get("stages"),
        "running": d.get("running"),
        "spread_pct": _number(s.get("spread_pct")),
        "is_default": label is not None and label == default_label,
        "cell": Cell.of(m),
    }


def classify(row: dict[str, Any] | None, ceiling_bound_by: str | None) -> str | None:
    """The verdict for one setting (module docstring), or None when it has no figure."""
    if row is None or row.get("ratio_to_synthetic") is None:
        return None
    idle = row.get("idle_fraction")
    if row["ratio_to_synthetic"] < INPUT_BOUND_RATIO or (idle is not None and idle > IDLE_LIMIT):
        return "input-bound"
    if ceiling_bound_by == "launch":
        return "launch-bound"
    return "compute-bound"


def pipelines_feeding(rows: list[dict[str, Any]], ceiling_bound_by: str | None) -> list[dict[str, Any]]:
    """Per pipeline that ran (in the order of the rows): its best setting, that setting's share of the synthetic
    ceiling, and whether it keeps the ceiling fed (its verdict is not input-bound, :func:`classify`)."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = row.get("pipeline")
        if name is None or row.get("ratio_to_synthetic") is None:
            continue
        if name not in best or row["throughput_img_s"] > best[name]["throughput_img_s"]:
            best[name] = row
    return [{"pipeline": name, "label": row["label"], "ratio_to_synthetic": row["ratio_to_synthetic"],
             "keeps_fed": classify(row, ceiling_bound_by) != "input-bound"} for name, row in best.items()]


def time_split(row: dict[str, Any] | None, ceiling: float | None, batch_size: int | None) -> dict[str, Any] | None:
    """Where one setting's step time goes against the synthetic step, in ms per step (None without the figures).

    ``iteration_ms`` = batch / img/s, ``synthetic_ms`` the same for the ceiling, ``extra_ms`` their difference.
    With CUDA-event timing it splits into ``waiting_ms`` (iteration minus the step's own event time: the GPU had no
    step to run, waiting for a batch or its copy) and ``slower_step_ms`` (the step's event time minus the synthetic
    step: the step itself ran slower, e.g. because the pipeline's own GPU work shared the device).
    """
    if row is None or not row.get("throughput_img_s") or not ceiling or not batch_size:
        return None
    iteration = 1000.0 * batch_size / row["throughput_img_s"]
    synthetic = 1000.0 * batch_size / ceiling
    out: dict[str, Any] = {"iteration_ms": iteration, "synthetic_ms": synthetic, "extra_ms": iteration - synthetic,
                           "waiting_ms": None, "slower_step_ms": None}
    if row.get("idle_method") == "cuda_events" and row.get("step_ms_mean") is not None:
        out["waiting_ms"] = max(0.0, iteration - row["step_ms_mean"])
        out["slower_step_ms"] = row["step_ms_mean"] - synthetic
    return out


def _without_capture(mode: str) -> str:
    """``mode`` without ``+cudagraph``, in the canonical spelling of :func:`clsbench.modes.parse_mode` (no modifier
    needs ``+cudagraph``, so what is left is a mode too)."""
    from clsbench.modes import parse_mode

    return "+".join(c.name for c in parse_mode(mode).components if c.name != "cudagraph")


#: Decoders (``--gpu-decode``) that send a batch's images, or a share of them, through nvJPEG; None: the default.
NVJPEG_DECODERS = (None, "nvjpeg", "split")


def explain(best: dict[str, Any], rows: list[dict[str, Any]], split: dict[str, Any] | None, ceiling: float,
            cpu_count: int | None, *, on_gpu: bool = True, mode: str | None = None) -> list[str]:
    """For an input-bound best setting: where its time goes and what would close the gap, in sentences (the gpu
    pipeline is proposed only where there is a GPU; for a ``mode`` captured as a CUDA graph that waits for nvJPEG,
    the same mode launched from Python)."""
    if split is None:
        return []
    lines = [f"{best['label']} takes {split['iteration_ms']:.1f} ms per step against {split['synthetic_ms']:.1f} ms "
             f"on synthetic data"]
    waiting, slower = split["waiting_ms"], split["slower_step_ms"]
    if waiting is not None and slower is not None:
        lines[0] += (f": the GPU waits {waiting:.1f} ms of it for data, and the step itself runs {slower:.1f} ms "
                     "slower")
    if best.get("pipeline") == "gpu":
        worth = EXPLAIN_SHARE * split["synthetic_ms"]
        if slower is not None and slower > worth:
            # torchvision already decodes baseline JPEGs on the hardware JPEG engines of GPUs that have them, so a
            # different decoder is not the advice. Measured on the H200 (docs/methodology/data.md 16.4.3): the compiled
            # ResNet-50 step ran 28.5 ms slower beside the pipeline, and 2.2 ms slower captured as a CUDA graph, so
            # the interpreter, not the GPU, took most of it. Capture is not the advice either: the captured step
            # starves nvJPEG of the GPU, and the launched one was fed better end to end
            # (docs/methodology/data.md 16.4.4).
            lines.append("the step itself runs slower beside the gpu pipeline: its kernel launches share the training "
                         "process's Python interpreter (the GIL) with the pipeline's threads, and the GPU with their "
                         "decode and augment kernels: a cheaper augmentation (--gpu-augment; the stages below time "
                         "each one alone) or smaller stored images (decoding grows with pixels) take less GPU time")
        if waiting is not None and waiting > worth:
            lines.append("its read, decode and augment threads do not keep up while training: they share the Python "
                         "interpreter with each other and with the training loop (the table of the stages while "
                         "training names the busiest and how much of its time it waited); the memory source "
                         "(--data-source memory) takes file reading out of it where the images fit in RAM")
            if mode and (best.get("data") or {}).get("decoder") in NVJPEG_DECODERS:
                from clsbench.modes import parse_mode

                if parse_mode(mode).captured:
                    # H200, ResNet-50, batch 256 (docs/methodology/data.md 16.4.4; benchmarks/results/h200/
                    # pipeline-levers-resnet50-20261202T093108Z and -20261202T111607Z): a batch's decode took 452 ms
                    # beside a graph replaying back to back, 12.6-16.3 ms alone, 20.3 ms beside the launched step.
                    lines.append("the captured step holds back the decoder's many small GPU round trips (nvJPEG: "
                                 "about 250 per batch of 256), so they pass only while the step waits; the same mode "
                                 f"without +cudagraph ({_without_capture(mode)}), its step launched from Python, fed "
                                 "better on an H200 (ResNet-50: 5,383 img/s, 80% of the captured synthetic, against "
                                 "4,509 captured, both over the memory source)")
        return lines
    copy, wait = best.get("copy_fraction") or 0.0, best.get("data_wait_fraction") or 0.0
    if best.get("pipeline") == "cpu":
        if copy >= wait and (best.get("data") or {}).get("normalize", "worker") == "worker":
            lines.append(f"most of the wait is the copy of float32 batches to the device ({100 * copy:.0f}% of the "
                         "time): --normalize-on device moves uint8 batches, a quarter of the bytes")
        per_worker = [r["throughput_img_s"] / r["data"]["num_workers"] for r in rows
                      if r.get("pipeline") == "cpu" and r.get("throughput_img_s") and r["data"].get("num_workers")]
        if per_worker and wait > copy:
            rate = max(per_worker)
            cores = f" (this machine has {cpu_count} CPUs)" if cpu_count else ""
            lines.append(f"the workers decode about {rate:,.0f} images/s each at best; {fmt_rate(ceiling)} img/s "
                         f"needs about {math.ceil(ceiling / rate)} such workers, each with a core of its own"
                         f"{cores}" + (", or the gpu pipeline" if on_gpu else ""))
    return lines


def analyze_diagnose(result: BenchmarkResult) -> dict[str, Any]:
    """Rows, verdicts, the best setting, its gain over the default and the command, from the file alone."""
    facts = result.settings.get("diagnose") or {}
    measurements = list(result.measurements)
    synthetic = next((m for m in measurements if m.data is None), None)
    ceiling = None
    ceiling_bound = None
    if synthetic is not None and synthetic.status == Status.OK:
        ceiling = _number(synthetic.summary.get("throughput_img_s"))
        ceiling_bound = (synthetic.summary.get("efficiency") or {}).get("bound_by")
    default_label = facts.get("default")
    rows = [_row(m, ceiling, default_label) for m in measurements]
    real = [r for r in rows if r["data"] is not None]
    ok = [r for r in real if r["throughput_img_s"] is not None]
    best = max(ok, key=lambda r: r["throughput_img_s"], default=None)
    default = next((r for r in real if r["is_default"]), None)
    out: dict[str, Any] = {
        "model": facts.get("model") or (synthetic.model if synthetic else None),
        "mode": facts.get("mode") or (synthetic.mode if synthetic else None),
        "batch_size": facts.get("batch_size") or (synthetic.batch_size if synthetic else None),
        "device": facts.get("device") or (synthetic.device if synthetic else None),
        "directory": facts.get("directory"),
        "source": facts.get("source"),
        "dataset": facts.get("dataset") or {},
        "quick": facts.get("quick"),
        "rules": facts.get("rules") or {"input_bound_ratio": INPUT_BOUND_RATIO, "idle_limit": IDLE_LIMIT},
        "ceiling_img_s": ceiling,
        "ceiling_status": synthetic.status if synthetic else None,
        "ceiling_reason": synthetic.reason if synthetic else None,
        "ceiling_bound_by": ceiling_bound,
        "rows": [{k: v for k, v in r.items() if k != "cell"} for r in rows],
        "best": None,
        "default": None,
        "verdict": None,
        "default_verdict": classify(default, ceiling_bound),
        "gain_over_default": None,
        "command": None,
        "time_split": None,
        "explanation": [],
        "pipelines": pipelines_feeding(real, ceiling_bound) if ceiling else [],
    }
    if default is not None:
        out["default"] = {k: v for k, v in default.items() if k != "cell"}
    if best is not None:
        out["best"] = {k: v for k, v in best.items() if k != "cell"}
        out["verdict"] = classify(best, ceiling_bound)
        out["time_split"] = time_split(best, ceiling, out["batch_size"])
        if out["verdict"] == "input-bound" and ceiling:
            cpu = result.environment.get("cpu") or {}
            out["explanation"] = explain(best, real, out["time_split"], ceiling,
                                         cpu.get("allowed_cpus_count") or cpu.get("logical_cores"),
                                         on_gpu=str(facts.get("device") or "").startswith("cuda"),
                                         mode=out["mode"])
        if default is not None and default["throughput_img_s"]:
            out["gain_over_default"] = best["throughput_img_s"] / default["throughput_img_s"]
        try:
            plan = RunPlan.from_dict(result.settings)
            out["command"] = reproduce_command(plan, best["cell"])
        except (KeyError, TypeError, ValueError):
            out["command"] = None
    return out


@dataclass(frozen=True)
class DiagnoseSettings:
    """What one diagnosis measures (``clsbench diagnose``; :func:`clsbench.api.diagnose` takes it), as
    :func:`diagnose`'s arguments of the same names: the model and dataset, the training cell, the DataLoader worker
    counts and pipelines to try (None: the defaults), the gpu pipeline's decoders, short windows, the batch timeout."""

    model: str
    data_dir: str
    mode: str = "fp32"
    batch_size: int | None = None
    device: str = "auto"
    source: str = "folder"
    workers: Sequence[int] | None = None
    pipelines: Sequence[str] | None = None
    quick: bool = False
    data_timeout_s: float | None = None
    gpu_decoders: Sequence[str] | None = None
