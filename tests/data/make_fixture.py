"""Regenerate ``tests/data/result_v1.json``: a small, realistic result file in schema version 1.

The repeat records below are written by hand, in the shape the worker produces (on an H200: CUDA-event
iteration times, NVML memory readings); everything derived from them (status, summary, validity) comes from
the library itself (:func:`clsbench.analysis.summary.build_measurement`), and the file is written by
:func:`clsbench.results.io.save`. Never edit the JSON by hand: change this script and run it::

    .venv/bin/python tests/data/make_fixture.py

The committed file is an *old-format fixture*: once the schema moves past version 1, leave it as it is (it
proves old files stay readable) and write a new fixture for the new version instead.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from clsbench.analysis.summary import build_measurement
from clsbench.core.plan import Cell, RunPlan, StopRule
from clsbench.results import io as result_io
from clsbench.results.schema import BenchmarkResult

OUTPUT = Path(__file__).with_name("result_v1.json")
CREATED_UTC = "2026-11-30T12:00:00+00:00"
TOOL = {"name": "clsbench", "version": "0.1.0"}
DEVICE = "cuda"
GIB = 2**30

STOP_RULES = {
    "infer-latency": StopRule(warmup=3, min_iterations=8, min_seconds=0.05, max_seconds=120.0),
    "infer-throughput": StopRule(warmup=2, min_iterations=5, min_seconds=0.3, max_seconds=120.0),
    "train": StopRule(warmup=2, min_iterations=6, min_seconds=0.1, max_seconds=120.0),
}

ENVIRONMENT: dict[str, Any] = {
    "device": DEVICE,
    "clsbench": {"version": "0.1.0", "git_commit": None, "git_dirty": None, "git_commit_source": None},
    "python": {"version": "3.12.3", "implementation": "CPython", "executable": "/opt/venv/bin/python3"},
    "os": {
        "platform": "Linux-6.8.0-x86_64-with-glibc2.39",
        "system": "Linux",
        "kernel_release": "6.8.0",
        "distribution": "Ubuntu 24.04.3 LTS",
        "hostname": "fixture-host",
    },
    "cpu": {
        "model": "Intel(R) Xeon(R) Processor",
        "arch": "x86_64",
        "logical_cores": 16,
        "physical_cores": 16,
        "memory_total_bytes": 135148564480,
        "allowed_cpus": "0-15",
        "allowed_cpus_count": 16,
    },
    "software": {
        "torch": "2.11.0+cu130",
        "torch_cuda_version": "13.0",
        "cudnn_version": 91900,
        "torch_built_with_cuda": True,
        "torchvision": "0.26.0",
        "timm": "1.0.29",
        "triton": "3.6.0",
        "numpy": "2.5.2",
        "nvidia_ml_py": "13.610.43",
    },
    "torch_flags": {
        "matmul_allow_tf32": False,
        "cudnn_allow_tf32": True,
        "float32_matmul_precision": "highest",
        "cudnn_enabled": True,
        "cudnn_benchmark": False,
        "cudnn_deterministic": False,
        "deterministic_algorithms": False,
        "num_threads": 16,
        "num_interop_threads": 16,
    },
    "env_vars": {},
    "gpu": {
        "source": "nvml",
        "count": 1,
        "visible_count": 1,
        "index": 0,
        "nvml_index": 0,
        "name": "NVIDIA H200",
        "uuid": "GPU-00000000-1111-2222-3333-444444444444",
        "pci_bus_id": "00000000:00:06.0",
        "memory_total_bytes": 150754820096,
        "compute_capability": "9.0",
        "multiprocessor_count": None,
        "driver_version": "580.159.04",
        "cuda_driver_version": "13.0",
        "nvml_version": "13.580.159.04",
        "clock_sm_mhz": 1980,
        "clock_mem_mhz": 3201,
        "clock_sm_max_mhz": 1980,
        "clock_mem_max_mhz": 3201,
        "clock_sm_app_mhz": 1980,
        "clock_mem_app_mhz": 3201,
        "power_limit_enforced_w": 700.0,
        "power_limit_default_w": 700.0,
        "power_limit_min_w": 200.0,
        "power_limit_max_w": 700.0,
        "persistence_enabled": True,
        "mig_enabled": False,
        "ecc_enabled": True,
        "temperature_c": 40,
        "performance_state": "P0",
        "compute_mode": "default",
    },
    "unavailable": {
        "clsbench.git_commit": "not run from a git checkout",
        "clsbench.git_commit_source": "not run from a git checkout",
        "clsbench.git_dirty": "not run from a git checkout",
        "gpu.multiprocessor_count": "NVML gives it for MIG instances only; CUDA would need a context",
    },
}

FLAGS = {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest",
         "cudnn_benchmark": True, "num_threads": 16, "gc_disabled_while_running": True}


def _validity(iterations: int, wall_s: float) -> dict[str, Any]:
    return {"stop_rule_met": True, "stopped_by_maximum": False, "timed_iterations": iterations,
            "timed_seconds": wall_s}


def _memory(allocated: int, reserved: int, used: int, rss: int) -> dict[str, Any]:
    return {"peak_memory_allocated_bytes": allocated, "peak_memory_reserved_bytes": reserved,
            "device_memory_used_bytes": used, "host_peak_rss_bytes": rss}


def latency_record(wall_ns: list[int], gpu_ms: list[float], pid: int) -> dict[str, Any]:
    """A repeat of infer-latency at batch 1: host clock per request (integer ns), CUDA-event forward time."""
    wall_s = sum(wall_ns) / 1e9
    return {
        "status": "ok", "reason": None, "detail": None,
        "samples": {"wall_ms": [ns / 1e6 for ns in wall_ns], "gpu_ms": gpu_ms, "images": len(wall_ns),
                    "wall_s": wall_s},
        "timings": {"prepare_s": 0.6434735170000039, "setup_s": 0.038257312000013144,
                    "first_iteration_s": 0.462937132, "warmup_iterations": 3},
        "validity": _validity(len(wall_ns), wall_s),
        "memory": _memory(2526592512, 2548039680, 2109210624, 911818752),
        "flags": FLAGS, "mode_notes": {}, "input_size": 224, "pid": pid,
    }


def batch_record(iteration_ms: list[float], batch: int, wall_ns: int, pid: int, *, train: bool,
                 memory: dict[str, Any]) -> dict[str, Any]:
    """A repeat of infer-throughput or train: CUDA-event time per iteration, host time of the whole region."""
    samples: dict[str, Any] = {"iteration_ms": iteration_ms, "images": len(iteration_ms) * batch,
                               "wall_s": wall_ns / 1e9, "blocks": 1, "iteration_clock": "cuda_events"}
    if train:
        samples.update(loss_first=7.252839088439941, loss_last=6.871203422546387)
    return {
        "status": "ok", "reason": None, "detail": None,
        "samples": samples,
        "timings": {"prepare_s": 0.48622210100000984, "setup_s": 0.03622246800000539,
                    "first_iteration_s": 5.253141687, "warmup_iterations": 2, "warmup_s": 0.143052361},
        "validity": _validity(len(iteration_ms), wall_ns / 1e9),
        "memory": memory, "flags": FLAGS, "mode_notes": {}, "input_size": 224, "pid": pid,
    }


def measurements() -> list[tuple[Cell, list[dict[str, Any]]]]:
    """Five cells: ok latency, ok train, UNSTABLE throughput, failed (oom) and skipped (unsupported mode)."""
    latency = Cell("resnet50", "infer-latency", "fp32", 1, DEVICE)
    train = Cell("resnet50", "train", "amp-bf16+cl", 32, DEVICE)
    throughput = Cell("resnet50", "infer-throughput", "fp32", 256, DEVICE)
    oom = Cell("resnet152", "train", "fp32", 1024, DEVICE)
    skipped = Cell("resnet50", "train", "bf16", 32, DEVICE)
    train_memory = _memory(4112302080, 4521459712, 5208801280, 1306058752)
    return [
        (latency, [
            latency_record([6453859, 6365577, 6381334, 6402118, 6391207, 6377912, 6459301, 7120442],
                           [6.278336048126221, 6.17523193359375, 6.201791763305664, 6.22003173828125,
                            6.212607860565186, 6.199295997619629, 6.280191898345947, 6.925312042236328], 737),
            latency_record([6421003, 6399871, 6372455, 6388120, 6410934, 6369501, 6501778, 6994210],
                           [6.245376110076904, 6.222847938537598, 6.196224212646484, 6.209536075592041,
                            6.233088016510010, 6.193151950836182, 6.322175979614258, 6.803455829620361], 741),
        ]),
        (train, [
            batch_record([19.07148742675781, 19.05612754821777, 19.10476875305176, 19.08531188964844,
                          19.06739234924316, 19.11308860778809], 32, 114630297, 745, train=True,
                         memory=train_memory),
            batch_record([19.14188766479492, 19.09708786010742, 19.08531188964844, 19.12070465087891,
                          19.10476875305176, 19.13148498535156], 32, 114799520, 749, train=True,
                         memory=train_memory),
        ]),
        (throughput, [
            batch_record([67.9735336303711, 67.78390502929688, 67.82550048828125, 67.80108642578125,
                          67.84627532958984], 256, 339498102, 753, train=False,
                         memory=_memory(4812809728, 6891241472, 5494013952, 879181824)),
            # A disturbed repeat (another process on the GPU): about 25% slower, so the cell is UNSTABLE.
            batch_record([85.1210708618164, 84.90547180175781, 85.3401870727539, 84.97734069824219,
                          85.0329589843750], 256, 425514893, 757, train=False,
                         memory=_memory(4812809728, 6891241472, 5494013952, 879181824)),
        ]),
        (oom, [
            {"status": "failed", "reason": "oom",
             "detail": "OutOfMemoryError: CUDA out of memory. Tried to allocate 12.25 GiB. GPU 0 has a total "
                       "capacity of 139.72 GiB of which 3.41 GiB is free."},
        ]),
        (skipped, [
            {"status": "skipped", "reason": "unsupported_mode",
             "detail": "bf16 casts the weights, which is for inference only; train with amp-bf16 instead"},
        ]),
    ]


def build() -> BenchmarkResult:
    cells_and_records = measurements()
    plan = RunPlan(cells=tuple(cell for cell, _ in cells_and_records), repeats=2, stop_rules=STOP_RULES)
    plan.validate()
    result = BenchmarkResult(environment=ENVIRONMENT, settings=plan.to_dict(), created_utc=CREATED_UTC,
                             tool=TOOL)
    for cell, records in cells_and_records:
        measurement = build_measurement(cell, records, plan.stop_rule(cell.workload))
        result = result.with_measurement(measurement)
    return result


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else OUTPUT
    result_io.save(build(), path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
