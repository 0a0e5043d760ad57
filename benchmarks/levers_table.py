"""One line per result file of benchmarks/pipeline_levers.sh: img/s, share of the synthetic cell, step and data wait
per batch, the pipeline's switch interval and stream priority, each stage thread's work and CPU per batch while
training, and each stage's GPU busy time alone.

    python benchmarks/levers_table.py DIR [SYNTHETIC_IMG_S]
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def row(path: Path) -> dict[str, object]:
    result = json.loads(path.read_text())
    m = result["measurements"][0]
    out: dict[str, object] = {"cell": path.stem, "status": m["status"], "img_s": m["summary"].get("throughput_img_s")}
    if not m.get("repeats"):
        return out
    rep = m["repeats"][0]
    samples = rep.get("samples") or {}
    out["step_ms"] = median(samples.get("step_ms"))
    out["wait_ms"] = median(samples.get("data_wait_ms"))
    data = rep.get("data") or {}
    pipeline = data.get("pipeline") or {}
    out["switch"] = pipeline.get("switch_interval_ms")
    out["threads_n"] = pipeline.get("decode_threads")
    out["cpu_share"] = pipeline.get("cpu_share_mean")
    out["priority"] = pipeline.get("stream_priority")
    decoder = pipeline.get("decoder_stream")
    if decoder:
        out["priority"] = f"{out['priority']}({decoder['priority'] if decoder.get('priority') is not None else 'x'})"
        if decoder.get("error"):
            out["decoder_error"] = decoder["error"]
    stages = []
    for s in pipeline.get("running_stages") or []:
        n = max(1, s.get("batches") or 0)
        stages.append(f"{s['stage']} {s['work_ns'] / n / 1e6:.1f}/{s['cpu_ns'] / n / 1e6:.1f}")
    out["threads"] = " ".join(stages)
    busy = ((data.get("stages") or {}).get("busy")) or {}
    parts = []
    if busy.get("decode"):
        parts.append(f"decode {fmt(busy['decode'].get('gpu_busy_ms_per_iteration'))}")
    for name, record in (busy.get("augment") or {}).items():
        parts.append(f"{name} {fmt(record.get('gpu_busy_ms_per_iteration'))}")
    out["busy"] = " ".join(parts)
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    rows = [row(p) for p in sorted(folder.glob("*.json"))]
    ceiling = next((r["img_s"] for r in rows if r["cell"] == "synthetic"), None)
    if ceiling is None and len(sys.argv) > 2:  # the synthetic figure of another file, e.g. the same call's diagnose
        ceiling = float(sys.argv[2])
    print(f"{'cell':<24} {'img/s':>7} {'share':>6} {'step':>6} {'wait':>6} {'switch':>6} {'prio':>8}  "
          "threads work/CPU ms per batch; GPU busy ms per batch alone")
    for r in rows:
        share = r["img_s"] / ceiling * 100 if ceiling and r.get("img_s") else None
        print(f"{r['cell']:<24} {fmt(r.get('img_s'), ',.0f'):>7} {fmt(share, '.1f'):>6} {fmt(r.get('step_ms')):>6} "
              f"{fmt(r.get('wait_ms')):>6} {fmt(r.get('switch'), 'g'):>6} {r.get('priority') or '-':>8}  "
              f"{r.get('threads') or r['status']}; {r.get('busy') or ''}"
              + (f"; {r['threads_n']} decode threads" if r.get("threads_n") else "")
              + (f", host share {r['cpu_share']:.2f}" if r.get("cpu_share") is not None else ""))
        if r.get("decoder_error"):
            print(f"{'':<24} decoder stream: {r['decoder_error']}")


if __name__ == "__main__":
    main()
