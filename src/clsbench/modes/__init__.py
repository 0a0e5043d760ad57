"""Execution modes: parse ``amp-bf16+cl+compile`` into components and prepare a model for it.

Grammar: ``PRECISION[+MODIFIER...]`` with PRECISION one of fp32, tf32, amp-fp16, amp-bf16, fp16, bf16 and
MODIFIER one of ``cl`` (channels_last), ``compile`` or ``compile:MODE`` (torch.compile), ``freeze`` (Inductor
freezing; needs ``compile``, inference only), ``cudagraph``, and for training ``foreach`` or ``fused`` (the
optimizer's implementation) and ``compiled-step`` (the optimizer step inside the compiled region; needs
``compile``). Modifiers may come in any order; :func:`parse_mode` returns the canonical spelling (precision, cl,
compile, freeze, cudagraph, foreach/fused, compiled-step), so ``fp32+compile+cl`` and ``fp32+cl+compile`` are the
same measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from clsbench.errors import InvalidInputError
from clsbench.modes.base import MODIFIERS, PRECISIONS, ModeComponent, ModeContext, Modifier, Prepared

__all__ = ["MODIFIERS", "PRECISIONS", "ExecutionMode", "ModeContext", "Modifier", "Prepared", "known_mode_tokens",
           "parse_mode"]


def _modifiers() -> list[tuple[str, Modifier]]:
    """The modifiers in canonical order."""
    return sorted(MODIFIERS.items(), key=lambda item: item[1].order)


def known_mode_tokens() -> str:
    precisions = ", ".join(PRECISIONS.names())
    modifiers = ", ".join(f"+{token}" + (f"[:{'|'.join(m.arguments)}]" if m.arguments else "")
                          for token, m in _modifiers())
    return f"precisions: {precisions}; modifiers: {modifiers}"


@dataclass(frozen=True)
class ExecutionMode:
    """A parsed mode: one precision and an ordered tuple of modifiers."""

    name: str
    components: tuple[ModeComponent, ...]

    @property
    def modifier_names(self) -> frozenset[str]:
        return frozenset(c.name for c in self.components[1:])

    @property
    def captured(self) -> bool:
        """Whether the step runs as one CUDA graph replay (``+cudagraph``): launched without the interpreter."""
        return "cudagraph" in self.modifier_names

    def context(self, device: torch.device, workload_kind: str, *, bf16_supported: bool, tf32_supported: bool,
                compile_mode: str = "default") -> ModeContext:
        return ModeContext(device=device, workload_kind=workload_kind, bf16_supported=bf16_supported,
                           tf32_supported=tf32_supported, compile_mode=compile_mode,
                           modifiers=self.modifier_names)

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        refused = self.refusal(ctx.workload_kind)
        if refused:
            return refused
        for component in self.components:
            reason = component.unsupported_reason(ctx)
            if reason:
                return reason
        return None

    def refusal(self, workload_kind: str) -> str | None:
        """Why this mode can never run a workload of ``workload_kind`` on any device (a modifier made for another
        kind: ``+freeze`` for training, ``+fused`` for inference), or None. Planning refuses such a pair in one
        line; :meth:`unsupported_reason` gives the same reason to a worker."""
        for component in self.components[1:]:
            modifier = MODIFIERS.get(component.name.split(":")[0])
            if modifier.kinds is not None and workload_kind not in modifier.kinds:
                kinds = " and ".join(sorted(modifier.kinds))
                return f"{modifier.why or '+' + component.name}; it applies to {kinds} workloads only"
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        """Set the process-wide flags of every component; return the flags in force."""
        flags: dict[str, Any] = {}
        for component in self.components:
            flags.update(component.configure(ctx))
        return flags

    def prepare(self, model: torch.nn.Module, ctx: ModeContext) -> Prepared:
        """Apply every component in canonical order to a model already on its device."""
        prepared = Prepared(model=model, forward=model)
        for component in self.components:
            prepared = component.apply(prepared, ctx)
        return prepared


def parse_mode(text: str) -> ExecutionMode:
    """Parse a mode name; raise InvalidInputError naming the bad token and the valid ones."""
    tokens = [t.strip() for t in text.strip().lower().split("+")]
    if not tokens or not tokens[0]:
        raise InvalidInputError(f"empty mode {text!r}", known_mode_tokens())
    if tokens[0] not in PRECISIONS:
        raise InvalidInputError(f"unknown precision {tokens[0]!r} in mode {text!r}", known_mode_tokens())
    precision = PRECISIONS.get(tokens[0])
    chosen: dict[str, str | None] = {}
    for token in tokens[1:]:
        base, _, arg = token.partition(":")
        if base not in MODIFIERS:
            raise InvalidInputError(f"unknown modifier {token!r} in mode {text!r}", known_mode_tokens())
        if base in chosen:
            raise InvalidInputError(f"modifier {base!r} appears twice in mode {text!r}", known_mode_tokens())
        arguments = MODIFIERS.get(base).arguments
        if arg and not arguments:
            raise InvalidInputError(f"modifier {base!r} takes no argument (in mode {text!r})", known_mode_tokens())
        if arg and arg not in arguments:
            raise InvalidInputError(f"unknown {base} mode {arg!r} in mode {text!r}",
                                    f"choose from: {', '.join(arguments)}")
        chosen[base] = arg or None
    _check_combination(text, chosen)
    components: list[ModeComponent] = [precision]
    names = [precision.name]
    for base, modifier in _modifiers():
        if base in chosen:
            component = modifier.build(chosen[base])
            components.append(component)
            names.append(component.name)
    return ExecutionMode(name="+".join(names), components=tuple(components))


def _check_combination(text: str, chosen: dict[str, str | None]) -> None:
    """Refuse a modifier without the one it needs, and two modifiers of one group (one line each)."""
    groups: dict[str, str] = {}
    for base in chosen:
        modifier = MODIFIERS.get(base)
        if modifier.requires and modifier.requires not in chosen:
            raise InvalidInputError(f"modifier {base!r} needs +{modifier.requires} too (in mode {text!r})",
                                    f"e.g. {text.strip()}+{modifier.requires}")
        if modifier.group:
            if modifier.group in groups:
                raise InvalidInputError(f"modifiers {groups[modifier.group]!r} and {base!r} both choose the "
                                        f"{modifier.group} (in mode {text!r})", "keep one of them")
            groups[modifier.group] = base
