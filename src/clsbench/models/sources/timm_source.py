"""timm's networks, as ``timm/`` + timm's model name (``timm/vit_tiny_patch16_224``, ``timm/resnet50``).

Naming rule: ``timm/NAME`` where ``timm.is_model(NAME)``; ``NAME`` may carry a pretrained tag
(``timm/resnet50.a1_in1k``), which selects that tag's default input size. The prefix keeps timm's names
apart from torchvision's, many of which are the same words for different networks. timm is optional: it is
imported only when a ``timm/`` name is resolved or the names are listed, and without it no ``timm/`` name
is listed and resolving one raises :class:`~clsbench.errors.InvalidInputError` saying how to install it.

Building: ``pretrained=False`` (random init, nothing downloaded).

Input size: the side of ``input_size`` (3, H, W) in the model's pretrained config, read without building
the model. Models whose config says ``fixed_input_size`` (ViTs and the like: their position embeddings
are sized for one input) are built with ``img_size=`` the requested side when it differs from the default,
so that they run at, say, 64 pixels; the others accept any size as they are.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import TYPE_CHECKING

from clsbench.errors import InvalidInputError
from clsbench.models.spec import DEFAULT_INPUT_SIZE, SOURCES, TIMM_PREFIX, ModelSpec

if TYPE_CHECKING:
    import torch

SOURCE = "timm"
INSTALL_HINT = "pip install 'clsbench[timm]'"


def _import_timm() -> ModuleType:
    """Import timm, or raise InvalidInputError saying why it cannot be used."""
    try:
        import timm
    except ModuleNotFoundError as exc:
        if exc.name != "timm":
            raise InvalidInputError(f"timm cannot be imported: {exc}", INSTALL_HINT) from exc
        raise InvalidInputError("timm is not installed", INSTALL_HINT) from exc
    except ImportError as exc:
        raise InvalidInputError(f"timm cannot be imported: {exc}", INSTALL_HINT) from exc
    return timm


class TimmSource:
    """The :class:`~clsbench.models.spec.ModelSource` of timm's networks, under the ``timm/`` prefix."""

    name = SOURCE
    priority = 20

    def names(self) -> list[str]:
        """Every timm architecture name with the prefix; empty when timm cannot be imported."""
        try:
            timm = _import_timm()
        except InvalidInputError:
            return []
        return [TIMM_PREFIX + arch for arch in timm.list_models()]

    def spec(self, name: str) -> ModelSpec | None:
        """The spec for a ``timm/`` name; None for a name without the prefix or one timm does not know.

        Raises:
            InvalidInputError: a ``timm/`` name while timm cannot be imported.
        """
        if not name.startswith(TIMM_PREFIX):
            return None
        timm = _import_timm()
        arch = name[len(TIMM_PREFIX) :]
        if not arch or not timm.is_model(arch):
            return None
        try:
            cfg = timm.models.get_pretrained_cfg(arch)
        except RuntimeError:  # a known architecture with an unknown pretrained tag
            return None
        default_size = int(cfg.input_size[1]) if cfg is not None and cfg.input_size else DEFAULT_INPUT_SIZE
        fixed = bool(cfg is not None and cfg.fixed_input_size)
        return ModelSpec(
            name=name,
            source=SOURCE,
            input_size=default_size,
            factory=functools.partial(_build, arch, default_size, fixed),
        )


def _build(
    arch: str, default_size: int, fixed_size: bool, num_classes: int, input_size: int
) -> torch.nn.Module:
    timm = _import_timm()
    kwargs = {"img_size": input_size} if fixed_size and input_size != default_size else {}
    try:
        return timm.create_model(arch, pretrained=False, num_classes=num_classes, **kwargs)
    except TypeError as exc:
        if not kwargs:
            raise
        raise InvalidInputError(
            f"timm model {arch!r} cannot be built for input size {input_size}: {exc}",
            f"use its default input size {default_size}",
        ) from exc


SOURCES.register(SOURCE, TimmSource())
