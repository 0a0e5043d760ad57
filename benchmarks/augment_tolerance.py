"""How far the ``batched`` augmentation (roi_align) is from the antialiased reference, on generated photographs.

    PYTHONPATH=src python3 benchmarks/augment_tolerance.py DATASET_DIR [--images 48] [--epochs 2] [--sizes 224,128]

The reference is the cpu pipeline's augmentation: ``transforms.v2.functional.resized_crop(..., antialias=True)`` on
the uint8 image (libjpeg-turbo decode), then the flip. Both use the same seeded crops and flips (epochs 0, 1, ...).
Per output size it prints the absolute difference in grey levels (0-255), over every pixel value of every image:
its mean and 99th percentile, then the same against the float32 antialiased resize (``per-image``), which leaves out
the reference's rounding to uint8. Runs on the CPU (the arithmetic is the same on a GPU; tests/test_data_gpu.py).
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--sizes", default="224,176,128,96")
    args = parser.parse_args()

    from torchvision.transforms.v2 import functional as TF

    from clsbench.data import DataSettings
    from clsbench.data.augment import MEAN, STD, choices
    from clsbench.data.base import AUGMENTS
    from clsbench.data.decoders.nvjpeg import decode_batch
    from clsbench.data.sources.folder import FolderSource

    data = FolderSource().open(DataSettings(args.directory, prime_cache=False))
    count = min(args.images, len(data))
    images = decode_batch([data.read(i) for i in range(count)], list(data.index.kinds[:count]), torch.device("cpu"))
    std, mean = torch.tensor(STD).view(1, 3, 1, 1) * 255, torch.tensor(MEAN).view(1, 3, 1, 1) * 255
    print(f"{count} images of {args.directory}, epochs 0-{args.epochs - 1}; grey levels (0-255)")
    print(f"{'size':>5} {'mean':>6} {'p99':>6} {'max':>6}   vs float: {'mean':>6} {'p99':>6}")
    for size in (int(s) for s in args.sizes.split(",")):
        to_uint8, to_float = [], []
        for epoch in range(args.epochs):
            picked = [choices(0, epoch, i, int(im.shape[-2]), int(im.shape[-1])) for i, im in enumerate(images)]
            boxes, flips = [b for b, _ in picked], [f for _, f in picked]
            out = AUGMENTS.get("batched").apply(images, boxes, flips, size, torch.contiguous_format, torch.float32)
            grey = out * std + mean
            crops = [TF.resized_crop(im, *box, [size, size], antialias=True) for im, box in zip(images, boxes,
                                                                                               strict=True)]
            reference = torch.stack([c.flip(-1) if f else c for c, f in zip(crops, flips, strict=True)]).float()
            per_image = AUGMENTS.get("per-image").apply(images, boxes, flips, size, torch.contiguous_format,
                                                        torch.float32)
            to_uint8.append((grey - reference).abs().flatten())
            to_float.append(((out - per_image) * std).abs().flatten())
        a, b = torch.cat(to_uint8), torch.cat(to_float)
        step = max(1, a.numel() // 4_000_000)  # quantile() takes at most 16M values
        print(f"{size:>5} {float(a.mean()):6.2f} {float(a[::step].quantile(0.99)):6.2f} {float(a.max()):6.1f}   "
              f"          {float(b.mean()):6.2f} {float(b[::step].quantile(0.99)):6.2f}")


if __name__ == "__main__":
    main()
