"""The options commands share: the measurement and execution options, declared once for every command from the
fields of :class:`~clsbench.core.options.MeasureOptions` and :class:`~clsbench.core.options.Execution`, and the
options that name several values of one axis (:func:`list_option`), spelt the same in every command.

A command decorated with :func:`measure_options` receives ``measure`` (a ``MeasureOptions``), ``execution`` (an
``Execution`` with the clock of the hidden ``--clock`` hook), and the plain ``device``, ``output`` and ``quiet``.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import click
from click.core import ParameterSource

from clsbench.cli.common import fake_clock, handle_errors
from clsbench.core.options import Execution, MeasureOptions

#: Execution fields declared as options (the rest are library hooks: clock, progress, environment).
EXECUTION_FLAGS = ("isolation", "order", "overlap", "probe")

#: The other spellings of the options that name several values, accepted wherever the option takes several values
#: but hidden from --help. The canonical spelling is ``run``'s singular one; the others are the names ``sweep``,
#: ``tune`` and ``diagnose`` once used, kept so that existing scripts still work.
HIDDEN_ALIASES: dict[str, tuple[str, ...]] = {
    "--model": ("--models",),
    "--workload": ("--workloads",),
    "--mode": ("--modes",),
    "--batch-size": ("--batch-sizes",),
    "--backend": ("--backends",),
    "--pipeline": ("--pipelines",),
    "--num-workers": ("--workers",),
}


def list_option(flag: str, dest: str, *, help: str, default: Sequence[str] = (),
                metavar: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``flag``, an option naming several values: it may repeat and each value may be a comma list
    (``--mode fp32 --mode amp-bf16,bf16``). The command receives ``dest``: the raw values as a tuple of strings, in
    the order given (split them with :func:`clsbench.api.split_list` or the procedure's own parser), or
    ``default`` when the option is not given.

    The spellings :data:`HIDDEN_ALIASES` lists for ``flag`` work too, hidden from --help. Given together with
    ``flag``, every value counts: the canonical option's values first, then each alias's.
    """
    aliases = HIDDEN_ALIASES.get(flag, ())
    alias_dests = [f"{dest}_alias_{alias.lstrip('-').replace('-', '_')}" for alias in aliases]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = tuple(kwargs.pop(dest))
            aliased = tuple(value for name in alias_dests for value in kwargs.pop(name))
            if aliased and click.get_current_context().get_parameter_source(dest) == ParameterSource.DEFAULT:
                given = ()  # only an alias was given: its values replace the default
            return func(*args, **{dest: given + aliased}, **kwargs)

        for alias, name in zip(aliases, alias_dests, strict=True):
            wrapper = click.option(alias, name, multiple=True, hidden=True, metavar=metavar)(wrapper)
        return click.option(flag, dest, multiple=True, default=tuple(default), show_default=bool(default),
                            metavar=metavar, help=help)(wrapper)

    return decorate


def artifact_cache_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-cache`` and ``--backend-cache DIR``, the inference backends' artifact cache, spelt once for every
    command that builds artifacts (``run``, ``sweep``, ``serve``); the command receives ``no_cache`` and
    ``backend_cache``."""
    func = click.option("--backend-cache", "backend_cache", metavar="DIR",
                        help="Where backend artifacts are cached; default: $CLSBENCH_CACHE, else "
                             "~/.cache/clsbench/artifacts.")(func)
    return click.option("--no-cache", is_flag=True,
                        help="Build every backend artifact anew (the new build replaces the cached one).")(func)


def db_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--db PATH|URL``, the history store a measuring command indexes its finished result in, spelt once for every
    command that saves a result (``run``, ``sweep``, ``tune``, ``serve``, ``soak``, ``diagnose``, ``scale``,
    ``profile``); the command receives ``db`` (None: ``$CLSBENCH_DB``, else the default store) and checks it with
    ``api.check_store(db)`` before it measures."""
    return click.option("--db", metavar="PATH|URL",
                        help="The store the finished run is indexed in: a path, sqlite:///PATH or "
                             "postgresql://USER@HOST/DB (default: $CLSBENCH_DB, else the user's data directory); "
                             "checked before measuring.")(func)


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
                    opt_in: Collection[str] = (),
                    clock: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``--device``, every measurement option, the ``execution`` flags, ``--output``, ``--quiet`` and
    ``--clock`` on a command, and hand the command ``measure``, ``execution``, ``device``, ``output``, ``quiet``.

    Args:
        defaults: this command's defaults (``tune`` and ``diagnose`` repeat once, ``scale`` leaves cuDNN
            autotuning to each strategy).
        execution: which execution flags the command takes (``scale`` takes none: each launch is its own).
        helps: help texts that say more for this command, by field name (``device`` and ``output`` too).
        fields: the measurement options the command takes (None: all but the opt-in ones); the others keep
            ``defaults``' values (``serve`` takes input size, seed and compile mode: LoadGen decides how long it
            measures).
        opt_in: the opt-in options (metadata ``opt_in``) the command takes besides ``fields``: ``run``, ``sweep``
            and ``tune`` take ``protocol``, since their stop rules are the workloads' defaults under it (``soak``,
            ``diagnose``, ``scale`` and ``profile`` set their own).
        clock: declare the hidden ``--clock`` hook (``serve``'s batcher runs on the wall clock).
    """
    helps = dict(helps or {})
    measure_hints = typing.get_type_hints(MeasureOptions)
    execution_hints = typing.get_type_hints(Execution)
    measure_fields = [f for f in dataclasses.fields(MeasureOptions) if "flag" in f.metadata
                      and (f.name in opt_in or (f.name in fields if fields is not None else not f.metadata["opt_in"]))]
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
