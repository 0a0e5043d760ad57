"""A real Triton Inference Server as a LoadGen target (clsbench.serving.triton_target), against a real server.

The server is tests/triton_server.py (PyTriton hosting a seeded ResNet-18 on CPU), started by the fixtures of
tests/triton_fixture.py; nothing of Triton is mocked. The tests skip, with the reason, where PyTriton, the Triton
client or LoadGen is not installed, or the server does not start.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clsbench.core.vocab import Reason
from clsbench.errors import InvalidInputError
from clsbench.serving import records
from clsbench.serving.scenario import LoadGenParams
from clsbench.serving.triton_model import TargetError
from clsbench.serving.triton_target import TritonEndpoint, TritonTarget, parse_target
from triton_fixture import BAD_MODEL, INPUT_SIZE, MAX_BATCH, MAX_QUEUE_DELAY_US, TritonTestServer, running_server

#: The module-scoped real servers: statistics open to anyone, and restricted to the access token.

#: Samples in the pool LoadGen's indices point into.
POOL = 64
#: The test server serves about 100 samples/s on one CPU thread: an Offline run generates min duration x expected
#: QPS x 1.1 samples (220 here), so it stays VALID (over the 0.5 s minimum) up to 440 samples/s and short (about 2 s).
OFFLINE = LoadGenParams("Offline", min_duration_ms=500, min_query_count=1, expected_qps=400.0, seed=3)
#: Server at a third of capacity; p90 needs few queries for LoadGen's early-stopping rule; a loose bound.
SERVER = LoadGenParams("Server", min_duration_ms=2000, min_query_count=80, target_qps=30.0,
                       target_latency_ns=2_000_000_000, latency_percentile=0.9, seed=4)
#: No LoadGen run, however broken the server, may take longer than this (seconds).
RUN_LIMIT_S = 60.0
#: From Ctrl-C (or the server's death) to the end of the LoadGen run: the abort itself takes one poll of the sender
#: (50 ms); the rest is LoadGen ending its run and writing its logs (seconds).
ABORT_LIMIT_S = 2.0


# ------------------------------------------------------------------------------------------------ parsing (pure)


@pytest.mark.parametrize(("text", "expected"), [
    ("triton://localhost:8001/resnet50", TritonEndpoint("grpc", "localhost", 8001, "resnet50")),
    ("triton+grpc://10.0.0.2:9001/resnet50/3", TritonEndpoint("grpc", "10.0.0.2", 9001, "resnet50", "3")),
    ("triton+http://gpu-box/rn50", TritonEndpoint("http", "gpu-box", 8000, "rn50")),
    ("TRITON://[::1]:8001/m/", TritonEndpoint("grpc", "::1", 8001, "m")),
])
def test_parse_target_reads_protocol_host_port_model_version(text: str, expected: TritonEndpoint) -> None:
    endpoint = parse_target(text)
    assert endpoint == expected
    assert parse_target(str(endpoint)) == endpoint  # the canonical text reads back


def test_endpoint_address_brackets_ipv6() -> None:
    assert parse_target("triton://[::1]:8001/m").address == "[::1]:8001"
    assert str(parse_target("triton://h:1/m/2")) == "triton+grpc://h:1/m/2"


@pytest.mark.parametrize(("text", "why"), [
    ("http://localhost:8000/resnet50", "scheme must be one of"),
    ("triton://localhost:8001", "path must be /MODEL"),
    ("triton://localhost:8001/a/1/extra", "path must be /MODEL"),
    ("triton://localhost:8001/resnet50/latest", "version 'latest' is not a number"),
    ("triton://localhost:99999/resnet50", "port is not a number"),
    ("triton://:8001/resnet50", "no host"),
    ("triton://localhost:8001/resnet50?x=1", "query"),
])
def test_parse_target_refuses_bad_text_in_one_line_with_an_example(text: str, why: str) -> None:
    with pytest.raises(TargetError) as info:
        parse_target(text)
    assert why in info.value.message and "\n" not in str(info.value)
    assert info.value.hint and "triton://localhost:8001/resnet50" in info.value.hint
    assert info.value.exit_code == 2


def test_target_refuses_a_non_positive_in_flight_cap() -> None:
    with pytest.raises(InvalidInputError, match="max in flight"):
        TritonTarget(parse_target("triton://h:1/m"), max_in_flight=0)


# ------------------------------------------------------------------------------------------------ connect


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_connect_reads_back_the_servers_metadata_and_config(triton_open: TritonTestServer, protocol: str) -> None:
    target = TritonTarget(parse_target(triton_open.url(protocol)), max_in_flight=8)
    try:
        facts = target.connect(INPUT_SIZE, warmup_requests=2)
    finally:
        target.close()
    assert facts["url"] == triton_open.url(protocol) and facts["protocol"] == protocol
    assert facts["server"]["name"] == "triton" and facts["server"]["version"]
    assert "statistics" in facts["server"]["extensions"]
    assert facts["model"]["name"] == "resnet18" and facts["model"]["versions"] == ["1"]
    assert facts["model"]["inputs"] == [{"name": "images", "datatype": "UINT8", "shape": [-1, 3, 64, 64]}]
    config = facts["config"]
    assert config["max_batch_size"] == MAX_BATCH and config["backend"] == "python"
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == MAX_QUEUE_DELAY_US
    assert config["instance_group"][0]["kind"] == "KIND_CPU" and config["instance_group"][0]["count"] == 1
    assert facts["input"] == {"name": "images", "datatype": "UINT8", "shape": [1, 3, 64, 64], "input_size": 64}
    assert facts["output"]["name"] == "logits" and facts["output"]["top1"] == "argmax, client-side"
    assert facts["statistics"] == "readable"
    assert len(facts["warmup_latency_ns"]) == 2 and all(ns > 0 for ns in facts["warmup_latency_ns"])
    assert target.setup_facts[0]["bucket_latency_ns"]["1"] > 0


def test_connect_to_nothing_listening_says_so_in_one_line() -> None:
    from triton_server import free_port

    target = TritonTarget(parse_target(f"triton://127.0.0.1:{free_port()}/resnet18"), request_timeout_s=5.0)
    started = time.monotonic()
    with pytest.raises(TargetError) as info:
        target.connect()
    target.close()
    assert time.monotonic() - started < 10.0
    assert "nothing answers as Triton (grpc) at 127.0.0.1:" in info.value.message
    assert "\n" not in str(info.value) and "8001" in (info.value.hint or "")


def test_connect_to_an_unknown_model_lists_the_servers_models(triton_open: TritonTestServer) -> None:
    target = TritonTarget(parse_target(triton_open.url("grpc", model="resnet99")))
    with pytest.raises(TargetError) as info:
        target.connect()
    target.close()
    assert info.value.message.endswith("has no model 'resnet99'")
    assert "resnet18" in (info.value.hint or "") and BAD_MODEL in (info.value.hint or "")


def test_unknown_model_on_a_restricted_server_says_the_list_is_not_readable(
        triton_restricted: TritonTestServer) -> None:
    target = TritonTarget(parse_target(triton_restricted.url("grpc", model="resnet99")))
    with pytest.raises(TargetError, match="has no model 'resnet99'") as info:
        target.connect()
    target.close()
    assert "not readable" in (info.value.hint or "") and "access header" in (info.value.hint or "")


def test_connect_refuses_an_input_size_other_than_the_models(triton_open: TritonTestServer) -> None:
    target = TritonTarget(parse_target(triton_open.url("http")))
    with pytest.raises(TargetError, match=r"takes 64x64 images, not 224x224 as asked") as info:
        target.connect(224)
    target.close()
    assert "input size 64" in (info.value.hint or "")


def test_connect_refuses_a_model_whose_input_is_not_an_image(triton_open: TritonTestServer) -> None:
    target = TritonTarget(parse_target(triton_open.url("grpc", model=BAD_MODEL)))
    with pytest.raises(TargetError, match=r"has input values FP32 \[-1, 10\]; clsbench sends one image input"):
        target.connect()
    target.close()


# ------------------------------------------------------------------------------------------------ LoadGen runs


def _run(target: TritonTarget, params: LoadGenParams, log_dir: Path) -> dict[str, Any]:
    """One LoadGen run through the adapter, as the serve procedure makes it; returns a step record."""
    from clsbench.serving.loadgen import import_loadgen, run_loadgen
    from clsbench.serving.logs import parse_logs

    lg = import_loadgen()
    target.begin_run()
    outcome: dict[str, Any] = {}

    def go() -> None:
        outcome["wall_ns"], outcome["interrupted"] = run_loadgen(lg, target, params, log_dir, POOL)  # type: ignore[arg-type]

    thread = threading.Thread(target=go, daemon=True)  # a hang fails this test instead of the whole suite
    thread.start()
    thread.join(RUN_LIMIT_S)
    assert not thread.is_alive(), f"the LoadGen run did not end within {RUN_LIMIT_S:g} s"
    return {"loadgen": parse_logs(log_dir), "server": target.end_run(outcome["wall_ns"]), "error": target.error,
            "interrupted": outcome["interrupted"]}


def _connected(url: str, **options: Any) -> TritonTarget:
    pytest.importorskip("mlperf_loadgen", reason="MLPerf LoadGen is not installed (pip install 'clsbench[serve]')")
    target = TritonTarget(parse_target(url), **options)
    target.connect(INPUT_SIZE, warmup_requests=2)
    target.load_pool(POOL, seed=0)
    target.start()
    return target


def _samples(step: dict[str, Any]) -> int:
    loadgen = step["loadgen"]
    return int(loadgen["query_count"]) * int(loadgen.get("generated_samples_per_query") or 1)


@pytest.mark.parametrize(("protocol", "params"), [("grpc", OFFLINE), ("grpc", SERVER), ("http", OFFLINE)],
                         ids=["grpc-offline", "grpc-server", "http-offline"])
def test_loadgen_run_is_valid_and_triton_counts_exactly_its_requests(
        triton_open: TritonTestServer, tmp_path: Path, protocol: str, params: LoadGenParams) -> None:
    target = _connected(triton_open.url(protocol), max_in_flight=32)
    try:
        step = _run(target, params, tmp_path / "logs")
    finally:
        target.close()
    server = step["server"]
    assert step["error"] is None and records.is_valid(step), records.reason(step)
    samples = _samples(step)
    assert server["issued"] == server["requests"] == samples and server["errors"] == server["dropped"] == 0
    triton = server["triton"]
    assert triton["inference_count"] == triton["success"]["count"] == samples  # exactly LoadGen's, no warm-up
    assert triton["queue"]["count"] == samples and triton["fail"]["count"] == 0
    # the batching Triton did, as the in-process server's keys tell it
    assert server["batches"] == triton["execution_count"] == sum(server["batch_sizes"].values())
    assert sum(int(size) * n for size, n in server["batch_sizes"].items()) == samples
    assert max(int(size) for size in server["batch_sizes"]) <= MAX_BATCH
    if params.scenario == "Offline":
        assert triton["execution_count"] < samples  # the client sends batch 1, Triton batches
    assert server["stage_ns_request"]["compute"] == triton["compute_infer"]["ns"] > 0
    assert server["stage_ns"]["compute"] == sum(s["compute_infer"]["ns"] for s in triton["batch_stats"].values())
    assert server["queue_ns"] == triton["queue"]["ns"]
    client = server["client"]
    assert client["max_in_flight"] == 32 and 1 <= client["peak_in_flight"] <= 32
    for stage in ("queue_wait", "send", "wait", "callback", "end_to_end"):
        assert client[f"{stage}_ns"]["sum"] >= 0 and client[f"{stage}_ns"]["max"] >= 0
    assert client["end_to_end_ns"]["mean"] > client["send_ns"]["mean"] > 0
    split = records.time_split_ms(step)
    assert split is not None and split["compute"] > 0 and split["gather"] > 0
    stats = records.batch_stats(step)
    assert stats is not None and stats["mean_batch"] == samples / server["batches"]


def test_restricted_statistics_without_the_header_the_run_goes_on_and_says_why(
        triton_restricted: TritonTestServer, tmp_path: Path) -> None:
    target = _connected(triton_restricted.url("grpc"), max_in_flight=16)
    try:
        assert target.facts["statistics"]["unavailable"]
        step = _run(target, OFFLINE, tmp_path / "logs")
    finally:
        target.close()
    assert records.is_valid(step), records.reason(step)
    server = step["server"]
    assert server["requests"] == _samples(step) and "triton" not in server
    why = server["triton_statistics"]["unavailable"]
    assert "access-token" in why and "pass its access header" in why
    assert server["batches"] == 0 and records.batch_stats(step) is None  # no made-up batching


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_restricted_statistics_with_the_access_header_are_read(triton_restricted: TritonTestServer, tmp_path: Path,
                                                                protocol: str) -> None:
    target = _connected(triton_restricted.url(protocol), headers=triton_restricted.headers(protocol),
                        max_in_flight=16)
    try:
        assert target.facts["statistics"] == "readable"
        step = _run(target, OFFLINE, tmp_path / "logs")
    finally:
        target.close()
    assert records.is_valid(step), records.reason(step)
    assert step["server"]["triton"]["inference_count"] == step["server"]["requests"] == _samples(step)
    assert target.facts["headers"] == sorted(triton_restricted.headers(protocol))  # names only, never the token


#: An Offline run far longer than the test: about 20 s of work at the test server's 100 samples/s.
LONG_OFFLINE = LoadGenParams("Offline", min_duration_ms=1000, min_query_count=1, expected_qps=2000.0, seed=5)


def test_interrupt_then_a_dead_server_end_the_run_at_once_with_the_reason(tmp_path: Path) -> None:
    """Ctrl-C (request_abort) ends an HTTP run at once; then the server is killed mid-run (gRPC): the run ends,
    INVALID, with ``server_error``, every request answered, nothing hangs."""
    pytest.importorskip("mlperf_loadgen", reason="MLPerf LoadGen is not installed (pip install 'clsbench[serve]')")
    with running_server(tmp_path / "server", statistics="open") as server:
        interrupted = _connected(server.url("http"), max_in_flight=16)
        pressed: list[float] = []

        def ctrl_c() -> None:
            pressed.append(time.monotonic())
            interrupted.request_abort(str(Reason.INTERRUPTED))

        threading.Timer(1.5, ctrl_c).start()
        step = _run(interrupted, LONG_OFFLINE, tmp_path / "interrupted")
        ended = time.monotonic()
        interrupted.close()
        assert pressed and ended - pressed[0] < ABORT_LIMIT_S
        assert step["error"] == "interrupted" and not records.is_valid(step)
        record = step["server"]
        assert record["dropped"] > 0 and record["requests"] + record["dropped"] == record["issued"] == _samples(step)

        target = _connected(server.url("grpc"), max_in_flight=16)
        killed: list[float] = []

        def kill() -> None:
            killed.append(time.monotonic())
            server.kill()

        threading.Timer(1.5, kill).start()
        step = _run(target, LONG_OFFLINE, tmp_path / "killed")
        took_s = time.monotonic() - killed[0]
        # the target stays failed: later requests are answered at once, without a result
        answered: list[Any] = []
        target.set_sink(lambda ids, answers: answered.append((list(ids), answers)))
        target.issue([7, 8], [0, 1])
        time.sleep(0.2)
        target.close()
    assert answered == [([7, 8], None)]
    assert took_s < ABORT_LIMIT_S
    assert step["error"] and step["error"].startswith(f"{Reason.SERVER_ERROR}: ")
    assert "\n" not in step["error"] and not records.is_valid(step)
    assert records.reason(step) == step["error"]
    record = step["server"]
    assert record["errors"] >= 1 and record["dropped"] > 0
    assert record["requests"] + record["errors"] + record["dropped"] == record["issued"] == _samples(step)
    assert record["triton_statistics"]["unavailable"]  # a dead server has none to read
