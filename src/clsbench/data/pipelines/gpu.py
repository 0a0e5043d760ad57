"""The ``gpu`` pipeline: read encoded bytes on the CPU, decode them (on the GPU in batches by default), augment on the
GPU.

Three threads in the training process, each a stage feeding the next through a small queue, so that reading,
decoding and augmenting different batches overlap each other and the training step (the pipeline's pace is that
of its slowest stage, not the sum of the three):

1. **read**: the encoded bytes of a batch, from a DataLoader whose ``num_workers`` workers only read files (0: the
   thread reads them itself; with the memory source reading is a slice of RAM). Workers hand a batch back as one
   concatenated uint8 tensor, so a batch costs one shared-memory transfer, not one per file;
2. **decode**, on its own CUDA stream, by the decoder the settings name (``--gpu-decode``,
   :data:`clsbench.data.base.DECODERS`): ``nvjpeg`` (the default: ``torchvision.io.decode_jpeg(list_of_tensors,
   device=cuda)``, on the hardware JPEG decoder where the GPU has one, for baseline JPEGs; the call returns when its
   batch is decoded; :mod:`clsbench.data.decoders.nvjpeg`), ``cpu`` (libjpeg-turbo on a pool of threads, the
   crops sent in one copy per batch; :mod:`clsbench.data.decoders.cpu`) or ``split`` (each batch shared between
   the two at once; :mod:`clsbench.data.decoders.split`). A damaged image is named and replaced by
   another image of the batch. Then each image's crop and flip are drawn (:func:`clsbench.data.augment.choices`)
   and the decoder places the images on the device; an event marks the end of the batch on the stream;
3. **augment**, on another stream that first waits for that event: RandomResizedCrop, flips and normalisation
   for the whole batch, straight into the mode's dtype and memory format, by the augmentation the settings name
   (``--gpu-augment``, :data:`clsbench.data.base.AUGMENTS`): ``batched`` (the default; a few batched operations
   per batch around one ``roi_align``, :mod:`clsbench.data.augments.batched`), ``separable`` (the antialiased
   resize as two batched matmuls, :mod:`clsbench.data.augments.separable`) or ``per-image`` (one antialiased
   resize per image, :mod:`clsbench.data.augments.per_image`); the decoded images are marked as used on this
   stream (``record_stream``) so their memory is not reused too early; an event marks the batch ready, and it
   waits in a queue ``prefetch_factor`` (default 2) deep.

The training thread takes a batch, makes its current stream wait for the ready event (``wait_event``: no host
synchronisation) and marks the tensors as used on that stream (``record_stream``) so the caching allocator does not
reuse their memory before the training step has read them. A batch not ready within the data timeout fails the
measurement (``data_loader_timeout``); an exception in any stage fails it with that exception.

Before the stream starts, :meth:`GpuPipeline.measure_stages` measures each stage alone (read, decode, every
augmentation; their device time per batch and peak memory: :mod:`clsbench.data.stages`); the train workload stores
that in the result's data facts (``stages``), and ``clsbench diagnose`` prints the stage rates and the slowest.

Needs CUDA (and, for the ``nvjpeg`` decoder, torchvision built with nvJPEG); elsewhere the measurement is skipped with
the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from clsbench.core.data_settings import DataSettings
from clsbench.data.augment import EpochSampler, choices, device_table
from clsbench.data.base import (
    AUGMENTS,
    DECODERS,
    DEFAULT_AUGMENT,
    DEFAULT_DECODER,
    PIPELINES,
    BatchSpec,
    EncodedDataset,
    StreamRecord,
    check_device_pipeline,
    loader_context,
    shutdown_loader,
)
from clsbench.data.errors import DataError, DataLoaderTimeoutError, DataWorkerError, translate_loader_error
from clsbench.data.running import RunningStages, StageMeter
from clsbench.system.processes import worker_processes_allowed

#: Batches ready ahead (after augmentation) when ``prefetch_factor`` is not given.
DEFAULT_DEPTH = 2
#: Batches waiting between the read and decode stages, and between the decode and augment stages.
STAGE_DEPTH = 2
#: How often blocked queue operations look at the stop flag and at the other side's health, in seconds.
POLL_S = 0.2
#: Seconds ``close`` waits for the stage threads to finish their current batch.
JOIN_S = 10.0
#: Environment variables for two experiments on how the pipeline shares the process and the GPU with the step
#: (docs/methodology/data.md 16.4.4); each value in force is in the result's pipeline facts:
#: the interpreter's switch interval while the pipeline runs, in ms (``sys.setswitchinterval``; Python's own is 5 ms:
#: how long a thread running Python keeps the GIL from one that waits for it), restored when the pipeline closes;
SWITCH_ENV = "CLSBENCH_GPU_SWITCH_MS"
#: the priority of the pipeline's streams (torchvision's decoder stream, :mod:`clsbench.data.decoder_stream`, and
#: the augment stream): ``high`` (the GPU should hand their kernels its free blocks before the step's waiting ones;
#: measured on the H200 on 2026-12-02, it changed neither the nvJPEG decode beside a busy GPU nor the pipeline) or
#: ``normal`` (the default: the same as the step's).
PRIORITY_ENV = "CLSBENCH_GPU_STREAM_PRIORITY"
DEFAULT_PRIORITY = "normal"
#: CUDA stream priorities: lower is more urgent; torch maps a value outside the device's range to its nearest end.
STREAM_PRIORITIES = {"normal": 0, "high": -1}


def switch_interval_s(environ: Any = None) -> float | None:
    """The switch interval :data:`SWITCH_ENV` asks for, in seconds, or None (leave Python's)."""
    from clsbench.errors import InvalidInputError

    raw = (os.environ if environ is None else environ).get(SWITCH_ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.01 <= value <= 100:
        raise InvalidInputError(f"{SWITCH_ENV}={raw!r} is not a switch interval in ms",
                                "set it to a number from 0.01 to 100 (Python's own is 5), or unset it")
    return value / 1e3


def stream_priority(environ: Any = None) -> str:
    """The decode and augment streams' priority that :data:`PRIORITY_ENV` asks for (a key of
    :data:`STREAM_PRIORITIES`)."""
    from clsbench.errors import InvalidInputError

    raw = (os.environ if environ is None else environ).get(PRIORITY_ENV, "").strip().lower() or DEFAULT_PRIORITY
    if raw not in STREAM_PRIORITIES:
        raise InvalidInputError(f"{PRIORITY_ENV}={raw!r} is not a stream priority",
                                f"set it to one of {', '.join(STREAM_PRIORITIES)}, or unset it")
    return raw


class EncodedBatches(torch.utils.data.Dataset):
    """Map-style dataset over ``(epoch, index)`` keys: the encoded bytes of one image, its label and format."""

    def __init__(self, encoded: EncodedDataset) -> None:
        self.encoded = encoded

    def __len__(self) -> int:
        return len(self.encoded)

    def __getitem__(self, key: tuple[int, int]) -> tuple[tuple[int, int], torch.Tensor | None, str | None]:
        index = key[1]
        try:
            return key, self.encoded.read(index), None
        except OSError as exc:
            return key, None, f"{self.encoded.index.files[index]} ({exc.strerror or exc})"


@dataclass
class RawBatch:
    """Encoded images of one batch (views into one buffer when a worker made it)."""

    keys: list[tuple[int, int]]
    encoded: list[torch.Tensor | None]
    unreadable: list[str]


def collate_encoded(samples: list[tuple[tuple[int, int], torch.Tensor | None, str | None]]) -> Any:
    """In a worker: one concatenated uint8 tensor plus offsets (one shared-memory transfer per batch). In the
    training process: the list as it is (nothing to transfer)."""
    keys = [s[0] for s in samples]
    unreadable = [s[2] for s in samples if s[2]]
    tensors = [s[1] for s in samples]
    if torch.utils.data.get_worker_info() is None:
        return RawBatch(keys, tensors, unreadable)
    present = [t for t in tensors if t is not None]
    lengths = [0 if t is None else int(t.numel()) for t in tensors]
    joined = torch.cat(present) if present else torch.empty(0, dtype=torch.uint8)
    return keys, joined, lengths, unreadable


def unpack(batch: Any) -> RawBatch:
    if isinstance(batch, RawBatch):
        return batch
    keys, joined, lengths, unreadable = batch
    encoded: list[torch.Tensor | None] = []
    start = 0
    for n in lengths:
        encoded.append(joined[start:start + n] if n else None)
        start += n
    return RawBatch(list(keys), encoded, list(unreadable))


@dataclass
class DecodedBatch:
    """Decoded images of one batch on the device (ready when ``done`` has completed on the decode stream)."""

    keys: list[tuple[int, int]]
    images: list[torch.Tensor]
    indices: list[int]  # the dataset index each image is (a replaced image takes its substitute's)
    boxes: list[tuple[int, int, int, int]]  # each image's crop (top, left, height, width), within the image
    flips: list[bool]
    failures: list[str]
    done: torch.cuda.Event


@dataclass
class DeviceBatch:
    images: torch.Tensor
    labels: torch.Tensor
    ready: torch.cuda.Event
    failures: list[str]


class _Failure:
    """An exception raised in a stage, handed down the queues to the training thread."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class GpuStream(StreamRecord):
    """The three stage threads and their queues (module docstring)."""

    def __init__(self, dataset: EncodedDataset, spec: BatchSpec, facts: dict[str, Any]) -> None:
        self.dataset = dataset
        self.spec = spec
        self.settings = spec.settings
        self.device = spec.device
        if spec.device.type == "cuda" and spec.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.augment = AUGMENTS.get(self.settings.augment or DEFAULT_AUGMENT)
        priority = stream_priority()
        switch_s = switch_interval_s()
        self._previous_switch_s = sys.getswitchinterval()
        self.decode_stream = torch.cuda.Stream(device=self.device, priority=STREAM_PRIORITIES[priority])
        self.augment_stream = torch.cuda.Stream(device=self.device, priority=STREAM_PRIORITIES[priority])
        self.decoder = DECODERS.get(self.settings.decoder or DEFAULT_DECODER).open(self.device)
        switch_ms = round((switch_s or self._previous_switch_s) * 1e3, 4)
        facts = {**facts, "switch_interval_ms": switch_ms, "stream_priority": priority}
        if priority == "high" and self.device.type == "cuda":
            from clsbench.data.decoder_stream import raise_decoder_priority

            facts["decoder_stream"] = raise_decoder_priority(self.device)
        depth = self.settings.prefetch_factor or DEFAULT_DEPTH
        self.raw: queue.Queue[Any] = queue.Queue(maxsize=STAGE_DEPTH)
        self.decoded: queue.Queue[Any] = queue.Queue(maxsize=STAGE_DEPTH)
        self.ready: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        StreamRecord.__init__(self, facts)
        try:
            self.loader = torch.utils.data.DataLoader(
                EncodedBatches(dataset), batch_size=spec.batch_size, sampler=EpochSampler(len(dataset), spec.seed),
                drop_last=True, collate_fn=collate_encoded, num_workers=self.settings.num_workers,
                **({"timeout": self.settings.timeout_s, "persistent_workers": self.settings.persistent_workers,
                    "multiprocessing_context": loader_context()} if self.settings.num_workers else {}))
            # Start the reading workers from this thread, before any stage thread exists (forking with one thread).
            self._iterator: Any = self._new_epoch()
        except BaseException:
            self.decoder.close()
            raise
        self.meters = [StageMeter(name) for name in ("read", "decode", "augment")]
        self.running = RunningStages(self.meters)
        self.threads = [
            # The read stage takes no input: its work is fetching the next batch of encoded bytes.
            threading.Thread(target=self._stage, args=(self.meters[0], self._token, self._read_next, self.raw, None),
                             name="clsbench-gpu-read", daemon=True),
            threading.Thread(target=self._stage, args=(self.meters[1], self._getter(self.raw), self._decode_batch,
                                                       self.decoded, self.decode_stream), name="clsbench-gpu-decode",
                             daemon=True),
            threading.Thread(target=self._stage, args=(self.meters[2], self._getter(self.decoded), self._augment,
                                                       self.ready, self.augment_stream), name="clsbench-gpu-augment",
                             daemon=True),
        ]
        if switch_s is not None:
            sys.setswitchinterval(switch_s)
        for thread in self.threads:
            thread.start()

    # ------------------------------------------------------------------------------------------- stage threads

    def _new_epoch(self) -> Any:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*DataLoader will create")
            with worker_processes_allowed():
                iterator = iter(self.loader)
        self.epochs += 1
        return iterator

    def _next_raw(self) -> RawBatch:
        try:
            try:
                return unpack(next(self._iterator))
            except StopIteration:
                self._iterator = self._new_epoch()
                return unpack(next(self._iterator))
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001 - DataLoader errors become data failures with a reason
            translated = translate_loader_error(exc)
            if translated is exc:
                raise
            raise translated from exc

    def _getter(self, source: queue.Queue[Any]) -> Any:
        def get() -> Any:
            while not self.stop.is_set():
                try:
                    return source.get(timeout=POLL_S)
                except queue.Empty:
                    continue
            return None

        return get

    def _put(self, target: queue.Queue[Any], item: Any) -> bool:
        while not self.stop.is_set():
            try:
                target.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _token(self) -> Any:
        """The read stage's input: something to do until the pipeline stops."""
        return None if self.stop.is_set() else True

    def _read_next(self, _token: Any) -> RawBatch:
        return self._next_raw()

    def _stage(self, meter: StageMeter, get: Any, work: Any, target: queue.Queue[Any],
               stream: torch.cuda.Stream | None) -> None:
        def done(item: Any) -> bool:
            if item is None:  # stopped
                return True
            if isinstance(item, _Failure):  # an earlier stage failed: hand it on and end
                self._put(target, item)
                return True
            return False

        try:
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            with torch.no_grad(), (torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()):
                meter.run(get, work, lambda out: self._put(target, out), self.stop, done)
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread, which raises it
            self._put(target, _Failure(exc))

    def _decode_batch(self, raw: RawBatch) -> DecodedBatch:
        """Decode (by the settings' decoder), replace the images that failed, choose each image's crop and flip,
        and have the decoder place the images on the device (on the decode stream, the current stream of this
        thread)."""
        index = self.dataset.index
        failures = list(raw.unreadable)
        decoded = self.decoder.decode(raw.encoded, [index.kinds[j] for _, j in raw.keys])
        failures += [index.files[j] for (_, j), data, image in zip(raw.keys, raw.encoded, decoded, strict=True)
                     if data is not None and image is None]
        good = [i for i, image in enumerate(decoded) if image is not None]
        if not good:
            raise DataError(f"no image of a batch of {len(raw.keys)} could be decoded in {index.root} "
                            f"(first: {index.files[raw.keys[0][1]]})", "check it with `clsbench data check DIR`")
        indices = [key[1] for key in raw.keys]
        images: list[torch.Tensor] = []
        for n, image in enumerate(decoded):
            if image is None:  # replace a damaged image by a good one of the same batch
                substitute = good[n % len(good)]
                image, indices[n] = decoded[substitute], indices[substitute]
            images.append(image)
        boxes, flips = [], []
        for (epoch, _), j, image in zip(raw.keys, indices, images, strict=True):
            box, flip = choices(self.spec.seed, epoch, j, int(image.shape[-2]), int(image.shape[-1]))
            boxes.append(box)
            flips.append(flip)
        images, boxes = self.decoder.place(images, boxes)
        done = torch.cuda.Event()
        done.record(self.decode_stream)
        return DecodedBatch(raw.keys, images, indices, boxes, flips, failures, done)

    def _augment(self, batch: DecodedBatch) -> DeviceBatch:
        """Crop, flip, resize and normalise on the augment stream (the current stream of this thread)."""
        stream = self.augment_stream
        stream.wait_event(batch.done)
        images = self.augment.apply(batch.images, batch.boxes, batch.flips, self.spec.input_size,
                                    self.spec.memory_format, self.spec.dtype)
        for image in batch.images:  # allocated on the decode stream, read on this one
            image.record_stream(stream)
        # Asynchronous: a blocking copy from pageable memory would make this thread wait until the GPU has run
        # everything queued on the augment stream, which shares the GPU with the training step.
        labels = device_table([self.dataset.index.labels[i] for i in batch.indices], self.device)
        ready = torch.cuda.Event()
        ready.record(stream)
        return DeviceBatch(images, labels, ready, batch.failures)

    # ------------------------------------------------------------------------------------------ training thread

    def _take(self) -> DeviceBatch:
        deadline = time.monotonic() + self.settings.timeout_s
        while True:
            try:
                item = self.ready.get(timeout=POLL_S)
            except queue.Empty:
                # A failing stage hands its exception down before it ends, so only the last stage's end without
                # anything in its queue means that something ended without saying why.
                if not self.threads[-1].is_alive() and self.ready.empty():
                    raise DataWorkerError("the gpu pipeline's last stage ended without a batch") from None
                if time.monotonic() >= deadline:
                    raise DataLoaderTimeoutError(
                        f"the gpu pipeline delivered no batch within {self.settings.timeout_s:g} s") from None
                continue
            if isinstance(item, _Failure):
                raise item.exc
            return item

    def take(self) -> DeviceBatch:
        batch = self._take()
        self._failures.extend(batch.failures)
        return batch

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.place(self.take())

    def place(self, batch: DeviceBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """Make the current stream wait for the batch (no host synchronisation) and keep its memory until used."""
        current = torch.cuda.current_stream(self.device)
        current.wait_event(batch.ready)
        batch.images.record_stream(current)
        batch.labels.record_stream(current)
        return batch.images, batch.labels

    def drain(self, max_batches: int, wait_s: float) -> int:
        """As :func:`drain_ready`, but a batch counts as "had to wait" only once nothing decoded waits between the
        stages either: decoded batches would otherwise give the timed region a head start on the decoder."""
        capacity = (self.ready.maxsize + self.decoded.maxsize + self.raw.maxsize + len(self.threads)
                    + 2 * self.settings.num_workers)
        dropped = 0
        while dropped < max(max_batches, capacity):
            t0 = time.perf_counter()
            self._failures.extend(self._take().failures)
            dropped += 1
            if time.perf_counter() - t0 >= wait_s and self.decoded.empty() and self.ready.empty():
                break
        self.running.mark()  # what the stages do from here on: the timed region
        return dropped

    def facts(self) -> dict[str, Any]:
        """The stream's facts, with the decoder's (as they stand now: the ``split`` decoder's share moves) and each
        stage thread's use of its time since the drain (:mod:`clsbench.data.running`)."""
        return {**StreamRecord.facts(self), **self.decoder.facts, "running_stages": self.running.since_mark()}

    def close(self) -> None:
        self.stop.set()
        deadline = time.monotonic() + JOIN_S
        for thread in self.threads:
            while thread.is_alive() and time.monotonic() < deadline:
                for q in (self.raw, self.decoded, self.ready):  # unblock a stage waiting for room
                    try:
                        q.get_nowait()
                    except queue.Empty:
                        pass
                thread.join(POLL_S)
        sys.setswitchinterval(self._previous_switch_s)
        self.decoder.close()
        shutdown_loader(self._iterator, self.loader)


class GpuPipeline:
    name = "gpu"
    priority = 20

    def check(self, settings: DataSettings) -> None:
        """Raise InvalidInputError on a setting this pipeline cannot use (an unknown augmentation or decoder
        included)."""
        check_device_pipeline(self.name, settings)
        if settings.augment is not None:
            AUGMENTS.get(settings.augment)
        if settings.decoder is not None:
            DECODERS.get(settings.decoder)
        switch_interval_s()
        stream_priority()

    def candidates(self, base: DataSettings, device: str, workers: Sequence[int]) -> list[DataSettings]:
        """One setting: the files read in this process, decoded in batches on the GPU."""
        return [dataclasses.replace(base, pipeline="gpu", num_workers=0, pin_memory=False, persistent_workers=False)]

    def unsupported_reason(self, device: torch.device, settings: DataSettings) -> str | None:
        if device.type != "cuda":
            return "GPU decode needs CUDA (this measurement runs on the CPU)"
        return None

    def open(self, dataset: EncodedDataset, spec: BatchSpec) -> GpuStream:
        decoder = DECODERS.get(spec.settings.decoder or DEFAULT_DECODER)
        decoder.check(spec.device)
        augment = AUGMENTS.get(spec.settings.augment or DEFAULT_AUGMENT)
        facts = {"pipeline": "gpu", "decoder": decoder.description,
                 "queue_depth": spec.settings.prefetch_factor or DEFAULT_DEPTH, "reader_workers":
                 spec.settings.num_workers, "augment": augment.name, "resize": augment.resize}
        return GpuStream(dataset, spec, facts)

    def measure_stages(self, dataset: EncodedDataset, spec: BatchSpec, clock: Any) -> dict[str, Any]:
        """Read, decode (by the settings' decoder) and augment measured alone before training
        (:mod:`clsbench.data.stages`): the augmentation the settings choose, then every other registered one for
        comparison."""
        from clsbench.data.stages import CudaMeter, measure_stages

        with self._stage_parts(dataset, spec) as (decode, augments, device), torch.no_grad():
            return measure_stages(dataset, spec, decode=decode, augments=augments, meter=CudaMeter(device),
                                  clock=clock)

    def measure_stage_busy(self, dataset: EncodedDataset, spec: BatchSpec) -> dict[str, Any]:
        """The GPU busy time per batch of the decode and of each augmentation, alone, after the timed region
        (:func:`clsbench.data.stages.measure_stage_busy`, with :func:`clsbench.measure.busy.gpu_busy_per_iteration`)."""
        from clsbench.data.stages import measure_stage_busy
        from clsbench.measure.busy import gpu_busy_per_iteration

        with self._stage_parts(dataset, spec) as (decode, augments, _), torch.no_grad():
            return measure_stage_busy(dataset, spec, decode=decode, augments=augments,
                                      busy=gpu_busy_per_iteration)

    @staticmethod
    @contextlib.contextmanager
    def _stage_parts(dataset: EncodedDataset, spec: BatchSpec) -> Iterator[tuple[Any, list[Any], torch.device]]:
        """The decode on the measurement's device (the settings' decoder; images placed whole on the device, so
        that every augmentation is measured on the same decoded images), the augmentations (the chosen one first)
        and the device; the decoder's session is closed on leaving."""
        chosen = spec.settings.augment or DEFAULT_AUGMENT
        augments = [AUGMENTS.get(chosen)] + [entry for name, entry in AUGMENTS.items() if name != chosen]
        device = spec.device
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        decoder = DECODERS.get(spec.settings.decoder or DEFAULT_DECODER)
        decoder.check(device)
        session = decoder.open(device)
        kinds = dataset.index.kinds

        def decode(encoded: Sequence[torch.Tensor | None], indices: Sequence[int]) -> list[torch.Tensor | None]:
            images = session.decode(encoded, [kinds[i] for i in indices])
            good = [(n, image) for n, image in enumerate(images) if image is not None]
            placed, _ = session.place([image for _, image in good],
                                      [(0, 0, int(image.shape[-2]), int(image.shape[-1])) for _, image in good])
            out: list[torch.Tensor | None] = [None] * len(images)
            for (n, _), image in zip(good, placed, strict=True):
                out[n] = image
            return out

        try:
            yield decode, augments, device
        finally:
            session.close()


PIPELINES.register(GpuPipeline.name, GpuPipeline())
