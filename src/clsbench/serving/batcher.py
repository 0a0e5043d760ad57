"""The request queue and the dynamic batcher: when a batch leaves the queue, how big it is, which shape it runs at.

The rule (Triton's dynamic batcher, reduced to what a classification server needs), decided by :func:`decide` each
time a free model instance asks for work:

1. a full batch (``max_batch`` requests) is queued: take it now;
2. the oldest queued request has waited ``max_delay`` or longer: take everything queued (at most ``max_batch``);
3. otherwise wait until (2) comes due, or until more requests arrive.

An instance that still has a batch on the device (``serve --overlap``) asks only for a full batch
(``take(full_only=True)``): a partial batch started behind a running one would leave the queue small, run padded
to its bucket and make the next batch smaller again; it waits for the device instead (or, paced, until just before
it frees: :mod:`clsbench.serving.pace`) and collects more requests.

A batch of n requests runs at the smallest bucket size >= n (:func:`~clsbench.serving.config.bucket_for`), padded:
few shapes mean few cuDNN plans and CUDA graphs. Requests leave in arrival order, so responses of one instance come
back in arrival order too.

Per-request Python work is kept to list appends: a query is its LoadGen response id and its sample index; the
batch is built from the index list in one gather (see :mod:`clsbench.serving.instance`), or partly ahead of time:
while its device is busy, an instance copies the queue's first requests into its next host buffer
(:meth:`DynamicBatcher.peek`), and the batch that leaves says from which arrival position it starts. Time is read
only through an injectable :class:`~clsbench.measure.clock.Clock`, so the delay rule is tested without sleeping
(:meth:`DynamicBatcher.try_take`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clsbench.measure.clock import NS_PER_MS, NS_PER_S, Clock, WallClock
from clsbench.serving.config import bucket_for


@dataclass
class Batch:
    """Requests that leave the queue together.

    Attributes:
        ids: LoadGen response ids, in arrival order.
        indices: the sample index of each request (into the preloaded sample pool).
        bucket: the batch shape it runs at (>= ``len(ids)``; the rest is padding).
        dispatch_ns: clock reading when it left the queue.
        queue_wait_ns_sum: the summed queue wait of its requests (arrival to dispatch).
        queue_wait_ns_max: the longest queue wait among them (its oldest request's).
        first_seq: the position of its first request in the order of arrival (requests taken before it), -1 unknown.
        gathered: how many of its first requests the instance had gathered ahead, before the batch left the queue
            (set by the server; :meth:`DynamicBatcher.peek`).
    """

    ids: list[int]
    indices: list[int]
    bucket: int
    dispatch_ns: int
    queue_wait_ns_sum: int
    queue_wait_ns_max: int
    first_seq: int = -1
    gathered: int = 0

    @property
    def size(self) -> int:
        return len(self.ids)


def decide(queued: int, oldest_arrival_ns: int, now_ns: int, max_batch: int, max_delay_ns: int) -> tuple[int, int]:
    """The batching rule: how many requests to take now, and if none, how long to wait before asking again.

    Returns:
        ``(take, wait_ns)``: ``take`` > 0 means dispatch that many now; otherwise wait ``wait_ns`` (-1: until a
        request arrives, the queue being empty).
    """
    if queued <= 0:
        return 0, -1
    if queued >= max_batch:
        return max_batch, 0
    waited = now_ns - oldest_arrival_ns
    if waited >= max_delay_ns:
        return queued, 0
    return 0, max_delay_ns - waited


class DynamicBatcher:
    """A thread-safe FIFO of requests that hands out batches by :func:`decide`.

    Args:
        max_batch: the largest batch.
        max_delay_ms: the longest the oldest request waits for company (0: none).
        buckets: the batch shapes, ascending; the largest must be >= ``max_batch``.
        clock: where time is read (the wall clock unless a test injects a fake one).
    """

    def __init__(self, max_batch: int, max_delay_ms: float, buckets: Sequence[int], clock: Clock | None = None) -> None:
        if not buckets or max(buckets) < max_batch:
            raise ValueError(f"buckets {list(buckets)} do not hold a batch of {max_batch}")
        self.max_batch = max_batch
        self.buckets = tuple(sorted(buckets))
        self.clock = clock or WallClock()
        self._max_delay_ns = int(round(max_delay_ms * NS_PER_MS))
        self._ids: list[int] = []
        self._indices: list[int] = []
        self._arrivals: list[int] = []
        self._taken = 0  # requests that left the queue so far: the arrival position of the queue's head
        self._closed = False
        self._cond = threading.Condition(threading.Lock())

    @property
    def max_delay_ms(self) -> float:
        return self._max_delay_ns / NS_PER_MS

    def set_max_delay_ms(self, value: float) -> None:
        """Change the delay rule (between LoadGen runs: the buffers and graphs do not depend on it)."""
        with self._cond:
            self._max_delay_ns = int(round(value * NS_PER_MS))
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ids)

    def put(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Queue requests (one LoadGen query, or several coalesced), all arriving now."""
        n = len(ids)
        if n == 0:
            return
        now = self.clock.now_ns()
        with self._cond:
            before = len(self._ids)
            self._ids.extend(ids)
            self._indices.extend(indices)
            self._arrivals.extend([now] * n)
            # Wake the waiting instances only when a decision can change: the queue was empty (start the delay
            # timer) or a full batch is now there. Waking them per arrival would cost a thread switch per request;
            # waking all (at most twice a batch) because one may wait only for a full batch (``full_only``).
            if before == 0 or (before < self.max_batch <= before + n):
                self._cond.notify_all()

    def peek(self, head: int, have: int) -> tuple[int, list[int]]:
        """The queue's head position and the sample indices of its requests from ``have`` on (up to ``max_batch``),
        or from 0 when the head moved from ``head``: what an instance gathers ahead of the next batch (the queue's
        first requests stay the same until a batch leaves it)."""
        with self._cond:
            start = have if head == self._taken else 0
            return self._taken, self._indices[start:self.max_batch]

    def try_take(self) -> Batch | None:
        """The next batch if the rule says dispatch now, else None; never blocks (tests drive it with a fake clock)."""
        with self._cond:
            now = self.clock.now_ns()
            take, _ = self._decide(now)
            return self._pop(take, now) if take else None

    def take(self, timeout_s: float | None = None, full_only: bool | Callable[[], bool] = False) -> Batch | None:
        """Block until the rule dispatches a batch; None when closed, or when ``timeout_s`` passes with none.

        ``full_only``: dispatch only a full batch (``max_batch`` queued), whatever the delay rule says; what an
        instance asks for while a batch is on the device (see :class:`~clsbench.serving.server.Server`). A callable
        is asked at each decision, so a waiter sees a batch that started meanwhile.
        """
        deadline = None if timeout_s is None else self.clock.now_ns() + int(timeout_s * NS_PER_S)
        with self._cond:
            while not self._closed:
                now = self.clock.now_ns()
                take, wait_ns = self._decide(now)
                if take and take < self.max_batch and (full_only() if callable(full_only) else full_only):
                    take, wait_ns = 0, -1  # only an arrival that fills a batch (or the timeout) changes this
                if take:
                    batch = self._pop(take, now)
                    if self._ids:
                        self._cond.notify_all()  # the rest is another instance's business
                    return batch
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait_ns = left if wait_ns < 0 else min(wait_ns, left)
                self._cond.wait(None if wait_ns < 0 else wait_ns / NS_PER_S)
            return None

    def drain(self) -> list[int]:
        """Remove every queued request; return their response ids (a failed server answers them at once)."""
        with self._cond:
            ids = self._ids
            self._ids, self._indices, self._arrivals = [], [], []
            self._taken += len(ids)
            return ids

    def close(self) -> None:
        """Wake every waiting instance; :meth:`take` returns None from now on."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _decide(self, now: int) -> tuple[int, int]:
        oldest = self._arrivals[0] if self._arrivals else 0
        return decide(len(self._ids), oldest, now, self.max_batch, self._max_delay_ns)

    def _pop(self, n: int, now: int) -> Batch:
        ids, indices, arrivals = self._ids[:n], self._indices[:n], self._arrivals[:n]
        del self._ids[:n], self._indices[:n], self._arrivals[:n]
        first = self._taken
        self._taken += n
        return Batch(ids, indices, bucket_for(n, self.buckets), now, n * now - sum(arrivals), now - arrivals[0], first)
