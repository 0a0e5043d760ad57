"""``clsbench tune`` on a small budget says what it does (issue 38, item 18): a precision the device cannot run is
pruned up front with the mode's own reason (never counted in the plan, never "left out for the budget"), progress
counts the candidates of a stage (``[n/N]``, not ``[1/1]`` for each), and a stage the printed plan said would run
but the budget runs short for is said when it happens.

The searches run inline on the cost clock of test_sweep.py, each worker costing 5 s on the budget's clock
(test_tune_budget.py), so every decision is exact and nothing sleeps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from clsbench.procedures.tune import render_tune
from test_tune_budget import OPTIONS, inline, search, trials, tune_with

PER_IMAGE_MS = {"fp32": 4.0, "fp32+cl": 1.0, "amp-bf16": 2.0, "amp-bf16+cl": 1.02, "bf16": 3.0, "bf16+cl": 2.5,
                "tf32": 4.0}


def test_a_precision_this_device_cannot_run_is_pruned_with_its_reason_and_progress_counts_candidates(
        costed: Any, env: dict[str, Any]) -> None:
    lines: list[str] = []
    counts: list[tuple[str, int, int, int]] = []
    base = inline(costed, env)

    def progress(event: Any) -> None:
        base.progress(event)
        if event.kind == "repeat":
            counts.append((event.cell.mode, event.done, event.total, event.repeat))

    outcome = tune_with(f"{costed.__name__}:costed", "infer-throughput", "cpu",
                        modes=["fp32", "tf32", "fp32+cl"], batch_sizes=[2], compile_variants=False,
                        options=dataclasses.replace(OPTIONS, repeats=2), backends=(), budget="1h", check_outputs=False,
                        announce=lines.append,
                        execution=dataclasses.replace(base, progress=progress),
                        budget_clock=lambda: costed.STATE["ns"] / 1e9)
    facts = outcome.result.settings["tune"]
    # tf32 is not counted in the plan (2 modes, not 3) and never measured, skipped or left out
    assert "  try screen bs2: up to 2 candidate(s), about 4.0s" in lines
    assert not any(t["mode"].startswith("tf32") for t in trials(outcome))
    assert not any((e.get("mode") or "").startswith("tf32") for e in facts["left_out"])
    assert not any(m.mode == "tf32" for m in outcome.result.measurements)
    device = [p for p in facts["pruned"] if p["stage"] == "device"]
    assert [p["mode"] for p in device] == ["tf32"]
    assert device[0]["reason"] == "TF32 is a tensor-core mode of NVIDIA GPUs; this device is cpu"
    assert "pruned (device): tf32 -> not tried any batch size or variant: TF32 is a tensor-core mode" \
        in render_tune(outcome.analysis)
    # Each stage counts its own candidates: the screen 1..2 of 2, the longer rung 1..2 of 2, the confirmation
    # 1..2 of 2 with the repeat each adds to its longer one (2 of 2).
    assert counts == [("fp32", 0, 2, 1), ("fp32+cl", 1, 2, 1), ("fp32+cl", 0, 2, 1), ("fp32", 1, 2, 1),
                      ("fp32+cl", 0, 2, 2), ("fp32", 1, 2, 2)]

def test_a_planned_stage_the_budget_runs_short_for_is_said_when_it_happens(costed: Any,
                                                                            env: dict[str, Any]) -> None:
    # The plan prices a worker at 2 s before any ran here, so 6 screening candidates look like 12 s and the plan
    # tries them all; each really costs 5 s, so the budget runs short inside the stage the plan said would run.
    lines: list[str] = []
    outcome = search(costed, env, modes=["fp32", "fp32+cl", "amp-bf16", "amp-bf16+cl", "bf16", "bf16+cl"],
                     batch_sizes=[2], budget="20s", check_outputs=False, announce=lines.append)
    facts = outcome.result.settings["tune"]
    assert "  try screen bs2: up to 6 candidate(s), about 12.0s" in lines
    left = [e for e in facts["left_out"] if e["stage"] == "screen bs2"]
    assert left, "the budget was meant to run short inside the first screen"
    short = [line for line in lines if line.startswith("tune plan: screen bs2 runs short of the budget: ")]
    assert len(short) == 1  # said once, at the first candidate left out, with its name and the real reason
    first = left[0]
    assert f"{first['mode']} bs{first['batch_size']} left out ({first['reason']})" in short[0]
    assert "of the budget was left" in first["reason"]
    assert lines.index(short[0]) > lines.index("  try screen bs2: up to 6 candidate(s), about 12.0s")


def test_the_tune_table_footnotes_a_p99_withheld_for_too_few_batches() -> None:
    """Issue 38 item 2 for tune: ``p99 ms`` holds a p99 or ``-``, and a ``-`` beside a p50 has its footnote."""
    def candidate(rank: int, mode: str, p99: float | None) -> dict[str, Any]:
        return {"rank": rank, "mode": mode, "batch_size": 8, "throughput_img_s": 100.0 * rank, "vs_fp32": 1.0,
                "latency_p50_ms": 80.0, "latency_p99_ms": p99, "memory_bytes": None, "verdict": "ok", "status": "ok",
                "correctness": {"status": "reference"}}

    analysis = {"model": "m", "workload": "infer-throughput", "device": "cpu", "objective": "throughput",
                "limits": {}, "candidates": [candidate(1, "fp32", 95.0), candidate(2, "fp32+cl", None)]}
    text = render_tune(analysis)
    table = text.splitlines()
    header = next(line for line in table if line.startswith("rank"))
    assert "p99 ms" in header
    assert "p99 -: 1 candidate(s) timed fewer than 100 batches in a repeat, too few for a p99" in text
    analysis["candidates"] = [candidate(1, "fp32", 95.0)]
    assert "p99 -:" not in render_tune(analysis)
