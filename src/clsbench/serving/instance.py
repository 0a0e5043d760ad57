"""Model instances: the model prepared for a mode (:class:`Engine`), and one instance per serving thread.

The host side is what limits a Python server (a naive batcher that gathers and pins memory per batch reached
7,000 queries/s on an H200 that runs ResNet-50 at 15,600 img/s offline), so every per-batch cost is paid once, up
front:

- the samples are a preloaded uint8 pool (pinned on a GPU): building a batch is one ``index_select`` from the pool
  into the instance's pinned host buffer, no per-request tensor;
- each instance preallocates its pinned host input, device input and pinned host output buffers at the largest
  bucket; bucket b uses their first b rows, so every shape has fixed buffers (what CUDA graphs need); the host
  buffers and a device staging input come in two slots, so the next batch is gathered, and copied in, while the
  device still computes the current one (the server's ``depth`` 2);
- the copy in runs non-blocking on a copy stream of the instance's own, into the slot's staging input: behind a
  running batch it overlaps that batch's compute (one ResNet-50 batch of 128 at 224 px is 19 MB of uint8, 0.38 ms
  of copy on an H100, 7% of its compute). The compute stream waits for the copy, and the copy of a slot waits until
  the compute stream has read that slot's previous batch. Normalisation (uint8 -> model dtype, ImageNet mean and
  std), the forward pass and the top-1 class run on the instance's compute stream; only the top-1 ids (8 bytes a
  request) come back, non-blocking;
- with CUDA graphs, each instance captures the device part of every bucket once, over one fixed device input, and
  replays it after a device-to-device copy from the staging input (about 15 us for those 19 MB on an H100; timed
  in compute);
- stage times come from CUDA events on the two streams (read after the batch's one synchronisation), so timing adds
  no synchronisation of its own.

cuDNN keeps its autotuning cache per thread, so each instance warms up (and captures) in its own thread
(:meth:`ModelInstance.setup`), one at a time, before any LoadGen run.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from clsbench.errors import InvalidInputError
from clsbench.measure.clock import Clock, WallClock
from clsbench.modes import ExecutionMode, Prepared, parse_mode
from clsbench.serving.batcher import Batch

#: ImageNet mean and std of the RGB channels (torchvision's classification presets), in 0..1 units.
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
UINT8_MAX = 255.0
#: Untimed calls per bucket before capture / timing (PyTorch's CUDA-graph notes: a few warm-up iterations on a side
#: stream, which also lets cuDNN autotune in this thread).
WARMUP_CALLS = 3
#: Timed calls per bucket for the warm-up latency estimate (sizes LoadGen's pre-generated queries; not a result).
ESTIMATE_CALLS = 3


class UnsupportedModeError(InvalidInputError):
    """The mode cannot run on this device (the scenarios of that mode are recorded as skipped with the reason)."""


@dataclass
class Engine:
    """A model prepared for one mode (and backend) on one device, shared (read-only) by every instance.

    Attributes:
        prepared: the mode's prepared model (forward, input dtype and memory format, autocast).
        device: where it runs.
        input_size: the square input side.
        mode: the mode's canonical name as asked (``+cudagraph`` included).
        cuda_graphs: instances capture one CUDA graph per bucket.
        flags: the process-wide flags the mode set (stored in the result).
        backend: the inference backend (:mod:`clsbench.backends`); ``eager`` runs ``prepared`` itself.
        runners: an artifact backend's loaded runners per instance and bucket
            (:class:`~clsbench.serving.artifacts.BackendRunners`); None for eager.
    """

    prepared: Prepared
    device: torch.device
    input_size: int
    mode: str
    cuda_graphs: bool
    flags: dict[str, Any] = field(default_factory=dict)
    backend: str = "eager"
    runners: Any = None

    def __post_init__(self) -> None:
        dtype = self.input_dtype
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float32) * UINT8_MAX
        scale = 1.0 / (torch.tensor(IMAGENET_STD, dtype=torch.float32) * UINT8_MAX)
        self._mean = mean.view(1, 3, 1, 1).to(self.device, dtype)
        self._scale = scale.view(1, 3, 1, 1).to(self.device, dtype)

    @property
    def input_dtype(self) -> torch.dtype:
        """The dtype the network takes (an artifact's own, else the mode's)."""
        return self.runners.input_dtype if self.runners is not None else self.prepared.input_dtype

    @property
    def memory_format(self) -> torch.memory_format:
        """The layout the network takes (ONNX Runtime and TensorRT take NCHW at their boundary whatever the mode)."""
        return self.runners.memory_format if self.runners is not None else self.prepared.memory_format

    @property
    def capture_mode(self) -> str:
        """CUDA's stream-capture mode for the instances' graphs: *relaxed* around an artifact's runner (the
        AOTInductor runner queries an event between runs, which the default *global* mode forbids)."""
        return "relaxed" if self.runners is not None else "global"

    def load_instance(self, instance: int, buckets: Sequence[int]) -> None:
        """Give ``instance`` its own loaded runner of every bucket (artifact backends; nothing to do for eager)."""
        if self.runners is not None:
            self.runners.load_instance(instance, buckets)

    def compute(self, images: torch.Tensor, instance: int = 0) -> torch.Tensor:
        """uint8 images on the device -> top-1 class ids (int64), the whole device side of a batch (run by
        ``instance``'s own runner of the batch's bucket with an artifact backend)."""
        x = images.to(self.input_dtype).sub_(self._mean).mul_(self._scale)
        x = x.contiguous(memory_format=self.memory_format)
        if self.runners is not None:
            logits = self.runners.forward(instance, int(images.shape[0]))(x)
            logits = logits[0] if isinstance(logits, (tuple, list)) else logits
            return logits.argmax(dim=1)
        with self.prepared.autocast(self.device.type):
            logits = self.prepared.forward(x)
        return logits.argmax(dim=1)

    def precompile(self, buckets: Sequence[int]) -> None:
        """Call the forward pass once per bucket shape in this thread, so ``torch.compile`` compiles before any
        instance thread runs it (compilation is slow and best not raced by several threads)."""
        with torch.inference_mode():
            for bucket in buckets:
                images = torch.zeros((bucket, 3, self.input_size, self.input_size), dtype=torch.uint8,
                                     device=self.device)
                self.compute(images)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


class UnsupportedBackendError(InvalidInputError):
    """The backend cannot serve this mode here (the setting's scenarios are recorded as skipped with the reason)."""


def build_engine(model: str, mode: str, device: str, *, input_size: int | None, seed: int, compile_mode: str,
                 cuda_graphs: bool, backend: str = "eager", buckets: Sequence[int] = (), cache: Any = None,
                 no_cache: bool = False, progress: Callable[[dict[str, Any]], None] | None = None) -> Engine:
    """Build the seeded model, move it to ``device`` and prepare it for ``mode`` (and ``backend``).

    ``+cudagraph`` in the mode means CUDA graphs per bucket (the mode's own single-shape capture cannot serve several
    batch sizes), so it is taken out of the mode and done by the instances instead. An artifact backend builds (or
    takes from the cache) one artifact per bucket of ``buckets`` and checks each for parity
    (:func:`clsbench.serving.artifacts.build_runners`); the eager module is then released from the device.

    Raises:
        UnsupportedModeError: the mode cannot run here (with the mode's own reason).
        UnsupportedBackendError: the backend cannot run the mode here (with the backend's own reason).
        clsbench.backends.BackendNotRun: a bucket's artifact failed to build, load or pass parity.
        InvalidInputError: an unknown model, mode or backend.
    """
    from clsbench.backends import backend_unsupported_reason
    from clsbench.models import get_model_spec

    spec = get_model_spec(model)
    parsed = parse_mode(mode)
    if parsed.captured:
        cuda_graphs = True
        parsed = ExecutionMode(parsed.name, tuple(c for c in parsed.components if c.name != "cudagraph"))
    dev = torch.device(device)
    if cuda_graphs and dev.type != "cuda":
        raise UnsupportedModeError("CUDA graphs need a CUDA device; this device is " + dev.type)
    size = input_size or spec.input_size
    if backend != "eager":
        from clsbench.backends import BackendRequest

        asked = parsed.name + ("+cudagraph" if cuda_graphs else "")
        reason = backend_unsupported_reason(backend, BackendRequest(
            model=spec.name, mode=asked, batch_size=max(buckets or (1,)), input_size=size, device=device, seed=seed))
        if reason:
            raise UnsupportedBackendError(reason)
    capability = torch.cuda.get_device_capability(dev) if dev.type == "cuda" else (0, 0)
    ctx = parsed.context(dev, "inference", bf16_supported=dev.type != "cuda" or torch.cuda.is_bf16_supported(),
                         tf32_supported=capability >= (8, 0), compile_mode=compile_mode)
    reason = parsed.unsupported_reason(ctx)
    if reason:
        raise UnsupportedModeError(reason)
    flags = parsed.configure(ctx)
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True  # autotuned in each instance's untimed warm-up
        flags["cudnn_benchmark"] = True
    net = spec.build(seed=seed, input_size=size).eval().to(dev)
    prepared = parsed.prepare(net, ctx)
    if cuda_graphs:
        prepared.autocast_cache = False  # cached casts would be freed after capture, leaving the graphs dangling
    if backend == "eager":
        return Engine(prepared, dev, size, mode, cuda_graphs, flags)
    from clsbench.backends import ArtifactCache
    from clsbench.serving.artifacts import build_runners, serve_requests

    requests = serve_requests(spec.name, parsed.name, device, buckets, input_size=size, seed=seed)
    runners = build_runners(backend, prepared, requests, cache=cache if cache is not None else ArtifactCache(),
                            no_cache=no_cache, progress=progress)
    with contextlib.suppress(Exception):  # the artifacts hold their own weights: free the eager module's
        net.to("meta")
    return Engine(prepared, dev, size, mode, cuda_graphs, flags, backend=backend, runners=runners)


#: Host buffer slots per instance: the batch the device works on and the one being gathered (at most two started).
SLOTS = 2


@dataclass
class _Ticket:
    """A started batch: its host slot and the stage times known so far."""

    slot: int
    stages: dict[str, float]


class SamplePool:
    """The preloaded samples LoadGen's indices point into: seeded random uint8 images, pinned on a GPU host.

    Random pixels cost a classification network exactly what real ones do; uint8 is what a server receives.
    """

    def __init__(self, count: int, input_size: int, seed: int, *, pin: bool) -> None:
        generator = torch.Generator().manual_seed(seed)
        data = torch.randint(0, 256, (count, 3, input_size, input_size), dtype=torch.uint8, generator=generator)
        self.data = data.pin_memory() if pin else data
        self.count = count


class ModelInstance:
    """One model instance: its buffers, its stream, its graphs; runs one batch at a time in its own thread.

    Args:
        index: the instance number (for messages).
        engine: the shared prepared model.
        pool: the shared sample pool.
        buckets: the batch shapes, ascending.
        clock: the host clock of the gather and complete stages (and of everything on a CPU).
    """

    def __init__(self, index: int, engine: Engine, pool: SamplePool, buckets: Sequence[int],
                 clock: Clock | None = None) -> None:
        self.index = index
        self.engine = engine
        self.pool = pool
        self.buckets = tuple(sorted(buckets))
        self.clock = clock or WallClock()
        self.on_cuda = engine.device.type == "cuda"
        self._graphs: dict[int, tuple[Any, torch.Tensor]] = {}
        self._stream: Any = None  # compute and copy out
        self._copy_stream: Any = None  # copy in
        self._events: list[list[Any]] = []  # per slot: start, copied (copy stream), begun, computed, done (compute)
        self._read: list[Any] = []  # per slot: the compute stream has read the slot's staging input
        self._dev_stage: list[torch.Tensor] = []
        self._host_in: list[torch.Tensor] = []
        self._host_out: list[torch.Tensor] = []
        self._slot = 0
        self._tick: Callable[[], None] = lambda: None

    @contextlib.contextmanager
    def thread_context(self) -> Iterator[None]:
        """What the instance's thread runs inside: its device, inference mode (both are per thread)."""
        with contextlib.ExitStack() as stack:
            if self.on_cuda and self.engine.device.index is not None:
                torch.cuda.set_device(self.engine.device)
            stack.enter_context(torch.inference_mode())
            yield

    def setup(self, tick: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Allocate the buffers, warm up every bucket, capture the graphs; return the warm-up latency per bucket.

        ``tick()`` is called before each model call, so a watchdog can hold every call to a timeout.
        """
        self._tick = tick
        load_started = time.perf_counter()
        self.engine.load_instance(self.index, self.buckets)  # an artifact backend's own runners, in this thread
        load_s = time.perf_counter() - load_started
        largest, size = self.buckets[-1], self.engine.input_size
        device = self.engine.device
        self._host_in = [torch.empty((largest, 3, size, size), dtype=torch.uint8, pin_memory=self.on_cuda)
                         for _ in range(SLOTS)]
        self._host_out = [torch.empty((largest,), dtype=torch.int64, pin_memory=self.on_cuda) for _ in range(SLOTS)]
        self._dev_in = torch.empty((largest, 3, size, size), dtype=torch.uint8, device=device) \
            if self.on_cuda else self._host_in[0]
        if self.on_cuda:
            self._stream = torch.cuda.Stream(device)
            self._copy_stream = torch.cuda.Stream(device)
            self._dev_stage = [torch.empty_like(self._dev_in) for _ in range(SLOTS)]
            self._events = [[torch.cuda.Event(enable_timing=True) for _ in range(5)] for _ in range(SLOTS)]
            self._read = [torch.cuda.Event() for _ in range(SLOTS)]
            for read in self._read:  # created and reached: the first copy into each slot waits for nothing
                read.record(self._stream)
        started = time.perf_counter()
        latency: dict[str, float] = {}
        indices = [i % self.pool.count for i in range(largest)]
        for bucket in reversed(self.buckets):  # largest first: the allocator's pool is sized once
            batch = Batch(list(range(bucket)), indices[:bucket], bucket, 0, 0, 0)
            self._warm(bucket)
            times = []
            for _ in range(ESTIMATE_CALLS):
                tick()
                t0 = self.clock.now_ns()
                self.run(batch)
                times.append(self.clock.now_ns() - t0)
            latency[str(bucket)] = sorted(times)[len(times) // 2]
        facts: dict[str, Any] = {"bucket_latency_ns": latency, "setup_s": time.perf_counter() - started,
                                 "cuda_graphs": bool(self._graphs)}
        if self.engine.runners is not None:
            facts["artifact_load_s"] = load_s
        if self.on_cuda:
            facts["memory_allocated_bytes"] = torch.cuda.memory_allocated(device)
        return facts

    def _warm(self, bucket: int) -> None:
        images = self._dev_in[:bucket]
        if not self.on_cuda:
            for _ in range(WARMUP_CALLS):
                self._tick()
                self.engine.compute(images, self.index)
            return
        with torch.cuda.stream(self._stream):
            for _ in range(WARMUP_CALLS):
                self._tick()
                self.engine.compute(images, self.index)
        self._stream.synchronize()
        if self.engine.cuda_graphs:
            self._tick()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self._stream, capture_error_mode=self.engine.capture_mode):
                out = self.engine.compute(images, self.index)
            self._graphs[bucket] = (graph, out)

    def gather_ahead(self, row: int, indices: Sequence[int]) -> None:
        """Copy samples into rows ``row``... of the host slot the next :meth:`start` uses, before that batch leaves
        the queue (the server calls it while this instance's other slot is on the device; that batch's start then
        skips its first ``batch.gathered`` rows)."""
        if indices:
            rows = self._host_in[self._slot][row:row + len(indices)]
            torch.index_select(self.pool.data, 0, torch.tensor(indices, dtype=torch.int64), out=rows)

    def run(self, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """Run one batch to the end: :meth:`start`, then :meth:`finish`."""
        return self.finish(self.start(batch))

    def start(self, batch: Batch) -> _Ticket:
        """Gather the batch into the next host slot (from row ``batch.gathered``: the rows before were gathered ahead)
        and queue copy in, compute and copy out on the instance's stream (on a CPU: compute it). At most
        :data:`SLOTS` batches may be started and not finished."""
        n, bucket, ahead = len(batch.indices), batch.bucket, min(batch.gathered, len(batch.indices))
        slot = self._slot
        self._slot = (slot + 1) % SLOTS
        host_in, host_out = self._host_in[slot], self._host_out[slot]
        clock = self.clock
        t0 = clock.now_ns()
        if ahead < n:
            torch.index_select(self.pool.data, 0, torch.tensor(batch.indices[ahead:], dtype=torch.int64),
                               out=host_in[ahead:n])
        t1 = clock.now_ns()
        if not self.on_cuda:
            out = self.engine.compute(host_in[:bucket], self.index)
            t2 = clock.now_ns()
            host_out[:bucket].copy_(out)
            t3 = clock.now_ns()
            return _Ticket(slot, {"gather": float(t1 - t0), "copy_in": 0.0, "compute": float(t2 - t1),
                                  "copy_out": float(t3 - t2)})
        start, copied, begun, computed, done = self._events[slot]
        stage, read = self._dev_stage[slot][:bucket], self._read[slot]
        with torch.cuda.stream(self._copy_stream):
            self._copy_stream.wait_event(read)  # the slot's previous batch was read (at setup: reached already)
            start.record()
            stage.copy_(host_in[:bucket], non_blocking=True)
            copied.record()
        with torch.cuda.stream(self._stream):
            self._stream.wait_event(copied)
            begun.record()
            graph = self._graphs.get(bucket)
            if graph is not None:
                self._dev_in[:bucket].copy_(stage)
                read.record()
                graph[0].replay()
                out = graph[1]
            else:
                out = self.engine.compute(stage, self.index)
                read.record()
            computed.record()
            host_out[:bucket].copy_(out, non_blocking=True)
            done.record()
        return _Ticket(slot, {"gather": float(t1 - t0)})

    def ready(self, ticket: _Ticket) -> bool:
        """Whether the started batch's device work is done (its last event reached; a CPU batch is done in start)."""
        return not self.on_cuda or bool(self._events[ticket.slot][4].query())

    def finish(self, ticket: _Ticket) -> tuple[torch.Tensor, dict[str, float]]:
        """Wait for a started batch. Returns the host top-1 ids (the first ``batch.size`` are the answers; valid until
        the slot's next :meth:`start`) and the stage times in ns (gather, copy_in, compute, copy_out; the device's
        from CUDA events, so a batch queued behind another is timed from when the stream reached it)."""
        stages = ticket.stages
        if self.on_cuda:
            start, copied, begun, computed, done = self._events[ticket.slot]
            done.synchronize()
            ms_to_ns = 1e6
            stages.update(copy_in=start.elapsed_time(copied) * ms_to_ns,
                          compute=begun.elapsed_time(computed) * ms_to_ns,
                          copy_out=computed.elapsed_time(done) * ms_to_ns)
        return self._host_out[ticket.slot], stages

    def close(self) -> None:
        self._graphs.clear()
