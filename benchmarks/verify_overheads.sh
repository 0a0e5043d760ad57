#!/usr/bin/env bash
# One device call (issue 2, launch-bound variance): MobileNetV3-Large fp32 batch-1 latency, 5 fresh processes
# each, under the defaults (gated overlap since commit 486e8ff), without it (--no-overlap), without cuDNN
# autotuning, and pinned with taskset.
# Each result carries summary.host_cpu (steal, other load, dispatch calibration per repeat): compare the spread
# with the calibration's spread. Returns 4 JSON files and one summary (the device returns at most 8 files).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
lat=(--model mobilenet_v3_large --workload infer-latency --mode fp32 --batch-size 1 --repeats "${REPEATS:-5}" --device cuda -q
     --no-probe)
run() { local name=$1; shift; "$@" -o "$OUT/lat-$name.json" >/dev/null 2>&1; echo "== $name rc=$?"; }
run default python3 -m clsbench run "${lat[@]}"
run no-overlap python3 -m clsbench run "${lat[@]}" --no-overlap
run no-autotune python3 -m clsbench run "${lat[@]}" --no-cudnn-benchmark
run pinned taskset -c 2-5 python3 -m clsbench run "${lat[@]}"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("lat-*.json")):
    m = json.loads(f.read_text())["measurements"][0]
    h = m["summary"].get("host_cpu") or {}
    p50 = [round(sorted(r["samples"]["wall_ms"])[len(r["samples"]["wall_ms"]) // 2], 2) for r in m["repeats"]]
    cal = [round((r.get("host_cpu") or {}).get("calibration_us_per_op") or 0, 2) for r in m["repeats"]]
    print(f"{f.stem:16} spread {m['summary'].get('spread_pct') or 0:5.1f}%  p50 {p50}  calibration {cal} "
          f"(spread {h.get('calibration_spread_pct') or 0:.0f}%)")
PY
