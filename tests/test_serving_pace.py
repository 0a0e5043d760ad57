"""Pacing a partial batch behind the running one (clsbench.serving.pace): the estimates, when a partial batch starts,
and that a one-instance server starts it behind a running batch only when the estimate says that batch is ending."""

from __future__ import annotations

import time

import pytest

from clsbench.serving.pace import WEIGHT, Pace
from test_serving import Collector, FakeInstance
from test_serving import _server as serving_server


def test_estimates_blend_each_finished_batch_and_ignore_missing_device_times() -> None:
    pace = Pace()
    assert pace.started(64, 0) is None  # nothing learnt for that bucket yet
    pace.learn(60, 64, {"gather": 900.0, "copy_in": 100.0, "compute": 2_000.0, "copy_out": 100.0}, 1_200)
    # The copy-in is kept apart: it runs on its own stream, beside the batch ahead.
    assert pace.device_ns == {64: 2_100.0} and pace.copy_in_ns == {64: 100.0}
    assert pace.start_ns_per_request == pytest.approx(20.0)
    pace.learn(30, 64, {"compute": 3_100.0}, 1_200)
    assert pace.device_ns[64] == pytest.approx(2_100.0 + WEIGHT * 1_000.0)
    assert pace.copy_in_ns[64] == pytest.approx(100.0 - WEIGHT * 100.0)
    assert pace.start_ns_per_request == pytest.approx(20.0 + WEIGHT * 20.0)
    pace.learn(30, 32, {"gather": 5.0}, 0)  # a CPU-like batch: no device stage, no start time
    assert 32 not in pace.device_ns and 32 not in pace.copy_in_ns and pace.start_ns_per_request == pytest.approx(24.0)


def test_started_batches_queue_behind_each_other_on_the_device() -> None:
    pace = Pace()
    pace.learn(64, 64, {"compute": 1_000.0}, 640)
    assert pace.started(64, 10_000) == 11_000
    assert pace.started(64, 10_500) == 12_000  # queued while the first ran: it begins when the first leaves
    assert pace.started(64, 20_000) == 21_000  # the device was free again
    assert pace.started(128, 20_100) is None  # an unknown bucket: no estimate, and the chain restarts
    assert pace.started(64, 20_200) == 21_200


def test_a_batch_queued_behind_another_is_copied_in_while_that_one_computes() -> None:
    pace = Pace()
    pace.learn(64, 64, {"copy_in": 300.0, "compute": 1_000.0, "copy_out": 10.0}, 640)
    assert pace.started(64, 10_000) == 11_310  # an idle device: copy in, then compute and copy out
    assert pace.started(64, 10_100) == 12_320  # copied in by 10_400, beside the first: it begins as that one leaves
    assert pace.started(64, 12_200) == 13_510  # its copy ends after the device frees: it begins when copied


def test_a_partial_batch_starts_when_its_host_start_would_end_as_the_device_frees() -> None:
    pace = Pace()
    assert not pace.start_partial(1_000.0, 999, 10, 64)  # no start time learnt yet
    pace.learn(10, 64, {"compute": 500.0}, 100)  # 10 ns a request
    assert not pace.start_partial(None, 999, 10, 64)  # the running batch has no estimate
    assert not pace.start_partial(1_000.0, 899, 10, 64)  # its 100 ns start would end 1 ns early
    assert pace.start_partial(1_000.0, 900, 10, 64)
    assert pace.start_partial(1_000.0, 990, 1, 64)


def test_a_partial_batch_starts_earlier_by_its_copy_in() -> None:
    pace = Pace()
    pace.learn(10, 64, {"copy_in": 50.0, "compute": 500.0}, 100)  # 10 ns a request, 50 ns of copy at bucket 64
    assert not pace.start_partial(1_000.0, 849, 10, 64)  # start and copy would end 1 ns before the device frees
    assert pace.start_partial(1_000.0, 850, 10, 64)
    assert not pace.start_partial(1_000.0, 850, 10, 32)  # no copy time learnt at bucket 32: only the start counts


def _run_two_batches(compute_ns: float) -> list[tuple[str, int]]:
    # Batch 1 (full) teaches the estimates; batch 2 (full) stays on the 'device'; then two requests come, due at once.
    instance = FakeInstance()
    instance.stages = {"gather": 1.0, "copy_in": 0.0, "compute": compute_ns, "copy_out": 0.0}
    server = serving_server([instance], delay_ms=0.0, depth=2)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.issue([0, 1, 2, 3], [0, 1, 2, 3])
    sink.wait_for(4)
    instance.busy = {2}
    server.issue([4, 5, 6, 7], [4, 5, 6, 7])
    deadline = time.monotonic() + 10
    while ("start", 2) not in instance.log:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    server.issue([8, 9], [8, 9])
    time.sleep(0.1)
    log = list(instance.log)
    instance.busy.clear()
    sink.wait_for(10)
    server.end_run(10**9)
    server.close()
    return log


def test_one_instance_starts_a_partial_batch_behind_one_the_estimate_says_is_ending() -> None:
    # Batch 2's estimate (9 ns of device time) says it ended long ago although the device still holds it: the partial
    # batch starts behind it, before it finishes.
    assert _run_two_batches(9.0)[-3:] == [("start", 2), ("start", 3), ("finish", 2)]


def test_one_instance_holds_a_partial_batch_back_while_the_estimate_says_the_device_is_busy() -> None:
    # Batch 2 should stay on the device for 60 s by the estimate: the partial batch waits for it.
    assert _run_two_batches(60e9)[-1] == ("start", 2)
