"""``+compile`` / ``+compile:MODE``: ``torch.compile`` with the named mode (default: the run's ``compile_mode``).

Compilation is lazy: it happens during the first call, which the workloads time as ``compile_s``, outside the
timed region. With ``+cudagraph`` as well, CUDA graphs come from the compiler itself ("reduce-overhead"), since
capturing a graph around a compiled module by hand duplicates what the compiler does better.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class Compile:
    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode
        self.name = "compile" if mode is None else f"compile:{mode}"

    def effective_mode(self, ctx: ModeContext) -> str:
        mode = self.mode or ctx.compile_mode
        if "cudagraph" in ctx.modifiers and mode == "default":
            return "reduce-overhead"
        return mode

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        if not hasattr(torch, "compile"):
            return "this torch has no torch.compile"
        try:
            dynamo = importlib.import_module("torch._dynamo")  # a plain `import torch._dynamo` would shadow torch
            if not dynamo.is_dynamo_supported():
                return "torch.compile is not supported on this Python/platform"
        except Exception as exc:  # noqa: BLE001 - any import failure means compile cannot run here
            return f"torch.compile unavailable: {exc}"
        if "cudagraph" in ctx.modifiers and self.effective_mode(ctx) == "max-autotune-no-cudagraphs":
            return "compile mode max-autotune-no-cudagraphs contradicts +cudagraph"
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {"compile_mode": self.effective_mode(ctx)}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        mode = self.effective_mode(ctx)
        prepared.forward = torch.compile(prepared.model, mode=mode)
        prepared.notes["compile_mode"] = mode
        if ctx.workload_kind == "train":
            # The optimizer keeps the original parameters; the compiled module shares them.
            prepared.notes["compiled_train"] = True
        return prepared


MODIFIERS.register("compile", Modifier(order=2, build=Compile, arguments=COMPILE_MODES))
