#!/usr/bin/env bash
# One device call (issue 5 and issue 3's overhead check), ResNet-50 on one GPU:
#  1. amp-bf16+cl eager at batch 256, infer-throughput and train, 3 repeats, with and without telemetry: the
#     baselines the tunes must beat, and the telemetry overhead (issue 3: within 1%);
#  2. tune infer-latency (batch 1), infer-throughput and train, each with a narrowed search so that all three fit.
# Every step runs under what is left of a 590 s guard; a tune cut short still saves what it measured.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
left() { echo $(( 590 - ($(date +%s) - T0) )); }
step() { local name=$1; shift; local t=$(date +%s)
         timeout -s INT "$(left)" python3 -m clsbench "$@" >"$OUT/$name.txt" 2>"$OUT/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)"; }
base=(--model resnet50 --workload infer-throughput,train --mode amp-bf16+cl --batch-size 256 --device cuda -q)
step telemetry-on run "${base[@]}" -o "$OUT/resnet50-baseline-telemetry-on.json"
step telemetry-off run "${base[@]}" --no-telemetry --no-probe -o "$OUT/resnet50-baseline-telemetry-off.json"
common=(--model resnet50 --device cuda --no-max-autotune --timeout 300 --no-probe -q)
step tune-latency tune "${common[@]}" --workload infer-latency --modes bf16+cl \
    --variants cudagraph,compile+cudagraph --min-time 2 --iterations 500 -o "$OUT/tune-resnet50-infer-latency.json"
step tune-throughput tune "${common[@]}" --workload infer-throughput --modes bf16+cl --batch-sizes 256,512 \
    --variants compile -o "$OUT/tune-resnet50-infer-throughput.json"
step tune-train tune "${common[@]}" --workload train --modes amp-bf16+cl --batch-sizes 256 \
    --variants compile -o "$OUT/tune-resnet50-train.json"
for f in telemetry-on telemetry-off; do echo "-- $f"; sed -n 1,6p "$OUT/$f.txt"; done
for f in tune-latency tune-throughput tune-train; do echo "-- $f"; tail -n 14 "$OUT/$f.txt"; tail -n 2 "$OUT/$f.log"; done
