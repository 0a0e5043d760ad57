"""When an instance starts a partial batch behind the one on its device: just in time for the device to free.

With overlap, an instance starts a *full* next batch at once, behind the running one, but holds a partial batch
back until the device is done (:mod:`clsbench.serving.server`): started early, partial batches run padded and keep
the queue small. Held back to the end, though, the partial batch's host work (the gather into pinned memory, about
15 us a ResNet-50 image on an H100's host, for the requests that arrived after the instance's last gather ahead)
runs while the device waits, and every request in it waits for that too.

:class:`Pace` keeps an instance's running estimates, learnt from the batches it finished (device time per bucket,
from its copy-in, compute and copy-out stages; host start time per request), and says when a partial batch's start
would end as the running batch leaves the device: from then on the instance starts it. An instance copies a batch
in on a stream of its own (:class:`~clsbench.serving.instance.ModelInstance`), so the copy-in of a batch queued behind
another overlaps that one's compute: the estimate keeps the copy-in apart from the rest of the device time, and a
partial batch starts early enough for its copy-in to end too as the device frees. Before an estimate exists (the
first batch of each bucket) it says nothing, and the instance waits for the device.

Only a server of one instance paces (:class:`~clsbench.serving.server.Server`): the estimate assumes the device runs
the instance's batches one after another, and beside a second instance's batches it started partial batches too
early (on a stand-in device shared by 2 instances at 21,000 qps, p99 was 26.1 ms with an estimate per instance and
17.6 ms with one shared, against 14.8 ms without pacing; benchmarks/README, "Serving an inference backend with
overlap").
"""

from __future__ import annotations

from collections.abc import Mapping

#: The weight of the newest batch in a running estimate.
WEIGHT = 0.2
#: The device stages that run one batch after another on an instance's stream (timed on the device, from when the
#: stream reached the batch); the copy-in runs on a stream of its own, beside the batch ahead.
DEVICE_STAGES = ("compute", "copy_out")


def _blend(old: float | None, new: float) -> float:
    return new if old is None else old + WEIGHT * (new - old)


class Pace:
    """One instance's running estimates (ns), and when the batches it started should leave the device."""

    def __init__(self) -> None:
        self.device_ns: dict[int, float] = {}  # bucket -> compute and copy-out time of a batch at that bucket
        self.copy_in_ns: dict[int, float] = {}  # bucket -> its copy-in time
        self.start_ns_per_request: float | None = None  # host time of start() per request of the batch
        self._free_at: float | None = None  # when the batches started so far should have left the device

    def started(self, bucket: int, queued_ns: int) -> float | None:
        """A batch at ``bucket`` was queued on the device at ``queued_ns``: when it should leave the device (its
        compute begins once it is copied in and the batches before it left), or None without an estimate for that
        bucket."""
        device = self.device_ns.get(bucket)
        if device is None:
            self._free_at = None
            return None
        copied = queued_ns + self.copy_in_ns.get(bucket, 0.0)
        begins = copied if self._free_at is None else max(copied, self._free_at)
        self._free_at = begins + device
        return self._free_at

    def learn(self, size: int, bucket: int, stages: Mapping[str, float], start_ns: float) -> None:
        """Fold in a finished batch: its stage times (ns) and the host time its start took to gather ``size`` rows
        (the requests not gathered ahead; with none, the start time says nothing per request)."""
        device = sum(float(stages.get(stage, 0.0)) for stage in DEVICE_STAGES)
        if device > 0:
            self.device_ns[bucket] = _blend(self.device_ns.get(bucket), device)
            self.copy_in_ns[bucket] = _blend(self.copy_in_ns.get(bucket), float(stages.get("copy_in", 0.0)))
        if size > 0 and start_ns > 0:
            self.start_ns_per_request = _blend(self.start_ns_per_request, start_ns / size)

    def start_partial(self, leaves_ns: float | None, now_ns: int, queued: int, bucket: int) -> bool:
        """Whether a partial batch at ``bucket`` with ``queued`` requests left to gather should start now, behind a
        batch due to leave the device at ``leaves_ns``: its host start and copy-in would end no earlier than the
        device frees."""
        if leaves_ns is None or self.start_ns_per_request is None:
            return False
        return now_ns + self.start_ns_per_request * queued + self.copy_in_ns.get(bucket, 0.0) >= leaves_ns
