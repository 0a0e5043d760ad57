#!/usr/bin/env bash
# One device call for issue 33 (`serve --backend`), from the repository root with the LoadGen wheel (Python 3.12)
# carried in .whl/:
#   OUT=/some/folder MODEL=resnet50 bash benchmarks/serve_backends.sh
#  0. (TESTS=1) the serving GPU tests, `-m gpu`: $TEST_FILES (default tests/test_serve_backends.py, test_serving.py
#     and test_serving_overlap.py);
#  1. `serve --backend export-frozen` with a CUDA graph per bucket and instance: offline and server at
#     p99 <= 15 ms over max batch $MAXB (buckets $BUCKETS and each max batch), 2 instances, max delay $DELAY ms;
#     the artifacts (one per bucket) go to a cache that step 2 reads;
#  1b. (NO_OVERLAP=1) the same serve with --no-overlap and 1 instance (cache hits), the A/B of the serving loop;
#  2. `run --backend export-frozen` infer-throughput at the largest buckets, 3 fresh processes: the offline figure
#     of the same artifacts outside the server (cache hits: no build);
#  3. from the files alone: show (text, CSV).
# Scaled-down minimums (say so with the figures): every LoadGen run >= 4 s (MLPerf's are 600 s); query minimums are
# MLPerf's; the search stops at a 3% bracket. Steps run under what is left of a $GUARD_S s guard; a serve that runs
# out gets SIGINT (its finished LoadGen runs are kept). Everything goes into $OUT/serve-backends-$MODEL.tgz, named
# by the card; the short table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODEL=${MODEL:-resnet50}; MODE=${MODE:-fp16+cl+cudagraph}; BACKEND=${BACKEND:-export-frozen}
MAXB=${MAXB:-128,256}; BUCKETS=${BUCKETS:-32,64,128}; DELAY=${DELAY:-2}; INSTANCES=${INSTANCES:-2}
RUN_BATCHES=${RUN_BATCHES:-128,256}; GUARD_S=${GUARD_S:-540}; TESTS=${TESTS:-1}; NO_OVERLAP=${NO_OVERLAP:-0}
TEST_FILES=${TEST_FILES:-tests/test_serve_backends.py tests/test_serving.py tests/test_serving_overlap.py}
T0=$(date +%s)
left() { local l=$(( GUARD_S - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/mlcommons_loadgen-*.whl 2>&1 | tail -n 2
export PYTHONPATH=src:tests:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
source "$(dirname "$0")/card.sh"
GPU=$(card_dir)
NAME=serve-backends-$MODEL-$(date -u +%Y%m%dT%H%M%SZ)
W=$(mktemp -d)/$GPU/$NAME; mkdir -p "$W"
export CLSBENCH_CACHE=/tmp/clsbench-artifacts CLSBENCH_DB="$W/index.sqlite3"
git rev-parse HEAD >"$W/commit.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$W/summary.txt"
if [ "$TESTS" = 1 ]; then
    # shellcheck disable=SC2086 # TEST_FILES is a list of paths
    timeout -k 10 -s INT 170 python3 -m pytest -q -p no:cacheprovider -m gpu $TEST_FILES 2>&1 | tail -n 15 | tee "$W/gpu-tests.txt" | tail -n 3 | tee -a "$W/summary.txt"
fi
step() { local name=$1; shift; local t=$(date +%s)
         timeout -k 20 -s INT "$(left)" python3 -m clsbench "$@" >"$W/$name.txt" 2>"$W/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s): clsbench $*" \
             | tee -a "$W/summary.txt"; }
step serve serve --model "$MODEL" --device cuda --mode "$MODE" --backend "$BACKEND" --scenario offline,server \
    --max-batch "$MAXB" --buckets "$BUCKETS" --max-delay-ms "$DELAY" --instances "$INSTANCES" \
    --latency-bound-ms 15 --min-duration-s 4 --resolution 0.03 -o "$W/serve.json"
if [ "$NO_OVERLAP" = 1 ]; then
    step serve-no-overlap serve --model "$MODEL" --device cuda --mode "$MODE" --backend "$BACKEND" \
        --scenario offline,server --max-batch "$MAXB" --buckets "$BUCKETS" --max-delay-ms "$DELAY" --instances 1 \
        --no-overlap --latency-bound-ms 15 --min-duration-s 4 --resolution 0.03 -o "$W/serve-no-overlap.json"
fi
step run run --model "$MODEL" --device cuda --mode "${MODE%+cudagraph}" --backend "$BACKEND" \
    --workload infer-throughput --batch-size "$RUN_BATCHES" --repeats 3 --no-telemetry -o "$W/run.json"
for f in "$W"/serve.json "$W"/serve-no-overlap.json "$W"/run.json; do
    [ -s "$f" ] || continue
    python3 -m clsbench show "$f" >"${f%.json}.show" 2>&1
    python3 -m clsbench show "$f" --format csv >"${f%.json}.csv" 2>&1
done
tail -n 60 "$W/serve.log" >"$W/serve-progress.txt" 2>/dev/null
(cd "$(dirname "$(dirname "$W")")" && tar czf "$OUT/$NAME.tgz" "$GPU/$NAME")
echo "-- files: $OUT/$NAME.tgz ($GPU/$NAME)"
cat "$W/summary.txt"
[ -s "$W/serve.json" ] && sed -n '1,/^fp/p' "$W/serve.show" | head -n 12
for f in "$W"/serve.show "$W"/serve-no-overlap.show; do
    grep -A 12 "side by side\|^[a-z0-9+]* @" "$f" 2>/dev/null | head -n 30
    grep -A 4 "server: which setting" "$f" 2>/dev/null
done
[ -s "$W/run.show" ] && head -n 12 "$W/run.show"
