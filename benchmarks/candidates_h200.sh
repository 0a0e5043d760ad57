#!/usr/bin/env bash
# The execution candidates of the H200 issue, measured as ordinary `clsbench run` cells on one GPU (not run yet):
#  1. ResNet-50 infer-throughput at batch 512: bf16+cl+compile against bf16+cl+compile+freeze (Inductor freezing);
#  2. ResNet-50 train at batch 256 in amp-bf16+cl+compile: the default optimizer, +foreach, +fused, +compiled-step
#     (the optimizer step inside the compiled region) and +cudagraph (the whole step captured as one CUDA graph);
#  3. if time is left, the training parity of those candidates (loss after the steps against fp32 eager, batch 16).
# Meant to finish inside 8 minutes (estimated, not yet measured: about 100 s for step 1, 350 s for step 2, with a
# warm Inductor cache); every step runs under what is left of a 470 s guard, and a run cut short (SIGINT) still
# saves what it measured. Results go to benchmarks/results/h200/candidates-<UTC time>-*.json, never over an
# existing file (clsbench refuses to, and the time stamp keeps names apart); with $OUT set they are copied there.
# The learning rate stays at its default whatever the batch: these are speed figures, not a training recipe.
# PARTS picks the steps (default: all three), e.g. PARTS="infer-freeze train-parity" after the 2026-12-02 run, whose
# freeze row measured a compile without freezing (fixed since) and which left no time for the parity check.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=src
PY=${PYTHON:-python3}
DEST=benchmarks/results/h200
STAMP=$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$DEST"
T0=$(date +%s)
left() { echo $(( 470 - ($(date +%s) - T0) )); }
files=()
PARTS=" ${PARTS:-infer-freeze train-steps train-parity} "
run() { local name=$1; shift; local out="$DEST/candidates-$STAMP-$name.json" t=$(date +%s)
        if [[ $PARTS != *" $name "* ]]; then echo "== $name: not in PARTS"; return; fi
        if (( $(left) < 30 )); then echo "== $name: skipped, $(left) s left"; return; fi
        timeout -s INT "$(left)" "$PY" -m clsbench run "$@" --device cuda --no-probe --timeout 300 -q -o "$out"
        echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)"
        [[ -f $out ]] && files+=("$out"); }

run infer-freeze --model resnet50 --workload infer-throughput --batch-size 512 --repeats 2 \
    --mode bf16+cl+compile,bf16+cl+compile+freeze
run train-steps --model resnet50 --workload train --batch-size 256 --repeats 2 \
    --mode amp-bf16+cl+compile,amp-bf16+cl+compile+foreach,amp-bf16+cl+compile+fused \
    --mode amp-bf16+cl+compile+compiled-step,amp-bf16+cl+compile+cudagraph

parity="$DEST/candidates-$STAMP-train-parity.json"
if [[ $PARTS != *" train-parity "* ]]; then
    echo "== train-parity: not in PARTS"
elif (( $(left) > 90 )); then
    timeout -s INT "$(left)" "$PY" - "$parity" <<'PYEOF'
import json, sys
from clsbench.procedures.tune import train_parity
modes = ["amp-bf16+cl+compile", "amp-bf16+cl+compile+foreach", "amp-bf16+cl+compile+fused",
         "amp-bf16+cl+compile+compiled-step", "amp-bf16+cl+compile+cudagraph"]
checks = train_parity("resnet50", "cuda", [(mode, 16) for mode in modes])
rows = [{"mode": mode, "batch_size": batch, **check} for (mode, batch), check in checks.items()]
with open(sys.argv[1], "x") as f:  # "x": never over an existing file
    json.dump(rows, f, indent=1)
for row in rows:
    print(f"{row['mode']:40s} steps {row['steps']}  first {row['error']}  last {row['error_last']}  "
          f"ok {row['ok']}  {row['reason'] or ''}")
PYEOF
    echo "== train-parity rc=$? (total $(( $(date +%s) - T0 )) s)"
else
    echo "== train-parity: skipped, $(left) s left"
fi

for f in "${files[@]}"; do echo; echo "-- $f"; "$PY" -m clsbench show "$f"; done
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT"; cp "$DEST"/candidates-"$STAMP"-* "$OUT"/ 2>/dev/null; fi
