#!/usr/bin/env bash
# Does the gpu pipeline feed the fastest training configuration? One model per device call (MODEL, default
# resnet50; then MODEL=mobilenet_v3_large), in MODE (default amp-bf16+cl+compile+cudagraph: the fastest training step
# measured on the H200, and the one whose kernel launches do not wait for the pipeline's threads), batch 256,
# generated ImageNet-sized JPEGs:
#
#   1. `clsbench diagnose MODEL --mode MODE --pipeline gpu --repeats 3`: the synthetic ceiling, PyTorch's default
#      loader and the gpu pipeline (default augmentation), 3 fresh processes each, in ONE result file (the goal's
#      file), plus every gpu stage alone (read, decode, each registered augmentation) and each stage thread while
#      training (work, CPU, waits: docs/methodology.md 16.4.3);
#   2. the gpu pipeline over the memory source (no file reads in the training process), 3 repeats;
#   3. the gpu pipeline with each other augmentation (`--gpu-augment`, e.g. separable), 3 repeats each;
#   4. the diagnosis in the mode without +cudagraph (short windows): the step launched from Python beside the
#      pipeline's threads, with the running stages;
#   5. `clsbench profile` of the gpu-pipeline cell, if time is left.
#
# History: the first version (2026-12-02) finished 3 of its 12 cells (a cold Inductor compile takes about 60 s, a warm
# one 8-10 s); the second (2026-12-02, amp-bf16+cl+compile) showed the compiled step 28.5 ms slower beside the
# pipeline and a captured one 2.2 ms slower, and 8 reader processes slower than reading in the thread. Every step
# gets what is left of a 560 s guard (GUARD_S; SIGINT at the end, so a result file keeps its finished repeats).
#
#   MODEL=resnet50 OUT=$OUT bash benchmarks/pipeline_h200.sh     # DATA=/path/to/jpegs to use your own images
#   DECODERS=nvjpeg,split MODEL=resnet50 OUT=$OUT bash benchmarks/pipeline_h200.sh   # diagnose compares the decoders
#
# Every file goes to a new folder benchmarks/results/<card>/pipeline-<MODEL>-<UTC time>/ (never overwritten), copied to
# $OUT as one tarball when OUT is set; the tables are printed at the end (`clsbench show`).
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-resnet50}
MODE=${MODE:-amp-bf16+cl+compile+cudagraph}
DATA=${DATA:-/tmp/clsbench-pipeline-jpegs}
IMAGES=${IMAGES:-6000}
CLASSES=${CLASSES:-100}
DEVICE=${DEVICE:-cuda}  # cpu: a smoke test of the script itself (the gpu pipeline is then skipped with its reason)
GUARD_S=${GUARD_S:-560}
NAME=$(echo "$MODEL" | tr ':/' '--')  # a folder name: timm/x and module:name models
new_dest "pipeline-$NAME"
BATCH=${BATCH:-256}
COMMON=(--batch-size "$BATCH" --device "$DEVICE" --repeats 3)

step() {  # NAME MIN_S ARGS...: one clsbench command under what is left of the guard, its output kept
  local name=$1 need=$2 t; shift 2; t=$(date +%s)
  if (( $(left) < need )); then echo "$name: not run ($(left) s left, needs about $need)"; return; fi
  timeout -s INT "$(left)" $PY -m clsbench "$@" > "$DEST/$name.txt" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)"
}

if [ ! -d "$DATA" ]; then
  timeout 150 $PY -m clsbench data make "$DATA" --images "$IMAGES" --classes "$CLASSES" -q || exit $?
  echo "data make: $(( $(date +%s) - T0 )) s"
fi
$PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')" | tee "$DEST/environment.txt"

DECODE=()
[ -n "${DECODERS:-}" ] && DECODE=(--gpu-decode "$DECODERS")
step diagnose 200 diagnose "$MODEL" --data "$DATA" --mode "$MODE" --pipeline gpu "${DECODE[@]}" "${COMMON[@]}" \
  -o "$DEST/diagnose.json"
step gpu-memory 60 run --model "$MODEL" --workload train --mode "$MODE" "${COMMON[@]}" --data "$DATA" \
  --data-source memory --pipeline gpu --no-probe -q -o "$DEST/gpu-memory.json"
others=$($PY -c "from clsbench.data.base import AUGMENTS, DEFAULT_AUGMENT
print(' '.join(n for n, _ in AUGMENTS.items() if n != DEFAULT_AUGMENT))")
augment_cell() {  # AUGMENT: the gpu pipeline with that augmentation, 3 repeats
  step "gpu-$1" 60 run --model "$MODEL" --workload train --mode "$MODE" "${COMMON[@]}" --data "$DATA" \
    --pipeline gpu --gpu-augment "$1" --no-probe -q -o "$DEST/gpu-$1.json"
}
for augment in $others; do [ "$augment" = per-image ] || augment_cell "$augment"; done
case "$MODE" in
  *+cudagraph*) step diagnose-launched 90 diagnose "$MODEL" --data "$DATA" --mode "${MODE/+cudagraph/}" \
    --pipeline gpu --batch-size "$BATCH" --device "$DEVICE" --quick -o "$DEST/diagnose-launched.json" ;;
esac
step profile 60 profile --model "$MODEL" --workload train --mode "$MODE" --batch-size "$BATCH" --device "$DEVICE" \
  --data "$DATA" --pipeline gpu -o "$DEST/profile"
case " $others " in *" per-image "*) augment_cell per-image ;; esac  # last: the slowest augmentation alone

[ -f "$DEST/diagnose.txt" ] && { echo; echo "== diagnose"; cat "$DEST/diagnose.txt"; }
[ -f "$DEST/diagnose-launched.txt" ] && { echo; echo "== diagnose without +cudagraph"; tail -n 40 "$DEST/diagnose-launched.txt"; }
for f in "$DEST"/gpu-*.json; do
  [ -f "$f" ] || continue
  echo; echo "== $(basename "$f")"; $PY -m clsbench show "$f" 2>&1 | tee "${f%.json}.table.txt"
done
[ -f "$DEST/profile.txt" ] && { echo; echo "== profile"; tail -n 40 "$DEST/profile.txt"; }
echo; echo "results: $DEST ($(( $(date +%s) - T0 )) s)"
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/pipeline-$NAME.tgz" -C "$(dirname "$DEST")" "$(basename "$DEST")"; fi
