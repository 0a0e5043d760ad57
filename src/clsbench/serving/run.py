"""The ``serve`` procedure: every mode x batching setting x scenario, one LoadGen run at a time, into one result file.

For each mode the model is built once; for each (max batch, instances) a server is built and warmed up once, and
every max delay and scenario is served by it (the delay is only a batcher rule). Each scenario plug-in makes its
LoadGen runs through ``run_step``, which runs LoadGen, reads its logs and the server's counters, stores the
*step record* (see :mod:`clsbench.serving.records`) as a repeat of the (mode, scenario) measurement, and saves the
file atomically, so an interrupted serve keeps every finished run.

The result is an ordinary clsbench result file: one measurement per (mode, scenario) with workload
``serve-<scenario>``, its repeats the LoadGen runs, its summary the scenario's answer (derived, recomputable by
:func:`clsbench.serving.analysis.scenario_summary`); the procedure's own facts (settings, warm-up figures, search
outcomes) under ``settings["serve"]``; LoadGen's logs in the folder ``<file stem>.loadgen/`` beside the file, one
sub-folder per run, named in the step record.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import DeviceUnavailableError, InvalidInputError, ResultFileError
from ..measure.clock import Clock
from ..results import io as result_io
from ..results.schema import BenchmarkResult, Measurement
from .config import ServerConfig, ServeSettings, default_threads
from .scenario import ScenarioContext

#: Version of the ``settings["serve"]`` block and of the step records.
SERVE_FORMAT = 1
#: Workload name of a serve measurement: ``serve-offline``, ``serve-server``, ...
WORKLOAD_PREFIX = "serve-"

ProgressCallback = Callable[[dict[str, Any]], None]


class ServeInterrupted(KeyboardInterrupt):
    """Ctrl-C during ``serve``: everything finished is saved in ``outcome``; ``abandoned`` when a second Ctrl-C left
    a LoadGen run still running in its thread (the process should then leave without Python's shutdown)."""

    def __init__(self, outcome: ServeOutcome, abandoned: bool = False) -> None:
        super().__init__("interrupted")
        self.outcome = outcome
        self.abandoned = abandoned


@dataclass(frozen=True)
class ServeOutcome:
    """What :func:`serve` returns: the result (as saved), its path, and where LoadGen's logs are."""

    result: BenchmarkResult
    path: Path | None
    log_root: Path


def loadgen_dir(path: Path) -> Path:
    """The folder of LoadGen's logs beside a result file: ``serve.json`` -> ``serve.loadgen``."""
    return path.with_name(path.stem + ".loadgen")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def serve(settings: ServeSettings, output: str | Path | None, *, environment: dict[str, Any],
          progress: ProgressCallback | None = None, loadgen: ModuleType | None = None,
          clock: Clock | None = None) -> ServeOutcome:
    """Run ``clsbench serve``; see the module docstring.

    Args:
        settings: what to serve (validated here).
        output: the result file (must not exist; its log folder neither); None keeps the result in memory and the
            logs in a temporary folder.
        environment: the environment to record (``clsbench.api.environment(device)``).
        progress: called with an event dict: ``{"kind": "step", "step": record}`` after every LoadGen run,
            ``{"kind": "setup", ...}`` after each server warm-up, ``{"kind": "skip", ...}`` for a skipped mode.
        loadgen: the ``mlperf_loadgen`` module (None: imported; a missing LoadGen is one InvalidInputError).
        clock: the host clock of the batcher and the server (tests).

    Raises:
        InvalidInputError: bad settings, an unknown model, mode or scenario, LoadGen missing (before any file).
        ResultFileError: the output or its log folder exists, or cannot be written.
        ServeInterrupted: Ctrl-C; the finished runs are saved.
    """
    from ..models import get_model_spec
    from ..modes import parse_mode
    from ..scenarios import SCENARIOS, ordered
    from .loadgen import import_loadgen, loadgen_version

    settings.validate()
    get_model_spec(settings.model)  # an unknown model fails here, with suggestions, before any file
    modes = tuple(dict.fromkeys(parse_mode(m).name for m in settings.modes))
    settings = dataclasses.replace(settings, modes=modes, scenarios=tuple(ordered(settings.scenarios)))
    _check_device(settings.device)
    lg = loadgen or import_loadgen()

    path = Path(output) if output is not None else None
    if path is not None:
        result_io.check_writable(path, exists_hint="choose another --output")
        log_root = loadgen_dir(path)
        if log_root.exists():
            raise ResultFileError(f"{log_root} already exists; clsbench never overwrites LoadGen's logs",
                                  "choose another --output, or move the folder away")
    else:
        log_root = Path(tempfile.mkdtemp(prefix="clsbench-serve-")) / "serve.loadgen"
    from .. import __version__

    facts: dict[str, Any] = {"format": SERVE_FORMAT, "settings": settings.to_dict(), "log_dir": log_root.name,
                             "loadgen_version": loadgen_version(lg), "setups": [], "searches": [], "modes": {}}
    run = _Run(settings, path, log_root, lg, progress, clock, BenchmarkResult(
        environment=environment, settings={"serve": facts},
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool={"name": "clsbench", "version": __version__}))
    import os

    import torch

    threads = settings.threads or default_threads(os.cpu_count() or 1, max(settings.instances))
    previous_threads = torch.get_num_threads()
    facts["torch_threads"] = threads
    run.save()  # claims the path, and proves it writable, before anything is built
    log_root.mkdir(parents=True, exist_ok=False)
    torch.set_num_threads(threads)
    try:
        for mode in modes:
            run.serve_mode(mode, [SCENARIOS.get(name) for name in settings.scenarios])
    except KeyboardInterrupt as exc:
        from .loadgen import LoadGenGaveUp

        run.save()
        raise ServeInterrupted(run.outcome(), abandoned=isinstance(exc, LoadGenGaveUp)) from None
    finally:
        torch.set_num_threads(previous_threads)
    return run.outcome()


def _check_device(device: str) -> None:
    if device == "cpu":
        return
    if not device.startswith("cuda"):
        raise InvalidInputError(f"unknown device {device!r}", "use cpu, cuda or cuda:N")
    import torch

    if not torch.cuda.is_available():
        raise DeviceUnavailableError(f"--device {device} was asked for, but this machine has no usable CUDA GPU",
                                     "use --device cpu")


class _Run:
    """The state of one serve call: the result so far, the step counter, the open server."""

    def __init__(self, settings: ServeSettings, path: Path | None, log_root: Path, lg: ModuleType,
                 progress: ProgressCallback | None, clock: Clock | None, result: BenchmarkResult) -> None:
        self.settings = settings
        self.path = path
        self.log_root = log_root
        self.lg = lg
        self.progress = progress or (lambda event: None)
        self.clock = clock
        self.result = result
        self.facts: dict[str, Any] = result.settings["serve"]
        self.steps: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.status: dict[tuple[str, str], tuple[str, str | None]] = {}
        self.offline_qps: dict[tuple[str, int, int], float] = {}
        self.index = 0
        self._pools: dict[int, Any] = {}

    # ----------------------------------------------------------------------------------------- the file

    def outcome(self) -> ServeOutcome:
        return ServeOutcome(self.result, self.path, self.log_root)

    def save(self) -> None:
        from .analysis import scenario_summary

        measurements = []
        for (mode, scenario), steps in self.steps.items():
            status, reason = self.status.get((mode, scenario), ("ok", None))
            if status == "ok" and steps and all(step.get("error") for step in steps):
                status, reason = "failed", str(steps[0]["error"]).removeprefix("not run: ")
            summary = scenario_summary(scenario, steps, self.facts["settings"]) if status == "ok" else {}
            batch = max(self.settings.max_batches) if scenario not in ("single-stream", "multi-stream") else \
                (1 if scenario == "single-stream" else 8)
            measurements.append(Measurement(
                model=self.settings.model, workload=WORKLOAD_PREFIX + scenario, mode=mode, batch_size=batch,
                device=self.settings.device, status=status, input_size=self.settings.input_size, reason=reason,
                detail=reason, repeats=tuple(steps), summary=summary))
        self.result = dataclasses.replace(self.result, settings={"serve": self.facts},
                                          measurements=tuple(measurements))
        if self.path is not None:
            result_io.save(self.result, self.path)

    def _ensure(self, mode: str, scenario: str) -> list[dict[str, Any]]:
        return self.steps.setdefault((mode, scenario), [])

    # ----------------------------------------------------------------------------------------- one mode

    def serve_mode(self, mode: str, scenarios: list[Any]) -> None:
        from .instance import UnsupportedModeError, build_engine
        from .server import failure_reason

        s = self.settings
        try:
            engine = build_engine(s.model, mode, s.device, input_size=s.input_size, seed=s.seed,
                                  compile_mode=s.compile_mode, cuda_graphs=s.cuda_graphs)
        except UnsupportedModeError as exc:
            self._mark(mode, scenarios, "skipped", exc.message)
            return
        except InvalidInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built fails its mode, not the call
            self._mark(mode, scenarios, "failed", failure_reason(exc))
            return
        self.facts["modes"][mode] = {"flags": engine.flags, "notes": dict(engine.prepared.notes),
                                     "cuda_graphs": engine.cuda_graphs, "input_size": engine.input_size}
        for scenario in scenarios:
            self._ensure(mode, scenario.name)
        if "compile_mode" in engine.prepared.notes:
            # Compile every bucket shape here, once, rather than in the instance threads' timed warm-up.
            engine.precompile(sorted({b for c in s.configs() for b in c.buckets}))
        done: dict[str, set[tuple[Any, ...]]] = {sc.name: set() for sc in scenarios}
        groups = dict.fromkeys((c.max_batch, c.instances) for c in s.configs())
        for max_batch, instances in groups:
            configs = [c for c in s.configs() if (c.max_batch, c.instances) == (max_batch, instances)]
            configs = [dataclasses.replace(c, cuda_graphs=engine.cuda_graphs) for c in configs]
            due = [(c, sc) for c in configs for sc in scenarios if self._due(done, sc, c)]
            if not due:
                continue
            server, estimates = self._start_server(mode, engine, configs[0])
            try:
                for config, scenario in due:
                    effective = config if scenario.forced_delay_ms is None else \
                        dataclasses.replace(config, max_delay_ms=scenario.forced_delay_ms)
                    if not self._claim(done, scenario, effective):
                        continue
                    self._serve_scenario(mode, scenario, effective, server, estimates)
            finally:
                if server is not None:
                    server.close()

    def _mark(self, mode: str, scenarios: list[Any], status: str, reason: str) -> None:
        for scenario in scenarios:
            self._ensure(mode, scenario.name)
            self.status[(mode, scenario.name)] = (status, reason)
        self.save()
        self.progress({"kind": "skip", "mode": mode, "status": status, "reason": reason})

    @staticmethod
    def _projection(scenario: Any, config: ServerConfig) -> tuple[Any, ...]:
        return tuple(getattr(config, axis) for axis in scenario.axes)

    def _due(self, done: dict[str, set[tuple[Any, ...]]], scenario: Any, config: ServerConfig) -> bool:
        return self._projection(scenario, config) not in done[scenario.name]

    def _claim(self, done: dict[str, set[tuple[Any, ...]]], scenario: Any, config: ServerConfig) -> bool:
        key = self._projection(scenario, config)
        if key in done[scenario.name]:
            return False
        done[scenario.name].add(key)
        return True

    # ----------------------------------------------------------------------------------------- one server

    def _pool(self, engine: Any) -> Any:
        from .instance import SamplePool

        if engine.input_size not in self._pools:
            self._pools[engine.input_size] = SamplePool(self.settings.sample_count, engine.input_size,
                                                        self.settings.seed, pin=engine.device.type == "cuda")
        return self._pools[engine.input_size]

    def _start_server(self, mode: str, engine: Any, config: ServerConfig) -> tuple[Any, dict[str, Any]]:
        from .batcher import DynamicBatcher
        from .instance import ModelInstance
        from .server import Server

        pool = self._pool(engine)
        instances = [ModelInstance(k, engine, pool, config.buckets, self.clock) for k in range(config.instances)]
        batcher = DynamicBatcher(config.max_batch, config.max_delay_ms, config.buckets, self.clock)
        server = Server(instances, batcher, batch_timeout_s=self.settings.batch_timeout_s, clock=self.clock)
        error = server.start()
        estimates = _estimates(server.setup_facts)
        setup = {"mode": mode, "max_batch": config.max_batch, "instances": config.instances,
                 "buckets": list(config.buckets), "cuda_graphs": config.cuda_graphs, "error": error,
                 "instances_facts": server.setup_facts, "estimates": estimates}
        self.facts["setups"].append(setup)
        self.save()
        self.progress({"kind": "setup", **setup})
        return server, estimates

    # ----------------------------------------------------------------------------------------- one scenario

    def _serve_scenario(self, mode: str, scenario: Any, config: ServerConfig, server: Any,
                        estimates: dict[str, Any]) -> None:
        server.batcher.set_max_delay_ms(config.max_delay_ms)

        def run_step(params: Any, role: str) -> dict[str, Any]:
            return self._step(mode, scenario.name, config, server, params, role)

        ctx = ScenarioContext(self.settings, config, estimates,
                              self.offline_qps.get((mode, config.max_batch, config.instances)), run_step)
        scenario.run(ctx)
        if ctx.facts:
            self.facts["searches"].append({"mode": mode, "scenario": scenario.name, "setting": config.to_dict(),
                                           **ctx.facts})
            self.save()

    def _step(self, mode: str, scenario: str, config: ServerConfig, server: Any, params: Any,
              role: str) -> dict[str, Any]:
        from .loadgen import LoadGenGaveUp, run_loadgen
        from .logs import parse_logs

        self.index += 1
        record: dict[str, Any] = {"index": self.index, "mode": mode, "scenario": scenario, "role": role,
                                  "setting": config.to_dict(), "params": params.to_dict(), "loadgen": {},
                                  "server": {}, "error": None, "log_dir": None, "wall_s": 0.0,
                                  "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if server.error:
            record["error"] = f"not run: {server.error}"
        else:
            qps = f"-q{params.target_qps:.0f}" if params.target_qps is not None else ""
            label = f"{self.index:03d}-{_slug(mode)}-{scenario}-b{config.max_batch}-d{config.max_delay_ms:g}" \
                    f"-i{config.instances}{qps}"
            log_dir = self.log_root / label
            server.begin_run()
            try:
                wall_ns, interrupted = run_loadgen(self.lg, server, params, log_dir, self._pool_count())
            except LoadGenGaveUp:
                raise
            except Exception as exc:  # noqa: BLE001 - LoadGen itself failed: this run is INVALID with why
                server.set_sink(lambda ids, answers: None)  # LoadGen is gone: nothing may be handed to it now
                server.abort(f"loadgen_error: {type(exc).__name__}: {exc}")
                wall_ns, interrupted = 0, False
            record["server"] = server.end_run(wall_ns)
            record["wall_s"] = wall_ns / 1e9
            record["log_dir"] = f"{self.log_root.name}/{label}"
            try:
                record["loadgen"] = parse_logs(log_dir)
            except ResultFileError as exc:
                record["loadgen"] = {"errors": [exc.message]}
            record["error"] = server.error
            if interrupted:
                raise KeyboardInterrupt
        self.steps[(mode, scenario)].append(record)
        if scenario == "offline":
            from . import records

            figure = records.loadgen_figure(record, "samples_per_second")
            if figure and (records.is_valid(record) or (mode, config.max_batch, config.instances)
                           not in self.offline_qps):
                self.offline_qps[(mode, config.max_batch, config.instances)] = figure
        self.save()
        self.progress({"kind": "step", "step": record})
        return record

    def _pool_count(self) -> int:
        return self.settings.sample_count


def _estimates(setup_facts: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The median warm-up latency per bucket over the instances that set up."""
    table: dict[str, list[float]] = {}
    for facts in setup_facts:
        for bucket, ns in ((facts or {}).get("bucket_latency_ns") or {}).items():
            table.setdefault(str(bucket), []).append(float(ns))
    return {"bucket_latency_ns": {b: sorted(v)[len(v) // 2] for b, v in table.items()}}
