"""torchvision's classification networks, by their plain torchvision name (``resnet50``, ``vit_b_16``).

Naming rule: a name is torchvision's if ``torchvision.models.list_models(module=torchvision.models)`` lists
it. Passing the module keeps to classification: detection, segmentation, video, optical-flow and quantized
builders live in submodules and are left out.

Building: ``weights=None`` (random init, nothing downloaded), and every network returns a plain logits
tensor in training mode as in evaluation mode: googlenet and inception_v3 would return a named tuple with
auxiliary logits in training mode, so they are built with ``aux_logits=False`` (and ``init_weights=True``,
which their builders otherwise warn about).

Input size: the crop side of the model's DEFAULT weights' preprocessing, read from
``get_model_weights(name).DEFAULT.transforms`` (a ``functools.partial`` holding ``crop_size``) without
downloading anything; 224 where it cannot be read. The ViTs and MaxViT are built for one input size only,
so they are built for the requested one (for vit_h_14 that is 518 by default, the size of its DEFAULT
weights, though torchvision's own default without weights is 224); the other networks accept any size
above a small minimum.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from clsbench.errors import InvalidInputError
from clsbench.models.spec import DEFAULT_INPUT_SIZE, SOURCES, ModelSpec

if TYPE_CHECKING:
    import torch

SOURCE = "torchvision"

# Builder arguments that make the network return plain logits in training mode (see the module docstring).
_EXTRA_KWARGS: dict[str, dict[str, Any]] = {
    "googlenet": {"aux_logits": False, "init_weights": True},
    "inception_v3": {"aux_logits": False, "init_weights": True},
}


def _size_kwargs(name: str, input_size: int) -> dict[str, Any]:
    """Builder arguments fixing the input size, for the families whose architecture depends on it."""
    if name.startswith("vit_"):
        return {"image_size": input_size}
    if name.startswith("maxvit_"):
        return {"input_size": (input_size, input_size)}
    return {}


@functools.cache
def _names() -> frozenset[str]:
    import torchvision.models

    return frozenset(torchvision.models.list_models(module=torchvision.models))


def _default_input_size(name: str) -> int:
    """The crop side of the DEFAULT weights' transforms, read without downloading; 224 if unreadable."""
    import torchvision.models

    try:
        transforms = torchvision.models.get_model_weights(name).DEFAULT.transforms
    except (ValueError, AttributeError):  # no weights enum, or no DEFAULT member
        return DEFAULT_INPUT_SIZE
    crop = getattr(transforms, "keywords", {}).get("crop_size")
    if isinstance(crop, (list, tuple)) and crop:
        crop = crop[0]
    return crop if isinstance(crop, int) and crop > 0 else DEFAULT_INPUT_SIZE


class TorchvisionSource:
    """The :class:`~clsbench.models.spec.ModelSource` of torchvision's classification networks."""

    name = SOURCE
    priority = 10

    def names(self) -> list[str]:
        """Every torchvision classification model name, sorted."""
        return sorted(_names())

    def spec(self, name: str) -> ModelSpec | None:
        """The spec for a torchvision name; None if torchvision has no classification model of that name."""
        # Every torchvision name is an identifier: skip importing torchvision for ``timm/x`` or ``mod:fn``.
        if not name.isidentifier() or name not in _names():
            return None
        return ModelSpec(
            name=name,
            source=SOURCE,
            input_size=_default_input_size(name),
            factory=functools.partial(_build, name),
        )


def _build(name: str, num_classes: int, input_size: int) -> torch.nn.Module:
    import torchvision.models

    size_kwargs = _size_kwargs(name, input_size)
    try:
        return torchvision.models.get_model(
            name, weights=None, num_classes=num_classes, **_EXTRA_KWARGS.get(name, {}), **size_kwargs
        )
    except (ValueError, AssertionError) as exc:  # how ViT and MaxViT refuse a size their patches don't divide
        if not size_kwargs:
            raise
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidInputError(
            f"torchvision model {name!r} cannot be built for input size {input_size}: {detail}",
            "pick an input size its patch or partition size divides, e.g. its default",
        ) from exc


SOURCES.register(SOURCE, TorchvisionSource())
