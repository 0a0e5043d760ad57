#!/usr/bin/env bash
# Issue 4 verification on the GPU machine (H200, 16 CPU cores), in one call of about 4-5 minutes:
#   1. the GPU tests of the data pipelines (nvJPEG decode, stream hand-over, GPU idle from events), at most 100 s;
#   2. a 20,000-image JPEG dataset generated locally with `clsbench data make` (all cores; about 30 s);
#   3. `clsbench diagnose resnet50` at amp-bf16+cl, batch 256, num_workers 0,4,8,12,16 x pin_memory, uint8 batches
#      normalised on the GPU at 16 workers (with and without pinning), the gpu pipeline and dali (skipped with its
#      reason unless installed); at most 400 s, interrupted cleanly (SIGINT: every finished setting is already in
#      the file).
# Writes into $OUT: data-gpu-tests.log, dataset-manifest.json, data-make.txt, diagnose-resnet50.json (the result
# file), diagnose-resnet50.txt (what diagnose printed), diagnose-resnet50.log (its progress), timings.txt.
# Prints the diagnosis last. Run from the repository root; nothing is downloaded.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}
IMAGES=${IMAGES:-20000}
CLASSES=${CLASSES:-100}
WORKERS=${WORKERS:-0,4,8,12,16}
MODEL=${MODEL:-resnet50}
MODE=${MODE:-amp-bf16+cl}
BATCH=${BATCH:-256}
DEVICE=${DEVICE:-cuda}
EXTRA=${EXTRA:-}  # more diagnose options, e.g. "--quick" for a smoke run elsewhere
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/clsbench-verify.XXXXXX)
DATA="$WORK/images"
trap 'rm -rf "$WORK"' EXIT
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$OUT/timings.txt"; }

stamp "start: $(nproc) CPUs; $(python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__)')"
timeout -s INT 100 python3 -m pytest -q -m gpu tests/test_data_gpu.py -p no:cacheprovider 2>&1 | tail -15 \
  > "$OUT/data-gpu-tests.log"
stamp "gpu data tests: $(tail -1 "$OUT/data-gpu-tests.log")"

python3 -m clsbench data make "$DATA" --images "$IMAGES" --classes "$CLASSES" -q | tee "$OUT/data-make.txt"
cp "$DATA/clsbench-dataset.json" "$OUT/dataset-manifest.json" 2>/dev/null
stamp "dataset generated: $(du -sh "$DATA" | cut -f1)"

# shellcheck disable=SC2086  # EXTRA is a list of options
timeout -s INT 400 python3 -m clsbench diagnose "$MODEL" --data "$DATA" --mode "$MODE" --batch-size "$BATCH" \
  --device "$DEVICE" --workers "$WORKERS" --data-timeout 60 --timeout 300 $EXTRA -o "$OUT/diagnose-resnet50.json" \
  > "$OUT/diagnose-resnet50.txt" 2> "$OUT/diagnose-resnet50.log"
rc=$?
stamp "diagnose: exit $rc (0 ok, 4 a setting failed, 130 interrupted by the time limit: the file holds what finished)"
if [ "$rc" -eq 130 ] && [ -f "$OUT/diagnose-resnet50.json" ]; then
  python3 -m clsbench show "$OUT/diagnose-resnet50.json" > "$OUT/diagnose-resnet50.txt" 2>/dev/null
fi
tail -3 "$OUT/diagnose-resnet50.log"
echo
cat "$OUT/diagnose-resnet50.txt"
