"""The measurement and execution options, declared once for every command from the fields of
:class:`~clsbench.core.options.MeasureOptions` and :class:`~clsbench.core.options.Execution`.

A command decorated with :func:`measure_options` receives ``measure`` (a ``MeasureOptions``), ``execution`` (an
``Execution`` with the clock of the hidden ``--clock`` hook), and the plain ``device``, ``output`` and ``quiet``.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

import click

from clsbench.cli.common import fake_clock, handle_errors
from clsbench.core.options import Execution, MeasureOptions

#: Execution fields declared as options (the rest are library hooks: clock, progress, environment).
EXECUTION_FLAGS = ("isolation", "order", "overlap", "probe")


def _click_option(field: dataclasses.Field[Any], default: Any, kind: Any, help_text: str | None) -> Any:
    meta = field.metadata
    help_text = help_text or meta["help"]
    if meta.get("negative"):
        return click.option(f"{meta['flag']}/{meta['negative']}", field.name, default=default,
                            show_default=default is not None, help=help_text)
    if meta.get("choices"):
        return click.option(meta["flag"], field.name, type=click.Choice(list(meta["choices"])), default=default,
                            show_default=True, help=help_text)
    base = next((t for t in typing.get_args(kind) if t is not type(None)), kind)
    return click.option(meta["flag"], field.name, type=base, default=default, show_default=default is not None,
                        help=help_text)


def measure_options(defaults: MeasureOptions = MeasureOptions(), *, execution: Collection[str] = EXECUTION_FLAGS,
                    helps: Mapping[str, str] | None = None, fields: Collection[str] | None = None,
                    clock: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``--device``, every measurement option, the ``execution`` flags, ``--output``, ``--quiet`` and
    ``--clock`` on a command, and hand the command ``measure``, ``execution``, ``device``, ``output``, ``quiet``.

    Args:
        defaults: this command's defaults (``tune`` and ``diagnose`` repeat once, ``scale`` leaves cuDNN
            autotuning to each strategy).
        execution: which execution flags the command takes (``scale`` takes none: each launch is its own).
        helps: help texts that say more for this command, by field name (``device`` and ``output`` too).
        fields: the measurement options the command takes (None: all); the others keep ``defaults``' values
            (``serve`` takes input size, seed and compile mode: LoadGen decides how long it measures).
        clock: declare the hidden ``--clock`` hook (``serve``'s batcher runs on the wall clock).
    """
    helps = dict(helps or {})
    measure_hints = typing.get_type_hints(MeasureOptions)
    execution_hints = typing.get_type_hints(Execution)
    measure_fields = [f for f in dataclasses.fields(MeasureOptions) if "flag" in f.metadata
                      and (fields is None or f.name in fields)]
    execution_fields = [f for f in dataclasses.fields(Execution) if f.name in execution]
    options = [click.option("--device", default="auto", show_default=True,
                            help=helps.get("device", "auto, cpu, cuda or cuda:N."))]
    options += [_click_option(f, getattr(defaults, f.name), measure_hints[f.name], helps.get(f.name))
                for f in measure_fields]
    options += [_click_option(f, getattr(Execution(), f.name), execution_hints[f.name], helps.get(f.name))
                for f in execution_fields]
    options += [
        click.option("--output", "-o", help=helps.get(
            "output", "Result file (never overwritten); default under clsbench-results/.")),
        click.option("--quiet", "-q", is_flag=True, help="No progress output."),
    ]
    if clock:
        options.append(click.option("--clock", hidden=True,
                                    help="Testing hook: fake:1ms[,2ms...] replaces the wall clock."))

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            measure = dataclasses.replace(defaults, **{f.name: kwargs.pop(f.name) for f in measure_fields})
            flags = {f.name: kwargs.pop(f.name) for f in execution_fields}
            fake = fake_clock(kwargs.pop("clock")) if clock else None
            return func(*args, measure=measure, execution=Execution(**flags, clock=fake), **kwargs)

        wrapper = handle_errors(wrapper)  # a bad --clock is one error line too
        for option in reversed(options):
            wrapper = option(wrapper)
        return wrapper

    return decorate
