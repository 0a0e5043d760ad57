#!/usr/bin/env bash
# Issue #7 verification on a machine with two GPUs (device kind nvidia-h200-x2), in one call of about 3 minutes:
# a 15-second DDP smoke check over NCCL, then ResNet-50 amp-bf16+cl at 256 images per GPU, DDP (torchrun, NCCL)
# and DataParallel on 1 and 2 GPUs, 2 fresh launches each (8 launches of roughly 15-20 s: start-up, NCCL set-up
# and cuDNN autotuning dominate), then the table and the goals (DDP 2-GPU scaling efficiency >= 90%, DDP ahead of
# DataParallel) last.
#
#   OUT=/some/folder bash benchmarks/verify_scale.sh        # run from the repository root; writes into $OUT
#
# Issue 8, on nvidia-h200-x4 or -x8 (DDP only; DataParallel's one Python thread for 8 GPUs would take the call):
#   GPUS=1,2,4,8 STRATEGY=ddp RESULT_NAME=scale-resnet50-x8.json OUT=... bash benchmarks/verify_scale.sh
#
# RUN_GPU_TESTS=1 also runs the scale test marked `gpu` first (resnet18 on 1 and 2 GPUs; about 40 s more).
set -uo pipefail
# NVLink multicast stays off on shared machines (NCCL, PyTorch's symmetric memory and NVSHMEM): a program that uses
# it can put the host's GPUs out of service. clsbench never sets these; it records them with the result.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
GPUS=${GPUS:-1,2}
STRATEGY=${STRATEGY:-both}
RESULT="$OUT/${RESULT_NAME:-scale-resnet50-x2.json}"
LOG="$OUT/scale.log"
t0=$(date +%s)
{
  nvidia-smi -L
  python3 -c 'import torch; from clsbench.procedures.scale.nccl import nccl_version as v
print("torch", torch.__version__, "| GPUs visible:", torch.cuda.device_count(), "| NCCL", v())'
  env | grep -E '^(NCCL_|TORCH_SYMM_MEM_|NVSHMEM_)' | sort
} 2>&1 | tee "$LOG"
# First, 15 s of DDP over NCCL on both GPUs (resnet18, one short launch): if NCCL cannot start here, stop now rather
# than spend every launch's timeout on it.
python3 -m clsbench scale --model resnet18 --gpus 2 --mode amp-bf16+cl --batch-size-per-gpu 64 --device cuda \
  --repeats 1 --warmup 2 --iterations 10 --min-time 0 --timeout 90 -o "$OUT/scale-smoke.json" -q >>"$LOG" 2>&1
code=$?
grep -E '^(ddp|dp) ' "$LOG" | tail -2
if [ $code -ne 0 ]; then
  echo "DDP smoke check failed (exit code $code) after $(( $(date +%s) - t0 )) s; log:"; tail -n 30 "$LOG"; exit 1
fi
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  python3 -m pytest -q -m gpu tests/test_scale.py 2>&1 | tail -3 | tee -a "$LOG"
fi
# SIGINT at 420 s: clsbench ends the launch in flight and keeps every finished measurement in the file.
timeout -s INT 420 python3 -m clsbench scale --model resnet50 --gpus "$GPUS" --strategy "$STRATEGY" --mode amp-bf16+cl \
  --batch-size-per-gpu 256 --device cuda --repeats 2 --min-time 2 --timeout 180 -o "$RESULT" >>"$LOG" 2>&1
echo "clsbench scale exit code $? after $(( $(date +%s) - t0 )) s" | tee -a "$LOG"
tail -n 40 "$LOG"
python3 - "$RESULT" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
rows = {}
print(f"\n{'strategy':<8} {'gpus':>4} {'img/s':>9} {'img/s/gpu':>9} {'eff':>7} {'spread':>7} {'comm':>6}  status")
for m in data["measurements"]:
    s = m["summary"]
    per_gpu = data["settings"]["scale"]["batch_size_per_gpu"]
    strategy, gpus = m["workload"].removeprefix("train-"), s.get("gpus") or m["batch_size"] // per_gpu
    rows[strategy, gpus] = s.get("throughput_img_s")
    pct = lambda v: "-" if v is None else f"{100 * v:.1f}%"
    rate = lambda v: "-" if v is None else f"{v:,.0f}"
    spread = "-" if s.get("spread_pct") is None else f"{s['spread_pct']:.1f}%"
    print(f"{strategy:<8} {gpus:>4} {rate(s.get('throughput_img_s')):>9} {rate(s.get('throughput_per_gpu_img_s')):>9} "
          f"{pct(s.get('scaling_efficiency')):>7} {spread:>7} {pct(s.get('comm_share')):>6}  {m['status']} "
          f"{m.get('reason') or ''}")
ddp1, ddp2, dp2 = rows.get(("ddp", 1)), rows.get(("ddp", 2)), rows.get(("dp", 2))
if ddp1 and ddp2:
    eff = ddp2 / (2 * ddp1)
    print(f"goal 1: DDP 2-GPU scaling efficiency {100 * eff:.1f}% (>= 90%): {'met' if eff >= 0.9 else 'NOT met'}")
if ddp2 and dp2:
    print(f"goal 2: DDP / DataParallel at 2 GPUs = {ddp2 / dp2:.3f}x ({100 * (ddp2 / dp2 - 1):+.1f}%): "
          f"{'DDP ahead' if ddp2 > dp2 else 'DDP NOT ahead'}")
env = data["environment"].get("distributed") or {}
print("NCCL", env.get("nccl_version"), "| variables:", env.get("communication_env"))
EOF
