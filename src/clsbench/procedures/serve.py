"""The ``serve`` procedure: every mode x batching setting x scenario, one LoadGen run at a time, into one result file.

The serving machinery (batcher, server, model instances, the LoadGen adapter, log parsing) lives in
:mod:`clsbench.serving` and the scenarios in :mod:`clsbench.scenarios`; this module drives them and writes the file.
For each mode the model is built once; for each (max batch, instances) a server is built and warmed up once, and
every max delay and scenario is served by it (the delay is only a batcher rule). Each scenario plug-in makes its
LoadGen runs through ``run_step``, which runs LoadGen, reads its logs and the server's counters, stores the
*step record* (see :mod:`clsbench.serving.records`) as a repeat of the (mode, scenario) measurement, and saves the
file atomically, so an interrupted serve keeps every finished run.

The result is an ordinary clsbench result file: one measurement per (mode, scenario) with workload
``serve-<scenario>``, its repeats the LoadGen runs, its summary the scenario's answer (derived, recomputable by
:func:`clsbench.serving.analysis.scenario_summary`); the procedure's own facts (settings, warm-up figures, search
outcomes) under ``settings["serve"]``; LoadGen's logs in the folder ``<file stem>.loadgen/`` beside the file, one
sub-folder per run, named in the step record. ``show`` prints its section through the :data:`PROCEDURES` entry at
the bottom of this module, ``compare`` its answers through that entry's ``compare`` hook.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from clsbench.core.options import Execution
from clsbench.core.vocab import Reason, Status
from clsbench.errors import DeviceUnavailableError, InvalidInputError, ResultFileError
from clsbench.measure.clock import Clock
from clsbench.procedures.base import PROCEDURES, HtmlSection, ProcedureComparison, ProcedureView
from clsbench.procedures.serve_view import SERVE_FIRST_COLUMNS, serve_rows, serve_section
from clsbench.results import io as result_io
from clsbench.results.schema import DEFAULT_BACKEND as EAGER
from clsbench.results.schema import BenchmarkResult, Measurement, backend_suffix
from clsbench.serving import records
from clsbench.serving.analysis import (
    WORKLOAD_PREFIX,
    analyze_serve,
    compare_serve,
    is_serve_result,
    render_serve,
    render_serve_compare,
    scenario_summary,
    serve_model,
    unmatched_text,
)
from clsbench.serving.config import ServerConfig, ServeSettings, default_threads
from clsbench.serving.scenario import ScenarioContext
from clsbench.version import __version__

#: Version of the ``settings["serve"]`` block and of the step records.
SERVE_FORMAT = 1
#: The scenarios whose batch is fixed by LoadGen, not by the batching setting: their measurement's batch size.
FIXED_BATCH = {"single-stream": 1, "multi-stream": 8}

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


def serve(settings: ServeSettings, output: str | Path | None = None, *, execution: Execution = Execution(),
          loadgen: ModuleType | None = None) -> ServeOutcome:
    """Run ``clsbench serve``; see the module docstring.

    Args:
        settings: what to serve (validated here); its ``input_size``, ``seed`` and ``compile_mode`` are the
            shared measurement options (:meth:`ServeSettings.with_options`).
        output: the result file (must not exist; its log folder neither); None keeps the result in memory and the
            logs in a temporary folder.
        execution: ``env``: the environment to record (None: read now); ``progress``: called with an event dict:
            ``{"kind": "step", "step": record}`` after every LoadGen run, ``{"kind": "setup", ...}`` after each
            server warm-up, ``{"kind": "skip", ...}`` for a skipped mode; ``clock``: the host clock of the batcher
            and the server (tests). Isolation, overlap and the probe do not apply: a server runs in this process.
        loadgen: the ``mlperf_loadgen`` module (None: imported; a missing LoadGen is one InvalidInputError).

    Raises:
        InvalidInputError: bad settings, an unknown model, mode or scenario, LoadGen missing (before any file).
        ResultFileError: the output or its log folder exists, or cannot be written.
        ServeInterrupted: Ctrl-C; the finished runs are saved.
    """
    import torch

    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.scenarios import SCENARIOS, ordered
    from clsbench.serving.loadgen import import_loadgen, loadgen_version
    from clsbench.system.machine import environment as machine_environment

    settings.validate()
    target = None
    if settings.target is not None:
        lg = loadgen or import_loadgen()
        path, log_root = _output_paths(output)  # a file that exists fails before the server is asked anything
        target = connect_target(settings)  # nothing listening, an unknown model, a bad input: one line, no file
        modes: tuple[str, ...] = (TARGET_MODE,)
        settings = dataclasses.replace(settings, modes=modes, scenarios=tuple(ordered(settings.scenarios)),
                                       input_size=target.facts["input"]["input_size"])
    else:
        get_model_spec(settings.model)  # an unknown model fails here, with suggestions, before any file
        modes = tuple(dict.fromkeys(parse_mode(m).name for m in settings.modes))
        settings = dataclasses.replace(settings, modes=modes, scenarios=tuple(ordered(settings.scenarios)))
        _check_device(settings.device)
        lg = loadgen or import_loadgen()
        path, log_root = _output_paths(output)
    environment = execution.env if execution.env is not None else machine_environment(settings.device)
    facts: dict[str, Any] = {"format": SERVE_FORMAT, "settings": settings.to_dict(), "log_dir": log_root.name,
                             "loadgen_version": loadgen_version(lg), "setups": [], "searches": [], "modes": {}}
    run = _Run(settings, path, log_root, lg, execution.progress, execution.clock, BenchmarkResult(
        environment=environment, settings={"serve": facts},
        created_utc=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        tool={"name": "clsbench", "version": __version__}))
    threads = settings.threads or default_threads(os.cpu_count() or 1, max(settings.instances))
    previous_threads = torch.get_num_threads()
    facts["torch_threads"] = threads
    run.save()  # claims the path, and proves it writable, before anything is built
    log_root.mkdir(parents=True, exist_ok=False)
    torch.set_num_threads(threads)
    try:
        if target is not None:
            run.serve_target(target, [SCENARIOS.get(name) for name in settings.scenarios])
        for mode in modes if target is None else ():
            for backend in settings.backends:
                run.serve_mode(mode, [SCENARIOS.get(name) for name in settings.scenarios], backend)
    except KeyboardInterrupt as exc:
        from clsbench.serving.loadgen import LoadGenGaveUp

        run.save()
        raise ServeInterrupted(run.outcome(), abandoned=isinstance(exc, LoadGenGaveUp)) from None
    finally:
        torch.set_num_threads(previous_threads)
    return run.outcome()


#: The mode (and line) of a ``--target`` server's measurements: the server runs its model as deployed, in whatever
#: precision and backend its repository says (recorded under ``settings["serve"]["target"]``).
TARGET_MODE = "triton"
#: The device of a ``--target`` server's measurements: not this machine's.
TARGET_DEVICE = "remote"


def connect_target(settings: ServeSettings) -> Any:
    """Reach ``settings.target`` and warm its model up (:class:`clsbench.serving.triton_target.TritonTarget`).

    Raises:
        InvalidInputError: a bad target text, nothing listening, an unknown or unready model, an input that is not
            one image tensor, or one of another size than ``--input-size`` (one line each).
    """
    from clsbench.serving.triton_target import TritonTarget, parse_target

    target = TritonTarget(parse_target(str(settings.target)), headers=dict(settings.target_headers) or None,
                          max_in_flight=settings.target_max_in_flight)
    try:
        target.connect(settings.input_size)
    except BaseException:
        target.close()
        raise
    return target


def target_config(config: dict[str, Any]) -> ServerConfig:
    """The batching setting a Triton model config declares, in clsbench's terms: max batch (``max_batch_size``; 1
    for a model that does not batch), max delay (``max_queue_delay_microseconds``), instances (the instance groups'
    counts) and the preferred batch sizes as buckets."""
    max_batch = max(1, int(config.get("max_batch_size") or 0))
    dynamic = config.get("dynamic_batching") or {}
    delay_ms = float(dynamic.get("max_queue_delay_microseconds") or 0) / 1000.0
    instances = sum(int(g.get("count") or 1) for g in config.get("instance_group") or []) or 1
    preferred = [int(b) for b in dynamic.get("preferred_batch_size") or [] if 1 <= int(b) <= max_batch]
    return ServerConfig(max_batch, delay_ms, instances, tuple(sorted({*preferred, max_batch})))


def _output_paths(output: str | Path | None) -> tuple[Path | None, Path]:
    """The result file and LoadGen's log folder beside it, both checked to be new (a temporary folder when the
    result stays in memory).

    Raises:
        ResultFileError: the file or the folder exists, or the file cannot be written.
    """
    if output is None:
        return None, Path(tempfile.mkdtemp(prefix="clsbench-serve-")) / "serve.loadgen"
    path = Path(output)
    result_io.check_writable(path, exists_hint="choose another --output")
    log_root = loadgen_dir(path)
    if log_root.exists():
        raise ResultFileError(f"{log_root} already exists; clsbench never overwrites LoadGen's logs",
                              "choose another --output, or move the folder away")
    return path, log_root


def failure_of(text: str) -> tuple[Reason, str]:
    """A failure's reason code and its text from a server failure (``model_error: RuntimeError: boom``); a prefix
    that is no known code is a crash."""
    try:
        return Reason(text.split(":", 1)[0].strip()), text
    except ValueError:
        return Reason.CRASH, text


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
        self.status: dict[tuple[str, str], tuple[Status, Reason, str]] = {}
        self.offline_qps: dict[tuple[str, int, int], float] = {}
        self.index = 0
        self.lines: dict[str, tuple[str, str]] = {}  # line label -> (mode, backend)
        self.max_batch: dict[str, int] = {}  # line label -> its max batch, where not the settings' (a target's)
        self._pools: dict[int, Any] = {}

    # ----------------------------------------------------------------------------------------- the file

    def outcome(self) -> ServeOutcome:
        return ServeOutcome(self.result, self.path, self.log_root)

    def save(self) -> None:
        measurements = []
        for (line, scenario), steps in self.steps.items():
            mode, backend = self.lines[line]
            status, reason, detail = self.status.get((line, scenario), (Status.OK, None, None))
            if status == Status.OK and steps and all(step.get("error") for step in steps):
                status = Status.FAILED
                reason, detail = failure_of(str(steps[0]["error"]).removeprefix("not run: "))
            summary = scenario_summary(scenario, steps, self.facts["settings"], searches=self.facts["searches"],
                                       line=line) if status == Status.OK else {}
            batch = FIXED_BATCH.get(scenario, self.max_batch.get(line, max(self.settings.max_batches)))
            measurements.append(Measurement(
                model=self.settings.model, workload=WORKLOAD_PREFIX + scenario, mode=mode, batch_size=batch,
                device=TARGET_DEVICE if mode == TARGET_MODE and self.settings.target else self.settings.device,
                status=status, input_size=self.settings.input_size, reason=reason,
                detail=detail, repeats=tuple(steps), summary=summary, backend=backend))
        self.result = dataclasses.replace(self.result, settings={"serve": self.facts},
                                          measurements=tuple(measurements))
        if self.path is not None:
            result_io.save(self.result, self.path)

    def _ensure(self, mode: str, scenario: str) -> list[dict[str, Any]]:
        return self.steps.setdefault((mode, scenario), [])

    # ----------------------------------------------------------------------------------------- one mode

    def serve_mode(self, mode: str, scenarios: list[Any], backend: str = EAGER) -> None:
        """Serve ``mode`` on ``backend`` (one *line* of the result, labelled ``mode @backend`` unless eager) under
        every batching setting and scenario."""
        from clsbench.backends import ArtifactCache, BackendNotRun
        from clsbench.serving.instance import UnsupportedBackendError, UnsupportedModeError, build_engine
        from clsbench.serving.server import failure_reason

        s = self.settings
        line = mode + backend_suffix(backend)
        self.lines[line] = (mode, backend)
        buckets = sorted({b for c in s.configs() for b in c.buckets})
        try:
            engine = build_engine(s.model, mode, s.device, input_size=s.input_size, seed=s.seed,
                                  compile_mode=s.compile_mode, cuda_graphs=s.cuda_graphs, backend=backend,
                                  buckets=buckets, cache=ArtifactCache(s.cache_dir), no_cache=s.no_cache,
                                  progress=lambda event: self.progress({**event, "mode": line}))
        except UnsupportedModeError as exc:
            self._mark(line, scenarios, Status.SKIPPED, Reason.UNSUPPORTED_MODE, exc.message)
            return
        except UnsupportedBackendError as exc:
            self._mark(line, scenarios, Status.SKIPPED, Reason.UNSUPPORTED_BACKEND, exc.message)
            return
        except BackendNotRun as exc:  # a bucket's artifact failed: this line's failure, recorded; the rest goes on
            self.facts["modes"][line] = {"mode": mode, "backend": backend, "artifacts": exc.facts}
            self._mark(line, scenarios, Status(exc.status), Reason(exc.reason), exc.detail)
            return
        except InvalidInputError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model that cannot be built fails its mode, not the call
            self._mark(line, scenarios, Status.FAILED, *failure_of(failure_reason(exc)))
            return
        self.facts["modes"][line] = {"flags": engine.flags, "notes": dict(engine.prepared.notes),
                                     "cuda_graphs": engine.cuda_graphs, "input_size": engine.input_size}
        if engine.runners is not None:
            self.facts["modes"][line].update(mode=mode, backend=backend, artifacts=engine.runners.facts())
        try:
            self._serve_engine(line, engine, scenarios)
        finally:
            if engine.runners is not None:  # the per-instance load times are known once the servers set up
                self.facts["modes"][line]["artifacts"] = engine.runners.facts()
                self.save()

    def serve_target(self, target: Any, scenarios: list[Any]) -> None:
        """Drive a running server (``--target``) through every scenario: its model config is the one batching
        setting, its warm-up the latency estimate; the scenarios' own searches run as against clsbench's server."""
        line = TARGET_MODE
        self.lines[line] = (line, EAGER)
        config = target_config(target.facts.get("config") or {})
        self.max_batch[line] = config.max_batch
        for scenario in scenarios:
            self._ensure(line, scenario.name)
        try:
            pool = target.load_pool(self.settings.sample_count, self.settings.seed)
            self.facts["target"] = {**target.facts, "pool": pool, "setting": config.to_dict()}
            error = target.start()
            estimates = _estimates(target.setup_facts)
            setup = {"mode": line, "max_batch": config.max_batch, "instances": config.instances,
                     "buckets": list(config.buckets), "cuda_graphs": False, "error": error,
                     "instances_facts": target.setup_facts, "estimates": estimates, "target": target.facts["url"]}
            self.facts["setups"].append(setup)
            self.save()
            self.progress({"kind": "setup", **setup})
            for scenario in scenarios:  # the server's own delay rule holds for every scenario: nothing is forced
                self._serve_scenario(line, scenario, config, target, estimates)
        finally:
            target.close()

    def _serve_engine(self, mode: str, engine: Any, scenarios: list[Any]) -> None:
        s = self.settings
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

    def _mark(self, mode: str, scenarios: list[Any], status: Status, reason: Reason, detail: str) -> None:
        for scenario in scenarios:
            self._ensure(mode, scenario.name)
            self.status[(mode, scenario.name)] = (status, reason, detail)
        self.save()
        self.progress({"kind": "skip", "mode": mode, "status": status, "reason": reason, "detail": detail})

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
        from clsbench.serving.instance import SamplePool

        if engine.input_size not in self._pools:
            self._pools[engine.input_size] = SamplePool(self.settings.sample_count, engine.input_size,
                                                        self.settings.seed, pin=engine.device.type == "cuda")
        return self._pools[engine.input_size]

    def _start_server(self, mode: str, engine: Any, config: ServerConfig) -> tuple[Any, dict[str, Any]]:
        import torch

        from clsbench.serving.batcher import DynamicBatcher
        from clsbench.serving.instance import ModelInstance
        from clsbench.serving.server import Server

        pool = self._pool(engine)
        # Unless --threads says, each setting's instances share half the cores (default_threads): one instance gets
        # the threads two would share, so a 1,2 search compares each count at its own best.
        threads = self.settings.threads or default_threads(os.cpu_count() or 1, config.instances)
        torch.set_num_threads(threads)
        instances = [ModelInstance(k, engine, pool, config.buckets, self.clock) for k in range(config.instances)]
        batcher = DynamicBatcher(config.max_batch, config.max_delay_ms, config.buckets, self.clock)
        overlap = self.settings.overlap and engine.device.type == "cuda"  # a CPU computes inside start()
        server = Server(instances, batcher, batch_timeout_s=self.settings.batch_timeout_s, clock=self.clock,
                        depth=2 if overlap else 1)
        error = server.start()
        estimates = _estimates(server.setup_facts)
        setup = {"mode": mode, "max_batch": config.max_batch, "instances": config.instances,
                 "buckets": list(config.buckets), "cuda_graphs": config.cuda_graphs, "overlap": overlap, "error": error,
                 "torch_threads": threads, "instances_facts": server.setup_facts, "estimates": estimates}
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
        from clsbench.serving.loadgen import LoadGenGaveUp, run_loadgen
        from clsbench.serving.logs import parse_logs

        self.index += 1
        record: dict[str, Any] = {"index": self.index, "mode": self.lines[mode][0], "scenario": scenario, "role": role,
                                  "setting": config.to_dict(), "params": params.to_dict(), "loadgen": {},
                                  "server": {}, "error": None, "log_dir": None, "wall_s": 0.0,
                                  "started_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        if self.lines[mode][1] != EAGER:
            record["backend"] = self.lines[mode][1]
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
                server.abort(f"{Reason.LOADGEN_ERROR}: {type(exc).__name__}: {exc}")
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



# ------------------------------------------------------------------------------------------------ compare

#: Units of a scenario answer where higher is better (the rest are latencies, in ms).
RATE_UNITS = frozenset({"samples/s", "qps"})
#: Run labels of a comparison, as ``compare`` names them (A is the baseline).
RUN_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def slowdown_pct(row: dict[str, Any]) -> float | None:
    """How much slower run B's answer is than A's, in percent (negative: faster); None without both answers."""
    a, b = row.get("a"), row.get("b")
    if not a or b is None:
        return None
    return (1.0 - b / a) * 100.0 if row.get("unit") in RATE_UNITS else (b / a - 1.0) * 100.0


def significantly_slower(row: dict[str, Any]) -> bool:
    """Whether Welch's test on the runs at the answer (``--confirm``) finds B slower: lower completed QPS for a rate
    answer, higher p99 for a latency answer. False when significance was not assessed."""
    rate = row.get("unit") in RATE_UNITS
    test = (row.get("tests") or {}).get("completed_qps" if rate else "p99_ms") or {}
    if not test.get("significant") or test.get("b_larger") is None:
        return False
    return test["b_larger"] != rate


def compare_runs(results: Sequence[BenchmarkResult], names: Sequence[str], alpha: float) -> ProcedureComparison:
    """``compare`` for serve results: each run's answers (server QPS, offline samples/s, single-stream p90, ...)
    and p99 against the first run's, per mode and scenario, with Welch's t-test on completed QPS and on p99 where
    both runs repeated their answer (``serve --confirm N``); otherwise the text says significance was not assessed.

    Raises:
        InvalidInputError: fewer than two results, more than :data:`RUN_LABELS` names, or a run with no (mode,
            scenario) in common with the first.
    """
    from clsbench.analysis.compare import same_hardware_warnings

    if len(results) < 2 or len(results) != len(names):
        raise InvalidInputError("compare needs at least two serve results, one name each",
                                "e.g. clsbench compare serve-a.json serve-b.json")
    if len(results) > len(RUN_LABELS):
        raise InvalidInputError(f"compare takes at most {len(RUN_LABELS)} runs, got {len(results)}")
    labels = RUN_LABELS[:len(results)]
    lines = [f"{label}: {name}" for label, name in zip(labels, names, strict=True)]
    lines += [f"warning: {w}" for w in same_hardware_warnings(results, labels)]
    data: dict[str, Any] = {"procedure": "serve", "alpha": alpha, "runs": dict(zip(labels, names, strict=True)),
                            "comparisons": []}
    rows: list[dict[str, Any]] = []
    slowdowns: list[tuple[str, float]] = []
    models = [serve_model(result) for result in results]
    for label, name, result, model in zip(labels[1:], names[1:], results[1:], models[1:], strict=True):
        if model != models[0]:
            # Answers of two networks are not one configuration measured twice: a ratio would read as a speed-up.
            raise InvalidInputError(f"{name} served {model} and {names[0]} served {models[0]}: serve results of "
                                    "different models are not compared",
                                    "compare serve results of one model (show prints each on its own)")
        comparison = compare_serve(results[0], result, alpha=alpha)
        apart = unmatched_text(comparison)
        if not comparison["rows"]:
            raise InvalidInputError(
                f"{name} and {names[0]} have no (mode, scenario) in common"
                + (f" at one input size ({names[0]} vs {name}): {apart}" if apart else ""),
                "serve both at the same --input-size" if apart else
                "compare serve results of the same modes and scenarios")
        data["comparisons"].append({"run": label, "against": labels[0], **comparison})
        lines += ["", f"{label} against {labels[0]} (Welch's t-test at alpha {alpha:g} on the runs at each answer):",
                  *("  " + line for line in render_serve_compare(comparison).splitlines())]
        if apart:
            lines.append(f"  warning: not compared, served at another input size ({labels[0]} vs {label}): {apart}")
        for row in comparison["rows"]:
            slower = slowdown_pct(row)
            rows.append(_flat_row(label, name, row, slower))
            if slower is not None and slower > 0 and significantly_slower(row):
                slowdowns.append((f"{row['mode']} {row['scenario']} ({row['label']}): {label} ({name}) is "
                                  f"{slower:.1f}% slower than {labels[0]}", slower))
    return ProcedureComparison(text="\n".join(lines) + "\n", data=data, rows=rows, slowdowns=slowdowns)


def _flat_row(label: str, name: str, row: dict[str, Any], slower: float | None) -> dict[str, Any]:
    flat = {"run": name, "run_label": label, "mode": row["mode"], "scenario": row["scenario"],
            "input_size": row.get("input_size"), "answer": row["label"], "unit": row["unit"], "baseline": row["a"],
            "value": row["b"], "ratio": row["ratio"], "slowdown_pct": slower, "baseline_p99_ms": row["a_p99_ms"],
            "p99_ms": row["b_p99_ms"], "baseline_converged": not row.get("a_bound"),
            "converged": not row.get("b_bound")}
    for test_name, test in (row.get("tests") or {}).items():
        flat[f"{test_name}_p"] = test.get("p")
        flat[f"{test_name}_significant"] = test.get("significant") if test.get("p") is not None else None
        flat[f"{test_name}_n"] = f"{test.get('n_a', 0)}/{test.get('n_b', 0)}"
    return flat


#: Where serve's section stands in the HTML report: after tune's, before soak's.
SERVE_SECTION_ORDER = 20

PROCEDURES.register("serve", ProcedureView(
    "serve", lambda result: render_serve(analyze_serve(result)), compare=compare_runs,
    html=HtmlSection("serving", "Serving", SERVE_SECTION_ORDER, serve_section), rows=serve_rows,
    first_columns=SERVE_FIRST_COLUMNS, holds=is_serve_result, throughput_bars=False))
