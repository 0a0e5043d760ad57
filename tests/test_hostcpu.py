"""Host CPU contention readings (system/hostcpu.py) and how a measurement carries them."""

from __future__ import annotations

import pytest

from clsbench.analysis.hostcpu import concerns
from clsbench.analysis.summary import combine_host_cpu
from clsbench.system import hostcpu


def _snap(wall: float, times: tuple[float, ...] | None, cpu_s: float = 0.0, invol: int = 0) -> hostcpu.Snapshot:
    return hostcpu.Snapshot(wall_s=wall, cpu_times_s=times, process_cpu_s=cpu_s, involuntary_switches=invol,
                            voluntary_switches=0)


def test_contention_figures_from_two_snapshots():
    # 4 cores x 2 s = 8 core-seconds: 3 user, 1 system, 3.6 idle, 0.4 steal.
    start = _snap(10.0, (10.0, 0.0, 5.0, 50.0, 0.0, 0.0, 0.0, 1.0), cpu_s=1.0, invol=10)
    end = _snap(12.0, (13.0, 0.0, 6.0, 53.6, 0.0, 0.0, 0.0, 1.4), cpu_s=3.0, invol=30)
    r = hostcpu.contention(start, end, cores=4)
    assert r["steal_pct"] == pytest.approx(5.0)
    assert r["machine_busy_pct"] == pytest.approx(50.0)
    # 4 busy core-seconds, of which this process used 2: other work kept 1 core busy over 2 s.
    assert r["other_busy_cores"] == pytest.approx(1.0)
    assert r["process_cpu_pct"] == pytest.approx(100.0)
    assert r["involuntary_switches_per_s"] == pytest.approx(10.0)
    assert concerns(r) == ["hypervisor steal 5.0% of CPU time"]


def test_contention_without_proc_stat_keeps_process_figures():
    r = hostcpu.contention(_snap(0.0, None), _snap(1.0, None, cpu_s=0.5), cores=2)
    assert r["steal_pct"] is None and r["other_busy_cores"] is None
    assert r["process_cpu_pct"] == pytest.approx(50.0)
    assert concerns(r) == []


def test_machine_cpu_times_come_from_psutil(monkeypatch: pytest.MonkeyPatch):
    import psutil

    times = hostcpu.machine_cpu_times()
    assert times is not None and len(times) == len(hostcpu.CPU_TIME_FIELDS) and times[3] > 0  # idle time exists

    def broken() -> None:
        raise OSError("no /proc")

    monkeypatch.setattr(psutil, "cpu_times", broken)
    assert hostcpu.machine_cpu_times() is None


def test_real_snapshot_is_readable():
    r = hostcpu.contention(hostcpu.snapshot(), hostcpu.snapshot())
    assert r["process_cpu_pct"] >= 0.0


def test_measurement_combines_repeats_and_names_the_worst():
    quiet = {"steal_pct": 0.1, "other_busy_cores": 0.2, "process_cpu_pct": 99.0, "machine_busy_pct": 7.0,
             "involuntary_switches_per_s": 3.0}
    noisy = dict(quiet, steal_pct=8.0, other_busy_cores=3.5)
    out = combine_host_cpu([{"host_cpu": quiet}, {"host_cpu": noisy}, {"host_cpu": quiet}])
    assert out["steal_pct"] == pytest.approx(0.1)
    assert out["steal_pct_max"] == pytest.approx(8.0)
    assert out["concerns"] == ["repeat 2: hypervisor steal 8.0% of CPU time",
                               "repeat 2: other work kept 3.5 cores busy"]
    assert combine_host_cpu([{"status": "ok"}]) == {}


def test_calibration_times_cpu_dispatch():
    us = hostcpu.calibrate(ops=20)
    assert 0.0 < us < 10_000.0


def test_speed_spread_is_recorded_but_never_a_concern():
    base = {"steal_pct": 0.0, "other_busy_cores": 0.0}
    out = combine_host_cpu([{"host_cpu": dict(base, calibration_us_per_op=2.0)},
                            {"host_cpu": dict(base, calibration_us_per_op=3.0)},
                            {"host_cpu": dict(base, calibration_us_per_op=2.0)}])
    assert out["calibration_us_per_op"] == pytest.approx(2.0)
    assert out["calibration_spread_pct"] == pytest.approx(50.0)
    assert out["concerns"] == []  # it did not track the latencies on the H200 (hostcpu.calibrate)
    steady = combine_host_cpu([{"host_cpu": dict(base, calibration_us_per_op=2.0)},
                               {"host_cpu": dict(base, calibration_us_per_op=2.1)}])
    assert steady["concerns"] == [] and steady["calibration_spread_pct"] == pytest.approx(100 * 0.1 / 2.05)


def test_a_failing_host_reading_never_fails_the_measurement(monkeypatch):
    from types import SimpleNamespace

    from clsbench.workloads.base import WorkloadContext

    def broken() -> float:
        raise RuntimeError("no dispatcher today")

    monkeypatch.setattr(hostcpu, "calibrate", broken)
    ctx = SimpleNamespace(host_calibration=True, telemetry=None, host_cpu=None, _host_start=None, gate=None,
                          _calibration_before_us=None, window_s=None)
    WorkloadContext.timed_region_started(ctx)  # type: ignore[arg-type]
    assert WorkloadContext.timed_region_ended(ctx) is None  # type: ignore[arg-type]
    assert ctx.host_cpu == {"unavailable": "RuntimeError: no dispatcher today"}
