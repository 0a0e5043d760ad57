"""The public library API. Everything the CLI does is one call here; the CLI only parses and prints."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import socket
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from clsbench.core.plan import (
    WORKLOADS,
    Cell,
    DataSettings,
    RunPlan,
    StopRule,
    default_stop_rules,
    validate_batch_size,
    validate_workload,
)
from clsbench.core.suites import default_suite_name, get_suite, resolve_modes
from clsbench.engine.runner import ProgressCallback, check_resume_compatible, new_result, run_plan
from clsbench.errors import DeviceUnavailableError, InvalidInputError, ResultFileError
from clsbench.measure.clock import Clock
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult

DEFAULT_RESULTS_DIR = Path("clsbench-results")


def resolve_device(device: str = "auto") -> str:
    """Turn "auto" into "cuda" when a GPU is present (else "cpu") and check that a named device exists."""
    import torch

    text = device.strip().lower()
    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text == "cpu":
        return "cpu"
    if text == "cuda" or text.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(f"--device {device} was asked for, but this machine has no usable CUDA GPU",
                                         "use --device cpu, or check the driver with nvidia-smi")
        if ":" in text:
            index_text = text.split(":", 1)[1]
            if not index_text.isdigit():
                raise InvalidInputError(f"bad device {device!r}", "use cuda, cuda:0, cuda:1, ... or cpu")
            count = torch.cuda.device_count()
            if int(index_text) >= count:
                raise DeviceUnavailableError(f"{device} does not exist: this machine has {count} GPU(s)",
                                             f"use cuda:0 ... cuda:{count - 1}")
        return text
    raise InvalidInputError(f"unknown device {device!r}", "use auto, cpu, cuda or cuda:N")


def bf16_supported(environment: dict[str, Any], device: str) -> bool:
    """Whether the GPU supports bfloat16 (compute capability >= 8.0), read from the recorded environment."""
    if not device.startswith("cuda"):
        return True
    capability = (environment.get("gpu") or {}).get("compute_capability")
    if capability is None:
        return True  # unknown: try bf16; the worker skips it with a reason if the GPU refuses
    try:
        return float(str(capability)) >= 8.0
    except ValueError:
        return True


def plan_run(
    *,
    suite: str | None = None,
    models: Sequence[str] = (),
    workloads: Sequence[str] = (),
    modes: Sequence[str] = (),
    batch_sizes: Sequence[int] = (),
    device: str = "auto",
    repeats: int = 3,
    warmup: int | None = None,
    iterations: int | None = None,
    min_time: float | None = None,
    max_time: float | None = None,
    input_size: int | None = None,
    timeout_s: float = 900.0,
    compile_mode: str = "default",
    seed: int = 0,
    cudnn_benchmark: bool = True,
    overlap_prepare: bool = True,
    telemetry: bool = True,
    environment: dict[str, Any] | None = None,
    data: DataSettings | None = None,
) -> RunPlan:
    """Build the cross product to measure.

    A suite supplies defaults for every axis; any axis given explicitly replaces the suite's. With neither a
    suite nor models, the default suite for the device is used (``seed`` on a GPU, ``quick`` on a CPU).

    ``data`` trains on real images through a pipeline instead of the resident synthetic batch: the workloads
    default to ``train`` (the only one it feeds), the dataset is scanned now (bad input fails here), every cell
    carries the settings, and overlapped preparation is turned off (building the next model would take CPU time
    from the pipeline being measured).
    """
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode

    resolved_device = resolve_device(device)
    if suite is None and not models:
        suite = default_suite_name(resolved_device)
    base = get_suite(suite) if suite else get_suite(default_suite_name(resolved_device))
    for name in models:
        get_model_spec(name)  # fail fast, with suggestions, on an unknown name
    chosen_models = tuple(models) or (base.models if suite else ())
    chosen_workloads = tuple(validate_workload(w) for w in workloads) or (
        tuple(base.batch_sizes) if suite and data is None else ("train",) if data is not None else WORKLOADS
    )
    if data is not None and set(chosen_workloads) != {"train"}:
        raise InvalidInputError("real data (--data) feeds the train workload only",
                                "add --workload train, or drop --data")
    if modes:
        chosen_modes = tuple(parse_mode(m).name for m in modes)
    elif suite:
        chosen_modes = resolve_modes(base.modes, bf16_supported=bf16_supported(environment or {}, resolved_device))
    else:
        chosen_modes = ("fp32",)
    for size in batch_sizes:
        validate_batch_size(size)
    if input_size is not None and not 16 <= input_size <= 4096:
        raise InvalidInputError(f"input size {input_size} is out of range", "use 16..4096, e.g. --input-size 224")

    cells = []
    for model, workload, mode in itertools.product(chosen_models, chosen_workloads, chosen_modes):
        sizes = tuple(batch_sizes) or (base.batch_sizes.get(workload) or get_suite("seed").batch_sizes[workload],)
        for size in sizes:
            cells.append(Cell(model, workload, mode, size, resolved_device, input_size))

    if data is not None:
        from clsbench.data.plan import prepare_data_settings

        data, _ = prepare_data_settings(data, [cell.batch_size for cell in cells])
        cells = [dataclasses.replace(cell, data=data) for cell in cells]
        overlap_prepare = False
    rules = default_stop_rules(resolved_device)
    overrides = {k: v for k, v in {"warmup": warmup, "min_iterations": iterations, "min_seconds": min_time,
                                   "max_seconds": max_time}.items() if v is not None}
    if overrides:
        rules = {name: _replace_rule(rule, overrides) for name, rule in rules.items()}
    plan = RunPlan(cells=tuple(dict.fromkeys(cells)), repeats=repeats, stop_rules=rules, seed=seed,
                   data_seed=seed, timeout_s=timeout_s, compile_mode=compile_mode, cudnn_benchmark=cudnn_benchmark,
                   overlap_prepare=overlap_prepare, telemetry=telemetry, suite=suite)
    plan.validate()
    return plan


def _replace_rule(rule: StopRule, overrides: dict[str, Any]) -> StopRule:
    updated = dataclasses.replace(rule, **overrides)
    if updated.max_seconds is not None and updated.max_seconds < updated.min_seconds:
        updated = dataclasses.replace(updated, max_seconds=None if "max_seconds" not in overrides else
                                      updated.max_seconds)
    if updated.warmup == 0:
        updated = dataclasses.replace(updated, warmup_seconds=0.0)
    return updated


def default_output_path(device: str, directory: Path = DEFAULT_RESULTS_DIR) -> Path:
    """A new file name that does not exist yet: clsbench-results/<UTC time>-<host>-<device>.json."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    host = socket.gethostname().split(".")[0] or "host"
    stem = f"{stamp}-{host}-{device.replace(':', '')}"
    path = directory / f"{stem}.json"
    for n in itertools.count(2):
        if not path.exists():
            return path
        path = directory / f"{stem}-{n}.json"
    raise AssertionError("unreachable")


def environment(device: str = "cpu") -> dict[str, Any]:
    """The environment that would be recorded for a run on ``device``, with the pre-flight checks under
    ``preflight`` (read-only: clsbench reports the GPU's state and never changes it)."""
    from clsbench.system.environment import collect_environment
    from clsbench.system.preflight import preflight_checks

    facts = collect_environment(device)
    facts["preflight"] = preflight_checks(device)
    return facts


def preflight_warnings(facts: dict[str, Any]) -> list[str]:
    """The pre-flight checks that deserve the user's attention before measuring, as lines of text."""
    return [f"{c['check']}: {c['message']}" for c in facts.get("preflight") or [] if c.get("status") == "warn"]


def run(
    plan: RunPlan,
    output: str | Path | None = None,
    *,
    env: dict[str, Any] | None = None,
    isolation: str = "process",
    clock: Clock | None = None,
    progress: ProgressCallback | None = None,
    probe: bool = True,
) -> BenchmarkResult:
    """Measure ``plan``, saving to ``output`` after every measurement; refuse to overwrite an existing file.

    On a GPU, ``probe`` first measures the matmul and copy ceilings (clsbench.system.probe) in a separate process and
    stores them in the environment, so MFU can be stated against measured as well as datasheet peaks.
    """
    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path)
    device = plan.cells[0].device if plan.cells else "cpu"
    facts = env if env is not None else environment(device)
    if probe and device.startswith("cuda") and "probe" not in facts:
        from clsbench.system.probe import probe_in_subprocess

        facts = {**facts, "probe": probe_in_subprocess(device)}
    result = new_result(plan, facts)
    if path is not None:
        result_io.save(result, path)  # an empty run file now: the path is claimed, and writable
    return run_plan(plan, result, path, isolation=isolation, clock=clock, progress=progress)


def resume(
    output: str | Path,
    *,
    env: dict[str, Any] | None = None,
    isolation: str = "process",
    clock: Clock | None = None,
    progress: ProgressCallback | None = None,
    force: bool = False,
) -> BenchmarkResult:
    """Finish an interrupted run: measure only the cells ``output`` lacks, with the settings stored in it."""
    path = Path(output)
    result = result_io.load(path)
    if "scale" in result.settings:
        raise ResultFileError(f"{path} is a `clsbench scale` result, which cannot be resumed",
                              "run `clsbench scale` again with another --output for what it lacks")
    try:
        plan = RunPlan.from_dict(result.settings)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultFileError(f"{path} has no usable run settings to resume ({exc})") from None
    device = plan.cells[0].device if plan.cells else "cpu"
    current = env if env is not None else environment(device)
    if not force:
        check_resume_compatible(result, current, str(path))
        from clsbench.data.plan import check_data_unchanged

        check_data_unchanged((cell.data for cell in plan.cells), str(path))
    return run_plan(plan, result, path, isolation=isolation, clock=clock, progress=progress)


def load(path: str | Path) -> BenchmarkResult:
    """Read a result file (validated; ResultFileError on any problem)."""
    return result_io.load(path)


def list_models(pattern: str = "*") -> list[str]:
    from clsbench.models import list_models as _list

    return _list(pattern)


def split_list(values: Iterable[str]) -> list[str]:
    """Flatten repeated and comma-separated option values: ("a,b", "c") -> ["a", "b", "c"]."""
    out: list[str] = []
    for value in values:
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out
