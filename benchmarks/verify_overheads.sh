#!/usr/bin/env bash
# One device call: telemetry overhead (on vs off, ResNet-50 and MobileNetV3 at batch 256) and the launch-bound
# variance experiments (overlap off; cuDNN autotuning off; CPU pinning with taskset) on batch-1 latency.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
common=(--workload infer-throughput,train --mode amp-bf16+cl --batch-size 256 --device cuda -q --no-probe)
python3 -m clsbench run --model resnet50,mobilenet_v3_large "${common[@]}" -o "$OUT/telemetry-on.json" 2>/dev/null | head -8
python3 -m clsbench run --model resnet50,mobilenet_v3_large "${common[@]}" --no-telemetry -o "$OUT/telemetry-off.json" 2>/dev/null | head -8
lat=(--model mobilenet_v3_large --workload infer-latency --mode fp32 --batch-size 1 --repeats 5 --device cuda -q --no-probe)
python3 -m clsbench run "${lat[@]}" -o "$OUT/lat-default.json" 2>/dev/null | sed -n 3,5p
python3 -m clsbench run "${lat[@]}" --no-overlap -o "$OUT/lat-no-overlap.json" 2>/dev/null | sed -n 3,5p
python3 -m clsbench run "${lat[@]}" --no-cudnn-benchmark -o "$OUT/lat-no-autotune.json" 2>/dev/null | sed -n 3,5p
taskset -c 2-5 python3 -m clsbench run "${lat[@]}" -o "$OUT/lat-pinned.json" 2>/dev/null | sed -n 3,5p
