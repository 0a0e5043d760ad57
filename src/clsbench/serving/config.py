"""What one ``clsbench serve`` does: frozen settings, their validation, and the batching settings to try.

The defaults are MLPerf Inference's, cited where they come from (``loadgen/mlperf.conf`` and LoadGen's
``test_settings.h`` in mlcommons/inference), except the minimum duration of a LoadGen run: a quick look of
:data:`QUICK_MIN_DURATION_S` unless MLPerf's :data:`MLPERF_MIN_DURATION_S` is asked for (``--mlperf``). The result
file records what was used.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.core.options import MeasureOptions
from clsbench.errors import InvalidInputError

#: MLPerf's minimum duration of every performance run, all scenarios (mlperf.conf: ``*.*.min_duration = 600000``).
MLPERF_MIN_DURATION_S = 600.0
#: The default minimum duration of a LoadGen run: a quick look. A server search makes about 8 LoadGen runs per
#: batching setting, so at MLPerf's 600 s one setting takes over an hour; at 10 s one setting's offline,
#: single-stream and server search take about three minutes, and a plain ``clsbench serve`` (two settings: 1 and 2
#: instances, single-stream once) about five. The queries each run
#: must reach stay MLPerf's, so a short run still holds enough samples for its percentiles.
QUICK_MIN_DURATION_S = 10.0

#: The instance counts a serve tries unless told: both, since neither wins both scenarios. On an H100 (ResNet-50
#: export-frozen fp16+cl with CUDA graphs, max batch 128, benchmarks/README "The copy stream in the serving loop"),
#: 1 instance served 22,859 qps within p99 <= 15 ms against 20,831 for 2 (two batches side by side are slower and
#: fail the bound first), while 2 served 25,154 samples/s offline against 23,597 for 1.
DEFAULT_INSTANCES = (1, 2)

#: The fields of :class:`~clsbench.core.options.MeasureOptions` that ``serve`` shares with the other commands.
SHARED_OPTIONS = ("input_size", "seed", "compile_mode")
#: MLPerf's ResNet-50 Server latency bound (mlperf.conf: ``resnet50.Server.target_latency = 15`` ms).
MLPERF_RESNET50_SERVER_BOUND_MS = 15.0
#: Server: the latency percentile held to the bound (mlperf.conf: ``*.Server.target_latency_percentile = 99``).
SERVER_LATENCY_PERCENTILE = 0.99
#: SingleStream: the percentile reported as the result (mlperf.conf: ``*.SingleStream.target_latency_percentile``).
SINGLE_STREAM_PERCENTILE = 0.90
#: MultiStream: samples per query and the percentile reported (mlperf.conf: ``*.MultiStream.*``).
MULTI_STREAM_SAMPLES_PER_QUERY = 8
MULTI_STREAM_PERCENTILE = 0.99
#: Minimum query counts: Offline ResNet-50 (mlperf.conf ``resnet50.Offline.min_query_count``; Offline counts
#: samples), MultiStream (``*.MultiStream.min_query_count``), and LoadGen's own default for the rest.
OFFLINE_MIN_SAMPLES = 24576
MULTI_STREAM_MIN_QUERIES = 662
LOADGEN_DEFAULT_MIN_QUERIES = 100
#: Samples LoadGen may draw from (the QSL's performance set): ResNet-50's ``performance_sample_count_override``.
PERFORMANCE_SAMPLE_COUNT = 1024

#: The server-QPS search stops when the bracket [VALID, INVALID] is narrower than this fraction of its lower end.
DEFAULT_SEARCH_RESOLUTION = 0.02
#: Bracketing multiplies (or divides) the target by this until the verdict flips (the issue's "double").
SEARCH_GROWTH = 2.0
#: The lowest target the downward bracket tries before saying no target meets the bound.
MIN_TARGET_QPS = 1.0
#: Upper bound on LoadGen runs of one search, a guard against a verdict that never settles.
MAX_SEARCH_STEPS = 30
#: First target when nothing better is known (no offline run of the same setting); --start-qps overrides it.
DEFAULT_START_QPS = 100.0
#: With an offline run of the same setting, the first target is this fraction of its samples/s: a server cannot
#: beat offline throughput, and half of it is VALID on a healthy server, so the first doubling brackets.
START_FRACTION_OF_OFFLINE = 0.5

#: Requests outstanding at a ``--target`` server at once (each a batch-1 request; Triton's dynamic batcher needs
#: several queued to form batches, and perf_analyzer's users run concurrency in the tens for the same reason).
TARGET_MAX_IN_FLIGHT = 64

#: A batch running longer than this is a hung model: the LoadGen run ends INVALID (``timeout``) instead of waiting.
DEFAULT_BATCH_TIMEOUT_S = 120.0

SCENARIO_ORDER_HINT = "e.g. --scenario offline,single-stream,server"


@dataclass(frozen=True)
class ServerConfig:
    """One batching setting: what ``--max-batch``, ``--max-delay-ms`` and ``--instances`` combine into.

    Attributes:
        max_batch: the largest batch the batcher forms.
        max_delay_ms: how long the oldest queued request may wait for more to join its batch (Triton's
            ``max_queue_delay``); 0 dispatches whatever is queued as soon as an instance is free.
        instances: model instances (each a thread with its own CUDA stream and buffers) pulling batches.
        buckets: the batch shapes the instances run; a batch of n runs padded to the smallest bucket >= n.
        cuda_graphs: each instance replays a CUDA graph per bucket instead of launching kernels one by one.
    """

    max_batch: int
    max_delay_ms: float
    instances: int
    buckets: tuple[int, ...]
    cuda_graphs: bool = False

    @property
    def label(self) -> str:
        graphs = " graphs" if self.cuda_graphs else ""
        return f"b{self.max_batch} d{self.max_delay_ms:g}ms i{self.instances}{graphs}"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["buckets"] = list(self.buckets)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ServerConfig:
        return cls(int(data["max_batch"]), float(data["max_delay_ms"]), int(data["instances"]),
                   tuple(int(b) for b in data["buckets"]), bool(data.get("cuda_graphs", False)))


def make_buckets(max_batch: int, explicit: Sequence[int] | None = None) -> tuple[int, ...]:
    """The batch shapes for ``max_batch``: powers of two below it and ``max_batch`` itself (few shapes, so few
    cuDNN plans and CUDA graphs, and at most half a batch of padding), or the ``explicit`` sizes plus ``max_batch``.
    """
    if explicit:
        sizes = {int(b) for b in explicit if 1 <= int(b) <= max_batch}
    else:
        sizes = {1 << k for k in range(max_batch.bit_length()) if (1 << k) <= max_batch}
    sizes.add(max_batch)
    return tuple(sorted(sizes))


def bucket_for(n: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds ``n`` requests (buckets ascending, ``n`` <= the largest)."""
    return buckets[bisect.bisect_left(buckets, n)]


@dataclass(frozen=True)
class ServeSettings:
    """Everything one ``clsbench serve`` does; stored under ``settings["serve"]`` in the result file.

    Attributes:
        model: model name (``clsbench models``).
        modes: canonical execution modes, served one after another.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        scenarios: scenario names (see :mod:`clsbench.scenarios`), run in this order per batching setting.
        max_batches, max_delays_ms, instances: the batching settings to try (their cross product).
        buckets: explicit bucket sizes (None: powers of two up to each max batch).
        cuda_graphs: capture a CUDA graph per bucket per instance (GPU only).
        latency_bound_ms: the Server scenario's bound on the ``latency_percentile`` latency.
        latency_percentile: the Server percentile held to the bound (MLPerf: 0.99).
        min_duration_s: minimum duration of every LoadGen run (default: a quick look of
            :data:`QUICK_MIN_DURATION_S`; MLPerf: :data:`MLPERF_MIN_DURATION_S`).
        min_queries: minimum query count of every run (None: MLPerf's per scenario).
        search_resolution: the server search stops when its bracket is this narrow (fraction of its lower end).
        start_qps: the server search's first target (None: half the offline samples/s of the same setting, else
            :data:`DEFAULT_START_QPS`).
        sample_count: images in the preloaded sample pool (LoadGen's performance sample set).
        input_size: square input side (None: the model's own).
        seed: seed of the weights, the sample pool and LoadGen's random schedules.
        batch_timeout_s: a batch running longer than this ends the LoadGen run as INVALID (``timeout``).
        compile_mode: torch.compile mode for ``+compile``.
        confirm: Server: LoadGen runs repeated at each setting's answer after its search, for the spread and for
            ``compare``'s significance test.
        max_search_steps: the most LoadGen runs one server search makes (per setting).
        threads: torch's intra-op threads while serving (None: :func:`default_threads`).
        overlap: on a GPU, each instance gathers its next batch while the device runs the current one (the server's
            ``depth`` 2, :mod:`clsbench.serving.server`); False runs each batch to the end first. A CPU computes on
            the host, so it never overlaps.
        backends: inference backends each mode is served on (:mod:`clsbench.backends`): ``eager`` serves the
            prepared module, the others the artifacts ``run --backend`` builds, one per bucket
            (:mod:`clsbench.serving.artifacts`).
        cache_dir: the artifact cache (None: its default location, as for ``run``).
        no_cache: build every artifact anew (the new build replaces the cache entry).
        target: a running inference server LoadGen drives instead of clsbench's own
            (``triton://HOST:PORT/MODEL``, :mod:`clsbench.serving.triton_target`); its model config decides the
            batching, so modes, backends and batching settings do not apply.
        target_headers: ``(name, value)`` pairs sent with every call to the target (an access token); only the
            names are stored.
        target_max_in_flight: requests outstanding at the target at once (the rest wait in the client queue).
    """

    model: str
    modes: tuple[str, ...]
    device: str
    scenarios: tuple[str, ...]
    max_batches: tuple[int, ...] = (64,)
    max_delays_ms: tuple[float, ...] = (2.0,)
    instances: tuple[int, ...] = DEFAULT_INSTANCES
    buckets: tuple[int, ...] | None = None
    cuda_graphs: bool = False
    latency_bound_ms: float = MLPERF_RESNET50_SERVER_BOUND_MS
    latency_percentile: float = SERVER_LATENCY_PERCENTILE
    min_duration_s: float = QUICK_MIN_DURATION_S
    min_queries: int | None = None
    search_resolution: float = DEFAULT_SEARCH_RESOLUTION
    start_qps: float | None = None
    sample_count: int = PERFORMANCE_SAMPLE_COUNT
    input_size: int | None = None
    seed: int = 0
    batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    compile_mode: str = "default"
    confirm: int = 0
    max_search_steps: int = MAX_SEARCH_STEPS
    threads: int | None = None
    overlap: bool = True
    backends: tuple[str, ...] = ("eager",)
    cache_dir: str | None = None
    no_cache: bool = False
    target: str | None = None
    target_headers: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    target_max_in_flight: int = TARGET_MAX_IN_FLIGHT

    @classmethod
    def with_options(cls, options: MeasureOptions, **fields: Any) -> ServeSettings:
        """Settings whose :data:`SHARED_OPTIONS` (input size, seed, compile mode) come from the options every
        command shares, and the rest from ``fields``."""
        return cls(**fields, **{name: getattr(options, name) for name in SHARED_OPTIONS})

    @property
    def mlperf_duration(self) -> bool:
        """Whether every LoadGen run lasts at least MLPerf's minimum (600 s)."""
        return self.min_duration_s >= MLPERF_MIN_DURATION_S

    def configs(self) -> list[ServerConfig]:
        """Every batching setting, in the order they are served (max batch, then instances, then delay)."""
        return [ServerConfig(b, d, i, make_buckets(b, self.buckets), self.cuda_graphs)
                for b in self.max_batches for i in self.instances for d in self.max_delays_ms]

    def validate(self) -> ServeSettings:
        """Check every field; raise InvalidInputError naming the option and a valid example.

        The checks run in a fixed order (what is served, batching, LoadGen, execution) and the first that fails
        is the error reported.
        """
        if not self.modes:
            raise InvalidInputError("no mode given", "e.g. --mode bf16+cl")
        if not self.scenarios:
            raise InvalidInputError("no scenario given", SCENARIO_ORDER_HINT)
        self._check_backends()
        self._check_target()
        self._check_batching()
        self._check_loadgen()
        self._check_execution()
        return self

    def _check_backends(self) -> None:
        """Every backend is a registered one (an unknown name is one line with the closest names)."""
        from clsbench.backends import get_backend

        if not self.backends:
            raise InvalidInputError("no backend given", "e.g. --backend eager,export")
        for name in self.backends:
            get_backend(name)

    def _check_target(self) -> None:
        """With a target, what clsbench would otherwise decide is the server's: one line for each clash."""
        if self.target is None:
            return
        if tuple(self.backends) != ("eager",):
            raise InvalidInputError("--backend applies to clsbench's own server; with --target the server's model "
                                    "runs as deployed", "drop --backend, or drop --target")
        if self.cuda_graphs:
            raise InvalidInputError("--cuda-graphs applies to clsbench's own server, not to --target",
                                    "drop --cuda-graphs")
        if isinstance(self.target_max_in_flight, bool) or not isinstance(self.target_max_in_flight, int) \
                or self.target_max_in_flight < 1:
            raise InvalidInputError(f"--max-in-flight must be >= 1, got {self.target_max_in_flight!r}",
                                    f"e.g. --max-in-flight {TARGET_MAX_IN_FLIGHT}")

    def _check_batching(self) -> None:
        """The batching settings tried: max batches, instances, max delays and the bucket sizes."""
        _positive_ints("--max-batch", self.max_batches, "e.g. --max-batch 32,64,128")
        _positive_ints("--instances", self.instances, "e.g. --instances 1,2")
        if not self.max_delays_ms or any(not _finite(d) or d < 0 for d in self.max_delays_ms):
            raise InvalidInputError(f"--max-delay-ms must be >= 0 ms, got {list(self.max_delays_ms)}",
                                    "e.g. --max-delay-ms 0,1,2")
        if self.buckets is not None:
            _positive_ints("--buckets", self.buckets, "e.g. --buckets 8,16,32,64")

    def _check_loadgen(self) -> None:
        """What LoadGen is asked for: the latency bound and its percentile, each run's minimum duration and
        queries, the server-QPS search's resolution and first target, and the samples it draws from."""
        if not _finite(self.latency_bound_ms) or self.latency_bound_ms <= 0:
            raise InvalidInputError(f"--latency-bound-ms must be > 0, got {self.latency_bound_ms:g}",
                                    "e.g. --latency-bound-ms 15 (MLPerf's ResNet-50 Server bound)")
        if not 0.5 <= self.latency_percentile < 1.0:
            raise InvalidInputError(f"latency percentile must lie in [0.5, 1), got {self.latency_percentile:g}",
                                    "e.g. 0.99")
        if not _finite(self.min_duration_s) or self.min_duration_s <= 0:
            raise InvalidInputError(f"--min-duration-s must be > 0, got {self.min_duration_s:g}",
                                    f"MLPerf uses {MLPERF_MIN_DURATION_S:g}; e.g. --min-duration-s 10 for a look")
        if self.min_queries is not None and self.min_queries < 1:
            raise InvalidInputError(f"--min-queries must be >= 1, got {self.min_queries}", "e.g. --min-queries 1000")
        if not _finite(self.search_resolution) or not 0.001 <= self.search_resolution <= 0.5:
            raise InvalidInputError(f"--resolution must lie in [0.001, 0.5], got {self.search_resolution:g}",
                                    "e.g. --resolution 0.02 (2%)")
        if self.start_qps is not None and (not _finite(self.start_qps) or self.start_qps < MIN_TARGET_QPS):
            raise InvalidInputError(f"--start-qps must be >= {MIN_TARGET_QPS:g}, got {self.start_qps:g}",
                                    "e.g. --start-qps 1000")
        if self.sample_count < 1:
            raise InvalidInputError(f"--samples must be >= 1, got {self.sample_count}", "e.g. --samples 1024")

    def _check_execution(self) -> None:
        """How the serving runs: the input size, the batch timeout, the confirming runs, the most LoadGen runs a
        search may make, torch's threads, and CUDA graphs (which need a CUDA device)."""
        if self.input_size is not None and not 16 <= self.input_size <= 4096:
            raise InvalidInputError(f"input size {self.input_size} is out of range", "use 16..4096")
        if not _finite(self.batch_timeout_s) or self.batch_timeout_s <= 0:
            raise InvalidInputError(f"--batch-timeout-s must be > 0, got {self.batch_timeout_s:g}",
                                    "e.g. --batch-timeout-s 120")
        if isinstance(self.confirm, bool) or not isinstance(self.confirm, int) or not 0 <= self.confirm <= 100:
            raise InvalidInputError(f"--confirm must be a whole number in 0..100, got {self.confirm!r}",
                                    "e.g. --confirm 2")
        if isinstance(self.max_search_steps, bool) or not isinstance(self.max_search_steps, int) \
                or self.max_search_steps < 1:
            raise InvalidInputError(f"--max-search-steps must be >= 1, got {self.max_search_steps!r}",
                                    f"e.g. --max-search-steps {MAX_SEARCH_STEPS}")
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise InvalidInputError(f"--threads must be >= 1, got {self.threads!r}", "e.g. --threads 4")
        if self.cuda_graphs and not self.device.startswith("cuda"):
            raise InvalidInputError("--cuda-graphs needs a CUDA device", "drop --cuda-graphs, or use --device cuda")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key, value in data.items():
            if isinstance(value, tuple):
                data[key] = list(value)
        data["target_headers"] = [name for name, _ in self.target_headers]  # a header's value may be a secret
        return data


def default_threads(cpu_count: int, instances: int) -> int:
    """torch's intra-op threads while serving: half the cores shared among the instances (the other half is left to
    LoadGen's and the server's Python threads). Each instance runs its own parallel regions (the batch gather, CPU
    compute), and threads that outnumber free cores make every region wait for a descheduled thread: on a loaded
    2-core machine the tiny test model's p99 went from 3.5 ms with one thread to 224 ms with two."""
    return max(1, cpu_count // (2 * max(1, instances)))


def parse_list(text: str | Iterable[str] | None, kind: type, option: str, example: str) -> tuple[Any, ...]:
    """Parse a comma list (or repeated option values) of ints or floats; bad input is one InvalidInputError."""
    if text is None:
        return ()
    parts = [text] if isinstance(text, str) else list(text)
    items = [p.strip() for part in parts for p in str(part).split(",") if p.strip()]
    values = []
    for item in items:
        try:
            value = kind(item)
        except ValueError:
            raise InvalidInputError(f"{option}: {item!r} is not a {'number' if kind is float else 'whole number'}",
                                    example) from None
        values.append(value)
    return tuple(dict.fromkeys(values))


def _positive_ints(option: str, values: Sequence[int], example: str) -> None:
    if not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
        raise InvalidInputError(f"{option} must be whole numbers >= 1, got {list(values)}", example)


def _finite(value: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
