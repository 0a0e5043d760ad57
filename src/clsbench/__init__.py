"""clsbench: what a GPU really delivers on image-classification networks.

The public API (the CLI is a thin shell over it)::

    import clsbench
    plan = clsbench.plan_run(models=["resnet50"], workloads=["train"], modes=["amp-bf16+cl"], device="cuda")
    result = clsbench.run(plan, "results/run.json")
    result = clsbench.load("results/run.json")
    data = clsbench.DataSettings("images/", num_workers=8, pin_memory=True)   # train on real JPEGs
    outcome = clsbench.diagnose("resnet50", "images/", mode="amp-bf16+cl", batch_size=256, device="cuda")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clsbench.version import __version__

if TYPE_CHECKING:
    from clsbench.api import default_output_path, environment, list_models, load, plan_run, resolve_device, resume, run
    from clsbench.core.data_settings import DataSettings
    from clsbench.core.options import Execution, MeasureOptions
    from clsbench.core.plan import Cell, RunPlan, StopRule
    from clsbench.errors import ClsbenchError, InvalidInputError, ResultFileError, UnknownModelError
    from clsbench.procedures.diagnose import diagnose
    from clsbench.results.schema import SCHEMA_VERSION, BenchmarkResult, Measurement

#: Where each public name lives. They are imported on first use (PEP 562), so that importing a submodule, e.g. the
#: forkserver's first preload module, which must ignore Ctrl-C before anything slow runs, costs nothing here.
_PUBLIC = {
    "clsbench.api": ("default_output_path", "environment", "list_models", "load", "plan_run", "resolve_device",
                     "resume", "run"),
    "clsbench.core.data_settings": ("DataSettings",),
    "clsbench.core.options": ("Execution", "MeasureOptions"),
    "clsbench.core.plan": ("Cell", "RunPlan", "StopRule"),
    "clsbench.errors": ("ClsbenchError", "InvalidInputError", "ResultFileError", "UnknownModelError"),
    "clsbench.procedures.diagnose": ("diagnose",),
    "clsbench.results.schema": ("SCHEMA_VERSION", "BenchmarkResult", "Measurement"),
}
_WHERE = {name: module for module, names in _PUBLIC.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'clsbench' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


__all__ = [
    "SCHEMA_VERSION",
    "BenchmarkResult",
    "Cell",
    "ClsbenchError",
    "DataSettings",
    "Execution",
    "InvalidInputError",
    "MeasureOptions",
    "Measurement",
    "ResultFileError",
    "RunPlan",
    "StopRule",
    "UnknownModelError",
    "__version__",
    "default_output_path",
    "diagnose",
    "environment",
    "list_models",
    "load",
    "plan_run",
    "resolve_device",
    "resume",
    "run",
]
