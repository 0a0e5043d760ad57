#!/usr/bin/env bash
# Issue 16 on the H200 in one device call: the backend matrix through `clsbench run --backend` itself, in cell order,
# under a guard, resumable across calls.
#
#   CLSBENCH_GIT_COMMIT=$(git rev-parse --short HEAD) OUT=$OUT bash benchmarks/backends_h200.sh
#   RESUME=benchmarks/results/h200/backends-<time>/backends.json OUT=$OUT bash benchmarks/backends_h200.sh
#
# The matrix: MODELS (resnet50,mobilenet_v3_large) x infer-throughput (batch 256) and infer-latency (batch 1) x MODES
# (bf16+cl,fp32) x BACKENDS (eager,torchscript,export,export-frozen,onnxruntime,tensorrt), 3 repeats, cell order (a
# cell's repeats share one build, and an interrupted call loses at most one cell's repeats), the artifact cache in the
# ignored folder .cache/ (kept on a warm machine between calls). SIGINT at GUARD_S saves what finished.
# Files go to a new folder benchmarks/results/h200/backends-<UTC time>/ (or the RESUME file's folder, or DIR), as one
# tarball in $OUT. WORKLOADS overrides the workloads. GRAPHS=1 adds a second file, latency-graphs.json: batch 1 in
# bf16+cl+cudagraph over GRAPH_BACKENDS (eager,torchscript,export,export-frozen; an artifact is the bf16+cl one,
# cached).
# FP32=1 adds a third, fp32.json: the matrix in fp32 (the parity reference's own figures), for a MODES without it.
# DIR=<folder> continues every stage that its files say is unfinished, in order (the next call of a chain):
#
#   GRAPHS=1 CLSBENCH_GIT_COMMIT=<commit> OUT=$OUT bash benchmarks/backends_h200.sh        # call 1
#   DIR=benchmarks/results/h200/backends-<time> GRAPHS=1 CLSBENCH_GIT_COMMIT=<commit> OUT=$OUT bash benchmarks/backends_h200.sh
#
# The PROBE=1 stage of 2026-12-03 (benchmarks/aoti_probe.py: why AOTInductor's packages crashed at load on the H200
# image) is gone with that script, last at commit 5f458f4: the question is settled and the export backend chooses its
# compiler itself (docs/investigations.md, "AOTInductor packages killed the process that loaded them").
source "$(dirname "$0")/lib.sh"
GUARD_S=${GUARD_S:-570}
DEVICE=${DEVICE:-cuda}
if [ -n "${DIR:-}" ]; then
  [ -d "$DIR" ] || { echo "error: DIR=$DIR is not a folder here (extract the last call's tarball into the tree first)" >&2; exit 3; }
  DEST=$DIR; T0=$(date +%s)
elif [ -n "${RESUME:-}" ]; then
  # A folder written on the device in an earlier call is not in the next call's copy of the tree: bring it back and
  # commit it first (a missing file once sent a whole call into tarring / instead).
  [ -f "$RESUME" ] || { echo "error: RESUME=$RESUME is not a file here" >&2; exit 3; }
  DEST=$(dirname "$RESUME"); T0=$(date +%s)
else new_dest backends; fi
NAME=${NAME:-backends}  # the result file's name in DEST
echo "${CLSBENCH_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}" >> "$DEST/commit.txt"
export CLSBENCH_CACHE=${CLSBENCH_CACHE:-$PWD/.cache/artifacts} CLSBENCH_DB=${CLSBENCH_DB:-$PWD/.cache/index.sqlite3}
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv 2>&1 || echo "no nvidia-smi"
  $PY -c 'import torch, platform; print("torch", torch.__version__, "cuda", torch.version.cuda, "python",
platform.python_version())'; } >> "$DEST/environment.txt" 2>&1
BACKENDS=${BACKENDS:-eager,torchscript,export,export-frozen,onnxruntime,tensorrt}
# The export backend chooses the compiler by its C++ library; CXX and CLSBENCH_AOTI_CONFIGS, when set, are recorded.
echo "CLSBENCH_AOTI_CONFIGS=${CLSBENCH_AOTI_CONFIGS:-} CXX=${CXX:-} backends=$BACKENDS" | tee -a "$DEST/environment.txt"
# One stage per result file in DEST, each started, resumed or passed over by what its file says, so the same command
# continues in the next call (DIR=<folder>): the matrix, then (GRAPHS=1) the batch-1 cells captured as CUDA graphs.
state_of() {  # FILE: new, pending, done or unreadable
  $PY -c 'import json, sys
try:
    d = json.load(open(sys.argv[1]))
except FileNotFoundError:
    print("new")
except ValueError:
    print("unreadable")
else:
    cells = d.get("settings", {}).get("cells", [])  # "pending" holds only cells begun; unbegun ones are absent
    print("pending" if d.get("pending") or len(d.get("measurements", [])) < len(cells) else "done")' "$1"
}
stage() {  # NAME WORKLOADS MODES BACKENDS; succeeds when the file is finished
  local name=$1 file="$DEST/$1.json" state
  state=$(state_of "$file")
  echo "stage $name: $state at $(( $(date +%s) - T0 )) s"
  case "$state" in
    done) return 0 ;;
    unreadable) echo "error: $file is not a result file; left as it is" >&2; return 1 ;;
  esac
  if (( $(left) < 30 )); then echo "stage $name: not started, $(left) s left"; return 1; fi
  if [ "$state" = pending ]; then
    timeout -s INT "$(left)" $PY -m clsbench run --resume "$file" ${RUN_ARGS:-} \
      > "$DEST/run-$name-resume-$(date -u +%H%M%S).txt" 2>> "$DEST/progress.log"
  else
    timeout -s INT "$(left)" $PY -m clsbench run --model "${MODELS:-resnet50,mobilenet_v3_large}" \
      --workload "$2" --mode "$3" --backend "$4" \
      --device "$DEVICE" --repeats 3 --min-time 1 --no-probe --timeout 300 --order cell ${RUN_ARGS:-} \
      -o "$file" > "$DEST/run-$name.txt" 2>> "$DEST/progress.log"
  fi
  local rc=$?
  state=$(state_of "$file")
  echo "stage $name: rc=$rc, $state at $(( $(date +%s) - T0 )) s (guard $GUARD_S s)"
  $PY -m clsbench show "$file" > "$DEST/table-$name.txt" 2>&1
  grep -E ' ok|FAILED|UNSTABLE' "$DEST/table-$name.txt" | head -n 60 | cut -c1-190
  [ "$state" = done ]
}
if [ -n "${RESUME:-}" ]; then NAME=$(basename "$RESUME" .json); fi
stage "$NAME" "${WORKLOADS:-infer-throughput,infer-latency}" "${MODES:-bf16+cl,fp32}" "$BACKENDS" && \
  { [ "${GRAPHS:-0}" != 1 ] || \
    stage latency-graphs infer-latency bf16+cl+cudagraph "${GRAPH_BACKENDS:-eager,torchscript,export,export-frozen}"; } && \
  { [ "${FP32:-0}" != 1 ] || stage fp32 "${WORKLOADS:-infer-throughput,infer-latency}" fp32 "$BACKENDS"; }
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/$(basename "$DEST").tgz" -C "$(dirname "$DEST")" "$(basename "$DEST")"; fi
