"""The two protocols of a Triton target, behind one set of calls: gRPC (``tritonclient.grpc``, asynchronous requests
with a callback) and HTTP (``tritonclient.http``, one client per sending thread, since that client is not thread safe).

Both answer metadata as plain dicts, make an input tensor from a NumPy array, run one request synchronously (the
warm-up) and send one asynchronously, calling ``done(answer, error)`` in a thread the client library owns.
The client libraries are imported when a client is made, so this module imports without them.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from clsbench.serving.server import block_sigint

if TYPE_CHECKING:
    from clsbench.serving.triton_target import TritonEndpoint


class TritonClient:
    """One protocol's calls, as plain dicts with integers (gRPC's JSON gives 64-bit integers as strings)."""

    def __init__(self, endpoint: TritonEndpoint, headers: Mapping[str, str] | None, timeout_s: float) -> None:
        self.endpoint = endpoint
        self.headers = dict(headers) if headers else None
        self.timeout_s = timeout_s
        self.version = endpoint.version or ""

    def close(self) -> None:
        """Close the connections; the protocols that hold one override it."""


class GrpcClient(TritonClient):
    """gRPC: one client for every call; requests go out with ``async_infer`` and are answered in its callback."""

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


class HttpClient(TritonClient):
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
