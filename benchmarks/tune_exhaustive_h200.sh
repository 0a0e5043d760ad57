#!/usr/bin/env bash
# Issue 18 (not run yet): the default `clsbench tune` against `clsbench tune --exhaustive` for one model and workload
# on one GPU, then benchmarks/tune_vs_exhaustive.py (the gap of the default winner to the exhaustive best, within
# 3% or not, both winners confirmed or not, both search times).
#
#   bash benchmarks/tune_exhaustive_h200.sh MODEL WORKLOAD [DIR]
#   e.g. bash benchmarks/tune_exhaustive_h200.sh resnet50 infer-throughput
#        bash benchmarks/tune_exhaustive_h200.sh mobilenet_v3_large infer-throughput
#
# The exhaustive search takes hours (every mode at every batch size at the full stop rule, every family compiled,
# frozen and max-autotuned, every backend), far more than one device call of at most 10 minutes. So every call
# does what fits under a guard of LIMIT_S seconds (default 540) and stops the running search with SIGINT, which saves
# everything finished; the next call continues it with `clsbench tune --resume FILE` (its candidates measured
# before are taken from the file; the budget counts what was spent before). Several calls:
#   1. first call, without DIR: makes benchmarks/results/<card>/tune-vs-exhaustive-<UTC time>/, runs the default
#      tune (its default 10-minute budget: itself resumed over two calls if the guard stops it) into default.json,
#      then the exhaustive tune (--exhaustive --budget $EXHAUSTIVE_BUDGET, default 6h: generous, but a cap) into
#      exhaustive.json; with $OUT set the directory is copied to $OUT/<its name>/;
#   2. copy that directory back into benchmarks/results/<card>/ of the working tree (the device machine starts from a
#      copy of the tree each call: untracked files travel), then call again with DIR, e.g.
#        bash benchmarks/tune_exhaustive_h200.sh resnet50 infer-throughput \
#            benchmarks/results/h200/tune-vs-exhaustive-20261202-013000
#      which resumes whichever search is not finished (a file without `search_s`); repeat until both are finished;
#   3. once both are, every call prints the comparison (also saved as comparison.txt) and the two tables.
# DEVICE (default cuda) is the device of both searches; DEVICE=cpu runs the pair on this machine's processor, e.g.
#   DEVICE=cpu TUNE_ARGS="--input-size 64" LIMIT_S=7000 bash benchmarks/tune_exhaustive_h200.sh resnet18 infer-throughput
# (results under benchmarks/results/cpu/; the CPU's default budget is 3 minutes).
# TUNE_ARGS (default empty) go to both new searches alike, to narrow the pair the same way, e.g.
#   TUNE_ARGS="--no-max-autotune --backend export" (a full ResNet-50 exhaustive search on an H200 is estimated, not
#   measured, at 2-3 hours: 48 eager cells, 36 compiles, 12 frozen compiles, 12 max-autotune compiles at about 5
#   minutes each, 32 backend builds).
# A candidate that is interrupted is measured again from its start on the next call, so no single candidate may
# take longer than one call (a max-autotune compile of ResNet-50 takes a few minutes: it fits). Each call starts on a
# bare machine: Inductor's cache is cold again, which the cost model's observed build times include.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=src
PY=${PYTHON:-python3}
if (( $# < 2 )); then sed -n '2,8p' "$0"; exit 2; fi
MODEL=$1 WORKLOAD=$2
source "$(dirname "$0")/card.sh"
GPU=$(card_dir)
DIR=${3:-benchmarks/results/$GPU/tune-vs-exhaustive-$(date -u +%Y%m%d-%H%M%S)}
LIMIT_S=${LIMIT_S:-540}
EXHAUSTIVE_BUDGET=${EXHAUSTIVE_BUDGET:-6h}
DEVICE=${DEVICE:-cuda}  # cpu: the same pair on this machine's processor (with TUNE_ARGS="--input-size 64", a small model)
read -r -a EXTRA <<< "${TUNE_ARGS:-}"
mkdir -p "$DIR"
T0=$(date +%s)
left() { echo $(( LIMIT_S - ($(date +%s) - T0) )); }

# absent, open (started, not finished) or done (search_s recorded: finished, with or without a winner).
state() { [[ -f $1 ]] || { echo absent; return; }
          "$PY" -c 'import sys; from clsbench.results.io import load
print("done" if load(sys.argv[1]).settings["tune"].get("search_s") is not None else "open")' "$1" 2>/dev/null \
              || echo open; }

search() { local name=$1; shift; local file="$DIR/$name.json" t=$(date +%s) now
           now=$(state "$file")
           if [[ $now == done ]]; then echo "== $name: finished before"; return; fi
           if (( $(left) < 60 )); then echo "== $name: $(left) s left in this call, next call"; return; fi
           if [[ $now == absent ]]; then
               timeout -s INT -k 30 "$(left)" "$PY" -m clsbench tune --model "$MODEL" --workload "$WORKLOAD" \
                   --device "$DEVICE" --no-probe -q -o "$file" "${EXTRA[@]}" "$@" \
                   > "$DIR/$name-$(date -u +%H%M%S).log" 2>&1
           else
               timeout -s INT -k 30 "$(left)" "$PY" -m clsbench tune --resume "$file" --no-probe -q \
                   > "$DIR/$name-$(date -u +%H%M%S).log" 2>&1
           fi
           echo "== $name rc=$? $(( $(date +%s) - t )) s, now $(state "$file") (call total $(( $(date +%s) - T0 )) s)"; }

search default
search exhaustive --exhaustive --budget "$EXHAUSTIVE_BUDGET"

if [[ $(state "$DIR/default.json") == done && $(state "$DIR/exhaustive.json") == done ]]; then
    "$PY" benchmarks/tune_vs_exhaustive.py "$DIR/default.json" "$DIR/exhaustive.json" | tee "$DIR/comparison.txt"
    for f in default exhaustive; do echo; echo "-- $f"; "$PY" -m clsbench show "$DIR/$f.json" | tail -n 40; done
else
    echo "not finished yet: copy $DIR back into the tree and call again with: bash $0 $MODEL $WORKLOAD $DIR"
fi
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT/$(basename "$DIR")" && cp -r "$DIR"/. "$OUT/$(basename "$DIR")/"; fi
