"""The result file format: versioned, immutable objects holding raw samples, plus their JSON (de)serialisation.

A file holds one ``clsbench run``::

    {"schema_version": 2, "tool": {...}, "created_utc": "...", "environment": {...},
     "settings": {...}, "measurements": [{...}, ...]}

Each measurement keeps the raw samples of every repeat (``repeats[i]["samples"]``) next to its ``summary``, which
is derived from them by :mod:`clsbench.analysis.summary` and can be recomputed at any time.

History of ``schema_version``:

* 1 (clsbench 0.1): first version. Repeats may carry ``telemetry``, ``busy`` and ``costs``; summaries
  ``telemetry``, ``efficiency`` and ``flags``; the environment ``preflight`` and ``probe``. Real-data
  measurements add ``data`` (the data settings) to the measurement and to its cell in ``settings.cells``, and
  ``data`` to its repeats and summary. Measurements on an inference backend other than ``eager`` add ``backend``
  (its name) to the measurement and to its cell, ``backend`` and ``parity`` to their repeats and ``backend`` to
  their summary; the settings add ``no_cache`` and ``cache_dir`` when not at their defaults. A run with
  ``--profile`` (or ``clsbench profile``) adds ``profile`` to the settings (steps, warm-up, trace path), to the first
  repeat of each measurement and to its summary (:mod:`clsbench.analysis.profile`). All are optional, so a file
  without them (an older 0.1 file, a CPU run, a synthetic-data run, an eager run, an unprofiled run) reads the same.
* 2 (clsbench 0.1, ``clsbench serve``): a result may be a serve result: ``settings["serve"]`` holds the procedure's
  facts (settings, warm-ups, searches), each measurement is a (mode, scenario) with workload ``serve-<scenario>``,
  its repeats are LoadGen runs (step records: ``loadgen``, ``server``, ``setting``, ``params``, ``error``,
  ``log_dir``, with no ``status`` or ``samples``) and its summary the scenario's answer (``serve``, plus
  ``throughput_img_s`` and ``latency_ms`` of the run the answer comes from). A clsbench that reads only version 1
  would take those repeats for failed ones, so it rejects these files as newer. Every other file is unchanged:
  version-1 files read as before. Runs made since carry ``run_id``, a random id given when the run is created (two
  runs started in the same second are two runs); older files have none, and the history index derives one from
  their contents. A soak (``clsbench soak``) is an ordinary run file with ``settings["soak"]``, ``window_s`` and
  ``telemetry_interval_s`` in its settings, ``samples["windows"]`` and ``validity["ended_early"]`` in its repeat,
  and possibly ``fan_pct`` in its telemetry samples; all optional, so no version change. Runs made since issue 35
  record ``settings["protocol"]``, the stop rules' protocol (``default`` or ``thorough``,
  :data:`clsbench.core.plan.PROTOCOLS`); a file without it (written before protocols) reads as ``thorough (before
  protocols)``, since its GPU latency rule was the 1000 requests that ``thorough`` keeps, and a resumed one keeps
  reading so. A repeat of a compiled cell adds ``compile_cache`` (the Inductor cache directory of its cell, whether
  it held artifacts when the repeat began, and Inductor's cache hits and misses; see
  :mod:`clsbench.engine.compile_cache`). Both are new optional keys that an older clsbench ignores without
  misreading anything (its tables, summaries and ``compare`` read neither), so no version change: the version
  changes only when an older reader would take a file for something it is not, as version 2 did.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from clsbench.errors import ResultFileError

SCHEMA_VERSION = 2
#: Versions this clsbench can read; anything else is rejected by name.
READABLE_VERSIONS = (1, 2)
TOOL_NAME = "clsbench"

STATUSES = ("ok", "failed", "skipped")

#: The inference backend of a measurement that names none: the PyTorch module itself (``clsbench.backends``).
DEFAULT_BACKEND = "eager"


def backend_key(backend: str) -> tuple[str, ...]:
    """What a backend adds to a measurement's key: nothing for eager (so every older key stays as it was)."""
    return () if backend == DEFAULT_BACKEND else (f"backend:{backend}",)


def backend_suffix(backend: str | None) -> str:
    """What a backend adds to a measurement's label: nothing for eager, else `` @name``."""
    return "" if not backend or backend == DEFAULT_BACKEND else f" @{backend}"

#: The real-data settings that make two measurements different ones, and their defaults (the fields of
#: :class:`clsbench.core.data_settings.DataSettings` that its label shows; timeouts and fingerprints are not part
#: of a measurement's identity).
DATA_IDENTITY_DEFAULTS: dict[str, Any] = {"source": "folder", "pipeline": "cpu", "num_workers": 0, "pin_memory": False,
                                          "persistent_workers": False, "prefetch_factor": None, "prime_cache": True,
                                          "normalize": "worker", "augment": None,
                                          "decoder": None}


def data_label(data: dict[str, Any] | None) -> str | None:
    """The short label of stored real-data settings, unique among those that change a measurement, e.g.
    ``folder cpu w8 pin persistent`` (``uint8`` at the end: batches normalised on the device; the gpu augmentation's
    name when one was chosen, and its decoder's as ``NAME-decode``); None: synthetic."""
    if data is None:
        return None
    d = {**DATA_IDENTITY_DEFAULTS, **data}
    parts = [str(d["source"]), str(d["pipeline"]), f"w{d['num_workers']}"]
    if d["pin_memory"]:
        parts.append("pin")
    if d["persistent_workers"]:
        parts.append("persistent")
    if d["prefetch_factor"] is not None:
        parts.append(f"pf{d['prefetch_factor']}")
    if not d["prime_cache"] and d["source"] == "folder":
        parts.append("cold")
    if d["normalize"] == "device":
        parts.append("uint8")
    if d["augment"] is not None:
        parts.append(str(d["augment"]))
    if d["decoder"] is not None:
        parts.append(f"{d['decoder']}-decode")
    return " ".join(parts)


@dataclass(frozen=True)
class Measurement:
    """One cell (model, workload, mode, batch size, device, and the backend when not eager) measured over its
    repeats."""

    model: str
    workload: str
    mode: str
    batch_size: int
    device: str
    status: str
    input_size: int | None = None
    reason: str | None = None
    detail: str | None = None
    repeats: tuple[dict[str, Any], ...] = ()
    summary: dict[str, Any] = field(default_factory=dict)
    validity: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None  # the cell's real-data settings (DataSettings.to_dict()); None: synthetic
    backend: str = DEFAULT_BACKEND  # the inference backend (clsbench.backends); eager: the PyTorch module itself

    @property
    def key(self) -> tuple[Any, ...]:
        base = (self.model, self.workload, self.mode, self.batch_size, self.device)
        base = base if self.data is None else (*base, data_label(self.data))
        return (*base, *backend_key(self.backend))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["repeats"] = list(self.repeats)
        if self.data is None:
            del data["data"]
        if self.backend == DEFAULT_BACKEND:
            del data["backend"]  # eager files read exactly as before
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        if not isinstance(data, dict):
            raise ValueError(f"a measurement must be an object, not {type(data).__name__}")
        _check_types(data, MEASUREMENT_TYPES, "measurement")
        if any(not isinstance(r, dict) for r in data.get("repeats") or ()):
            raise ValueError("every repeat must be an object")
        _check_summary(data.get("summary") or {})
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["repeats"] = tuple(data.get("repeats") or ())
        if kwargs.get("status") not in STATUSES:
            raise ValueError(f"measurement status {kwargs.get('status')!r} is not one of {STATUSES}")
        return cls(**kwargs)


_NUMBER = (int, float)
_OPTIONAL_NUMBER = (int, float, type(None))

#: The types of a measurement's fields (None allowed where the field may be absent or null).
MEASUREMENT_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,), "workload": (str,), "mode": (str,), "batch_size": (int,), "device": (str,),
    "status": (str,), "input_size": (int, type(None)), "reason": (str, type(None)), "detail": (str, type(None)),
    "repeats": (list, type(None)), "summary": (dict, type(None)), "validity": (dict, type(None)),
    "data": (dict, type(None)), "backend": (str, type(None)),
}

#: The summary figures every reader formats, and their types. A stored NaN or infinity is a string ("nan", "inf":
#: JSON has neither), so numbers may be those strings too.
SUMMARY_TYPES: dict[str, tuple[type, ...]] = {
    "throughput_img_s": _OPTIONAL_NUMBER, "spread_pct": _OPTIONAL_NUMBER, "repeats": (int, type(None)),
    "peak_memory_allocated_bytes": _OPTIONAL_NUMBER, "peak_memory_reserved_bytes": _OPTIONAL_NUMBER,
    "unstable": (bool, type(None)), "latency_ms": (dict, type(None)), "profile": (dict, type(None)),
}
NON_FINITE = frozenset({"nan", "inf", "-inf"})


def _check_types(data: dict[str, Any], types: dict[str, tuple[type, ...]], what: str) -> None:
    for key, allowed in types.items():
        value = data.get(key)
        if key not in data and type(None) in allowed:
            continue
        if isinstance(value, bool) and bool not in allowed:
            ok = False  # True is an int to Python, never a count or a figure to a reader
        elif isinstance(value, str) and _NUMBER[0] in allowed and value.lower() in NON_FINITE:
            ok = True
        else:
            ok = isinstance(value, allowed)
        if not ok:
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise ValueError(f"{what} field {key!r} must be {names}, not {type(value).__name__} ({value!r:.40})")


def _check_summary(summary: dict[str, Any]) -> None:
    _check_types(summary, SUMMARY_TYPES, "summary")
    latency = summary.get("latency_ms") or {}
    withheld = latency.get("withheld")
    if withheld is not None and not (isinstance(withheld, dict) and all(isinstance(v, str) for v in withheld.values())):
        raise ValueError("summary field 'latency_ms.withheld' must map percentiles to reasons")
    for key, value in latency.items():
        if key != "withheld" and value is not None and (isinstance(value, bool) or not isinstance(value, _NUMBER)) \
                and not (isinstance(value, str) and value.lower() in NON_FINITE):
            raise ValueError(f"summary field 'latency_ms.{key}' must be a number, not {type(value).__name__}")


@dataclass(frozen=True)
class PendingRepeats:
    """The repeats a measurement in progress has finished: saved as they finish, so that an interrupted run (round
    order measures every cell's first repeat before any cell's second) keeps them, and ``--resume`` goes on from
    them. ``key`` is the cell's key (:attr:`Measurement.key`)."""

    key: tuple[Any, ...]
    repeats: tuple[dict[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {"key": list(self.key), "repeats": list(self.repeats)}

    @classmethod
    def from_dict(cls, data: Any) -> PendingRepeats:
        if not isinstance(data, dict) or not isinstance(data.get("key"), list) \
                or not isinstance(data.get("repeats"), list) or not all(isinstance(r, dict) for r in data["repeats"]):
            raise ValueError("a pending entry must be an object with a key list and a list of repeat objects")
        return cls(key=tuple(data["key"]), repeats=tuple(data["repeats"]))


@dataclass(frozen=True)
class BenchmarkResult:
    """Everything one run produced. Immutable: adding a measurement returns a new object."""

    environment: dict[str, Any]
    settings: dict[str, Any]
    measurements: tuple[Measurement, ...] = ()
    created_utc: str = ""
    tool: dict[str, Any] = field(default_factory=lambda: {"name": TOOL_NAME})
    schema_version: int = SCHEMA_VERSION
    run_id: str = ""  # random, given when the run is created; files from before it have none
    pending: tuple[PendingRepeats, ...] = ()  # repeats of measurements not finished yet (an interrupted run)

    def with_measurement(self, measurement: Measurement) -> BenchmarkResult:
        """Add (or replace) ``measurement``; its pending repeats, if any, are gone: they are in it now."""
        kept = tuple(m for m in self.measurements if m.key != measurement.key)
        pending = tuple(p for p in self.pending if p.key != measurement.key)
        return dataclasses.replace(self, measurements=kept + (measurement,), pending=pending)

    def with_pending(self, key: tuple[Any, ...], repeats: list[dict[str, Any]]) -> BenchmarkResult:
        """Record the finished repeats of the measurement ``key``, which is still in progress."""
        pending = tuple(p for p in self.pending if p.key != key) + (PendingRepeats(tuple(key), tuple(repeats)),)
        return dataclasses.replace(self, pending=pending)

    def pending_repeats(self, key: tuple[Any, ...]) -> list[dict[str, Any]]:
        """The saved repeats of the unfinished measurement ``key`` (empty when there are none)."""
        return next((list(p.repeats) for p in self.pending if p.key == tuple(key)), [])

    def find(self, key: tuple[Any, ...]) -> Measurement | None:
        return next((m for m in self.measurements if m.key == key), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "tool": self.tool,
            "created_utc": self.created_utc,
            **({"run_id": self.run_id} if self.run_id else {}),
            "environment": self.environment,
            "settings": self.settings,
            "measurements": [m.to_dict() for m in self.measurements],
            # Only while a run is unfinished: a finished file reads exactly as before.
            **({"pending": [p.to_dict() for p in self.pending]} if self.pending else {}),
        }

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "result") -> BenchmarkResult:
        """Validate and load; raise ResultFileError naming ``source`` and what is wrong."""
        if not isinstance(data, dict) or "schema_version" not in data:
            raise ResultFileError(f"{source} is not a clsbench result file (no schema_version)",
                                  "pass a file written by `clsbench run`")
        tool = data.get("tool")
        if not isinstance(tool, dict) or tool.get("name") != TOOL_NAME:
            raise ResultFileError(f"{source} is not a clsbench result file (tool is {tool!r})",
                                  "pass a file written by `clsbench run`")
        version = data["schema_version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ResultFileError(f"{source} has a malformed schema_version {version!r}")
        if version > SCHEMA_VERSION:
            raise ResultFileError(
                f"{source} uses result schema {version}, newer than this clsbench reads (<= {SCHEMA_VERSION})",
                "upgrade clsbench",
            )
        if version not in READABLE_VERSIONS:
            raise ResultFileError(f"{source} uses result schema {version}, which this clsbench cannot read")
        try:
            if not isinstance(data["measurements"], list):
                raise ValueError("measurements must be a list")
            for key in ("environment", "settings"):
                if not isinstance(data[key], dict):
                    raise ValueError(f"{key} must be an object, not {type(data[key]).__name__}")
            measurements = tuple(Measurement.from_dict(m) for m in data["measurements"])
            pending = data.get("pending") or []
            if not isinstance(pending, list):
                raise ValueError("pending must be a list")
            return cls(
                pending=tuple(PendingRepeats.from_dict(p) for p in pending),
                environment=dict(data["environment"]),
                settings=dict(data["settings"]),
                measurements=measurements,
                created_utc=str(data.get("created_utc", "")),
                run_id=str(data.get("run_id") or ""),
                tool=dict(tool),
                schema_version=version,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ResultFileError(f"{source} is damaged: {type(exc).__name__}: {exc}",
                                  "re-run, or restore the file") from None
