"""The server's own counters: batch sizes, padding, and where each request's time went.

Each model instance keeps one :class:`Counters` (no lock: only its thread writes it); :func:`merge` adds them up
after a LoadGen run into the raw facts stored in the result. The stages of one batch:

- ``queue``: arrival to dispatch, per request (host clock);
- ``gather``: building the batch in the bucket's pinned host buffer from the sample pool (host clock), for the
  requests not gathered ahead (``gathered_ahead`` counts those: copied while the instance's device was busy, before
  their batch left the queue, off their path);
- ``copy_in``: host to device copy; ``compute``: normalisation, forward pass and top-1; ``copy_out``: device to
  host copy of the answers (CUDA events on the instance's stream on a GPU, the host clock on a CPU);
- ``complete``: handing the batch's responses back to LoadGen in one call (host clock).

Every stage sum is kept twice: per batch (``stage_ns``) and weighted by the requests in the batch
(``stage_ns_request``), since every request of a batch waits for the whole batch; the latter divided by the request
count is the mean time a request spent in that stage.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: The stages of a batch after it leaves the queue, in order.
STAGES = ("gather", "copy_in", "compute", "copy_out", "complete")


class Counters:
    """One instance's counters over one LoadGen run (see the module docstring)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.batches = 0
        self.requests = 0
        self.padded = 0
        self.ahead = 0
        self.sizes: dict[int, int] = {}
        self.buckets: dict[int, int] = {}
        self.queue_ns = 0
        self.queue_ns_max = 0
        self.stage_ns = dict.fromkeys(STAGES, 0.0)
        self.stage_ns_request = dict.fromkeys(STAGES, 0.0)
        self.busy_ns = 0

    def add(self, size: int, bucket: int, queue_ns_sum: int, queue_ns_max: int, stages: Mapping[str, float],
            busy_ns: int, ahead: int = 0) -> None:
        """Count one finished batch of ``size`` requests run at ``bucket``; ``stages`` in ns per :data:`STAGES`;
        ``ahead`` of its requests were gathered before it left the queue."""
        self.batches += 1
        self.requests += size
        self.padded += bucket - size
        self.ahead += ahead
        self.sizes[size] = self.sizes.get(size, 0) + 1
        self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
        self.queue_ns += queue_ns_sum
        self.queue_ns_max = max(self.queue_ns_max, queue_ns_max)
        for stage, ns in stages.items():
            self.stage_ns[stage] += ns
            self.stage_ns_request[stage] += ns * size
        self.busy_ns += busy_ns


def merge(counters: Iterable[Counters], wall_ns: int) -> dict[str, Any]:
    """The raw facts of one LoadGen run, summed over instances (what the result file stores under ``server``).

    Args:
        counters: one per instance.
        wall_ns: the run's wall time (LoadGen's StartTest call), against which instance busy time is set.
    """
    items = list(counters)
    sizes: dict[int, int] = {}
    buckets: dict[int, int] = {}
    stage_ns = dict.fromkeys(STAGES, 0.0)
    stage_ns_request = dict.fromkeys(STAGES, 0.0)
    for c in items:
        for size, count in c.sizes.items():
            sizes[size] = sizes.get(size, 0) + count
        for bucket, count in c.buckets.items():
            buckets[bucket] = buckets.get(bucket, 0) + count
        for stage in STAGES:
            stage_ns[stage] += c.stage_ns[stage]
            stage_ns_request[stage] += c.stage_ns_request[stage]
    return {
        "batches": sum(c.batches for c in items),
        "requests": sum(c.requests for c in items),
        "padded_samples": sum(c.padded for c in items),
        "gathered_ahead": sum(c.ahead for c in items),
        "batch_sizes": {str(k): sizes[k] for k in sorted(sizes)},
        "bucket_batches": {str(k): buckets[k] for k in sorted(buckets)},
        "queue_ns": sum(c.queue_ns for c in items),
        "queue_ns_max": max((c.queue_ns_max for c in items), default=0),
        "stage_ns": stage_ns,
        "stage_ns_request": stage_ns_request,
        "busy_ns": [c.busy_ns for c in items],
        "wall_ns": wall_ns,
    }
