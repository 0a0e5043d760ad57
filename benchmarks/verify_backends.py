"""The inference backends' build variants on a GPU, outside ``clsbench run`` (issue 16).

``benchmarks/verify_backends.sh`` measures the backends through ``clsbench run --backend`` itself; this script
answers the questions a run does not ask: which build variant to use (``torch.jit.optimize_for_inference`` on a
GPU, AOTInductor's ``conservative`` build on its own), with a variant forced per job.

For each model, builds every backend the machine can run through :func:`clsbench.backends.apply_backend` (isolated
builds, the artifact cache), checks parity against fp32 eager, and times

* throughput at batch 256: a resident batch, forward passes back to back, images/s from the wall time between two
  synchronisations (and from CUDA events around the same region);
* latency at batch 1: one request at a time as a client sees it (pinned host input -> device -> forward -> logits
  back on the host, synchronised), p50/p90/p99 of the wall time, and the forward's GPU time between CUDA events.

Each (model, backend, mode, batch) job runs in a fresh process, so a crash at load or run time costs one row, not the
run; a build crash is already contained by the backend machinery and shows as ``build_crash`` with its attempts.
Rows go to ``WORK/backends.jsonl`` as they finish; the table is printed at the end and written to
``WORK/table.txt``. Jobs run in plan order until the time budget is spent; what did not fit is listed as such.

Usage::

    python benchmarks/verify_backends.py --models resnet50 --work /tmp/w --budget-s 420
    python benchmarks/verify_backends.py --one '{"model": "resnet50", "backend": "export", ...}'   # one job
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Throughput batch and latency batch of the issue's verification.
THROUGHPUT_BATCH = 256
LATENCY_BATCH = 1
#: Stop rules: enough to rank backends and see a p50 within a few per cent; not the suite's rules.
WARMUP_ITERATIONS = 10
MIN_THROUGHPUT_S = 2.0
LATENCY_WARMUP_REQUESTS = 50
MIN_LATENCY_REQUESTS = 300
MIN_LATENCY_S = 1.5
HOST_INPUT_POOL = 8  # as the infer-latency workload: no request reuses the previous request's buffer
#: A single job may not take more than this (an AOTInductor build of ResNet-50 is expected to take a minute or two,
#: and a crashed build is retried once): each of two build attempts gets half of it, less the job's own work.
JOB_LIMIT_S = 330
JOB_OVERHEAD_S = 40
#: A job is not started with less than this left of the budget.
MIN_JOB_S = 25
#: The issue's batch-1 goal, for the summary line.
GOAL_P50_MS = 0.7


def plan(models: list[str], device: str = "cuda", throughput_batch: int = THROUGHPUT_BATCH) -> list[dict[str, Any]]:
    """The jobs, most important first (a run that hits its budget loses the least useful rows): AOTInductor's
    bf16+cl build, the batch-256 and batch-1 figures against eager, then fp32, then the variants that answer open
    questions (optimize_for_inference on a GPU, AOTInductor's conservative build on its own)."""
    jobs: list[dict[str, Any]] = []
    for model in models:
        def add(backend: str, mode: str, batch: int, model: str = model, **extra: Any) -> None:
            if batch == THROUGHPUT_BATCH:
                batch = throughput_batch
            jobs.append({"model": model, "backend": backend, "mode": mode, "batch": batch, "device": device, **extra})

        # First the open question (does AOTInductor build bf16+cl here, and with which variant), then the figures
        # that matter: throughput at batch 256 and latency at batch 1 against eager.
        add("export", "bf16+cl", THROUGHPUT_BATCH)
        add("eager", "bf16+cl", THROUGHPUT_BATCH)
        add("export", "bf16+cl+cudagraph", LATENCY_BATCH)
        add("export", "bf16+cl", LATENCY_BATCH)
        add("eager", "bf16+cl", LATENCY_BATCH)
        add("eager", "bf16+cl+cudagraph", LATENCY_BATCH)
        add("torchscript", "bf16+cl", THROUGHPUT_BATCH)
        add("torchscript", "bf16+cl+cudagraph", LATENCY_BATCH)
        add("torchscript", "bf16+cl", LATENCY_BATCH)
        for backend in ("onnxruntime", "tensorrt"):
            add(backend, "bf16+cl", THROUGHPUT_BATCH)
            add(backend, "fp16+cl", THROUGHPUT_BATCH)
            add(backend, "fp16+cl+cudagraph", LATENCY_BATCH)
            add(backend, "fp32", THROUGHPUT_BATCH)
        add("eager", "fp32", THROUGHPUT_BATCH)
        add("torchscript", "fp32", THROUGHPUT_BATCH)
        add("torchscript", "bf16+cl", THROUGHPUT_BATCH, variants=["freeze+optimize"])
        add("export", "fp32", THROUGHPUT_BATCH)
        add("export", "bf16+cl", THROUGHPUT_BATCH, variants=["conservative"])
    return jobs


# ----------------------------------------------------------------------------------------------- one job


def _prepare(model: str, mode_name: str, batch: int, device_name: str) -> tuple[Any, Any, Any]:
    """The model prepared for the mode on the device, as the worker prepares it, and the backend request."""
    import torch

    from clsbench.backends import BackendRequest
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode

    device = torch.device(device_name)
    mode = parse_mode(mode_name)
    cuda = device.type == "cuda"
    major = torch.cuda.get_device_capability()[0] if cuda else 0
    ctx = mode.context(device, "inference", bf16_supported=torch.cuda.is_bf16_supported() if cuda else True,
                       tf32_supported=major >= 8)
    reason = mode.unsupported_reason(ctx)
    if reason:
        raise RuntimeError(f"mode unsupported here: {reason}")
    torch.backends.cudnn.benchmark = True  # the worker's default
    mode.configure(ctx)
    spec = get_model_spec(model)
    net = spec.build(seed=0).to(device).eval()
    prepared = mode.prepare(net, ctx)
    request = BackendRequest(model=model, mode=mode.name, batch_size=batch, input_size=spec.input_size,
                             device=device_name, seed=0, num_classes=1000)
    return prepared, request, device


class _Timer:
    """CUDA events around a region on a GPU; nothing on a CPU (which runs synchronously: the wall clock suffices)."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self.cuda = cuda
        self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) if cuda else None

    def start(self) -> None:
        if self._events:
            self._events[0].record()

    def stop(self) -> None:
        if self._events:
            self._events[1].record()

    def sync(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()

    def elapsed_ms(self) -> float | None:
        return self._events[0].elapsed_time(self._events[1]) if self._events else None


def _throughput(prepared: Any, request: Any) -> dict[str, Any]:
    import torch

    timer = _Timer(request.device_type == "cuda")
    images = request.example(seed=1).to(prepared.input_dtype).contiguous(memory_format=prepared.memory_format)
    with torch.inference_mode(), prepared.autocast(request.device_type):
        t0 = time.perf_counter()
        prepared.forward(images)
        timer.sync()
        first_s = time.perf_counter() - t0
        static = getattr(prepared.forward, "static_input", None)
        x = static if static is not None else images
        for _ in range(WARMUP_ITERATIONS):
            prepared.forward(x)
        timer.sync()
        iterations, block = 0, WARMUP_ITERATIONS
        t0 = time.perf_counter()
        timer.start()
        while True:
            for _ in range(block):
                prepared.forward(x)
            iterations += block
            timer.sync()
            if time.perf_counter() - t0 >= MIN_THROUGHPUT_S:
                break
        timer.stop()
        timer.sync()
        wall_s = time.perf_counter() - t0
    images_done = iterations * request.batch_size
    gpu_ms = timer.elapsed_ms()
    return {"first_call_s": first_s, "iterations": iterations, "wall_s": wall_s, "img_s": images_done / wall_s,
            "img_s_gpu_events": images_done / (gpu_ms / 1e3) if gpu_ms else None}


def _percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (as LoadGen takes it)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def _latency(prepared: Any, request: Any) -> dict[str, Any]:
    import torch

    cuda = request.device_type == "cuda"
    timer = _Timer(cuda)
    device = torch.device(request.device)
    base = request.example(seed=1).cpu().to(prepared.input_dtype)
    pool = [(base + 0.01 * i).contiguous(memory_format=prepared.memory_format) for i in range(HOST_INPUT_POOL)]
    if cuda:
        pool = [x.pin_memory() for x in pool]

    def one(i: int) -> tuple[float, float | None]:
        t0 = time.perf_counter_ns()
        x = pool[i % HOST_INPUT_POOL].to(device, non_blocking=True)
        timer.start()
        out = prepared.forward(x)
        timer.stop()
        out.to("cpu")
        timer.sync()
        return (time.perf_counter_ns() - t0) / 1e6, timer.elapsed_ms()

    wall: list[float] = []
    gpu: list[float] = []
    with torch.inference_mode(), prepared.autocast(request.device_type):
        first_ms, _ = one(0)
        for i in range(LATENCY_WARMUP_REQUESTS):
            one(i)
        t0 = time.perf_counter()
        while len(wall) < MIN_LATENCY_REQUESTS or time.perf_counter() - t0 < MIN_LATENCY_S:
            w, g = one(len(wall))
            wall.append(w)
            if g is not None:
                gpu.append(g)
    return {"first_call_s": first_ms / 1e3, "requests": len(wall), "p50_ms": _percentile(wall, 50),
            "p90_ms": _percentile(wall, 90), "p99_ms": _percentile(wall, 99), "mean_ms": statistics.fmean(wall),
            "gpu_p50_ms": _percentile(gpu, 50) if gpu else None}


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """One job in this process: prepare, apply the backend, parity, time. Returns the row."""
    import torch

    from clsbench.backends import ArtifactCache, BackendNotRun, apply_backend, backend_unsupported_reason, check_parity

    row: dict[str, Any] = dict(job)
    t0 = time.perf_counter()
    prepared, request, _ = _prepare(job["model"], job["mode"], job["batch"], job.get("device", "cuda"))
    reason = backend_unsupported_reason(job["backend"], request)
    if reason:
        return {**row, "status": "skipped", "reason": "unsupported_backend", "detail": reason}
    try:
        attempt_s = max(60.0, (job.get("limit_s", JOB_LIMIT_S) - JOB_OVERHEAD_S) / 2)
        ready, facts = apply_backend(job["backend"], prepared, request, cache=ArtifactCache(),
                                     variants=tuple(job["variants"]) if job.get("variants") else None,
                                     build_timeout_s=attempt_s)
    except BackendNotRun as exc:
        return {**row, **exc.record(), "job_s": time.perf_counter() - t0}
    row["backend_facts"] = facts
    row["parity"] = check_parity(ready, request)
    try:
        row["timing"] = _throughput(ready, request) if job["batch"] > 1 else _latency(ready, request)
        row["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - a failure at run time is this row's
        message = str(exc).splitlines()[0] if str(exc) else ""
        row.update(status="failed", reason="run_error", detail=f"{type(exc).__name__}: {message}"[:300])
    if request.device_type == "cuda":
        row["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
    row["job_s"] = time.perf_counter() - t0
    return row


# ----------------------------------------------------------------------------------------------- the driver


def _fmt(value: Any, spec: str) -> str:
    """``format(value, spec)``, or a dash as wide as the column for a missing value."""
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if value is None else format(value, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """The short table: one line per job, then the two figures that matter."""
    head = (f"{'model':<20} {'backend':<12} {'mode':<18} {'bs':>3} {'status':<8} {'build s':>7} {'load s':>6} "
            f"{'MB':>6} {'par.err':>8} {'top1%':>5} {'img/s':>8} {'p50 ms':>7} {'gpu p50':>7}  note")
    lines = [head, "-" * len(head)]
    for r in rows:
        facts, parity, timing = r.get("backend_facts") or {}, r.get("parity") or {}, r.get("timing") or {}
        mb = facts.get("artifact_bytes")
        note = r.get("detail") or ""
        if len(facts.get("attempts") or []) > 1 or r.get("reason") == "build_crash":
            note = "; ".join(f"{a['variant']}: {'ok' if a['ok'] else a['reason']}" for a in facts.get("attempts", []))
            note = note or (r.get("detail") or "")
        if r.get("variants"):
            note = f"variant {','.join(r['variants'])}. {note}"
        if parity and not parity.get("passed"):
            note = f"PARITY FAILED. {note}"
        if facts.get("runtime", {}).get("provider"):
            note = f"{facts['runtime']['provider']}. {note}"
        status = r.get("status") if r.get("status") != "failed" else r.get("reason", "failed")
        lines.append(
            f"{r['model']:<20} {r['backend']:<12} {r['mode']:<18} {r['batch']:>3} {str(status)[:8]:<8} "
            f"{_fmt(facts.get('build_s'), '7.1f')} {_fmt(facts.get('load_s'), '6.2f')} "
            f"{_fmt(mb / 1e6 if mb else None, '6.1f')} {_fmt(parity.get('max_abs_err_rel'), '8.1e')} "
            f"{_fmt(parity.get('top1_agreement_pct'), '5.0f')} {_fmt(timing.get('img_s'), '8.0f')} "
            f"{_fmt(timing.get('p50_ms'), '7.3f')} {_fmt(timing.get('gpu_p50_ms'), '7.3f')}  {note[:110]}")
    lines.append("")
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model and r.get("status") == "ok"]
        passed = [r for r in mine if (r.get("parity") or {}).get("passed")]
        eager = next((r for r in mine if r["backend"] == "eager" and r["mode"] == "bf16+cl"
                      and r["batch"] > LATENCY_BATCH), None)
        thr = [r for r in passed if r["batch"] > LATENCY_BATCH and r["mode"].startswith("bf16")]
        lat = [r for r in passed if r["batch"] == LATENCY_BATCH]
        if thr:
            best = max(thr, key=lambda r: r["timing"]["img_s"])
            ratio = best["timing"]["img_s"] / eager["timing"]["img_s"] if eager else None
            lines.append(f"{model}: fastest bs{best['batch']} with parity passed: {best['backend']} {best['mode']} "
                         f"{best['timing']['img_s']:,.0f} img/s = {_fmt(ratio, '.2f')}x eager bf16+cl")
        if lat:
            best = min(lat, key=lambda r: r["timing"]["p50_ms"])
            verdict = "meets" if best["timing"]["p50_ms"] <= GOAL_P50_MS else "misses"
            lines.append(f"{model}: best bs1 p50 with parity passed: {best['backend']} {best['mode']} "
                         f"{best['timing']['p50_ms']:.3f} ms ({verdict} the {GOAL_P50_MS} ms goal)")
    return "\n".join(lines)


def _skip_reason(job: dict[str, Any]) -> str | None:
    """The backend's skip reason, found here without a job process (and without touching the GPU)."""
    from clsbench.backends import BackendRequest, backend_unsupported_reason
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode

    request = BackendRequest(model=job["model"], mode=parse_mode(job["mode"]).name, batch_size=job["batch"],
                             input_size=get_model_spec(job["model"]).input_size, device=job.get("device", "cuda"))
    return backend_unsupported_reason(job["backend"], request)


def drive(models: list[str], work: Path, budget_s: float, device: str = "cuda",
          throughput_batch: int = THROUGHPUT_BATCH) -> int:
    work.mkdir(parents=True, exist_ok=True)
    rows_path = work / "backends.jsonl"
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    logs = work / "jobs"
    logs.mkdir(exist_ok=True)
    for index, job in enumerate(plan(models, device, throughput_batch)):
        left = budget_s - (time.perf_counter() - t_start)
        label = f"{job['model']} {job['backend']} {job['mode']} bs{job['batch']}"
        reason = _skip_reason(job)
        if reason:
            row = {**job, "status": "skipped", "reason": "unsupported_backend", "detail": reason}
        elif left < MIN_JOB_S:
            row = {**job, "status": "not_run", "detail": f"the {budget_s:g} s budget was spent"}
        else:
            limit = min(JOB_LIMIT_S, left)
            log = logs / f"{index:02d}-{job['model']}-{job['backend']}-{job['mode']}-bs{job['batch']}.log"
            t0 = time.perf_counter()
            try:
                done = subprocess.run([sys.executable, __file__, "--one", json.dumps({**job, "limit_s": limit})],
                                      capture_output=True,
                                      text=True, timeout=limit, env=os.environ.copy())
                with open(log, "w", encoding="utf-8") as f:
                    f.write(done.stdout + "\n--- stderr ---\n" + done.stderr)
                answer = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
                if answer:
                    row = json.loads(answer[-1][len("RESULT "):])
                else:
                    tail = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no output"]
                    row = {**job, "status": "failed", "reason": "job_crash",
                           "detail": f"the job process ended with code {done.returncode}: {tail[0][:200]}"}
            except subprocess.TimeoutExpired:
                row = {**job, "status": "failed", "reason": "job_timeout", "detail": f"killed after {limit:.0f} s"}
            row["job_wall_s"] = time.perf_counter() - t0
        rows.append(row)
        with open(rows_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print(f"[{time.perf_counter() - t_start:5.0f} s] {label}: {row.get('status')} {row.get('reason') or ''}",
              flush=True)
    text = table(rows)
    (work / "table.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50", help="comma-separated model names")
    parser.add_argument("--work", default="/tmp/verify-backends", help="folder for rows, logs and the table")
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop starting jobs after this long")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu to try the script itself on a small model")
    parser.add_argument("--throughput-batch", type=int, default=THROUGHPUT_BATCH, help="the throughput batch")
    parser.add_argument("--one", help="run one job (JSON) in this process and print its row")
    args = parser.parse_args()
    if args.one:
        try:
            row = run_one(json.loads(args.one))
        except Exception as exc:  # noqa: BLE001 - reported as the row's failure
            row = {**json.loads(args.one), "status": "failed", "reason": "job_error",
                   "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}
        print("RESULT " + json.dumps(row, default=str), flush=True)
        return 0
    return drive([m for m in args.models.split(",") if m], Path(args.work), args.budget_s, args.device,
                 args.throughput_batch)


if __name__ == "__main__":
    sys.exit(main())
