"""Serving scenarios as plug-ins: one file per scenario, each registering itself in :data:`SCENARIOS` on import.

The registry imports every module of this folder the first time it is asked, so adding a scenario is adding a
file here that calls ``SCENARIOS.register(name, scenario)`` with an object of the shape of
:class:`clsbench.serving.scenario.Scenario`. Nothing here imports torch or LoadGen.
"""

from __future__ import annotations

from clsbench.core.registry import Registry
from clsbench.serving.scenario import Scenario

SCENARIOS: Registry[Scenario] = Registry("scenario", package="clsbench.scenarios", option="--scenario")


def ordered(names: list[str] | tuple[str, ...]) -> list[str]:
    """The named scenarios in running order (offline before server, so the search can start from offline);
    unknown names raise InvalidInputError with the closest known ones."""
    entries = [(SCENARIOS.get(name).order, i, name) for i, name in enumerate(dict.fromkeys(names))]
    return [name for _, _, name in sorted(entries)]
