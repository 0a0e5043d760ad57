#!/usr/bin/env bash
# Issue #2 verification on the GPU machine, in one call: GPU tests, fidelity against the bare loop, finishing the
# interrupted seed-suite run with --resume, and the launch-bound cells again with the current defaults.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
python3 -m pytest -q -m gpu tests 2>&1 | tail -4 | tee "$OUT/gpu-tests.log"
echo "gpu tests: $(( $(date +%s) - t0 )) s"
{ python3 benchmarks/bare_loop.py --workload infer --batch-size 256 | tail -1
  python3 benchmarks/bare_loop.py --workload train --batch-size 256 --iterations 50 | tail -1; } | tee "$OUT/bare_loop.jsonl"
python3 -m clsbench run --model resnet50 --workload infer-throughput,train --mode amp-bf16+cl --batch-size 256 \
  --device cuda -o "$OUT/fidelity.json" -q 2>/dev/null
if [ -f .carry/seed.json ]; then
  cp .carry/seed.json "$OUT/seed.json"
  t1=$(date +%s); python3 -m clsbench run --resume "$OUT/seed.json" -q 2>/dev/null | tail -3
  echo "resume: $(( $(date +%s) - t1 )) s"
fi
t1=$(date +%s)
python3 -m clsbench run --model resnet50,mobilenet_v3_large --workload train,infer-latency --mode fp32,amp-bf16 \
  --device cuda -o "$OUT/launch-bound.json" -q 2>/dev/null
echo "launch-bound subset: $(( $(date +%s) - t1 )) s; total $(( $(date +%s) - t0 )) s"
