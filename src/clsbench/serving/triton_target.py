"""A running Triton Inference Server as the target of LoadGen runs: ``serve --target triton://HOST:PORT/MODEL``.

:class:`TritonTarget` stands where :class:`~clsbench.serving.server.Server` stands in
:func:`~clsbench.serving.loadgen.run_loadgen`: LoadGen's issue callback hands it response ids and sample indices,
and it answers through the sink. Batching is Triton's job, so the client sends **one inference request per LoadGen
sample** (batch 1), as Triton's own perf_analyzer clients do, and Triton's dynamic batcher forms the batches it
reports in its statistics. The flow of one request:

- LoadGen's issue thread appends ``(id, index, now)`` to a client queue and returns (it must never block);
- one sender thread takes requests off the queue while fewer than ``max_in_flight`` are outstanding, builds each
  (the pool sample, already in the model's input dtype) and sends it asynchronously (gRPC ``async_infer``; for HTTP
  a pool of ``max_in_flight`` threads, each with its own client, since the HTTP client is not thread safe);
- the response callback, in the client library's thread, takes the top-1 class (argmax client-side, or the output
  itself when the model returns an integer class id) and hands it to one responder thread, which answers LoadGen
  with every answer waiting, in one call (an int64 tensor kept alive until the call returns). Only threads the
  target owns (or LoadGen's own) ever answer LoadGen: gRPC ends its callback thread whenever no call is
  outstanding, and a thread that ended after answering LoadGen mid-run crashed the process (LoadGen 6.0.17 keeps
  a logger per calling thread; see serving/server.py).

Client cost is measured per request with the injectable clock: the wait in the client queue (``queue_wait``),
building and sending (``send``), the time until the response callback runs (network and server, ``wait``), the
callback (decode, argmax, the hand-over to the responder and its answer to LoadGen, ``callback``) and the whole
(``end_to_end``: issue to answered). Server-side figures come from Triton's own statistics, read before and after
each run; the record stores their difference (see :meth:`TritonTarget.end_run`).
Triton usually restricts its statistics endpoint with an access header; without it the run goes on and the record
says why there is no server-side split.

A failed request (the server died, a request ran past ``request_timeout_s``) answers LoadGen without a result and
aborts the target, like the in-process server: every queued and outstanding request is answered at once, every
later one on arrival, ``error`` says why, and the LoadGen run ends INVALID with that reason. Ctrl-C
(:meth:`TritonTarget.request_abort`) does the same from the sender thread within :data:`POLL_S`.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from clsbench.core.vocab import Reason
from clsbench.errors import InvalidInputError, short_reason
from clsbench.measure.clock import NS_PER_S, Clock, WallClock
from clsbench.serving.counters import STAGES
from clsbench.serving.server import Sink, block_sigint

#: URL schemes of a Triton target and the protocol each speaks (plain ``triton://`` is gRPC, Triton's fast path).
SCHEMES = {"triton": "grpc", "triton+grpc": "grpc", "triton+http": "http"}
#: Triton's default ports (``tritonserver --grpc-port`` / ``--http-port`` defaults), used when the URL names none.
DEFAULT_PORTS = {"grpc": 8001, "http": 8000}
#: What a bad target text is told to look like.
TARGET_EXAMPLE = "triton://localhost:8001/resnet50 (gRPC), triton+http://localhost:8000/resnet50/1 (HTTP, version 1)"
#: How long one request (and each metadata call) may take before the target gives up on it (seconds).
DEFAULT_REQUEST_TIMEOUT_S = 30.0
#: Requests outstanding at once; the rest wait in the client queue. 64 keeps two full batches of 32 waiting in
#: Triton's queue while one computes; ``serve`` may size it from the model config (2 x max_batch_size x instances).
DEFAULT_MAX_IN_FLIGHT = 64
#: Untimed single requests in :meth:`TritonTarget.connect`: the first pays the model's lazy start (120-170 ms on the
#: PyTriton test server against 20-30 ms warm); the median of the rest is the batch-1 latency estimate.
WARMUP_REQUESTS = 4
#: The most answers the responder hands LoadGen in one call (it takes what is waiting, up to this).
MAX_ANSWERS_PER_CALL = 256
#: How often the sender thread, when idle, checks for an abort request and overdue requests (seconds).
POLL_S = 0.05
#: After a run, how long to wait for Triton's statistics to count the last responses (they are updated just after
#: the response is sent, so a client can read them a moment too early) (seconds).
STATS_SETTLE_S = 2.0
STATS_POLL_S = 0.02
#: ImageNet mean and std of the RGB channels (torchvision's classification presets), the normalisation a model
#: with an FP32/FP16/BF16 image input is fed, as clsbench's own server feeds its models (serving/instance.py).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
UINT8_MAX = 255.0
#: Image input datatypes the target can feed, Triton's names.
IMAGE_DATATYPES = ("UINT8", "FP32", "FP16", "BF16")
#: Triton's statistics sections that hold a ``{count, ns}`` pair per request.
DURATION_SECTIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
#: Triton's per-batch-size sections (``batch_stats``): ``count`` is the number of executions of that size.
BATCH_SECTIONS = ("compute_input", "compute_infer", "compute_output")
#: The client stages, in the order a request passes them.
CLIENT_STAGES = ("queue_wait", "send", "wait", "callback", "end_to_end")


class TargetError(InvalidInputError):
    """A Triton target that cannot be served: unreachable, unknown or unready model, an input it cannot feed."""


@dataclass(frozen=True)
class TritonEndpoint:
    """Where a Triton model is served.

    Attributes:
        protocol: ``grpc`` or ``http``.
        host: host name or address (an IPv6 address without brackets).
        port: the protocol's port.
        model: the model name in Triton's repository.
        version: the model version, or None for the version Triton's policy serves.
    """

    protocol: str
    host: str
    port: int
    model: str
    version: str | None = None

    @property
    def address(self) -> str:
        """``host:port`` as the client libraries take it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        version = f"/{self.version}" if self.version else ""
        return f"triton+{self.protocol}://{self.address}/{self.model}{version}"


def parse_target(text: str) -> TritonEndpoint:
    """Parse ``triton://HOST:PORT/MODEL[/VERSION]`` (gRPC), ``triton+grpc://...`` or ``triton+http://...``.

    A missing port means Triton's default for the protocol (:data:`DEFAULT_PORTS`).

    Raises:
        TargetError: the text is not such a URL (one line, with an example as the hint).
    """
    def bad(why: str) -> TargetError:
        return TargetError(f"bad Triton target {text!r}: {why}", f"write it like {TARGET_EXAMPLE}")

    parts = urlsplit(text.strip())
    protocol = SCHEMES.get(parts.scheme.lower())
    if protocol is None:
        raise bad(f"the scheme must be one of {', '.join(s + '://' for s in SCHEMES)}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise bad("a query, fragment or user name has no meaning here")
    try:
        port = parts.port
    except ValueError:
        raise bad("the port is not a number from 1 to 65535") from None
    if not parts.hostname:
        raise bad("no host")
    segments = [s for s in parts.path.split("/") if s]
    if not segments or len(segments) > 2:
        raise bad("the path must be /MODEL or /MODEL/VERSION")
    version = segments[1] if len(segments) == 2 else None
    if version is not None and not version.isdigit():
        raise bad(f"the model version {version!r} is not a number")
    return TritonEndpoint(protocol, parts.hostname, port or DEFAULT_PORTS[protocol], segments[0], version)


class NoBatcher:
    """The ``batcher`` of a Triton target: batching is Triton's (its model config), so the procedure's max-delay
    setting changes nothing; what was asked is kept for the record."""

    def __init__(self) -> None:
        self.asked_max_delay_ms: float | None = None

    def set_max_delay_ms(self, max_delay_ms: float) -> None:
        self.asked_max_delay_ms = max_delay_ms


# ------------------------------------------------------------------------------------------------ the two protocols


class _Client:
    """One protocol's calls, as plain dicts with integers (gRPC's JSON gives 64-bit integers as strings)."""

    def __init__(self, endpoint: TritonEndpoint, headers: Mapping[str, str] | None, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.headers = dict(headers) if headers else None
        self.timeout_s = timeout_s
        self.version = endpoint.version or ""

    def close(self) -> None: ...


class _GrpcClient(_Client):
    def __init__(self, endpoint: TritonEndpoint, headers: Mapping[str, str] | None, timeout_s: float) -> None:
        super().__init__(endpoint, headers, timeout_s)
        import tritonclient.grpc as grpcclient

        self.lib = grpcclient
        self.client = grpcclient.InferenceServerClient(endpoint.address)

    def call(self, name: str, *args: Any) -> Any:
        return getattr(self.client, name)(*args, headers=self.headers, client_timeout=self.timeout_s)

    def live(self) -> bool:
        return bool(self.call("is_server_live"))

    def server_metadata(self) -> dict[str, Any]:
        return self.client.get_server_metadata(headers=self.headers, as_json=True, client_timeout=self.timeout_s)

    def model_ready(self) -> bool:
        return bool(self.call("is_model_ready", self.endpoint.model, self.version))

    def model_metadata(self) -> dict[str, Any]:
        return self.client.get_model_metadata(self.endpoint.model, self.version, headers=self.headers, as_json=True,
                                              client_timeout=self.timeout_s)

    def model_config(self) -> dict[str, Any]:
        return self.client.get_model_config(self.endpoint.model, self.version, headers=self.headers, as_json=True,
                                            client_timeout=self.timeout_s).get("config", {})

    def repository_index(self) -> list[dict[str, Any]]:
        return list(self.client.get_model_repository_index(headers=self.headers, as_json=True,
                                                           client_timeout=self.timeout_s).get("models", []))

    def statistics(self, model: str) -> dict[str, Any]:
        version = self.version if model else ""
        return self.client.get_inference_statistics(model, version, headers=self.headers, as_json=True,
                                                    client_timeout=self.timeout_s)

    def make_input(self, name: str, datatype: str, array: Any) -> Any:
        item = self.lib.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array)
        return item

    def infer(self, inputs: list[Any], output: str) -> Any:
        result = self.client.infer(self.endpoint.model, inputs, self.version,
                                   outputs=[self.lib.InferRequestedOutput(output)], headers=self.headers,
                                   client_timeout=self.timeout_s)
        return result.as_numpy(output)

    def send(self, inputs: list[Any], output: str, done: Callable[[Any, BaseException | None], None]) -> None:
        def callback(result: Any, error: Any) -> None:
            done(None if error is not None else result.as_numpy(output), error)

        self.client.async_infer(self.endpoint.model, inputs, callback, self.version,
                                outputs=[self.lib.InferRequestedOutput(output)], headers=self.headers,
                                client_timeout=self.timeout_s)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()


class _HttpClient(_Client):
    """HTTP: the metadata client, plus one client per sending thread (tritonclient's HTTP client is not thread safe
    and its own async API is gevent's, which does not mix with LoadGen's threads)."""

    def __init__(self, endpoint: TritonEndpoint, headers: Mapping[str, str] | None, timeout_s: float,
                 threads: int) -> None:
        super().__init__(endpoint, headers, timeout_s)
        import tritonclient.http as httpclient

        self.lib = httpclient
        self.client = self._new_client()
        self._local = threading.local()
        self._clients: list[Any] = [self.client]
        self._lock = threading.Lock()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="clsbench-triton-http")

    def _new_client(self) -> Any:
        return self.lib.InferenceServerClient(self.endpoint.address, connection_timeout=self.timeout_s,
                                              network_timeout=self.timeout_s)

    def live(self) -> bool:
        return bool(self.client.is_server_live(headers=self.headers))

    def server_metadata(self) -> dict[str, Any]:
        return self.client.get_server_metadata(headers=self.headers)

    def model_ready(self) -> bool:
        return bool(self.client.is_model_ready(self.endpoint.model, self.version, headers=self.headers))

    def model_metadata(self) -> dict[str, Any]:
        return self.client.get_model_metadata(self.endpoint.model, self.version, headers=self.headers)

    def model_config(self) -> dict[str, Any]:
        return self.client.get_model_config(self.endpoint.model, self.version, headers=self.headers)

    def repository_index(self) -> list[dict[str, Any]]:
        return list(self.client.get_model_repository_index(headers=self.headers))

    def statistics(self, model: str) -> dict[str, Any]:
        return self.client.get_inference_statistics(model, self.version if model else "", headers=self.headers)

    def make_input(self, name: str, datatype: str, array: Any) -> Any:
        item = self.lib.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array, binary_data=True)
        return item

    def infer(self, inputs: list[Any], output: str, client: Any = None) -> Any:
        result = (client or self.client).infer(self.endpoint.model, inputs, self.version,
                                               outputs=[self.lib.InferRequestedOutput(output, binary_data=True)],
                                               headers=self.headers)
        return result.as_numpy(output)

    def send(self, inputs: list[Any], output: str, done: Callable[[Any, BaseException | None], None]) -> None:
        self.pool.submit(self._send_now, inputs, output, done)

    def _send_now(self, inputs: list[Any], output: str, done: Callable[[Any, BaseException | None], None]) -> None:
        client = getattr(self._local, "client", None)
        if client is None:
            block_sigint()
            client = self._local.client = self._new_client()
            with self._lock:
                self._clients.append(client)
        try:
            answer = self.infer(inputs, output, client)
        except BaseException as exc:  # noqa: BLE001 - handed to the callback, which fails the target
            done(None, exc)
            return
        done(answer, None)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients:
            with contextlib.suppress(Exception):
                client.close()


# ------------------------------------------------------------------------------------------------ helpers


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _model_config_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a model config that decide batching and placement, with integers (JSON-able)."""
    batching = config.get("dynamic_batching")
    dynamic = None
    if batching is not None:
        dynamic = {"preferred_batch_size": [_int(b) for b in batching.get("preferred_batch_size") or []],
                   "max_queue_delay_microseconds": _int(batching.get("max_queue_delay_microseconds")),
                   "preserve_ordering": bool(batching.get("preserve_ordering", False))}
    groups = [{"name": g.get("name"), "kind": g.get("kind", "KIND_AUTO"), "count": _int(g.get("count"), 1),
               "gpus": [_int(x) for x in g.get("gpus") or []]} for g in config.get("instance_group") or []]
    return {"name": config.get("name"), "platform": config.get("platform") or None,
            "backend": config.get("backend") or None, "max_batch_size": _int(config.get("max_batch_size")),
            "dynamic_batching": dynamic, "instance_group": groups,
            "inputs": [{"name": t.get("name"), "data_type": t.get("data_type"), "dims": [_int(d) for d in
                                                                                          t.get("dims") or []]}
                       for t in config.get("input") or []],
            "outputs": [{"name": t.get("name"), "data_type": t.get("data_type"),
                         "dims": [_int(d) for d in t.get("dims") or []]} for t in config.get("output") or []]}


def _tensors(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": t.get("name"), "datatype": t.get("datatype"), "shape": [_int(d) for d in t.get("shape") or []]}
            for t in items]


def _pair(section: Mapping[str, Any] | None) -> dict[str, int]:
    section = section or {}
    return {"count": _int(section.get("count")), "ns": _int(section.get("ns"))}


def model_statistics(raw: Mapping[str, Any], model: str) -> dict[str, Any]:
    """One model's statistics from Triton's answer (every version of it added up), with integers.

    Returns:
        ``inference_count`` (requests inferred), ``execution_count`` (batches executed), one ``{count, ns}`` per
        :data:`DURATION_SECTIONS` (per request: each request of a batch counts the whole batch's time), and
        ``batch_stats``: ``{size: {section: {count, ns}}}`` per :data:`BATCH_SECTIONS` (count: executions).
    """
    out: dict[str, Any] = {"inference_count": 0, "execution_count": 0,
                           **{s: {"count": 0, "ns": 0} for s in DURATION_SECTIONS}, "batch_stats": {}}
    for entry in raw.get("model_stats") or []:
        if entry.get("name") != model:
            continue
        out["inference_count"] += _int(entry.get("inference_count"))
        out["execution_count"] += _int(entry.get("execution_count"))
        stats = entry.get("inference_stats") or {}
        for section in DURATION_SECTIONS:
            pair = _pair(stats.get(section))
            out[section] = {k: out[section][k] + pair[k] for k in pair}
        for batch in entry.get("batch_stats") or []:
            size = str(_int(batch.get("batch_size")))
            mine = out["batch_stats"].setdefault(size, {s: {"count": 0, "ns": 0} for s in BATCH_SECTIONS})
            for section in BATCH_SECTIONS:
                pair = _pair(batch.get(section))
                mine[section] = {k: mine[section][k] + pair[k] for k in pair}
    return out


def statistics_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` of two :func:`model_statistics` (batch sizes that did not run in between are left out)."""
    delta: dict[str, Any] = {
        "inference_count": after["inference_count"] - before["inference_count"],
        "execution_count": after["execution_count"] - before["execution_count"],
        **{s: {k: after[s][k] - before[s][k] for k in ("count", "ns")} for s in DURATION_SECTIONS},
        "batch_stats": {}}
    zero = {s: {"count": 0, "ns": 0} for s in BATCH_SECTIONS}
    for size in sorted(after["batch_stats"], key=int):
        now, then = after["batch_stats"][size], before["batch_stats"].get(size, zero)
        change = {s: {k: now[s][k] - then[s][k] for k in ("count", "ns")} for s in BATCH_SECTIONS}
        if change["compute_infer"]["count"]:
            delta["batch_stats"][size] = change
    return delta


def top1(output: Any) -> int:
    """The class of one response: the argmax of its scores, or the value itself for an integer class-id output."""
    import numpy as np

    flat = np.asarray(output).reshape(-1)
    if flat.dtype.kind in "iu" and flat.size == 1:
        return int(flat[0])
    return int(flat.argmax())


# ------------------------------------------------------------------------------------------------ the target


class _Request:
    """One request in flight: its LoadGen id and the clock readings of its way (ns)."""

    __slots__ = ("rid", "issued", "taken", "sent")

    def __init__(self, rid: int, issued: int, taken: int) -> None:
        self.rid, self.issued, self.taken, self.sent = rid, issued, taken, 0


class _Sums:
    """Sum, count and maximum of each client stage over one run (ns)."""

    def __init__(self) -> None:
        self.count = 0
        self.sum = dict.fromkeys(CLIENT_STAGES, 0)
        self.max = dict.fromkeys(CLIENT_STAGES, 0)

    def add(self, values: Mapping[str, int]) -> None:
        self.count += 1
        for stage, ns in values.items():
            self.sum[stage] += ns
            if ns > self.max[stage]:
                self.max[stage] = ns

    def to_dict(self) -> dict[str, Any]:
        return {f"{stage}_ns": {"sum": self.sum[stage], "mean": self.sum[stage] / self.count if self.count else None,
                                "max": self.max[stage]} for stage in CLIENT_STAGES}


class TritonTarget:
    """A Triton model as LoadGen's system under test (see the module docstring); a drop-in for ``Server``.

    Args:
        endpoint: where the model is served (:func:`parse_target`).
        headers: sent with every call, e.g. Triton's access token for its restricted endpoints
            (``{"triton-grpc-protocol-triton-access-token": TOKEN}`` over gRPC, ``{"triton-access-token": TOKEN}``
            over HTTP, as the server's ``--grpc-restricted-protocol`` / ``--http-restricted-api`` name it).
        request_timeout_s: one request (or metadata call) taking longer fails the target (``timeout``).
        max_in_flight: requests outstanding at once; the rest wait in the client queue (its wait is measured).
        clock: the clock of the client stages (the wall clock unless a test injects one).
    """

    def __init__(self, endpoint: TritonEndpoint, *, headers: Mapping[str, str] | None = None,
                 request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
                 clock: Clock | None = None) -> None:
        if max_in_flight < 1:
            raise InvalidInputError(f"max in flight must be at least 1, not {max_in_flight}")
        if request_timeout_s <= 0:
            raise InvalidInputError(f"the request timeout must be positive, not {request_timeout_s:g} s")
        self.endpoint = endpoint
        self.headers = dict(headers) if headers else None
        self.request_timeout_s = float(request_timeout_s)
        self.max_in_flight = int(max_in_flight)
        self.clock = clock or WallClock()
        self.batcher = NoBatcher()
        self.facts: dict[str, Any] = {}
        #: What ``serve`` reads of an in-process server's warm-up: the batch-1 latency (set by :meth:`connect`).
        self.setup_facts: list[dict[str, Any] | None] = []
        self._client: Any = None
        self._input: dict[str, Any] = {}
        self._output = ""
        self._pool: list[Any] = []
        self._lock = threading.Condition()
        self._queue: deque[tuple[int, int, int]] = deque()
        self._pending: dict[int, _Request] = {}
        self._sink: Sink = _discard
        self._error: str | None = None
        self._aborted = False
        self._abort_request: str | None = None
        self._stop = threading.Event()
        self._sender: threading.Thread | None = None
        self._responder: threading.Thread | None = None
        #: What the responder thread answers: (request, class, callback start ns) or (ids, None, 0) for no result.
        self._answers: queue.SimpleQueue[tuple[Any, int | None, int] | None] = queue.SimpleQueue()
        self._stats_lock = threading.Lock()
        self._reset_run()

    # ------------------------------------------------------------------------------------------ setup

    @property
    def error(self) -> str | None:
        """Why the target failed (``server_error: ...``, ``timeout: ...``, ``interrupted``), or None."""
        return self._error

    def connect(self, input_size_hint: int | None = None, *, warmup_requests: int = WARMUP_REQUESTS
                ) -> dict[str, Any]:
        """Reach the server, check the model can be fed images, warm it up; return what was learnt (JSON-able).

        Args:
            input_size_hint: the image side the caller means to send; it must agree with the model's input (and
                gives the size of an input whose spatial dims are variable).
            warmup_requests: untimed single requests before any run (:data:`WARMUP_REQUESTS`).

        Returns:
            ``url``, ``protocol``, ``server`` (name, version, extensions), ``model`` (metadata: versions, platform,
            inputs, outputs), ``config`` (max_batch_size, dynamic_batching, instance_group, backend, tensors),
            ``input`` (name, datatype, shape sent, input_size), ``output`` (name, datatype, how the class is read),
            ``statistics`` (``"readable"`` or ``{"unavailable": why}``), ``warmup_latency_ns`` (each warm-up request),
            ``max_in_flight``, ``request_timeout_s``, ``headers`` (the header names sent; never their values).

        Raises:
            TargetError: nothing answers there, the model is unknown or not ready, its input is not one image tensor
                of a datatype in :data:`IMAGE_DATATYPES`, its size disagrees with ``input_size_hint``, or the warm-up
                request fails.
        """
        import numpy as np

        self._open_client()
        client = self._client
        server = self._server_facts(client)
        self._check_model(client)
        try:
            metadata = client.model_metadata()
            config = _model_config_facts(client.model_config())
        except Exception as exc:  # noqa: BLE001 - named in one line
            raise TargetError(f"{self.endpoint}: cannot read the model's metadata or config: {short_reason(exc)}",
                              "pass the access header if the server restricts its metadata") from None
        model = {"name": metadata.get("name"), "versions": [str(v) for v in metadata.get("versions") or []],
                 "platform": metadata.get("platform") or None, "inputs": _tensors(metadata.get("inputs") or []),
                 "outputs": _tensors(metadata.get("outputs") or [])}
        self._input = self._choose_input(model["inputs"], config["max_batch_size"], input_size_hint)
        output = self._choose_output(model["outputs"])
        self._output = output["name"]
        probe = np.zeros(self._input["shape"], dtype=np.uint8 if self._input["datatype"] == "UINT8" else np.float32)
        if self._input["datatype"] == "FP16":
            probe = probe.astype(np.float16)
        latencies = self._warm_up(probe, warmup_requests)
        readable = self._statistics_or_reason()
        self.facts = {"url": str(self.endpoint), "protocol": self.endpoint.protocol, "server": server,
                      "model": model, "config": config, "input": dict(self._input), "output": output,
                      "statistics": "readable" if isinstance(readable, dict) else {"unavailable": readable},
                      "warmup_latency_ns": latencies, "max_in_flight": self.max_in_flight,
                      "request_timeout_s": self.request_timeout_s, "headers": sorted(self.headers or {})}
        warm = sorted(latencies[1:] or latencies)
        self.setup_facts = [{"bucket_latency_ns": {"1": warm[len(warm) // 2]} if warm else {}, "target": True}]
        return self.facts

    def _open_client(self) -> None:
        if self._client is not None:
            return
        try:
            if self.endpoint.protocol == "grpc":
                self._client = _GrpcClient(self.endpoint, self.headers, self.request_timeout_s)
            else:
                self._client = _HttpClient(self.endpoint, self.headers, self.request_timeout_s, self.max_in_flight)
        except ImportError:
            raise TargetError("the Triton client (tritonclient) is not installed",
                              "install it with: pip install 'clsbench[triton]'  (or: pip install "
                              "'tritonclient[grpc,http]')") from None

    def _server_facts(self, client: Any) -> dict[str, Any]:
        other = "http" if self.endpoint.protocol == "grpc" else "grpc"
        try:
            live = client.live()
            metadata = client.server_metadata()
        except Exception as exc:  # noqa: BLE001 - connection refused, timeout, a non-Triton peer: one line
            raise TargetError(f"nothing answers as Triton ({self.endpoint.protocol}) at {self.endpoint.address}: "
                              f"{short_reason(exc)}",
                              f"is the server running there? check host, port and protocol (triton+{other}:// for "
                              f"{other.upper()}; Triton's defaults are gRPC 8001, HTTP 8000)") from None
        if not live:
            raise TargetError(f"the Triton server at {self.endpoint.address} says it is not live")
        return {"name": metadata.get("name"), "version": metadata.get("version"),
                "extensions": list(metadata.get("extensions") or [])}

    def _model_names(self, client: Any) -> tuple[list[str] | None, dict[str, str], str]:
        """The server's model names and states, from its repository index, else from its statistics; or why not."""
        try:
            index = client.repository_index()
            states = {f"{m.get('name')}": f"{m.get('state') or ''} {m.get('reason') or ''}".strip() for m in index}
            if index:
                return sorted(states), states, ""
        except Exception as exc:  # noqa: BLE001 - restricted or unsupported: try the statistics
            why = short_reason(exc)
        else:
            why = "its repository index is empty"
        try:
            names = sorted({str(m.get("name")) for m in client.statistics("").get("model_stats") or []})
            return names, {}, ""
        except Exception as exc:  # noqa: BLE001 - the model list cannot be read: say so
            return None, {}, f"{why}; statistics: {short_reason(exc)}"

    def _check_model(self, client: Any) -> None:
        try:
            ready = client.model_ready()
        except Exception as exc:  # noqa: BLE001 - named in one line
            raise TargetError(f"{self.endpoint}: cannot ask whether the model is ready: {short_reason(exc)}") from None
        if ready:
            return
        names, states, why = self._model_names(client)
        where = f"{self.endpoint.address}"
        if names is not None and self.endpoint.model not in names:
            listed = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") if names else "none"
            raise TargetError(f"the Triton server at {where} has no model {self.endpoint.model!r}",
                              f"its models: {listed}")
        if names is None:
            try:
                client.model_metadata()
            except Exception as exc:  # noqa: BLE001 - "unknown model" or another refusal, said in one line
                if "unknown model" in str(exc).lower() or "not found" in str(exc).lower():
                    raise TargetError(f"the Triton server at {where} has no model {self.endpoint.model!r}",
                                      f"its model list is not readable ({why}); pass the access header to see "
                                      "it") from None
        state = states.get(self.endpoint.model) or "state unknown"
        version = f" version {self.endpoint.version}" if self.endpoint.version else ""
        raise TargetError(f"model {self.endpoint.model!r}{version} on {where} is not ready ({state})",
                          "load it (or wait until Triton has loaded it) and try again")

    def _choose_input(self, inputs: list[dict[str, Any]], max_batch: int, hint: int | None) -> dict[str, Any]:
        """The one image input and the shape each request sends: ``[1, 3, H, W]`` for a batching model (Triton
        prepends the batch dimension, shown as -1 in its metadata) or an input declared ``[-1|1, 3, H, W]``;
        ``[3, H, W]`` for a non-batching model whose input has no batch dimension."""
        described = ", ".join(f"{t['name']} {t['datatype']} {t['shape']}" for t in inputs) or "none"
        want = "one image input [3,H,W] (or [-1,3,H,W]) of " + "/".join(IMAGE_DATATYPES)
        if len(inputs) != 1:
            raise TargetError(f"model {self.endpoint.model!r} has inputs {described}; clsbench sends {want}")
        tensor = inputs[0]
        shape = list(tensor["shape"])
        batched = max_batch > 0 or (len(shape) == 4 and shape[0] in (-1, 1))
        image = shape[1:] if len(shape) == 4 and shape[0] in (-1, 1) else shape
        if tensor["datatype"] not in IMAGE_DATATYPES or len(image) != 3 or image[0] != 3:
            raise TargetError(f"model {self.endpoint.model!r} has input {described}; clsbench sends {want}")
        height, width = image[1], image[2]
        if height == -1 and width == -1 and hint:
            height = width = hint
        if height <= 0 or width <= 0 or height != width:
            raise TargetError(f"model {self.endpoint.model!r} takes images of {height}x{width}; clsbench sends "
                              "square images of a fixed size", "pass the input size to use for variable dims")
        if hint is not None and hint != height:
            raise TargetError(f"model {self.endpoint.model!r} takes {height}x{width} images, not {hint}x{hint} "
                              "as asked", f"ask for input size {height}, or serve a model of size {hint}")
        sent = [1, 3, height, width] if batched else [3, height, width]
        return {"name": tensor["name"], "datatype": tensor["datatype"], "shape": sent, "input_size": height}

    def _choose_output(self, outputs: list[dict[str, Any]]) -> dict[str, Any]:
        """The output the class is read from: the first one (argmax of its scores, or an integer class id as is)."""
        if not outputs:
            raise TargetError(f"model {self.endpoint.model!r} declares no output")
        first = outputs[0]
        integer = first["datatype"] in ("INT32", "INT64", "UINT32", "UINT64")
        return {"name": first["name"], "datatype": first["datatype"], "shape": first["shape"],
                "top1": "class id as sent" if integer else "argmax, client-side"}

    def _warm_up(self, probe: Any, count: int) -> list[int]:
        latencies = []
        for _ in range(max(1, count)):
            started = self.clock.now_ns()
            try:
                self._client.infer([self._make_input(probe)], self._output)
            except Exception as exc:  # noqa: BLE001 - named in one line
                raise TargetError(f"{self.endpoint}: a warm-up request failed: {short_reason(exc)}") from None
            latencies.append(self.clock.now_ns() - started)
        return latencies

    def _make_input(self, array: Any) -> Any:
        return self._client.make_input(self._input["name"], self._input["datatype"], array)

    def load_pool(self, count: int, seed: int) -> dict[str, Any]:
        """Make the sample pool LoadGen's indices point into, converted once to the model's input datatype.

        The samples are :class:`~clsbench.serving.instance.SamplePool`'s (same generator, same seed: the same
        pixels the in-process server sends). UINT8 inputs get them as they are; FP32 / FP16 / BF16 inputs get them
        normalised with ImageNet's mean and std, as the in-process server normalises on the device
        (``Engine.compute``), since a float image input of a classifier expects normalised pixels. BF16 is held as
        FP32 values: the Triton client serialises BF16 from float32 arrays, per request.
        """
        import numpy as np
        import torch

        from clsbench.serving.instance import SamplePool

        if not self._input:
            raise TargetError("connect to the Triton target before loading the sample pool")
        data = SamplePool(count, self._input["input_size"], seed, pin=False).data
        datatype = self._input["datatype"]
        if datatype != "UINT8":
            mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1) * UINT8_MAX
            scale = 1.0 / (torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) * UINT8_MAX)
            data = (data.float() - mean) * scale
            if datatype == "FP16":
                data = data.half()
        array = np.ascontiguousarray(data.numpy())
        if len(self._input["shape"]) == 4:
            self._pool = [array[i:i + 1] for i in range(count)]
        else:
            self._pool = [array[i] for i in range(count)]
        return {"count": count, "seed": seed, "datatype": datatype, "normalised": datatype != "UINT8",
                "bytes": int(array.nbytes)}

    def _statistics_or_reason(self) -> dict[str, Any] | str:
        """The model's statistics now (:func:`model_statistics`), or why they cannot be read (one line)."""
        try:
            return model_statistics(self._client.statistics(self.endpoint.model), self.endpoint.model)
        except Exception as exc:  # noqa: BLE001 - restricted (access header), unsupported: the run goes on
            text = short_reason(exc)
            if "access-token" in text or "access token" in text:
                text += " (the server restricts its statistics: pass its access header)"
            return text

    def start(self) -> str | None:
        """Start the sender and responder threads (as ``Server.start`` starts its instances); return the failure,
        if any. They run until :meth:`close`, never ending mid-run (see the module docstring)."""
        if self._sender is None:
            self._sender = threading.Thread(target=self._send_loop, name="clsbench-triton-sender", daemon=True)
            self._responder = threading.Thread(target=self._respond_loop, name="clsbench-triton-responder",
                                               daemon=True)
            self._sender.start()
            self._responder.start()
        return self._error

    def close(self) -> None:
        """Stop the threads and close the client connections (call it after the last LoadGen run)."""
        self._stop.set()
        self._answers.put(None)
        with self._lock:
            self._lock.notify_all()
        for thread in (self._sender, self._responder):
            if thread is not None:
                thread.join(timeout=POLL_S * 4)
        if self._client is not None:
            self._client.close()

    def set_sink(self, sink: Sink) -> None:
        """Where answers go: ``sink(ids, answers)``; ``answers`` None for requests answered without a result."""
        self._sink = sink

    # ------------------------------------------------------------------------------------------ one LoadGen run

    def _reset_run(self) -> None:
        self._sums = _Sums()
        self._issued = 0
        self._errors = 0
        self._dropped = 0
        self._answered = 0
        self._peak_in_flight = 0
        self._before: dict[str, Any] | str = "not read"

    def begin_run(self) -> None:
        """Zero the client counters and read Triton's statistics, the baseline of the run's delta."""
        self.start()
        with self._stats_lock:
            self._reset_run()
        self._before = self._statistics_or_reason()

    def end_run(self, wall_ns: int) -> dict[str, Any]:
        """The run's raw facts (stored as the step's ``server`` record).

        Returns:
            A dict with the client's view: ``target`` (the URL), ``issued``, ``requests`` (answered with a result),
            ``errors`` (failed responses), ``dropped`` (answered without a result by an abort), ``client``
            (``max_in_flight``, ``peak_in_flight``, and ``{sum, mean, max}`` in ns of each of :data:`CLIENT_STAGES`
            as ``queue_wait_ns``, ``send_ns``, ``wait_ns``, ``callback_ns``, ``end_to_end_ns``, over the requests
            answered with a result); the server's view: ``triton`` (the run's delta of Triton's model statistics,
            :func:`statistics_delta`), or ``triton_statistics: {"unavailable": why}`` when they cannot be read;
            and the keys of the in-process server's record that ``show`` reads (serving/records.py), mapped so:

            - ``batches``: Triton's ``execution_count`` delta; ``batch_sizes``: ``{size: executions}`` from its
              ``batch_stats``; ``queue_ns``: Triton's queue time summed over requests;
            - ``stage_ns_request`` (summed over requests) per :data:`~clsbench.serving.counters.STAGES`: ``gather``
              = the client's send side (queue wait + build and send), ``copy_in`` = Triton's ``compute_input``,
              ``compute`` = ``compute_infer``, ``copy_out`` = ``compute_output``, ``complete`` = the client's
              response callback (decode, argmax, answer LoadGen); network time is in none of them;
            - ``stage_ns`` (per batch): Triton's per-batch sums from ``batch_stats`` for its three stages, the
              client's totals for ``gather`` and ``complete`` (the client does not batch);
            - ``padded_samples`` 0, ``busy_ns`` [] (neither is Triton's to tell), ``wall_ns`` as given.

            Without statistics, the Triton-side keys are 0 (``triton_statistics`` says why).
        """
        deadline = time.monotonic() + self.request_timeout_s
        while self._answered < self._issued and time.monotonic() < deadline:  # the responder's last answers
            time.sleep(STATS_POLL_S / 10)
        with self._stats_lock:
            sums, issued, errors, dropped, peak = (self._sums, self._issued, self._errors, self._dropped,
                                                   self._peak_in_flight)
        record: dict[str, Any] = {
            "target": str(self.endpoint), "issued": issued, "requests": sums.count, "errors": errors,
            "dropped": dropped, "client": {"max_in_flight": self.max_in_flight, "peak_in_flight": peak,
                                           **sums.to_dict()},
            "batches": 0, "batch_sizes": {}, "queue_ns": 0, "padded_samples": 0, "busy_ns": [], "wall_ns": wall_ns,
        }
        delta = self._run_statistics(sums.count)
        client_side = {"gather": sums.sum["queue_wait"] + sums.sum["send"], "complete": sums.sum["callback"]}
        stage_ns_request = {stage: float(client_side.get(stage, 0)) for stage in STAGES}
        stage_ns = dict(stage_ns_request)
        if isinstance(delta, dict):
            record["triton"] = delta
            record["batches"] = delta["execution_count"]
            record["batch_sizes"] = {size: s["compute_infer"]["count"] for size, s in delta["batch_stats"].items()}
            record["queue_ns"] = delta["queue"]["ns"]
            for stage, section in (("copy_in", "compute_input"), ("compute", "compute_infer"),
                                   ("copy_out", "compute_output")):
                stage_ns_request[stage] = float(delta[section]["ns"])
                stage_ns[stage] = float(sum(s[section]["ns"] for s in delta["batch_stats"].values()))
        else:
            record["triton_statistics"] = {"unavailable": delta}
        record["stage_ns_request"] = stage_ns_request
        record["stage_ns"] = stage_ns
        return record

    def _run_statistics(self, answered: int) -> dict[str, Any] | str:
        """The delta of Triton's statistics over the run, once they count every answered request (or after
        :data:`STATS_SETTLE_S`); or why there is none."""
        before = self._before
        if not isinstance(before, dict):
            return before
        deadline = time.monotonic() + STATS_SETTLE_S
        while True:
            after = self._statistics_or_reason()
            if not isinstance(after, dict):
                return after
            delta = statistics_delta(before, after)
            if delta["success"]["count"] >= answered or time.monotonic() >= deadline:
                return delta
            time.sleep(STATS_POLL_S)

    def issue(self, ids: Sequence[int], indices: Sequence[int]) -> None:
        """Queue requests (LoadGen's issue callback: it never raises and never waits for the network)."""
        try:
            now = self.clock.now_ns()
            items = list(zip(ids, indices, [now] * len(ids), strict=True))
        except BaseException as exc:  # noqa: BLE001 - nothing was queued: fail the run, answer the requests
            self.abort(f"{Reason.SERVER_ERROR}: {short_reason(exc)}")
            items = []
        with self._lock:
            late = self._aborted
            if not late:
                self._queue.extend(items)  # nothing below can raise: each request is answered exactly once
                self._issued += len(items)
                self._lock.notify_all()
        if late:
            with self._stats_lock:
                self._issued += len(ids)
                self._dropped += len(ids)
            self._answer_now(list(ids))

    def flush(self) -> None:
        """LoadGen's flush callback: every request is sent as soon as the in-flight cap allows."""

    def request_abort(self, reason: str) -> None:
        """Abort from a thread that must not call LoadGen (the main thread, on Ctrl-C): the sender thread does it
        within :data:`POLL_S`."""
        self._abort_request = reason
        with self._lock:
            self._lock.notify_all()

    def abort(self, reason: str) -> None:
        """Fail the target: answer every queued and outstanding request now, and every later one on arrival."""
        with self._lock:
            if self._error is None:
                self._error = reason
            self._aborted = True
            ids = [rid for rid, _, _ in self._queue]
            self._queue.clear()
            ids.extend(self._pending)
            self._pending.clear()
            self._lock.notify_all()
        with self._stats_lock:
            self._dropped += len(ids)
        self._answer_now(ids)

    # ------------------------------------------------------------------------------------------ threads

    def _answer_now(self, ids: list[int]) -> None:
        """Answer requests without a result, through the responder thread."""
        if ids:
            self._answers.put((ids, None, 0))

    def _send_loop(self) -> None:
        block_sigint()
        limit_ns = int((self.request_timeout_s + POLL_S) * NS_PER_S)
        while not self._stop.is_set():
            if self._abort_request is not None and not self._aborted:
                self.abort(self._abort_request)
            overdue = False
            with self._lock:
                ready = not self._aborted and bool(self._queue) and len(self._pending) < self.max_in_flight
                if ready:
                    rid, index, issued = self._queue.popleft()
                    request = _Request(rid, issued, self.clock.now_ns())
                    self._pending[rid] = request
                    in_flight = len(self._pending)
                else:
                    self._lock.wait(POLL_S)
                    oldest = next(iter(self._pending.values()), None)  # dicts keep insertion (sending) order
                    overdue = not self._aborted and oldest is not None and oldest.sent > 0 and \
                        self.clock.now_ns() - oldest.sent > limit_ns
            if not ready:
                if overdue:  # the client library's own timeout should have answered it: never hang on it
                    self.abort(f"{Reason.TIMEOUT}: a request got no answer within {self.request_timeout_s:g} s")
                continue
            self._peak_in_flight = max(self._peak_in_flight, in_flight)
            self._send(request, index)

    def _send(self, request: _Request, index: int) -> None:
        try:
            item = self._make_input(self._pool[index])
            self._client.send([item], self._output, lambda answer, error: self._on_response(request, answer, error))
        except BaseException as exc:  # noqa: BLE001 - the client refused to send: fail the run with why
            self._fail(request, f"{Reason.SERVER_ERROR}: cannot send a request: {short_reason(exc)}")
            return
        request.sent = self.clock.now_ns()

    def _fail(self, request: _Request, reason: str) -> None:
        with self._lock:
            mine = self._pending.pop(request.rid, None) is not None
        if mine:
            with self._stats_lock:
                self._errors += 1
            self._answer_now([request.rid])
        self.abort(reason)

    def _on_response(self, request: _Request, answer: Any, error: BaseException | None) -> None:
        """A response (or its failure) arrived, in the client library's thread: read the class, hand it over."""
        called = self.clock.now_ns()
        if error is not None:
            text = short_reason(error)
            kind = Reason.TIMEOUT if "DEADLINE_EXCEEDED" in text or "timed out" in text.lower() else \
                Reason.SERVER_ERROR
            self._fail(request, f"{kind}: {text}")
            return
        try:
            label = top1(answer)
        except BaseException as exc:  # noqa: BLE001 - a response the client cannot read fails the run
            self._fail(request, f"{Reason.SERVER_ERROR}: unreadable response: {short_reason(exc)}")
            return
        with self._lock:
            mine = self._pending.pop(request.rid, None) is not None
            self._lock.notify_all()
        if mine:  # else an abort answered it already
            self._answers.put((request, label, called))

    def _respond_loop(self) -> None:
        """Answer LoadGen: everything waiting at once, results in one call (until :meth:`close`)."""
        import torch

        block_sigint()
        while True:
            items = [self._answers.get()]
            with contextlib.suppress(queue.Empty):
                while len(items) < MAX_ANSWERS_PER_CALL:
                    items.append(self._answers.get_nowait())
            closing = None in items
            results = [item for item in items if item is not None and item[1] is not None]
            for item in items:
                if item is not None and item[1] is None:
                    with contextlib.suppress(Exception):
                        self._sink(item[0], None)
                    self._answered += len(item[0])
            if results:
                self._answer_results(torch, results)
            if closing:
                return

    def _answer_results(self, torch: Any, results: list[tuple[Any, int | None, int]]) -> None:
        answers = torch.tensor([label for _, label, _ in results], dtype=torch.int64)
        try:
            self._sink([request.rid for request, _, _ in results], answers)
        except BaseException as exc:  # noqa: BLE001 - LoadGen refused the answers: the run fails with why
            self.abort(f"{Reason.SERVER_ERROR}: answering LoadGen failed: {short_reason(exc)}")
        done = self.clock.now_ns()
        with self._stats_lock:
            for request, _, called in results:
                sent = max(request.sent, request.taken)
                self._sums.add({"queue_wait": request.taken - request.issued, "send": sent - request.taken,
                                "wait": max(0, called - sent), "callback": done - called,
                                "end_to_end": done - request.issued})
        self._answered += len(results)


def _discard(ids: Sequence[int], answers: Any) -> None:
    """The sink before a LoadGen run sets one."""
