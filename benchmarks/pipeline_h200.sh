#!/usr/bin/env bash
# Does the gpu pipeline feed the fastest training configuration? ResNet-50 and MobileNetV3-Large, amp-bf16+cl,
# eager and +compile, batch 256, on synthetic data, the best cpu pipeline setting and the gpu pipeline (batched
# augmentation); then `diagnose` in the compiled mode, which prints each gpu stage's rate alone and names the
# pipeline that keeps that ceiling fed. Written for one H200 with 16 vCPUs: about 7 minutes (each command has its
# own time limit, and is interrupted with SIGINT so a result file keeps the cells it finished).
#
#   DATA=/path/to/jpegs benchmarks/pipeline_h200.sh     # default DATA: /tmp/clsbench-pipeline-jpegs (made if absent)
#
# 1. `clsbench data make DATA --images IMAGES --classes 100` if DATA is absent (default 6,000 ImageNet-sized JPEGs);
# 2. three `clsbench run`s, each of both models x both modes: synthetic, cpu (16 workers, pinned, persistent,
#    uint8 batches normalised on the device: the best cpu setting on this machine so far), gpu (w0, batched);
# 3. `clsbench diagnose resnet50 --mode amp-bf16+cl+compile --pipeline gpu`.
# Every file goes to a new folder benchmarks/results/h200/pipeline-<UTC time>/ (never overwritten); the tables are
# printed at the end (`clsbench show`).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PY:-python3}
DATA=${DATA:-/tmp/clsbench-pipeline-jpegs}
IMAGES=${IMAGES:-6000}
OUT=benchmarks/results/h200/pipeline-$(date -u +%Y%m%dT%H%M%SZ)
if [ -e "$OUT" ]; then echo "error: $OUT exists; results are never overwritten" >&2; exit 3; fi
mkdir -p "$OUT"
MODELS=resnet50,mobilenet_v3_large
MODES=amp-bf16+cl,amp-bf16+cl+compile
COMMON=(--workload train --batch-size 256 --device cuda --repeats 1 --warmup 3 --min-time 2 --no-probe -q)

if [ ! -d "$DATA" ]; then
  timeout 150 $PY -m clsbench data make "$DATA" --images "$IMAGES" --classes 100 -q || exit $?
fi
$PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, \
torch.cuda.get_device_name())" | tee "$OUT/environment.txt"

step() {  # NAME LIMIT_S ARGS...: one clsbench command, its output kept, its exit status said
  local name=$1 limit=$2; shift 2
  timeout -s INT "$limit" $PY -m clsbench "$@" > "$OUT/$name.txt" 2>&1
  echo "$name: exit $?"
}

step synthetic 130 run --model "$MODELS" --mode "$MODES" "${COMMON[@]}" -o "$OUT/synthetic.json"
step cpu 100 run --model "$MODELS" --mode "$MODES" "${COMMON[@]}" --data "$DATA" --pipeline cpu --num-workers 16 \
  --pin-memory --persistent-workers --normalize-on device -o "$OUT/cpu.json"
step gpu 100 run --model "$MODELS" --mode "$MODES" "${COMMON[@]}" --data "$DATA" --pipeline gpu \
  -o "$OUT/gpu.json"
step diagnose 100 diagnose resnet50 --data "$DATA" --mode amp-bf16+cl+compile --batch-size 256 --device cuda \
  --pipeline gpu --quick -o "$OUT/diagnose.json"

for name in synthetic cpu gpu; do
  echo; echo "== $name"; $PY -m clsbench show "$OUT/$name.json" 2>&1 | tee "$OUT/$name.table.txt"
done
echo; echo "== diagnose"; cat "$OUT/diagnose.txt"
echo; echo "results: $OUT"
