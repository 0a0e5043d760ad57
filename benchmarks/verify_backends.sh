#!/usr/bin/env bash
# Issue 16 (inference backends) on one GPU, in one device call of at most 9 minutes, through `clsbench run` itself:
#   resnet50 and mobilenet_v3_large x infer-throughput (batch 256) and infer-latency (batch 1) x bf16+cl and fp32
#   x eager, torchscript, export (AOTInductor), onnxruntime, tensorrt, 3 repeats each, into ONE result file.
# The batch sizes are the GPU default suite's (seed: infer-throughput 256, infer-latency 1), so one command measures
# both workloads at their own batch. Backends whose library is missing here (onnxruntime without a GPU provider,
# TensorRT) are skipped with the reason and the install command, without starting a worker.
# Budget: --min-time 1 (the default latency rule wants >= 5 s per repeat: 12 latency cells x 3 repeats would take
# three minutes alone); --no-probe (the MFU ceilings are not what this checks); --timeout 300 per worker, so one
# AOTInductor build is limited to 240 s. The run is stopped (SIGINT) at LIMIT_S, which saves what finished; the
# table is printed from the file either way, and `clsbench run --resume` finishes the rest.
# The artifact cache starts empty, so every build is timed in this call.
# Measured on the H200 image (torch 2.11, 2026-12-01, first attempt of this script, stopped at 480 s): the eager and
# torchscript cells of resnet50 took about 20 s and 35 s each (3 repeats; a torchscript build 2-6 s, its process
# 12-20 s), an AOTInductor build of resnet50 66 s (fp32, bs256) and 84 s (bf16+cl, bs256), and loading an AOTInductor
# package died with SIGSEGV there (the cause, found 2026-12-03: the image's CXX=/opt/gcc/bin/g++ links another
# libstdc++ than PyTorch's; the export backend now chooses its compiler by that). The whole matrix (8 AOTInductor
# builds) cannot finish inside one call: benchmarks/backends_h200.sh runs it in cell order, resumable across calls.
# MODELS and BACKENDS override the lists.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LIMIT_S=${LIMIT_S:-500}
W=$(mktemp -d)
export CLSBENCH_CACHE="$W/artifacts" CLSBENCH_DB="$W/index.sqlite3"
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch, platform; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())'
  command -v g++ && g++ --version | head -1; } >"$OUT/environment.txt" 2>&1
t0=$(date +%s)
timeout -s INT "$LIMIT_S" python3 -m clsbench run --model "${MODELS:-resnet50,mobilenet_v3_large}" \
    --workload infer-throughput,infer-latency --mode bf16+cl,fp32 \
    --backend "${BACKENDS:-eager,torchscript,export,onnxruntime,tensorrt}" --device cuda --repeats 3 --min-time 1 \
    --no-probe --timeout 300 -o "$OUT/backends.json" >"$OUT/run.txt" 2>"$OUT/progress.log"
echo "rc=$? run: $(( $(date +%s) - t0 )) s (limit ${LIMIT_S} s)"
python3 -m clsbench show "$OUT/backends.json" | tee "$OUT/table.txt"
# Where the time went, per backend: builds (in their own processes), loads, parity checks, and the repeats' total.
python3 - "$OUT/backends.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rows = {}
for m in d["measurements"]:
    b = m.get("backend", "eager")
    r = rows.setdefault(b, {"cells": 0, "ok": 0, "builds": 0, "build_s": 0.0, "load_s": 0.0, "parity_s": 0.0,
                            "measure_s": 0.0, "failed": []})
    r["cells"] += 1
    r["ok"] += m["status"] == "ok"
    if m["status"] == "failed":
        r["failed"].append(f"{m['model']} {m['workload']} {m['mode']}: {m['reason']}: {m.get('detail')}")
    for rep in m.get("repeats", []):
        f = rep.get("backend") or {}
        if f.get("built_now"):
            r["builds"] += 1
            r["build_s"] += f.get("build_process_s") or 0.0
        r["load_s"] += f.get("load_s") or 0.0
        r["parity_s"] += (rep.get("parity") or {}).get("check_s") or 0.0
        r["measure_s"] += (rep.get("timings") or {}).get("measure_s") or 0.0
for name, r in rows.items():
    print(f"{name:<12} cells {r['cells']:2d} ok {r['ok']:2d}  builds {r['builds']:2d} ({r['build_s']:6.1f} s)  "
          f"loads {r['load_s']:5.1f} s  parity {r['parity_s']:5.1f} s  all repeats {r['measure_s']:6.1f} s")
    for line in r["failed"]:
        print(f"  failed: {line[:200]}")
PY
# The build logs and manifests explain any failed build (the artifacts themselves are hundreds of MB).
(cd "$W" && find artifacts \( -name manifest.json -o -name build.log \) 2>/dev/null | tar czf "$OUT/builds.tgz" -T -)
