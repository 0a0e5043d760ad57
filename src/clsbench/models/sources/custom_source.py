"""Your own networks: ``package.module:function`` names, and names registered with ``@register_model``.

Naming rules:

- ``package.module:function`` (``function`` may be dotted, e.g. ``mymod:Net.build``): the module is imported
  and the callable called. It is passed ``num_classes=`` when it takes that parameter (by name or through
  ``**kwargs``) and ``input_size=`` when it names that parameter; it must return a ``torch.nn.Module``.
  Its default input size is the callable's ``input_size`` attribute if it has one, else 224. A module that
  fails to import, a missing or non-callable attribute, or a builder that returns something other than a
  module is an :class:`~clsbench.errors.InvalidInputError` naming the problem in one line. These names
  cannot be listed: only the ones you type exist.
- A plain name registered with :func:`clsbench.models.register_model` (timm-style registry), called the
  same way, with the input size given at registration. These are listed.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from clsbench.errors import InvalidInputError
from clsbench.models.spec import DEFAULT_INPUT_SIZE, SOURCES, ModelSpec

if TYPE_CHECKING:
    import torch

SOURCE = "custom"
NAME_HINT = "write it as package.module:function, with the module installed or on PYTHONPATH"


@dataclass(frozen=True)
class _Registration:
    builder: Callable[..., Any]
    input_size: int


_REGISTERED: dict[str, _Registration] = {}


def add_registered(name: str, builder: Callable[..., Any], input_size: int) -> None:
    """Record a registration; :func:`clsbench.models.register_model` validates it first."""
    _REGISTERED[name] = _Registration(builder, input_size)


def is_registered_as(name: str, builder: Callable[..., Any]) -> bool:
    """Whether ``name`` is registered to this very function, or to one of the same module and qualified name
    (the same definition, with its module reloaded)."""
    known = _REGISTERED.get(name)
    if known is None:
        return False
    return known.builder is builder or _qualified_name(known.builder) == _qualified_name(builder)


class CustomSource:
    """The :class:`~clsbench.models.spec.ModelSource` of registered and ``module:function`` names."""

    name = SOURCE
    priority = 30

    def names(self) -> list[str]:
        """The registered names, sorted (``module:function`` names exist only when typed)."""
        return sorted(_REGISTERED)

    def spec(self, name: str) -> ModelSpec | None:
        """The spec for a registered name or a ``module:function`` name; None for any other name.

        Raises:
            InvalidInputError: a malformed ``module:function`` name, a module that fails to import, or an
                attribute that is missing or not callable.
        """
        registration = _REGISTERED.get(name)
        if registration is not None:
            return _spec(name, registration.builder, registration.input_size)
        if ":" not in name:
            return None
        builder = _resolve(name)
        input_size = getattr(builder, "input_size", DEFAULT_INPUT_SIZE)
        if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 1:
            raise InvalidInputError(f"model {name!r} has an invalid input_size attribute {input_size!r}",
                                    "set it to a positive integer, the square input side in pixels")
        return _spec(name, builder, input_size)


def _spec(name: str, builder: Callable[..., Any], input_size: int) -> ModelSpec:
    return ModelSpec(name=name, source=SOURCE, input_size=input_size,
                     factory=functools.partial(_build, name, builder))


def _resolve(name: str) -> Callable[..., Any]:
    """Import ``module`` and return its callable ``attr`` for a ``module:attr`` name."""
    module_name, _, attr = name.partition(":")
    if not _is_dotted_identifier(module_name) or not _is_dotted_identifier(attr):
        raise InvalidInputError(f"malformed model name {name!r}", NAME_HINT)
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure in the user's module is bad input, said in one line
        detail = str(exc).splitlines()[0] if str(exc) else ""
        message = f"cannot import module {module_name!r} for model {name!r}: {type(exc).__name__}: {detail}"
        raise InvalidInputError(message, NAME_HINT) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise InvalidInputError(f"module {module_name!r} has no attribute {attr!r}", NAME_HINT) from None
    if not callable(obj):
        raise InvalidInputError(f"{name!r} is a {type(obj).__name__}, not a callable that builds a model",
                                "point it at a function or class returning a torch.nn.Module")
    return obj


def _build(name: str, builder: Callable[..., Any], num_classes: int, input_size: int) -> torch.nn.Module:
    import torch

    params = _parameters(builder)
    kwargs: dict[str, Any] = {}
    if params is None or "num_classes" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["num_classes"] = num_classes
    else:
        # Building anyway would measure a network whose head may not have the classes the labels are drawn from
        # (training then fails with "Target 845 is out of bounds").
        raise InvalidInputError(
            f"model {name!r} takes no num_classes, so clsbench cannot give it {num_classes} classes",
            "add a num_classes=1000 parameter to its builder and size the head with it (docs/run.md: your own model)",
        )
    if params is not None and "input_size" in params:
        kwargs["input_size"] = input_size
    model = builder(**kwargs)
    if not isinstance(model, torch.nn.Module):
        raise InvalidInputError(f"model {name!r} returned a {type(model).__name__}, not a torch.nn.Module",
                                "make its builder return the network")
    return model


def _parameters(builder: Callable[..., Any]) -> dict[str, inspect.Parameter] | None:
    """The builder's parameters by name, or None when its signature cannot be read (some builtins)."""
    try:
        return dict(inspect.signature(builder).parameters)
    except (TypeError, ValueError):
        return None


def _is_dotted_identifier(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _qualified_name(obj: object) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', repr(obj))}"


SOURCES.register(SOURCE, CustomSource())
