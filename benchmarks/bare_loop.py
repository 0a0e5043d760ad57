"""A plain hand-written loop, the reference clsbench must agree with (within 2%).

Nothing but the model, the batch, the mode (bf16 autocast + channels_last), warm-up, and two synchronisations
around the timed iterations. No clsbench import. Prints one JSON line per repeat and a median.

    python3 benchmarks/bare_loop.py --workload infer --batch-size 256
    python3 benchmarks/bare_loop.py --workload train --batch-size 256
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import torchvision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--workload", choices=["infer", "train"], default="infer")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    torch.backends.cudnn.benchmark = True
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = torchvision.models.get_model(args.model, weights=None).to(device, memory_format=torch.channels_last)
    x = torch.randn(args.batch_size, 3, 224, 224, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    if args.workload == "train":
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    else:
        model.eval()

        def step() -> None:
            with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
                model(x)

    rates = []
    for repeat in range(args.repeats):
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.iterations):
            step()
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        rate = args.iterations * args.batch_size / elapsed
        rates.append(rate)
        print(json.dumps({"repeat": repeat, "img_s": rate, "seconds": elapsed}))
    print(json.dumps({"model": args.model, "workload": args.workload, "batch_size": args.batch_size,
                      "median_img_s": statistics.median(rates), "rates": rates}))


if __name__ == "__main__":
    main()
