"""``+cudagraph``: capture the forward pass once into a CUDA graph and replay it; for training, the whole step.

The graph is captured lazily on the first call, after a few warm-up calls on a side stream (cuDNN autotuning
allocates memory, which capture forbids). Each later call copies its input into the graph's static input
(skipped when the caller already passes that tensor) and replays; the returned tensor is the graph's static output,
overwritten by the next replay. Together with ``+compile`` the compiler's own graphs are used (see compile.py).

For ``train`` the forward alone is not worth a graph: the mode marks the prepared model (``capture_step``) and the
workload captures forward, loss, backward and optimizer step together (:mod:`clsbench.workloads.step`), the
"whole-network capture" of PyTorch's CUDA-graph notes, on static shapes (the batch is fixed); with ``+compile``
the compiled forward and backward are captured too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared

#: Warm-up calls before capture; PyTorch's CUDA-graph notes recommend a few on a side stream.
CAPTURE_WARMUP_CALLS = 3


class GraphedForward:
    """Callable that captures ``forward`` for the first input shape it sees, then replays."""

    def __init__(self, forward: Callable[[torch.Tensor], Any]) -> None:
        self._forward = forward
        self._graph: torch.cuda.CUDAGraph | None = None
        self.static_input: torch.Tensor | None = None
        self._static_output: Any = None

    def _capture(self, x: torch.Tensor) -> None:
        self.static_input = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(CAPTURE_WARMUP_CALLS):
                self._forward(self.static_input)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static_output = self._forward(self.static_input)

    def __call__(self, x: torch.Tensor) -> Any:
        if self._graph is None:
            self._capture(x)
        assert self.static_input is not None and self._graph is not None
        if x is not self.static_input:
            if x.shape != self.static_input.shape:
                raise ValueError(f"graph captured for {tuple(self.static_input.shape)}, got {tuple(x.shape)}")
            self.static_input.copy_(x, non_blocking=True)
        self._graph.replay()
        return self._static_output


class CudaGraph:
    name = "cudagraph"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        if ctx.device.type != "cuda":
            return "CUDA graphs need a CUDA device; this device is " + ctx.device.type
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        if ctx.workload_kind == "train":
            prepared.autocast_cache = False  # as below: cached casts would not outlive the capture
            prepared.capture_step = True
            prepared.notes["cudagraph"] = "whole training step, manual capture"
            return prepared
        if "compile" in {m.split(":")[0] for m in ctx.modifiers}:
            prepared.notes["cudagraph"] = "from torch.compile's own CUDA graphs"
            return prepared
        prepared.autocast_cache = False  # cached casts would be freed after capture, leaving the graph dangling
        prepared.forward = GraphedForward(prepared.forward)
        prepared.notes["cudagraph"] = "manual capture"
        return prepared


MODIFIERS.register("cudagraph", Modifier(order=4, build=lambda arg: CudaGraph()))
