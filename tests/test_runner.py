"""The runner, through the public API: failures in fresh worker processes, timeouts, saving, interruption.

The failure tests use the default process isolation on the CPU (that is what they are about): a worker that
dies, hangs or runs out of memory is recorded with its reason and the suite goes on. Saving after each
measurement is checked inline with the fake clock, where isolation is not the point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from clsbench import api
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import Cell, StopRule
from clsbench.engine.events import ProgressEvent
from clsbench.engine.executor import ProcessExecutor
from clsbench.engine.runner import RunInterrupted
from clsbench.engine.worker import Job
from clsbench.errors import EXIT_INTERRUPTED
from clsbench.measure.clock import FakeClock
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult

TESTS = Path(__file__).resolve().parent
TINY = "clsbench_testmodels:tiny"
CRASH = "clsbench_testmodels:crash_model"
HANG = "clsbench_testmodels:hang_model"
OOM = "clsbench_testmodels:oom_model"
#: Enough for a tiny model on a busy 2-core machine (the first job also waits for the forkserver to start).
TIMEOUT_S = 120.0
HANG_TIMEOUT_S = 3.0


def plan(models: list[str], *, workloads: tuple[str, ...] = ("infer-throughput",), repeats: int = 2,
         timeout_s: float = TIMEOUT_S, order: str = "round", seed: int = 0):
    return api.plan_run(models=models, workloads=workloads, device="cpu",
                        options=MeasureOptions(repeats=repeats, warmup=1, iterations=2, min_time=0.0,
                                               timeout_s=timeout_s, seed=seed),
                        execution=Execution(order=order))


def _is_multiprocessing_helper(process: psutil.Process) -> bool:
    """The forkserver and resource tracker live for the whole session by design; they are not strays."""
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return "multiprocessing.forkserver" in command or "multiprocessing.resource_tracker" in command


def stray_processes(before: set[int], wait_s: float = 5.0) -> list[psutil.Process]:
    """Descendants of this process that were not there before, other than the multiprocessing helpers.

    Waits a little: the forkserver reaps a killed worker asynchronously.
    """
    deadline = time.monotonic() + wait_s
    while True:
        me = psutil.Process()
        helpers = {p.pid for p in me.children() if _is_multiprocessing_helper(p)}
        strays = [p for p in me.children(recursive=True) if p.pid not in helpers and p.pid not in before]
        if not strays or time.monotonic() > deadline:
            return strays
        time.sleep(0.1)


@pytest.fixture
def no_strays() -> Callable[[], list[psutil.Process]]:
    before = {p.pid for p in psutil.Process().children(recursive=True) if not _is_multiprocessing_helper(p)}
    return lambda: stray_processes(before)


def test_crash_is_recorded_and_the_suite_goes_on(env: dict, tmp_path: Path, no_strays):
    out = tmp_path / "run.json"
    result = api.run(plan([CRASH, TINY]), out, execution=Execution(env=env))
    crashed, good = result.measurements
    assert (crashed.model, crashed.status, crashed.reason) == (CRASH, "failed", "crash")
    assert "exit code 3" in crashed.detail
    assert len(crashed.repeats) == 1
    assert (good.model, good.status) == (TINY, "ok")
    pids = [r["pid"] for r in good.repeats]
    assert len(set(pids)) == 2 and os.getpid() not in pids  # fresh processes, not this one
    assert result_io.load(out) == result
    assert no_strays() == []


def test_hang_times_out_and_leaves_no_process_behind(env: dict, no_strays):
    t0 = time.monotonic()
    result = api.run(plan([HANG], workloads=("infer-latency",), timeout_s=HANG_TIMEOUT_S),
                     execution=Execution(env=env))
    elapsed = time.monotonic() - t0
    (measurement,) = result.measurements
    assert (measurement.status, measurement.reason) == ("failed", "timeout")
    assert f"{HANG_TIMEOUT_S:g} s" in measurement.detail
    assert len(measurement.repeats) == 1  # a hang would hang again: one repeat, not two
    assert elapsed < 10.0
    assert no_strays() == []


def test_oom_runs_one_repeat_only(env: dict, no_strays):
    events: list[ProgressEvent] = []
    result = api.run(plan([OOM], repeats=3), execution=Execution(env=env, progress=events.append))
    (measurement,) = result.measurements
    assert (measurement.status, measurement.reason) == ("failed", "oom")
    assert "out of memory" in measurement.detail
    assert len(measurement.repeats) == 1
    assert [e.kind for e in events] == ["start", "repeat", "measurement", "finish"]
    assert events[-1].done == events[-1].total == 3  # the repeats not run count as done for the progress bar
    assert no_strays() == []


WORKLOADS3 = ("infer-latency", "infer-throughput", "train")


def test_file_is_saved_after_every_repeat(env: dict, tmp_path: Path):
    out = tmp_path / "run.json"
    seen: list[tuple[int, int]] = []

    def check(event: ProgressEvent) -> None:
        if event.kind == "start":
            assert result_io.load(out).measurements == ()  # the path is claimed before any measurement
        if event.kind in ("repeat", "measurement"):
            stored = result_io.load(out)
            seen.append((len(stored.measurements), sum(len(p.repeats) for p in stored.pending)))
        if event.kind == "measurement":
            assert event.measurement in result_io.load(out).measurements

    result = api.run(plan([TINY], workloads=WORKLOADS3), out,
                     execution=Execution(env=env, isolation="inline", clock=FakeClock(), progress=check))
    # Round order, 3 cells x 2 repeats: the first round's repeats are saved as pending one by one (0, 1, 2 before
    # repeats 1-3); the second round finishes each cell, which turns its pending repeat into a measurement.
    assert [pending for _, pending in seen[:4]] == [0, 1, 2, 3]
    assert [finished for finished, _ in seen if finished] == [1, 1, 2, 2, 3]
    assert seen[-1] == (3, 0)
    stored = result_io.load(out)
    assert stored == result and stored.pending == ()
    assert "pending" not in json.loads(out.read_text(encoding="utf-8"))  # a finished file reads as before
    assert [m.workload for m in stored.measurements] == list(WORKLOADS3)  # plan order, whatever the run order


def _run_order(result: BenchmarkResult) -> list[tuple[str, int]]:
    """(workload, round) of every repeat in the order they ran, from the records' sequence numbers."""
    records = sorted((r["sequence"], m.workload, r["round"]) for m in result.measurements for r in m.repeats)
    assert [n for n, _, _ in records] == list(range(len(records)))  # numbered 0, 1, 2... without a gap
    return [(workload, rnd) for _, workload, rnd in records]


def test_round_order_runs_every_cell_once_before_any_twice_shuffled_by_the_seed(env: dict):
    def order_of(seed: int, order: str = "round") -> list[tuple[str, int]]:
        result = api.run(plan([TINY], workloads=WORKLOADS3, repeats=3, order=order, seed=seed),
                         execution=Execution(env=env, isolation="inline", clock=FakeClock()))
        assert result.settings["order"] == order
        return _run_order(result)

    runs = {seed: order_of(seed) for seed in range(4)}
    for ran in runs.values():
        assert [rnd for _, rnd in ran] == [1, 1, 1, 2, 2, 2, 3, 3, 3]
        for rnd in (1, 2, 3):
            assert sorted(w for w, r in ran if r == rnd) == sorted(WORKLOADS3)
    rounds = {tuple(w for w, _ in ran) for ran in runs.values()}
    assert len(rounds) > 1  # the seed moves the order; the same seed gives the same order
    assert order_of(2) == runs[2]
    assert order_of(0, "cell") == [(w, r) for w in WORKLOADS3 for r in (1, 2, 3)]


def test_round_order_does_not_depend_on_which_other_cells_are_in_the_plan():
    from clsbench.engine.loop import shuffled_round

    cells = [Cell(TINY, w, "fp32", b, "cpu") for w in WORKLOADS3 for b in (1, 2, 4)]
    full = shuffled_round(cells, 7, 1)
    some = shuffled_round(cells[::2], 7, 1)
    assert [c for c in full if c in some] == some  # a resumed run (some cells done) keeps the same relative order


def test_a_cell_that_fails_drops_out_of_later_rounds(env: dict, tmp_path: Path):
    result = api.run(plan([CRASH, TINY], repeats=3), tmp_path / "run.json", execution=Execution(env=env))
    crashed, good = result.measurements  # plan order
    assert (crashed.status, len(crashed.repeats)) == ("failed", 1)
    assert (good.status, len(good.repeats)) == ("ok", 3)
    assert sorted(r["round"] for r in good.repeats) == [1, 2, 3]


def test_interrupted_round_keeps_the_repeats_it_finished_and_resume_runs_only_the_rest(env: dict, tmp_path: Path):
    out = tmp_path / "run.json"
    calls: list[str] = []

    def interrupt_in_round_two(event: ProgressEvent) -> None:
        if event.kind == "repeat":
            calls.append(event.cell.workload)
            if len(calls) == 5:  # the 5th repeat of 3 cells x 2: round 1 done, one cell finished in round 2
                raise KeyboardInterrupt

    execution = Execution(env=env, isolation="inline", clock=FakeClock(), progress=interrupt_in_round_two)
    with pytest.raises(RunInterrupted) as info:
        api.run(plan([TINY], workloads=WORKLOADS3), out, execution=execution)
    assert "1 measurement(s) saved, and 2 repeat(s) of 2 more" in info.value.message
    stored = result_io.load(out)
    assert len(stored.measurements) == 1 and len(stored.pending) == 2
    from clsbench.report import table

    assert "2 more measurement(s) unfinished, 2 repeat(s) saved" in table.render(stored)

    resumed_calls: list[str] = []

    def count(event: ProgressEvent) -> None:
        if event.kind == "repeat":
            resumed_calls.append(event.cell.workload)

    final = api.resume(out, execution=Execution(env=env, isolation="inline", clock=FakeClock(), progress=count))
    assert len(resumed_calls) == 2  # one repeat each for the two unfinished cells: nothing measured twice
    assert final.pending == () and [m.workload for m in final.measurements] == list(WORKLOADS3)
    assert all(len(m.repeats) == 2 for m in final.measurements)
    order = _run_order(final)
    assert [rnd for _, rnd in order] == [1, 1, 1, 2, 2, 2]


def test_interrupt_keeps_what_finished_and_names_resume(env: dict, tmp_path: Path, no_strays):
    out = tmp_path / "run.json"

    def interrupt_after_first(event: ProgressEvent) -> None:
        if event.kind == "measurement":
            raise KeyboardInterrupt

    with pytest.raises(RunInterrupted) as info:
        api.run(plan([TINY], workloads=("infer-latency", "train"), order="cell"), out,
                execution=Execution(env=env, progress=interrupt_after_first))
    assert "--resume" in info.value.message
    assert str(out) in info.value.message
    assert info.value.exit_code == EXIT_INTERRUPTED
    stored = result_io.load(out)
    assert isinstance(stored, BenchmarkResult)
    assert [(m.workload, m.status) for m in stored.measurements] == [("infer-latency", "ok")]
    assert no_strays() == []


def test_a_worker_prepared_ahead_gets_its_own_full_timeout():
    """With overlap (the GPU default) the next worker starts while the current one measures: that wait is not
    its own time. Driven on the CPU through the executor, with real durations 4 s then 1 s, timeout 5 s: the second
    worker waits about 4 s for its turn, so counting that wait would time it out, while a loaded 2-core machine still
    has seconds of margin for its own preparation."""

    def job(seconds: float) -> Job:
        rule = StopRule(warmup=0, min_iterations=1, min_seconds=seconds)
        return Job(cell=Cell(TINY, "infer-latency", "fp32", 1, "cpu"), repeat=0, stop=rule)

    # Start the forkserver first: its one-time start-up is another matter (see the next test).
    warm_up = ProcessExecutor(timeout_s=TIMEOUT_S, overlap=False)
    assert warm_up.run(job(0.0), None)["status"] == "ok"
    first, second = job(4.0), job(1.0)
    executor = ProcessExecutor(timeout_s=5.0, overlap=True)
    try:
        records = [executor.run(first, second), executor.run(second, None)]
    finally:
        executor.close()
    assert [(r["status"], r.get("reason")) for r in records] == [("ok", None), ("ok", None)], records
    assert records[0]["pid"] != records[1]["pid"]


def _stamps(name: str) -> list[float]:
    import clsbench_testmodels

    path = Path(clsbench_testmodels.STAMP_DIR) / name
    return [float(line) for line in path.read_text(encoding="utf-8").split()] if path.exists() else []


def test_overlap_stops_the_worker_preparing_ahead_while_the_current_one_is_timed():
    """The next worker builds its model while the current one warms up, is stopped (SIGSTOP) for the timed
    region and resumed after it. Both write CLOCK_MONOTONIC stamps: the next worker's build (until 2.5 s after the
    current one's first forward, a stamp every 5 ms) must leave a gap around the current worker's timed forwards,
    with stamps on both sides."""
    import shutil

    import clsbench_testmodels

    shutil.rmtree(clsbench_testmodels.STAMP_DIR, ignore_errors=True)
    os.makedirs(clsbench_testmodels.STAMP_DIR)
    measured = Job(cell=Cell("clsbench_testmodels:stamping_model", "infer-throughput", "fp32", 1, "cpu"), repeat=1,
                   stop=StopRule(warmup=1, min_iterations=20, min_seconds=0.5, warmup_seconds=1.0))
    ahead = Job(cell=Cell("clsbench_testmodels:slow_building_model", "infer-throughput", "fp32", 1, "cpu"),
                repeat=1, stop=StopRule(warmup=0, min_iterations=1, min_seconds=0.0))
    executor = ProcessExecutor(timeout_s=TIMEOUT_S, overlap=True)
    try:
        first = executor.run(measured, ahead)
        forwards = _stamps("forward.txt")
        second = executor.run(ahead, None)
    finally:
        executor.close()
        builds = _stamps("build.txt")
        shutil.rmtree(clsbench_testmodels.STAMP_DIR, ignore_errors=True)
    assert (first["status"], second["status"]) == ("ok", "ok"), (first, second)
    timed = forwards[-first["validity"]["timed_iterations"]:]
    start, end = timed[0], timed[-1]
    assert [t for t in builds if start <= t <= end] == []
    assert any(t < start for t in builds), "the worker ahead did not run during the warm-up"
    assert any(t > end for t in builds), "the worker ahead was not resumed"
    assert first["overlap"] == {"prepared_ahead": False, "exit_wait_s": first["overlap"]["exit_wait_s"],
                                "ahead_stopped_when_timed": True}
    assert second["overlap"]["prepared_ahead"] is True
    assert second["overlap"]["ahead_stopped_when_timed"] is None  # nothing was prepared after it
    assert first["pid"] != second["pid"] and not psutil.pid_exists(first["pid"])


SLOW_FORKSERVER_SCRIPT = """
    import json

    from clsbench import api
    from clsbench.core.options import Execution, MeasureOptions
    from clsbench.engine import executor

    # A forkserver that needs over 4 s to start, as importing torch, torchvision and timm can when cold.
    executor.PRELOAD_MODULES = [*executor.PRELOAD_MODULES, "slow_preload"]

    def main():
        plan = api.plan_run(models=["clsbench_testmodels:tiny"], workloads=["infer-throughput"], device="cpu",
                            options=MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0,
                                                   timeout_s=4.0))
        (m,) = api.run(plan, execution=Execution(env={"device": "cpu"})).measurements
        print(json.dumps([m.status, m.reason, m.detail]))

    if __name__ == "__main__":
        main()
"""


@pytest.mark.slow
def test_forkserver_start_up_does_not_count_against_the_first_timeout(tmp_path: Path):
    (tmp_path / "slow_preload.py").write_text("import time\n\ntime.sleep(5)\n", encoding="utf-8")
    script = tmp_path / "run_tiny.py"
    script.write_text(textwrap.dedent(SLOW_FORKSERVER_SCRIPT), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS.parent / "src"), str(TESTS), str(tmp_path)])
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    status, reason, detail = json.loads(done.stdout.splitlines()[-1])
    assert (status, reason) == ("ok", None), detail


KILLED_PARENT_SCRIPT = """
    import sys

    from clsbench import api
    from clsbench.core.options import Execution, MeasureOptions

    if __name__ == "__main__":
        plan = api.plan_run(models=["clsbench_testmodels:hang_model"], workloads=["infer-throughput"], device="cpu",
                            options=MeasureOptions(repeats=1, warmup=1, iterations=2, min_time=0.0, timeout_s=600))
        api.run(plan, execution=Execution(env={"device": "cpu"}))
"""


@pytest.mark.slow
def test_a_killed_run_leaves_no_worker_behind(tmp_path: Path) -> None:
    """SIGKILL the run while its worker hangs in forward: the worker (and then the forkserver) end by themselves."""
    script = tmp_path / "run_hang.py"
    script.write_text(textwrap.dedent(KILLED_PARENT_SCRIPT), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
    parent = subprocess.Popen([sys.executable, str(script)], env=env, cwd=tmp_path)
    try:
        root = psutil.Process(parent.pid)
        deadline = time.monotonic() + 120
        workers: list[psutil.Process] = []
        while time.monotonic() < deadline and not workers:
            # The worker is the forkserver's child: a grandchild of the run.
            workers = [p for child in root.children() for p in child.children()]
            time.sleep(0.5)
        assert workers, "no worker started"
        family = [*root.children(recursive=True)]
        time.sleep(1.0)  # the worker is inside its hanging forward now
        parent.kill()
        parent.wait(10)
        gone, alive = psutil.wait_procs(family, timeout=20)
        assert not alive, f"left running after the run was killed: {[p.pid for p in alive]}"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_a_worker_past_its_deadline_is_a_timeout_even_if_it_exits_cleanly_in_the_grace_second():
    """On a loaded host a worker may miss its deadline and end (exit code 0) while the parent waits for it to exit:
    that is a timeout, not a crash 'without a result'."""
    import multiprocessing
    import time

    from clsbench.engine import executor

    ctx = multiprocessing.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    process = ctx.Process(target=time.sleep, args=(0.3,))
    process.start()
    worker = executor._Worker.__new__(executor._Worker)
    worker.process, worker.conn, worker.timed_out, worker.stopped = process, parent_end, False, False
    assert worker.wait(time.monotonic() + 0.05) is None
    record = worker.death_record(0.05)
    assert process.exitcode == 0
    assert (record["status"], record["reason"]) == ("failed", "timeout"), record
    child_end.close()
    worker.reap()
