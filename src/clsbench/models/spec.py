"""What a model source gives and where the sources are registered: :class:`ModelSpec` (a known model and how to
build it, seeded), the :class:`ModelSource` interface each module of ``models/sources/`` implements, and
:data:`SOURCES`, the registry those modules add themselves to.

This is the part of the model zoo the sources need; :mod:`clsbench.models.registry` resolves names through them.
Holding it apart keeps the sources from importing the registry that in turn imports them (the custom source is
both looked up by :func:`~clsbench.models.registry.register_model` and a plug-in of :data:`SOURCES`).
Nothing heavy is imported here: torch only when a model is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from clsbench.core.registry import Registry
from clsbench.errors import InvalidInputError

if TYPE_CHECKING:
    import torch

DEFAULT_NUM_CLASSES = 1000  # ImageNet-1k, the head every network in the zoo is published with
DEFAULT_INPUT_SIZE = 224  # the ImageNet crop side most networks are trained and benchmarked at

TIMM_PREFIX = "timm/"

Factory = Callable[[int, int], "torch.nn.Module"]
"""Builds the network: ``factory(num_classes, input_size)``, called inside the seeded RNG context."""


@dataclass(frozen=True)
class ModelSpec:
    """A known model: its canonical name, where it comes from, and how to build it.

    Attributes:
        name: the canonical name, as the user types it (``resnet50``, ``timm/vit_tiny_patch16_224``,
            ``mypkg.mymod:build``).
        source: ``"torchvision"``, ``"timm"`` or ``"custom"``.
        input_size: the model's default square input side in pixels (224 for most; 299 for inception_v3).
        factory: internal; ``factory(num_classes, input_size)`` returns the randomly initialised network.
            Call :meth:`build` instead, which validates the arguments and seeds the initialisation.
    """

    name: str
    source: str
    input_size: int
    factory: Factory | None = field(default=None, repr=False, compare=False)

    def build(
        self, *, seed: int = 0, num_classes: int = DEFAULT_NUM_CLASSES, input_size: int | None = None
    ) -> torch.nn.Module:
        """Build the network with seeded random weights, in training mode, on the CPU.

        The initialisation runs inside ``torch.random.fork_rng`` with only the CPU generator seeded, so the
        same seed gives bit-identical weights and the caller's global RNG state (CPU and CUDA) is left as it
        was. Build on the CPU and move the model afterwards: under ``with torch.device("cuda")`` the weights
        would be drawn from the (unseeded) CUDA generator. ``with torch.device("meta")`` builds the shapes
        alone, with no memory and no arithmetic, which is how the tests cover the whole zoo quickly.

        Args:
            seed: seed of the random initialisation.
            num_classes: size of the classification head; the output is ``(batch, num_classes)`` logits.
            input_size: square input side the network must accept; None means :attr:`input_size`. Only
                networks with a fixed input size (ViTs and the like) are built differently for it; a
                convolutional network accepts any size as it is.

        Raises:
            InvalidInputError: a bad argument, or a custom builder that does not produce a usable module.
        """
        check_int("seed", seed, minimum=0)
        check_int("num_classes", num_classes, minimum=1)
        if input_size is not None:
            check_int("input_size", input_size, minimum=1)
        if self.factory is None:
            raise InvalidInputError(f"model {self.name!r} has no builder", "get specs from get_model_spec()")
        import torch

        with torch.random.fork_rng(devices=[]):
            # Seed the CPU generator only: torch.manual_seed would also reseed every CUDA generator,
            # outside what fork_rng restores. Weights are drawn on the CPU; the workload moves them.
            torch.random.default_generator.manual_seed(seed)
            return self.factory(num_classes, self.input_size if input_size is None else input_size)


class ModelSource(Protocol):
    """One place models come from. Adding a source is adding a module with one class like this."""

    name: str
    """The source's name, as in :attr:`ModelSpec.source`."""

    priority: int
    """Where the source stands when a name is looked up: the lowest asks first (a plain name is torchvision's before
    it can be a registered custom one)."""

    def names(self) -> Iterable[str]:
        """Every canonical name this source can list (``module:function`` names cannot be listed)."""
        ...

    def spec(self, name: str) -> ModelSpec | None:
        """The spec for ``name``, or None if this source does not claim the name.

        Raises:
            InvalidInputError: the name is this source's, but cannot be served (e.g. timm is missing).
        """
        ...


#: The model sources by name; each module of ``models/sources/`` registers its own.
SOURCES: Registry[ModelSource] = Registry("model source", package="clsbench.models.sources", option="--source")


def check_int(what: str, value: object, *, minimum: int) -> None:
    """Reject a non-integer (bools included) or one below ``minimum``, naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an integer >= {minimum}, got {value!r}")
