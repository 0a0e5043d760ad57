#!/usr/bin/env bash
# One device call for issue 5, on one GPU:
#  1. tune ResNet-50 for infer-latency (batch 1), infer-throughput and train, each with a narrowed search so
#     that all three fit (the baseline they must beat, amp-bf16+cl eager at batch 256, is measured by the sweeps);
#  2. batch-size sweeps (amp-bf16+cl, 1 repeat) of ResNet-50 and MobileNetV3-Large, infer-throughput and train,
#     with their knees.
# Every step runs under what is left of a 590 s guard; a search cut short still saves what it measured.
# The device tool returns at most 8 files: result files go into one tarball, the printed tables into one text file.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=$(mktemp -d); T0=$(date +%s)
left() { echo $(( 590 - ($(date +%s) - T0) )); }
step() { local name=$1; shift; local t=$(date +%s)
         timeout -s INT "$(left)" python3 -m clsbench "$@" -o "$W/$name.json" >"$W/$name.txt" 2>"$W/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)" | tee -a "$OUT/summary.txt"; }
common=(--model resnet50 --device cuda --no-max-autotune --timeout 300 -q)
step tune-resnet50-infer-latency tune "${common[@]}" --workload infer-latency --modes bf16+cl \
    --variants cudagraph,compile+cudagraph --min-time 2 --iterations 500
step tune-resnet50-infer-throughput tune "${common[@]}" --no-probe --workload infer-throughput --modes bf16+cl \
    --batch-sizes 256,512 --variants compile
step tune-resnet50-train tune "${common[@]}" --no-probe --workload train --modes amp-bf16+cl --batch-sizes 256 \
    --variants compile
sw=(--mode amp-bf16+cl --device cuda --repeats 1 --min-time 0.5 --no-probe -q)
step sweep-resnet50-infer-throughput sweep --model resnet50 --workload infer-throughput "${sw[@]}" \
    --batch-sizes 16,32,64,128,256,512,1024
step sweep-resnet50-train sweep --model resnet50 --workload train "${sw[@]}" --batch-sizes 16,32,64,128,256,512
step sweep-mobilenet_v3_large-infer-throughput sweep --model mobilenet_v3_large --workload infer-throughput "${sw[@]}" \
    --batch-sizes 16,32,64,128,256,512,1024
step sweep-mobilenet_v3_large-train sweep --model mobilenet_v3_large --workload train "${sw[@]}" \
    --batch-sizes 16,32,64,128,256,512
(cd "$W" && tar czf "$OUT/tune-sweep-results.tgz" ./*.json ./*.txt ./*.log)
for f in "$W"/*.txt; do echo "-- $(basename "$f")"; grep -v '^$' "$f" | tail -n 16; done >>"$OUT/summary.txt"
cat "$OUT/summary.txt"
