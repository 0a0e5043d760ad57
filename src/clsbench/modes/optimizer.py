"""``+foreach`` / ``+fused``: the training optimizer's implementation (train only).

PyTorch's optimizers have three implementations of one update: a Python loop over the parameters ("for-loop"),
``foreach`` (multi-tensor kernels over lists of parameters: a few launches instead of one per parameter) and
``fused`` (one kernel per parameter group that reads and writes each tensor once). Without either modifier the
optimizer is built with neither flag and torch picks (``foreach`` on CUDA where it can). The arithmetic is the same
update; only the kernels differ. An implementation this torch does not offer on the device (torch refuses it when
the optimizer is built) is recorded as skipped with torch's words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared

#: The modifiers of this module and the constructor flag each sets.
IMPLEMENTATIONS = ("foreach", "fused")


@dataclass(frozen=True)
class OptimizerImplementation:
    name: str

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return None  # the workload kind is refused through the modifier's kinds; the device when the optimizer is built

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        prepared.optimizer_options = {**prepared.optimizer_options, self.name: True}
        prepared.notes["optimizer_implementation"] = self.name
        return prepared


def _modifier(name: str) -> Modifier:
    return Modifier(order=5, build=lambda arg: OptimizerImplementation(name), group="optimizer implementation",
                    kinds=frozenset({"train"}), why=f"+{name} chooses the training optimizer's implementation")


for _name in IMPLEMENTATIONS:
    MODIFIERS.register(_name, _modifier(_name))
