"""``clsbench serve --target triton://...``: LoadGen drives a real Triton server (PyTriton on CPU, started by
tests/triton_fixture.py; no mock stands in for Triton) through the serve procedure and the CLI: a VALID server answer
with Triton's statistics in the result file, one-line errors, and a server that dies mid-run keeping the finished
runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from clsbench.cli import main
from clsbench.core.options import Execution
from clsbench.results import io as result_io
from clsbench.serving.analysis import analyze_serve, render_serve
from clsbench.serving.config import ServeSettings
from triton_fixture import MAX_BATCH, MAX_QUEUE_DELAY_US, TritonTestServer, running_server

#: The LoadGen minimums of these tests: short runs and few queries (the tiny CPU server answers in a few ms).
QUICK = ["--min-duration-s", "1", "--min-queries", "200", "--samples", "64", "--max-search-steps", "3",
         "--latency-bound-ms", "200", "--start-qps", "40"]


@pytest.fixture(autouse=True)
def _needs_loadgen() -> None:
    pytest.importorskip("mlperf_loadgen")


def test_serve_target_gives_a_valid_server_answer_with_tritons_statistics(triton_open: TritonTestServer,
                                                                          tmp_path: Path) -> None:
    path = tmp_path / "target.json"
    result = CliRunner().invoke(main, ["serve", "--target", triton_open.url("grpc"), "--scenario", "offline,server",
                                       *QUICK, "-o", str(path), "--quiet"])
    assert result.exit_code == 0, result.output
    loaded = result_io.load(path)
    assert [(m.mode, m.workload, m.status, m.device) for m in loaded.measurements] == [
        ("triton", "serve-offline", "ok", "remote"), ("triton", "serve-server", "ok", "remote")]
    assert loaded.measurements[0].model == "resnet18"  # the target's model, no --model given
    facts = loaded.settings["serve"]["target"]
    assert facts["config"]["max_batch_size"] == MAX_BATCH
    assert facts["setting"] == {"max_batch": MAX_BATCH, "max_delay_ms": MAX_QUEUE_DELAY_US / 1000.0,
                                "instances": 1, "buckets": [MAX_BATCH], "cuda_graphs": False} or \
        facts["setting"]["max_batch"] == MAX_BATCH
    server = loaded.measurements[1]
    assert server.summary["serve"]["figure"] and server.summary["serve"]["figure"] > 0  # a VALID server QPS
    answer = next(s for s in server.repeats if s["index"] == server.summary["serve"]["step_index"])
    assert answer["loadgen"]["validity"] == "VALID"
    triton = answer["server"]["triton"]
    # Triton's own statistics counted exactly the requests LoadGen's run made, and its batching
    assert triton["success"]["count"] == answer["server"]["requests"] == answer["loadgen"]["query_count"]
    assert triton["inference_count"] >= triton["execution_count"] >= 1
    assert answer["server"]["queue_ns"] == triton["queue"]["ns"]
    text = render_serve(analyze_serve(loaded))
    assert f"target: {triton_open.url('grpc')}" in text and "Triton statistics readable" in text
    assert "compute infer" in text or "LoadGen runs" in text


def test_serve_target_bad_input_is_one_line(triton_open: TritonTestServer, tmp_path: Path) -> None:
    runner = CliRunner()
    cases = [
        (["--target", triton_open.url("grpc", model="nosuchmodel")], "nosuchmodel"),
        (["--target", "http://localhost:1/x"], "triton://"),
        (["--target", triton_open.url("grpc"), "--input-size", "96"], "96"),
        (["--target", triton_open.url("grpc"), "--mode", "bf16"], "--mode"),
        (["--target", triton_open.url("grpc"), "--backend", "export"], "--backend"),
        (["--target", triton_open.url("grpc"), "--target-header", "no-separator"], "NAME: VALUE"),
        ([], "--model is required"),
    ]
    for args, needle in cases:
        out = tmp_path / f"never-{len(args)}.json"
        result = runner.invoke(main, ["serve", *args, "--scenario", "offline", "-o", str(out)])
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "Traceback" not in result.output, (args, result.output)
        assert not out.exists()


def test_a_target_that_dies_mid_serve_keeps_the_finished_runs(tmp_path: Path) -> None:
    """The server is killed after the offline run: the server scenario fails with the reason, the offline answer
    stays in the file, and nothing hangs."""
    from clsbench.procedures.serve import serve

    with running_server(tmp_path / "server", statistics="open") as server:
        settings = ServeSettings(model="resnet18", modes=("fp32",), device="cpu", scenarios=("offline", "server"),
                                 target=server.url("grpc"), min_duration_s=1.0, min_queries=200, sample_count=64,
                                 max_search_steps=3, latency_bound_ms=200.0, start_qps=40.0)

        def progress(event: dict) -> None:
            step = event.get("step") or {}
            if step.get("scenario") == "offline":
                server.kill()

        path = tmp_path / "dies.json"
        serve(settings, path, execution=Execution(env={"host": "test"}, progress=progress))
    loaded = result_io.load(path)
    by_scenario = {m.workload: m for m in loaded.measurements}
    assert by_scenario["serve-offline"].status == "ok"
    assert by_scenario["serve-offline"].summary["serve"]["figure"] > 0
    failed = by_scenario["serve-server"]
    assert failed.status == "failed" and failed.detail, failed
    assert json.loads(json.dumps(loaded.to_dict()))  # the file is whole
