#!/usr/bin/env bash
# Issue 4, where the gpu pipeline's time goes (one device call of about 2 minutes on an H200):
#   1. `clsbench data make` of IMAGES (default 8,000) images, timed (the generator's speed with all cores);
#   2. benchmarks/profile_gpu_pipeline.py: read, nvJPEG decode, augment and the ResNet-50 training step alone;
#   3. ResNet-50 amp-bf16+cl batch 256 on the gpu pipeline with 0, 4 and 8 reader workers (one process each).
# Writes gp-*.txt and gp-w*.json into $OUT; prints the profile and a line per run last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
IMAGES=${IMAGES:-8000}
WORK=$(mktemp -d /tmp/clsbench-gp.XXXXXX); trap 'rm -rf "$WORK"' EXIT
timeout 150 python3 -m clsbench data make "$WORK/images" --images "$IMAGES" --classes 100 -q | tee "$OUT/gp-data-make.txt"
timeout 120 python3 benchmarks/profile_gpu_pipeline.py "$WORK/images" > "$OUT/gp-profile.txt" 2>&1
for w in 0 4 8; do
  extra=(); [ "$w" -gt 0 ] && extra=(--persistent-workers)
  timeout -s INT 120 python3 -m clsbench run --model resnet50 --workload train --mode amp-bf16+cl --batch-size 256 \
    --device cuda --data "$WORK/images" --pipeline gpu --num-workers "$w" "${extra[@]}" --repeats 1 --no-probe -q \
    -o "$OUT/gp-w$w.json" > "$OUT/gp-w$w.txt" 2>&1
  echo "gpu pipeline w$w: exit $?"
done
cat "$OUT/gp-profile.txt"
python3 - "$OUT" <<'PY'
import json, pathlib, sys
for f in sorted(pathlib.Path(sys.argv[1]).glob("gp-w*.json")):
    m = json.loads(f.read_text())["measurements"][0]
    s = m["summary"]
    split = s.get("data") or {}
    print(f"{f.stem}: {m['status']} {m.get('reason') or ''} {s.get('throughput_img_s') or 0:,.0f} img/s; "
          f"data: {json.dumps(split)[:400]}")
PY
