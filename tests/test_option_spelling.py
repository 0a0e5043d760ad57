"""One spelling per option across commands: ``run``'s singular ``--model``, ``--workload``, ``--mode``,
``--batch-size``, ``--backend`` (and ``diagnose``'s ``--pipeline`` and ``--num-workers``, as ``run`` spells its
real-data options), each repeatable and taking comma lists where a command takes several values.

The plural spellings ``sweep``, ``tune`` and ``diagnose`` once took still work, hidden from --help. What reaches the
library is compared, not printed output: each command's library call is replaced by one that records its arguments
and stops the command with an input error, so nothing is measured and the environment is never read.
"""

from __future__ import annotations

import re
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from clsbench import api
from clsbench.cli import main
from clsbench.cli.options import HIDDEN_ALIASES
from clsbench.core.options import reproduce_command
from clsbench.errors import InvalidInputError

TINY = "clsbench_testmodels:tiny"

#: The options of each command that take several values, by canonical spelling: each has its hidden aliases.
LIST_OPTIONS = {
    "run": {"--model", "--workload", "--mode", "--batch-size", "--backend"},
    "sweep": {"--batch-size"},
    "tune": {"--mode", "--batch-size", "--backend"},
    "serve": {"--mode", "--backend"},
    "diagnose": {"--num-workers", "--pipeline"},
}

#: Where each command hands its parsed options to the library (all through :mod:`clsbench.api`: the settings object
#: a command builds, or the one api function it calls with it): (module, function, the arguments it takes first).
TARGETS = {
    "run": ("clsbench.api", "plan_run", ["run", "--device", "cpu"]),
    "sweep": ("clsbench.api", "sweep", ["sweep", "--model", TINY, "--device", "cpu"]),
    "tune": ("clsbench.api", "TuneSettings", ["tune", "--model", TINY, "--device", "cpu"]),
    "serve": ("clsbench.api", "ServeSettings.with_options", ["serve", "--model", TINY, "--device", "cpu"]),
    "diagnose": ("clsbench.api", "diagnose", ["diagnose", TINY, "--data", "images", "--device", "cpu"]),
}

#: (command, canonical flag, value, the library argument it becomes: a keyword, a position, or ``settings.NAME``:
#: the field of the settings object the api function takes first).
CASES = [
    ("run", "--model", "m1,m2", "models"),
    ("run", "--workload", "train,infer-latency", "workloads"),
    ("run", "--mode", "fp32,bf16", "modes"),
    ("run", "--batch-size", "2,4", "batch_sizes"),
    ("run", "--backend", "eager,export", "backends"),
    ("sweep", "--batch-size", "1,2,4", "settings.batch_sizes"),
    ("tune", "--mode", "fp32,bf16", "modes"),
    ("tune", "--batch-size", "4,8", "batch_sizes"),
    ("tune", "--backend", "export,onnxruntime", "backends"),
    ("serve", "--mode", "fp32,bf16", "modes"),
    ("diagnose", "--num-workers", "0,2", "settings.workers"),
    ("diagnose", "--pipeline", "cpu", "settings.pipelines"),
]


class Captured(InvalidInputError):
    """Raised by a replaced library call: the command stops there with exit code 2."""


@pytest.fixture
def capture(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``capture(command, *args)``: invoke the command and return (args, kwargs) of its library call."""
    def invoke(command: str, *args: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # Each call replaces only its own command's library call: an earlier call's replacement (run's plan_run)
        # would otherwise catch a later command's early check (sweep checks its cell through plan_run).
        monkeypatch.undo()
        monkeypatch.setattr(api, "environment", lambda device: {})  # reading the machine takes seconds: not needed
        module_name, function, base = TARGETS[command]
        calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

        def record(*a: Any, **kw: Any) -> None:
            calls.append((a, kw))
            raise Captured("captured")

        owner: Any = __import__(module_name, fromlist=["_"])
        attribute = function
        if "." in function:
            owner_name, attribute = function.split(".")
            owner = getattr(owner, owner_name)
            monkeypatch.setattr(owner, attribute, classmethod(lambda cls, *a, **kw: record(*a, **kw)))
        else:
            monkeypatch.setattr(owner, attribute, record)
        result = CliRunner().invoke(main, [*base, *args])
        assert result.exit_code == 2 and "captured" in result.stderr, result.output
        return calls[0]

    return invoke


def argument(call: tuple[tuple[Any, ...], dict[str, Any]], key: str | int) -> Any:
    if isinstance(key, int):
        return call[0][key]
    if key.startswith("settings."):
        return getattr(call[0][0], key.removeprefix("settings."))
    return call[1][key]


def flag_in(flag: str, text: str) -> bool:
    """Whether ``flag`` appears as a whole option name (``--mode`` is not in ``--modes`` or ``--model``)."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def help_of(*command: str) -> str:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("command", sorted(LIST_OPTIONS))
def test_help_shows_the_canonical_spelling_and_hides_the_old_ones(command: str) -> None:
    text = help_of(command)
    for flag in LIST_OPTIONS[command]:
        assert flag_in(flag, text), f"{command} --help lacks {flag}"
        for alias in HIDDEN_ALIASES[flag]:
            assert not flag_in(alias, text), f"{command} --help shows the hidden alias {alias}"


def test_every_hidden_alias_is_declared_where_the_table_says() -> None:
    """The aliases the commands declare are exactly those of the options listed above (nothing vacuous)."""
    ctx = click.Context(main)
    found: dict[str, set[str]] = {}
    for name in LIST_OPTIONS:
        command = main.get_command(ctx, name)
        assert command is not None
        hidden = {opt for param in command.params if isinstance(param, click.Option) and param.hidden
                  for opt in param.opts}
        found[name] = {flag for flag, aliases in HIDDEN_ALIASES.items() if set(aliases) <= hidden}
    assert found == LIST_OPTIONS


@pytest.mark.parametrize(("command", "flag", "value", "key"), CASES,
                         ids=[f"{c[0]}{c[1]}={c[2]}" for c in CASES])
def test_an_old_spelling_reaches_the_library_as_the_canonical_one_does(capture: Any, command: str, flag: str,
                                                                       value: str, key: str | int) -> None:
    canonical = argument(capture(command, flag, value), key)
    assert canonical != argument(capture(command), key)  # the option reached the library
    for alias in HIDDEN_ALIASES[flag]:
        assert argument(capture(command, alias, value), key) == canonical, alias


@pytest.mark.parametrize("command", ["run", "tune", "serve"])
def test_repeated_and_comma_separated_values_are_the_same(capture: Any, command: str) -> None:
    key = "modes"
    assert (argument(capture(command, "--mode", "fp32", "--mode", "bf16"), key)
            == argument(capture(command, "--mode", "fp32,bf16"), key))


def test_both_spellings_together_combine_their_values(capture: Any) -> None:
    """The documented rule: every value counts, the canonical option's first."""
    assert capture("run", "--batch-sizes", "4", "--batch-size", "2")[1]["batch_sizes"] == [2, 4]
    assert capture("sweep", "--batch-size", "8", "--batch-sizes", "1,2")[0][0].batch_sizes == [1, 2, 8]
    assert capture("tune", "--modes", "bf16", "--mode", "fp32")[1]["modes"] == ["fp32", "bf16"]
    assert capture("diagnose", "--workers", "4", "--num-workers", "0")[0][0].workers == [0, 4]


def test_sweep_batch_size_auto_is_the_default_under_either_spelling(capture: Any) -> None:
    assert capture("sweep")[0][0].batch_sizes == "auto"
    assert capture("sweep", "--batch-size", "auto")[0][0].batch_sizes == "auto"
    assert capture("sweep", "--batch-sizes", "auto")[0][0].batch_sizes == "auto"
    assert capture("sweep", "--batch-sizes", "1,2")[0][0].batch_sizes == [1, 2]  # an alias alone replaces the default


def assert_one_error_line(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in result.stderr, result.stderr


@pytest.mark.parametrize("args", [["--batch-size", "auto", "--batch-size", "4"],
                                  ["--batch-size", "auto,4"],
                                  ["--batch-size", "4", "--batch-sizes", "auto"]])
def test_auto_mixed_with_sizes_is_one_error_line(args: list[str]) -> None:
    result = CliRunner().invoke(main, ["sweep", "--model", TINY, "--device", "cpu", *args])
    assert_one_error_line(result, "auto goes alone", "--batch-size auto")


@pytest.mark.parametrize(("args", "words"), [
    (["tune", "--model", TINY, "--device", "cpu", "--modes", ","], ["--mode names no mode", "e.g. --mode "]),
    (["tune", "--model", TINY, "--device", "cpu", "--backends", ","], ["--backend names no backend"]),
    (["tune", "--model", TINY, "--device", "cpu", "--batch-sizes", "auto"], ["e.g. --batch-size 32"]),
    (["sweep", "--model", TINY, "--device", "cpu", "--batch-sizes", ""], ["e.g. --batch-size 1,2,4,8"]),
    (["diagnose", TINY, "--data", "images", "--device", "cpu", "--workers", "x"], ["e.g. --num-workers 0,4,8"]),
])
def test_error_hints_name_the_canonical_spelling(args: list[str], words: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert_one_error_line(result, *words)
    for aliases in HIDDEN_ALIASES.values():
        for alias in aliases:
            assert not flag_in(alias, result.stderr), result.stderr


def test_the_reproduce_line_uses_the_canonical_spelling() -> None:
    plan = api.plan_run(models=[TINY], workloads=["infer-latency"], modes=["fp32"], batch_sizes=[2],
                        device="cpu", environment={})
    line = reproduce_command(plan, plan.cells[0])
    for flag in ("--model", "--workload", "--mode", "--batch-size"):
        assert flag_in(flag, line), line
    for aliases in HIDDEN_ALIASES.values():
        for alias in aliases:
            assert not flag_in(alias, line), line
