"""Where the gpu pipeline's time goes: each stage alone, on one batch size, with the GPU otherwise idle.

    PYTHONPATH=src python3 benchmarks/profile_gpu_pipeline.py DATASET_DIR [--batch-size 256] [--batches 10]

Per batch, medians over ``--batches`` batches after two warm-up batches (host wall time; "host" is the time until
the call returned to Python, "done" adds the wait for the GPU):

* read: the encoded bytes of the batch from the folder, one thread (as the gpu pipeline's read stage at w0);
* decode: ``torchvision.io.decode_jpeg(list, device="cuda")`` on those bytes (the decode stage);
* augment: each registered augmentation (``batched``, ``per-image``: :data:`clsbench.data.base.AUGMENTS`) on the
  decoded images, into bfloat16 channels_last (the augment stage);
* train step: ResNet-50 (or ``--model``) in amp-bf16 channels_last on a resident random batch, SGD (the ceiling's
  step), for comparison.

The three stages run in their own threads, so the pipeline keeps up when each stage's time is under the training
step's; the host columns show how much of each stage holds the Python interpreter that the training thread needs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def timed(fn, batches: int) -> tuple[float, float]:
    """Median host ms and median done ms of ``fn`` over ``batches`` calls, after two warm-up calls."""
    host, done = [], []
    for n in range(batches + 2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if n >= 2:
            host.append(1e3 * (t1 - t0))
            done.append(1e3 * (t2 - t0))
    return statistics.median(host), statistics.median(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--model", default="resnet50")
    args = parser.parse_args()

    from torchvision.io import ImageReadMode, decode_jpeg

    from clsbench.data import DataSettings
    from clsbench.data.augment import choices
    from clsbench.data.base import AUGMENTS
    from clsbench.data.sources.folder import FolderSource
    from clsbench.models.registry import get_model_spec

    dataset = FolderSource().open(DataSettings(args.directory))
    n, size = args.batch_size, 224
    cursor = {"start": 0}

    def indices() -> list[int]:
        start = cursor["start"]
        cursor["start"] = (start + n) % max(1, len(dataset) - n)
        return list(range(start, start + n))

    rows: list[tuple[str, float, float]] = []
    host, done = timed(lambda: [dataset.read(i) for i in indices()], args.batches)
    rows.append(("read (1 thread, page cache)", host, done))

    encoded = [dataset.read(i) for i in range(n)]
    decoded: list[torch.Tensor] = []

    def decode() -> None:
        decoded[:] = decode_jpeg(encoded, mode=ImageReadMode.RGB, device="cuda")

    rows.append(("decode (nvJPEG, batched)", *timed(decode, args.batches)))
    boxes, flips = zip(*(choices(0, 0, i, int(im.shape[-2]), int(im.shape[-1])) for i, im in enumerate(decoded)),
                       strict=True)
    for name, augment in AUGMENTS.items():
        rows.append((f"augment {name}", *timed(
            lambda a=augment: a.apply(decoded, boxes, flips, size, torch.channels_last, torch.bfloat16),
            args.batches)))

    model = get_model_spec(args.model).build(seed=0).cuda().to(memory_format=torch.channels_last).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(n, 3, size, size, device="cuda").contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (n,), device="cuda")
    torch.backends.cudnn.benchmark = True

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rows.append((f"train step ({args.model} amp-bf16+cl)", *timed(step, args.batches)))
    print(f"\nper batch of {n} (median of {args.batches}; host: until the call returned, done: until the GPU "
          f"finished)")
    print(f"{'stage':<34} {'host ms':>8} {'done ms':>8} {'img/s':>8}")
    for name, h, d in rows:
        print(f"{name:<34} {h:8.1f} {d:8.1f} {n / d * 1e3:8,.0f}")


if __name__ == "__main__":
    main()
