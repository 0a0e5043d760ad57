"""What a Triton target is asked at connect, and what clsbench reads of its model: whether the server is live, whether
the model is there and ready (else the server's models, in one line), the batching and placement of its config, its
tensors, the one image input clsbench can feed and the output it reads the class from, and the class of a response.

A target that cannot be served raises :class:`TargetError`, one line with a hint, before any LoadGen run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clsbench.errors import InvalidInputError, short_reason
from clsbench.serving.triton_stats import as_int

if TYPE_CHECKING:
    from clsbench.serving.triton_target import TritonEndpoint

#: Image input datatypes the target can feed, Triton's names.
IMAGE_DATATYPES = ("UINT8", "FP32", "FP16", "BF16")


class TargetError(InvalidInputError):
    """A Triton target that cannot be served: unreachable, unknown or unready model, an input it cannot feed."""


def server_facts(endpoint: TritonEndpoint, client: Any) -> dict[str, Any]:
    """Whether the server is live, and its name, version and extensions.

    Raises:
        TargetError: nothing answers as Triton there, or the server is not live.
    """
    other = "http" if endpoint.protocol == "grpc" else "grpc"
    try:
        live = client.live()
        metadata = client.server_metadata()
    except Exception as exc:  # noqa: BLE001 - connection refused, timeout, a non-Triton peer: one line
        raise TargetError(f"nothing answers as Triton ({endpoint.protocol}) at {endpoint.address}: "
                          f"{short_reason(exc)}",
                          f"is the server running there? check host, port and protocol (triton+{other}:// for "
                          f"{other.upper()}; Triton's defaults are gRPC 8001, HTTP 8000)") from None
    if not live:
        raise TargetError(f"the Triton server at {endpoint.address} says it is not live")
    return {"name": metadata.get("name"), "version": metadata.get("version"),
            "extensions": list(metadata.get("extensions") or [])}


def model_names(client: Any) -> tuple[list[str] | None, dict[str, str], str]:
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


def check_model_ready(endpoint: TritonEndpoint, client: Any) -> None:
    """Check the model is ready; else say why in one line: no such model (with the server's models), or its state.

    Raises:
        TargetError: the model is unknown or not ready, or its readiness cannot be asked.
    """
    try:
        ready = client.model_ready()
    except Exception as exc:  # noqa: BLE001 - named in one line
        raise TargetError(f"{endpoint}: cannot ask whether the model is ready: {short_reason(exc)}") from None
    if ready:
        return
    names, states, why = model_names(client)
    where = f"{endpoint.address}"
    if names is not None and endpoint.model not in names:
        listed = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") if names else "none"
        raise TargetError(f"the Triton server at {where} has no model {endpoint.model!r}",
                          f"its models: {listed}")
    if names is None:
        try:
            client.model_metadata()
        except Exception as exc:  # noqa: BLE001 - "unknown model" or another refusal, said in one line
            if "unknown model" in str(exc).lower() or "not found" in str(exc).lower():
                raise TargetError(f"the Triton server at {where} has no model {endpoint.model!r}",
                                  f"its model list is not readable ({why}); pass the access header to see "
                                  "it") from None
    state = states.get(endpoint.model) or "state unknown"
    version = f" version {endpoint.version}" if endpoint.version else ""
    raise TargetError(f"model {endpoint.model!r}{version} on {where} is not ready ({state})",
                      "load it (or wait until Triton has loaded it) and try again")


def choose_input(endpoint: TritonEndpoint, inputs: list[dict[str, Any]], max_batch: int, hint: int | None
                 ) -> dict[str, Any]:
    """The one image input and the shape each request sends: ``[1, 3, H, W]`` for a batching model (Triton
    prepends the batch dimension, shown as -1 in its metadata) or an input declared ``[-1|1, 3, H, W]``;
    ``[3, H, W]`` for a non-batching model whose input has no batch dimension."""
    described = ", ".join(f"{t['name']} {t['datatype']} {t['shape']}" for t in inputs) or "none"
    want = "one image input [3,H,W] (or [-1,3,H,W]) of " + "/".join(IMAGE_DATATYPES)
    if len(inputs) != 1:
        raise TargetError(f"model {endpoint.model!r} has inputs {described}; clsbench sends {want}")
    tensor = inputs[0]
    shape = list(tensor["shape"])
    batched = max_batch > 0 or (len(shape) == 4 and shape[0] in (-1, 1))
    image = shape[1:] if len(shape) == 4 and shape[0] in (-1, 1) else shape
    if tensor["datatype"] not in IMAGE_DATATYPES or len(image) != 3 or image[0] != 3:
        raise TargetError(f"model {endpoint.model!r} has input {described}; clsbench sends {want}")
    height, width = image[1], image[2]
    if height == -1 and width == -1 and hint:
        height = width = hint
    if height <= 0 or width <= 0 or height != width:
        raise TargetError(f"model {endpoint.model!r} takes images of {height}x{width}; clsbench sends "
                          "square images of a fixed size", "pass the input size to use for variable dims")
    if hint is not None and hint != height:
        raise TargetError(f"model {endpoint.model!r} takes {height}x{width} images, not {hint}x{hint} "
                          "as asked", f"ask for input size {height}, or serve a model of size {hint}")
    sent = [1, 3, height, width] if batched else [3, height, width]
    return {"name": tensor["name"], "datatype": tensor["datatype"], "shape": sent, "input_size": height}


def choose_output(endpoint: TritonEndpoint, outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The output the class is read from: the first one (argmax of its scores, or an integer class id as is)."""
    if not outputs:
        raise TargetError(f"model {endpoint.model!r} declares no output")
    first = outputs[0]
    integer = first["datatype"] in ("INT32", "INT64", "UINT32", "UINT64")
    return {"name": first["name"], "datatype": first["datatype"], "shape": first["shape"],
            "top1": "class id as sent" if integer else "argmax, client-side"}


def model_config_facts(config: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a model config that decide batching and placement, with integers (JSON-able)."""
    batching = config.get("dynamic_batching")
    dynamic = None
    if batching is not None:
        dynamic = {"preferred_batch_size": [as_int(b) for b in batching.get("preferred_batch_size") or []],
                   "max_queue_delay_microseconds": as_int(batching.get("max_queue_delay_microseconds")),
                   "preserve_ordering": bool(batching.get("preserve_ordering", False))}
    groups = [{"name": g.get("name"), "kind": g.get("kind", "KIND_AUTO"), "count": as_int(g.get("count"), 1),
               "gpus": [as_int(x) for x in g.get("gpus") or []]} for g in config.get("instance_group") or []]
    return {"name": config.get("name"), "platform": config.get("platform") or None,
            "backend": config.get("backend") or None, "max_batch_size": as_int(config.get("max_batch_size")),
            "dynamic_batching": dynamic, "instance_group": groups,
            "inputs": [{"name": t.get("name"), "data_type": t.get("data_type"), "dims": [as_int(d) for d in
                                                                                          t.get("dims") or []]}
                       for t in config.get("input") or []],
            "outputs": [{"name": t.get("name"), "data_type": t.get("data_type"),
                         "dims": [as_int(d) for d in t.get("dims") or []]} for t in config.get("output") or []]}


def tensor_facts(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tensor metadata (name, datatype, shape) with integer dims."""
    return [{"name": t.get("name"), "datatype": t.get("datatype"), "shape": [as_int(d) for d in t.get("shape") or []]}
            for t in items]


def top1(output: Any) -> int:
    """The class of one response: the argmax of its scores, or the value itself for an integer class-id output."""
    import numpy as np

    flat = np.asarray(output).reshape(-1)
    if flat.dtype.kind in "iu" and flat.size == 1:
        return int(flat[0])
    return int(flat.argmax())
