"""The public library API. Everything the CLI does is one call here; the CLI only parses and prints.

The functions live where they belong (planning and running in :mod:`clsbench.engine`, the machine's facts in
:mod:`clsbench.system.machine`, files in :mod:`clsbench.results`); this module gathers the ones a user calls.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from clsbench.core import suites
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import ProfileSettings, RunPlan
from clsbench.core.suites import Suite
from clsbench.engine import planning
from clsbench.engine.planning import data_preflight
from clsbench.engine.runner import resume, run
from clsbench.errors import InvalidInputError
from clsbench.results import io as result_io
from clsbench.results.io import DEFAULT_RESULTS_DIR, default_output_path
from clsbench.results.schema import BenchmarkResult
from clsbench.system.machine import bf16_supported, environment, preflight_warnings, resolve_device

__all__ = [
    "DEFAULT_RESULTS_DIR",
    "Execution",
    "MeasureOptions",
    "ProfileSettings",
    "bf16_supported",
    "data_preflight",
    "default_output_path",
    "environment",
    "get_suite",
    "list_models",
    "load",
    "plan_run",
    "preflight_warnings",
    "profile",
    "resolve_device",
    "resume",
    "run",
    "split_list",
]


def plan_run(*, suite: str | None = None, **kwargs: Any) -> RunPlan:
    """Build the cross product to measure: :func:`clsbench.engine.planning.plan_run`, whose keyword arguments
    this takes, with suite files.

    ``suite`` names a suite (``seed``, ``quick``) or a suite file (``my.yaml``; see :func:`get_suite`), whose names
    are checked against the registries before anything is planned. The plan records a file's suite by its name and
    the file's absolute path (``edge (/home/me/edge.yaml)``): the file is not needed again, and ``resume`` reads
    the cells from the result file.
    """
    if suite is None or not suites.is_suite_file(suite):
        return planning.plan_run(suite=suite, **kwargs)
    options = kwargs.get("options") or MeasureOptions()
    chosen = get_suite(suite, input_size=options.input_size)
    plan = planning.plan_run(suite=chosen.source, **kwargs)
    return dataclasses.replace(plan, suite=chosen.label)


def profile(**kwargs: Any) -> Any:
    """Measure one cell and profile it after its timed region into a new directory: trace, summary, result file
    (:func:`clsbench.procedures.profile.profile`, whose keyword arguments this takes; returns its ``ProfileOutcome``).
    ``run --profile`` is :func:`plan_run` with ``profile=ProfileSettings()``."""
    from clsbench.procedures.profile import profile as profile_cell

    return profile_cell(**kwargs)


def tune(settings: Any, *, output: str | Path | None = None, execution: Execution = Execution(),
         announce: Any = None) -> Any:
    """Search modes x batch sizes x backends for the fastest configuration within the limits and the budget
    (``clsbench tune``). ``settings`` is a :class:`clsbench.procedures.tune.TuneSettings`, checked when it was built;
    ``output`` the result file (never overwritten); ``announce`` is called with each line of the up-front plan.
    Returns :func:`clsbench.procedures.tune.tune`'s ``TuneResult``."""
    from clsbench.procedures.tune import tune as run_tune

    return run_tune(settings, output=output, execution=execution, announce=announce)


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

    suite = suites.get_suite(name)
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
