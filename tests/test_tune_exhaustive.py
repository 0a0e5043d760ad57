"""``clsbench tune --exhaustive`` and the default-vs-exhaustive comparison (issue 18).

The searches run inline on the cost clock of test_sweep.py through the harness of test_tune_budget.py (each repeat
adds a worker's start to the clock, the budget reads the same clock); where a test is about what a kind proposes,
test_tune_kinds.py's ``watch`` records the compiled candidates instead of compiling them. One CLI test runs the
tiny model end to end.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from clsbench.cli import main
from clsbench.errors import InvalidInputError
from clsbench.procedures.tune import TuneInterrupted, render_tune, resume_tune
from clsbench.procedures.tune.compare import compare_tunes, gap_pct, render_tune_comparison
from clsbench.results import io as result_io
from test_tune_budget import MS, OPTIONS, PER_IMAGE_MS, inline, invoke_group, tune_with
from test_tune_kinds import SHORT, watch

REPO = Path(__file__).resolve().parents[1]
MODES = ["fp32", "fp32+cl", "amp-bf16+cl"]
SIZES = [2, 4, 8]
#: What the default search prunes for speed (the stages of :meth:`Search.prune` that are not a refusal).
SPEED_STAGES = {"screen", "dominance", "halving", "compile", "freeze", "max-autotune"}


def search(costed: Any, env: dict[str, Any], **kwargs: Any) -> Any:
    """A tune on the cost clock (infer-throughput, no compile, 1 h budget unless ``exhaustive``)."""
    options = {"workload": "infer-throughput", "modes": MODES, "batch_sizes": SIZES, "compile_variants": False,
               "options": OPTIONS, "backends": (), **kwargs}
    if not options.get("exhaustive"):
        options.setdefault("budget", "1h")
    workload = options.pop("workload")
    return tune_with(f"{costed.__name__}:costed", workload, "cpu", execution=inline(costed, env),
                     budget_clock=lambda: costed.STATE["ns"] / 1e9, **options)


def rungs(outcome: Any) -> dict[str, set[tuple[str, int]]]:
    out: dict[str, set[tuple[str, int]]] = {}
    for t in outcome.result.settings["tune"]["trials"]:
        out.setdefault(t["rung"], set()).add((t["mode"], t["batch_size"]))
    return out


def cut_for_speed(outcome: Any) -> list[dict[str, Any]]:
    return [p for p in outcome.result.settings["tune"]["pruned"] if p["stage"] in SPEED_STAGES
            or p["reason"].startswith(("its best result is", "not among the"))]


def dominated_at_small_batches(mode: str, batch: int) -> int:
    """amp-bf16+cl: beaten by fp32+cl by far at batch 2 and 4, the best of all at batch 8."""
    per_image = {("amp-bf16+cl", 8): 0.5}.get((mode, batch), {"amp-bf16+cl": 1.2}.get(mode, PER_IMAGE_MS[mode]))
    return int(0.5 * MS + per_image * MS * batch)


# ------------------------------------------------------------------------------------------- what it measures


def test_exhaustive_measures_what_dominance_and_halving_cut(costed: Any, env: dict[str, Any]) -> None:
    default = search(costed, env)
    assert ("fp32", 4) not in rungs(default)["screen"]  # the screen margin: 25% of the best at batch 2
    assert {p["stage"] for p in cut_for_speed(default)} == {"screen", "halving"}
    assert len(rungs(default)["longer"]) == 3  # ceil(7 screened / 3)

    outcome = search(costed, env, exhaustive=True)
    facts = outcome.result.settings["tune"]
    every = {(mode, batch) for mode in MODES for batch in SIZES}
    # Every candidate straight at the longer rung: no screen, so no halving; no dominance.
    assert rungs(outcome)["longer"] == every and "screen" not in rungs(outcome)
    assert facts["pruned"] == [] and facts["left_out"] == []
    assert (facts["exhaustive"], facts["budget_s"]) == (True, None)
    assert [s["stage"] for s in facts["plan"]] == ["longer bs2", "longer bs4", "longer bs8", "check", "confirm"]
    assert all(s["planned"] and s["rung"] in ("longer", "confirm", None) for s in facts["plan"])
    # The confirmation as usual: the best two, with the full repeats.
    assert rungs(outcome)["confirm"] == {("fp32+cl", 8), ("amp-bf16+cl", 8)}
    assert (outcome.winner["mode"], outcome.winner["batch_size"], outcome.winner["confirmed"]) == \
        ("fp32+cl", 8, True)
    text = render_tune(outcome.analysis)
    assert text.startswith("tune (exhaustive): ") and ", no budget (" in text and "pruned" not in text


def test_exhaustive_grows_past_a_plateau(costed: Any, env: dict[str, Any]) -> None:
    costed.STATE["cost"] = lambda mode, batch: int(PER_IMAGE_MS[mode] * MS * batch)  # flat: no gain from batching
    default = search(costed, env, modes=["fp32+cl"], batch_sizes=None)
    # 8..64 on a CPU: from the reference size 16, stopped at 32 (no gain over 16)
    assert rungs(default)["screen"] == {("fp32+cl", 16), ("fp32+cl", 32)}
    outcome = search(costed, env, modes=["fp32+cl"], batch_sizes=None, exhaustive=True)
    assert rungs(outcome)["longer"] == {("fp32+cl", b) for b in (8, 16, 32, 64)}


def test_exhaustive_tries_every_family_in_the_kinds_that_limit_them(costed: Any, env: dict[str, Any],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Three families within the pruning margin of each other: fp32+cl best, then amp-bf16, then fp32.
    per_image = {"fp32": 1.1, "fp32+cl": 1.0, "amp-bf16": 1.05}
    costed.STATE["cost"] = lambda mode, batch: int(0.5 * MS + per_image.get(mode, 1.0) * MS * batch)
    proposed = watch(monkeypatch)
    options = {"workload": "train", "modes": ["fp32", "fp32+cl", "amp-bf16"], "batch_sizes": [4],
               "compile_variants": True, "max_autotune": True, "options": SHORT}
    default = search(costed, env, **options)
    assert {m for m, _ in proposed["compile"]} == {"fp32+cl+compile", "amp-bf16+compile"}  # MAX_COMPILE_FAMILIES
    assert [m for m, _ in proposed["max-autotune"]] == ["fp32+cl+compile:max-autotune"]
    assert {m for m, _ in proposed["train-step"]} == {"fp32+cl+fused", "fp32+cl+compile+fused",
                                                      "fp32+cl+compile+fused+compiled-step"}
    assert {"not among the 2 best modes", "not among the 1 best modes"} <= {p["reason"] for p in cut_for_speed(default)}
    proposed.clear()

    outcome = search(costed, env, exhaustive=True, **options)
    families = {kind: sorted({m.split("+")[0] + ("+cl" if "+cl" in m else "") for m, _ in proposed[kind]})
                for kind in ("compile", "train-step", "max-autotune")}
    assert families == {kind: ["amp-bf16", "fp32", "fp32+cl"] for kind in families}
    assert len(proposed["train-step"]) == 9  # 3 families x fused, +compile, +compiled-step (no cudagraph on a CPU)
    assert cut_for_speed(outcome) == []
    # What is still pruned is what cannot run here, with the mode's own reason (a CUDA graph on a CPU).
    assert {p["stage"] for p in outcome.result.settings["tune"]["pruned"]} == {"train-step"}
    assert all("CUDA" in p["reason"] for p in outcome.result.settings["tune"]["pruned"])
    plan = {s["stage"]: s["candidates"] for s in outcome.result.settings["tune"]["plan"]}
    assert (plan["compile"], plan["train-step"], plan["max-autotune"]) == (3, 9, 3)


def test_exhaustive_tries_every_precision_on_the_backends(costed: Any, env: dict[str, Any],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from clsbench.engine import runner

    monkeypatch.setattr(runner, "static_backend_skip_reason", lambda cell, environment: None)
    proposed = watch(monkeypatch)
    options = {"modes": ["fp32", "amp-bf16+cl"], "batch_sizes": [4], "compile_variants": True,
               "max_autotune": False, "variants": ["cudagraph"], "backends": ["export"], "options": SHORT}
    search(costed, env, **options)
    assert sorted(m for m, _ in proposed["backend"]) == ["bf16", "bf16+cl"]  # MAX_BACKEND_FAMILIES = 1
    proposed.clear()
    search(costed, env, exhaustive=True, **options)
    assert sorted(m for m, _ in proposed["backend"]) == ["bf16", "bf16+cl", "fp32", "fp32+cl"]


def test_an_explicit_budget_still_starts_nothing_it_cannot_finish(costed: Any, env: dict[str, Any]) -> None:
    outcome = search(costed, env, exhaustive=True, budget="40s")
    facts = outcome.result.settings["tune"]
    assert facts["budget_s"] == 40.0 and facts["left_out"]
    for t in facts["trials"]:
        assert t["start_s"] + t["estimate_s"] <= 40.0 + 1e-9
    assert "left out for the budget" in render_tune(outcome.analysis)


# ---------------------------------------------------------------------------------------------- the comparison


def test_the_default_winner_against_the_exhaustive_best_when_they_agree(costed: Any, env: dict[str, Any],
                                                                       tmp_path: Path) -> None:
    default = search(costed, env, output=tmp_path / "default.json")
    exhaustive = search(costed, env, exhaustive=True, output=tmp_path / "exhaustive.json")
    c = compare_tunes(result_io.load(tmp_path / "default.json"), result_io.load(tmp_path / "exhaustive.json"))
    assert c["same_configuration"] is True and c["gap_pct"] == 0.0 and c["within_goal"] is True
    assert c["default"]["winner"]["confirmed"] and c["exhaustive"]["winner"]["confirmed"]
    assert c["default"]["search_s"] == pytest.approx(default.search_s)
    assert c["exhaustive"]["search_s"] == pytest.approx(exhaustive.search_s)
    text = render_tune_comparison(c)
    assert "default winner (DEFAULT): fp32+cl batch 8: 941.2 img/s (confirmed over 3 repeats" in text
    assert "gap of the default winner to the exhaustive best: 0.00% (the same configuration); within 3%: yes" \
        in text
    assert "not significant" in text and "budget 1h00m00s" in text and "no budget" in text
    assert "warning" not in text


def test_a_default_search_that_prunes_the_best_is_reported_outside_the_goal(costed: Any, env: dict[str, Any],
                                                                           tmp_path: Path) -> None:
    costed.STATE["cost"] = dominated_at_small_batches
    default = search(costed, env)
    exhaustive = search(costed, env, exhaustive=True)
    assert (default.winner["mode"], default.winner["batch_size"]) == ("fp32+cl", 8)
    assert (exhaustive.winner["mode"], exhaustive.winner["batch_size"]) == ("amp-bf16+cl", 8)
    c = compare_tunes(default.result, exhaustive.result)
    expected = gap_pct(8000 / 8.5, 8000 / 4.5)
    assert c["gap_pct"] == pytest.approx(expected) and expected > 3.0 and c["within_goal"] is False
    assert c["same_configuration"] is False
    assert c["default_of_best"] is None  # dominance kept the default search from measuring it
    assert c["exhaustive_of_default"]["rung"] == "confirm"
    assert c["gap_in_exhaustive_pct"] == pytest.approx(expected)
    text = render_tune_comparison(c)
    assert f"exhaustive best: {expected:.2f}% (a different configuration); within 3%: no" in text
    assert "the default search's figure for the exhaustive winner: not measured" in text
    assert "the exhaustive search's figure for the default winner: 941.2 img/s (confirm rung" in text


def test_an_unconfirmed_or_incomplete_search_is_marked_as_such(costed: Any, env: dict[str, Any]) -> None:
    default = search(costed, env, modes=["fp32", "fp32+cl"], batch_sizes=[2], budget="15s")
    exhaustive = search(costed, env, modes=["fp32", "fp32+cl"], batch_sizes=[2], exhaustive=True, budget="12s")
    c = compare_tunes(default.result, exhaustive.result)
    assert c["default"]["winner"]["confirmed"] is False and c["exhaustive"]["left_out"]
    text = render_tune_comparison(c)
    assert "(from 1 repeat, unconfirmed" in text
    assert "warning: the default winner was not confirmed with the full repeats" in text
    assert "warning: the exhaustive search is not complete" in text


@pytest.mark.parametrize(("where", "change", "message"), [
    ("default", {"model": "other"}, "DEFAULT and EXHAUSTIVE differ in model: 'other' against"),
    ("exhaustive", {"workload": "train"}, "differ in workload: 'infer-throughput' against 'train'"),
    ("exhaustive", {"device": "cuda"}, "differ in device: 'cpu' against 'cuda'"),
    ("exhaustive", {"limits": {"max_latency_ms": 5.0, "max_memory_gb": None}}, "differ in limits: "),
    ("default", {"exhaustive": True}, "DEFAULT is an exhaustive search"),
    ("exhaustive", {"exhaustive": False}, "EXHAUSTIVE is not an exhaustive search"),
])
def test_the_comparison_refuses_files_it_cannot_compare(costed: Any, env: dict[str, Any], where: str,
                                                        change: dict[str, Any], message: str) -> None:
    files = {"default": search(costed, env, modes=["fp32+cl"], batch_sizes=[2]).result,
             "exhaustive": search(costed, env, modes=["fp32+cl"], batch_sizes=[2], exhaustive=True).result}
    settings = {**files[where].settings, "tune": {**files[where].settings["tune"], **change}}
    files[where] = dataclasses.replace(files[where], settings=settings)
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(")):
        compare_tunes(files["default"], files["exhaustive"])


def test_the_comparison_refuses_another_machine(costed: Any, env: dict[str, Any]) -> None:
    default = search(costed, env, modes=["fp32+cl"], batch_sizes=[2]).result
    exhaustive = search(costed, env, modes=["fp32+cl"], batch_sizes=[2], exhaustive=True).result
    other = {**exhaustive.environment, "cpu": {**(exhaustive.environment.get("cpu") or {}), "model": "Other CPU"}}
    with pytest.raises(InvalidInputError, match="measured on different hardware"):
        compare_tunes(default, dataclasses.replace(exhaustive, environment=other))


def load_script() -> Any:
    spec = importlib.util.spec_from_file_location("tune_vs_exhaustive", REPO / "benchmarks" / "tune_vs_exhaustive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_prints_the_comparison_and_refuses_in_one_line(costed: Any, env: dict[str, Any], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    a, b, c = tmp_path / "default.json", tmp_path / "exhaustive.json", tmp_path / "other.json"
    search(costed, env, modes=["fp32+cl"], batch_sizes=[2], output=a)
    search(costed, env, modes=["fp32+cl"], batch_sizes=[2], exhaustive=True, output=b)
    search(costed, env, workload="train", modes=["fp32+cl"], batch_sizes=[2], exhaustive=True, output=c)
    script = load_script()
    assert script.main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("tune vs exhaustive: ") and "within 3%: yes" in out
    assert script.main([str(a), str(c)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "differ in workload" in err and err.count("\n") == 1
    assert script.main([str(b), str(a)]) == 2  # the wrong way round
    assert "is an exhaustive search" in capsys.readouterr().err
    assert script.main([str(a), str(tmp_path / "missing.json")]) == 3


# ---------------------------------------------------------------------------------------------------- resume


def test_a_resumed_exhaustive_search_stays_exhaustive(costed: Any, env: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    armed = {"on": True}

    def cost(mode: str, batch: int) -> int:
        if (mode, batch) == ("amp-bf16+cl", 4) and armed["on"]:
            armed["on"] = False
            raise KeyboardInterrupt
        return int(0.5 * MS + PER_IMAGE_MS[mode] * MS * batch)

    costed.STATE["cost"] = cost
    with pytest.raises(TuneInterrupted):
        search(costed, env, exhaustive=True, output=path)
    stopped = result_io.load(path).settings["tune"]
    assert stopped["exhaustive"] is True and stopped["search_s"] is None
    refused = invoke_group("tune", "--resume", str(path), "--exhaustive")
    assert refused.exit_code == 2 and "takes no --exhaustive" in refused.stderr
    outcome = resume_tune(path, execution=inline(costed, env), budget_clock=lambda: costed.STATE["ns"] / 1e9)
    facts = outcome.result.settings["tune"]
    assert facts["exhaustive"] is True and facts["budget_s"] is None and facts["resumed"][0]["budget_s"] is None
    assert rungs(outcome)["longer"] == {(mode, batch) for mode in MODES for batch in SIZES}
    assert "screen" not in rungs(outcome) and facts["pruned"] == [] and facts["left_out"] == []
    assert outcome.winner["confirmed"] is True


# ------------------------------------------------------------------------------------------------ the CLI


def test_cli_exhaustive_end_to_end_on_the_tiny_model(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    result = CliRunner().invoke(main, [
        "tune", "--model", "clsbench_testmodels:tiny", "--device", "cpu", "--exhaustive", "--no-compile",
        "--mode", "fp32,fp32+cl", "--batch-size", "2,4", "--warmup", "1", "--iterations", "2", "--min-time", "0",
        "--repeats", "2", "--isolation", "inline", "--clock", "fake:1ms", "-q", "-o", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("tune (exhaustive): clsbench_testmodels:tiny infer-throughput on cpu")
    assert "WINNER" in result.stdout and "confirmed over 2 repeats" in result.stdout
    stored = result_io.load(path).settings["tune"]
    assert stored["exhaustive"] is True and stored["budget_s"] is None
    longer = {(t["mode"], t["batch_size"]) for t in stored["trials"] if t["rung"] == "longer"}
    assert longer == {(m, b) for m in ("fp32", "fp32+cl") for b in (2, 4)}
    assert {t["rung"] for t in stored["trials"]} == {"longer", "confirm"}
