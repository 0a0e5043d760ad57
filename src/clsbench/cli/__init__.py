"""The command line: parse, call the library, print. ``main`` is the ``clsbench`` entry point.

:mod:`clsbench.cli.app` holds the group, the error handling and the core commands; every other module here adds
its commands to the group with ``register(main)``. Command modules import only :mod:`clsbench.cli.app`, never
this package's ``__init__``, so each one imports on its own.
"""

from __future__ import annotations

from clsbench.cli import (
    compare_cmds,
    data_cmds,
    diagnose_cmds,
    export_cmds,
    profile_cmds,
    report_cmds,
    scale_cmds,
    select_cmds,
    serve_cmds,
    soak_cmds,
    store_cmds,
    sweep_cmds,
)
from clsbench.cli.app import main

for _module in (store_cmds, compare_cmds, report_cmds, sweep_cmds, data_cmds, diagnose_cmds, scale_cmds, serve_cmds,
                profile_cmds, soak_cmds, export_cmds, select_cmds):
    _module.register(main)

__all__ = ["main"]
