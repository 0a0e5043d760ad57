"""``+cl``: NHWC (channels_last) memory format for the model and its input, what tensor cores prefer for convs."""

from __future__ import annotations

from typing import Any

import torch

from clsbench.modes.base import MODIFIERS, ModeContext, Modifier, Prepared


class ChannelsLast:
    name = "cl"

    def unsupported_reason(self, ctx: ModeContext) -> str | None:
        return None

    def configure(self, ctx: ModeContext) -> dict[str, Any]:
        return {}

    def apply(self, prepared: Prepared, ctx: ModeContext) -> Prepared:
        prepared.model = prepared.model.to(memory_format=torch.channels_last)
        if prepared.forward is not prepared.model:
            raise RuntimeError("channels_last must be applied before compile or graph capture")
        prepared.forward = prepared.model
        prepared.memory_format = torch.channels_last
        return prepared


MODIFIERS.register("cl", Modifier(order=1, build=lambda arg: ChannelsLast()))
