#!/usr/bin/env bash
# A one-minute check of the telemetry, probe and busy-time paths on a GPU (used when little device time is left).
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
python3 -m clsbench env --device cuda | tail -10
python3 -m clsbench run --model resnet50 --workload infer-throughput,train --mode amp-bf16+cl --batch-size 256 \
  --repeats 1 --device cuda -o "$OUT/telemetry-check.json" -q 2>&1 | tail -12
python3 -m clsbench run --model mobilenet_v3_large --workload infer-latency --mode fp32 --batch-size 1 --repeats 2 \
  --iterations 300 --min-time 1 --device cuda -o "$OUT/latency-check.json" -q 2>&1 | tail -8
