"""``+compiled-step``: the whole training step inside the compiled region (train only; needs ``+compile``).

``+compile`` alone compiles the model's forward (and, through AOTAutograd, its backward); the optimizer step then
runs eagerly, one launch per parameter or per ``foreach`` group. With ``+compiled-step`` the workload compiles one
function holding forward, loss, backward and optimizer step instead (:mod:`clsbench.workloads.step`), with the same
compile mode, so Inductor also generates the optimizer update's kernels. Dynamo breaks the graph at ``backward()``
(the backward is AOTAutograd's compiled one either way) and compiles the optimizer step as a graph of its own.
"""

from __future__ import annotations

from typing import Any

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared


class CompiledStep:
    name = "compiled-step"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return None  # the workload kind is refused through the modifier's kinds; +compile is required by parsing

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        if prepared.compiler is None:
            raise RuntimeError("+compiled-step must be applied after +compile")
        prepared.forward = prepared.model  # the step function is compiled as a whole, the forward inside it
        prepared.compiled_step = True
        prepared.notes["compiled_step"] = True
        return prepared


MODIFIERS.register("compiled-step", Modifier(
    order=6, build=lambda arg: CompiledStep(), requires="compile", kinds=frozenset({"train"}),
    why="+compiled-step compiles the optimizer step with the training step"))
