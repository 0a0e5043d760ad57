"""Multi-GPU training benchmarks: DistributedDataParallel through torchrun against DataParallel, and how they scale.

The public API (``clsbench scale`` is a thin shell over it)::

    from clsbench.procedures.scale import plan_scale, run_scale, analyze_scale, render_scale

    plan = plan_scale(model="resnet50", gpus="1,2", strategy="both", mode="amp-bf16+cl", batch_size_per_gpu=256,
                      device="cuda", options=MeasureOptions(repeats=2, cudnn_benchmark=None))
    result = run_scale(plan, "results/scale.json")      # an ordinary clsbench result file
    print(render_scale(analyze_scale(result)))

Layout: :mod:`.plan` (what to measure), :mod:`.strategies` (one module per strategy: ``ddp``, ``dp``),
:mod:`.launch` (a launch with a time limit and no stray process), :mod:`.rank` + :mod:`.rank_loop` (what each
launched process runs), :mod:`.merge` (the processes' records -> one repeat), :mod:`.figures` (figures, efficiency,
table), :mod:`.nccl` (NCCL version, communication variables, GPU topology), :mod:`.run` (the whole run, through the
engine's repeat loop).
"""

from __future__ import annotations

from clsbench.procedures.base import PROCEDURES, ProcedureView
from clsbench.procedures.scale.figures import analyze_scale, finalize, render_scale
from clsbench.procedures.scale.plan import STRATEGY_NAMES, ScalePlan, parse_gpus, plan_scale
from clsbench.procedures.scale.run import ScaleInterrupted, launch_commands, run_scale

PROCEDURES.register("scale", ProcedureView("scale", lambda result: render_scale(analyze_scale(result))))

__all__ = ["STRATEGY_NAMES", "ScaleInterrupted", "ScalePlan", "analyze_scale", "finalize", "launch_commands",
           "parse_gpus", "plan_scale", "render_scale", "run_scale"]
