"""``+compile`` / ``+compile:MODE``: ``torch.compile`` with the named mode (default: the run's ``compile_mode``).

Compilation is lazy: it happens during the first call, which the workloads time as ``compile_s``, outside the
timed region. With ``+cudagraph`` as well, inference takes its CUDA graphs from the compiler itself
("reduce-overhead"), since capturing a graph around a compiled module by hand duplicates what the compiler does
better; training captures the whole step by hand (:mod:`clsbench.workloads.step`), so there the compile mode must
bring no CUDA graphs of its own. With ``+freeze`` the compile also carries Inductor's freezing in
``torch.compile``'s ``options`` (the mode's own options plus ``freezing``); that alone does not freeze (Dynamo reads
the global setting while tracing), so :mod:`clsbench.modes.freeze` also runs the first call under the setting.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Compile modes whose Inductor options bring CUDA graphs of their own (``triton.cudagraphs``).
GRAPHING_MODES = ("reduce-overhead", "max-autotune")


def compile_kwargs(mode: str, *, freezing: bool) -> dict[str, Any]:
    """The keyword arguments of ``torch.compile`` for ``mode``, with Inductor freezing when asked.

    ``torch.compile`` takes either a mode or an options dict; a mode is a named set of options
    (``torch._inductor.list_mode_options``), so freezing is that set plus ``freezing``. Without freezing the mode
    is passed by name, exactly as before freezing existed.
    """
    if not freezing:
        return {"mode": mode}
    inductor = importlib.import_module("torch._inductor")
    return {"options": {**inductor.list_mode_options(mode), "freezing": True}}


class Compile:
    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode
        self.name = "compile" if mode is None else f"compile:{mode}"

    def effective_mode(self, ctx: ModeContext) -> str:
        mode = self.mode or ctx.compile_mode
        if "cudagraph" in ctx.modifiers and mode == "default" and ctx.workload_kind != "train":
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
        mode = self.effective_mode(ctx)
        if "cudagraph" in ctx.modifiers and mode == "max-autotune-no-cudagraphs" and ctx.workload_kind != "train":
            return "compile mode max-autotune-no-cudagraphs contradicts +cudagraph"
        if "cudagraph" in ctx.modifiers and ctx.workload_kind == "train" and mode in GRAPHING_MODES:
            return (f"compile mode {mode} brings CUDA graphs of its own, which cannot run inside the captured "
                    "training step of +cudagraph; use +compile or +compile:max-autotune-no-cudagraphs")
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {"compile_mode": self.effective_mode(ctx)}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        mode = self.effective_mode(ctx)
        kwargs = compile_kwargs(mode, freezing="freeze" in ctx.modifiers)
        prepared.forward = torch.compile(prepared.model, **kwargs)
        prepared.compiler = _compiler(kwargs)
        prepared.notes["compile_mode"] = mode
        if ctx.workload_kind == "train":
            # The optimizer keeps the original parameters; the compiled module shares them.
            prepared.notes["compiled_train"] = True
        return prepared


def _compiler(kwargs: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A function that compiles another the way this mode compiles the forward."""

    def compile_function(function: Callable[..., Any]) -> Callable[..., Any]:
        return torch.compile(function, **kwargs)

    return compile_function


MODIFIERS.register("compile", Modifier(order=2, build=Compile, arguments=COMPILE_MODES))
