"""Suites: which models, workloads, batch sizes and modes ``clsbench run --suite NAME`` measures, named here or
written by a user in a suite file (YAML, :func:`load_suite_file`).

This module checks a file's structure only (keys, types, empty lists); whether its names are a known model,
workload or mode is for the layers that hold those registries (:func:`clsbench.api.get_suite`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from clsbench.core.plan import MAX_BATCH_SIZE
from clsbench.errors import InvalidInputError


@dataclass(frozen=True)
class Suite:
    """A named cross product of models x workloads (each at its batch size) x modes.

    ``amp-bf16`` in ``modes`` becomes ``amp-fp16`` on a GPU without bfloat16 (see :func:`resolve_modes`).
    """

    name: str
    description: str
    models: tuple[str, ...]
    batch_sizes: dict[str, int]  # workload -> batch size
    modes: tuple[str, ...]
    source: str | None = None  # a suite file's absolute path; None for a suite named here

    @property
    def label(self) -> str:
        """What a run records as its suite: the name, and for a suite file the file's path too."""
        return self.name if self.source is None else f"{self.name} ({self.source})"


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            name="seed",
            description="the five networks of the seed articles: train bs32, latency bs1, throughput bs256",
            models=("resnet50", "resnet101", "mobilenet_v3_large", "efficientnet_b0", "timm/vit_tiny_patch16_224"),
            batch_sizes={"train": 32, "infer-latency": 1, "infer-throughput": 256},
            modes=("fp32", "amp-bf16"),
        ),
        Suite(
            name="quick",
            description="a small CPU default: 76 s on 2 idle cores (2026-12-01)",
            models=("mobilenet_v3_small", "resnet18"),
            batch_sizes={"infer-latency": 1, "infer-throughput": 8, "train": 8},
            modes=("fp32",),
        ),
    )
}


#: The suffixes that make ``--suite NAME`` a suite file even before the file is looked for.
SUITE_FILE_SUFFIXES = (".yaml", ".yml")
#: The keys of a suite file: the fields of :class:`Suite`; name and description may be left out.
SUITE_FILE_KEYS = ("name", "description", "models", "batch_sizes", "modes")
REQUIRED_KEYS = ("models", "batch_sizes", "modes")
#: What ``clsbench suites`` shows as the way to write a suite file (a test checks that it loads).
SUITE_FILE_EXAMPLE = """\
name: edge                       # optional; default: the file's name without .yaml
description: small networks, batch 1 and 8 on a CPU      # optional
models: [mobilenet_v3_small, shufflenet_v2_x0_5]         # names as `clsbench models` lists them
batch_sizes:                     # the workloads to measure, each at its batch size
  infer-latency: 1
  infer-throughput: 8
modes: [fp32, fp32+cl]
"""
_FORMAT_HINT = "`clsbench suites` shows how to write a suite file"


def get_suite(name: str) -> Suite:
    """The suite named ``name``, or the suite file at ``name`` (:func:`is_suite_file`; structure checked only)."""
    if name in SUITES:
        return SUITES[name]
    if is_suite_file(name):
        return load_suite_file(name)
    raise InvalidInputError(f"unknown suite {name!r}",
                            "choose from: " + ", ".join(SUITES) + ", or give a suite file (FILE.yaml); " + _FORMAT_HINT)


def is_suite_file(name: str) -> bool:
    """Whether ``--suite NAME`` names a suite file: not a suite named here, and a name ending in .yaml or .yml (it
    may not exist: reading it says so) or an existing file."""
    return name not in SUITES and (name.lower().endswith(SUITE_FILE_SUFFIXES) or Path(name).is_file())


def load_suite_file(path: str | Path) -> Suite:
    """Read and check a suite file: a YAML mapping of the :data:`SUITE_FILE_KEYS` (see :data:`SUITE_FILE_EXAMPLE`).

    ``name`` defaults to the file's name without its suffix, ``description`` to none; ``models`` and ``modes`` are
    non-empty lists of names, ``batch_sizes`` a non-empty mapping of workload names to whole batch sizes.
    The suite's ``source`` is the file's absolute path.

    Raises:
        InvalidInputError: one line naming the file: it is missing or unreadable, its YAML is malformed (with the
            line and column), or a key is unknown, missing, of the wrong type or empty.
    """
    where = f"suite file {path}"
    data = _read_yaml(Path(path), where)
    if data is None:
        raise InvalidInputError(f"{where} is empty", _FORMAT_HINT)
    if not isinstance(data, dict):
        raise InvalidInputError(f"{where} holds {_kind(data)}, not a mapping of {', '.join(SUITE_FILE_KEYS)}",
                                _FORMAT_HINT)
    _check_keys(data, where)
    return Suite(
        name=_text(data, "name", Path(path).stem, where),
        description=_text(data, "description", "", where),
        models=_names(data, "models", where, "models: [resnet18, mobilenet_v3_small]"),
        batch_sizes=_batch_sizes(data, where),
        modes=_names(data, "modes", where, "modes: [fp32, amp-bf16]"),
        source=str(Path(path).resolve()),
    )


def _read_yaml(path: Path, where: str) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidInputError(f"{where} does not exist",
                                "check the path; a named suite is one of: " + ", ".join(SUITES)) from None
    except IsADirectoryError:
        raise InvalidInputError(f"{where} is a directory", "give the path of a .yaml file") from None
    except UnicodeDecodeError:
        raise InvalidInputError(f"{where} is not UTF-8 text", _FORMAT_HINT) from None
    except OSError as exc:
        raise InvalidInputError(f"{where} cannot be read: {exc.strerror or exc}", "check its permissions") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        kind = "YAML that names a Python object" if isinstance(exc, yaml.constructor.ConstructorError) \
            else "YAML syntax error"
        raise InvalidInputError(f"{where}: {kind}{at}: {problem}", _FORMAT_HINT) from None


def _kind(value: Any) -> str:
    """How a YAML value reads in an error line: ``a string``, ``a list``..."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a yes/no value)"
    kinds = ((str, "a string"), (int, "a whole number"), (float, "a number"), (list, "a list"), (dict, "a mapping"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _check_keys(data: dict[Any, Any], where: str) -> None:
    for key in data:
        if key not in SUITE_FILE_KEYS:
            close = difflib.get_close_matches(str(key), SUITE_FILE_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise InvalidInputError(f"{where}: unknown key {key!r}",
                                    f"{hint}the keys are: {', '.join(SUITE_FILE_KEYS)}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise InvalidInputError(f"{where}: {key} is missing", _FORMAT_HINT)


def _text(data: dict[str, Any], key: str, default: str, where: str) -> str:
    if key not in data:
        return default
    value = data[key]
    if not isinstance(value, str) or not value.strip() or "\n" in value.strip():
        raise InvalidInputError(f"{where}: {key} must be one line of text, got {_kind(value)}",
                                f"e.g. {key}: my-suite" if key == "name" else f"e.g. {key}: what it measures")
    return value.strip()


def _names(data: dict[str, Any], key: str, where: str, example: str) -> tuple[str, ...]:
    value = data[key]
    if not isinstance(value, list):
        raise InvalidInputError(f"{where}: {key} must be a list, got {_kind(value)}", f"e.g. {example}")
    if not value:
        raise InvalidInputError(f"{where}: {key} is empty", f"name at least one, e.g. {example}")
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise InvalidInputError(f"{where}: {key} holds {_kind(item)} ({item!r}), not a name", f"e.g. {example}")
        if key == "models" and ":" not in item and set("*?[") & set(item):
            raise InvalidInputError(f"{where}: models names a pattern ({item!r}), not a model",
                                    f"name each model; `clsbench models '{item}'` lists the matches")
    return tuple(dict.fromkeys(item.strip() for item in value))


def _batch_sizes(data: dict[str, Any], where: str) -> dict[str, int]:
    example = "e.g. batch_sizes: {infer-latency: 1, train: 32}"
    value = data["batch_sizes"]
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: batch_sizes must be a mapping of workload to batch size, got "
                                f"{_kind(value)}", example)
    if not value:
        raise InvalidInputError(f"{where}: batch_sizes is empty", f"name at least one workload, {example}")
    for workload, size in value.items():
        if not isinstance(workload, str) or not workload.strip():
            raise InvalidInputError(f"{where}: batch_sizes has {_kind(workload)} ({workload!r}) for a workload name",
                                    example)
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidInputError(f"{where}: batch_sizes.{workload} must be a whole number, got {_kind(size)}",
                                    example)
        if not 1 <= size <= MAX_BATCH_SIZE:
            raise InvalidInputError(f"{where}: batch_sizes.{workload} must be 1..{MAX_BATCH_SIZE}, got {size}",
                                    example)
    return {workload.strip(): size for workload, size in value.items()}


def default_suite_name(device: str) -> str:
    """The suite ``clsbench run`` measures when given nothing: seed on a GPU, quick on a CPU."""
    return "seed" if device.startswith("cuda") else "quick"


def resolve_modes(modes: tuple[str, ...], *, bf16_supported: bool) -> tuple[str, ...]:
    """Replace bf16 autocast by fp16 autocast where the GPU lacks bfloat16, as the seed suite specifies."""
    if bf16_supported:
        return modes
    return tuple(m.replace("amp-bf16", "amp-fp16") for m in modes)
