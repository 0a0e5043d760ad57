"""The serving loop: requests in, batches through model instances, responses out in bulk; and how it fails.

One :class:`Server` serves one batching setting across many LoadGen runs:

- LoadGen's issue thread calls :meth:`Server.issue` with response ids and sample indices; that is two list
  appends in the batcher (no per-request object, no tensor);
- each instance runs in its own thread: it asks the batcher for a batch (blocking by the delay rule), runs it,
  and hands the whole batch's answers to the *sink* in one call (LoadGen's ``QuerySamplesComplete`` with many
  responses), then counts it;
- a run is two calls, :meth:`Instance.start` (the host gathers the batch and queues the device's work) and
  :meth:`Instance.finish` (wait for it). With ``depth`` 2 (``serve --overlap``, the default on a GPU) an instance
  that finds a *full* next batch queued starts it before finishing the current one, so the host's gather and
  answer hand-back run while the GPU computes instead of between its batches. A partial batch waits for the device
  (:meth:`Instance.ready`, polled every :data:`READY_POLL_S`), collecting more requests meanwhile and copying those
  queued since its last look into the next batch's host buffer (:meth:`Instance.gather_ahead`): started behind a
  running batch it would run padded and leave the next batches smaller. A server of one instance starts it just
  before the device frees, once its gather would end by then (:mod:`clsbench.serving.pace`); an idle instance beside
  another's running batch starts only a full one. It never waits for a next batch once the current one is done, so
  an answer is late by at most one poll or the next full batch's start;
- the sink is set per LoadGen run (:meth:`Server.set_sink`), so the server does not know LoadGen and is tested with
  a plain function.

Failure is recorded, never raised through, and nothing hangs. A model that raises (``model_error``, ``oom``) or a
batch that runs past the batch timeout (``timeout``, seen by a watchdog thread) *aborts* the server: every queued
and in-flight request is answered at once without an answer, every later one as it arrives, so the LoadGen run
ends and is recorded INVALID with the reason. Ctrl-C aborts it the same way (``interrupted``). Each batch is
answered exactly once: the instance and an abort race for it under a lock, and the loser lets go.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from clsbench.core.vocab import Reason
from clsbench.measure.clock import NS_PER_S, Clock, WallClock
from clsbench.serving.batcher import Batch, DynamicBatcher
from clsbench.serving.config import bucket_for
from clsbench.serving.counters import Counters, merge
from clsbench.serving.pace import Pace

#: How often an idle instance re-checks whether the server closed, and how often the watchdog looks (seconds).
POLL_S = 0.05
#: How often an instance with a batch on the device looks whether it is done, between arrivals (seconds).
READY_POLL_S = 0.0002
#: After a LoadGen run, how long to wait for instances to finish counting their last batch (seconds).
IDLE_WAIT_S = 30.0

Sink = Callable[[Sequence[int], Any], None]


@dataclass
class _Started:
    """A batch an instance started and has not finished."""

    number: int
    batch: Batch
    ticket: Any
    begun: int  # clock reading before start()
    start_ns: int  # how long start() took (the host's part: the gather, queueing the device's work)
    leaves: float | None  # when it should leave the device (Pace), None without an estimate


class Instance(Protocol):
    """What the server needs of a model instance (:class:`~clsbench.serving.instance.ModelInstance`, or a fake)."""

    def thread_context(self) -> contextlib.AbstractContextManager[Any]: ...

    def setup(self, tick: Callable[[], None]) -> dict[str, Any]:
        """Warm up; call ``tick()`` before each model call, so the watchdog can time each one."""
        ...

    def gather_ahead(self, row: int, indices: Sequence[int]) -> None:
        """Copy these samples into rows ``row``... of the next batch's host buffer (the next :meth:`start` then skips
        the first ``batch.gathered`` rows); called only while one batch is started and unfinished."""
        ...

    def start(self, batch: Batch) -> Any:
        """Gather ``batch`` (from row ``batch.gathered``) and queue its work; return what :meth:`finish` needs (the
        host part's times in it)."""
        ...

    def ready(self, ticket: Any) -> bool:
        """Whether :meth:`finish` of this started batch would return without waiting (never blocks)."""
        ...

    def finish(self, ticket: Any) -> tuple[Any, dict[str, float]]:
        """Wait for a started batch; its answers (the first ``batch.size`` are the batch's) and stage times (ns)."""
        ...

    def close(self) -> None: ...


def block_sigint() -> None:
    """Keep Ctrl-C away from the calling (non-main) thread and from the threads it starts (LoadGen's among them):
    the kernel then delivers SIGINT to the main thread, whose handler decides what it means, instead of interrupting
    a system call in a worker or LoadGen thread."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


def failure_reason(exc: BaseException) -> str:
    """A failure's recorded reason: ``oom`` for an out-of-memory error, else ``model_error``, with the message."""
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0] if str(exc) else type(exc).__name__
    out_of_memory = "OutOfMemory" in type(exc).__name__ or "out of memory" in str(exc).lower()
    kind = Reason.OOM if out_of_memory else Reason.MODEL_ERROR
    return f"{kind}: {text}"


class Server:
    """The dynamic-batching server (see the module docstring).

    Args:
        instances: the model instances, one thread each.
        batcher: the request queue and batching rule.
        batch_timeout_s: a batch running longer aborts the server (``timeout``).
        clock: the host clock of the watchdog and the stage timings (the wall clock unless a test injects one).
        depth: batches one instance holds started at once: 1 runs each to the end before taking the next, 2 overlaps
            the next batch's host work with the current one's device work (see the module docstring).
    """

    def __init__(self, instances: Sequence[Instance], batcher: DynamicBatcher, *, batch_timeout_s: float,
                 clock: Clock | None = None, depth: int = 1) -> None:
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.instances = list(instances)
        self.depth = depth
        self.batcher = batcher
        self.batch_timeout_ns = int(batch_timeout_s * NS_PER_S)
        self.clock = clock or WallClock()
        self.counters = [Counters() for _ in self.instances]
        self._busy_until = [0] * len(self.instances)  # per instance: when its last counted batch finished
        # With overlap, one instance paces its partial batches (clsbench.serving.pace); several wait for an idle device.
        self._pace = Pace() if depth > 1 and len(self.instances) == 1 else None
        self._ahead = [(-1, 0)] * len(self.instances)  # per instance: the queue head it gathered ahead from, and rows
        self.setup_facts: list[dict[str, Any] | None] = [None] * len(self.instances)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._in_flight: dict[tuple[int, int], tuple[Batch, int]] = {}  # (instance, batch number) -> batch, start
        self._active = 0
        self._error: str | None = None
        self._aborted = False
        self._abort_request: str | None = None
        self._sink: Sink = _discard
        self._setup_lock = threading.Lock()
        self._setup_call: dict[int, int] = {}  # instance -> clock reading at the start of its current warm-up call
        self._ready = [threading.Event() for _ in self.instances]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def error(self) -> str | None:
        """Why the server failed (``model_error: ...``, ``oom: ...``, ``timeout: ...``, ``interrupted``), or None."""
        return self._error

    def start(self) -> str | None:
        """Start the instance threads and wait until each has set up (one at a time); return the failure, if any.

        Each warm-up call is held to the batch timeout by the watchdog, like a batch; a hung one aborts the server.
        """
        watchdog = threading.Thread(target=self._watch, name="clsbench-watchdog", daemon=True)
        self._threads.append(watchdog)
        watchdog.start()
        for k in range(len(self.instances)):
            thread = threading.Thread(target=self._serve, args=(k,), name=f"clsbench-instance-{k}", daemon=True)
            self._threads.append(thread)
            thread.start()
        for ready in self._ready:
            while not ready.wait(POLL_S) and not self._aborted:
                pass
            if self._error:
                break
        return self._error

    def close(self) -> None:
        """Stop the threads (a hung instance's thread is a daemon and is left behind)."""
        self._stop.set()
        self.batcher.close()
        for thread in self._threads:
            thread.join(timeout=POLL_S * 4)
        for instance in self.instances:
            with contextlib.suppress(Exception):
                instance.close()

    def set_sink(self, sink: Sink) -> None:
        """Where answers go: ``sink(ids, answers)``; ``answers`` None for requests answered without a result."""
        self._sink = sink

    # ------------------------------------------------------------------------------------------ one LoadGen run

    def begin_run(self) -> None:
        """Zero the counters before a LoadGen run (the server is idle between runs)."""
        for c in self.counters:
            c.reset()

    def end_run(self, wall_ns: int) -> dict[str, Any]:
        """Wait until every instance has counted its last batch; return the run's counters (raw facts)."""
        with self._idle:
            self._idle.wait_for(lambda: self._active == 0 or self._aborted, timeout=IDLE_WAIT_S)
        return merge(self.counters, wall_ns)

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Queue requests (LoadGen's issue callback: it must never raise, or LoadGen would wait forever)."""
        try:
            if self._aborted:
                self._sink(ids, None)
                return
            self.batcher.put(ids, indices)
            if self._aborted:  # an abort ran between the check and the put: its drain may have missed these
                self._answer_now(self.batcher.drain())
        except BaseException as exc:  # noqa: BLE001 - recorded as the run's failure, and the requests answered
            self.abort(f"{Reason.SERVER_ERROR}: {type(exc).__name__}: {exc}")
            self._answer_now(list(ids))

    def flush(self) -> None:
        """LoadGen's flush callback: the batcher's delay rule dispatches the tail by itself."""

    def request_abort(self, reason: str) -> None:
        """Abort from a thread that must not call LoadGen (the main thread, on Ctrl-C): the watchdog does it within
        :data:`POLL_S`. Every thread that answers LoadGen is then one the server owns, or LoadGen's own."""
        self._abort_request = reason

    def abort(self, reason: str) -> None:
        """Fail the server: answer every queued and in-flight request now, and every later one on arrival."""
        with self._lock:
            if self._error is None:
                self._error = reason
            self._aborted = True
            taken = [batch for batch, _ in self._in_flight.values()]
            self._in_flight.clear()
        ids = self.batcher.drain()
        for batch in taken:
            ids.extend(batch.ids)
        self.batcher.close()
        self._answer_now(ids)

    # ------------------------------------------------------------------------------------------ threads

    def _answer_now(self, ids: list[int]) -> None:
        if ids:
            with contextlib.suppress(Exception):
                self._sink(ids, None)

    def _serve(self, k: int) -> None:
        block_sigint()
        instance = self.instances[k]
        try:
            with instance.thread_context():
                with self._setup_lock:
                    if self._aborted:
                        return
                    self.setup_facts[k] = instance.setup(lambda: self._tick(k))
                    self._setup_call.pop(k, None)
                self._ready[k].set()
                self._loop(k, instance)
        except BaseException as exc:  # noqa: BLE001 - recorded, never raised through a thread
            self.abort(failure_reason(exc))
        finally:
            self._ready[k].set()
            # A thread that has answered LoadGen must outlive the LoadGen run: LoadGen keeps a logger per calling
            # thread, and a thread ending mid-run races its log I/O thread (a crash seen in LoadGen 6.0.17).
            self._stop.wait()

    def _loop(self, k: int, instance: Instance) -> None:
        started: list[_Started] = []  # in start order
        number = 0
        try:
            while not self._stop.is_set() and not self._aborted:
                if not started:
                    # Beside another instance's batch on the device, a partial batch would run padded at the same
                    # time and slow both: with overlap, only a full one starts (the other instance takes the
                    # partial one by the delay rule once its batch is done).
                    batch = self.batcher.take(POLL_S, full_only=self._device_busy)
                    if batch is None:
                        continue
                else:
                    batch = self._next_while_busy(k, instance, started[0])
                    if batch is None:
                        if instance.ready(started[0].ticket) and not self._finish(k, instance, started.pop(0)):
                            return
                        continue
                number += 1
                with self._lock:
                    late = self._aborted
                    if not late:
                        self._in_flight[(k, number)] = (batch, self.clock.now_ns())
                        self._active += 1
                if late:  # taken from the queue after an abort's drain: answer it like the rest (outside the lock)
                    self._answer_now(batch.ids)
                    return
                head, have = self._ahead[k]
                if have and batch.first_seq == head:
                    batch.gathered = min(have, batch.size)
                self._ahead[k] = (-1, 0)  # the next start uses the other host slot
                begun = self.clock.now_ns()
                try:
                    ticket = instance.start(batch)
                except BaseException as exc:  # noqa: BLE001 - the model failed: the run is INVALID with the reason
                    self.abort(failure_reason(exc))  # answers it (still in flight), then it leaves
                    self._done(k, number)
                    return
                queued = self.clock.now_ns()
                leaves = self._pace.started(batch.bucket, queued) if self._pace is not None else None
                started.append(_Started(number, batch, ticket, begun, queued - begun, leaves))
                if len(started) >= self.depth and not self._finish(k, instance, started.pop(0)):
                    return
        finally:
            for entry in started:  # left unfinished by an abort, which answered them
                self._done(k, entry.number)

    def _device_busy(self) -> bool:
        """Whether, with overlap, an instance's batch is on the device (asked under the batcher's lock)."""
        return self.depth > 1 and self._active > 0

    def _next_while_busy(self, k: int, instance: Instance, head: _Started) -> Batch | None:
        """With a batch unfinished: a batch to start behind it, else None (at once if it is done, else after a short
        poll; the loop then looks again).

        A full batch starts at once. A partial one would run padded behind the current batch while the queue keeps
        filling, and the batches after it would be smaller still (a server run at a high rate then settles on small,
        padded batches and misses its latency bound): it starts, by the delay rule, only once its host start would
        end as the current batch leaves the device (:class:`~clsbench.serving.pace.Pace`), or after the current batch
        is done. The instance never waits for a next batch once the current one is done: its answers are late by at
        most one poll.
        """
        if instance.ready(head.ticket):
            return self.batcher.take(0, full_only=True)
        have = self._gather_ahead(k, instance)
        queued = min(len(self.batcher), self.batcher.max_batch)
        now = self.clock.now_ns()
        paced = self._pace is not None and self._pace.start_partial(
            head.leaves, now, max(queued - have, 0), bucket_for(queued, self.batcher.buckets))
        return self.batcher.take(READY_POLL_S, full_only=not paced)

    def _gather_ahead(self, k: int, instance: Instance) -> int:
        """Copy the queue's first requests that arrived since the last poll into the instance's next host buffer, so
        the next batch's start gathers only the rest; return how many rows are in place. While a batch is on the
        device the instance thread would only wait: the copies move off the requests' path."""
        head, have = self._ahead[k]
        now_head, indices = self.batcher.peek(head, have)
        if now_head != head:
            have = 0
        if indices:
            instance.gather_ahead(have, indices)
            have += len(indices)
        self._ahead[k] = (now_head, have)
        return have

    def _finish(self, k: int, instance: Instance, entry: _Started) -> bool:
        """Wait for a started batch, answer and count it; False when the server failed (the loop ends)."""
        number, batch = entry.number, entry.batch
        try:
            try:
                answers, stages = instance.finish(entry.ticket)
            except BaseException as exc:  # noqa: BLE001 - the model failed: the run is INVALID with the reason
                self.abort(failure_reason(exc))
                return False
            with self._lock:
                mine = self._in_flight.pop((k, number), None) is not None  # else an abort answered it already
            if not mine:
                return False
            handed = self.clock.now_ns()
            self._sink(batch.ids, answers)
            done = self.clock.now_ns()
            stages["complete"] = float(done - handed)
            if self._pace is not None:
                self._pace.learn(batch.size - batch.gathered, batch.bucket, stages, entry.start_ns)
            # Busy is the time the instance had a batch started and unfinished: with overlap a batch starts before
            # the one ahead of it finishes, so only its time after that one counts (batches finish in start order).
            busy = done - max(entry.begun, self._busy_until[k])
            self._busy_until[k] = done
            self.counters[k].add(batch.size, batch.bucket, batch.queue_wait_ns_sum, batch.queue_wait_ns_max, stages,
                                 busy, batch.gathered)
            return True
        finally:
            self._done(k, number)

    def _done(self, k: int, number: int) -> None:
        """A batch left the instance (answered, failed, or answered by an abort): called once per batch."""
        with self._idle:
            self._in_flight.pop((k, number), None)
            self._active -= 1
            self._idle.notify_all()

    def _tick(self, k: int) -> None:
        self._setup_call[k] = self.clock.now_ns()

    def _watch(self) -> None:
        block_sigint()
        while not self._stop.wait(POLL_S):  # runs until close(), never ends mid-run (see _serve)
            if self._abort_request is not None and not self._aborted:
                self.abort(self._abort_request)
            if self._aborted:
                continue
            now = self.clock.now_ns()
            with self._lock:
                late = [(k, batch) for (k, _), (batch, since) in self._in_flight.items()
                        if now - since > self.batch_timeout_ns]
                slow = [k for k, since in list(self._setup_call.items()) if now - since > self.batch_timeout_ns]
            if slow:
                self.abort(f"{Reason.TIMEOUT}: instance {slow[0]}'s warm-up call took more than "
                           f"{self.batch_timeout_ns / NS_PER_S:g} s")
                for ready in self._ready:
                    ready.set()
                continue
            if late:
                k, batch = late[0]
                self.abort(f"{Reason.TIMEOUT}: instance {k} spent more than {self.batch_timeout_ns / NS_PER_S:g} s "
                           f"on a batch of {batch.size}")


def _discard(ids: Sequence[int], answers: Any) -> None:
    """The sink before a LoadGen run sets one: warm-up answers go nowhere."""
