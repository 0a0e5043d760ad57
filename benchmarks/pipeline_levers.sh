#!/usr/bin/env bash
# What makes the gpu pipeline keep a fast training step fed? Short A/B measurements in one device call, each a
# `clsbench run` of one repeat (fresh process, short windows) with one lever changed. CELLS chooses which, in order
# (default: synthetic gpu gpu-split gpu-split-memory gpu-memory launched-gpu-memory launched-gpu-split):
#
#   synthetic          the ceiling: MODE on synthetic data
#   gpu                the gpu pipeline with its defaults (reading in the training process, nvJPEG decode, batched
#                      augmentation)
#   gpu-high           its streams, torchvision's decoder stream included, at high priority
#                      (CLSBENCH_GPU_STREAM_PRIORITY=high); on 2026-12-02 it changed nothing
#   gpu-memory         the memory source (no file reads in the training process)
#   gpu-separable      the separable augmentation (less GPU time per batch than batched, measured alone)
#   gpu-cpu            JPEGs decoded on a pool of threads in the training process, crops uploaded in one copy per
#                      batch (--gpu-decode cpu): no nvJPEG round trips through a GPU busy with the step
#   gpu-cpu-memory     the same over the memory source
#   gpu-cpu-t14        the same as gpu-cpu with 14 decode threads (CLSBENCH_GPU_DECODE_THREADS; default: CPUs - 4)
#   gpu-cpu-separable  gpu-cpu with the separable augmentation
#   gpu-split          each batch shared between nvJPEG and the host's threads at once (--gpu-decode split)
#   gpu-split-memory   the same over the memory source
#   launched-gpu       MODE without +cudagraph (the step launched from Python, kernel by kernel)
#   launched-gpu-cpu   the same with the cpu decoder
#   launched-gpu-memory  launched-gpu over the memory source (no file reading holding the GIL beside the launches)
#   launched-gpu-split the launched step with the split decoder over the memory source
#
# Each result file keeps the pipeline's facts (decoder, threads, switch interval, priority), the stage threads'
# figures while training (work, CPU, waits) and each stage's GPU busy time alone; benchmarks/levers_table.py prints
# one line per file. A lever that wins here is then measured with the full protocol (benchmarks/pipeline_h200.sh)
# before it becomes a default.
#
#   MODEL=resnet50 OUT=$OUT bash benchmarks/pipeline_levers.sh
#   CELLS="gpu-cpu gpu" MODEL=resnet50 OUT=$OUT bash benchmarks/pipeline_levers.sh
#
# Files go to a new folder benchmarks/results/<card>/pipeline-levers-<MODEL>-<UTC time>/ (never overwritten), copied to
# $OUT as one tarball when OUT is set. Every step gets what is left of a GUARD_S (default 560) guard.
source "$(dirname "$0")/lib.sh"
MODEL=${MODEL:-resnet50}
MODE=${MODE:-amp-bf16+cl+compile+cudagraph}
DATA=${DATA:-/tmp/clsbench-pipeline-jpegs}
IMAGES=${IMAGES:-6000}
DEVICE=${DEVICE:-cuda}
GUARD_S=${GUARD_S:-560}
BATCH=${BATCH:-256}
NAME=$(echo "$MODEL" | tr ':/' '--')
new_dest "pipeline-levers-$NAME"
SHORT=(--batch-size "$BATCH" --device "$DEVICE" --repeats 1 --warmup 10 --min-time 6 --max-time 9 --no-probe -q)

cell() {  # NAME MIN_S MODE ENV... -- ARGS...: one short run under what is left of the guard
  local name=$1 need=$2 mode=$3 t envs=(); shift 3
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  t=$(date +%s)
  if (( $(left) < need )); then echo "$name: not run ($(left) s left, needs about $need)"; return; fi
  env "${envs[@]}" timeout -s INT "$(left)" $PY -m clsbench run --model "$MODEL" --workload train --mode "$mode" \
    "${SHORT[@]}" "$@" -o "$DEST/$name.json" > "$DEST/$name.txt" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)"
}

if [ ! -d "$DATA" ]; then
  timeout 150 $PY -m clsbench data make "$DATA" --images "$IMAGES" --classes 100 -q || exit $?
  echo "data make: $(( $(date +%s) - T0 )) s"
fi
$PY -c "import sys, torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__, \
'python', sys.version.split()[0], torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')" \
  | tee "$DEST/environment.txt"

GPU=(--data "$DATA" --pipeline gpu)
LAUNCHED=${MODE/+cudagraph/}
CELLS=${CELLS:-synthetic gpu gpu-split gpu-split-memory gpu-memory launched-gpu-memory launched-gpu-split}
for name in $CELLS; do
  case $name in
    synthetic) cell synthetic 60 "$MODE" -- ;;
    gpu) cell gpu 45 "$MODE" -- "${GPU[@]}" ;;
    gpu-high) cell gpu-high 45 "$MODE" CLSBENCH_GPU_STREAM_PRIORITY=high -- "${GPU[@]}" ;;
    gpu-memory) cell gpu-memory 45 "$MODE" -- "${GPU[@]}" --data-source memory ;;
    gpu-separable) cell gpu-separable 45 "$MODE" -- "${GPU[@]}" --gpu-augment separable ;;
    gpu-cpu) cell gpu-cpu 45 "$MODE" -- "${GPU[@]}" --gpu-decode cpu ;;
    gpu-cpu-memory) cell gpu-cpu-memory 45 "$MODE" -- "${GPU[@]}" --gpu-decode cpu --data-source memory ;;
    gpu-cpu-t14) cell gpu-cpu-t14 45 "$MODE" CLSBENCH_GPU_DECODE_THREADS=14 -- "${GPU[@]}" --gpu-decode cpu ;;
    gpu-cpu-separable) cell gpu-cpu-separable 45 "$MODE" -- "${GPU[@]}" --gpu-decode cpu --gpu-augment separable ;;
    gpu-split) cell gpu-split 45 "$MODE" -- "${GPU[@]}" --gpu-decode split ;;
    gpu-split-memory) cell gpu-split-memory 45 "$MODE" -- "${GPU[@]}" --gpu-decode split --data-source memory ;;
    launched-gpu) cell launched-gpu 60 "$LAUNCHED" -- "${GPU[@]}" ;;
    launched-gpu-cpu) cell launched-gpu-cpu 60 "$LAUNCHED" -- "${GPU[@]}" --gpu-decode cpu ;;
    launched-gpu-memory) cell launched-gpu-memory 60 "$LAUNCHED" -- "${GPU[@]}" --data-source memory ;;
    launched-gpu-split) cell launched-gpu-split 60 "$LAUNCHED" -- "${GPU[@]}" --gpu-decode split --data-source memory ;;
    *) echo "unknown cell $name" >&2 ;;
  esac
done

for f in "$DEST"/*.json; do
  [ -f "$f" ] || continue
  echo; echo "== $(basename "$f" .json)"; $PY -m clsbench show "$f" 2>&1 | tee "${f%.json}.table.txt" | tail -n 25
done
echo; $PY benchmarks/levers_table.py "$DEST" ${SYNTHETIC:-} | tee "$DEST/levers.txt"
echo; echo "results: $DEST ($(( $(date +%s) - T0 )) s)"
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/pipeline-levers-$NAME.tgz" -C "$(dirname "$DEST")" "$(basename "$DEST")"; fi
