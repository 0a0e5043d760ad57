#!/usr/bin/env bash
# One device call: the seed suite with telemetry, probe and busy time, timed; must finish inside the 10-minute call.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
timeout -s INT 585 python3 -m clsbench run --suite seed --device cuda -o "$OUT/seed-suite.json" 2>"$OUT/progress.log"
echo "rc=$? seed suite: $(( $(date +%s) - t0 )) s"
