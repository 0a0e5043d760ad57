"""Building a run plan: the cross product of models x workloads x modes x batch sizes x inference backends,
validated against the registries, with the stop rules the options give."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import Cell, RunPlan, default_stop_rules, validate_batch_size
from clsbench.core.suites import default_suite_name, get_suite, resolve_modes
from clsbench.errors import InvalidInputError
from clsbench.results.schema import DEFAULT_BACKEND
from clsbench.system.machine import bf16_supported, resolve_device


def plan_run(
    *,
    suite: str | None = None,
    models: Sequence[str] = (),
    workloads: Sequence[str] = (),
    modes: Sequence[str] = (),
    batch_sizes: Sequence[int] = (),
    device: str = "auto",
    options: MeasureOptions = MeasureOptions(),
    execution: Execution = Execution(),
    environment: dict[str, Any] | None = None,
    data: DataSettings | None = None,
    backends: Sequence[str] = (DEFAULT_BACKEND,),
    no_cache: bool = False,
    cache_dir: str | None = None,
) -> RunPlan:
    """Build the cross product to measure.

    A suite supplies defaults for every axis; any axis given explicitly replaces the suite's. With neither a
    suite nor models, the default suite for the device is used (``seed`` on a GPU, ``quick`` on a CPU).

    ``data`` trains on real images through a pipeline instead of the resident synthetic batch: the workloads
    default to ``train`` (the only one it feeds), the dataset is scanned now (bad input fails here), every cell
    carries the settings, and overlapped preparation is turned off (building the next model would take CPU time
    from the pipeline being measured).

    Args:
        options: repeats, stop-rule overrides, input size, timeout, compile mode, seed, cuDNN autotuning,
            telemetry.
        execution: ``overlap`` is recorded in the plan; the rest of it applies when the plan runs.
        environment: the recorded environment, to choose amp-fp16 for the suite's amp-bf16 on a GPU without bf16.
        backends: the inference backends (:data:`clsbench.backends.BACKENDS`) every cell is measured on; a
            backend other than ``eager`` applies to the inference workloads only (``--backend`` with ``train`` is
            one error line). A cell a backend cannot express here is recorded as skipped with the reason.
        no_cache, cache_dir: the backends' artifact cache: build anew, and where it lives (None: its default).
    """
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads import WORKLOADS

    options.validate()
    resolved_device = resolve_device(device)
    if suite is None and not models:
        suite = default_suite_name(resolved_device)
    base = get_suite(suite) if suite else get_suite(default_suite_name(resolved_device))
    for name in models:
        get_model_spec(name)  # fail fast, with suggestions, on an unknown name
    chosen_models = tuple(models) or (base.models if suite else ())
    for name in workloads:
        WORKLOADS.get(name)  # an unknown name is one error line with the closest names
    chosen_workloads = tuple(workloads) or (
        tuple(base.batch_sizes) if suite and data is None else ("train",) if data is not None
        else tuple(WORKLOADS.names())
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
    chosen_backends = tuple(dict.fromkeys(backends)) or (DEFAULT_BACKEND,)
    if chosen_backends != (DEFAULT_BACKEND,):
        from clsbench.backends import check_backend_selection

        if data is not None:
            raise InvalidInputError("--backend applies to inference workloads only, and real data (--data) feeds "
                                    "train", "drop --backend, or drop --data")
        if not workloads:  # the default workloads, less the ones no backend applies to
            chosen_workloads = tuple(w for w in chosen_workloads if WORKLOADS.get(w).kind == "inference")
        check_backend_selection(chosen_backends, [WORKLOADS.get(w).kind for w in chosen_workloads])

    cells = []
    for model, workload, mode in itertools.product(chosen_models, chosen_workloads, chosen_modes):
        sizes = tuple(batch_sizes) or (base.batch_sizes.get(workload) or get_suite("seed").batch_sizes[workload],)
        for size in sizes:
            for backend in chosen_backends:
                cells.append(Cell(model, workload, mode, size, resolved_device, options.input_size,
                                  backend=backend))

    overlap = execution.overlap
    if data is not None:
        from clsbench.data.plan import prepare_data_settings

        data, _ = prepare_data_settings(data, [cell.batch_size for cell in cells])
        cells = [dataclasses.replace(cell, data=data) for cell in cells]
        overlap = False
    rules = {name: rule.with_overrides(**options.stop_overrides())
             for name, rule in default_stop_rules(resolved_device).items()}
    plan = RunPlan(cells=tuple(dict.fromkeys(cells)), repeats=options.repeats, stop_rules=rules, seed=options.seed,
                   data_seed=options.seed, timeout_s=options.timeout_s, compile_mode=options.compile_mode,
                   cudnn_benchmark=bool(options.cudnn_benchmark), overlap_prepare=overlap,
                   telemetry=options.telemetry, suite=suite, no_cache=no_cache, cache_dir=cache_dir)
    plan.validate()
    return plan
