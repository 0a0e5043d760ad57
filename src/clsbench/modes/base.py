"""The execution-mode interface: one small protocol, one module per component.

A mode name such as ``amp-bf16+cl+compile`` is one *precision* (``fp32``, ``tf32``, ``amp-fp16``, ``amp-bf16``,
``fp16``, ``bf16``) followed by any *modifiers* (``cl``, ``compile[:MODE]``, ``freeze``, ``cudagraph``, and for
training ``foreach`` or ``fused``, ``compiled-step``). Each component can refuse a device or workload with a reason
(the measurement is then recorded as skipped) and transforms a :class:`Prepared` model in turn: precision first,
then memory format, then compilation, then graph capture, then how the training step runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from clsbench.core.registry import Registry


@dataclass(frozen=True)
class ModeContext:
    """What a component needs to know to decide whether it can run and how."""

    device: torch.device
    workload_kind: str  # "inference" or "train"
    bf16_supported: bool
    tf32_supported: bool
    compile_mode: str = "default"
    modifiers: frozenset[str] = frozenset()  # names of every modifier in the mode, for components that interact


@dataclass
class Prepared:
    """A model made ready for one mode: the module, how to call it, and how to build its inputs.

    Attributes:
        model: the module on its device (its parameters are what the optimizer updates).
        forward: what the workload calls; the module itself, or a compiled / graph-replaying wrapper.
        input_dtype: dtype of the input tensor the workload must build.
        memory_format: memory format of the input tensor.
        autocast_dtype: dtype for ``torch.autocast`` around forward (and loss), or None for no autocast.
        autocast_cache: whether autocast may cache casts (must be off while a CUDA graph is captured).
        grad_scaler: whether training needs a gradient scaler (fp16 autocast).
        notes: facts about how the mode was realised, stored in the result (e.g. the compile mode used).
        compiler: how the mode compiles a function (``+compile`` sets it: ``torch.compile`` with the mode's
            settings), for a workload that compiles more than the forward (``+compiled-step``); None: no compile.
        optimizer_options: keyword arguments for the training optimizer's constructor (``+foreach``, ``+fused``).
        compiled_step: train: compile the whole step (forward, loss, backward, optimizer step) with ``compiler``.
        capture_step: train: capture the whole step into one CUDA graph and replay it (``+cudagraph``).
    """

    model: torch.nn.Module
    forward: Callable[[torch.Tensor], Any]
    input_dtype: torch.dtype = torch.float32
    memory_format: torch.memory_format = torch.contiguous_format
    autocast_dtype: torch.dtype | None = None
    autocast_cache: bool = True
    grad_scaler: bool = False
    notes: dict[str, Any] = field(default_factory=dict)
    compiler: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None
    optimizer_options: dict[str, Any] = field(default_factory=dict)
    compiled_step: bool = False
    capture_step: bool = False

    def autocast(self, device_type: str) -> contextlib.AbstractContextManager[Any]:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=self.autocast_dtype, cache_enabled=self.autocast_cache)


class ModeComponent(Protocol):
    """One precision or modifier."""

    name: str

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        """Why this component cannot run for ``ctx`` (the measurement is skipped), or None."""

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        """Set process-wide backend flags this component needs; return them for the result file."""

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        """Transform the prepared model (called in canonical order)."""


@dataclass(frozen=True)
class Modifier:
    """How a ``+token`` modifier is built: its place in the canonical order, the arguments ``+token:ARG`` accepts,
    and the component it makes."""

    order: int  # canonical position among the modifiers (lowest first): cl, compile, freeze, cudagraph, ...
    build: Callable[[str | None], ModeComponent]
    arguments: tuple[str, ...] = ()  # what ``+token:ARG`` may name; empty: the modifier takes no argument
    requires: str | None = None  # another modifier the mode must name too (``freeze`` needs ``compile``)
    group: str | None = None  # modifiers of one group exclude each other (``foreach``, ``fused``: the optimizer)
    kinds: frozenset[str] | None = None  # the workload kinds it applies to; None: every kind. Planning refuses the
    # others in one line (:meth:`clsbench.modes.ExecutionMode.refusal`); a worker records them as skipped.
    why: str = ""  # what the modifier is, for that line: "+freeze folds the weights into constants"


#: The precisions by name (each module of this folder registers its own).
PRECISIONS: Registry[ModeComponent] = Registry("precision", package="clsbench.modes", option="--mode")
#: The modifiers by token.
MODIFIERS: Registry[Modifier] = Registry("modifier", package="clsbench.modes", option="--mode")
