"""The running pipeline's stage threads, timed with fake clocks, and the figures and lines made from them."""

from __future__ import annotations

import threading

import pytest

from clsbench.analysis.data import running_figures, summarize_data
from clsbench.data.running import RunningStages, StageMeter
from clsbench.procedures.diagnose_text import running_lines


class Ticks:
    """A clock that moves only when told: ``advance(ns)``."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, ns: int) -> None:
        self.ns += ns


def scripted_stage(items: list, *, get_ns: int, work_ns: int, cpu_ns: int, put_ns: int, accept: int | None = None):
    """A meter on fake clocks and the three callables of a stage: getting takes ``get_ns``, working ``work_ns``
    (``cpu_ns`` of it on the CPU), putting ``put_ns``; ``accept``: the puts that succeed (then put says stopped)."""
    wall, cpu = Ticks(), Ticks()
    meter = StageMeter("decode", wall_ns=wall, cpu_ns=cpu)
    source = iter(items)
    handed: list = []

    def get():
        wall.advance(get_ns)
        return next(source, None)

    def work(item):
        wall.advance(work_ns)
        cpu.advance(cpu_ns)
        return item * 10

    def put(out) -> bool:
        wall.advance(put_ns)
        if accept is not None and len(handed) >= accept:
            return False
        handed.append(out)
        return True

    return meter, get, work, put, handed


def test_stage_meter_times_each_part_of_every_batch():
    meter, get, work, put, handed = scripted_stage([1, 2, 3], get_ns=2_000_000, work_ns=7_000_000,
                                                   cpu_ns=3_000_000, put_ns=1_000_000)
    meter.run(get, work, put, threading.Event(), done=lambda item: item is None)
    assert handed == [10, 20, 30]
    assert meter.totals() == {"batches": 3, "work_ns": 21_000_000, "cpu_ns": 9_000_000, "wait_in_ns": 6_000_000,
                              "wait_out_ns": 3_000_000}


def test_stage_meter_stops_on_done_on_a_refused_put_and_on_the_stop_flag():
    meter, get, work, put, handed = scripted_stage([1, 2, 3], get_ns=1, work_ns=1, cpu_ns=1, put_ns=1, accept=1)
    meter.run(get, work, put, threading.Event(), done=lambda item: item is None)
    assert handed == [10] and meter.totals()["batches"] == 2  # the refused batch was worked on, then the loop ended

    meter, get, work, put, handed = scripted_stage([1, -1, 3], get_ns=1, work_ns=1, cpu_ns=1, put_ns=1)
    meter.run(get, work, put, threading.Event(), done=lambda item: item is None or item < 0)
    assert handed == [10] and meter.totals()["batches"] == 1

    stop = threading.Event()
    stop.set()
    meter, get, work, put, handed = scripted_stage([1], get_ns=1, work_ns=1, cpu_ns=1, put_ns=1)
    meter.run(get, work, put, stop, done=lambda item: item is None)
    assert handed == [] and meter.totals()["batches"] == 0


def test_running_stages_count_from_the_mark():
    wall, cpu = Ticks(), Ticks()
    read, decode = StageMeter("read", wall, cpu), StageMeter("decode", wall, cpu)
    running = RunningStages([read, decode])
    read.add(work_ns=5, cpu_ns=1, wait_in_ns=0, wait_out_ns=2)
    assert running.since_mark()[0] == {"stage": "read", "batches": 1, "work_ns": 5, "cpu_ns": 1, "wait_in_ns": 0,
                                       "wait_out_ns": 2}
    running.mark()
    read.add(work_ns=7, cpu_ns=3, wait_in_ns=1, wait_out_ns=0)
    decode.add(work_ns=11, cpu_ns=4, wait_in_ns=2, wait_out_ns=1)
    assert running.since_mark() == [
        {"stage": "read", "batches": 1, "work_ns": 7, "cpu_ns": 3, "wait_in_ns": 1, "wait_out_ns": 0},
        {"stage": "decode", "batches": 1, "work_ns": 11, "cpu_ns": 4, "wait_in_ns": 2, "wait_out_ns": 1},
    ]


def stage(name: str, batches: int, work_ms: float, cpu_ms: float, wait_in_ms: float = 0.0,
          wait_out_ms: float = 0.0) -> dict:
    ms = 1_000_000 * batches
    return {"stage": name, "batches": batches, "work_ns": int(work_ms * ms), "cpu_ns": int(cpu_ms * ms),
            "wait_in_ns": int(wait_in_ms * ms), "wait_out_ns": int(wait_out_ms * ms)}


def test_running_figures_are_per_batch_medians_over_repeats_and_name_the_busiest():
    repeats = [
        [stage("read", 10, 15.0, 6.0, wait_out_ms=40.0), stage("decode", 10, 20.0, 4.0),
         stage("augment", 10, 30.0, 9.0)],
        [stage("read", 20, 17.0, 6.0), stage("decode", 20, 22.0, 4.0), stage("augment", 20, 50.0, 9.0)],
        [stage("read", 30, 16.0, 7.0), stage("decode", 30, 18.0, 5.0), stage("augment", 30, 40.0, 8.0)],
        None,  # a repeat without the figures (another pipeline's record) is left out
    ]
    figures = running_figures(repeats)
    rows = {r["stage"]: r for r in figures["stages"]}
    assert [r["stage"] for r in figures["stages"]] == ["read", "decode", "augment"]
    assert rows["read"]["work_ms"] == pytest.approx(16.0) and rows["read"]["cpu_ms"] == pytest.approx(6.0)
    assert rows["read"]["wait_out_ms"] == pytest.approx(0.0) and rows["read"]["repeats"] == 3
    assert rows["augment"]["work_ms"] == pytest.approx(40.0) and rows["augment"]["batches"] == 20
    assert figures["busiest"] == "augment" and figures["busiest_work_ms"] == pytest.approx(40.0)
    assert running_figures([None, []]) is None
    assert running_figures([[stage("read", 0, 0.0, 0.0)]]) is None  # no batch handled: nothing to divide by


def test_summary_carries_the_running_figures_only_for_pipelines_that_time_their_threads():
    def record(pipeline: dict) -> dict:
        return {"samples": {"wall_s": 1.0, "data_wait_ms": [], "copy_ms": []},
                "data": {"settings": {"directory": "/d", "pipeline": "gpu"}, "dataset": {}, "pipeline": pipeline}}

    timed = summarize_data([record({"running_stages": [stage("read", 4, 10.0, 2.0)]})])
    assert timed["running"]["busiest"] == "read"
    assert "running" not in summarize_data([record({"epochs_started": 1})])


def test_diagnose_names_the_busiest_stage_and_whether_it_waited_or_computed():
    row = {"label": "folder gpu w0",
           "stages": {"batch_size": 256, "augment": "batched",
                      "stages": [{"stage": "read", "img_s": 17_000.0}, {"stage": "decode", "img_s": 15_400.0},
                                 {"stage": "augment", "augment": "batched", "img_s": 22_000.0},
                                 {"stage": "augment", "augment": "separable", "img_s": 1_000.0}]},
           "running": running_figures([[stage("read", 40, 30.0, 9.0), stage("decode", 40, 50.0, 8.0, 2.0, 3.0),
                                        stage("augment", 40, 20.0, 15.0)]])}
    text = "\n".join(running_lines(row))
    assert "stages of folder gpu w0 while training" in text
    assert "busiest stage while training: decode (50.0 ms per batch, against 16.6 ms alone)" in text
    assert "used the CPU for 8.0 ms of it: the rest it waited" in text
    row["running"] = running_figures([[stage("augment", 40, 20.0, 15.0)]])
    text = "\n".join(running_lines(row))
    assert "augment (20.0 ms per batch, against 11.6 ms alone)" in text  # the augmentation used, not the other
    assert "its own host work, or spinning in a CUDA synchronisation" in text
    assert running_lines({"label": "x", "running": None}) == []


def test_show_names_the_busiest_stage_thread_under_the_data_table():
    from clsbench.report.table import data_section
    from clsbench.results.schema import Measurement

    def measured(data: dict) -> Measurement:
        return Measurement(model="resnet50", workload="train", mode="amp-bf16+cl", batch_size=256, device="cuda",
                           status="ok",
                           summary={"throughput_img_s": 3825.0, "data": {"label": "folder gpu w0", **data}})

    running = running_figures([[stage("read", 40, 15.0, 6.0), stage("augment", 40, 40.0, 9.0)]])
    lines = data_section([measured({"running": running}), measured({})])
    assert ("stage threads: resnet50 amp-bf16+cl bs256 [folder gpu w0]: busiest while training: augment, 40.0 ms per "
            "batch (9.0 ms of it on its CPU)") in "\n".join(lines)
    assert sum("stage threads:" in line for line in lines) == 1  # the measurement without the figures says nothing
    split = data_section([measured({"running": running, "host_decode_share": 0.62})])
    text = "\n".join(split)
    assert "augment, 40.0 ms per batch (9.0 ms of it on its CPU); the host decoded 62% of each batch" in text


def test_the_split_decoders_share_is_summarised_over_the_repeats():
    def record(share: float | None) -> dict:
        pipeline = {"running_stages": None} if share is None else {"cpu_share_mean": share}
        return {"data": {"settings": {"directory": "/d", "pipeline": "gpu", "decoder": "split"}, "pipeline": pipeline},
                "samples": {}, "timings": {}}

    assert summarize_data([record(0.6), record(0.7), record(0.65)])["host_decode_share"] == pytest.approx(0.65)
    assert "host_decode_share" not in summarize_data([record(None)])
