"""Execution modes: parse ``amp-bf16+cl+compile`` into components and prepare a model for it.

Grammar: ``PRECISION[+MODIFIER...]`` with PRECISION one of fp32, tf32, amp-fp16, amp-bf16, fp16, bf16 and
MODIFIER one of ``cl`` (channels_last), ``compile`` or ``compile:MODE`` (torch.compile), ``cudagraph``.
Modifiers may come in any order; :func:`parse_mode` returns the canonical spelling (precision, cl, compile,
cudagraph), so ``fp32+compile+cl`` and ``fp32+cl+compile`` are the same measurement.
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

    def context(self, device: torch.device, workload_kind: str, *, bf16_supported: bool, tf32_supported: bool,
                compile_mode: str = "default") -> ModeContext:
        return ModeContext(device=device, workload_kind=workload_kind, bf16_supported=bf16_supported,
                           tf32_supported=tf32_supported, compile_mode=compile_mode,
                           modifiers=self.modifier_names)

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        for component in self.components:
            reason = component.unsupported_reason(ctx)
            if reason:
                return reason
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
    components: list[ModeComponent] = [precision]
    names = [precision.name]
    for base, modifier in _modifiers():
        if base in chosen:
            component = modifier.build(chosen[base])
            components.append(component)
            names.append(component.name)
    return ExecutionMode(name="+".join(names), components=tuple(components))
