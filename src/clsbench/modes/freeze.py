"""``+freeze``: Inductor's freezing for the ``+compile`` it goes with (inference only).

Freezing treats the weights as constants while Inductor compiles: it folds BatchNorm into the convolutions before
it, folds constant subexpressions, and may lay the weights out afresh for the kernels chosen. The compiled module no
longer reads its parameters, so it cannot train (planning refuses ``train`` in one line) and its outputs would not
follow weights changed after compilation. The setting is scoped to the one compile (:func:`clsbench.modes.compile.
compile_kwargs` passes it in ``torch.compile``'s options; ``torch._inductor.config.freezing`` itself is never
set); the measurement's mode notes record ``inductor_freezing: true``.
"""

from __future__ import annotations

from typing import Any

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared


class Freeze:
    name = "freeze"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return None  # the workload kind is refused through the modifier's kinds; compile says the rest

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {"inductor_freezing": True}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        prepared.notes["inductor_freezing"] = True  # +compile, applied before, compiled with freezing
        return prepared


MODIFIERS.register("freeze", Modifier(
    order=3, build=lambda arg: Freeze(), requires="compile", kinds=frozenset({"inference"}),
    why="+freeze folds the weights into constants (Inductor freezing), which is not a way to train"))
