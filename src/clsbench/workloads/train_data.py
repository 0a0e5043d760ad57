"""train on real data: the train workload's step, fed by a data pipeline; every step split into data wait and
compute.

Used instead of :class:`~clsbench.workloads.train.Train` when the cell has data settings (``Cell.data``). The step is
the same (:func:`~clsbench.workloads.step.make_step`, as the mode asks) with the same optimizer, scaler and NaN
flag; the stop rule and block planning are the same :class:`~clsbench.workloads.base.StopWatch`. In order:

1. **data set-up** (``data_setup_s``, host clock): open the source (scan the directory; for ``folder``, read every
   file once to warm the OS cache; for ``memory``, read every file into RAM);
2. **stages** (``stage_probe_s``; pipelines that offer it, the gpu pipeline): read, decode and augment measured
   each alone on a few batches (:mod:`clsbench.data.stages`), stored as ``data.stages``;
3. **data start-up** (``data_startup_s``): start the pipeline (DataLoader workers, producer thread) and wait for its
   first batch, synchronised;
4. **first call** (``first_iteration_s``): one training step on that batch, synchronised (cuDNN autotuning);
5. **warm-up**: (next batch, step, synchronise) until the warm-up rule holds;
6. **drain**: batches the pipeline prepared ahead while the GPU waited on those synchronisations are thrown away
   (``drained_batches``) until taking one has to wait for it, so the timed region starts at the pipeline's own
   pace instead of living off a buffer for its first seconds;
7. **timed blocks**: synchronise, read the clock; per iteration: take the next prepared batch and read the clock
   (``data_wait_ms``: host time waiting for the pipeline), place it on the device and read the clock
   (``copy_ms``: the cpu pipeline's host-to-device copy call, which from unpinned memory first waits for the
   previous step to finish, as a plain ``.to(device)`` does; the gpu pipeline's stream hand-over), record a CUDA
   event, step, record an event, read the clock; at the end synchronise and read the clock. Throughput is images /
   summed block wall time, as for synthetic data.

An epoch that begins in the timed region (the cpu pipeline's DataLoader starts over, restarting its workers unless
persistent, then refills in order) is part of it, as in real training; the data wait of each such first batch is
also kept apart (``epoch_start_wait_ms``) so its share can be told from the steady pace.

Per iteration on a GPU: ``step_ms`` is the event interval around the step (the GPU time of its work), ``idle_ms``
the interval from the previous step's end event to this step's start event: time in which the training stream had
no work, because the host was still waiting for data, or the stream waited for the batch (its copy, or the gpu
pipeline's ready event). GPU idle fraction = sum(idle_ms) / sum(iteration_ms). On the CPU the step runs
synchronously, ``step_ms`` is host time and the idle fraction is the data-wait share of the wall time.

GPU busy-time profiling (docs/methodology/power-and-efficiency.md) is not run: the idle fraction measured between events
replaces it, and profiling a pipeline's side stream would mix decode work into the model's busy time. A profile
(``run --profile``, ``clsbench profile``) runs a few more steps from the same stream after the timed region and the
pipeline's facts, with the wait for each batch and its placing on the device marked as the ``data_wait`` and
``copy`` phases (a gpu pipeline's decode kernels count in the phase open when they were launched).

After all that, with the stream closed, a pipeline that offers it (the gpu pipeline) profiles its decode and each
augmentation alone for the GPU time they really take (:func:`clsbench.data.stages.measure_stage_busy`), stored as
``data.stages.busy``; its seconds count in ``stage_probe_s``. Nothing is profiled before or during the timed region.
"""

from __future__ import annotations

from typing import Any

import torch

from clsbench.analysis import stats
from clsbench.data import get_pipeline, get_source
from clsbench.data.base import BatchSpec
from clsbench.data.errors import DataError, PipelineUnsupportedError
from clsbench.measure.clock import NS_PER_MS, NS_PER_S
from clsbench.measure.device import synchronize
from clsbench.measure.profiler import phase
from clsbench.workloads.base import NonFiniteLossError, StopWatch, WorkloadContext, WorkloadOutput
from clsbench.workloads.loop import ESTIMATE_WINDOW
from clsbench.workloads.step import build_optimizer, make_step

#: Taking a batch that takes at least this long means nothing was prepared ahead any more (the drain stops).
DRAIN_WAIT_S = 0.002
#: Names of files that failed to decode kept in a result (their count is always complete).
MAX_NAMED_FAILURES = 50
#: Characters of a failed stage probe's error kept in the record.
MAX_ERROR_CHARS = 300


def drain_limit(settings: Any) -> int:
    """At most this many batches are thrown away: everything the pipeline can hold ahead, with a margin."""
    return max(1, settings.num_workers) * (settings.prefetch_factor or 2) + 4


class _Block:
    """The per-batch series of the timed region, filled block by block."""

    def __init__(self) -> None:
        self.iteration_ms: list[float] = []
        self.wait_ms: list[float] = []
        self.copy_ms: list[float] = []
        self.epoch_start_ms: list[float] = []  # the data wait of each timed batch that began an epoch
        self.step_ms: list[float] = []
        self.idle_ms: list[float] = []

    def run(self, stream: Any, step: Any, n: int, clock: Any, device: torch.device) -> int:
        """Train ``n`` batches back to back from ``stream``, splitting each into data wait, copy and compute;
        return the block's wall ns (synchronised edges)."""
        on_cuda = device.type == "cuda"
        synchronize(device)
        start = clock.now_ns()
        marks: list[tuple[Any, Any]] = []
        block_start = None
        if on_cuda:
            block_start = torch.cuda.Event(enable_timing=True)
            block_start.record()
        last = start
        for _ in range(n):
            item = stream.take()
            got = clock.now_ns()
            images, labels = stream.place(item)
            placed = clock.now_ns()
            self.wait_ms.append((got - last) / NS_PER_MS)
            self.copy_ms.append((placed - got) / NS_PER_MS)
            if getattr(stream, "began_epoch", False):
                self.epoch_start_ms.append(self.wait_ms[-1])
            if on_cuda:
                begin, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                step(images, labels)
                end_event.record()
                marks.append((begin, end_event))
                last = clock.now_ns()
            else:
                step(images, labels)
                previous, last = last, clock.now_ns()
                self.step_ms.append((last - placed) / NS_PER_MS)
                self.iteration_ms.append((last - previous) / NS_PER_MS)
        if not on_cuda:
            return last - start
        synchronize(device)
        end = clock.now_ns()
        previous_event = block_start
        for begin, end_event in marks:
            self.idle_ms.append(previous_event.elapsed_time(begin))
            self.step_ms.append(begin.elapsed_time(end_event))
            self.iteration_ms.append(previous_event.elapsed_time(end_event))
            previous_event = end_event
        return end - start


def _open_dataset(settings: Any, batch: int, num_classes: int) -> Any:
    """The source's dataset for ``settings``, checked against the batch size and the model's classes."""
    dataset = get_source(settings.source).open(settings)
    if dataset is None:
        raise DataError("the synthetic source has no files; train without data settings instead")
    if len(dataset) < batch:
        raise DataError(f"{dataset.index.root} has {len(dataset)} usable images, fewer than one batch of "
                        f"{batch}", "use a smaller --batch-size or more images")
    if len(dataset.index.classes) > num_classes:
        raise DataError(f"{dataset.index.root} has {len(dataset.index.classes)} classes; the model has "
                        f"{num_classes} outputs")
    return dataset


def measure_pipeline_stages(pipeline: Any, dataset: Any, spec: BatchSpec, clock: Any) -> tuple[dict[str, Any] | None,
                                                                                              int]:
    """The pipeline's stages measured alone before training (``measure_stages``, a pipeline's optional method: the
    gpu pipeline's), and the ns it took; (None, 0) for a pipeline without it. A failure there is recorded in the
    record's place (``{"error": ...}``) and training is still measured; a pipeline that cannot run here is skipped
    as from ``open``."""
    probe = getattr(pipeline, "measure_stages", None)
    if probe is None:
        return None, 0
    t0 = clock.now_ns()
    try:
        stages = probe(dataset, spec, clock)
    except (PipelineUnsupportedError, DataError):
        raise
    except Exception as exc:  # noqa: BLE001 - the probe is a side measurement: recorded, training goes on
        stages = {"error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]}
    return stages, clock.now_ns() - t0


def measure_stage_busy(pipeline: Any, dataset: Any, spec: BatchSpec) -> dict[str, Any] | None:
    """The GPU busy time of the pipeline's decode and augmentations, each alone, after the timed region and with the
    stream closed (``measure_stage_busy``, a pipeline's optional method: the gpu pipeline's;
    :func:`clsbench.data.stages.measure_stage_busy`); None for a pipeline without it or off CUDA. A failure is
    recorded in its place (``{"error": ...}``): the measurement is complete already."""
    probe = getattr(pipeline, "measure_stage_busy", None)
    if probe is None or spec.device.type != "cuda":
        return None
    try:
        return probe(dataset, spec)
    except Exception as exc:  # noqa: BLE001 - a side measurement after the figures: recorded, never fatal
        return {"error": f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]}


class _Stepper:
    """The training step of a real-data run and its non-finite-loss check (one host sync per check, not per step)."""

    def __init__(self, ctx: WorkloadContext) -> None:
        prepared, device = ctx.prepared, ctx.device
        prepared.model.train()
        optimizer = build_optimizer(prepared, ctx.train)
        scaler = torch.amp.GradScaler(device.type) if prepared.grad_scaler else None
        self._run_step = make_step(prepared, optimizer, scaler, device)
        self._nonfinite = torch.zeros((), dtype=torch.bool, device=device)
        self.last_loss: list[torch.Tensor] = []
        self.last_value: list[float] = []

    def step(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        detached = self._run_step(images, labels).detach()
        torch.logical_or(self._nonfinite, ~torch.isfinite(detached), out=self._nonfinite)
        self.last_loss[:] = [detached]

    def check_finite(self) -> None:
        if bool(self._nonfinite):
            raise NonFiniteLossError(f"loss became non-finite (last loss {float(self.last_loss[0])})")
        self.last_value[:] = [float(self.last_loss[0])]


class TrainWithData:
    name = "train"
    kind = "train"

    def run(self, ctx: WorkloadContext) -> WorkloadOutput:
        settings = ctx.cell.data
        if settings is None:
            raise ValueError("TrainWithData needs a cell with data settings")
        device, prepared, clock = ctx.device, ctx.prepared, ctx.clock
        pipeline = get_pipeline(settings.pipeline)
        reason = pipeline.unsupported_reason(device, settings)
        if reason:
            raise PipelineUnsupportedError(reason)
        on_cuda = device.type == "cuda"
        batch = ctx.cell.batch_size

        t0 = clock.now_ns()
        dataset = _open_dataset(settings, batch, ctx.num_classes)
        setup_ns = clock.now_ns() - t0

        stepper = _Stepper(ctx)
        step, check_finite, last_loss, last_value = (stepper.step, stepper.check_finite, stepper.last_loss,
                                                      stepper.last_value)

        spec = BatchSpec(batch_size=batch, input_size=ctx.input_size, device=device,
                         memory_format=prepared.memory_format, dtype=prepared.input_dtype, seed=ctx.data_seed,
                         settings=settings)
        stages, stages_ns = measure_pipeline_stages(pipeline, dataset, spec, clock)
        failures: list[str] = []
        timing = False
        t0 = clock.now_ns()
        stream = pipeline.open(dataset, spec)
        try:
            images, labels = stream.next()
            synchronize(device)
            startup_ns = clock.now_ns() - t0

            t0 = clock.now_ns()
            step(images, labels)
            synchronize(device)
            first_ns = clock.now_ns() - t0
            first_loss = float(last_loss[0])

            warm = StopWatch(ctx.stop, warmup=True)
            warm_ns: list[int] = []
            while not warm.done:
                t0 = clock.now_ns()
                images, labels = stream.next()
                step(images, labels)
                synchronize(device)
                elapsed = clock.now_ns() - t0
                warm.add(1, elapsed)
                warm_ns.append(elapsed)
            check_finite()
            estimate_ns = stats.median(warm_ns[-ESTIMATE_WINDOW:]) if warm_ns else float(first_ns or 1)
            del images, labels
            drained = stream.drain(drain_limit(settings), DRAIN_WAIT_S)
            failures.extend(stream.take_failures())

            timed = StopWatch(ctx.stop)
            series = _Block()
            blocks = 0
            synchronize(device)
            ctx.timed_region_started()
            timing = True
            while not timed.done:
                n = timed.plan_block(estimate_ns)
                timed.add(n, series.run(stream, step, n, clock, device))
                blocks += 1
                if timed.iterations:
                    estimate_ns = timed.elapsed_ns / timed.iterations
                check_finite()
            telemetry = ctx.timed_region_ended()
            timing = False
            failures.extend(stream.take_failures())
            pipeline_facts = stream.facts()

            def profiled_step() -> None:
                with phase("data_wait"):
                    item = stream.take()
                with phase("copy"):
                    batch = stream.place(item)
                step(*batch)

            profile = ctx.profile_steps(profiled_step, timed.elapsed_ns / NS_PER_MS / timed.iterations)
        finally:
            if timing:
                ctx.timed_region_ended()
            stream.close()
        if stages is not None and "error" not in stages:
            t0 = clock.now_ns()
            busy = measure_stage_busy(pipeline, dataset, spec)
            if busy is not None:
                stages["busy"] = busy
                stages_ns += clock.now_ns() - t0

        samples: dict[str, Any] = {
            "iteration_ms": series.iteration_ms,
            "images": timed.iterations * batch,
            "wall_s": timed.elapsed_ns / NS_PER_S,
            "blocks": blocks,
            "iteration_clock": "cuda_events" if on_cuda else "host",
            "data_wait_ms": series.wait_ms,
            "copy_ms": series.copy_ms,
            "epoch_start_wait_ms": series.epoch_start_ms,
            "step_ms": series.step_ms,
            "idle_ms": series.idle_ms if on_cuda else None,
            "loss_first": first_loss,
            "loss_last": last_value[0],
        }
        timings = {
            "data_setup_s": setup_ns / NS_PER_S,
            "data_startup_s": startup_ns / NS_PER_S,
            "first_iteration_s": first_ns / NS_PER_S,
            "warmup_iterations": warm.iterations,
            "warmup_s": warm.elapsed_ns / NS_PER_S,
        }
        if stages is not None:
            timings["stage_probe_s"] = stages_ns / NS_PER_S
        data = {
            "settings": settings.to_dict(),
            "dataset": dataset.index.facts(),
            "source": dataset.facts(),
            "pipeline": pipeline_facts,
            "drained_batches": drained,
            "decode_failures_n": len(failures),
            "decode_failures": sorted(set(failures))[:MAX_NAMED_FAILURES],
            "idle_method": "cuda_events" if on_cuda else "host",
        }
        if stages is not None:
            data["stages"] = stages
        return WorkloadOutput(samples=samples, timings=timings, validity=timed.validity(), telemetry=telemetry,
                              data=data, profile=profile)
