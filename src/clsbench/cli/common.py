"""What every command shares: one ``error:`` line and exit code per failure, the one progress display, the start
of a measuring command (device, environment, output path, pre-flight warnings) and its end (saved, indexed)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

import click

from clsbench.core.vocab import Status
from clsbench.errors import EXIT_INTERNAL, EXIT_NOTHING_MEASURED, ClsbenchError, InvalidInputError


def fail(message: str, hint: str | None, code: int) -> None:
    """Print ``error: MESSAGE`` (and ``hint: HINT``) on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    if hint:
        click.echo(f"hint: {hint}", err=True)
    sys.exit(code)


def reader_went_away() -> None:
    """The reader of our output closed it (``clsbench history | head -1``): stop quietly with exit code 0.

    Python would otherwise complain again when it flushes stdout at exit, so stdout is pointed at /dev/null first
    (the way the Python documentation recommends for SIGPIPE).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file descriptor behind stdout (a test runner's capture): nothing to do
        pass
    sys.exit(0)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Turn ClsbenchError into one error line plus a hint and its exit code; a closed pipe into a quiet exit 0;
    anything else is a bug."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except BrokenPipeError:
            reader_went_away()
        except ClsbenchError as exc:
            fail(exc.message, exc.hint, exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted", None, 130)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
            if os.environ.get("CLSBENCH_DEBUG"):
                raise
            fail(f"internal error: {type(exc).__name__}: {exc}",
                 "this is a bug in clsbench; re-run with CLSBENCH_DEBUG=1 for a traceback and report it",
                 EXIT_INTERNAL)

    return wrapper


def duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``9`` -> ``9s``."""
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Progress:
    """Progress on stderr for every procedure: a live bar on a terminal, one line per repeat otherwise."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.live = sys.stderr.isatty() and not quiet
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, event: Any) -> None:
        if self.quiet:
            return
        eta = "" if event.eta_s is None else f", about {duration(event.eta_s)} left"
        if self.live:
            self._live(event, eta)
            return
        if event.kind == "repeat":
            click.echo(f"[{event.done + 1}/{event.total}] {event.cell.label()} repeat {event.repeat}/"
                       f"{event.repeats}{eta}", err=True)
        elif event.kind == "measurement" and event.measurement.status != Status.OK:
            m = event.measurement
            click.echo(f"    {m.status}: {m.reason}: {m.detail}", err=True)

    def _live(self, event: Any, eta: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if event.kind == "start":
            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("{task.fields[eta]}"), transient=True)
            self._bar.start()
            self._task = self._bar.add_task("starting", total=event.total, eta="")
        elif self._bar is not None and event.kind == "repeat":
            self._bar.update(self._task, completed=event.done, eta=eta.lstrip(", "),
                             description=f"{event.cell.label()} r{event.repeat}/{event.repeats}")
        elif self._bar is not None and event.kind == "measurement":
            self._bar.update(self._task, completed=event.done)
        elif self._bar is not None and event.kind == "finish":
            self._bar.stop()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def fake_clock(spec: str | None) -> Any:
    """The clock of the hidden ``--clock fake:1ms[,2ms...]`` testing hook (None: the wall clock)."""
    from clsbench import api

    try:
        return api.make_clock(spec) if spec else None
    except ValueError as exc:
        raise InvalidInputError(str(exc), "e.g. --clock fake:1ms") from None


def start(device: str, output: str | None, db: str | None) -> tuple[str, dict[str, Any], str]:
    """Check the history store (``--db``, else $CLSBENCH_DB), resolve the device, read the environment, choose the
    output path (refused here if it exists or cannot be written) and print the pre-flight warnings."""
    from clsbench import api

    api.check_store(db)  # a store URL that cannot work is refused before measuring, not after
    resolved = api.resolve_device(device)
    env = api.environment(resolved)
    path = output or str(api.default_output_path(resolved))
    api.check_result_output(path, "choose another --output")  # before the command announces its plan
    for line in api.preflight_warnings(env):
        click.echo(f"warning: {line}", err=True)
    return resolved, env, path


def check_cell(model: str, workload: str, device: str, mode: str | None = None, backend: str | None = None,
               batch_size: int | None = None) -> None:
    """Refuse an unknown model, workload, mode or backend (as ``run`` would plan it) before a command announces its
    plan; the procedure plans it again when it runs."""
    from clsbench import api

    api.plan_run(models=[model], workloads=[workload], modes=[mode] if mode else (), device=device,
                 backends=[backend] if backend else ("eager",), batch_sizes=[batch_size] if batch_size else ())


def index(path: str, result: Any, db: str | None = None) -> None:
    """Add the finished run to the history store. The file is saved by now: a store that cannot take it (down,
    refusing the login, newer, the connection lost) ends the command with its one line and exit code, and says
    how to add the saved file later."""
    from clsbench import api

    try:
        api.index_result(path, result, db)
    except ClsbenchError as exc:
        exc.message = f"{exc.message} (the result is saved in {path}, not in the store)"
        later = f"`clsbench store push {path}` adds it"
        exc.hint = f"{exc.hint}; then {later}" if exc.hint else later
        raise


def show_interrupted(exc: Any) -> None:
    """After Ctrl-C (``api.RunInterrupted``): the table of what finished (stdout), then the state of every
    measurement: finished, partly saved, lost in flight, not started (stderr). The error line follows."""
    from clsbench import api

    if exc.result is not None and exc.result.measurements:
        click.echo(api.result_table(exc.result), nl=False)
    for line in getattr(exc, "report", None) or []:
        click.echo(line, err=True)


#: Skip reasons the ``nothing measured`` line names at most (the table above lists every one).
NOTHING_MEASURED_REASONS = 3


def exit_if_nothing_measured(path: str, measurements: Any, what: str = "measurement") -> None:
    """End with exit 7 (``EXIT_NOTHING_MEASURED``) when a command ran to its end but measured nothing: no
    measurement, or every one skipped. The file is saved by then; the line names the skip reasons."""
    measurements = list(measurements)
    if any(m.status != Status.SKIPPED for m in measurements):
        return
    reasons = list(dict.fromkeys(f"{m.reason}: {m.detail}" if m.detail else str(m.reason) for m in measurements))
    shown = "; ".join(reasons[:NOTHING_MEASURED_REASONS]) + ("; ..." if len(reasons) > NOTHING_MEASURED_REASONS
                                                             else "")
    why = f"every {what} was skipped ({shown})" if measurements else f"no {what} was planned"
    fail(f"nothing measured: {why}; the file is saved: {path}",
         "pick what runs here (another mode, device or backend); exit code 7 says nothing was measured",
         EXIT_NOTHING_MEASURED)


def saved(path: str, result: Any, db: str | None = None) -> None:
    """Say where the file is and add it to the history store (``db``, else ``$CLSBENCH_DB``)."""
    click.echo(f"\nsaved: {path}", err=True)
    index(path, result, db)


def load_result(ref: str, db: str | None = None) -> Any:
    """A run by result-file path or by run id (``clsbench history``); an existing file wins over a run id."""
    from clsbench import api

    return api.load_result(ref, db)


def emit(text: str, output: str, *, force: bool = False) -> None:
    """Print ``text`` (``output`` is ``-``), or write it to ``output`` atomically, an existing file only with
    ``force``."""
    from clsbench import api

    if output == "-":
        click.echo(text, nl=False)
    else:
        api.write_text(output, text, force=force)
        click.echo(f"saved: {output}", err=True)
