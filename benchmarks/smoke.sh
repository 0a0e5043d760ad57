#!/usr/bin/env bash
# First look on the GPU machine: GPU tests, the bare loop and clsbench on ResNet-50 (fidelity), a few modes.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv
python3 -c "import torch, torchvision, timm, sys; print(sys.version.split()[0], torch.__version__, torchvision.__version__, timm.__version__, torch.version.cuda, torch.backends.cudnn.version())"
start=$(date +%s)
python3 -m pytest -q -m gpu tests/test_gpu.py -x 2>&1 | tail -15
echo "gpu tests: $(( $(date +%s) - start )) s"
python3 benchmarks/bare_loop.py --workload infer --batch-size 256 | tail -1
python3 benchmarks/bare_loop.py --workload train --batch-size 256 --iterations 50 | tail -1
start=$(date +%s)
python3 -m clsbench run --model resnet50 --workload infer-throughput,train --mode amp-bf16+cl --batch-size 256 \
  --repeats 3 -o "$OUT/fidelity.json" -q
echo "clsbench fidelity run: $(( $(date +%s) - start )) s"
python3 -m clsbench run --model resnet50 --workload infer-latency --mode fp32,amp-bf16+cl,amp-bf16+cl+cudagraph \
  --batch-size 1 --repeats 1 --min-time 2 -o "$OUT/latency.json" -q
