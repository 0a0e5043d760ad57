"""``+freeze``: Inductor's freezing for the ``+compile`` it goes with (inference only).

Freezing treats the weights as constants while Inductor compiles: it folds BatchNorm into the convolutions before
it, folds constant subexpressions, and may lay the weights out afresh for the kernels chosen. The compiled module no
longer reads its parameters, so it cannot train (planning refuses ``train`` in one line) and its outputs would not
follow weights changed after compilation. The setting is scoped to the one compile (:func:`clsbench.modes.compile.
compile_kwargs` passes it in ``torch.compile``'s options; ``torch._inductor.config.freezing`` itself is never
set); the measurement's mode notes record ``inductor_freezing: true``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared


class Freeze:
    name = "freeze"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return None  # the workload kind is refused through the modifier's kinds; compile says the rest

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {"inductor_freezing": True}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        prepared.forward = FrozenOnFirstCall(prepared.forward)  # +compile, applied before, made the forward
        prepared.notes["inductor_freezing"] = True
        prepared.notes["freeze_scope"] = "first call"
        return prepared


#: One first call at a time in the process: ``config.patch`` saves and restores a global, so two overlapping first
#: calls (serving's model instances start on threads) could restore each other's patched value and leave freezing on.
_FIRST_CALL = threading.Lock()


class FrozenOnFirstCall:
    """A compiled function whose first call (the trace and compile) runs with Inductor's freezing turned on."""

    def __init__(self, compiled: Callable[..., Any]) -> None:
        self.compiled = compiled
        self.called = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.called:
            return self.compiled(*args, **kwargs)
        config = importlib.import_module("torch._inductor.config")
        with _FIRST_CALL:
            if self.called:  # another thread's first call compiled it meanwhile
                return self.compiled(*args, **kwargs)
            with config.patch(freezing=True):
                out = self.compiled(*args, **kwargs)
            self.called = True
        return out


MODIFIERS.register("freeze", Modifier(
    order=3, build=lambda arg: Freeze(), requires="compile", kinds=frozenset({"inference"}),
    why="+freeze folds the weights into constants (Inductor freezing), which is not a way to train"))
