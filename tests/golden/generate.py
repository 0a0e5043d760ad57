"""Golden result files: run, sweep, tune, diagnose and scale, made from fake clocks, inline, with a fixed
environment, so that a refactoring can prove that it changed no stored byte.

``python tests/golden/generate.py DIR`` writes ``run.json``, ``sweep.json``, ``tune.json``, ``diagnose.json`` and
``scale.json`` into DIR; ``tests/test_golden.py`` writes them into a temporary folder and compares them with the
committed copies byte for byte. Only what a fake clock cannot fix is masked (:data:`VOLATILE`, :data:`DROPPED`): host
readings (process ids, host-CPU counters, the perf_counter durations of untimed phases, dates) and the tool's version;
losses, computed for real on the host's CPU, are rounded (:data:`ROUNDED`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

TINY = "clsbench_testmodels:tiny"
NAMES = ("run", "sweep", "tune", "diagnose", "scale")

#: A fixed environment: reading the real one is not what the golden files are about.
ENV: dict[str, Any] = {"device": "cpu", "cpu": {"model": "golden CPU", "logical_cores": 2},
                       "software": {"torch": "golden"}, "gpu": {}, "clsbench": {"version": "golden"}}

#: Keys whose values come from the host, not from the fake clock: replaced by "<volatile>" wherever they appear.
VOLATILE = frozenset({
    "created_utc", "started_utc", "pid", "host_cpu", "prepare_s", "context_s", "setup_s", "measure_s",
    "search_s", "version", "peak_rss_bytes", "worker_peak_rss_bytes", "traceback", "wall_s", "cold_pass_s",
    "worker_start_s", "cache_prime_s", "scan_s", "fingerprint", "directory", "profile_s", "read_s",
    "memory", "data_settings_fingerprint", "prime_s", "startup_s", "first_batch_s", "mtime_ns",
    "host_peak_rss_bytes", "run_id",
})

#: Losses: real arithmetic on the host CPU, whose last digits depend on its instruction set (oneDNN picks kernels by
#: ISA), so they are compared to 4 significant digits; a change of data or of the step still shows.
ROUNDED = frozenset({"loss_first", "loss_last"})

#: Keys present only when the host happened to be busy: left out wherever they appear.
DROPPED = frozenset({"host_cpu_contention"})

#: Temporary folders named in stored commands (scale's job files).
TEMP_PATH = re.compile(r"/[^\s\"]*clsbench-scale-[^/\s\"]+")

#: The interpreter named in stored commands (scale's launch line): it depends on where the checkout lives.
PYTHON = sys.executable


def mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "<volatile>" if k in VOLATILE else _rounded(v) if k in ROUNDED else mask(v)
                for k, v in value.items() if k not in DROPPED}
    if isinstance(value, list):
        return [mask(v) for v in value]
    if isinstance(value, str):
        return "<python>" if value == PYTHON else TEMP_PATH.sub("<tmp>", value)
    return value


def _rounded(value: Any) -> Any:
    return float(f"{value:.4g}") if isinstance(value, float) else value


def normalised(path: Path) -> str:
    return json.dumps(mask(json.loads(path.read_text(encoding="utf-8"))), indent=1, sort_keys=False) + "\n"


def _inline(clock: Any) -> Any:
    from clsbench.core.options import Execution

    return Execution(isolation="inline", clock=clock, env=ENV, probe=False)


def _run(out: Path) -> None:
    from clsbench import api
    from clsbench.core.options import MeasureOptions
    from clsbench.measure.clock import FakeClock

    plan = api.plan_run(models=[TINY], workloads=["infer-latency", "infer-throughput", "train"],
                        modes=["fp32", "fp32+cl"], batch_sizes=[2], device="cpu",
                        options=MeasureOptions(repeats=2, warmup=1, iterations=3, min_time=0.0), environment=ENV)
    api.run(plan, out, execution=_inline(FakeClock(increments_ns=(1_000_000, 3_000_000))))


def _sweep(out: Path) -> None:
    from clsbench.core.options import MeasureOptions
    from clsbench.measure.clock import FakeClock
    from clsbench.procedures.sweep import sweep

    sweep(TINY, "infer-throughput", "fp32", "cpu", "1,2,4", out,
          options=MeasureOptions(repeats=2, warmup=1, iterations=2, min_time=0.0), execution=_inline(FakeClock()))


def _tune(out: Path) -> None:
    from clsbench.core.options import MeasureOptions
    from clsbench.measure.clock import FakeClock
    from clsbench.procedures.tune import TuneSettings, tune

    seconds = iter(range(10**6))  # the budget's clock: one second per reading, so the search's log is fixed too
    settings = TuneSettings(TINY, "infer-throughput", "cpu", modes=["fp32", "fp32+cl"], batch_sizes=[2, 4],
                            options=MeasureOptions(repeats=2, warmup=1, iterations=2, min_time=0.0),
                            compile_variants=False, budget="1h")
    tune(settings, output=out, execution=_inline(FakeClock(increments_ns=(1_000_000, 2_000_000))),
         budget_clock=lambda: float(next(seconds)))


def _diagnose(out: Path, scratch: Path) -> None:
    from clsbench.data.make import MakeSpec, make_dataset
    from clsbench.measure.clock import FakeClock
    from clsbench.procedures.diagnose import diagnose

    data = scratch / "ds"
    make_dataset(data, MakeSpec(images=16, classes=2, seed=3, width=40, height=30), jobs=1)
    diagnose(TINY, data, batch_size=4, device="cpu", workers=[0], pipelines=["cpu", "gpu"], quick=True,
             output=out, execution=_inline(FakeClock()))


def _scale(out: Path) -> None:
    from clsbench.core.options import Execution, MeasureOptions
    from clsbench.procedures.scale import plan_scale, run_scale
    from golden.fake_launch import FakeLauncher

    plan = plan_scale(model=TINY, gpus="1,2", strategy="both", batch_size_per_gpu=8, device="cpu",
                      options=MeasureOptions(repeats=2, cudnn_benchmark=None))
    run_scale(plan, out, execution=Execution(env=ENV), runner=FakeLauncher())


def generate(directory: Path) -> list[Path]:
    """Write the five golden files (normalised) into ``directory``; return their paths. The raw files, the data set
    and the index live in a temporary folder that is removed afterwards, so ``directory`` receives the five alone."""
    import os
    import tempfile

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    with tempfile.TemporaryDirectory(prefix="clsbench-golden-") as tmp:
        scratch = Path(tmp)
        old_db = os.environ.get("CLSBENCH_DB")
        os.environ["CLSBENCH_DB"] = str(scratch / "index.sqlite3")
        makers = {"run": _run, "sweep": _sweep, "tune": _tune, "diagnose": lambda p: _diagnose(p, scratch),
                  "scale": _scale}
        try:
            for name in NAMES:
                raw = scratch / f"{name}.raw.json"
                makers[name](raw)
                path = directory / f"{name}.json"
                path.write_text(normalised(raw), encoding="utf-8")
                paths.append(path)
        finally:
            if old_db is None:
                os.environ.pop("CLSBENCH_DB", None)
            else:
                os.environ["CLSBENCH_DB"] = old_db
    return paths


if __name__ == "__main__":
    for written in generate(Path(sys.argv[1])):
        print(written)
