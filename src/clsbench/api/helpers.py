"""The api's helpers: functions that check or resolve input, read the machine without changing it, render results
as text, write a printed text or record a finished file in the history. None of them measures or builds anything;
:data:`clsbench.api.HELPERS` names them, with the helpers defined elsewhere that the api re-exports.
"""


from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.errors import InvalidInputError
from clsbench.results.schema import BenchmarkResult


def check_compare(refs: Sequence[str], alpha: float) -> None:
    """InvalidInputError unless there are two runs or more and ``alpha`` lies in (0, 1)."""
    if len(refs) < 2:
        raise InvalidInputError("compare needs at least two runs", "e.g. clsbench compare baseline.json new.json")
    if not 0.0 < alpha < 1.0:
        raise InvalidInputError(f"--alpha {alpha:g} must lie between 0 and 1", "e.g. --alpha 0.05")


def load_result(ref: str, db: str | None = None) -> BenchmarkResult:
    """A run by result-file path or by run id (``clsbench history``); an existing file wins over a run id, and a
    run whose file is on another machine is read from the store's copy."""
    from clsbench.results.store import load_run

    return load_run(ref, db)


def resume_counts(path: str | Path, *, retry_failed: bool = False) -> tuple[int, int, int] | None:
    """What ``run --resume FILE`` would do, read from the file before anything starts: (cells to measure,
    measurements finished, of them failed), or None for a file ``run --resume`` refuses (:func:`clsbench.resume`
    says why). ResultFileError when the file cannot be read."""
    from clsbench.engine.planning import resume_counts as counts_of
    from clsbench.results import io as result_io

    result = result_io.load(path)
    with result_io.writer_lock(Path(path)):  # a file a live run is writing is not finished: that is the error
        return counts_of(result, retry_failed=retry_failed)


def index_result(path: str | Path, result: BenchmarkResult, db: str | None = None) -> None:
    """Add a finished result file to the history store (``db``, else ``$CLSBENCH_DB``, else the user's data
    directory); StoreError on a problem with the store (the file is untouched)."""
    from clsbench.results import store

    store.index_result(path, result, db)


def history_index_path(db: str | None = None) -> str:
    """Where the history store is (``--db``, else ``$CLSBENCH_DB``, else the user's data directory), as every
    printed line shows it: a path, or a URL with any password as ``***``."""
    from clsbench.results import store

    return store.describe(db)


def check_store(db: str | None = None) -> None:
    """Before any work: StoreError unless ``db`` (else ``$CLSBENCH_DB``) names a store this clsbench can use: a
    path, ``sqlite:///PATH``, or ``postgresql://`` with psycopg installed. Does not connect."""
    from clsbench.results.store_base import BACKENDS, parse_location

    location = parse_location(db)
    BACKENDS.get(location.scheme).check(location)


def check_output(path: str | Path, *, force: bool = False) -> None:
    """Refuse an output file that exists (unless ``force``) or cannot be written, before any work."""
    from clsbench.report import export

    export.check_output(path, force=force)


def check_serve_names(settings: Any) -> None:
    """A serve's settings checked whole before the command announces its plan: ``settings.validate()``, then every
    scenario a registered one and, without a target, the model and modes known (``serve`` checks them again)."""
    from clsbench.scenarios import SCENARIOS

    settings.validate()
    for name in settings.scenarios:
        SCENARIOS.get(name)
    if settings.target is None:
        from clsbench.models import get_model_spec
        from clsbench.modes import parse_mode

        get_model_spec(settings.model)
        for mode in settings.modes:
            parse_mode(mode)


def check_result_output(path: str | Path, exists_hint: str = "choose another --output, or finish it with --resume") \
        -> None:
    """Refuse a result file that exists, is a folder or cannot be written: before a command announces its plan or
    starts anything (the work functions check again, for library callers)."""
    from clsbench.results import io as result_io

    result_io.check_writable(Path(path), exists_hint=exists_hint)


def write_text(path: str | Path, text: str, *, force: bool = False) -> None:
    """Write a command's printed text to ``path`` atomically (an existing file only with ``force``)."""
    from clsbench.report import export

    export.write_text(path, text, force=force)


def make_clock(spec: str) -> Any:
    """The clock of the hidden ``--clock fake:1ms[,2ms...]`` testing hook (ValueError on a bad spec)."""
    from clsbench.measure.clock import make_clock as clock_of

    return clock_of(spec)


def check_data_settings(settings: DataSettings) -> DataSettings:
    """The real-data settings checked against the registries (pipeline, source, augment, decoder); returned."""
    from clsbench.data.plan import check_settings

    return check_settings(settings)


def dataset_warnings(cells: Iterable[Any]) -> list[str]:
    """The warnings about the datasets a plan's cells read (too few images for the batch, say)."""
    from clsbench.data.plan import dataset_warnings as warnings_of

    return warnings_of(cell.data for cell in cells)


def plan_scale(**kwargs: Any) -> Any:
    """The plan of ``clsbench scale`` (:func:`clsbench.procedures.scale.plan_scale`, whose keyword arguments this
    takes): the settings, checked; nothing runs."""
    from clsbench.procedures.scale import plan_scale as build_plan

    return build_plan(**kwargs)


def launch_commands(plan: Any) -> list[dict[str, Any]]:
    """The launch commands a scale plan runs on this node (``scale --dry-run``)."""
    from clsbench.procedures.scale import launch_commands as commands_of

    return commands_of(plan)


def communication_env() -> dict[str, str]:
    """The communication variables (NCCL and friends) a scale launch runs with."""
    from clsbench.procedures.scale.nccl import communication_env as variables

    return variables()


def multicast_note() -> str | None:
    """A note about NVLink multicast for DDP on this machine, or None."""
    from clsbench.procedures.scale.nccl import multicast_note as note

    return note()


def parse_list(text: str | Iterable[str] | None, kind: type, option: str, example: str) -> tuple[Any, ...]:
    """Repeated and comma-separated values of ``option`` as ``kind`` (:func:`clsbench.serving.config.parse_list`)."""
    from clsbench.serving.config import parse_list as parse_values

    return parse_values(text, kind, option, example)


def target_model(target: str) -> str:
    """The model name a ``serve --target`` URL names."""
    from clsbench.serving.triton_target import parse_target

    return parse_target(str(target)).model


def literal_header_names(headers: Sequence[tuple[str, str]]) -> list[str]:
    """The ``serve --target-header`` names whose value was given itself, not read from ``env:VAR`` or ``@PATH``."""
    from clsbench.serving.triton_headers import literal_header_names as names

    return names(headers)


def require_loadgen() -> None:
    """InvalidInputError with the install command when MLPerf LoadGen is not installed."""
    from clsbench.serving.loadgen import import_loadgen

    import_loadgen()


def serve_step_facts(step: dict[str, Any]) -> dict[str, Any]:
    """The figures ``serve``'s progress line shows of one step record: its batching setting's label, target QPS,
    whether LoadGen called it VALID and why not, p99 latency (ms; None where too few samples support one, then
    ``max_ms`` and ``samples`` say what there is), completed rate and batch statistics."""
    from clsbench.serving import records
    from clsbench.serving.serve_rows import percentiles_ms, sample_count

    return {"setting": records.setting_label(step.get("setting") or {}), "target_qps": records.target_qps(step),
            "valid": records.is_valid(step), "reason": records.reason(step),
            "p99_ms": percentiles_ms(step)["p99"], "max_ms": records.latency_ms(step, "max"),
            "samples": sample_count(step),
            "rate": records.loadgen_figure(step, "completed_qps") or records.loadgen_figure(step,
                                                                                             "samples_per_second"),
            "batch_stats": records.batch_stats(step)}


def window_facts(window: dict[str, Any]) -> dict[str, Any]:
    """A soak window's telemetry figures (:func:`clsbench.analysis.soak.window_telemetry`) with the throttle reasons
    as labels (``reason_labels``)."""
    from clsbench.analysis.soak import window_telemetry
    from clsbench.results.telemetry import reason_label

    figures = dict(window_telemetry(window.get("telemetry")))
    figures["reason_labels"] = [reason_label(name) for name in figures.get("reasons") or []]
    return figures


def parse_duration(text: str, option: str | None = None) -> float:
    """``90s``, ``10m``, ``1h30m`` or seconds as seconds (:func:`clsbench.core.durations.parse_duration`)."""
    from clsbench.core.durations import parse_duration as seconds_of

    return seconds_of(text) if option is None else seconds_of(text, option)


def parse_budget(text: str | None) -> Any:
    """Check a ``tune --budget`` value (InvalidInputError on a bad one)."""
    from clsbench.procedures.tune.budget import parse_budget as budget_of

    return budget_of(text)


def parse_batch_sizes(text: str) -> list[int] | str:
    """``sweep --batch-size``: whole numbers, or ``auto``."""
    from clsbench.procedures.sweep import parse_batch_sizes as sizes_of

    return sizes_of(text)


def validate_knee_fraction(value: float) -> float:
    """``sweep --knee``: a fraction in (0, 1]."""
    from clsbench.procedures.sweep import validate_knee_fraction as check_knee

    return check_knee(value)


def parse_workers(text: str) -> list[int]:
    """``diagnose --num-workers``: whole numbers >= 0."""
    from clsbench.procedures.diagnose import parse_workers as workers_of

    return workers_of(text)


def parse_pipelines(text: str) -> list[str]:
    """``diagnose --pipeline``: registered pipeline names."""
    from clsbench.procedures.diagnose import parse_pipelines as pipelines_of

    return pipelines_of(text)


def parse_size(text: str) -> tuple[int, int]:
    """``data make --size WIDTHxHEIGHT`` as (width, height)."""
    from clsbench.data.make import parse_size as size_of

    return size_of(text)


def check_profile_directory(directory: str | Path) -> Path:
    """Refuse a ``profile -o DIR`` that exists or cannot be created, before anything is measured."""
    from clsbench.procedures.profile import check_new_directory

    return check_new_directory(directory)


def nsys_path() -> str | None:
    """Where Nsight Systems' ``nsys`` is, or None when it is not installed."""
    from clsbench.procedures import profile as procedure

    return procedure.nsys_path()


def nsys_text(command: list[str]) -> str:
    """The Nsight Systems command line as a shell would read it."""
    from clsbench.procedures.profile import nsys_text as text_of

    return text_of(command)


def result_table(result: BenchmarkResult) -> str:
    """The text table of a result (what ``run`` prints)."""
    from clsbench.report import table

    return table.render(result)


def result_warnings(measurements: Sequence[Any]) -> list[str]:
    """The warning lines of measurements (unstable, throttled...), as the table prints them."""
    from clsbench.report import table

    return table.warnings(measurements)


def profile_section(result: BenchmarkResult) -> str:
    """``run --profile``'s section: where each measurement's step time goes."""
    from clsbench.procedures.profile import profile_section as section_of

    return section_of(result)


def profile_text(summary: dict[str, Any], title: str) -> str:
    """A profile summary as text: the split of a step into phases, top kernels, memory by phase."""
    from clsbench.report.profile_text import render_profile

    return render_profile(summary, title)


def sweep_text(analysis: dict[str, Any]) -> str:
    """A sweep's analysis as text: the knee, the largest fit, the latency curve."""
    from clsbench.procedures.sweep import render_sweep

    return render_sweep(analysis)


def diagnose_text(analysis: dict[str, Any]) -> str:
    """A diagnosis as text: the ceiling, each pipeline setting, the verdict."""
    from clsbench.procedures.diagnose_text import render_diagnose

    return render_diagnose(analysis)


def scale_text(result: BenchmarkResult) -> str:
    """A scale result's analysis as text: throughput and efficiency per strategy and GPU count."""
    from clsbench.procedures.scale import analyze_scale, render_scale

    return render_scale(analyze_scale(result))


def serve_text(result: BenchmarkResult) -> str:
    """A serve result's analysis as text: each scenario's answer per mode and batching setting."""
    from clsbench.serving.analysis import analyze_serve, render_serve

    return render_serve(analyze_serve(result))


def soak_text(analysis: dict[str, Any]) -> str:
    """A soak's verdicts as text."""
    from clsbench.analysis.soak import render_soak

    return render_soak(analysis)


def tune_text(analysis: dict[str, Any]) -> str:
    """A tune search's analysis as text: the winner, every candidate, what was left out."""
    from clsbench.procedures.tune import render_tune

    return render_tune(analysis)


def select_inputs(refs: Sequence[str], *, history_model: str | None = None,
                  db: str | None = None) -> tuple[list[tuple[str, BenchmarkResult]], list[str]]:
    """The results ``clsbench select`` reads, as (name, result), and a note per file left out: each ref a result
    file or run id (:func:`load_result`), or a directory (every clsbench result file under it; other JSON files are
    left out with a note); with ``history_model``, also every run of that model the history index holds (by run id,
    through :func:`load_result`, so a run on another host comes from the store's copy).

    Raises:
        ResultFileError: a named file or run id that cannot be read.
    """
    from clsbench.errors import ResultFileError
    from clsbench.results import io as result_io
    from clsbench.results.store import history

    loaded: list[tuple[str, BenchmarkResult]] = []
    skipped: list[str] = []
    for ref in refs:
        if not Path(ref).is_dir():
            loaded.append((ref, load_result(ref, db)))
            continue
        foreign = 0
        for path in sorted(p for p in Path(ref).rglob("*.json")
                           if not any(x.startswith(".") for x in p.relative_to(ref).parts)):
            try:
                loaded.append((str(path), result_io.load(path)))
            except ResultFileError:
                foreign += 1
        if foreign:
            skipped.append(f"{ref}: {foreign} JSON file{'s' if foreign > 1 else ''} under it "
                           f"{'are' if foreign > 1 else 'is'} not clsbench results; left out")
    if history_model is not None:
        seen = {result.run_id for _, result in loaded if result.run_id}
        for row in history(db, model=history_model, limit=None):
            if row["run_id"] not in seen:
                loaded.append((row["run_id"], load_result(row["run_id"], db)))
    return loaded, skipped


def select_text(facts: dict[str, Any]) -> str:
    """A selection as text: what was asked, the ranked table, the excluded cards, the notes and the verdict."""
    from clsbench.procedures.select import render_select

    return render_select(facts)
