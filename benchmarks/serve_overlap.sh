#!/usr/bin/env bash
# One short device call (issue 33): the serving loop's overlap A/B, from the repository root with the LoadGen wheel
# carried in .whl/:
#   OUT=/some/folder bash benchmarks/serve_overlap.sh
#  1. `serve --overlap` (the default) and 2. `serve --no-overlap`: offline, $MODEL $MODE (a CUDA graph per bucket,
#     eager: no artifact builds), max batch $MAXB over buckets $BUCKETS, instances $INSTANCES, LoadGen runs >= 4 s;
#  3. `run` of the same mode at batch $MAXB (1 repeat, $RUN_S s): the offline figure outside the server.
# Steps run under what is left of a $GUARD_S s guard (SIGINT: finished LoadGen runs are kept). Everything goes into
# $OUT/$NAME.tgz, named by the card; the table is printed last (samples/s per setting, and the time split).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODEL=${MODEL:-resnet50}; MODE=${MODE:-fp16+cl+cudagraph}; MAXB=${MAXB:-256}; BUCKETS=${BUCKETS:-64,128,256}
INSTANCES=${INSTANCES:-1,2}; GUARD_S=${GUARD_S:-170}; RUN_S=${RUN_S:-3}
T0=$(date +%s)
left() { local l=$(( GUARD_S - ($(date +%s) - T0) )); echo $(( l > 1 ? l : 1 )); }
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/mlcommons_loadgen-*.whl 2>&1 | tail -n 2
export PYTHONPATH=src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
source "$(dirname "$0")/card.sh"
GPU=$(card_dir)
NAME=serve-overlap-$MODEL-$(date -u +%Y%m%dT%H%M%SZ)
W=$(mktemp -d)/$GPU/$NAME; mkdir -p "$W"
git rev-parse HEAD >"$W/commit.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$W/summary.txt"
step() { local name=$1; shift; local t=$(date +%s)
         timeout -k 10 -s INT "$(left)" python3 -m clsbench "$@" >"$W/$name.txt" 2>"$W/$name.log"
         echo "== $name rc=$? $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s): clsbench $*" \
             | tee -a "$W/summary.txt"; }
for overlap in overlap no-overlap; do
    step "$overlap" serve --model "$MODEL" --device cuda --mode "$MODE" --scenario offline --max-batch "$MAXB" \
        --buckets "$BUCKETS" --instances "$INSTANCES" --min-duration-s 4 "--$overlap" -o "$W/$overlap.json"
done
step run run --model "$MODEL" --device cuda --mode "$MODE" --workload infer-throughput --batch-size "$MAXB" \
    --repeats 1 --min-time "$RUN_S" --no-telemetry -o "$W/run.json"
(cd "$(dirname "$(dirname "$W")")" && tar czf "$OUT/$NAME.tgz" "$GPU/$NAME")
python3 - "$W" <<'PY' | tee -a "$W/summary.txt"
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
print(f"\n{'file':11s} {'instances':>9s} {'overlap':7s} {'samples/s':>10s} {'validity':8s}  per batch: mean batch, ms per stage")
for name in ("overlap", "no-overlap"):
    path = w / f"{name}.json"
    if not path.exists():
        print(f"{name}: no result file")
        continue
    d = json.loads(path.read_text())
    overlap = {s["instances"]: s.get("overlap") for s in d["settings"]["serve"]["setups"]}
    for m in d["measurements"]:
        for r in m.get("repeats") or []:
            lg, c, setting = r.get("loadgen") or {}, r.get("server") or {}, r.get("setting") or {}
            batches = c.get("batches") or 0
            split = " ".join(f"{k} {v / batches / 1e6:.2f}" for k, v in (c.get("stage_ns") or {}).items()) \
                if batches else "-"
            sps = lg.get("samples_per_second")
            print(f"{name:11s} {setting.get('instances')!s:>9s} {overlap.get(setting.get('instances'))!s:7s} "
                  f"{'-' if sps is None else f'{sps:,.0f}':>10s} {lg.get('validity')!s:8s}  "
                  f"{c.get('requests', 0) / batches if batches else 0:.1f}, {split}")
run = w / "run.json"
if run.exists():
    for m in json.loads(run.read_text())["measurements"]:
        print(f"run {m['mode']} b{m['batch_size']}: {(m.get('summary') or {}).get('throughput_img_s') or 0:,.0f} img/s "
              f"({m['status']})")
PY
echo "-- files: $OUT/$NAME.tgz ($GPU/$NAME)"
