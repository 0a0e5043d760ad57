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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from clsbench.core.vocab import Reason
from clsbench.errors import InvalidInputError, short_reason
from clsbench.measure.clock import NS_PER_S, Clock, WallClock
from clsbench.serving.counters import STAGES
from clsbench.serving.server import Sink, block_sigint
from clsbench.serving.triton_clients import GrpcClient, HttpClient
from clsbench.serving.triton_headers import resolve_headers
from clsbench.serving.triton_model import (
    TargetError,
    check_model_ready,
    choose_input,
    choose_output,
    model_config_facts,
    server_facts,
    tensor_facts,
    top1,
)
from clsbench.serving.triton_stats import model_statistics, statistics_delta

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
#: The client stages, in the order a request passes them.
CLIENT_STAGES = ("queue_wait", "send", "wait", "callback", "end_to_end")


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
            over HTTP, as the server's ``--grpc-restricted-protocol`` / ``--http-restricted-api`` name it); a
            value may name where the secret is instead, ``env:VAR`` or ``@PATH``
            (:func:`clsbench.serving.triton_headers.resolve_headers`).
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
        # A value may name where the secret is (env:VAR, @PATH): read here, kept in memory only, sent with each call.
        self.headers = resolve_headers(headers) or None
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
                of a datatype in :data:`~clsbench.serving.triton_model.IMAGE_DATATYPES`, its size disagrees with
                ``input_size_hint``, or the warm-up request fails.
        """
        import numpy as np

        self._open_client()
        client = self._client
        server = server_facts(self.endpoint, client)
        check_model_ready(self.endpoint, client)
        try:
            metadata = client.model_metadata()
            config = model_config_facts(client.model_config())
        except Exception as exc:  # noqa: BLE001 - named in one line
            raise TargetError(f"{self.endpoint}: cannot read the model's metadata or config: {short_reason(exc)}",
                              "pass the access header if the server restricts its metadata") from None
        model = {"name": metadata.get("name"), "versions": [str(v) for v in metadata.get("versions") or []],
                 "platform": metadata.get("platform") or None, "inputs": tensor_facts(metadata.get("inputs") or []),
                 "outputs": tensor_facts(metadata.get("outputs") or [])}
        self._input = choose_input(self.endpoint, model["inputs"], config["max_batch_size"], input_size_hint)
        output = choose_output(self.endpoint, model["outputs"])
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
                self._client = GrpcClient(self.endpoint, self.headers, self.request_timeout_s)
            else:
                self._client = HttpClient(self.endpoint, self.headers, self.request_timeout_s, self.max_in_flight)
        except ImportError:
            raise TargetError("the Triton client (tritonclient) is not installed",
                              "install it with: pip install 'clsbench[triton]'  (or: pip install "
                              "'tritonclient[grpc,http]')") from None

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
