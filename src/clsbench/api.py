"""The public library API. Everything the CLI does is one call here; the CLI only parses and prints.

The functions live where they belong (planning and running in :mod:`clsbench.engine`, the machine's facts in
:mod:`clsbench.system.machine`, files in :mod:`clsbench.results`); this module gathers the ones a user calls.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from clsbench.core.options import Execution, MeasureOptions
from clsbench.engine.planning import data_preflight, plan_run
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
    "bf16_supported",
    "data_preflight",
    "default_output_path",
    "environment",
    "list_models",
    "load",
    "plan_run",
    "preflight_warnings",
    "resolve_device",
    "resume",
    "run",
    "split_list",
]


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
