"""The public library API. Everything the CLI does is one call here; the CLI only parses and prints.

Each command has one function that does its work (``run``, ``serve``, ``soak``, ``tune``, ``compare``...), taking
the command's settings object and returning what the command prints from; :data:`HELPERS` lists the functions that
only check or resolve input, read the machine, render results as text or write a printed text (the CLI calls
those around the one work call); :data:`CONTINUATIONS` the work functions that continue another's (``--resume``).

The functions live where they belong (planning and running in :mod:`clsbench.engine`, the machine's facts in
:mod:`clsbench.system.machine`, files in :mod:`clsbench.results`); this module gathers the ones a user calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clsbench.api.helpers import (
    check_compare,
    check_data_settings,
    check_output,
    check_profile_directory,
    check_result_output,
    check_serve_names,
    check_store,
    communication_env,
    dataset_warnings,
    diagnose_text,
    history_index_path,
    index_result,
    launch_commands,
    literal_header_names,
    load_result,
    make_clock,
    multicast_note,
    nsys_path,
    nsys_text,
    parse_batch_sizes,
    parse_budget,
    parse_duration,
    parse_list,
    parse_pipelines,
    parse_size,
    parse_workers,
    plan_scale,
    profile_section,
    profile_text,
    require_loadgen,
    result_table,
    result_warnings,
    resume_counts,
    scale_text,
    select_inputs,
    select_text,
    serve_step_facts,
    serve_text,
    soak_text,
    sweep_text,
    target_model,
    tune_text,
    validate_knee_fraction,
    window_facts,
    write_text,
)
from clsbench.core import suites as suites_module
from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import ProfileSettings, RunPlan
from clsbench.core.suites import SUITE_FILE_EXAMPLE, Suite
from clsbench.data.make import MakeSpec
from clsbench.deploy import TritonExportSettings
from clsbench.engine import planning
from clsbench.engine.planning import data_preflight
from clsbench.engine.runner import RunInterrupted, resume, run
from clsbench.errors import InvalidInputError
from clsbench.procedures.diagnose import DIAGNOSE_OPTIONS, DiagnoseSettings
from clsbench.procedures.profile import (
    NSYS_HINT,
    NSYS_MISSING,
    NSYS_REPORT,
    RESULT_FILE,
    SUMMARY_FILE,
    CellProfileSettings,
)
from clsbench.procedures.scale.plan import SCALE_OPTIONS
from clsbench.procedures.select import SelectSettings
from clsbench.procedures.serve import ServeInterrupted
from clsbench.procedures.soak import SoakSettings
from clsbench.procedures.sweep import SweepSettings
from clsbench.procedures.tune import TUNE_OPTIONS, NoConfigurationError, TuneInterrupted, TuneSettings, plan_tune
from clsbench.results import io as result_io
from clsbench.results.io import DEFAULT_RESULTS_DIR, default_output_path
from clsbench.results.schema import BenchmarkResult
from clsbench.results.store import DB_ENV_VAR, DEFAULT_HISTORY_LIMIT, IMPORTED, RUN_ID_LENGTH, UPDATED
from clsbench.serving.analysis import QPS_WORKLOADS
from clsbench.serving.config import (
    DEFAULT_INSTANCES,
    MLPERF_MIN_DURATION_S,
    QUICK_MIN_DURATION_S,
    SHARED_OPTIONS,
    TARGET_MAX_IN_FLIGHT,
    ServeSettings,
)
from clsbench.system.machine import bf16_supported, environment, preflight_warnings, resolve_device

__all__ = [
    "BenchmarkResult",
    "CONTINUATIONS",
    "CellProfileSettings",
    "CompareOutcome",
    "DB_ENV_VAR",
    "DEFAULT_INSTANCES",
    "DEFAULT_HISTORY_LIMIT",
    "DEFAULT_RESULTS_DIR",
    "DIAGNOSE_OPTIONS",
    "DataSettings",
    "DatasetCheck",
    "DiagnoseSettings",
    "Execution",
    "HELPERS",
    "IMPORTED",
    "MLPERF_MIN_DURATION_S",
    "MakeSpec",
    "MeasureOptions",
    "NSYS_HINT",
    "NSYS_MISSING",
    "NSYS_REPORT",
    "NoConfigurationError",
    "ProfileSettings",
    "QPS_WORKLOADS",
    "QUICK_MIN_DURATION_S",
    "RESULT_FILE",
    "RUN_ID_LENGTH",
    "RunInterrupted",
    "RunPlan",
    "SCALE_OPTIONS",
    "SHARED_OPTIONS",
    "SUITE_FILE_EXAMPLE",
    "SUMMARY_FILE",
    "ServeInterrupted",
    "ServeSettings",
    "SelectSettings",
    "SoakSettings",
    "Suite",
    "SweepSettings",
    "TARGET_MAX_IN_FLIGHT",
    "TUNE_OPTIONS",
    "TritonExportSettings",
    "TuneInterrupted",
    "TuneSettings",
    "UPDATED",
    "bf16_supported",
    "check_compare",
    "check_data_settings",
    "check_dataset",
    "check_output",
    "check_profile_directory",
    "check_result_output",
    "check_serve_names",
    "check_store",
    "communication_env",
    "compare",
    "data_preflight",
    "dataset_warnings",
    "default_output_path",
    "describe_environment",
    "diagnose",
    "diagnose_text",
    "environment",
    "export_triton_repo",
    "get_suite",
    "history",
    "history_index_path",
    "import_results",
    "store_migrate",
    "store_pull",
    "store_push",
    "index_result",
    "launch_commands",
    "literal_header_names",
    "list_models",
    "load",
    "load_result",
    "make_clock",
    "make_dataset",
    "models",
    "multicast_note",
    "nsys_path",
    "nsys_text",
    "parse_batch_sizes",
    "parse_budget",
    "parse_duration",
    "parse_list",
    "parse_pipelines",
    "parse_size",
    "parse_workers",
    "plan_run",
    "plan_scale",
    "plan_tune",
    "preflight_warnings",
    "probe",
    "profile",
    "profile_section",
    "profile_text",
    "record_nsys",
    "report",
    "require_loadgen",
    "resolve_device",
    "result_table",
    "result_warnings",
    "resume",
    "resume_counts",
    "resume_tune",
    "run",
    "scale",
    "scale_text",
    "serve",
    "serve_step_facts",
    "serve_text",
    "show",
    "soak",
    "select",
    "select_inputs",
    "select_text",
    "soak_text",
    "split_list",
    "suites",
    "sweep",
    "sweep_text",
    "target_model",
    "tune",
    "tune_text",
    "validate_knee_fraction",
    "window_facts",
    "write_text",
]


def plan_run(*, suite: str | None = None, **kwargs: Any) -> RunPlan:
    """Build the cross product to measure: :func:`clsbench.engine.planning.plan_run`, whose keyword arguments
    this takes, with suite files.

    ``suite`` names a suite (``seed``, ``quick``) or a suite file (``my.yaml``; see :func:`get_suite`), whose names
    are checked against the registries before anything is planned. The plan records a file's suite by its name and
    the file's absolute path (``edge (/home/me/edge.yaml)``): the file is not needed again, and ``resume`` reads
    the cells from the result file.
    """
    if suite is None or not suites_module.is_suite_file(suite):
        return planning.plan_run(suite=suite, **kwargs)
    options = kwargs.get("options") or MeasureOptions()
    chosen = get_suite(suite, input_size=options.input_size)
    plan = planning.plan_run(suite=chosen.source, **kwargs)
    return dataclasses.replace(plan, suite=chosen.label)


def profile(settings: CellProfileSettings, output: str | Path, *, options: MeasureOptions = MeasureOptions(),
            execution: Execution = Execution()) -> Any:
    """``clsbench profile``: measure one cell and profile it after its timed region into the new directory
    ``output``: trace, summary, result file (:func:`clsbench.procedures.profile.profile`; returns its
    ``ProfileOutcome``). ``run --profile`` is :func:`plan_run` with ``profile=ProfileSettings()``."""
    from clsbench.procedures.profile import profile as profile_cell

    return profile_cell(model=settings.model, workload=settings.workload, mode=settings.mode,
                        batch_size=settings.batch_size, device=settings.device, output=output, options=options,
                        backend=settings.backend, data=settings.data, execution=execution, steps=settings.steps,
                        warmup=settings.warmup)


def tune(settings: Any, *, output: str | Path | None = None, execution: Execution = Execution(),
         announce: Any = None, costs_from: str | Path | None = None) -> Any:
    """Search modes x batch sizes x backends for the fastest configuration within the limits and the budget
    (``clsbench tune``). ``settings`` is a :class:`clsbench.procedures.tune.TuneSettings`, checked when it was built;
    ``output`` the result file (never overwritten); ``announce`` gets each line of the up-front plan; ``costs_from``
    an earlier tune file of this machine whose costs price the plan. Returns the procedure's ``TuneResult``."""
    from clsbench.procedures.tune import tune as run_tune

    return run_tune(settings, output=output, execution=execution, announce=announce, costs_from=costs_from)


def resume_tune(path: str | Path, *, budget: float | str | None = None, execution: Execution = Execution(),
                announce: Any = None) -> Any:
    """Continue the tune search a result file holds (``clsbench tune --resume FILE``), its settings read from the
    file; ``budget`` is the new total. Returns :func:`clsbench.procedures.tune.resume_tune`'s ``TuneResult``."""
    from clsbench.procedures.tune import resume_tune as resume_search

    return resume_search(path, budget=budget, execution=execution, announce=announce)


def get_suite(name: str, *, input_size: int | None = None) -> Suite:
    """The suite ``run --suite NAME`` measures: a named one, or a suite file (a name ending in .yaml or .yml, or an
    existing file; the format is :data:`clsbench.core.suites.SUITE_FILE_EXAMPLE`).

    A file's contents are checked as ``run`` checks the same names given as options: each workload is registered,
    each mode parses and is written as clsbench writes it, each model is one a source knows (a custom builder is
    built on the meta device at ``input_size``).

    Raises:
        InvalidInputError: one line naming the file (see :func:`clsbench.core.suites.load_suite_file` for the
            structural errors).
    """
    from clsbench.modes import parse_mode
    from clsbench.workloads import WORKLOADS

    suite = suites_module.get_suite(name)
    if suite.source is None:
        return suite
    try:
        for workload in suite.batch_sizes:
            WORKLOADS.get(workload)  # an unknown name is one error line with the closest names
        for mode in suite.modes:
            canonical = parse_mode(mode).name
            if canonical != mode:
                raise InvalidInputError(f"mode {mode!r} is written {canonical!r}", f"write {canonical} in modes")
        for model in suite.models:
            planning.check_model(model, input_size)
    except InvalidInputError as exc:
        raise InvalidInputError(f"suite file {name}: {exc.message}", exc.hint) from None
    return suite


def load(path: str | Path) -> BenchmarkResult:
    """Read a result file (validated; ResultFileError on any problem)."""
    return result_io.load(path)


def list_models(pattern: str = "*") -> list[str]:
    """The model names matching a wildcard pattern (``resnet*``, ``timm/vit_*``), sorted."""
    from clsbench.models import list_models as models_matching

    return models_matching(pattern)


def split_list(values: Iterable[str], option: str | None = None) -> list[str]:
    """Flatten repeated and comma-separated option values: ("a,b", "c") -> ["a", "b", "c"].

    Raises:
        InvalidInputError: with ``option`` named, an empty value (``--model ''``, ``--mode a,,b``): an unset shell
            variable must not silently mean "the suite's default".
    """
    out: list[str] = []
    for value in values:
        parts = [part.strip() for part in value.split(",")]
        if option is not None and not all(parts):
            raise InvalidInputError(f"{option} has an empty value ({value!r})",
                                    f"give a name, e.g. {option} resnet50, or leave {option} out")
        out.extend(part for part in parts if part)
    return out


def export_triton_repo(settings: Any, *, progress: Any = None) -> Any:
    """Write a measured model into a Triton Inference Server model repository (``clsbench export --triton-repo``):
    the artifact of an ONNX Runtime or TorchScript backend with a dynamic batch dimension, checked against fp32
    eager at two batch sizes, its ``config.pbtxt`` (the dynamic batcher and instances, from the options or from the
    best Server answer of a serve result) and a README, in ``DIR/<name>`` (never overwritten).

    ``settings`` is a :class:`clsbench.deploy.TritonExportSettings`; ``progress`` is called with a line before each
    slow step. Returns :func:`clsbench.deploy.export_triton_repo`'s ``RepoOutcome``.
    """
    from clsbench.deploy import export_triton_repo as write_repository

    return write_repository(settings, progress=progress)


# ----------------------------------------------------------------------------------------------------------
# One function per command. Each takes the command's settings object (or, for commands that only read files, the
# files), does the command's work and returns what the command prints from. The helpers after them only check or
# resolve input, read the machine without changing it, render a result as text, or write a printed text to a file.


@dataclass(frozen=True)
class CompareOutcome:
    """What ``clsbench compare`` prints: ``warnings`` (stderr, before the text), ``text`` (the comparison in the
    chosen format), ``notes`` (stderr, after it: measurements the regression gate cannot count), and the gate's
    findings when a threshold was given: ``slowdowns``, ``undecided`` (the lines of each figure too noisy to judge),
    ``passed`` (in words) and ``gate_basis`` (what decided, e.g. ``Welch's t-test, alpha 0.05``)."""

    text: str
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    slowdowns: tuple[str, ...] = ()
    gate_basis: str = ""
    undecided: tuple[tuple[str, ...], ...] = ()
    passed: str = ""


@dataclass(frozen=True)
class DatasetCheck:
    """What ``clsbench data check`` prints: the scan (a :class:`clsbench.data.scan.FolderIndex`) and its seconds,
    and with ``decode`` the images that do not decode (one line each) and the decoding seconds."""

    index: Any
    scan_s: float
    decode_failures: tuple[str, ...] | None = None
    decode_s: float = 0.0


def show(refs: Sequence[str], *, fmt: str = "table", db: str | None = None) -> str:
    """``clsbench show``: the results of result files or run ids as text in a format of
    :data:`clsbench.report.exporters.EXPORTERS` (``table``, ``json``, ``csv``, ``markdown``)."""
    from clsbench.procedures.base import sections
    from clsbench.report.exporters import EXPORTERS

    results = [load_result(ref, db) for ref in refs]
    return EXPORTERS.get(fmt)(results, list(refs), sections)


def models(pattern: str = "*", *, details: bool = False) -> list[tuple[str, str | None, int | None]]:
    """``clsbench models``: (name, source, input size) of each model matching ``pattern``, sorted; the source and
    input size only with ``details`` (None otherwise: resolving a spec can import a model package).

    Raises:
        InvalidInputError: no model matches.
    """
    from clsbench.models import get_model_spec

    names = list_models(pattern)
    if not names:
        raise InvalidInputError(f"no model matches {pattern!r}", "try a wider pattern such as 'resnet*' or '*'")
    if not details:
        return [(name, None, None) for name in names]
    specs = [get_model_spec(name) for name in names]
    return [(name, spec.source, spec.input_size) for name, spec in zip(names, specs, strict=True)]


def suites(files: Sequence[str] = ()) -> list[Suite]:
    """``clsbench suites``: the named suites, or with ``files`` each suite file checked (see :func:`get_suite`)."""
    if files:
        return [get_suite(name) for name in files]
    return list(suites_module.SUITES.values())


def describe_environment(device: str = "auto") -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """``clsbench env``: the environment every result records on this machine, and its (label, value) lines, the
    last of them where the history index is (not part of the recorded environment; a password in a URL redacted)."""
    import os

    from clsbench.results.facts import environment_lines
    from clsbench.system.container_text import container_lines
    from clsbench.system.environment_text import history_index_line

    facts = environment(resolve_device(device))
    index = history_index_line(history_index_path(), DB_ENV_VAR, from_env=bool(os.environ.get(DB_ENV_VAR)))
    return facts, environment_lines(facts) + container_lines(facts.get("container")) + [("history index", index)]


def probe(device: str = "cuda", output: str | Path | None = None) -> dict[str, Any]:
    """``clsbench probe``: this GPU's dense matmul FLOP/s per dtype and device-to-device copy bandwidth, measured in a
    child process; with ``output``, also written there as JSON (never overwritten; checked before measuring).

    Raises:
        DeviceUnavailableError: no usable NVIDIA GPU, or the probe failed.
    """
    import json

    import torch

    from clsbench.errors import DeviceUnavailableError
    from clsbench.system.probe import probe_in_subprocess

    if not torch.cuda.is_available() or not resolve_device(device).startswith("cuda"):
        # The same line however the device was named: the probe is for an NVIDIA GPU and needs one.
        raise DeviceUnavailableError(
            "the probe measures an NVIDIA GPU, and none is usable here",
            "run it where `nvidia-smi` lists a GPU; `clsbench env` shows what this machine has")
    resolved = resolve_device(device)
    if output:
        result_io.check_writable(Path(output))
    facts = probe_in_subprocess(resolved)
    if facts.get("unavailable"):
        raise DeviceUnavailableError(f"probe failed: {facts['unavailable']}")
    if output:
        Path(output).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    return facts


def compare(refs: Sequence[str], *, fmt: str = "table", alpha: float = 0.05, threshold_pct: float | None = None,
            allow_protocol_mix: bool = False, db: str | None = None) -> CompareOutcome:
    """``clsbench compare``: runs (result files or run ids) against the first, in ``fmt`` (table, json, csv,
    markdown); with ``threshold_pct``, the gate of ``--fail-if-slower``: the significant slowdowns beyond it, and
    the figures too noisy to judge against it (the text's verdicts are judged against it too). A procedure that
    compares its own way (serve: each scenario's answer) does so through :data:`clsbench.procedures.base.PROCEDURES`.

    Raises:
        InvalidInputError: fewer than two runs, ``alpha`` outside (0, 1), runs that cannot be compared.
    """
    from clsbench.analysis.compare import check_protocols, gate, lost_measurements
    from clsbench.analysis.compare import compare as build_comparison
    from clsbench.procedures.base import comparer
    from clsbench.report import export

    check_compare(refs, alpha)
    results = [load_result(ref, db) for ref in refs]
    names = list(refs)
    own_way = comparer(results)
    if own_way is not None:
        warnings = tuple(check_protocols(results, names, allow_mix=allow_protocol_mix))
        own = own_way(results, names, alpha)
        found = [text for text, pct in own.slowdowns if threshold_pct is not None and pct > threshold_pct]
        return CompareOutcome(
            text=export.export_own_comparison(own.text, own.data, own.rows, fmt), warnings=warnings,
            slowdowns=tuple(found),
            gate_basis=f"alpha {alpha:g}; only answers repeated on both sides can be significant")
    comparison = build_comparison(results, names, alpha=alpha, allow_protocol_mix=allow_protocol_mix,
                                  threshold_pct=threshold_pct)
    text = export.export_comparison(comparison, fmt)
    if threshold_pct is None:
        return CompareOutcome(text=text)
    found = gate(comparison)
    return CompareOutcome(text=text, notes=tuple(lost_measurements(comparison)), slowdowns=found.slowdowns,
                          undecided=found.undecided, passed=found.passed, gate_basis=found.basis)


def import_results(files: Iterable[str], *, db: str | None = None) -> list[Any]:
    """``clsbench import``: index result files (or every ``*.json`` of a directory) in the history; one
    :class:`clsbench.results.store.ImportOutcome` per file (a file that fails is reported, not raised)."""
    from clsbench.results import store

    return store.import_files(files, db=db)


def history(*, db: str | None = None, model: str | None = None, gpu: str | None = None, since: str | None = None,
            commit: str | None = None, limit: int = DEFAULT_HISTORY_LIMIT) -> list[dict[str, Any]]:
    """``clsbench history``: indexed runs of every host that wrote to the store, newest first, at most ``limit``
    (see :func:`clsbench.results.store.history`)."""
    from clsbench.results import store

    return store.history(db, model=model, gpu=gpu, since=since, commit=commit, limit=limit)


def store_push(files: Iterable[str], *, db: str | None = None) -> list[Any]:
    """``clsbench store push``: result files into the store, each with its whole JSON (as ``import`` does)."""
    from clsbench.results import store

    return store.import_files(files, db=db)


def store_pull(ref: str, output: str | Path, *, db: str | None = None) -> tuple[str, Path]:
    """``clsbench store pull``: the run ``ref`` from the store's copy into the new file ``output``; (run id,
    path). An existing file is never overwritten."""
    from clsbench.results.store_transfer import pull

    return pull(ref, output, db)


def store_migrate(source: str, destination: str) -> Any:
    """``clsbench store migrate``: every run of one store copied into another, checked by a checksum; a
    :class:`clsbench.results.store_transfer.MigrateOutcome`."""
    from clsbench.results.store_transfer import migrate

    return migrate(source, destination)


def report(refs: Sequence[str], output: str | Path, *, force: bool = False, db: str | None = None) -> int:
    """``clsbench report``: one self-contained HTML report of result files or run ids (from the store ``db``),
    written atomically to ``output`` (an existing file only with ``force``; checked before anything is read).
    Returns the bytes written."""
    from clsbench.report.export import check_output as check_report_output
    from clsbench.report.html import render_report

    path = Path(output)
    check_report_output(path, force=force)
    results = [load_result(name, db) for name in refs]
    return result_io.write_text_atomic(path, render_report(results, list(refs)))


def sweep(settings: SweepSettings, output: str | Path | None = None, *, options: MeasureOptions = MeasureOptions(),
          execution: Execution = Execution()) -> Any:
    """``clsbench sweep``: one model/workload/mode at several batch sizes (:func:`clsbench.procedures.sweep.sweep`);
    returns its ``SweepResult``."""
    from clsbench.procedures.sweep import sweep as sweep_batches

    return sweep_batches(settings.model, settings.workload, settings.mode, settings.device, settings.batch_sizes,
                         output, options=options, execution=execution, knee_fraction=settings.knee_fraction,
                         max_batch=settings.max_batch, backend=settings.backend, no_cache=settings.no_cache,
                         cache_dir=settings.cache_dir)


def diagnose(settings: DiagnoseSettings, output: str | Path | None = None, *, options: MeasureOptions | None = None,
             execution: Execution = Execution(), warn: Callable[[str], None] | None = None) -> Any:
    """``clsbench diagnose``: the synthetic ceiling against the real pipelines' settings
    (:func:`clsbench.procedures.diagnose.diagnose`); returns its ``DiagnoseResult``."""
    from clsbench.procedures.diagnose import diagnose as diagnose_pipelines

    return diagnose_pipelines(settings.model, settings.data_dir, mode=settings.mode, batch_size=settings.batch_size,
                              device=settings.device, source=settings.source, workers=settings.workers,
                              pipelines=settings.pipelines, quick=settings.quick,
                              options=DIAGNOSE_OPTIONS if options is None else options, execution=execution,
                              data_timeout_s=settings.data_timeout_s, output=output,
                              gpu_decoders=settings.gpu_decoders, warn=warn)


def scale(plan: Any, output: str | Path | None = None, *, execution: Execution = Execution()) -> Any:
    """``clsbench scale``: run a :func:`plan_scale` plan (DDP and DataParallel at each GPU count); returns the
    result (written to ``output`` on node 0; None: this node writes nothing)."""
    from clsbench.procedures.scale import run_scale

    return run_scale(plan, output, execution=execution)


def serve(settings: ServeSettings, output: str | Path | None = None, *, execution: Execution = Execution()) -> Any:
    """``clsbench serve``: modes x batching settings x scenarios under LoadGen
    (:func:`clsbench.procedures.serve.serve`); ``execution.progress`` gets each event dict. Returns its
    ``ServeOutcome``; Ctrl-C raises :class:`ServeInterrupted` with what finished."""
    from clsbench.procedures.serve import serve as serve_model

    return serve_model(settings, output, execution=execution)


def soak(settings: SoakSettings, output: str | Path | None = None, *, options: MeasureOptions = MeasureOptions(),
         execution: Execution = Execution()) -> Any:
    """``clsbench soak``: one cell for a long time in windows (:func:`clsbench.procedures.soak.soak`); returns its
    ``SoakOutcome``."""
    from clsbench.procedures.soak import soak as soak_cell

    return soak_cell(settings, output, options=options, execution=execution)


def select(settings: SelectSettings, output: str | Path | None = None) -> Any:
    """``clsbench select``: which card, how many, at what cost, from the results :func:`select_inputs` reads
    (:func:`clsbench.procedures.select.select`); the answer is written to ``output`` (never over a file). Returns
    its ``SelectOutcome``; RequirementNotMetError (exit 2) when no card meets the requirement."""
    from clsbench.procedures.select import select as select_cards

    loaded, skipped = select_inputs(settings.inputs, history_model=settings.model if settings.from_history else None,
                                    db=settings.db)
    return select_cards(settings, loaded, output, skipped=skipped)


def make_dataset(directory: str | Path, spec: MakeSpec, *, jobs: int | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Any:
    """``clsbench data make``: a realistic JPEG dataset in ``directory`` (:func:`clsbench.data.make.make_dataset`);
    ``progress`` is called with (done, total) images. Raises InvalidInputError for ``jobs`` < 1."""
    from clsbench.data.make import make_dataset as write_dataset

    if jobs is not None and jobs < 1:
        raise InvalidInputError(f"--jobs must be >= 1, got {jobs}", "e.g. --jobs 8")
    return write_dataset(directory, spec, jobs=jobs, progress=progress)


def check_dataset(directory: str | Path, *, decode: bool = False, threads: int = 8) -> DatasetCheck:
    """``clsbench data check``: scan a dataset folder (usable images, what is left out and why); with ``decode``,
    also decode every image on the CPU in ``threads`` threads to find damage the scan cannot see."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from clsbench.data.scan import scan_folder

    t0 = time.perf_counter()
    index = scan_folder(directory)
    scan_s = time.perf_counter() - t0
    if not decode:
        return DatasetCheck(index=index, scan_s=scan_s)
    from clsbench.data.pipelines.cpu import decode_rgb
    from clsbench.data.sources.folder import read_file

    def one(i: int) -> str | None:
        try:
            decode_rgb(read_file(index.path(i)))
            return None
        except Exception as exc:  # noqa: BLE001 - reported by name
            return f"{index.files[i]}: {str(exc).strip().splitlines()[0][:120] if str(exc).strip() else exc}"

    t1 = time.perf_counter()
    with ThreadPoolExecutor(max(1, threads)) as pool:
        failed = tuple(f for f in pool.map(one, range(len(index)), chunksize=32) if f)
    return DatasetCheck(index=index, scan_s=scan_s, decode_failures=failed, decode_s=time.perf_counter() - t1)


def record_nsys(outcome: Any) -> int:
    """``clsbench profile --nsys``, after the profile: record the same cell under Nsight Systems; nsys's exit
    status. The one continuation of :func:`profile` (see :data:`CONTINUATIONS`)."""
    from clsbench.procedures.profile import run_nsys

    return run_nsys(outcome.nsys)


#: The public functions that do no command's work (they check or resolve input, read the machine without
#: changing it, render results as text, write a printed text to a file, or index a finished file). Every other
#: public function here does one command's work; ``tests/test_cli_thin.py`` holds each command to exactly one.
HELPERS = frozenset({
    "bf16_supported", "check_compare", "check_data_settings", "check_output", "check_profile_directory",
    "check_result_output", "check_serve_names", "check_store",
    "communication_env", "data_preflight", "dataset_warnings", "default_output_path", "diagnose_text", "environment",
    "get_suite", "history_index_path", "index_result", "launch_commands", "list_models",
    "literal_header_names", "load", "load_result",
    "make_clock", "multicast_note", "nsys_path", "nsys_text", "parse_batch_sizes", "parse_budget", "parse_duration",
    "parse_list", "parse_pipelines", "parse_size", "parse_workers", "plan_run", "plan_scale", "plan_tune",
    "preflight_warnings", "profile_section", "profile_text", "require_loadgen", "resolve_device", "result_table",
    "result_warnings",
    "resume_counts", "select_inputs", "select_text",
    "scale_text", "serve_step_facts", "serve_text", "soak_text", "split_list", "sweep_text", "target_model",
    "tune_text", "validate_knee_fraction", "window_facts", "write_text",
})

#: Work functions that continue another command's work in the same command: ``--resume`` of ``run`` and ``tune``
#: (a branch instead of the work), ``profile --nsys`` (the same cell again, under Nsight Systems). A command may
#: call its work function's continuation besides it, and no other.
CONTINUATIONS = {"resume": "run", "resume_tune": "tune", "record_nsys": "profile"}
