"""One registry pattern for every axis of variation (after timm's ``register`` / ``list`` / ``create``).

An axis (model sources, modes, workloads, inference backends, serving scenarios, data sources and pipelines,
telemetry sources, exporters, procedures) is a folder of plug-ins and one :class:`Registry`. Each plug-in module
registers its entry when imported; the registry imports every module of its folder the first time it is asked
(``package=``), so adding a plug-in is adding a file and nothing else. Tests register their own entries
(:meth:`Registry.register`) and take them out again (:meth:`Registry.unregister`).

Looking up a name that is not there raises :class:`~clsbench.errors.InvalidInputError` naming the axis and the
closest known names, which is the one line the CLI prints.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase
from typing import Generic, TypeVar, overload

from clsbench.errors import InvalidInputError

T = TypeVar("T")

#: Suggestions offered for an unknown name, and how close a name must be to be offered (difflib's default).
MAX_SUGGESTIONS = 3
SUGGESTION_CUTOFF = 0.6


class Registry(Generic[T]):
    """Named entries of one axis, in registration order.

    Args:
        kind: what one entry is, in words, for error messages ("backend", "workload").
        package: the folder whose modules register entries; imported on first use. None: entries are registered
            by whoever imports this registry.
        option: the command-line option that names an entry, for the hint ("--backend").
    """

    def __init__(self, kind: str, *, package: str | None = None, option: str | None = None) -> None:
        self.kind = kind
        self.package = package
        self.option = option
        self._entries: dict[str, T] = {}
        self._loaded = package is None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------------------ registering

    @overload
    def register(self, name: str, entry: T, *, replace: bool = False) -> T: ...

    @overload
    def register(self, name: str, entry: None = None, *, replace: bool = False) -> Callable[[T], T]: ...

    def register(self, name: str, entry: T | None = None, *, replace: bool = False) -> T | Callable[[T], T]:
        """Register ``entry`` under ``name``; without ``entry``, return a decorator that does.

        Raises:
            InvalidInputError: an empty name, or a name already taken by another entry (unless ``replace``).
        """
        if not isinstance(name, str) or not name.strip() or name != name.strip():
            raise InvalidInputError(f"invalid {self.kind} name {name!r}", "use a non-empty name without spaces")

        def add(value: T) -> T:
            old = self._entries.get(name)
            if old is not None and old is not value and not replace:
                raise InvalidInputError(f"{self.kind} {name!r} is already registered", "pick another name")
            self._entries[name] = value
            return value

        return add if entry is None else add(entry)

    def unregister(self, name: str) -> None:
        """Take an entry out (tests); an unknown name is ignored."""
        self._entries.pop(name, None)

    # -------------------------------------------------------------------------------------------- looking up

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            package = importlib.import_module(self.package)  # type: ignore[arg-type]
            for info in pkgutil.iter_modules(package.__path__):
                if not info.name.startswith("_"):
                    importlib.import_module(f"{self.package}.{info.name}")
            self._loaded = True

    def get(self, name: str) -> T:
        """The entry registered as ``name``.

        Raises:
            InvalidInputError: no such entry; the hint names the closest known names.
        """
        self._load()
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise InvalidInputError(f"unknown {self.kind} {name!r}", self.hint(name)) from None

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching a wildcard pattern (case-insensitive), in registration order."""
        self._load()
        pattern = pattern.lower()
        return [name for name in self._entries if fnmatchcase(name.lower(), pattern)]

    def items(self) -> list[tuple[str, T]]:
        self._load()
        return list(self._entries.items())

    def hint(self, name: object) -> str:
        """"did you mean ...?" for a near miss, else the list of known names."""
        known = self.names()
        close = difflib.get_close_matches(str(name), known, n=MAX_SUGGESTIONS, cutoff=SUGGESTION_CUTOFF)
        if close:
            return "did you mean: " + ", ".join(close) + "?"
        return "choose from: " + ", ".join(known) if known else f"no {self.kind} is registered"

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        self._load()
        return len(self._entries)
