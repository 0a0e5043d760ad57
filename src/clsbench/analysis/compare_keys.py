"""What ``clsbench compare`` matches a measurement by: its :data:`Key` (model, workload, mode, batch size, backend,
input size, data pipeline, world size), the input size and world size it ran at, and the keys in words.

The rules (why the input size falls back to the model's default as the compared files show it, what the data
pipeline's label holds, how a scale measurement's world size is told) are in :mod:`clsbench.analysis.compare`'s
module docstring; :func:`near_misses` finds the cells that did not pair up only because one of those facts differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clsbench.results.schema import BenchmarkResult, Measurement, backend_suffix, data_label

#: The label of synthetic data in tables and exports (a measurement without real-data settings).
SYNTHETIC = "synthetic"
#: What a measurement's key lacks that compare matches on too, in the order of :data:`Key`'s last three entries.
MATCH_FACTS = ("input size", "data pipeline", "world size")

#: model, workload, mode, batch_size, backend, input size (None: the model's default, size unknown), data label
#: (None: synthetic), world size (None: a scale measurement whose world size cannot be told).
Key = tuple[str, str, str, int, str, int | None, str | None, int | None]


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def recorded_input_size(m: Measurement) -> int | None:
    """The input side ``m`` stores, else the one its repeats recorded; None: neither (the model's default)."""
    if _is_size(m.input_size):
        return m.input_size
    return next((r["input_size"] for r in m.repeats if _is_size(r.get("input_size"))), None)


def _requested_input_sizes(settings: dict[str, Any]) -> dict[str, set[Any]]:
    """Per model, the input sizes a run's settings asked for (None: the model's default): its cells and any
    procedure block naming a model (diagnose, sweep, tune, scale)."""
    out: dict[str, set[Any]] = {}
    blocks = [*(settings.get("cells") or ()), *settings.values()]
    for block in blocks:
        if isinstance(block, dict) and isinstance(block.get("model"), str) and "input_size" in block:
            out.setdefault(block["model"], set()).add(block["input_size"])
    return out


def default_input_sizes(results: Sequence[BenchmarkResult]) -> dict[str, int]:
    """Per model, its default input size as ``results`` show it: the size recorded by its measurements in runs whose
    settings asked for no size for it. A model is left out when no file shows its default, or when the files
    disagree (one model name, two defaults: e.g. another timm version)."""
    seen: dict[str, set[int]] = {}
    for result in results:
        requested = _requested_input_sizes(result.settings)
        for m in result.measurements:
            size = recorded_input_size(m)
            if size is not None and requested.get(m.model) == {None}:
                seen.setdefault(m.model, set()).add(size)
    return {model: next(iter(sizes)) for model, sizes in seen.items() if len(sizes) == 1}


def input_size_of(m: Measurement, defaults: dict[str, int]) -> int | None:
    """The input side ``m`` ran at (:func:`recorded_input_size`, else the model's default from ``defaults``);
    None: the model's default, whose size is not known."""
    size = recorded_input_size(m)
    return size if size is not None else defaults.get(m.model)


def world_size_of(m: Measurement, settings: dict[str, Any]) -> int | None:
    """The devices one step of ``m`` ran on: a ``clsbench scale`` measurement's GPUs in total (its summary's
    ``gpus``, or, when it failed before it had figures, its global batch / the plan's per-GPU batch), 1 for any
    other measurement (one process on one device); None for a scale measurement that says neither."""
    gpus = (m.summary or {}).get("gpus")
    if _is_size(gpus):
        return gpus
    scale = settings.get("scale")
    if not isinstance(scale, dict):
        return 1
    per_gpu = scale.get("batch_size_per_gpu")
    if _is_size(per_gpu) and m.batch_size % per_gpu == 0:
        return m.batch_size // per_gpu
    return None


def match_key(m: Measurement, settings: dict[str, Any], defaults: dict[str, int]) -> Key:
    """What compare matches ``m`` by (:data:`Key`; see the module docstring). ``settings``: its run's settings;
    ``defaults``: :func:`default_input_sizes` of the compared runs."""
    return (m.model, m.workload, m.mode, m.batch_size, m.backend, input_size_of(m, defaults), data_label(m.data),
            world_size_of(m, settings))


def fact_text(index: int, value: Any) -> str:
    """One of :data:`MATCH_FACTS` (by position) as tables print it: ``160``, ``default``, ``synthetic``, ``?``."""
    if MATCH_FACTS[index] == "input size":
        return "default" if value is None else str(value)
    if MATCH_FACTS[index] == "data pipeline":
        return value or SYNTHETIC
    return "?" if value is None else str(value)


def key_text(key: Key, size_is_default: bool = False) -> str:
    """A matched cell in words (:meth:`~clsbench.analysis.compare_types.Row.label`); the input size is left out
    when it is the model's default."""
    model, workload, mode, batch, backend, size, data, world = key
    text = f"{model} {workload}" + (f" [{data}]" if data else "") + f" {mode} bs{batch}"
    if size is not None and not size_is_default:
        text += f" {size}px"
    if world != 1:
        text += f" world {fact_text(2, world)}"
    return text + backend_suffix(backend)


def _differences(a: Key, b: Key) -> list[str]:
    """The match facts that differ between two keys of the same cell, e.g. ``input size 64 vs 160``."""
    return [f"{name} {fact_text(i, a[5 + i])} vs {fact_text(i, b[5 + i])}" for i, name in enumerate(MATCH_FACTS)
            if a[5 + i] != b[5 + i]]


def near_misses(base: dict[Key, Measurement], other: dict[Key, Measurement]) -> list[tuple[Key, Key]]:
    """Pairs (base key, other key) of one cell (model, workload, mode, batch size, backend) that did not pair up
    because an input size, data pipeline or world size differs; keys that matched elsewhere are not counted."""
    unmatched: dict[tuple[Any, ...], list[Key]] = {}
    for key in base:
        if key not in other:
            unmatched.setdefault(key[:5], []).append(key)
    return [(a, key) for key in other if key not in base for a in unmatched.get(key[:5], [])]


def miss_summary(misses: Sequence[tuple[Key, Key]]) -> str:
    """The distinct differences of ``misses`` in words: ``input size 64 vs 160; data pipeline synthetic vs ...``."""
    return "; ".join(dict.fromkeys(d for a, b in misses for d in _differences(a, b)))
