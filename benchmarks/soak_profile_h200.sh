#!/usr/bin/env bash
# Issue 19 on one H200 (not run yet). Two parts, each meant for one device call of at most 10 minutes:
#
#   PART=profile OUT=$OUT bash benchmarks/soak_profile_h200.sh   # about 4 minutes (GPU_TESTS=0: without its tests)
#   PART=soak    OUT=$OUT bash benchmarks/soak_profile_h200.sh   # 8.5 minutes of soak, then show and report
#
# profile: the GPU tests of profile and soak, then `clsbench profile` of ResNet-50 training (amp-bf16+cl, batch
#   256) and of batch-1 inference (bf16+cl), each into a new directory (trace + summary), the summaries printed.
# soak: `clsbench soak` of ResNet-50 training amp-bf16+cl at batch 256 for DURATION (default 8m30s, the issue asks
#   for at least 8 minutes; MLPerf's own minimum is 10 minutes, which one call cannot hold with start-up), 10 s
#   windows, NVML every second; then `show` (the verdict table) and `report` (the time series).
# Everything goes into a new folder benchmarks/results/h200/issue19-<part>-<UTC time>/ (never overwritten) and, with
# $OUT set, into $OUT/issue19-<part>.tgz. No clock, power or persistence setting is touched.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH=src:tests
PY=${PY:-python3}
PART=${PART:?set PART=profile or PART=soak}
DEST=benchmarks/results/h200/issue19-$PART-$(date -u +%Y%m%dT%H%M%SZ)
if [ -e "$DEST" ]; then echo "error: $DEST exists; results are never overwritten" >&2; exit 3; fi
mkdir -p "$DEST"
git rev-parse --short HEAD > "$DEST/commit.txt" 2>/dev/null || true
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > "$DEST/gpu.csv" 2>&1 || true

case "$PART" in
profile)
  if [ "${GPU_TESTS:-1}" = 1 ]; then  # GPU_TESTS=0 when the same call runs every GPU test anyway
    timeout 200 $PY -m pytest -q -p no:cacheprovider -m gpu tests/test_profile.py tests/test_soak.py \
      > "$DEST/gpu-tests.log" 2>&1
    echo "gpu tests: exit $? ($(tail -1 "$DEST/gpu-tests.log"))"
  fi
  timeout -s INT 120 $PY -m clsbench profile --model resnet50 --workload train --mode amp-bf16+cl --batch-size 256 \
    --device cuda -o "$DEST/train-resnet50-bs256" > "$DEST/train-resnet50-bs256.txt" 2>&1
  echo "profile train: exit $?"
  timeout -s INT 120 $PY -m clsbench profile --model resnet50 --workload infer-latency --mode bf16+cl \
    --batch-size 1 --device cuda -o "$DEST/latency-resnet50-bs1" > "$DEST/latency-resnet50-bs1.txt" 2>&1
  echo "profile latency: exit $?"
  for f in "$DEST"/*-bs*.txt; do echo; echo "== $f"; cat "$f"; done
  ;;
soak)
  DURATION=${DURATION:-8m30s}
  timeout -s INT 560 $PY -m clsbench soak --model resnet50 --workload train --mode amp-bf16+cl --batch-size 256 \
    --duration "$DURATION" --window 10s --device cuda -o "$DEST/soak-resnet50-train.json" \
    > "$DEST/soak.txt" 2>&1
  echo "soak: exit $?"
  $PY -m clsbench show "$DEST/soak-resnet50-train.json" > "$DEST/show.txt" 2>&1
  $PY -m clsbench report "$DEST/soak-resnet50-train.json" -o "$DEST/report.html" > /dev/null 2>&1
  echo "report: exit $?"
  cat "$DEST/show.txt"
  ;;
*) echo "error: PART must be profile or soak, got $PART" >&2; exit 2 ;;
esac
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/issue19-$PART.tgz" "$DEST"; fi
echo "results: $DEST"
