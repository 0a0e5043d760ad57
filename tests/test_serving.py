"""``clsbench serve``: the batcher, the server loop, the QPS search, LoadGen's logs, the scenario registry, the
analysis of a stored result, and end-to-end LoadGen runs on the CPU with the tiny model.

Nothing here asserts a duration: timing enters only through fake clocks, fake servers of known capacity, and
generous bounds whose outcome the assertions do not depend on.
"""

from __future__ import annotations

import _thread
import contextlib
import dataclasses
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from clsbench.core.options import Execution
from clsbench.errors import InvalidInputError, ResultFileError
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult, Measurement
from clsbench.scenarios import SCENARIOS, ordered
from clsbench.serving import records
from clsbench.serving.analysis import (
    analyze_serve,
    compare_serve,
    csv_rows,
    is_serve_result,
    render_serve,
    render_serve_compare,
    render_serve_html,
    scenario_summary,
)
from clsbench.serving.batcher import Batch, DynamicBatcher, decide
from clsbench.serving.config import ServeSettings, bucket_for, make_buckets, parse_list
from clsbench.serving.counters import Counters, merge
from clsbench.serving.logs import parse_detail, parse_logs, parse_summary
from clsbench.serving.scenario import LoadGenParams, ScenarioContext
from clsbench.serving.search import search_max_qps
from clsbench.serving.serve_charts import batch_histogram_svg, latency_chart_svg
from clsbench.serving.server import Server

MS = 1_000_000
#: The execution of a serve test: an empty environment (reading the machine's is not what these tests check).
NO_ENV = Execution(env={})


class ManualClock:
    """A clock that stands still until a test moves it."""

    def __init__(self) -> None:
        self.now = 0

    def now_ns(self) -> int:
        return self.now


# ------------------------------------------------------------------------------------------------ the batcher


def test_decide_rules() -> None:
    assert decide(0, 0, 10 * MS, 8, 2 * MS) == (0, -1)  # empty: wait for an arrival
    assert decide(8, 5 * MS, 5 * MS, 8, 2 * MS) == (8, 0)  # a full batch goes at once
    assert decide(20, 5 * MS, 5 * MS, 8, 2 * MS) == (8, 0)  # never more than max batch
    assert decide(3, 5 * MS, 6 * MS, 8, 2 * MS) == (0, 1 * MS)  # wait for the rest of the delay
    assert decide(3, 5 * MS, 7 * MS, 8, 2 * MS) == (3, 0)  # the oldest has waited the delay: go
    assert decide(1, 5 * MS, 5 * MS, 8, 0) == (1, 0)  # no delay: go at once


def test_buckets_and_padding() -> None:
    assert make_buckets(64) == (1, 2, 4, 8, 16, 32, 64)
    assert make_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert make_buckets(64, [8, 24, 100]) == (8, 24, 64)
    buckets = make_buckets(48)
    assert [bucket_for(n, buckets) for n in (1, 3, 5, 17, 33, 48)] == [1, 4, 8, 32, 48, 48]


def test_batcher_delay_rule_with_a_fake_clock() -> None:
    clock = ManualClock()
    batcher = DynamicBatcher(8, 2.0, make_buckets(8), clock)
    clock.now = 10 * MS
    batcher.put([100, 101, 102], [0, 1, 2])
    clock.now = 11 * MS
    batcher.put([103], [3])
    assert batcher.try_take() is None  # the oldest has waited 1 ms of 2
    clock.now = 12 * MS
    batch = batcher.try_take()
    assert batch is not None
    assert batch.ids == [100, 101, 102, 103] and batch.indices == [0, 1, 2, 3]
    assert batch.bucket == 4 and batch.dispatch_ns == 12 * MS
    assert batch.queue_wait_ns_sum == 3 * 2 * MS + 1 * MS
    assert batch.queue_wait_ns_max == 2 * MS
    assert len(batcher) == 0 and batcher.try_take() is None


def test_batcher_max_batch_rule_and_order() -> None:
    clock = ManualClock()
    batcher = DynamicBatcher(4, 100.0, make_buckets(4), clock)
    batcher.put(list(range(10)), list(range(10)))
    first, second = batcher.try_take(), batcher.try_take()
    assert first is not None and second is not None
    assert (first.ids, second.ids) == ([0, 1, 2, 3], [4, 5, 6, 7])  # full batches at once, in arrival order
    assert batcher.try_take() is None  # two left, within the delay
    clock.now = 100 * MS
    third = batcher.try_take()
    assert third is not None and third.ids == [8, 9] and third.bucket == 2
    batcher.put([42], [0])
    assert batcher.drain() == [42]


def test_batcher_take_blocks_until_the_delay_with_the_wall_clock() -> None:
    batcher = DynamicBatcher(64, 1.0, make_buckets(64))
    batcher.put([1, 2], [0, 1])
    batch = batcher.take(timeout_s=5.0)
    assert batch is not None and batch.ids == [1, 2]
    batcher.close()
    assert batcher.take(timeout_s=5.0) is None


def test_batcher_full_only_takes_nothing_but_a_full_batch() -> None:
    clock = ManualClock()
    batcher = DynamicBatcher(4, 2.0, make_buckets(4), clock)
    batcher.put([0, 1, 2], [0, 1, 2])
    clock.now = 50 * MS  # long past the delay: the rule would dispatch the three
    assert batcher.take(0, full_only=True) is None and len(batcher) == 3
    batcher.put([3, 4], [3, 4])
    batch = batcher.take(0, full_only=True)
    assert batch is not None and batch.ids == [0, 1, 2, 3] and batch.bucket == 4
    clock.now = 60 * MS
    assert batcher.take(0, full_only=True) is None
    last = batcher.take(0)
    assert last is not None and last.ids == [4]


def test_batcher_wakes_a_delay_waiter_beside_one_that_waits_for_a_full_batch() -> None:
    # One instance waits for a full batch (a batch of its own still on the device), another for any work. A request
    # into the empty queue must wake the second (its delay timer starts), whichever of the two the wake-up reaches.
    batcher = DynamicBatcher(64, 0.0, make_buckets(64))
    got: dict[str, Any] = {}

    def wait(name: str, full_only: bool) -> None:
        got[name] = (batcher.take(timeout_s=5.0, full_only=full_only), time.monotonic())

    threads = [threading.Thread(target=wait, args=("full", True)), threading.Thread(target=wait, args=("any", False))]
    for thread in threads:
        thread.start()
    time.sleep(0.1)  # both are waiting
    put = time.monotonic()
    batcher.put([7], [0])
    threads[1].join(timeout=10)
    batch, when = got["any"]
    assert batch is not None and batch.ids == [7]
    assert when - put < 1.0, f"the waiting instance woke {when - put:.2f} s after the request"
    batcher.close()
    threads[0].join(timeout=10)
    assert got["full"][0] is None


def test_counters_merge() -> None:
    a, b = Counters(), Counters()
    a.add(3, 4, 30, 12, {"gather": 1.0, "compute": 10.0}, 50)
    a.add(4, 4, 8, 3, {"gather": 2.0, "compute": 10.0}, 40, 3)
    b.add(3, 4, 6, 2, {"gather": 1.0, "compute": 20.0}, 70, 1)
    merged = merge([a, b], 1000)
    assert merged["batches"] == 3 and merged["requests"] == 10 and merged["padded_samples"] == 2
    assert merged["gathered_ahead"] == 4
    assert records.batch_stats({"server": merged})["ahead_pct"] == pytest.approx(40.0)
    assert merged["batch_sizes"] == {"3": 2, "4": 1}
    assert merged["queue_ns"] == 44 and merged["queue_ns_max"] == 12
    assert merged["stage_ns"]["compute"] == 40.0
    assert merged["stage_ns_request"]["compute"] == 3 * 10.0 + 4 * 10.0 + 3 * 20.0
    assert merged["busy_ns"] == [90, 70]
    split = records.time_split_ms({"server": merged})
    assert split is not None and split["compute"] == pytest.approx(130.0 / 10 / MS)


# ------------------------------------------------------------------------------------------------ the server loop


class FakeInstance:
    """A model instance without torch: answers with its sample indices, fails or hangs on request."""

    def __init__(self, fail_on_batch: int | None = None, hang_on_batch: int | None = None,
                 hang_in_setup: bool = False) -> None:
        self.fail_on_batch = fail_on_batch
        self.hang_on_batch = hang_on_batch
        self.hang_in_setup = hang_in_setup
        self.batches = 0
        self.log: list[tuple[str, int]] = []  # ("start" | "finish", batch number) in call order
        self.release = threading.Event()
        self.busy: set[int] = set()  # batch numbers whose "device work" is not done yet (ready() is False)
        self.stages = {"gather": 1.0, "copy_in": 2.0, "compute": 3.0, "copy_out": 4.0}  # what finish() reports (ns)
        self.ahead: dict[int, int] = {}  # row of the next batch's buffer -> sample index gathered there ahead
        self.gathered: list[tuple[int, bool]] = []  # per start: rows gathered ahead, and whether they were the batch's

    def thread_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def setup(self, tick: Any) -> dict[str, Any]:
        tick()
        if self.hang_in_setup:
            self.release.wait(60)
        return {"bucket_latency_ns": {"1": 1000}}

    def gather_ahead(self, row: int, indices: Any) -> None:
        self.ahead.update(zip(range(row, row + len(indices)), indices, strict=True))

    def start(self, batch: Batch) -> tuple[int, list[int]]:
        self.batches += 1
        self.log.append(("start", self.batches))
        mine = all(self.ahead.get(r) == batch.indices[r] for r in range(batch.gathered))
        self.gathered.append((batch.gathered, mine))
        self.ahead = {}
        if self.batches == self.fail_on_batch:
            raise RuntimeError("boom in forward")
        return self.batches, list(batch.indices)

    def ready(self, ticket: tuple[int, list[int]]) -> bool:
        return ticket[0] not in self.busy

    def finish(self, ticket: tuple[int, list[int]]) -> tuple[Any, dict[str, float]]:
        number, answers = ticket
        self.log.append(("finish", number))
        if number == self.hang_on_batch:
            self.release.wait(60)
        while number in self.busy and not self.release.wait(0.001):  # the 'device' is still on it: wait, as a sync
            pass
        return answers, dict(self.stages)

    def close(self) -> None:
        self.release.set()


class Collector:
    """A sink that records every answer, and can wait for a number of them."""

    def __init__(self) -> None:
        self.answered: list[tuple[int, Any]] = []
        self.lock = threading.Condition()

    def __call__(self, ids: Any, answers: Any) -> None:
        with self.lock:
            for k, i in enumerate(ids):
                self.answered.append((i, None if answers is None else answers[k]))
            self.lock.notify_all()

    def wait_for(self, n: int) -> None:
        with self.lock:
            assert self.lock.wait_for(lambda: len(self.answered) >= n, timeout=30)


def _server(instances: list[Any], max_batch: int = 4, delay_ms: float = 0.5, timeout_s: float = 30.0,
            depth: int = 1) -> Server:
    return Server(instances, DynamicBatcher(max_batch, delay_ms, make_buckets(max_batch)), batch_timeout_s=timeout_s,
                  depth=depth)


@pytest.mark.parametrize("depth", [1, 2])
def test_server_answers_every_request_once_in_order(depth: int) -> None:
    server = _server([FakeInstance()], depth=depth)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.begin_run()
    for i in range(50):
        server.issue([1000 + i], [i % 7])
    sink.wait_for(50)
    counters = server.end_run(10**9)
    server.close()
    assert [i for i, _ in sink.answered] == [1000 + i for i in range(50)]  # one instance: arrival order
    assert [a for _, a in sink.answered] == [i % 7 for i in range(50)]  # each answer is its own request's
    assert counters["requests"] == 50 and sum(counters["batch_sizes"].values()) == counters["batches"]
    assert server.error is None


@pytest.mark.parametrize("depth", [1, 2])
def test_a_model_error_mid_run_answers_everything_and_records_why(depth: int) -> None:
    server = _server([FakeInstance(fail_on_batch=3)], max_batch=2, depth=depth)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.issue(list(range(20)), list(range(20)))
    sink.wait_for(20)
    server.issue([99], [0])  # after the failure: answered at once, without a result
    sink.wait_for(21)
    server.close()
    ids = [i for i, _ in sink.answered]
    assert sorted(ids) == [*range(20), 99] and len(set(ids)) == 21  # every request exactly once
    assert server.error == "model_error: RuntimeError: boom in forward"
    assert dict(sink.answered)[99] is None


@pytest.mark.parametrize("depth", [1, 2])
def test_a_hung_batch_times_out_and_nothing_hangs(depth: int) -> None:
    instance = FakeInstance(hang_on_batch=1)
    server = _server([instance], timeout_s=0.2, depth=depth)
    sink = Collector()
    server.set_sink(sink)
    assert server.start() is None
    server.issue([1, 2, 3], [0, 1, 2])
    sink.wait_for(3)
    assert server.error is not None and server.error.startswith("timeout: instance 0 spent more than 0.2 s")
    instance.release.set()  # the hung batch finishes late: it must not be answered a second time
    server.close()
    assert sorted(i for i, _ in sink.answered) == [1, 2, 3]


def test_a_hung_warm_up_times_out() -> None:
    instance = FakeInstance(hang_in_setup=True)
    server = _server([instance, FakeInstance()], timeout_s=0.2)
    assert server.start() == "timeout: instance 0's warm-up call took more than 0.2 s"
    server.close()


# ------------------------------------------------------------------------------------------------ the search


def fake_sut(capacity: float, *, fail_at: float | None = None) -> tuple[Any, list[float]]:
    """A server of known capacity: a run is VALID iff its target is at most ``capacity``."""
    targets: list[float] = []

    def run_step(target: float, role: str) -> dict[str, Any]:
        targets.append(target)
        if fail_at is not None and target >= fail_at:
            return {"error": "model_error: boom"}
        return {"loadgen": {"validity": "VALID" if target <= capacity else "INVALID"}, "error": None}

    return run_step, targets


@pytest.mark.parametrize(("capacity", "start"), [(13_900.0, 7_800.0), (13_900.0, 100.0), (777.0, 50_000.0),
                                                 (5.0, 5.0)])
def test_search_finds_the_capacity_within_the_resolution(capacity: float, start: float) -> None:
    run_step, targets = fake_sut(capacity)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=start, resolution=0.02)
    assert outcome["stopped_by"] == "resolution"
    assert capacity * (1 - 0.02) <= outcome["best_qps"] <= capacity
    assert outcome["hi_qps"] - outcome["lo_qps"] <= 0.02 * outcome["lo_qps"]
    assert outcome["steps"] == len(targets)


def test_search_reports_none_when_no_target_is_valid() -> None:
    run_step, targets = fake_sut(0.5)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=64.0)
    assert outcome["best_qps"] is None and outcome["stopped_by"] == "floor"
    assert targets == [64.0, 32.0, 16.0, 8.0, 4.0, 2.0, 1.0]


def test_search_stops_going_down_when_a_run_proves_it_hopeless() -> None:
    run_step, targets = fake_sut(0.5)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=64.0, hopeless=lambda record: True)
    assert outcome["stopped_by"] == "hopeless" and targets == [64.0]


def test_search_stops_on_a_server_error_and_at_max_steps() -> None:
    run_step, targets = fake_sut(1000.0, fail_at=400.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0)
    assert outcome["stopped_by"] == "error" and outcome["best_qps"] == 200.0 and targets == [100.0, 200.0, 400.0]
    run_step, targets = fake_sut(1000.0)
    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, max_steps=3)
    assert outcome["stopped_by"] == "max_steps" and len(targets) == 3


def test_search_roles_and_bisect_points() -> None:
    calls: list[tuple[float, str]] = []

    def run_step(target: float, role: str) -> dict[str, Any]:
        calls.append((target, role))
        return {"loadgen": {"validity": "VALID" if target <= 130.0 else "INVALID"}}

    outcome = search_max_qps(run_step, records.is_valid, start_qps=100.0, resolution=0.1)
    assert calls == [(100.0, "bracket"), (200.0, "bracket"), (150.0, "bisect"), (125.0, "bisect"),
                     (137.5, "bisect")]  # then 137.5 - 125 <= 10% of 125: done
    assert outcome["best_qps"] == 125.0 and outcome["hi_qps"] == 137.5


# ------------------------------------------------------------------------------------------------ LoadGen's logs

DETAIL = "\n".join(":::MLLOG " + json.dumps({"key": k, "value": v, "metadata": m}) for k, v, m in [
    ("loadgen_version", "6.0.17 @ d6147c7eb7", {}),
    ("result_validity", "INVALID", {}),
    ("result_perf_constraints_met", False, {}),
    ("result_min_duration_met", True, {}),
    ("result_min_queries_met", True, {}),
    ("early_stopping_met", False, {}),
    ("result_invalid_reason", "Reduce target QPS to improve latency. ", {}),
    ("result_query_count", 60123, {}),
    ("result_scheduled_samples_per_sec", 6001.5, {}),
    ("result_completed_samples_per_sec", 5712.25, {}),
    ("result_mean_latency_ns", 9000000, {}),
    ("result_50.00_percentile_latency_ns", 4000000, {}),
    ("result_99.00_percentile_latency_ns", 31000000, {}),
    ("result_99.90_percentile_latency_ns", 52000000, {}),
    ("result_99.00_percentile_per_query_latency_ns", 32000000, {}),
    ("effective_target_qps", 6000, {}),
    ("error_runtime", "Ending early: Too many outstanding queries.", {"is_error": True}),
    ("warning_generic_message", "Logging allocation detected", {"is_warning": True}),
]) + "\nnot a record\n"

SUMMARY = """================================================
MLPerf Results Summary
================================================
SUT name : PyFastSUT
Scenario : Server
Mode     : PerformanceOnly
Completed samples per second    : 5712.25
Result is : INVALID
  Performance constraints satisfied : NO
  Min duration satisfied : Yes
Recommendations:
 * Reduce target QPS to improve latency.
 * The test exited early, before enough queries were issued.
   See the detailed log for why this may have occurred.
Early Stopping Result:
 * Run unsuccessful.

Scheduled samples per second : 6001.50
Min latency (ns)                : 123456
90.00 percentile latency (ns)   : 20000000
99.00 percentile latency (ns)   : 31000000
"""


def test_parse_detail_log() -> None:
    facts = parse_detail(DETAIL)
    assert facts["validity"] == "INVALID" and facts["perf_constraints_met"] is False
    assert facts["invalid_reason"] == "Reduce target QPS to improve latency."
    assert facts["scheduled_qps"] == 6001.5 and facts["completed_qps"] == 5712.25
    assert facts["latency_ns"] == {"mean": 9000000, "p50": 4000000, "p99": 31000000, "p99.9": 52000000}
    assert facts["query_latency_ns"] == {"p99": 32000000}
    assert facts["effective"] == {"target_qps": 6000}
    assert facts["errors"] == ["error_runtime: Ending early: Too many outstanding queries."]
    assert facts["warnings"] == ["warning_generic_message: Logging allocation detected"]


def test_parse_summary_log() -> None:
    facts = parse_summary(SUMMARY)
    assert facts["validity"] == "INVALID" and facts["scenario"] == "Server"
    assert facts["reasons"] == ["Reduce target QPS to improve latency.",
                                "The test exited early, before enough queries were issued. See the detailed log "
                                "for why this may have occurred."]
    assert facts["completed_qps"] == 5712.25 and facts["scheduled_qps"] == 6001.5
    assert facts["latency_ns"] == {"min": 123456, "p90": 20000000, "p99": 31000000}


def test_parse_logs_merges_both_and_names_a_missing_folder(tmp_path: Path) -> None:
    (tmp_path / "mlperf_log_detail.txt").write_text(DETAIL)
    (tmp_path / "mlperf_log_summary.txt").write_text(SUMMARY)
    facts = parse_logs(tmp_path)
    assert facts["latency_ns"]["p90"] == 20000000 and facts["latency_ns"]["p99"] == 31000000  # detail wins
    step = {"loadgen": facts, "error": None}
    assert not records.is_valid(step)
    assert records.reason(step).startswith("not met: latency bound, early stopping (Reduce target QPS")
    assert records.latency_ms(step, "p99") == 31.0
    with pytest.raises(ResultFileError, match="holds no LoadGen log"):
        parse_logs(tmp_path / "missing")


def test_early_stopping_shortfall_and_the_retry_with_more_queries() -> None:
    from clsbench.serving.scenario import with_enough_queries

    short_server = {"validity": "INVALID", "perf_constraints_met": True, "min_duration_met": True,
                    "min_queries_met": True, "early_stopping_met": False, "query_count": 200,
                    "early_stopping_result": "* Run unsuccessful.  * Processed 200 queries.  * Would need to run at "
                                             "least 259 more queries,  with the run being successful if every ..."}
    short_multi = {**short_server, "perf_constraints_met": None, "query_count": 251,
                   "early_stopping_result": " * Only processed 251 queries.  * Need to process at least 662 "
                                            "queries for early stopping."}
    assert records.early_stopping_shortfall({"loadgen": short_server}) == 259
    assert records.early_stopping_shortfall({"loadgen": short_multi}) == 411
    assert records.early_stopping_shortfall({"loadgen": {**short_server, "perf_constraints_met": False}}) is None
    assert records.early_stopping_shortfall({"loadgen": {"validity": "VALID"}}) is None

    calls: list[tuple[int, str]] = []

    def run(params: LoadGenParams, role: str) -> dict[str, Any]:
        calls.append((params.min_query_count, role))
        return {"loadgen": short_server if len(calls) == 1 else {"validity": "VALID"}}

    step = with_enough_queries(run, LoadGenParams("Server", 1000, 100, target_qps=50.0), "bracket")
    assert records.is_valid(step) and calls == [(100, "bracket"), (200 + 2 * 259, "retry")]


def test_default_threads() -> None:
    from clsbench.serving.config import default_threads

    assert default_threads(16, 2) == 4 and default_threads(2, 1) == 1 and default_threads(1, 4) == 1


# ------------------------------------------------------------------------------------------------ settings, input


def test_settings_reject_bad_input_with_one_line() -> None:
    base = ServeSettings(model="m", modes=("fp32",), device="cpu", scenarios=("server",))
    for change, message in [({"latency_bound_ms": 0.0}, "--latency-bound-ms must be > 0"),
                            ({"latency_bound_ms": -3.0}, "--latency-bound-ms must be > 0"),
                            ({"max_batches": (0,)}, "--max-batch must be whole numbers >= 1"),
                            ({"max_delays_ms": (-1.0,)}, "--max-delay-ms must be >= 0 ms"),
                            ({"min_duration_s": 0.0}, "--min-duration-s must be > 0"),
                            ({"search_resolution": 0.9}, "--resolution must lie in"),
                            ({"cuda_graphs": True}, "--cuda-graphs needs a CUDA device")]:
        with pytest.raises(InvalidInputError, match=message) as info:
            dataclasses.replace(base, **change).validate()
        assert "\n" not in str(info.value) and info.value.hint
    with pytest.raises(InvalidInputError, match="'x' is not a whole number"):
        parse_list("8,x", int, "--max-batch", "e.g. --max-batch 8")
    assert parse_list(("8,16", "16", "32"), int, "--max-batch", "") == (8, 16, 32)
    assert base.validate() is base and len(dataclasses.replace(base, max_batches=(8, 16), instances=(1, 2)).configs()) \
        == 4


def test_loadgen_missing_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.serving.loadgen import import_loadgen

    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)
    with pytest.raises(InvalidInputError, match="LoadGen") as info:
        import_loadgen()
    assert "pip install" in (info.value.hint or "") and "mlcommons-loadgen" in (info.value.hint or "")


def test_cli_bad_input_is_one_error_line() -> None:
    from clsbench.cli.serve_cmds import register

    group = click.Group()
    register(group)
    out = CliRunner().invoke(group, ["serve", "--model", "clsbench_testmodels:tiny", "--device", "cpu",
                                     "--latency-bound-ms", "0"])
    assert out.exit_code == 2
    assert out.output.splitlines()[0] == "error: --latency-bound-ms must be > 0, got 0"
    out = CliRunner().invoke(group, ["serve", "--model", "clsbench_testmodels:tiny", "--device", "cpu",
                                     "--scenario", "servr"])
    assert out.exit_code == 2 and "unknown scenario 'servr'" in out.output and "did you mean: server?" in out.output


# ------------------------------------------------------------------------------------------------ scenarios


def test_scenarios_are_registered_and_ordered() -> None:
    assert {"offline", "single-stream", "multi-stream", "server"} <= set(SCENARIOS.names())
    assert ordered(["server", "single-stream", "offline"]) == ["offline", "single-stream", "server"]
    with pytest.raises(InvalidInputError, match="unknown scenario 'ofline'"):
        ordered(["ofline"])


class EchoScenario:
    """A dummy scenario registered by this test module: one Offline LoadGen run, answered by samples/s x 2."""

    name = "echo-test"
    loadgen_name = "Offline"
    axes = ("max_batch",)
    forced_delay_ms = None
    order = 5
    description = "test only"

    def run(self, ctx: ScenarioContext) -> None:
        ctx.run_step(LoadGenParams("Offline", 200, 64, expected_qps=200.0), "run")
        ctx.facts["echo"] = True

    def headline(self, steps: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
        step = steps[-1] if steps else None
        value = records.loadgen_figure(step, "samples_per_second") if step else None
        return {"figure": None if value is None else 2 * value, "unit": "samples/s", "label": "echo", "step": step,
                "note": ""}


@pytest.fixture
def echo_scenario() -> Any:
    SCENARIOS.register("echo-test", EchoScenario())
    yield
    SCENARIOS.unregister("echo-test")


def test_a_scenario_registered_from_a_test_module_is_found(echo_scenario: None) -> None:
    assert ordered(["server", "echo-test", "offline"]) == ["offline", "echo-test", "server"]
    step = {"loadgen": {"validity": "VALID", "samples_per_second": 10.0}}
    assert scenario_summary("echo-test", [step], {})["throughput_img_s"] == 20.0


# ------------------------------------------------------------------------------------------------ the analysis


def _step(index: int, setting: tuple[int, float, int], target: float | None, p99: float, valid: bool, *,
          scenario: str = "server", mode: str = "bf16+cl", split: tuple[float, float] = (1.0, 4.0),
          sps: float | None = None, role: str = "bisect", completed: float | None = None) -> dict[str, Any]:
    batch, delay, inst = setting
    requests = 1000
    queue, compute = split
    return {
        "index": index, "mode": mode, "scenario": scenario, "role": role,
        "setting": {"max_batch": batch, "max_delay_ms": delay, "instances": inst, "buckets": [batch],
                    "cuda_graphs": False},
        "params": {"scenario": "Server", "target_qps": target} if target else {"scenario": "Offline"},
        "loadgen": {"validity": "VALID" if valid else "INVALID", "perf_constraints_met": valid,
                    "latency_ns": {"p50": int(p99 / 3 * MS), "p90": int(p99 / 2 * MS), "p99": int(p99 * MS),
                                   "p99.9": int(p99 * 1.2 * MS)},
                    "completed_qps": completed if completed is not None else target, "scheduled_qps": target,
                    "samples_per_second": sps, "query_count": requests,
                    "reasons": [] if valid else ["Reduce target QPS to improve latency."]},
        "server": {"requests": requests, "batches": 50, "padded_samples": 0, "batch_sizes": {"20": 50},
                   "queue_ns": queue * MS * requests, "stage_ns": {"compute": compute * MS * 50},
                   "stage_ns_request": {"compute": compute * MS * requests}, "busy_ns": [10**9], "wall_ns": 2 * 10**9},
        "error": None, "log_dir": f"serve.loadgen/{index:03d}", "wall_s": 10.0,
    }


def _result(steps_by_scenario: dict[str, list[dict[str, Any]]], mode: str = "bf16+cl") -> BenchmarkResult:
    settings = {"model": "resnet50", "device": "cuda", "latency_bound_ms": 15.0, "latency_percentile": 0.99,
                "min_duration_s": 10.0}
    measurements = tuple(
        Measurement(model="resnet50", workload=f"serve-{scenario}", mode=mode, batch_size=64, device="cuda",
                    status="ok", repeats=tuple(steps), summary=scenario_summary(scenario, steps, settings))
        for scenario, steps in steps_by_scenario.items())
    return BenchmarkResult(environment={"gpu": {"name": "NVIDIA H200"}},
                           settings={"serve": {"format": 1, "settings": settings, "log_dir": "serve.loadgen"}},
                           measurements=measurements)


def test_analysis_names_the_best_setting_and_why() -> None:
    a, b = (64, 2.0, 2), (128, 2.0, 2)
    steps = [_step(2, a, 7000, 6.0, True), _step(3, a, 14000, 13.9, True), _step(4, a, 15000, 40.0, False),
             _step(5, b, 7000, 12.0, True, split=(1.0, 9.0)), _step(6, b, 12000, 14.0, True, split=(1.2, 9.5)),
             _step(7, b, 13000, 19.0, False, split=(1.2, 9.9))]
    offline = [_step(1, a, None, 30.0, True, scenario="offline", sps=15000.0, role="run")]
    result = _result({"offline": offline, "server": steps})
    assert is_serve_result(result)
    analysis = analyze_serve(result)
    server = next(e for e in analysis["modes"][0]["scenarios"] if e["scenario"] == "server")
    assert server["figure"] == 14000 and server["best_setting"] == "b64 d2ms i2"
    assert [s["figure"] for s in server["settings"]] == [14000, 12000]
    assert "b128 d2ms i2: 12,000 qps; its requests spent 9.50 ms in compute against 4.00 ms" in server["why"]
    assert "at 13,000 qps p99 was 19.00 ms with its instances only 50% busy" in server["why"]
    assert "out of latency budget, not throughput" in server["why"]
    goal = analysis["modes"][0]["goal"]
    assert goal["ratio"] == pytest.approx(14000 / 15000) and goal["met"]
    text = render_serve(analysis)
    assert "server QPS (p99 <= 15 ms): 14,000 qps" in text and "server / offline: 93.3% (goal >= 90%: met)" in text
    assert "INVALID: not met: latency bound (Reduce target QPS to improve latency.)" in text
    svg = latency_chart_svg(analysis)
    assert svg.startswith("<svg") and "bound 15 ms" in svg and svg.count("<circle") == 6
    assert batch_histogram_svg(server["best"]).count("<rect") == 2
    fragment = render_serve_html(analysis)
    assert fragment.count("<svg") == 2 and "batch sizes of the best Server run (b64 d2ms i2, 14,000 qps)" in fragment
    rows = csv_rows(analysis)
    assert len(rows) == 7 and rows[-1]["compute_ms"] == pytest.approx(9.9) and rows[-1]["busy_pct"] == 50.0
    # what the generic table and the history index read
    summary = result.measurements[1].summary
    assert summary["throughput_img_s"] == 14000 and summary["latency_ms"]["p99"] == pytest.approx(13.9)


def test_analysis_when_no_target_meets_the_bound() -> None:
    steps = [_step(1, (64, 2.0, 2), 100, 22.0, False), _step(2, (64, 2.0, 2), 50, 21.5, False)]
    analysis = analyze_serve(_result({"server": steps}))
    entry = analysis["modes"][0]["scenarios"][0]
    assert entry["figure"] is None
    assert entry["note"] == ("no target met p99 <= 15 ms; the lowest p99 seen was 21.50 ms at 50 qps (b64 d2ms i2)")
    assert "server QPS (p99 <= 15 ms): none" in render_serve(analysis)


def test_compare_uses_confirm_repeats_for_significance() -> None:
    s = (64, 2.0, 2)
    a = _result({"server": [_step(1, s, 10000, 12.0, True, completed=9990), _step(2, s, 10000, 12.1, True,
                 role="confirm", completed=9995), _step(3, s, 10000, 11.9, True, role="confirm", completed=9992)]})
    b = _result({"server": [_step(1, s, 12000, 12.0, True, completed=11990), _step(2, s, 12000, 12.2, True,
                 role="confirm", completed=11980), _step(3, s, 12000, 12.1, True, role="confirm", completed=11985)]})
    comparison = compare_serve(a, b)
    row = comparison["rows"][0]
    assert row["ratio"] == pytest.approx(1.2)
    assert row["tests"]["completed_qps"]["significant"] and row["tests"]["completed_qps"]["n_a"] == 3
    assert not row["tests"]["p99_ms"]["significant"]
    assert "10,000 qps -> 12,000 qps (1.200x)" in render_serve_compare(comparison)
    single = compare_serve(_result({"server": a.measurements[0].repeats[:1]}), b)
    assert "significance not assessed" in render_serve_compare(single)


# ------------------------------------------------------------------------------------------------ end to end

_calls = {"n": 0, "fail_after": 10**9, "interrupt": False}


def _counting_tiny(num_classes: int = 1000) -> Any:
    """The tiny test model, failing after a set number of forward calls or pressing Ctrl-C when told to."""
    import torch

    from clsbench_testmodels import Tiny

    class Counting(Tiny):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            _calls["n"] += 1
            if _calls["n"] > _calls["fail_after"]:
                raise RuntimeError("forward failed on purpose")
            if _calls["interrupt"]:
                _calls["interrupt"] = False
                _thread.interrupt_main()
            return super().forward(x)

    return Counting(num_classes)


_counting_tiny.input_size = 32  # type: ignore[attr-defined]


@pytest.fixture
def counting_model(monkeypatch: pytest.MonkeyPatch) -> str:
    from clsbench.models import register_model
    from clsbench.models.sources import custom_source

    monkeypatch.setattr(custom_source, "_REGISTERED", dict(custom_source._REGISTERED))  # no leak into other tests
    register_model("serve_test_counting_tiny", input_size=32)(_counting_tiny)
    _calls.update(n=0, fail_after=10**9, interrupt=False)
    return "serve_test_counting_tiny"


def _settings(model: str, **kw: Any) -> ServeSettings:
    base = dict(model=model, modes=("fp32",), device="cpu", scenarios=("offline", "single-stream", "server"),
                max_batches=(4,), max_delays_ms=(1.0,), instances=(1,), latency_bound_ms=2000.0, min_duration_s=0.2,
                min_queries=32, sample_count=16, max_search_steps=2, start_qps=50.0)
    base.update(kw)
    return ServeSettings(**base)


def test_a_mode_the_device_cannot_run_is_skipped_with_its_reason(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    outcome = serve(_settings("clsbench_testmodels:tiny", modes=("tf32", "fp32+cudagraph"), scenarios=("offline",)),
                    tmp_path / "serve.json", execution=NO_ENV)
    assert [(m.mode, m.status) for m in outcome.result.measurements] == [("tf32", "skipped"),
                                                                          ("fp32+cudagraph", "skipped")]
    assert {m.reason for m in outcome.result.measurements} == {"unsupported_mode"}
    assert outcome.result.measurements[0].detail.startswith("TF32 is a tensor-core mode")
    assert outcome.result.measurements[1].detail == "CUDA graphs need a CUDA device; this device is cpu"
    assert "SKIPPED: TF32 is a tensor-core mode" in render_serve(analyze_serve(outcome.result))


def test_each_instance_count_gets_its_own_share_of_the_cores(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlperf_loadgen")
    import torch

    from clsbench.procedures import serve as serve_module
    from clsbench.serving.analysis import loop_differences

    monkeypatch.setattr(serve_module.os, "cpu_count", lambda: 8)
    before = torch.get_num_threads()
    outcome = serve_module.serve(_settings("clsbench_testmodels:tiny", scenarios=("offline",), instances=(1, 2)),
                                 tmp_path / "serve.json", execution=NO_ENV)
    # Half the cores shared by the setting's instances: 4 threads for one, 2 for two (not 2 for both).
    setups = outcome.result.settings["serve"]["setups"]
    assert [(s["instances"], s["torch_threads"]) for s in setups] == [(1, 4), (2, 2)]
    assert torch.get_num_threads() == before  # given back after the serve
    told = serve_module.serve(_settings("clsbench_testmodels:tiny", scenarios=("offline",), instances=(1, 2),
                                        threads=1), tmp_path / "told.json", execution=NO_ENV)
    assert [s["torch_threads"] for s in told.result.settings["serve"]["setups"]] == [1, 1]  # --threads holds
    assert loop_differences(outcome.result, told.result) == [{"fact": "torch threads", "a": "2, 4", "b": "1"}]


def test_hopeless_and_progress_line() -> None:
    from clsbench.cli.serve_cmds import progress_line
    from clsbench.scenarios.server import hopeless

    idle = {"loadgen": {"perf_constraints_met": False}, "server": {"wall_ns": 100, "busy_ns": [10, 20]}}
    assert hopeless(idle) and not hopeless({**idle, "server": {"wall_ns": 100, "busy_ns": [90, 95]}})
    assert not hopeless({**idle, "loadgen": {"perf_constraints_met": True}})
    line = progress_line({"kind": "step", "step": _step(7, (64, 2.0, 2), 14000, 13.9, True)})
    assert line == "[7] bf16+cl server b64 d2ms i2 bisect 14,000 qps: VALID; p99 13.90 ms, done 14,000/s, " \
                   "mean batch 20.0, 10.0 s"


def test_end_to_end_loadgen_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    events: list[dict[str, Any]] = []
    path = tmp_path / "serve.json"
    # 600 queries: enough for LoadGen's early-stopping rule at p99 (about 460 with none over the bound)
    outcome = serve(_settings("clsbench_testmodels:tiny", min_queries=600, start_qps=400.0, max_search_steps=1),
                    path, execution=Execution(env={"host": "test"}, progress=events.append))
    loaded = result_io.load(path)
    assert loaded.to_dict() == json.loads(json.dumps(outcome.result.to_dict()))
    assert [m.workload for m in loaded.measurements] == ["serve-offline", "serve-single-stream", "serve-server"]
    assert all(m.status == "ok" for m in loaded.measurements)
    steps = [s for m in loaded.measurements for s in m.repeats]
    assert [s["index"] for s in steps] == list(range(1, len(steps) + 1))
    server_steps = [s for s in steps if s["scenario"] == "server"]
    assert 1 <= len(server_steps) <= 3 and server_steps[0]["params"]["target_qps"] == 400.0  # 2 retries at most
    for step in steps:
        assert step["loadgen"]["validity"] in ("VALID", "INVALID") and step["error"] is None
        assert (tmp_path / step["log_dir"] / "mlperf_log_summary.txt").exists()
        assert (tmp_path / step["log_dir"] / "mlperf_log_detail.txt").exists()
        # every query LoadGen counted went through the server's batches
        assert step["server"]["requests"] == step["loadgen"]["query_count"] * \
            (step["loadgen"].get("generated_samples_per_query") or 1)
    single = next(s for s in steps if s["scenario"] == "single-stream")
    assert single["setting"]["max_delay_ms"] == 0.0 and single["server"]["batch_sizes"] == {
        "1": single["server"]["batches"]}
    assert loaded.settings["serve"]["searches"][0]["search"]["steps"] == len(server_steps)
    assert sum(1 for e in events if e["kind"] == "step") == len(steps)
    text = render_serve(analyze_serve(loaded))
    assert "LoadGen runs" in text and "offline samples/s" in text
    with pytest.raises(ResultFileError, match="already exists"):
        serve(_settings("clsbench_testmodels:tiny"), path, execution=NO_ENV)


def test_a_scenario_plugin_from_a_test_module_runs_end_to_end(tmp_path: Path, echo_scenario: None) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    outcome = serve(_settings("clsbench_testmodels:tiny", scenarios=("echo-test",), max_batches=(2, 4)), None,
                    execution=NO_ENV)
    (m,) = outcome.result.measurements
    assert m.workload == "serve-echo-test" and len(m.repeats) == 2  # once per max batch, its only axis
    assert [s["setting"]["max_batch"] for s in m.repeats] == [2, 4]
    assert outcome.result.settings["serve"]["searches"][0]["echo"] is True
    # Without a result file the logs go to a fresh temporary folder, which is the caller's to keep or remove.
    assert outcome.path is None and outcome.log_root.parent.name.startswith("clsbench-serve-")
    assert any(outcome.log_root.glob("*/mlperf_log_summary.txt"))
    shutil.rmtree(outcome.log_root.parent)


def test_a_model_failing_mid_run_makes_that_run_invalid_and_nothing_hangs(tmp_path: Path,
                                                                          counting_model: str) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve
    from clsbench.serving.instance import ESTIMATE_CALLS, WARMUP_CALLS

    settings = _settings(counting_model, max_batches=(2,))
    _calls["fail_after"] = len(make_buckets(2)) * (WARMUP_CALLS + ESTIMATE_CALLS) + 1  # the 2nd timed batch
    outcome = serve(settings, tmp_path / "serve.json", execution=NO_ENV)
    steps = [s for m in outcome.result.measurements for s in m.repeats]
    assert steps[0]["error"] == "model_error: RuntimeError: forward failed on purpose"
    assert not records.is_valid(steps[0]) and steps[0]["loadgen"]["validity"] in ("VALID", "INVALID")
    assert all(s["error"].startswith("not run: model_error") for s in steps[1:])
    assert [m.status for m in outcome.result.measurements] == ["failed", "failed", "failed"]  # nothing ran well
    assert outcome.result.measurements[1].reason == "model_error"
    assert outcome.result.measurements[1].detail == "model_error: RuntimeError: forward failed on purpose"


def test_ctrl_c_keeps_the_finished_runs(tmp_path: Path, counting_model: str) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import ServeInterrupted, serve

    def progress(event: dict[str, Any]) -> None:
        if event["kind"] == "step" and event["step"]["scenario"] == "offline":
            _calls["interrupt"] = True  # the next forward call (single-stream's first batch) presses Ctrl-C

    path = tmp_path / "serve.json"
    with pytest.raises(ServeInterrupted) as info:
        serve(_settings(counting_model, scenarios=("offline", "single-stream")), path,
              execution=Execution(env={}, progress=progress))
    saved = result_io.load(path)
    assert saved.to_dict() == json.loads(json.dumps(info.value.outcome.result.to_dict()))
    offline = [s for m in saved.measurements for s in m.repeats if s["scenario"] == "offline"]
    assert offline and all(s["error"] is None for s in offline)
    assert not [s for m in saved.measurements for s in m.repeats if s["scenario"] == "single-stream"]
    assert not info.value.abandoned


@pytest.mark.gpu
def test_gpu_serve_with_cuda_graphs_per_bucket(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    settings = _settings("clsbench_testmodels:tiny", device="cuda", modes=("bf16+cl",), cuda_graphs=True,
                         max_batches=(8,), instances=(2,), latency_bound_ms=50.0, min_queries=600, start_qps=2000.0,
                         max_search_steps=1)
    outcome = serve(settings, tmp_path / "serve.json", execution=NO_ENV)
    setups = outcome.result.settings["serve"]["setups"]
    assert setups[0]["error"] is None and all(f["cuda_graphs"] for f in setups[0]["instances_facts"])
    steps = [s for m in outcome.result.measurements for s in m.repeats]
    assert steps and all(s["error"] is None for s in steps)
    assert all(s["server"]["stage_ns"]["compute"] > 0 for s in steps)


@pytest.mark.gpu
def test_gpu_cudagraph_modifier_means_graphs_per_bucket(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    settings = _settings("clsbench_testmodels:tiny", device="cuda", modes=("bf16+cudagraph",),
                         scenarios=("offline",), max_batches=(4,))
    outcome = serve(settings, None, execution=NO_ENV)
    shutil.rmtree(outcome.log_root.parent)  # the temporary folder of LoadGen's logs
    assert outcome.result.settings["serve"]["modes"]["bf16+cudagraph"]["cuda_graphs"] is True
    assert outcome.result.measurements[0].repeats[0]["error"] is None


# ------------------------------------------------------------------------------------------------ the wiring


def _confirmed(target: float, completed: float, p99s: tuple[float, ...]) -> BenchmarkResult:
    """A serve result whose server answer ``target`` was run ``len(p99s)`` times (search + ``--confirm``)."""
    s = (64, 2.0, 2)
    steps = [_step(i + 1, s, target, p99, True, role="confirm" if i else "bisect", completed=completed + i)
             for i, p99 in enumerate(p99s)]
    offline = [_step(len(steps) + 1, s, None, 30.0, True, scenario="offline", sps=15000.0, role="run")]
    return _result({"offline": offline, "server": steps})


def _cli(args: list[str], tmp_path: Path) -> Any:
    from clsbench.cli import main

    return CliRunner().invoke(main, args, env={"CLSBENCH_DB": str(tmp_path / "index.sqlite3")})


def test_serve_is_a_command_of_the_cli_and_its_help_states_the_quick_look(tmp_path: Path) -> None:
    from clsbench.cli import main

    assert "serve" in main.commands
    out = _cli(["serve", "--help"], tmp_path)
    text = " ".join(out.output.split())
    assert out.exit_code == 0 and "a quick look of 10 s" in text and "--mlperf" in text and "600 s" in text
    for shared in ("--device", "--input-size", "--seed", "--compile-mode", "--output", "--quiet"):
        assert shared in text
    for foreign in ("--repeats", "--warmup", "--isolation", "--clock"):
        assert foreign not in text


def test_min_duration_is_a_quick_look_unless_mlperf_is_asked_for(tmp_path: Path) -> None:
    from clsbench.cli.serve_cmds import min_duration

    assert min_duration(None, False) == 10.0 and min_duration(None, True) == 600.0 and min_duration(3.0, False) == 3.0
    assert ServeSettings(model="m", modes=("fp32",), device="cpu", scenarios=("server",)).min_duration_s == 10.0
    out = _cli(["serve", "--model", "clsbench_testmodels:tiny", "--device", "cpu", "--mlperf", "--min-duration-s",
                "5"], tmp_path)
    assert out.exit_code == 2 and out.output.splitlines()[0].startswith("error: --mlperf sets MLPerf's minimum")


def test_shared_options_reach_the_settings() -> None:
    from clsbench.core.options import MeasureOptions

    settings = ServeSettings.with_options(MeasureOptions(seed=7, input_size=64, compile_mode="max-autotune"),
                                          model="m", modes=("fp32",), device="cpu", scenarios=("server",))
    assert (settings.seed, settings.input_size, settings.compile_mode) == (7, 64, "max-autotune")


def test_both_instance_counts_are_tried_unless_told() -> None:
    from click.testing import CliRunner

    from clsbench.cli import main

    # 1 won the server scenario on an H100 and 2 the offline one, so a plain serve tries both (max batch, then
    # instances, then delay).
    settings = ServeSettings(model="m", modes=("fp32",), device="cpu", scenarios=("server",))
    assert [c.label for c in settings.configs()] == ["b64 d2ms i1", "b64 d2ms i2"]
    help_text = CliRunner().invoke(main, ["serve", "--help"], terminal_width=200).output
    assert "[default: 1,2]" in " ".join(help_text.split())


def test_show_prints_the_serve_section_and_exports_one_row_per_loadgen_run(tmp_path: Path) -> None:
    path = tmp_path / "serve.json"
    result_io.save(_confirmed(10000, 9990, (12.0, 12.1, 11.9)), path)
    out = _cli(["show", str(path)], tmp_path)
    assert out.exit_code == 0, out.output
    assert "serve-server" in out.output  # the generic table
    assert "server QPS (p99 <= 15 ms): 10,000 qps" in out.output and "LoadGen runs" in out.output
    out = _cli(["show", str(path), "--format", "csv"], tmp_path)
    lines = out.output.splitlines()
    assert out.exit_code == 0 and lines[0].startswith("result_file,model,device,index,mode,scenario,role,setting")
    assert len(lines) == 1 + 4 and "queue_ms" in lines[0] and "compute_ms" in lines[0]
    out = _cli(["show", str(path), "--format", "markdown"], tmp_path)
    assert out.exit_code == 0 and out.output.startswith("| result_file | model | device | index |")


def test_compare_of_serve_results_tests_qps_and_p99_and_gates_a_slowdown(tmp_path: Path) -> None:
    fast, slow = tmp_path / "fast.json", tmp_path / "slow.json"
    result_io.save(_confirmed(12000, 11990, (12.0, 12.2, 12.1)), fast)
    result_io.save(_confirmed(10000, 9990, (12.0, 12.1, 11.9)), slow)
    out = _cli(["compare", str(fast), str(slow)], tmp_path)
    assert out.exit_code == 0, out.output
    assert "12,000 qps -> 10,000 qps" in out.output and "completed_qps: significant" in out.output
    assert "p99_ms: not significant" in out.output
    assert "significance not assessed" in out.output  # offline ran once on each side
    out = _cli(["compare", str(fast), str(slow), "--fail-if-slower", "5%"], tmp_path)
    assert out.exit_code == 5 and "SLOWER bf16+cl server" in out.output and "16.7% slower" in out.output
    out = _cli(["compare", str(slow), str(fast), "--fail-if-slower", "5%"], tmp_path)
    assert out.exit_code == 0 and "no significant slowdown" in out.output
    out = _cli(["compare", str(fast), str(slow), "--format", "json"], tmp_path)
    data = json.loads(out.output)
    assert data["procedure"] == "serve" and data["comparisons"][0]["rows"][1]["tests"]["completed_qps"]["significant"]
    out = _cli(["compare", str(fast), str(slow), "--format", "csv"], tmp_path)
    assert out.output.splitlines()[0].startswith(
        "run,run_label,mode,scenario,input_size,answer,unit,baseline,value,ratio")


def test_compare_without_repeats_says_significance_was_not_assessed(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    result_io.save(_confirmed(12000, 11990, (12.0,)), a)
    result_io.save(_confirmed(10000, 9990, (12.0,)), b)
    out = _cli(["compare", str(a), str(b), "--fail-if-slower", "5"], tmp_path)
    assert out.exit_code == 0 and "completed_qps: significance not assessed" in out.output


def _sized(result: BenchmarkResult, built: int | None, asked: int | None = None) -> BenchmarkResult:
    """``result`` served at input size ``built`` (as the engine records it per mode; None: the mode was never built)
    after ``asked`` was asked for (None: the model's default)."""
    serve = dict(result.settings["serve"])
    serve["settings"] = {**serve["settings"], "input_size": asked}
    serve["modes"] = {m.mode: {"input_size": built} for m in result.measurements} if built else {}
    measurements = tuple(dataclasses.replace(m, input_size=asked) for m in result.measurements)
    return dataclasses.replace(result, settings={"serve": serve}, measurements=measurements)


def test_serve_answers_at_different_input_sizes_are_never_compared(tmp_path: Path) -> None:
    small = _sized(_confirmed(12000, 11990, (12.0, 12.2, 12.1)), 64, asked=64)
    large = _sized(_confirmed(10000, 9990, (12.0, 12.1, 11.9)), 160, asked=160)
    comparison = compare_serve(small, large)
    assert comparison["rows"] == []
    assert {(d["scenario"], d["a_input_size"], d["b_input_size"]) for d in comparison["unmatched"]} == {
        ("server", 64, 160), ("offline", 64, 160)}
    result_io.save(small, tmp_path / "small.json")
    result_io.save(large, tmp_path / "large.json")
    out = _cli(["compare", str(tmp_path / "small.json"), str(tmp_path / "large.json")], tmp_path)
    assert out.exit_code == 2 and "input size 64 vs 160" in out.output and "qps ->" not in out.output
    # The model's default, recorded by the engine in one file, is the size of the other that asked for none either.
    default = _sized(_confirmed(12000, 11990, (12.0,)), 224)
    unbuilt = _sized(_confirmed(10000, 9990, (12.0,)), None)
    assert [row["input_size"] for row in compare_serve(default, unbuilt)["rows"]] == [224, 224]
    explicit = _sized(_confirmed(10000, 9990, (12.0,)), 224, asked=224)
    assert len(compare_serve(default, explicit)["rows"]) == 2  # the same pixels
    assert compare_serve(explicit, unbuilt)["rows"] == []  # 224 asked for; the other's default is not known


def test_serve_results_of_different_models_are_not_compared(tmp_path: Path) -> None:
    resnet = _confirmed(12000, 11990, (12.0,))
    other = dataclasses.replace(resnet, measurements=tuple(dataclasses.replace(m, model="mobilenet_v3_large")
                                                           for m in resnet.measurements))
    result_io.save(resnet, tmp_path / "a.json")
    result_io.save(other, tmp_path / "b.json")
    out = _cli(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")], tmp_path)
    assert out.exit_code == 2 and "qps ->" not in out.output
    assert out.output.splitlines()[0].endswith("serve results of different models are not compared")
    assert "mobilenet_v3_large" in out.output.splitlines()[0]


def test_a_serve_result_compares_only_with_serve_results(tmp_path: Path, data_dir: Path) -> None:
    serve_file = tmp_path / "serve.json"
    result_io.save(_confirmed(12000, 11990, (12.0,)), serve_file)
    out = _cli(["compare", str(serve_file), str(data_dir / "result_v1.json")], tmp_path)
    assert out.exit_code == 2
    assert out.output.splitlines()[0] == ("error: only some of these files are serve results; a serve result "
                                          "compares only with another serve result")


def test_the_report_has_a_serving_section(tmp_path: Path, data_dir: Path) -> None:
    import re

    from clsbench.report.html import render_report

    page = render_report([_confirmed(10000, 9990, (12.0, 12.1)), result_io.load(data_dir / "result_v1.json")],
                         ["serve.json", "run.json"])
    section = re.search(r'<section id="serving">(.*?)</section>', page, re.S)
    assert section and section.group(1).count("<svg") == 2 and "bound 15 ms" in section.group(1)
    assert "server QPS (p99 &lt;= 15 ms): 10,000 qps" in section.group(1)
    assert 'href="#serving"' in page
    throughput = re.search(r'<section id="throughput">(.*?)</section>', page, re.S)
    assert throughput and "serve-" not in throughput.group(1)  # answers are not medians over repeats
    assert 'id="serving"' not in render_report([result_io.load(data_dir / "result_v1.json")], ["run.json"])


def test_history_indexes_serve_measurements(tmp_path: Path) -> None:
    from clsbench.results import store

    db = tmp_path / "index.sqlite3"
    result = dataclasses.replace(_confirmed(10000, 9990, (12.0, 12.1)), created_utc="2026-12-01T00:00:00+00:00")
    server_only = dataclasses.replace(_result({"server": [_step(1, (64, 2.0, 2), 9000, 12.0, True)]}),
                                      created_utc="2026-12-02T00:00:00+00:00")
    for name, each in (("serve.json", result), ("server.json", server_only)):
        result_io.save(each, tmp_path / name)
        store.index_result(tmp_path / name, each, db=db)
    server_run, run = store.history(db)
    assert run["measurements"] == 2 and run["ok"] == 2
    assert run["headline"]["workload"] == "serve-offline" and run["headline"]["throughput_img_s"] == 15000.0
    assert server_run["headline"]["workload"] == "serve-server" and server_run["headline"]["latency_p99_ms"] == 12.0
    out = _cli(["history", "--db", str(db)], tmp_path)
    assert out.exit_code == 0 and "9,000 qps" in out.output and "15,000 img/s" in out.output
