"""``eager``: the prepared PyTorch module itself, today's behaviour and the default. Nothing is built or loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clsbench.backends.base import BACKENDS, BackendRequest, Loaded, torch_versions


class Eager:
    name = "eager"
    builds_artifact = False
    build_imports = ()

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return None  # whatever the mode allows (the mode itself refuses what the device cannot run)

    def versions(self) -> dict[str, str]:
        return torch_versions()

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("eager",)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        raise NotImplementedError("eager builds nothing")

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        raise NotImplementedError("eager loads nothing")


BACKENDS.register("eager", Eager())
