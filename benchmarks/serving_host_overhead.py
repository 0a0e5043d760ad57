r"""The serving loop's host cost, without a model: how many queries/s the Python side of `clsbench serve` can carry.

Runs the real server (batcher, instance threads, bulk completion) under the real LoadGen with instances that do no
work (or ``--work-us`` of sleep per batch, a GPU's compute seen from the host: the GIL is released), then prints what
LoadGen measured and the server's own per-batch and per-request host times. Offline gives the loop's ceiling in
samples/s; Server runs at ``--target-qps`` show whether the host keeps p99 low at that rate.

    PYTHONPATH=src python benchmarks/serving_host_overhead.py --scenario Offline --seconds 3
    PYTHONPATH=src python benchmarks/serving_host_overhead.py --scenario Server --target-qps 15000 --work-us 4000
    PYTHONPATH=src python benchmarks/serving_host_overhead.py --scenario Server --target-qps 20000 --max-batch 128 \
        --buckets 32,64,128 --work-us 200 --work-us-per-sample 39 --gather-us-per-sample 15 --instances 1 \
        --shared-device --copy-us-per-sample 2.94 --copy-stream

The compute stage it reports is the stand-in's device time of a batch and the gather its sleep (not measured).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from clsbench.serving import records
from clsbench.serving.batcher import Batch, DynamicBatcher
from clsbench.serving.config import make_buckets
from clsbench.serving.loadgen import import_loadgen, run_loadgen
from clsbench.serving.logs import parse_logs
from clsbench.serving.scenario import LoadGenParams
from clsbench.serving.server import Server


class Device:
    """One stand-in GPU that every instance shares: batches run one after another, in the order they were queued.

    A batch's copy in runs either in line, before its compute (``copy_stream`` False: one stream, as serve before
    ed57a64), or on a copy engine of its own, beside the compute of the batches queued before it (True)."""

    def __init__(self, copy_stream: bool = False) -> None:
        self.free_at = 0.0  # perf_counter time when the 'device' finishes what was queued
        self.copy_free_at = 0.0  # the same for the copy engine
        self.copy_stream = copy_stream
        self.lock = threading.Lock()

    def queue(self, seconds: float, copy_s: float = 0.0) -> float:
        """Queue ``copy_s`` of copy in, then ``seconds`` of compute; when it will be done."""
        with self.lock:
            now = time.perf_counter()
            if self.copy_stream:
                self.copy_free_at = max(self.copy_free_at, now) + copy_s
                begins = max(self.free_at, self.copy_free_at)
            else:
                begins = max(self.free_at, now) + copy_s
            self.free_at = begins + seconds
            return self.free_at


class NoWork:
    """An instance that answers at once, or after ``work_s`` + ``per_sample_s`` x the batch's bucket of 'device'
    time: the device starts a batch when :meth:`start` queues it (or when the batch queued before it ends; a device of
    its own unless one is shared) and :meth:`finish` sleeps until then, releasing the GIL like a CUDA sync."""

    def __init__(self, work_s: float, per_sample_s: float = 0.0, device: Device | None = None,
                 gather_s: float = 0.0, copy_s: float = 0.0) -> None:
        self.work_s = work_s
        self.per_sample_s = per_sample_s
        self.device = device or Device()
        self.gather_s = gather_s  # host time per request of the batch before it is queued (GIL released, as torch's)
        self.copy_s = copy_s  # copy-in time per sample of the batch's bucket

    def thread_context(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def setup(self, tick: Any = None) -> dict[str, Any]:
        return {"bucket_latency_ns": {}}

    def gather_ahead(self, row: int, indices: Any) -> None:
        """The same host time per request, for the rows the server gathers ahead (a sleep: >= ~60 us here)."""
        if self.gather_s and indices:
            time.sleep(self.gather_s * len(indices))

    def start(self, batch: Batch) -> tuple[float, float, float, float]:
        """Returns the ticket: when the 'device' is done with the batch, its gather, device and copy-in times (s)."""
        gather = self.gather_s * (batch.size - getattr(batch, "gathered", 0))  # a server before gather-ahead: all
        if gather:
            time.sleep(gather)
        device = self.work_s + self.per_sample_s * batch.bucket
        copy = self.copy_s * batch.bucket
        return self.device.queue(device, copy), gather, device, copy

    def ready(self, ticket: tuple[float, float, float, float]) -> bool:
        return time.perf_counter() >= ticket[0]

    def finish(self, ticket: tuple[float, float, float, float]) -> tuple[Any, dict[str, float]]:
        done_at, gather, device, copy = ticket
        wait = done_at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        return None, {"gather": gather * 1e9, "copy_in": copy * 1e9, "compute": device * 1e9, "copy_out": 0.0}

    def close(self) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="Offline", choices=["Offline", "Server", "SingleStream"])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--target-qps", type=float, default=10000.0)
    parser.add_argument("--max-batch", type=int, default=64)
    parser.add_argument("--max-delay-ms", type=float, default=2.0)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--work-us", type=float, default=0.0, help="sleep per batch, standing in for the GPU")
    parser.add_argument("--work-us-per-sample", type=float, default=0.0,
                        help="more sleep per sample of the batch's bucket (padding included), e.g. 39 with --work-us "
                             "200 for ResNet-50 export-frozen fp16 on an H100 (5.2 ms a batch of 128)")
    parser.add_argument("--gather-us-per-sample", type=float, default=0.0,
                        help="host time per request before a batch is queued, as the gather into pinned memory "
                             "(15 for ResNet-50's 150 KB images on the H100's host)")
    parser.add_argument("--copy-us-per-sample", type=float, default=0.0,
                        help="device copy-in time per sample of the batch's bucket (2.94 for ResNet-50's uint8 images "
                             "on the H100: 0.376 ms a batch of 128)")
    parser.add_argument("--copy-stream", action="store_true",
                        help="the copy in runs beside the compute of the batch before (serve since ed57a64); "
                             "default: in line before the batch's compute, as serve before it")
    parser.add_argument("--buckets", default="", help="batch shapes, comma-separated (default: powers of two)")
    parser.add_argument("--shared-device", action="store_true",
                        help="all instances share one stand-in device, as on one GPU (default: one each)")
    parser.add_argument("--depth", type=int, default=2, choices=[1, 2],
                        help="batches an instance holds started at once: 2 is serve --overlap, 1 --no-overlap")
    args = parser.parse_args()

    lg = import_loadgen()
    buckets = make_buckets(args.max_batch, [int(b) for b in args.buckets.split(",")] if args.buckets else None)
    shared = Device(args.copy_stream)
    server = Server([NoWork(args.work_us / 1e6, args.work_us_per_sample / 1e6,
                            shared if args.shared_device else Device(args.copy_stream),
                            args.gather_us_per_sample / 1e6, args.copy_us_per_sample / 1e6)
                     for _ in range(args.instances)],
                    DynamicBatcher(args.max_batch, args.max_delay_ms, buckets), batch_timeout_s=60, depth=args.depth)
    server.start()
    params = LoadGenParams(args.scenario, int(args.seconds * 1000), 100, target_qps=args.target_qps
                           if args.scenario == "Server" else None, target_latency_ns=15_000_000,
                           latency_percentile=0.99, expected_qps=args.target_qps, expected_latency_ns=10_000,
                           max_async_queries=0)
    log_dir = Path(tempfile.mkdtemp()) / "run"
    server.begin_run()
    wall_ns, _ = run_loadgen(lg, server, params, log_dir, 1024)
    counters = server.end_run(wall_ns)
    server.close()
    step = {"loadgen": parse_logs(log_dir), "server": counters}
    stats = records.batch_stats(step) or {}
    split = records.time_split_ms(step) or {}
    print(f"{args.scenario}: {step['loadgen'].get('validity')}  samples/s {step['loadgen'].get('samples_per_second')}"
          f"  completed/s {step['loadgen'].get('completed_qps')}  p50 {records.latency_ms(step, 'p50')} ms"
          f"  p99 {records.latency_ms(step, 'p99')} ms")
    print(f"batches {stats.get('batches')}, mean batch {stats.get('mean_batch', 0):.1f}, per batch (ms) "
          + ", ".join(f"{k} {v:.4f}" for k, v in (stats.get("per_batch_ms") or {}).items()))
    print("per request (ms): " + ", ".join(f"{k} {v:.4f}" for k, v in split.items()))
    host_ns = counters["stage_ns"]["complete"] + counters["stage_ns"]["gather"]
    print(f"hand-back per request: {counters['stage_ns']['complete'] / max(1, counters['requests']) / 1e3:.2f} us; "
          f"host per batch {host_ns / max(1, counters['batches']) / 1e3:.1f} us; wall {wall_ns / 1e9:.2f} s")


if __name__ == "__main__":
    main()
