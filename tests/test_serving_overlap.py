"""Overlap in the serving loop (``serve --overlap``, the server's ``depth`` 2): an instance starts the next batch
before finishing the current one only when a full batch is queued (a partial one waits for the device), answers every
request once, and fails as cleanly as without overlap; a model instance's two host slots keep two started batches'
answers apart."""

from __future__ import annotations

import time

import pytest
import torch
from click.testing import CliRunner

from clsbench.serving.batcher import Batch, DynamicBatcher
from clsbench.serving.config import make_buckets
from clsbench.serving.instance import SLOTS, ModelInstance, SamplePool, build_engine
from clsbench.serving.server import Server
from test_serving import Collector, FakeInstance
from test_serving import _server as serving_server


@pytest.mark.parametrize(("depth", "expected"), [
    (1, [("start", 1), ("finish", 1), ("start", 2), ("finish", 2), ("start", 3), ("finish", 3)]),
    # the second batch is dispatched (full) when the first is started: it starts before the first finishes
    (2, [("start", 1), ("start", 2), ("finish", 1), ("start", 3), ("finish", 2), ("finish", 3)]),
])
def test_the_next_dispatched_batch_starts_before_the_current_one_finishes(depth, expected) -> None:
    instance = FakeInstance()
    server = serving_server([instance], delay_ms=50.0, depth=depth)
    sink = Collector()
    server.set_sink(sink)
    server.batcher.put(list(range(12)), list(range(12)))  # three full batches, queued before the instance looks
    assert server.start() is None
    sink.wait_for(12)
    counters = server.end_run(10**9)
    server.close()
    assert instance.log == expected
    assert [i for i, _ in sink.answered] == list(range(12)) and [a for _, a in sink.answered] == list(range(12))
    assert counters["requests"] == 12 and counters["batches"] == 3


def test_an_unfinished_batch_is_never_held_back_waiting_for_a_next_one() -> None:
    # A partial batch waits for the 50 ms delay rule; the full one before it must be answered without waiting for
    # it (a loop that waited for the next batch would answer the first only after the delay).
    instance = FakeInstance()
    server = serving_server([instance], delay_ms=50.0, depth=2)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    issued = time.monotonic()
    server.issue([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    sink.wait_for(4)
    first = time.monotonic() - issued
    sink.wait_for(5)
    server.end_run(10**9)
    server.close()
    assert first < 0.045, f"the full batch waited {first * 1000:.0f} ms for the partial one"
    assert instance.log == [("start", 1), ("finish", 1), ("start", 2), ("finish", 2)]


def _wait_until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def _partial_behind_a_busy_batch(instances: list[FakeInstance], wait_s: float) -> tuple[Server, Collector]:
    """A started server whose first batch (full) stays on the 'device', then two requests the delay rule (0 ms)
    dispatches at once, and ``wait_s`` for the server to act on them."""
    for instance in instances:
        instance.busy = {1}
    server = serving_server(instances, delay_ms=0.0, depth=2)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.issue([0, 1, 2, 3], [0, 1, 2, 3])
    _wait_until(lambda: sum((i.log for i in instances), []) == [("start", 1)])
    server.issue([4, 5], [4, 5])
    time.sleep(wait_s)
    return server, sink


def test_a_partial_batch_waits_for_the_device_and_a_full_one_starts_behind_it() -> None:
    # Batch 1 stays on the 'device' (ready() is False). Two requests that the delay rule dispatches at once must not
    # start behind it (they would run padded and shrink the batches after them); once two more fill a batch, that
    # full batch starts behind batch 1 before batch 1 finishes.
    instance = FakeInstance()
    server, sink = _partial_behind_a_busy_batch([instance], 0.1)
    assert instance.log == [("start", 1)] and not sink.answered
    server.issue([6, 7], [6, 7])
    _wait_until(lambda: ("start", 2) in instance.log)
    assert instance.log == [("start", 1), ("start", 2), ("finish", 1)] and not sink.answered
    instance.busy.clear()
    sink.wait_for(8)
    server.end_run(10**9)
    server.close()
    assert instance.log == [("start", 1), ("start", 2), ("finish", 1), ("finish", 2)]
    assert [i for i, _ in sink.answered] == list(range(8))


def test_an_idle_instance_does_not_start_a_partial_batch_beside_a_running_one() -> None:
    # Two instances share the device; the first one's batch stays on it. The second, idle, must not start two due
    # requests beside it either; it may start a full batch.
    first, second = FakeInstance(), FakeInstance()
    server, sink = _partial_behind_a_busy_batch([first, second], 0.1)
    assert first.log + second.log == [("start", 1)] and not sink.answered
    server.issue([6, 7], [6, 7])
    _wait_until(lambda: len(first.log + second.log) >= 2)
    first.busy.clear()
    second.busy.clear()
    sink.wait_for(8)
    server.end_run(10**9)
    server.close()
    assert sorted(i for i, _ in sink.answered) == list(range(8))


def test_a_partial_batch_starts_as_soon_as_the_device_is_done() -> None:
    # The same partial batch, once batch 1 is done: it starts within a poll, without waiting for company.
    instance = FakeInstance()
    server, sink = _partial_behind_a_busy_batch([instance], 0.05)
    done = time.monotonic()
    instance.busy.clear()
    sink.wait_for(6)
    took = time.monotonic() - done
    server.end_run(10**9)
    server.close()
    assert instance.log == [("start", 1), ("finish", 1), ("start", 2), ("finish", 2)]
    assert took < 1.0, f"the partial batch waited {took:.2f} s after the device was done"


def test_a_failure_with_two_batches_started_answers_each_request_once() -> None:
    instance = FakeInstance(hang_on_batch=1)  # the first hangs on the device while the second is started
    server = serving_server([instance], delay_ms=50.0, timeout_s=0.2, depth=2)
    sink = Collector()
    server.set_sink(sink)
    server.batcher.put(list(range(8)), list(range(8)))
    assert server.start() is None
    sink.wait_for(8)
    assert server.error.startswith("timeout: instance 0 spent more than 0.2 s")
    instance.release.set()  # the hung batch finishes late: neither batch may be answered again
    server.end_run(10**9)
    server.close()
    assert instance.log[:2] == [("start", 1), ("start", 2)]
    assert sorted(i for i, _ in sink.answered) == list(range(8))
    assert all(a is None for _, a in sink.answered)


def test_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="depth must be >= 1"):
        Server([FakeInstance()], DynamicBatcher(4, 1.0, make_buckets(4)), batch_timeout_s=1.0, depth=0)


@pytest.mark.parametrize(("device", "graphs"), [
    ("cpu", False),
    pytest.param("cuda", False, marks=pytest.mark.gpu),
    pytest.param("cuda", True, marks=pytest.mark.gpu),  # a CUDA graph per bucket, replayed for both batches
])
def test_two_started_batches_keep_their_own_answers(device: str, graphs: bool) -> None:
    # Two batches in flight at once must not share a host buffer: each one's answers are its own samples' classes.
    engine = build_engine("clsbench_testmodels:tiny", "fp32", device, input_size=32, seed=0,
                          compile_mode="default", cuda_graphs=graphs)
    # Random weights answer one class for every input; a sample's first pixel tells the samples apart.
    object.__setattr__(engine, "compute", lambda images, index=0: images[:, 0, 0, 0].to(torch.int64))
    pool = SamplePool(16, 32, 0, pin=device == "cuda")
    instance = ModelInstance(0, engine, pool, (4,))
    with instance.thread_context():
        instance.setup()
        alone = [instance.run(Batch(list(range(4)), idx, 4, 0, 0, 0))[0][:4].tolist()
                 for idx in ([0, 1, 2, 3], [8, 9, 10, 11])]
        first = instance.start(Batch(list(range(4)), [0, 1, 2, 3], 4, 0, 0, 0))
        second = instance.start(Batch(list(range(4)), [8, 9, 10, 11], 4, 0, 0, 0))
        answers = [instance.finish(first)[0][:4].tolist(), instance.finish(second)[0][:4].tolist()]
        done = instance.ready(first) and instance.ready(second)  # finished batches read as done (CUDA: events)
    assert SLOTS == 2 and answers == alone and done
    assert alone == [pool.data[[0, 1, 2, 3], 0, 0, 0].tolist(), pool.data[[8, 9, 10, 11], 0, 0, 0].tolist()]
    assert alone[0] != alone[1]


def test_overlap_is_an_option_a_target_decides(tmp_path) -> None:
    from clsbench.cli.app import main

    out = CliRunner().invoke(main, ["serve", "--target", "triton://127.0.0.1:1/m", "--no-overlap",
                                    "-o", str(tmp_path / "x.json")])
    assert out.exit_code == 2 and "--overlap" in out.output and "model config decides" in out.output
    out = CliRunner().invoke(main, ["serve", "--help"])
    assert "--overlap / --no-overlap" in out.output


def test_the_server_thread_pattern_is_unchanged_for_depth_one() -> None:
    # depth 1 waits in the batcher (POLL_S) like before, rather than spinning with zero timeouts.
    calls: list[float | None] = []
    batcher = DynamicBatcher(4, 1.0, make_buckets(4))
    real_take = batcher.take

    def take(timeout_s=None, full_only=False):
        calls.append(timeout_s)
        return real_take(timeout_s, full_only)

    batcher.take = take
    server = Server([FakeInstance()], batcher, batch_timeout_s=5.0, depth=1)
    assert server.start() is None
    time.sleep(0.2)
    server.close()
    assert calls and all(t and t > 0 for t in calls)


def _serve_result(overlap: object, threads: int = 4, target: str | None = None):
    from clsbench.results.schema import BenchmarkResult

    setups = [{"instances": 2} if overlap is None else {"instances": 2, "overlap": overlap}]
    serve = {"settings": {"sample_count": 1024, "min_duration_s": 4.0, "min_queries": None, "target": target},
             "setups": setups, "torch_threads": threads}
    return BenchmarkResult(environment={}, settings={"serve": serve}, measurements=())


def test_compare_names_the_serving_loop_facts_two_runs_differ_in() -> None:
    from clsbench.serving.analysis import loop_differences, render_serve_compare

    assert loop_differences(_serve_result(True), _serve_result(True)) == []
    assert loop_differences(_serve_result(False, threads=4), _serve_result(True, threads=8)) == [
        {"fact": "overlap", "a": "off", "b": "on"}, {"fact": "torch threads", "a": 4, "b": 8}]
    # a file from before the option ran without overlap, and says so
    assert loop_differences(_serve_result(None), _serve_result(True)) == [
        {"fact": "overlap", "a": "off (served before serve --overlap)", "b": "on"}]
    text = render_serve_compare({"rows": [], "loop_differences": loop_differences(_serve_result(False),
                                                                                  _serve_result(True))})
    assert "the two servers ran differently (baseline -> this run): overlap off -> on" in text


def test_busy_time_counts_overlapping_batches_once() -> None:
    # Three batches started back to back, each 'on the device' for 50 ms: with overlap they overlap in wall time,
    # and the instance's busy time is the union (~150 ms), not the sum of each batch's start-to-finish time.
    class Slow(FakeInstance):
        def finish(self, ticket):
            time.sleep(0.05)
            return super().finish(ticket)

    server = serving_server([Slow()], delay_ms=50.0, depth=2)
    sink = Collector()
    server.set_sink(sink)
    server.batcher.put(list(range(12)), list(range(12)))
    assert server.start() is None
    t0 = time.monotonic()
    sink.wait_for(12)
    wall = time.monotonic() - t0
    counters = server.end_run(10**9)
    server.close()
    busy_s = sum(counters["busy_ns"]) / 1e9
    assert 0.14 <= busy_s <= wall + 0.01, (busy_s, wall)


def test_the_queue_head_says_which_requests_an_instance_may_gather_ahead() -> None:
    batcher = DynamicBatcher(4, 50.0, make_buckets(4))
    batcher.put([10, 11, 12], [0, 1, 2])
    assert batcher.peek(-1, 0) == (0, [0, 1, 2])
    batcher.put([13, 14], [3, 4])
    assert batcher.peek(0, 3) == (0, [3])  # only what arrived since, up to the largest batch
    batch = batcher.try_take()
    assert batch is not None and batch.first_seq == 0 and batch.indices == [0, 1, 2, 3] and batch.gathered == 0
    assert batcher.peek(0, 3) == (4, [4])  # the head moved: everything queued, from its start
    batcher.drain()
    batcher.put([15], [5])
    assert batcher.peek(4, 1) == (5, [5])  # a drain moves the head too
    assert batcher.try_take() is None


def test_an_instance_gathers_ahead_while_its_device_is_busy_and_the_batch_skips_those_rows() -> None:
    # Batch 1 stays on the 'device'; the two requests queued behind it are copied into the next buffer while the
    # instance waits, and the batch that starts next says how many of its first rows are in place (the fake checks
    # they are the batch's own samples). Every answer is still each request's own.
    instance = FakeInstance()
    server, sink = _partial_behind_a_busy_batch([instance], 0.05)
    assert instance.ahead == {0: 4, 1: 5}
    instance.busy.clear()
    sink.wait_for(6)
    counters = server.end_run(10**9)
    server.close()
    assert instance.gathered == [(0, True), (2, True)]
    assert counters["gathered_ahead"] == 2 and counters["requests"] == 6
    assert [a for _, a in sink.answered] == list(range(6))


def test_without_overlap_nothing_is_gathered_ahead() -> None:
    instance = FakeInstance()
    server = serving_server([instance], delay_ms=0.0, depth=1)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.issue(list(range(6)), list(range(6)))
    sink.wait_for(6)
    counters = server.end_run(10**9)
    server.close()
    assert instance.ahead == {} and {g for g, _ in instance.gathered} == {0} and counters["gathered_ahead"] == 0


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_batch_gathered_partly_ahead_answers_from_the_rows_in_place(device: str) -> None:
    # start() gathers only the rows after batch.gathered: the rows before come from gather_ahead. Gathering the right
    # samples ahead gives the same answers as a full gather; rows gathered ahead are used as they are (samples 12
    # and 13 in place of 8 and 9 show that start did not gather them again).
    engine = build_engine("clsbench_testmodels:tiny", "fp32", device, input_size=32, seed=0,
                          compile_mode="default", cuda_graphs=False)
    object.__setattr__(engine, "compute", lambda images, index=0: images[:, 0, 0, 0].to(torch.int64))
    pool = SamplePool(16, 32, 0, pin=device == "cuda")
    instance = ModelInstance(0, engine, pool, (4,))
    first_pixel = pool.data[:, 0, 0, 0].tolist()
    with instance.thread_context():
        instance.setup()
        busy = instance.start(Batch(list(range(4)), [0, 1, 2, 3], 4, 0, 0, 0))  # the other slot is in use
        instance.gather_ahead(0, [8])
        instance.gather_ahead(1, [9])
        right = instance.start(Batch(list(range(4)), [8, 9, 10, 11], 4, 0, 0, 0, first_seq=4, gathered=2))
        assert instance.finish(busy)[0][:4].tolist() == [first_pixel[i] for i in (0, 1, 2, 3)]
        assert instance.finish(right)[0][:4].tolist() == [first_pixel[i] for i in (8, 9, 10, 11)]
        busy = instance.start(Batch(list(range(4)), [0, 1, 2, 3], 4, 0, 0, 0))
        instance.gather_ahead(0, [12, 13])
        used = instance.start(Batch(list(range(4)), [8, 9, 10, 11], 4, 0, 0, 0, first_seq=8, gathered=2))
        instance.finish(busy)
        assert instance.finish(used)[0][:4].tolist() == [first_pixel[i] for i in (12, 13, 10, 11)]


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True])
def test_the_next_batch_is_copied_in_while_the_running_one_computes(graphs: bool) -> None:
    # The copy-in has a stream of its own: the second batch's copy begins before the first batch's compute ends
    # (a compute of a few ms, here matrix products, against a copy of a few us), and each batch keeps its answers.
    engine = build_engine("clsbench_testmodels:tiny", "fp32", "cuda", input_size=32, seed=0,
                          compile_mode="default", cuda_graphs=graphs)
    weight = torch.randn(4096, 4096, device="cuda")

    def slow(images: torch.Tensor, index: int = 0) -> torch.Tensor:
        x = weight
        for _ in range(4):
            x = x @ weight
        return images[:, 0, 0, 0].to(torch.int64) + (x[0, 0] * 0).to(torch.int64)

    object.__setattr__(engine, "compute", slow)
    pool = SamplePool(16, 32, 0, pin=True)
    instance = ModelInstance(0, engine, pool, (4,))
    first_pixel = pool.data[:, 0, 0, 0].tolist()
    with instance.thread_context():
        instance.setup()
        first = instance.start(Batch(list(range(4)), [0, 1, 2, 3], 4, 0, 0, 0))
        second = instance.start(Batch(list(range(4)), [8, 9, 10, 11], 4, 0, 0, 0))
        answers = [instance.finish(first)[0][:4].tolist(), instance.finish(second)[0][:4].tolist()]
        start_1, _, _, computed_1, _ = instance._events[first.slot]
        start_2, _, begun_2, _, _ = instance._events[second.slot]
        second_copy_ms = start_1.elapsed_time(start_2)
        first_compute_ends_ms = start_1.elapsed_time(computed_1)
        second_begins_ms = start_1.elapsed_time(begun_2)
    assert answers == [[first_pixel[i] for i in (0, 1, 2, 3)], [first_pixel[i] for i in (8, 9, 10, 11)]]
    assert first_compute_ends_ms > 1.0  # the matrix products took long enough to tell overlap apart
    assert second_copy_ms < first_compute_ends_ms <= second_begins_ms
