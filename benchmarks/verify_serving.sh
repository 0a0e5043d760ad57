#!/usr/bin/env bash
# One device call for issue 17 (serving, `clsbench serve`), on one H200, within 8 minutes, from the repository root
# with the LoadGen wheel carried in .whl/ (Python 3.12):
#   OUT=/some/folder bash benchmarks/verify_serving.sh
#  0. install the carried LoadGen wheel, run the serving GPU tests and the host loop's ceiling without a model
#     (benchmarks/serving_host_overhead.py);
#  1. ResNet-50 bf16+cl with a CUDA graph per bucket: offline, single-stream and server at p99 <= 15 ms, over
#     max batch 64,128 x max delay 2,5 ms x 2 instances (the search names the best setting and why);
#  2. the same model eager (no graphs), one setting: what the host side costs;
#  3. bf16+cl+compile with graphs per bucket, one setting;
#  4. from the files alone: `show` (table, CSV), `compare` (eager against graphs), `report` (HTML), `history`.
# Scaled-down minimums (say so with the figures): every LoadGen run >= 4 s (clsbench's quick look is 10 s, MLPerf's
# 600 s: --mlperf); query minimums are MLPerf's (offline 24,576 samples; server: LoadGen's 100, plus its
# early-stopping rule for p99); the search stops at a 3% bracket. Phases 0-3 run under what is left of a 440 s
# guard; a phase that runs out gets SIGINT (serve's Ctrl-C: the finished LoadGen runs are kept). Everything goes
# into $OUT/serving.tgz (result files, LoadGen logs, tables, CSV, comparison, report, logs); the short table of the
# issue's figures is printed last.
set -uo pipefail
shopt -s nullglob
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
W=$(mktemp -d); T0=$(date +%s)
GUARD_S=440
left() { local l=$(( GUARD_S - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/mlcommons_loadgen-*.whl 2>&1 | tail -n 2
export PYTHONPATH=src:tests:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export CLSBENCH_DB="$W/index.sqlite3"  # the history index of this call only
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$W/summary.txt"
timeout -k 10 -s INT 90 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_serving.py 2>&1 | tail -n 3 \
    | tee -a "$W/summary.txt"
# The serving loop's own ceiling on this host (no model; 3 ms of GIL-free "GPU" time per batch, 2 instances).
timeout -k 10 -s INT 30 python3 benchmarks/serving_host_overhead.py --scenario Server --target-qps 20000 \
    --seconds 3 --max-batch 64 --max-delay-ms 2 --instances 2 --work-us 3000 2>&1 | tee -a "$W/summary.txt"
step() { local name=$1; shift; local t=$(date +%s)
         timeout -k 20 -s INT "$(left)" python3 -m clsbench serve --model resnet50 --device cuda \
             --latency-bound-ms 15 --min-duration-s 4 --resolution 0.03 "$@" -o "$W/$name.json" \
             >"$W/$name.txt" 2>"$W/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)" | tee -a "$W/summary.txt"; }
step graphs --mode bf16+cl --cuda-graphs --scenario offline,single-stream,server --max-batch 64,128 \
    --max-delay-ms 2,5 --instances 2
step eager --mode bf16+cl --scenario offline,single-stream,server --max-batch 64 --max-delay-ms 2 --instances 2
step compile --mode bf16+cl+compile --cuda-graphs --scenario offline,server --max-batch 64 --max-delay-ms 2 \
    --instances 2
# From the files alone (no GPU needed): what show, compare, report and history make of them.
files=(); for name in graphs eager compile; do [ -s "$W/$name.json" ] && files+=("$W/$name.json"); done
for f in "${files[@]}"; do
    python3 -m clsbench show "$f" >"${f%.json}.show" 2>&1
    python3 -m clsbench show "$f" --format csv >"${f%.json}.csv" 2>&1
done
if [ -s "$W/eager.json" ] && [ -s "$W/graphs.json" ]; then
    python3 -m clsbench compare "$W/eager.json" "$W/graphs.json" >"$W/compare.txt" 2>&1
    echo "== compare eager graphs rc=$?" >>"$W/summary.txt"
fi
if [ ${#files[@]} -gt 0 ]; then
    python3 -m clsbench report "${files[@]}" -o "$W/report.html" >>"$W/summary.txt" 2>&1
fi
python3 -m clsbench history >"$W/history.txt" 2>&1
for f in "$W"/*.log; do echo "-- $(basename "$f")"; tail -n 40 "$f"; done >"$W/progress.txt"
for f in "$W"/*.show; do echo "-- $(basename "$f")"; cat "$f"; done >"$W/tables.txt"
python3 benchmarks/serve_summary.py "$W"/graphs.json "$W"/eager.json "$W"/compile.json >"$W/figures.txt" 2>&1
(cd "$W" && tar czf "$OUT/serving.tgz" ./*)
grep -A12 "and why:" "$W/tables.txt" | head -n 30
head -n 12 "$W/compare.txt" 2>/dev/null
cat "$W/summary.txt"
echo "(total $(( $(date +%s) - T0 )) s; everything is in $OUT/serving.tgz)"
cat "$W/figures.txt"
