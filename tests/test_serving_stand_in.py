"""The stand-in device of benchmarks/serving_host_overhead.py, whose A/B figures benchmarks/README quotes: a batch's
copy in runs in line before its compute, or on a copy engine beside the compute of the batch before."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "serving_host_overhead.py"


def _stand_in(monkeypatch: pytest.MonkeyPatch, now: list[float]) -> ModuleType:
    spec = importlib.util.spec_from_file_location("serving_host_overhead", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: now[0], sleep=lambda s: None))
    return module


def test_a_copy_in_line_waits_for_the_compute_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    device = _stand_in(monkeypatch, now).Device()
    assert device.queue(5.0, 1.0) == 6.0  # copy 0-1, compute 1-6
    assert device.queue(5.0, 1.0) == 12.0  # copy 6-7, then compute 7-12
    now[0] = 20.0
    assert device.queue(5.0) == 25.0  # an idle device, no copy


def test_a_copy_stream_copies_beside_the_compute_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    stand_in = _stand_in(monkeypatch, now)
    device = stand_in.Device(copy_stream=True)
    assert device.queue(5.0, 1.0) == 6.0  # copy 0-1, compute 1-6
    assert device.queue(5.0, 1.0) == 11.0  # copied 1-2 beside it: compute 6-11
    now[0] = 10.5
    assert device.queue(5.0, 2.0) == 17.5  # copied 10.5-12.5, after the device frees at 11: compute 12.5-17.5
    # An instance reports its copy in as a stage, apart from its compute.
    work = stand_in.NoWork(0.001, 0.0, stand_in.Device(copy_stream=True), 0.0, 0.5)
    batch = SimpleNamespace(size=2, bucket=4, gathered=0)
    _answers, stages = work.finish(work.start(batch))
    assert stages["copy_in"] == pytest.approx(2.0e9) and stages["compute"] == pytest.approx(1.0e6)
