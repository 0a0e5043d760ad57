"""The model registry: one name → one seeded, randomly initialised classification network.

A model name is resolved by asking each source in turn (:func:`sources`); the first that knows the name
returns a :class:`ModelSpec`, which builds the network. The sources and their naming rules:

- ``torchvision`` (:mod:`clsbench.models.sources.torchvision_source`): the plain name, e.g. ``resnet50``.
- ``timm`` (:mod:`clsbench.models.sources.timm_source`): ``timm/`` + timm's name, e.g. ``timm/vit_tiny_patch16_224``.
- ``custom`` (:mod:`clsbench.models.sources.custom_source`): ``package.module:function``, or a name registered with
  :func:`register_model`.

Weights are never downloaded: a benchmark measures speed, which random weights give as well as trained
ones, and the machines that run it may have no network. The random initialisation is seeded, so two runs
with the same seed measure exactly the same network.

Nothing heavy is imported here: torch, torchvision and timm are imported only when a name is resolved or a
model is built, so ``import clsbench.models`` stays cheap for the CLI and for result analysis.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Protocol, TypeVar

from clsbench.core.registry import Registry
from clsbench.errors import InvalidInputError, UnknownModelError

if TYPE_CHECKING:
    import torch

DEFAULT_NUM_CLASSES = 1000  # ImageNet-1k, the head every network in the zoo is published with
DEFAULT_INPUT_SIZE = 224  # the ImageNet crop side most networks are trained and benchmarked at
MAX_SUGGESTIONS = 5
SUGGESTION_CUTOFF = 0.6  # difflib's own default: lower lets unrelated names through

TIMM_PREFIX = "timm/"

Factory = Callable[[int, int], "torch.nn.Module"]
"""Builds the network: ``factory(num_classes, input_size)``, called inside the seeded RNG context."""

_F = TypeVar("_F", bound=Callable[..., object])


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
        _check_int("seed", seed, minimum=0)
        _check_int("num_classes", num_classes, minimum=1)
        if input_size is not None:
            _check_int("input_size", input_size, minimum=1)
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


def sources() -> tuple[ModelSource, ...]:
    """The sources, in the order a name is looked up (lowest :attr:`ModelSource.priority` first)."""
    return tuple(sorted((source for _, source in SOURCES.items()), key=lambda source: source.priority))


def list_models(pattern: str = "*", *, source: str | None = None) -> list[str]:
    """The known model names matching a wildcard pattern, sorted.

    Args:
        pattern: ``fnmatch`` pattern (``*``, ``?``, ``[seq]``) matched against the whole canonical name,
            ignoring case: ``resnet*`` lists torchvision's ResNets, ``timm/resnet*`` timm's.
        source: only this source (``torchvision``, ``timm`` or ``custom``); None means all. timm names are
            listed only when timm can be imported.

    Raises:
        InvalidInputError: an unknown source.
    """
    selected = sources()
    if source is not None:
        selected = tuple(s for s in selected if s.name == source)
        if not selected:
            known = ", ".join(s.name for s in sources())
            raise InvalidInputError(f"unknown model source {source!r}", f"choose one of: {known}")
    pattern = pattern.lower()
    return sorted(name for s in selected for name in s.names() if fnmatchcase(name.lower(), pattern))


def get_model_spec(name: str) -> ModelSpec:
    """The spec of a model, from the first source that knows its name.

    Raises:
        UnknownModelError: no source knows the name; carries the closest known names.
        InvalidInputError: an empty name, or a name a source claims but cannot serve (a custom module that
            does not import, a ``timm/`` name without timm installed).
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"invalid model name {name!r}", "see `clsbench models` for the known names")
    for source in sources():
        spec = source.spec(name)
        if spec is not None:
            return spec
    raise UnknownModelError(name, suggest_names(name))


def create_model(
    name: str, *, seed: int = 0, num_classes: int = DEFAULT_NUM_CLASSES, input_size: int | None = None
) -> torch.nn.Module:
    """Build a model by name: ``get_model_spec(name).build(...)``; see :meth:`ModelSpec.build`."""
    return get_model_spec(name).build(seed=seed, num_classes=num_classes, input_size=input_size)


def register_model(name: str, *, input_size: int = DEFAULT_INPUT_SIZE) -> Callable[[_F], _F]:
    """Decorator registering a builder ``fn(num_classes=..., **kw) -> nn.Module`` under ``name``.

    The model then resolves like any other, with source ``custom``. A builder that takes an ``input_size``
    parameter is passed the requested input side. Registering the same function again (a module reloaded)
    is allowed; taking a name another model already has is not, since one name must mean one network.

    Args:
        name: the name to register: no ``:`` (that is ``module:function`` syntax), no ``timm/`` prefix.
        input_size: the model's default square input side.

    Raises:
        InvalidInputError: a malformed name or input size, or a name already taken.
    """
    from clsbench.models.sources import custom_source

    if not isinstance(name, str) or not name or name != name.strip() or any(c.isspace() for c in name):
        raise InvalidInputError(f"invalid model name {name!r}", "use a non-empty name without spaces")
    if ":" in name or name.startswith(TIMM_PREFIX):
        raise InvalidInputError(
            f"cannot register {name!r}: names with ':' or the {TIMM_PREFIX!r} prefix are reserved",
            "pick a plain name such as 'my_resnet'",
        )
    _check_int("input_size", input_size, minimum=1)

    def decorator(fn: _F) -> _F:
        if not custom_source.is_registered_as(name, fn):
            for source in sources():
                if source.spec(name) is not None:
                    raise InvalidInputError(
                        f"cannot register {name!r}: the name is already a {source.name} model",
                        "pick another name",
                    )
        custom_source.add_registered(name, fn, input_size)
        return fn

    return decorator


def suggest_names(name: str) -> list[str]:
    """Up to :data:`MAX_SUGGESTIONS` known names closest to ``name``, best first.

    The same name in other case (``ResNet50``) and the ``timm/`` form of a bare timm name
    (``vit_tiny_patch16_224``) come first; the rest are difflib's closest matches over every listed name,
    ignoring case.
    """
    by_lower: dict[str, str] = {}
    for source in sources():
        for known in source.names():
            by_lower.setdefault(known.lower(), known)
    # The same name in other case, then its timm/ form, then whatever difflib finds closest.
    found = [by_lower[key] for key in (name.lower(), (TIMM_PREFIX + name).lower()) if key in by_lower]
    matches = difflib.get_close_matches(name.lower(), by_lower, n=MAX_SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
    for match in matches:
        if by_lower[match] not in found:
            found.append(by_lower[match])
    return found[:MAX_SUGGESTIONS]


def _check_int(what: str, value: object, *, minimum: int) -> None:
    """Reject a non-integer (bools included) or one below ``minimum``, naming the argument."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an integer >= {minimum}, got {value!r}")
