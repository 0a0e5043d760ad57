"""``serve --backend``: the artifacts ``run --backend`` builds, served one per bucket, parity-checked first, each line
(mode @backend) its own measurements, side by side in ``show``; a backend that cannot run or fails is that line's
record and the rest goes on. CPU, the tiny test network, TorchScript (its builds take seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from clsbench.core.options import Execution
from clsbench.results import io as result_io
from clsbench.serving.analysis import analyze_serve, render_serve, side_by_side
from clsbench.serving.config import ServeSettings

NO_ENV = Execution(env={"host": "test"})
TINY = "clsbench_testmodels:tiny"


def _settings(cache: Path, **kw: Any) -> ServeSettings:
    base = dict(model=TINY, modes=("fp32",), device="cpu", scenarios=("offline", "server"), max_batches=(4,),
                max_delays_ms=(1.0,), instances=(2,), latency_bound_ms=2000.0, min_duration_s=0.2, min_queries=64,
                sample_count=16, max_search_steps=2, start_qps=50.0, backends=("eager", "torchscript"),
                cache_dir=str(cache))
    base.update(kw)
    return ServeSettings(**base)


def test_each_backend_is_a_line_of_its_own_with_its_artifacts_per_bucket(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    events: list[dict[str, Any]] = []
    path = tmp_path / "serve.json"
    serve(_settings(tmp_path / "cache", buckets=(2,)), path,
          execution=Execution(env={"host": "test"}, progress=events.append))
    loaded = result_io.load(path)
    lines = [(m.mode, m.backend, m.workload, m.status) for m in loaded.measurements]
    assert lines == [("fp32", "eager", "serve-offline", "ok"), ("fp32", "eager", "serve-server", "ok"),
                     ("fp32", "torchscript", "serve-offline", "ok"), ("fp32", "torchscript", "serve-server", "ok")]
    steps = [s for m in loaded.measurements if m.backend == "torchscript" for s in m.repeats]
    assert steps and all(s["backend"] == "torchscript" and s["error"] is None for s in steps)
    assert all("backend" not in s for m in loaded.measurements if m.backend == "eager" for s in m.repeats)
    facts = loaded.settings["serve"]["modes"]["fp32 @torchscript"]
    artifacts = facts["artifacts"]
    # buckets 2 and 4: one artifact each, built in the isolated build process, each passing parity before serving
    assert [b["bucket"] for b in artifacts["buckets"]] == [2, 4]
    assert all(b["backend"]["built_now"] and b["parity"]["passed"] for b in artifacts["buckets"])
    assert len({b["backend"]["cache_key"] for b in artifacts["buckets"]}) == 2
    assert all(b["parity"]["batch"] == b["bucket"] for b in artifacts["buckets"])
    assert set(artifacts["instance_load_s"]) == {"1"}  # instance 0 runs the builder's loads, instance 1 its own
    assert [e["bucket"] for e in events if e["kind"] == "build"] and \
        sorted(e["bucket"] for e in events if e["kind"] == "parity") == [2, 4]
    analysis = analyze_serve(loaded)
    rows = side_by_side(analysis)
    assert [r["line"] for r in rows] == ["fp32", "fp32 @torchscript"]
    assert all(r["offline_samples_s"] and r["offline_samples_s"] > 0 for r in rows)
    text = render_serve(analysis)
    assert "side by side:" in text and "fp32 @torchscript" in text
    assert "artifacts (torchscript): buckets 2,4: 2 built now" in text

    # A second serve of the same setting takes every artifact from the cache.
    again = serve(_settings(tmp_path / "cache", buckets=(2,), backends=("torchscript",), scenarios=("offline",)),
                  None, execution=NO_ENV)
    buckets = again.result.settings["serve"]["modes"]["fp32 @torchscript"]["artifacts"]["buckets"]
    assert all(b["backend"]["cache_hit"] and not b["backend"].get("built_now") for b in buckets)


def test_a_backend_that_cannot_serve_the_mode_is_skipped_and_the_rest_goes_on(tmp_path: Path) -> None:
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    outcome = serve(_settings(tmp_path / "cache", modes=("amp-bf16",), backends=("torchscript", "eager"),
                              scenarios=("offline",)), None, execution=NO_ENV)
    status = {(m.backend, m.status, m.reason) for m in outcome.result.measurements}
    assert status == {("torchscript", "skipped", "unsupported_backend"), ("eager", "ok", None)}
    skipped = next(m for m in outcome.result.measurements if m.backend == "torchscript")
    assert "autocast" in skipped.detail
    assert "SKIPPED" in render_serve(analyze_serve(outcome.result))


def test_an_artifact_that_fails_parity_is_never_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlperf_loadgen")
    import torch

    from clsbench.backends.base import Loaded
    from clsbench.backends.torchscript import TorchScript
    from clsbench.procedures.serve import serve

    def wrong(self: Any, path: Path, request: Any, build_facts: dict[str, Any]) -> Loaded:
        return Loaded(forward=lambda x: torch.zeros((x.shape[0], 10)))  # not the network it was given

    monkeypatch.setattr(TorchScript, "load", wrong)
    outcome = serve(_settings(tmp_path / "cache", scenarios=("offline",)), None, execution=NO_ENV)
    by_backend = {m.backend: m for m in outcome.result.measurements}
    assert by_backend["eager"].status == "ok"
    failed = by_backend["torchscript"]
    assert (failed.status, failed.reason, failed.repeats) == ("failed", "parity_failed", ())
    assert failed.detail.startswith("bucket 1: ")


def test_serve_takes_backend_options_and_labels_torchscript_legacy(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from clsbench.backends.base import backend_label
    from clsbench.cli import main
    from clsbench.cli.serve_cmds import progress_line

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0 and "--backend" in result.output and "legacy" in result.output
    result = CliRunner().invoke(main, ["serve", "--model", TINY, "--device", "cpu", "--backend", "exprot"])
    assert result.exit_code == 2 and "export" in result.output and "Traceback" not in result.output
    assert backend_label("torchscript") == "torchscript (legacy)" and backend_label("export") == "export"
    build = progress_line({"kind": "build", "mode": "fp32 @export", "bucket": 8,
                           "facts": {"cache_hit": False, "build_s": 61.2, "load_s": 0.04}})
    assert build == "fp32 @export: bucket 8 artifact built in 61.2 s, loaded in 0.04 s"
    parity = progress_line({"kind": "parity", "mode": "fp32 @export", "bucket": 8,
                            "parity": {"passed": True, "max_abs_err_rel": 7.7e-7, "tolerance": 1e-4}})
    assert parity == "fp32 @export: bucket 8 parity ok: max error 7.7e-07 (tolerance 1e-04)"


@pytest.mark.gpu
def test_gpu_export_frozen_served_with_graphs_per_bucket_and_instance(tmp_path: Path) -> None:
    """The AOTInductor runner captured per bucket in each of two instances (relaxed capture), parity first."""
    pytest.importorskip("mlperf_loadgen")
    from clsbench.procedures.serve import serve

    settings = _settings(tmp_path / "cache", device="cuda", modes=("bf16+cl+cudagraph",), backends=("export-frozen",),
                         scenarios=("offline", "server"), max_batches=(8,), buckets=(4,), latency_bound_ms=50.0,
                         min_queries=600, start_qps=2000.0, max_search_steps=1)
    outcome = serve(settings, tmp_path / "serve.json", execution=NO_ENV)
    (m_offline, m_server) = outcome.result.measurements
    assert (m_offline.status, m_offline.backend) == ("ok", "export-frozen"), m_offline.detail
    setups = outcome.result.settings["serve"]["setups"]
    assert setups[0]["error"] is None and all(f["cuda_graphs"] for f in setups[0]["instances_facts"])
    artifacts = outcome.result.settings["serve"]["modes"]["bf16+cl+cudagraph @export-frozen"]["artifacts"]
    assert [b["bucket"] for b in artifacts["buckets"]] == [4, 8]
    assert all(b["parity"]["passed"] for b in artifacts["buckets"])
    steps = [s for m in outcome.result.measurements for s in m.repeats]
    assert steps and all(s["error"] is None and s["server"]["stage_ns"]["compute"] > 0 for s in steps)


def test_a_failed_build_stops_the_builds_not_yet_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One bucket's build fails: the line's failure carries its reason, and the queued buckets are never built."""
    from clsbench.backends import BackendNotRun, BackendRequest
    from clsbench.serving import artifacts

    calls: list[int] = []

    def fail_first(name: str, prepared: Any, request: BackendRequest, **kw: Any) -> Any:
        calls.append(request.batch_size)
        raise BackendNotRun("failed", "build_error", f"bucket {request.batch_size} would not compile")

    monkeypatch.setattr(artifacts, "apply_backend", fail_first)
    requests = artifacts.serve_requests(TINY, "fp32", "cpu", [1, 2, 4, 8], input_size=32, seed=0)
    with pytest.raises(BackendNotRun) as info:
        artifacts.build_runners("torchscript", None, requests, cache=None, workers=1)
    assert (info.value.status, info.value.reason) == ("failed", "build_error")
    assert calls == [1] and info.value.detail == "bucket 1 would not compile"
