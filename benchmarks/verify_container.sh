#!/usr/bin/env bash
# Issue 21 on the GPU machine, in one call: does clsbench say correctly whether this machine is a container (and
# which, with what limits and which GPUs passed in), whatever the machine is? It saves the ground truth (the
# markers, cgroup files, /dev/shm, device nodes and driver as the shell sees them) beside what clsbench reports:
# `clsbench env` (text and JSON), the container facts, lines and pre-flight checks straight from
# clsbench.system.container (so they show before the lead wires them into `env`), and a short `clsbench run` whose
# result file carries environment.container once wired. About a minute; no network, no podman needed.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)

{
    echo "## markers"
    for f in /.dockerenv /run/.containerenv /run/systemd/container /.singularity.d /var/run/secrets/kubernetes.io; do
        if [ -e "$f" ]; then echo "present: $f"; else echo "absent:  $f"; fi
    done
    [ -s /run/.containerenv ] && { echo "--- /run/.containerenv"; cat /run/.containerenv; }
    echo "container=${container:-<unset>}"
    echo "## environment (image and toolkit variables)"
    env | grep -E '^(NVIDIA_|CUDA_VERSION|CUDNN_VERSION|NV_CUDNN|NCCL_VERSION|PYTORCH_|KUBERNETES_SERVICE_HOST|APPTAINER_|SINGULARITY_|CLSBENCH_IMAGE)' | sort
    echo "## /proc/self/cgroup"; cat /proc/self/cgroup
    echo "## mountinfo: /, the cgroup mounts, /dev/shm"
    awk '$5 == "/" || $5 == "/dev/shm" || $5 ~ "^/sys/fs/cgroup"' /proc/self/mountinfo
    echo "## cgroup limit files (those that exist)"
    for f in /sys/fs/cgroup/cpu.max /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory.high /sys/fs/cgroup/memory.current \
             /sys/fs/cgroup/cpuset.cpus.effective /sys/fs/cgroup/cpu.stat \
             /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us \
             /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us /sys/fs/cgroup/memory/memory.limit_in_bytes \
             /sys/fs/cgroup/cpuset/cpuset.effective_cpus; do
        [ -r "$f" ] && echo "$f: $(head -c 200 "$f" | tr '\n' ' ')"
    done
    echo "## this process's own cgroup folders (limits may sit below the mount point)"
    while IFS=: read -r _ controllers path; do
        case "$controllers" in
            "") dirs="/sys/fs/cgroup$path /sys/fs/cgroup/unified$path" ;;
            cpu,cpuacct|cpu|memory|cpuset) dirs="/sys/fs/cgroup/$controllers$path" ;;
            *) continue ;;
        esac
        for d in $dirs; do
            for f in cpu.max memory.max memory.high cpu.cfs_quota_us memory.limit_in_bytes cpuset.effective_cpus; do
                [ -r "$d/$f" ] && echo "$d/$f: $(head -c 100 "$d/$f")"
            done
        done
    done < /proc/self/cgroup
    echo "## /dev/shm"; df -B1 /dev/shm
    echo "## CPUs: nproc $(nproc), online $(cat /sys/devices/system/cpu/online 2>/dev/null)"
    echo "## GPU device nodes"; ls -la /dev/nvidia* 2>&1
    echo "## driver"; cat /proc/driver/nvidia/version 2>&1; ls /proc/driver/nvidia/gpus 2>&1
    echo "## libcuda"; ldconfig -p 2>/dev/null | grep -E 'libcuda\.so\.1' || echo "not in the ld cache"
    command -v nvidia-smi >/dev/null && nvidia-smi -L
} > "$OUT/ground-truth.txt" 2>&1
echo "ground truth: $OUT/ground-truth.txt"

python3 -m clsbench env > "$OUT/env.txt" 2>&1; echo "clsbench env: rc=$?"
python3 -m clsbench env --json > "$OUT/env.json" 2>"$OUT/env-json.err"; echo "clsbench env --json: rc=$?"

python3 - "$OUT" > "$OUT/container.txt" 2>&1 <<'EOF'
import json
import sys
from pathlib import Path

from clsbench.system.container import container_checks, container_facts, container_lines, loader_batch_bytes

out = Path(sys.argv[1])
facts = container_facts()
(out / "container.json").write_text(json.dumps(facts, indent=1, sort_keys=True))
rows = container_lines(facts)
width = max(len(label) for label, _ in rows)
for label, value in rows:
    print(f"{label:<{width}}  {value}")
print("\npre-flight checks for `--device cuda --data DIR --num-workers 8 --batch-size 256 --data-source memory` "
      "with a 10 GiB dataset:")
for c in container_checks(facts, device="cuda", num_workers=8, batch_bytes=loader_batch_bytes(256),
                          data_source="memory", dataset_bytes=10 * 2**30):
    print(f"  {c['status']:<11} {c['check']:<16} {c['message']}")
print("\nunavailable:", json.dumps(facts["unavailable"], indent=1))
EOF
echo "container facts: rc=$? ($OUT/container.txt, $OUT/container.json)"
cat "$OUT/container.txt"

t1=$(date +%s)
python3 -m clsbench run --model resnet18 --workload infer-throughput --mode amp-bf16 --batch-size 64 --repeats 1 \
    --warmup 5 --min-time 2 --device cuda -o "$OUT/run.json" -q > "$OUT/run.log" 2>&1
echo "short run: rc=$? in $(( $(date +%s) - t1 )) s"
python3 - "$OUT/run.json" <<'EOF'
import json
import sys

result = json.load(open(sys.argv[1]))
env = result["environment"]
statuses = [m["status"] for m in result["measurements"]]
print(f"run.json: measurements {statuses}, gpu {env.get('gpu', {}).get('name')}")
container = env.get("container")
if container is None:
    print("run.json: no environment.container (not wired into the environment capture yet)")
else:
    print(f"run.json: environment.container in_container={container.get('in_container')} "
          f"runtime={container.get('runtime')} markers={container.get('markers')}")
EOF
echo "total $(( $(date +%s) - t0 )) s"
