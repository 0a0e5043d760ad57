#!/usr/bin/env bash
# One device call for issue 35's missed ResNet-50 goals: measure batch-1 latency again, then record the kernel
# breakdown (`clsbench profile`) of the best configuration of each goal, so the figures say what stands in the way.
#   OUT=/some/folder bash benchmarks/goals_profile.sh
#  1. latency - `run --workload infer-latency --batch-size 1`, 3 fresh processes, the default protocol (>= 300 timed
#               requests and >= 1 s a repeat): eager with a CUDA graph in fp16+cl and bf16+cl, and export-frozen
#               with a CUDA graph in fp16+cl (goal: p50 <= 0.45 ms, spread <= 3%);
#  2. profile of the best inference configuration tune found on the H100 (fp16+cl+compile+freeze, batch 512;
#     goal >= 28,000 img/s on an H100), of the best training step (amp-bf16+cl+compile+cudagraph, batch 256; goal
#     >= 8,000 img/s on an H200) and of the batch-1 export-frozen replay (the artifact step 1 built: a cache hit).
# Every step runs under what is left of a GUARD_S guard (default 560 s); the first is skipped by PARTS="profile".
# Everything goes into $OUT/goals-profile.tgz, named by the card (h100/ or h200/); the short table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
GUARD_S=${GUARD_S:-560}; PARTS=" ${PARTS:-latency profile} "
T0=$(date +%s)
left() { local l=$(( GUARD_S - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
source "$(dirname "$0")/card.sh"
GPU=$(card_dir)
NAME=goals-profile-resnet50-$(date -u +%Y%m%dT%H%M%SZ)
W=$(mktemp -d)/$GPU/$NAME; mkdir -p "$W"
export CLSBENCH_CACHE=/tmp/clsbench-artifacts CLSBENCH_DB="$W/index.sqlite3"
echo "${CLSBENCH_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" >"$W/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$W/summary.txt"
step() { local name=$1; shift; local t=$(date +%s)
         if (( $(left) < 40 )); then echo "== $name: skipped, $(left) s left of the guard" | tee -a "$W/summary.txt"; return; fi
         timeout -k 20 -s INT "$(left)" python3 -m clsbench "$@" >"$W/$name.txt" 2>"$W/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s): clsbench $*" \
             | tee -a "$W/summary.txt"; }
if [[ $PARTS == *" latency "* ]]; then
    step latency-eager run --model resnet50 --device cuda --workload infer-latency --batch-size 1 \
        --mode fp16+cl+cudagraph,bf16+cl+cudagraph --repeats 3 -o "$W/latency-eager.json"
    step latency-export-frozen run --model resnet50 --device cuda --workload infer-latency --batch-size 1 \
        --mode fp16+cl+cudagraph --backend export-frozen --repeats 3 -o "$W/latency-export-frozen.json"
fi
if [[ $PARTS == *" profile "* ]]; then
    step profile-infer profile --model resnet50 --device cuda --workload infer-throughput \
        --mode fp16+cl+compile+freeze --batch-size 512 -o "$W/profile-infer-b512"
    step profile-train profile --model resnet50 --device cuda --workload train \
        --mode amp-bf16+cl+compile+cudagraph --batch-size 256 -o "$W/profile-train-b256"
    step profile-latency profile --model resnet50 --device cuda --workload infer-latency \
        --mode fp16+cl+cudagraph --backend export-frozen --batch-size 1 -o "$W/profile-latency-b1"
fi
for f in "$W"/latency-*.json; do [ -s "$f" ] && python3 -m clsbench show "$f" >"${f%.json}.show" 2>&1; done
for d in "$W"/profile-*/; do [ -f "$d/trace.json" ] && gzip "$d/trace.json"; done
(cd "$(dirname "$(dirname "$W")")" && tar czf "$OUT/$NAME.tgz" "$GPU/$NAME")
echo "-- files: $OUT/$NAME.tgz ($GPU/$NAME)"
cat "$W/summary.txt"
for f in "$W"/latency-*.show; do [ -s "$f" ] && head -n 14 "$f"; done
for n in infer train latency; do [ -s "$W/profile-$n.txt" ] && head -n 30 "$W/profile-$n.txt"; done
