"""Why the gpu pipeline's decode thread takes 55 ms of CPU per batch of 256 beside a captured training step on the
H200, against 16 ms alone (benchmarks/results/h200/pipeline-levers-resnet50-20261202T093108Z). One process, one
device call:

1. what ``torchvision.io.decode_jpeg(list, device="cuda")`` does per batch, from ``torch.profiler``: how many CUDA
   runtime calls of each kind (stream synchronisations, copies, kernel launches) and which kernels, so the path it
   takes (the hardware decoder's one batched call, or the hybrid decoder's host Huffman step and one
   synchronisation per image) is seen, not guessed;
2. the decode's wall and thread CPU time per batch alone and beside a busy GPU: another thread replaying a CUDA
   graph of ResNet-50's forward (bf16, channels_last, batch 256) back to back, as a captured training step keeps
   the GPU busy;
3. the same beside the busy GPU with the decoder's stream at high priority (``clsbench.data.decoder_stream``), and
   with the bitstreams in pinned memory (one pinned buffer per batch), with how fast the graph replays meanwhile;
4. the same batch re-encoded 4:4:4 and progressive, to see which JPEGs take which path;
5. (``--cpu``) decoding on the CPU (libjpeg-turbo, ``decode_jpeg`` on CPU tensors) on a pool of threads, then one
   pinned copy per batch: 2,214-2,581 img/s at 8-14 threads alone on the H200 host, so no way around the GPU.

Prints one table; writes it and the profiler counts as JSON to --out.

    python benchmarks/decode_contention.py --images DIR [--out FILE]
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import io
import json
import statistics
import threading
import time
from pathlib import Path

import torch

BATCH = 256


def load(root: Path, n: int) -> list[torch.Tensor]:
    files = sorted(p for p in root.rglob("*.jpg"))[:n]
    if len(files) < n:
        raise SystemExit(f"{root} has {len(files)} JPEGs, fewer than {n}")
    return [torch.frombuffer(bytearray(p.read_bytes()), dtype=torch.uint8) for p in files]


def reencode(data: list[torch.Tensor], **options: object) -> list[torch.Tensor]:
    from PIL import Image

    out = []
    for t in data:
        image = Image.open(io.BytesIO(t.numpy().tobytes())).convert("RGB")
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90, **options)
        out.append(torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8))
    return out


class Busy:
    """A thread replaying a CUDA graph of ResNet-50's forward back to back (the GPU kept busy, little Python)."""

    def __init__(self) -> None:
        import torchvision

        self.stream = torch.cuda.Stream()
        model = torchvision.models.resnet50().cuda().to(torch.bfloat16).to(memory_format=torch.channels_last).eval()
        x = torch.randn(BATCH, 3, 224, 224, device="cuda", dtype=torch.bfloat16).to(
            memory_format=torch.channels_last)
        with torch.no_grad(), torch.cuda.stream(self.stream):
            for _ in range(3):
                model(x)
            self.stream.synchronize()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):
                model(x)
        torch.cuda.synchronize()
        self.stop = threading.Event()
        self.replays = 0
        self.thread: threading.Thread | None = None

    def replay_ms(self, n: int = 10) -> float:
        with torch.cuda.stream(self.stream):
            self.graph.replay()
            self.stream.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                self.graph.replay()
            self.stream.synchronize()
        return (time.perf_counter() - t0) * 1e3 / n

    def _loop(self) -> None:
        with torch.cuda.stream(self.stream):
            while not self.stop.is_set():
                for _ in range(4):
                    self.graph.replay()
                    self.replays += 1
                self.stream.synchronize()

    def __enter__(self) -> Busy:
        self.stop.clear()
        self.replays, self.started = 0, time.perf_counter()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        time.sleep(0.2)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        assert self.thread is not None
        self.thread.join()
        torch.cuda.synchronize()
        self.last_replay_ms = (time.perf_counter() - self.started) * 1e3 / max(1, self.replays)


def timed(fn, n: int) -> dict[str, float]:
    """Median wall and thread-CPU ms per call of ``fn`` over n calls (after one untimed)."""
    fn()
    walls, cpus = [], []
    for _ in range(n):
        w0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpus.append((time.thread_time() - c0) * 1e3)
        walls.append((time.perf_counter() - w0) * 1e3)
    return {"wall_ms": statistics.median(walls), "cpu_ms": statistics.median(cpus), "min_wall_ms": min(walls)}


def device() -> torch.device:
    """The GPU named by index, always the same way: torchvision makes a new decoder when the name changes."""
    return torch.device("cuda", torch.cuda.current_device())


def pinned(batch: list[torch.Tensor]) -> list[torch.Tensor]:
    buffer = torch.empty(sum(t.numel() for t in batch), dtype=torch.uint8, pin_memory=True)
    torch.cat(batch, out=buffer)
    return list(buffer.split([t.numel() for t in batch]))


def gpu_decode(batch: list[torch.Tensor]):
    from torchvision.io import ImageReadMode, decode_jpeg

    stream = torch.cuda.Stream()

    def run() -> None:
        with torch.cuda.stream(stream):
            out = decode_jpeg(batch, mode=ImageReadMode.RGB, device=device())
            stream.synchronize()
        del out

    return run


def cpu_decode(batch: list[torch.Tensor], pool: concurrent.futures.ThreadPoolExecutor, chunks: int):
    """Decode on the CPU in ``chunks`` pieces on the pool, copy each image into one pinned buffer, one upload."""
    from torchvision.io import ImageReadMode, decode_jpeg

    pieces = [batch[i::chunks] for i in range(chunks)]
    stream = torch.cuda.Stream()

    def piece(part: list[torch.Tensor]) -> list[torch.Tensor]:
        return [decode_jpeg(t, mode=ImageReadMode.RGB) for t in part]

    def run() -> None:
        images = [im for part in pool.map(piece, pieces) for im in part]
        sizes = [im.numel() for im in images]
        pinned = torch.empty(sum(sizes), dtype=torch.uint8, pin_memory=True)
        torch.cat([im.reshape(-1) for im in images], out=pinned)
        with torch.cuda.stream(stream):
            on_gpu = pinned.to("cuda", non_blocking=True)
            stream.synchronize()
        del on_gpu

    return run


def profile_counts(fn) -> dict[str, object]:
    from torch.profiler import ProfilerActivity, profile

    fn()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
    runtime: collections.Counter[str] = collections.Counter()
    kernels: collections.Counter[str] = collections.Counter()
    kernel_us: collections.Counter[str] = collections.Counter()
    for e in prof.events():
        name = e.name
        if name.startswith("cuda") or name.startswith("cu"):
            runtime[name] += 1
        if str(getattr(e, "device_type", "")).endswith("CUDA"):
            short = name[:60]
            kernels[short] += 1
            kernel_us[short] += e.time_range.end - e.time_range.start
    return {"runtime_calls": dict(runtime.most_common(12)),
            "kernels": {k: {"n": kernels[k], "us": kernel_us[k]} for k, _ in kernel_us.most_common(8)}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=Path, required=True)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--cpu", action="store_true", help="also decode on the CPU on threads")
    args = parser.parse_args()
    import torchvision

    data = load(args.images, BATCH)
    facts: dict[str, object] = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                                "gpu": torch.cuda.get_device_name(), "batch": BATCH,
                                "mean_jpeg_kb": sum(t.numel() for t in data) / len(data) / 1e3}
    rows: list[tuple[str, dict[str, float]]] = []
    variants = {"as made (4:2:0 baseline)": data}
    t0 = time.perf_counter()
    variants["4:4:4 baseline"] = reencode(data, subsampling=0)
    variants["progressive 4:2:0"] = reencode(data, progressive=True)
    facts["reencode_s"] = time.perf_counter() - t0
    profiles = {}
    for name, batch in variants.items():
        profiles[name] = profile_counts(gpu_decode(batch))
    facts["profiles"] = profiles
    busy = Busy()
    facts["busy_graph_ms"] = busy.replay_ms()
    n = args.batches

    def case(name: str, fn, on_busy: bool) -> None:
        if not on_busy:
            rows.append((name + ", alone", {**timed(fn, n), "graph_ms": None}))
            return
        with busy:
            r = timed(fn, n)
        rows.append((name + ", busy GPU", {**r, "graph_ms": busy.last_replay_ms}))

    for name, batch in variants.items():
        if name.startswith("progressive"):
            case(f"gpu decode, {name}", gpu_decode(batch), False)
            continue
        for on_busy in (False, True):
            case(f"gpu decode, {name}", gpu_decode(batch), on_busy)
    case("gpu decode, pinned input", gpu_decode(pinned(data)), True)
    from clsbench.data.decoder_stream import raise_decoder_priority

    facts["decoder_stream"] = raise_decoder_priority(device())
    for on_busy in (False, True):
        case("gpu decode, decoder stream high", gpu_decode(data), on_busy)
    case("gpu decode, decoder stream high, pinned input", gpu_decode(pinned(data)), True)
    if args.cpu:
        for threads in (8, 14):
            with concurrent.futures.ThreadPoolExecutor(threads) as pool:
                fn = cpu_decode(data, pool, threads * 2)
                case(f"cpu decode {threads} threads + upload", fn, False)
                case(f"cpu decode {threads} threads + upload", fn, True)
    facts["rows"] = [{"case": c, **r} for c, r in rows]
    print(json.dumps({k: v for k, v in facts.items() if k not in ("rows",)}, indent=1))
    print(f"\n{'case':<56} {'wall ms':>8} {'min':>7} {'CPU ms':>7} {'img/s':>7} {'graph ms':>8}")
    for name, r in rows:
        graph = "-" if r["graph_ms"] is None else f"{r['graph_ms']:.1f}"
        print(f"{name:<56} {r['wall_ms']:>8.1f} {r['min_wall_ms']:>7.1f} {r['cpu_ms']:>7.1f} "
              f"{BATCH / r['wall_ms'] * 1e3:>7,.0f} {graph:>8}")
    if args.out:
        args.out.write_text(json.dumps(facts, indent=1))


if __name__ == "__main__":
    main()
