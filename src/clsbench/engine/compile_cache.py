"""Compile artifacts reused across the repeats of one cell (issue 35): Inductor's on-disk caches in a directory of
the cell's own, inside a directory of the run's own.

Each repeat runs in a fresh process, so without a cache every repeat of a ``+compile`` cell compiles from scratch;
with Inductor's default directory (``$TMPDIR/torchinductor_$USER``) the first repeat may instead find another run's
kernels. Here the runner gives each compiled cell ``<tmp>/clsbench-inductor-<user>/<run id>/<cell>/``
(:func:`cell_cache_dir`): the first repeat compiles cold and fills it, and the later repeats (and a resumed run, on
the same machine) load its FX graphs (``torch._inductor.config.fx_graph_cache``) and AOTAutograd graphs
(``torch._functorch.config.enable_autograd_cache``), both on by default in torch 2.14 and set on here anyway. The
worker points ``TORCHINDUCTOR_CACHE_DIR`` there for the repeat (Inductor reads it whenever it needs the directory;
Triton's kernels go under it unless ``TRITON_CACHE_DIR`` says otherwise) and records, in the repeat's
``compile_cache``, the directory, whether it held artifacts when the repeat began (``warm``) and Inductor's own cache
counters (``torch._dynamo.utils.counters``) for the repeat. The compile time stays ``timings.compile_s`` of each
repeat: the first repeat's is the cold compile.

A directory per cell, not one per run: two cells may compile the same graph (one model, mode and batch size under
two workloads), and the second cell's first repeat would then report a warm compile as its compile time.
"""

from __future__ import annotations

import contextlib
import getpass
import hashlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: The environment variable Inductor reads for its cache directory (torch/_inductor/runtime/cache_dir_utils.py).
CACHE_DIR_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"

#: The counters recorded per repeat, as ``torch._dynamo.utils.counters[group][name]`` (torch 2.14:
#: torch/_inductor/codecache.py and torch/_functorch/_aot_autograd/autograd_cache.py).
CACHE_COUNTERS: tuple[tuple[str, str], ...] = (
    ("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"), ("inductor", "fxgraph_cache_bypass"),
    ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss"),
    ("aot_autograd", "autograd_cache_bypass"),
)

#: Characters a cell's directory name keeps from its label; the rest become ``_``.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def compiles(mode_name: str) -> bool:
    """Whether a mode compiles with Inductor through ``torch.compile`` (``+compile``, ``+compile:MODE``; the
    modifiers that need it, such as ``+compiled-step``, come with it)."""
    from clsbench.modes import parse_mode

    return "compile" in {name.split(":")[0] for name in parse_mode(mode_name).modifier_names}


def _user() -> str:
    try:
        return _UNSAFE.sub("_", getpass.getuser())
    except (KeyError, OSError, ModuleNotFoundError):
        return f"uid_{os.getuid()}" if hasattr(os, "getuid") else "user"


def run_cache_root(run_id: str, created_utc: str = "") -> Path:
    """The run's directory: ``<tmp>/clsbench-inductor-<user>/<run id>``, per user like Inductor's own default (a
    shared temporary folder). A file from before run ids names its run by a digest of its creation time."""
    name = run_id or "created-" + hashlib.sha256(created_utc.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"clsbench-inductor-{_user()}" / _UNSAFE.sub("_", name)


def cell_cache_dir(root: Path, label: str, key: tuple[Any, ...]) -> str:
    """The cell's directory under ``root``: its label made safe for a file name, and a digest of its key (two labels
    may read the same once made safe)."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:8]
    return str(root / f"{_UNSAFE.sub('_', label).strip('_')[:100]}-{digest}")


def _holds_artifacts(directory: Path) -> bool:
    return directory.is_dir() and any(path.is_file() for path in directory.rglob("*"))


def _counter_values() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return {name: int(counters[group][name]) for group, name in CACHE_COUNTERS}


@contextlib.contextmanager
def inductor_cache(directory: str) -> Iterator[dict[str, Any]]:
    """Compile into ``directory`` for the duration: point Inductor there, keep its FX-graph and AOTAutograd caches
    on, and fill the yielded dict with what the repeat found (see the module docstring) when the block ends, however
    it ends. The previous ``TORCHINDUCTOR_CACHE_DIR`` comes back afterwards (an inline run compiles in this
    process)."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch.compiler.config as compiler_config

    path = Path(directory)
    facts: dict[str, Any] = {"dir": directory, "warm": _holds_artifacts(path)}
    path.mkdir(parents=True, exist_ok=True)
    previous = os.environ.get(CACHE_DIR_VARIABLE)
    # An environment variable that forces a cache off (TORCHINDUCTOR_FX_GRAPH_CACHE=0, ...) still wins over these
    # assignments: what was in force is recorded below.
    inductor_config.fx_graph_cache = True
    functorch_config.enable_autograd_cache = True
    before = _counter_values()
    os.environ[CACHE_DIR_VARIABLE] = directory
    try:
        yield facts
    finally:
        if previous is None:
            os.environ.pop(CACHE_DIR_VARIABLE, None)
        else:
            os.environ[CACHE_DIR_VARIABLE] = previous
        after = _counter_values()
        facts.update({name: after[name] - before[name] for name in after})
        facts["fx_graph_cache"] = bool(inductor_config.fx_graph_cache)
        facts["autograd_cache"] = bool(functorch_config.enable_autograd_cache)
        facts["force_disable_caches"] = bool(compiler_config.force_disable_caches)
