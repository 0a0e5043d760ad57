#!/usr/bin/env bash
# One default `clsbench tune` on the H200 in one device call (issue 18): MODEL (default resnet50), WORKLOAD (default
# train), BUDGET (default 9m: the default search's 10m does not fit in a call of at most 600 s with the process start
# and a candidate's overrun; `clsbench tune --resume FILE --budget 10m` in a later call continues it to the default).
# SIGINT at GUARD_S (default 575 s) saves what was measured and prints the resume line.
#
#   WORKLOAD=train CLSBENCH_GIT_COMMIT=$(git rev-parse --short HEAD) OUT=$OUT bash benchmarks/tune_h200.sh
#
# Files go to a new folder benchmarks/results/<card>/tune-<MODEL>-<WORKLOAD>-<UTC time>/ (tune.json, the printed table
# tune.txt, the progress and plan tune.log, commit.txt), copied to $OUT as one tarball when OUT is set.
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-resnet50}
WORKLOAD=${WORKLOAD:-train}
BUDGET=${BUDGET:-9m}
GUARD_S=${GUARD_S:-575}
DEVICE=${DEVICE:-cuda}  # cpu: a smoke test of the script itself
NAME=$(echo "$MODEL" | tr ':/' '--')
new_dest "tune-$NAME-$WORKLOAD"
echo "${CLSBENCH_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" > "$DEST/commit.txt"
timeout -s INT "$(left)" $PY -m clsbench tune --model "$MODEL" --workload "$WORKLOAD" --device "$DEVICE" \
  --budget "$BUDGET" ${TUNE_ARGS:-} -o "$DEST/tune.json" > "$DEST/tune.txt" 2> "$DEST/tune.log"
echo "rc=$? $(( $(date +%s) - T0 )) s" | tee -a "$DEST/tune.log"
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/tune-$NAME-$WORKLOAD.tgz" -C "$(dirname "$DEST")" "$(basename "$DEST")"; fi
tail -n 45 "$DEST/tune.txt"; grep -v '^\[' "$DEST/tune.log" | head -30
