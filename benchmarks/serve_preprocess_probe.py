"""How long the serving loop's device-side normalisation takes, by the way it is written (issue 33).

`clsbench serve` computes 5.40 ms a ResNet-50 batch of 128 on an H100 where `run --backend export-frozen` measures
5.21 ms for the artifact alone; the difference is the server's own work around the forward pass: uint8 images to the
model's dtype, ImageNet's mean and std, the layout the artifact takes (channels_last), and the top-1 class. This
probe times that work alone, written four ways, on uint8 NCHW batches as the instances hold them:

- ``inplace``: ``to(dtype).sub_(mean).mul_(scale)``, then ``contiguous(channels_last)`` (the loop as of 5ddd58e);
- ``addcmul``: one ``addcmul(shift, x, scale)`` instead of the two in-place passes, then the layout;
- ``layout-first``: the uint8 batch to channels_last first (a quarter of the bytes of the dtype's), then ``to`` and
  ``addcmul``, which keep that layout;
- ``compiled``: the ``inplace`` function through ``torch.compile`` (Inductor fuses it into one kernel).

Each variant runs ``--iters`` times after a warm-up, timed by CUDA events around the whole loop; the median of
``--rounds`` such loops is printed per batch, with the largest difference from ``inplace``'s output. Usage:

    PYTHONPATH=src python3 benchmarks/serve_preprocess_probe.py --batches 128,256 -o probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


def variants(dtype: torch.dtype, device: torch.device) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    mean = (torch.tensor(MEAN) * 255.0).view(1, 3, 1, 1).to(device, dtype)
    scale = (1.0 / (torch.tensor(STD) * 255.0)).view(1, 3, 1, 1).to(device, dtype)
    shift = -mean * scale
    cl = torch.channels_last

    def inplace(images: torch.Tensor) -> torch.Tensor:
        return images.to(dtype).sub_(mean).mul_(scale).contiguous(memory_format=cl)

    def addcmul(images: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(shift, images.to(dtype), scale).contiguous(memory_format=cl)

    def layout_first(images: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(shift, images.contiguous(memory_format=cl).to(dtype), scale).contiguous(memory_format=cl)

    def plain(images: torch.Tensor) -> torch.Tensor:
        return ((images.to(dtype) - mean) * scale).contiguous(memory_format=cl)

    return {"inplace": inplace, "addcmul": addcmul, "layout-first": layout_first,
            "compiled": torch.compile(plain, dynamic=False)}


def time_variant(fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor, iters: int, rounds: int) -> float:
    """The median over ``rounds`` of the mean microseconds a call, timed by CUDA events around ``iters`` calls."""
    with torch.inference_mode():
        for _ in range(10):
            fn(images)
        torch.cuda.synchronize()
        samples = []
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn(images)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0 / iters)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="128,256")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-o", "--output")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: this probe times CUDA kernels and needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    fns = variants(dtype, device)
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        gen = torch.Generator(device="cpu").manual_seed(0)
        images = torch.randint(0, 256, (batch, 3, args.size, args.size), dtype=torch.uint8, generator=gen).to(device)
        with torch.inference_mode():
            reference = fns["inplace"](images).float()
        top1 = torch.randn(batch, 1000, device=device, dtype=dtype)
        argmax_us = time_variant(lambda _, logits=top1: logits.argmax(dim=1), images, args.iters, args.rounds)
        for name, fn in fns.items():
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = fn(images)
            first_s = time.perf_counter() - t0
            us = time_variant(fn, images, args.iters, args.rounds)
            rows.append({"batch": batch, "variant": name, "us": us, "first_call_s": first_s,
                         "channels_last": out.is_contiguous(memory_format=torch.channels_last),
                         "max_abs_diff": float((out.float() - reference).abs().max()), "argmax_us": argmax_us})
    result = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "dtype": args.dtype,
              "size": args.size, "iters": args.iters, "rounds": args.rounds, "rows": rows}
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    print(f"{result['device']}, torch {result['torch']}, {args.dtype}, {args.size}x{args.size}; median of "
          f"{args.rounds} loops of {args.iters} calls (CUDA events)")
    print(f"{'batch':>5}  {'variant':<12}  {'us a batch':>10}  {'vs inplace':>10}  {'cl':>3}  {'max diff':>8}")
    base = {r["batch"]: r["us"] for r in rows if r["variant"] == "inplace"}
    for r in rows:
        print(f"{r['batch']:>5}  {r['variant']:<12}  {r['us']:>10.1f}  {r['us'] - base[r['batch']]:>+10.1f}  "
              f"{'yes' if r['channels_last'] else 'no':>3}  {r['max_abs_diff']:>8.2g}")
    for batch in base:
        print(f"{batch:>5}  top-1 (argmax of {batch} x 1000): "
              f"{next(r['argmax_us'] for r in rows if r['batch'] == batch):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
