"""How much a thread that launches many small operations slows down beside other Python threads (any CPU).

The training thread of a compiled, not captured, step launches every kernel from Python, and every launch gives up
the interpreter's lock (the GIL) and takes it back. Beside the gpu pipeline's threads, each taking back can wait for
another thread to let go. This script measures that hand-over cost without a GPU: a "launcher" thread times a step
of N tiny torch operations (each releases and retakes the lock, as a launch does), alone and beside one background
thread that runs either torch operations with a little Python between them (the pipeline's per-image work) or pure
Python, at a few switch intervals (``sys.setswitchinterval``: how long a thread may keep the lock when another
waits). Prints the median and 90th percentile step time of each case.

    python benchmarks/gil_handover.py [--ops 400] [--steps 30]

docs/methodology.md 16.4.3 reads its output alongside the H200 measurements.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time

import torch

BACKGROUND = ("none", "torch ops", "pure python")


def step_ms(ops: int, x: torch.Tensor, y: torch.Tensor) -> float:
    start = time.perf_counter()
    for _ in range(ops):
        torch.add(x, 1, out=y)
    return (time.perf_counter() - start) * 1e3


def background(kind: str, stop: threading.Event) -> None:
    a, b = torch.zeros(64), torch.empty(64)
    while not stop.is_set():
        if kind == "torch ops":
            for i in range(256):
                _ = [i * j for j in range(10)]
                b.copy_(a)
        else:
            total = 0
            for i in range(20_000):
                total += i


def measure(kind: str, interval_s: float, ops: int, steps: int) -> tuple[float, float]:
    x, y = torch.zeros(16), torch.empty(16)
    previous = sys.getswitchinterval()
    sys.setswitchinterval(interval_s)
    stop = threading.Event()
    thread = None if kind == "none" else threading.Thread(target=background, args=(kind, stop), daemon=True)
    try:
        if thread is not None:
            thread.start()
            time.sleep(0.05)
        step_ms(ops, x, y)  # warm-up
        times = sorted(step_ms(ops, x, y) for _ in range(steps))
    finally:
        stop.set()
        if thread is not None:
            thread.join()
        sys.setswitchinterval(previous)
    return statistics.median(times), times[min(len(times) - 1, int(0.9 * len(times)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=400, help="tiny operations per timed step (default 400)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per case (default 30)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {args.ops} operations per step")
    print(f"{'background thread':<14} {'switch interval':>16} {'step ms (median)':>17} {'p90':>8}")
    for interval in (0.005, 0.001, 0.0002):
        for kind in BACKGROUND:
            if kind == "none" and interval != 0.005:
                continue
            median, p90 = measure(kind, interval, args.ops, args.steps)
            print(f"{kind:<14} {interval * 1e3:>13.1f} ms {median:>17.2f} {p90:>8.2f}")


if __name__ == "__main__":
    main()
