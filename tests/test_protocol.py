"""Measurement protocols (issue 35): named sets of stop-rule defaults, recorded in the result, honoured by the
reproduce line, refused by ``compare`` when mixed; and Inductor's caches reused across the repeats of one cell."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from clsbench import api
from clsbench.analysis.compare import ALLOW_PROTOCOL_MIX_FLAG, check_protocols, compare
from clsbench.analysis.stats import MIN_SAMPLES
from clsbench.cli import main
from clsbench.core.options import Execution, MeasureOptions, profile_command, reproduce_command
from clsbench.core.plan import (
    DEFAULT_PROTOCOL,
    PRE_PROTOCOL_LABEL,
    PROTOCOLS,
    THOROUGH_PROTOCOL,
    Cell,
    RunPlan,
    default_stop_rules,
    get_protocol,
    protocol_of,
)
from clsbench.engine.compile_cache import CACHE_DIR_VARIABLE, compiles, inductor_cache
from clsbench.engine.runner import compile_cache_dirs
from clsbench.errors import InvalidInputError
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult
from test_compare import environment, invoke, latency_records, measurement, result, throughput_records

TINY = "clsbench_testmodels:tiny"
LATENCY = "infer-latency"


# ----------------------------------------------------------------------------------------------------------
# The table


def test_default_gpu_latency_rule_is_300_requests_and_one_second_thorough_restores_1000() -> None:
    default, thorough = default_stop_rules("cuda"), default_stop_rules("cuda:1", THOROUGH_PROTOCOL)
    assert (default[LATENCY].min_iterations, default[LATENCY].min_seconds) == (300, 1.0)
    assert (thorough[LATENCY].min_iterations, thorough[LATENCY].min_seconds) == (1000, 1.0)
    # Everything else is today's long default under both.
    assert dataclasses.replace(default[LATENCY], min_iterations=1000) == thorough[LATENCY]
    for workload in ("infer-throughput", "train"):
        assert default[workload] == thorough[workload]
    assert default_stop_rules("cpu") == default_stop_rules("cpu", THOROUGH_PROTOCOL)


def test_300_requests_support_a_p99_in_every_repeat_and_withhold_the_p999() -> None:
    requests = default_stop_rules("cuda")[LATENCY].min_iterations
    assert MIN_SAMPLES["p99"] <= requests < MIN_SAMPLES["p999"]
    assert default_stop_rules("cuda", THOROUGH_PROTOCOL)[LATENCY].min_iterations >= MIN_SAMPLES["p999"]
    assert default_stop_rules("cpu")[LATENCY].min_iterations >= MIN_SAMPLES["p99"]


def test_the_default_protocol_is_the_first_and_an_unknown_one_is_refused() -> None:
    assert next(iter(PROTOCOLS)) == DEFAULT_PROTOCOL == MeasureOptions().protocol
    assert get_protocol(PRE_PROTOCOL_LABEL).name == THOROUGH_PROTOCOL
    with pytest.raises(InvalidInputError, match="--protocol default or --protocol thorough"):
        get_protocol("quick")
    with pytest.raises(InvalidInputError, match="unknown protocol 'quick'"):
        MeasureOptions(protocol="quick").validate()


# ----------------------------------------------------------------------------------------------------------
# The plan and the result


def latency_plan(**options: Any) -> RunPlan:
    return api.plan_run(models=[TINY], workloads=[LATENCY], device="cpu", environment={},
                        options=MeasureOptions(**options))


def test_the_plan_records_its_protocol_and_explicit_options_still_override() -> None:
    plan = latency_plan(protocol=THOROUGH_PROTOCOL, iterations=50, min_time=0.5)
    assert plan.protocol == THOROUGH_PROTOCOL and plan.to_dict()["protocol"] == THOROUGH_PROTOCOL
    rule = plan.stop_rule(LATENCY)
    assert (rule.min_iterations, rule.min_seconds) == (50, 0.5)
    assert latency_plan().to_dict()["protocol"] == DEFAULT_PROTOCOL


def test_a_file_from_before_protocols_reads_as_thorough_before_protocols_and_stays_as_it_was() -> None:
    settings = latency_plan().to_dict()
    del settings["protocol"]
    plan = RunPlan.from_dict(settings)
    assert plan.protocol == PRE_PROTOCOL_LABEL == protocol_of(settings)
    assert "protocol" not in plan.to_dict()  # a resumed old file reads as before
    plan.validate()
    assert protocol_of({}) is None  # no stop rules (serve): no protocol to speak of
    assert protocol_of({"protocol": DEFAULT_PROTOCOL, "stop_rules": {}}) == DEFAULT_PROTOCOL


def gpu_plan(protocol: str, rules_of: str, **overrides: Any) -> RunPlan:
    """A plan of one GPU latency cell (made by hand: this machine may have no GPU) with ``rules_of``'s rules."""
    rules = {name: rule.with_overrides(**overrides) for name, rule in default_stop_rules("cuda", rules_of).items()}
    return RunPlan(cells=(Cell("resnet50", LATENCY, "fp32", 1, "cuda"),), stop_rules=rules, protocol=protocol)


@pytest.mark.parametrize(("plan", "flags"), [
    (gpu_plan(DEFAULT_PROTOCOL, DEFAULT_PROTOCOL), []),
    (gpu_plan(THOROUGH_PROTOCOL, THOROUGH_PROTOCOL), ["--protocol", "thorough"]),
    (gpu_plan(THOROUGH_PROTOCOL, THOROUGH_PROTOCOL, min_iterations=400), ["--protocol", "thorough", "--iterations",
                                                                          "400"]),
    (gpu_plan(DEFAULT_PROTOCOL, THOROUGH_PROTOCOL), ["--iterations", "1000"]),
    # Before protocols, 1000 requests was the rule: the reproduce line says thorough, not --iterations 1000.
    (gpu_plan(PRE_PROTOCOL_LABEL, THOROUGH_PROTOCOL), ["--protocol", "thorough"]),
], ids=["default", "thorough", "thorough-overridden", "default-overridden", "before-protocols"])
def test_the_reproduce_line_gives_the_protocol_and_only_the_overrides_against_it(plan: RunPlan,
                                                                                  flags: list[str]) -> None:
    line = reproduce_command(plan, plan.cells[0]).split()
    tail = line[line.index("cuda") + 1:]
    assert [t for t in tail if t not in ("--no-overlap",)] == flags


def test_profile_drops_the_protocol_of_a_run_line() -> None:
    line = "clsbench run --model m --workload infer-latency --mode fp32 --batch-size 1 --protocol thorough"
    assert "--protocol" not in profile_command(line) and "thorough" not in profile_command(line)


# ----------------------------------------------------------------------------------------------------------
# The command line


@pytest.mark.parametrize(("command", "takes"), [("run", True), ("sweep", True), ("tune", True), ("soak", False),
                                                 ("diagnose", False), ("scale", False), ("profile", False),
                                                 ("serve", False)])
def test_protocol_is_an_option_where_the_workloads_stop_rules_apply(command: str, takes: bool) -> None:
    out = CliRunner().invoke(main, [command, "--help"])
    assert out.exit_code == 0, out.output
    assert ("--protocol" in out.stdout) == takes


def test_run_hands_the_protocol_to_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[MeasureOptions] = []

    def capture(**kwargs: Any) -> RunPlan:
        seen.append(kwargs["options"])
        raise InvalidInputError("captured")

    monkeypatch.setattr(api, "plan_run", capture)
    for args, expected in (([], DEFAULT_PROTOCOL), (["--protocol", "thorough"], THOROUGH_PROTOCOL)):
        out = CliRunner().invoke(main, ["run", "--model", TINY, "--device", "cpu", *args])
        assert out.exit_code == 2 and "captured" in out.stderr, out.output
        assert seen[-1].protocol == expected
    out = CliRunner().invoke(main, ["run", "--model", TINY, "--device", "cpu", "--protocol", "quick"])
    assert out.exit_code == 2 and "quick" in out.output


# ----------------------------------------------------------------------------------------------------------
# compare


def run_of(protocol: str | None, device: str = "cuda", *, rules_of: str | None = None,
           latency_ms: float = 10.0) -> BenchmarkResult:
    """A run with a latency and a train measurement, whose settings store ``rules_of``'s rules (default: the
    protocol's) and name ``protocol`` (None: a file from before protocols)."""
    rules = default_stop_rules(device, rules_of or (protocol if protocol in PROTOCOLS else THOROUGH_PROTOCOL))
    settings: dict[str, Any] = {"stop_rules": {name: rule.to_dict() for name, rule in rules.items()}}
    if protocol is not None:
        settings["protocol"] = protocol
    return result([measurement("m", LATENCY, latency_records([latency_ms] * 3), batch=1, device=device),
                   measurement("m", "train", throughput_records([100.0, 101.0, 99.0]), device=device)],
                  env=environment(gpu="NVIDIA H200" if device == "cuda" else None), settings=settings)


def test_compare_refuses_runs_of_different_protocols_in_one_line_naming_the_rules() -> None:
    with pytest.raises(InvalidInputError) as caught:
        compare([run_of(DEFAULT_PROTOCOL), run_of(THOROUGH_PROTOCOL)], ["a.json", "b.json"])
    message, hint = caught.value.message, caught.value.hint or ""
    assert "a.json ran protocol 'default' and b.json protocol 'thorough'" in message
    assert "infer-latency min_iterations 300 vs 1000" in message and "\n" not in message
    assert ALLOW_PROTOCOL_MIX_FLAG in hint and "--protocol default" in hint


def test_allowing_the_mix_compares_with_a_warning() -> None:
    c = compare([run_of(DEFAULT_PROTOCOL), run_of(None)], ["a", "b"], allow_protocol_mix=True)
    mixed = [w for w in c.warnings if w.startswith("protocols mixed")]
    assert len(mixed) == 1 and "protocol 'thorough (before protocols)'" in mixed[0]
    assert [r.protocol for r in c.runs] == [DEFAULT_PROTOCOL, PRE_PROTOCOL_LABEL]
    assert c.rows()  # compared all the same


@pytest.mark.parametrize(("first", "second"), [
    (run_of(THOROUGH_PROTOCOL), run_of(None)),  # before protocols: thorough's rules
    (run_of(DEFAULT_PROTOCOL, "cpu"), run_of(None, "cpu")),  # on a CPU the protocols' rules agree
    (run_of(DEFAULT_PROTOCOL), run_of(THOROUGH_PROTOCOL, rules_of=DEFAULT_PROTOCOL)),  # the stored rules agree
    (run_of(DEFAULT_PROTOCOL), result([], settings={})),  # no stop rules at all (a serve result)
], ids=["thorough-vs-before", "cpu", "same-rules", "no-rules"])
def test_runs_whose_stored_rules_agree_are_no_mix(first: BenchmarkResult, second: BenchmarkResult) -> None:
    assert check_protocols([first, second], ["a", "b"], allow_mix=False) == []


def test_a_mix_on_workloads_the_protocols_agree_on_is_no_mix() -> None:
    train_only = [dataclasses.replace(r, measurements=r.measurements[1:])
                  for r in (run_of(DEFAULT_PROTOCOL), run_of(THOROUGH_PROTOCOL))]
    assert check_protocols(train_only, ["a", "b"], allow_mix=False) == []


def test_the_compare_command_refuses_a_mix_in_one_error_line_and_takes_the_flag(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    result_io.save(run_of(DEFAULT_PROTOCOL), a)
    result_io.save(run_of(THOROUGH_PROTOCOL, latency_ms=11.0), b)
    out = invoke(str(a), str(b))
    assert out.exit_code == 2 and "Traceback" not in out.output
    errors = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "protocol 'default'" in errors[0] and ALLOW_PROTOCOL_MIX_FLAG in out.stderr
    out = invoke(str(a), str(b), ALLOW_PROTOCOL_MIX_FLAG)
    assert out.exit_code == 0, out.output
    assert "protocols mixed (--allow-protocol-mix)" in out.stdout and "p50 latency" in out.stdout


# ----------------------------------------------------------------------------------------------------------
# Inductor's caches across the repeats of one cell


def test_only_compiled_cells_get_a_cache_directory_one_per_cell_under_the_runs() -> None:
    cells = [Cell(TINY, "infer-throughput", mode, 8, "cpu") for mode in ("fp32", "fp32+compile", "bf16+compile")]
    cells.append(Cell(TINY, "infer-latency", "fp32+compile", 8, "cpu"))
    run = BenchmarkResult(environment={}, settings={}, run_id="abc123")
    dirs = compile_cache_dirs(run, cells)
    assert set(dirs) == {c.key for c in cells[1:]} and len(set(dirs.values())) == 3
    assert {Path(d).parent.name for d in dirs.values()} == {"abc123"}
    assert compile_cache_dirs(run, cells) == dirs  # a resume finds the same directories
    assert compiles("amp-bf16+cl+compile:max-autotune") and not compiles("fp32+cudagraph")


def test_the_cache_directory_is_set_for_the_block_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_DIR_VARIABLE, "/elsewhere")
    with inductor_cache(str(tmp_path / "cell")) as facts:
        assert os.environ[CACHE_DIR_VARIABLE] == str(tmp_path / "cell")
    assert os.environ[CACHE_DIR_VARIABLE] == "/elsewhere"
    assert facts["warm"] is False and facts["fxgraph_cache_hit"] == 0 and facts["fx_graph_cache"] is True
    (tmp_path / "cell" / "fxgraph").mkdir()
    (tmp_path / "cell" / "fxgraph" / "entry").write_text("x", encoding="utf-8")
    with inductor_cache(str(tmp_path / "cell")) as facts:
        pass
    assert facts["warm"] is True


@pytest.mark.slow
def test_the_second_repeat_of_a_compiled_cell_loads_what_the_first_compiled(env: dict[str, Any]) -> None:
    """Two repeats of fp32+compile in fresh worker processes: the first misses Inductor's FX-graph cache and fills
    it (a cold compile of about a minute on 2 busy cores), the second hits it (about 3 s)."""
    plan = api.plan_run(models=[TINY], workloads=["infer-throughput"], modes=["fp32+compile"], device="cpu",
                        environment=env, options=MeasureOptions(repeats=2, warmup=1, iterations=2, min_time=0.0,
                                                                timeout_s=600.0))
    (m,) = api.run(plan, None, execution=Execution(env=env, probe=False)).measurements
    assert m.status == "ok", m.detail
    first, second = (r["compile_cache"] for r in m.repeats)
    assert first["dir"] == second["dir"]
    assert (first["warm"], first["fxgraph_cache_miss"] >= 1, first["fxgraph_cache_hit"]) == (False, True, 0)
    assert (second["warm"], second["fxgraph_cache_hit"] >= 1, second["fxgraph_cache_miss"]) == (True, True, 0)
    assert all(r["timings"]["compile_s"] > 0 for r in m.repeats)
