"""The model registry: one name → one seeded, randomly initialised classification network.

A model name is resolved by asking each source in turn (:func:`sources`); the first that knows the name
returns a :class:`~clsbench.models.spec.ModelSpec`, which builds the network. The sources and their naming rules:

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
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, TypeVar

from clsbench.errors import InvalidInputError, UnknownModelError
from clsbench.models.spec import (
    DEFAULT_INPUT_SIZE,
    DEFAULT_NUM_CLASSES,
    SOURCES,
    TIMM_PREFIX,
    ModelSource,
    ModelSpec,
    check_int,
)

if TYPE_CHECKING:
    import torch

MAX_SUGGESTIONS = 5
SUGGESTION_CUTOFF = 0.6  # difflib's own default: lower lets unrelated names through

_F = TypeVar("_F", bound=Callable[..., object])


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
    check_int("input_size", input_size, minimum=1)

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
