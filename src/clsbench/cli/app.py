"""The command line: parse, call the library, print. No measurement logic lives here.

Exit codes (also in docs/exit-codes.md): 0 success; 1 internal error (a bug); 2 bad input (unknown name, bad value,
missing device); 3 result-file problem (unreadable, foreign, newer schema, output exists or not writable);
4 the run finished but some measurement failed; 5 `compare --fail-if-slower` found a significant slowdown beyond
the threshold; 130 interrupted (what finished is saved).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from clsbench.cli.common import (
    Progress,
    emit,
    exit_if_nothing_measured,
    fail,
    handle_errors,
    reader_went_away,
    saved,
    show_interrupted,
)
from clsbench.cli.data_options import data_options
from clsbench.cli.options import artifact_cache_options, db_option, list_option, measure_options
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.vocab import Status
from clsbench.errors import EXIT_MEASUREMENT_FAILED, InvalidInputError
from clsbench.version import __version__

if TYPE_CHECKING:
    from clsbench.core.suites import Suite


def _terminated(signum: int, frame: Any) -> None:
    """SIGTERM (a job scheduler, ``kill``, a container stopping) ends a command the way Ctrl-C does: what finished is
    saved, the table of it printed, and the resume line said. A process forked from the command (a pool worker) that
    inherited this handler ends as SIGTERM would end it, quietly."""
    if os.getpid() != _COMMAND_PID[0]:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise KeyboardInterrupt


#: The process that installed :func:`_terminated` (the command itself), set when the group starts.
_COMMAND_PID = [0]


class _Group(click.Group):
    """Click's own usage errors get the same one-line ``error:`` + ``hint:`` form as clsbench's."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        if threading.current_thread() is threading.main_thread():
            _COMMAND_PID[0] = os.getpid()
            signal.signal(signal.SIGTERM, _terminated)
        try:
            return super().main(*args, **kwargs)
        except BrokenPipeError:
            reader_went_away()
        except click.UsageError as exc:
            command = exc.ctx.command_path if exc.ctx is not None else "clsbench"
            fail(exc.format_message(), f"see `{command} --help`", 2)
        except click.exceptions.Abort:
            fail("interrupted", None, 130)
        except click.ClickException as exc:
            fail(exc.format_message(), None, exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="clsbench")
def main() -> None:
    """clsbench: what a GPU really delivers on image-classification networks."""


def _ints(values: list[str], option: str) -> list[int]:
    out = []
    for value in values:
        try:
            out.append(int(value))
        except ValueError:
            raise InvalidInputError(f"{option} {value!r} is not a whole number", f"e.g. {option} 32") from None
    return out


@main.command()
@click.option("--suite", help="Named suite: seed (GPU default) or quick (CPU default); or a suite file (FILE.yaml). "
                             "`clsbench suites` lists them and shows how to write one.")
@list_option("--model", "models", help="Model name(s); repeat or comma-separate. See `models`.")
@list_option("--workload", "workloads", help="infer-latency, infer-throughput, train.")
@list_option("--mode", "modes",
             help="e.g. fp32, tf32, amp-bf16, amp-fp16+cl, bf16+cl+compile, fp8+compile (fp8: torchao float8 Linear "
                  "layers, GPUs of compute capability 8.9+; fast only with +compile).")
@list_option("--batch-size", "batch_sizes", help="Batch size(s); default per workload.")
@list_option("--backend", "backends",
             help="Inference backend(s); repeat or comma-separate: eager (default), torchscript (legacy: "
                  "deprecated upstream), export (AOTInductor), export-frozen, onnxruntime, tensorrt. Inference "
                  "workloads only.")
@artifact_cache_options
@click.option("--resume", "resume_path",
              help="Finish an interrupted run: measure only what FILE lacks, with its settings.")
@click.option("--retry-failed", is_flag=True, help="With --resume: measure the cells that failed again too.")
@click.option("--profile", "with_profile", is_flag=True,
              help="After the first repeat's timed region, profile a few steps (torch.profiler) and attach where "
                   "the step's time goes to the measurement (`clsbench profile` writes the trace too).")
@db_option
@measure_options(opt_in=("protocol",))
@data_options
@handle_errors
def run(suite: str | None, models: tuple[str, ...], workloads: tuple[str, ...], modes: tuple[str, ...],
        batch_sizes: tuple[str, ...], backends: tuple[str, ...], no_cache: bool, backend_cache: str | None,
        resume_path: str | None, retry_failed: bool, with_profile: bool, db: str | None, measure: MeasureOptions,
        execution: Execution, device: str, output: str | None, quiet: bool, **data_opts: Any) -> None:
    """Measure models x workloads x modes x batch sizes x backends; save a result file and print the table."""
    from clsbench import api
    from clsbench.cli.data_options import data_settings, given

    api.check_store(db)

    if resume_path and given(data_opts):
        raise click.UsageError(f"--resume uses the data settings stored in the file; drop {given(data_opts)[0]}")
    if retry_failed and not resume_path:
        raise click.UsageError("--retry-failed goes with --resume FILE")
    stored_flags = [flag for flag, value in (("--backend", backends), ("--no-cache", no_cache),
                                             ("--backend-cache", backend_cache), ("--profile", with_profile)) if value]
    if resume_path and stored_flags:
        raise click.UsageError(f"--resume uses the backend and profile settings stored in the file; drop "
                               f"{stored_flags[0]}")
    check_resume_options(resume_path, output)
    data = None if resume_path else data_settings(**data_opts)
    progress = Progress(quiet)
    execution = dataclasses.replace(execution, progress=progress)
    try:
        if resume_path:
            path = resume_path
            if nothing_to_resume(path, retry_failed):
                return
            click.echo(f"resuming {path}", err=True)
            result = api.resume(path, execution=execution, retry_failed=retry_failed)
        else:
            resolved = api.resolve_device(device)
            env = api.environment(resolved)
            plan = api.plan_run(
                suite=suite, models=api.split_list(models, "--model"),
                workloads=api.split_list(workloads, "--workload"), modes=api.split_list(modes, "--mode"),
                batch_sizes=_ints(api.split_list(batch_sizes, "--batch-size"), "--batch-size"),
                device=resolved, options=measure, execution=execution, environment=env, data=data,
                backends=api.split_list(backends, "--backend") or ("eager",), no_cache=no_cache,
                cache_dir=backend_cache, profile=api.ProfileSettings() if with_profile else None,
            )
            env = api.data_preflight(env, plan.cells)
            path = output or str(api.default_output_path(resolved))
            api.check_result_output(path)  # every argument is checked before the plan is announced
            for line in api.preflight_warnings(env) + api.dataset_warnings(plan.cells):
                click.echo(f"warning: {line}", err=True)
            if not quiet:
                click.echo(f"clsbench {__version__}: {len(plan.cells)} measurement(s) x {plan.repeats} repeat(s) "
                           f"on {resolved}; results -> {path}", err=True)
            result = api.run(plan, path, execution=dataclasses.replace(execution, env=env))
    except api.RunInterrupted as exc:
        progress.close()
        show_interrupted(exc)  # what finished, what was lost, then the one-line error with the resume command
        raise
    finally:
        progress.close()
    click.echo(api.result_table(result), nl=False)
    if result.settings.get("profile"):
        click.echo("\n" + api.profile_section(result), nl=False)
    saved(path, result, db)
    if any(m.status == Status.FAILED for m in result.measurements):
        sys.exit(EXIT_MEASUREMENT_FAILED)
    exit_if_nothing_measured(path, result.measurements)


#: What ``run --resume`` takes besides the file: how to show progress, where the repeats run (debugging and
#: tests) and the store the finished result is indexed in; never what is measured, which the file holds.
RESUME_OPTIONS = frozenset({"resume_path", "retry_failed", "quiet", "isolation", "clock", "output", "db"})


def check_resume_options(path: str | None, output: str | None) -> None:
    """``run --resume FILE`` measures what FILE lacks with the settings stored in it: any option that says what or
    how to measure (a model, mode, workload, batch size, suite, device, stop rule, repeats, order...) would be
    ignored, so it is one error line instead; and it writes to FILE, so ``--output`` is one too. Nothing to check
    without ``--resume``."""
    if not path:
        return
    if output:
        raise click.UsageError("--resume writes to the file it resumes; drop --output")
    ctx = click.get_current_context()
    given = [param for param in ctx.command.params if param.name not in RESUME_OPTIONS
             and ctx.get_parameter_source(param.name or "") in (ParameterSource.COMMANDLINE,
                                                              ParameterSource.ENVIRONMENT)]
    if given:
        flags = ", ".join("/".join(param.opts + param.secondary_opts) for param in given)
        raise InvalidInputError(
            f"--resume measures what {path} lacks with the settings stored in it (models, workloads, modes, batch "
            f"sizes, device, stop rules, repeats, order), so {flags} would be ignored",
            f"drop {flags}; to measure something else, start a new run with another -o")


def nothing_to_resume(path: str, retry_failed: bool) -> bool:
    """Say so, and return True, when every measurement ``path`` plans is in it (``run --resume`` then changes
    nothing and exits as the run that wrote it did: 0, 4 when some of them failed, 7 when every one was skipped)."""
    from clsbench import api

    counts = api.resume_counts(path, retry_failed=retry_failed)
    if counts is None or counts[0] > 0:
        return False
    _, finished, failed = counts
    note = f"; {failed} failed (--retry-failed measures them again)" if failed else ""
    click.echo(f"nothing to resume: all {finished} measurement(s) of {path} are finished{note}; "
               f"`clsbench show {path}` prints them", err=True)
    if failed:
        sys.exit(EXIT_MEASUREMENT_FAILED)
    exit_if_nothing_measured(path, api.load_result(path).measurements)  # a file of skips only: exit 7, as the run
    return True


@main.command()
@click.argument("files", nargs=-1, required=True)
@click.option("--format", "fmt", default="table", show_default=True,
              help="table: for people; json: the result file(s) as stored; csv, markdown: one flat row per "
                   "measurement, units in the column names.")
@click.option("--output", "-o", default="-", show_default=True,
              help="Write here instead of stdout ('-'); an existing file is not overwritten without --force.")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it exists.")
@click.option("--db", metavar="PATH|URL",
              help="The store for run ids: a path, sqlite:///PATH or postgresql://USER@HOST/DB (default: "
                   "$CLSBENCH_DB, else the user's data directory).")
@handle_errors
def show(files: tuple[str, ...], fmt: str, output: str, force: bool, db: str | None) -> None:
    """Print the results of FILE(S) (result files or run ids from `clsbench history`), from the files alone."""
    from clsbench import api

    if output != "-":
        api.check_output(output, force=force)
    emit(api.show(files, fmt=fmt, db=db), output, force=force)


@main.command()
@click.argument("pattern", default="*")
@click.option("--long", "-l", "long_", is_flag=True, help="Also show each model's source and input size.")
@handle_errors
def models(pattern: str, long_: bool) -> None:
    """List the models that can be benchmarked (wildcards allowed: 'resnet*', 'timm/vit_*')."""
    from clsbench import api

    found = api.models(pattern, details=long_)
    if long_:
        from clsbench.core.text_table import text_table

        rows = [(name, source, str(input_size)) for name, source, input_size in found]
        for line in text_table(("model", "source", "input px"), rows, right={2}):
            click.echo(line)
    else:
        for name, _, _ in found:
            click.echo(name)
    click.echo(f"{len(found)} model(s)", err=True)


@main.command()
@click.argument("files", nargs=-1)
@handle_errors
def suites(files: tuple[str, ...]) -> None:
    """List the named suites and how to write your own; with FILE(S), check each suite file and show what it
    measures."""
    from clsbench import api

    if files:
        for suite in api.suites(files):
            for line in suite_lines(suite):
                click.echo(line)
        return
    for suite in api.suites():
        for line in suite_lines(suite):
            click.echo(line)
    click.echo("Your own suite: a YAML file with these keys, measured by `clsbench run --suite FILE.yaml` "
               "(check it with `clsbench suites FILE.yaml`):\n")
    for line in api.SUITE_FILE_EXAMPLE.splitlines():
        click.echo(f"    {line}")


def suite_lines(suite: Suite) -> list[str]:
    """What ``clsbench suites`` prints of one suite."""
    sizes = ", ".join(f"{workload} bs{size}" for workload, size in suite.batch_sizes.items())
    lines = [suite.label + (f": {suite.description}" if suite.description else "")]
    lines += [f"    models     {', '.join(suite.models)}", f"    workloads  {sizes}",
              f"    modes      {', '.join(suite.modes)}", ""]
    return lines


@main.command()
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--json", "as_json", is_flag=True, help="The environment as JSON, exactly as recorded in results.")
@handle_errors
def env(device: str, as_json: bool) -> None:
    """Show the environment every result records on this machine."""
    from clsbench import api

    facts, rows = api.describe_environment(device)
    if as_json:
        click.echo(json.dumps(facts, indent=1, sort_keys=True))
        return
    width = max((len(label) for label, _ in rows), default=0)
    for label, value in rows:
        click.echo(f"{label:<{width}}  {value}")
    click.echo("")
    click.echo("pre-flight checks (read-only; clsbench never changes clocks, limits or modes):")
    for check in facts.get("preflight") or []:
        click.echo(f"  {check['status']:<11} {check['check']:<16} {check['message']}")


@main.command()
@click.option("--device", default="cuda", show_default=True, help="cuda or cuda:N.")
@click.option("--output", "-o", type=click.Path(dir_okay=False),
              help="Also write the probe as JSON (never overwritten).")
@handle_errors
def probe(device: str, output: str | None) -> None:
    """Measure this GPU's ceilings: dense matmul TFLOP/s per dtype and device-to-device copy bandwidth."""
    from clsbench import api

    facts = api.probe(device, output)  # with --output, also written there as JSON
    for key, value in facts["matmul_flop_s"].items():
        click.echo(f"matmul {key:<5} {value / 1e12:8.1f} TFLOP/s" if value else f"matmul {key:<5} unavailable")
    click.echo(f"copy        {facts['copy_bytes_s'] / 1e12:8.2f} TB/s (read + write)")

