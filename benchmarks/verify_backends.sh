#!/usr/bin/env bash
# Issue 16 (inference backends) on one GPU, in one device call of under 8 minutes:
#  builds every backend the machine can run for each model in MODELS (default resnet50) with bf16+cl and fp32,
#  checks output parity against fp32 eager, times infer-throughput at batch 256 and infer-latency at batch 1
#  (plain and with CUDA graphs), and learns which AOTInductor build configuration works (a crashing build is
#  retried with the conservative variant, and that variant is also measured on its own).
# MobileNetV3-Large in a second call: MODELS=mobilenet_v3_large bash benchmarks/verify_backends.sh
# GPU_TESTS=1 also runs the gpu-marked tests of tests/test_backends.py first (about 2 more minutes).
# Everything goes into one tarball under $OUT; the table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src:tests
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
MODELS=${MODELS:-resnet50}
BUDGET_S=${BUDGET_S:-420}
W=$(mktemp -d); T0=$(date +%s)
export CLSBENCH_CACHE="$W/cache"   # fresh: every build is timed, none comes from an earlier call
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, platform; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())'
  python3 -c 'import json; from clsbench.backends import library_versions; print(json.dumps(library_versions()))'
  command -v g++ && g++ --version | head -1; } >"$W/environment.txt" 2>&1
if [ "${GPU_TESTS:-0}" = 1 ]; then
  timeout 240 python3 -m pytest -q -m gpu tests/test_backends.py -p no:cacheprovider >"$W/gpu-tests.txt" 2>&1
  echo "gpu tests: rc=$? $(( $(date +%s) - T0 )) s: $(tail -1 "$W/gpu-tests.txt")"
  BUDGET_S=$(( BUDGET_S - ($(date +%s) - T0) ))
fi
python3 benchmarks/verify_backends.py --models "$MODELS" --work "$W" --budget-s "$BUDGET_S" >"$W/driver.txt" 2>&1
echo "driver rc=$? total $(( $(date +%s) - T0 )) s" >>"$W/driver.txt"
# Keep what explains each build (manifests, build logs), not the artifacts themselves (hundreds of MB).
(cd "$W" && find cache -name manifest.json -o -name build.log 2>/dev/null | tar czf "$OUT/verify_backends.tgz" \
  -T - ./*.txt ./*.jsonl jobs 2>/dev/null)
grep -v '^\[' "$W/driver.txt" | tail -n 40
