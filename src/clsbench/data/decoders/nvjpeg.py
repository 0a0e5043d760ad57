"""``nvjpeg`` (the default): decode a batch with ``torchvision.io.decode_jpeg(list, device=cuda)``.

On a GPU with hardware JPEG decoders (A100, H100, H200) torchvision hands baseline JPEGs to them in one batched
call; progressive ones go through the hybrid decoder (Huffman decoding on the host, one image at a time). Either way
the call returns when its batch is decoded. Measured on the H200 (docs/investigations.md, "nvJPEG's decode beside a
captured step"): per image it still copies the bitstream, synchronises on an event and runs a colour-conversion
kernel, about 250 round trips through the GPU per batch of 256, which take 13-18 ms per batch alone but about 450 ms
beside a GPU kept busy by a CUDA graph (stream priorities do not change that).
PNGs are decoded on the CPU and copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from clsbench.data.base import DECODERS


def decode_batch(encoded: Sequence[torch.Tensor | None], kinds: Sequence[str],
                 device: torch.device) -> list[torch.Tensor | None]:
    """Decode a batch's encoded bytes to RGB uint8 images (3, H, W) on ``device``, None where a file was unreadable
    (None bytes) or fails to decode. The JPEGs in one ``decode_jpeg`` call (nvJPEG, batched, on a GPU; libjpeg-turbo
    on the CPU, the reference); if it fails, one at a time to find the damaged ones. Other formats (PNG) on the CPU,
    then copied."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg

    decoded: list[torch.Tensor | None] = [None] * len(encoded)
    jpegs = [i for i, data in enumerate(encoded) if data is not None and kinds[i] == "jpeg"]
    if jpegs:
        try:
            out = decode_jpeg([encoded[i] for i in jpegs], mode=ImageReadMode.RGB, device=device)
            for i, image in zip(jpegs, out, strict=True):
                decoded[i] = image
        except RuntimeError:
            for i in jpegs:  # find the damaged ones
                try:
                    decoded[i] = decode_jpeg(encoded[i], mode=ImageReadMode.RGB, device=device)
                except RuntimeError:
                    decoded[i] = None
    for i, data in enumerate(encoded):
        if decoded[i] is None and data is not None and kinds[i] != "jpeg":
            try:
                decoded[i] = decode_image(data, mode=ImageReadMode.RGB).to(device, non_blocking=False)
            except Exception:  # noqa: BLE001 - a damaged file: the caller names and replaces it
                decoded[i] = None
    return decoded


def nvjpeg_reason() -> str | None:
    """Why torchvision cannot decode JPEGs on this GPU, or None (checked by decoding a tiny JPEG)."""
    try:
        from torchvision.io import ImageReadMode, decode_jpeg, encode_jpeg

        probe = encode_jpeg(torch.zeros((3, 16, 16), dtype=torch.uint8), quality=90)
        out = decode_jpeg([probe], mode=ImageReadMode.RGB, device="cuda")
        if tuple(out[0].shape) != (3, 16, 16):
            return f"torchvision's GPU JPEG decoder returned shape {tuple(out[0].shape)}"
    except Exception as exc:  # noqa: BLE001 - any failure means this pipeline cannot run here
        return f"torchvision cannot decode JPEGs on the GPU here ({type(exc).__name__}: {str(exc)[:200]})"
    return None


def check_nvjpeg() -> None:
    """Raise PipelineUnsupportedError (the measurement is skipped) where torchvision cannot decode on this GPU."""
    reason = nvjpeg_reason()
    if reason:
        from clsbench.data.errors import PipelineUnsupportedError

        raise PipelineUnsupportedError(reason)




class NvjpegSession:
    """Decoded images are on the device already: :meth:`place` hands them on with their boxes."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.facts: dict[str, Any] = {}

    def decode(self, encoded: Sequence[torch.Tensor | None], kinds: Sequence[str]) -> list[torch.Tensor | None]:
        return decode_batch(encoded, kinds, self.device)

    def place(self, images: Sequence[torch.Tensor], boxes: Sequence[tuple[int, int, int, int]]
              ) -> tuple[list[torch.Tensor], list[tuple[int, int, int, int]]]:
        return list(images), list(boxes)

    def close(self) -> None:
        pass


class Nvjpeg:
    name = "nvjpeg"
    description = "torchvision.io.decode_jpeg (nvJPEG, batched)"

    def check(self, device: torch.device) -> None:
        """Raise PipelineUnsupportedError (the measurement is skipped) where this decoder cannot run."""
        if device.type == "cuda":
            check_nvjpeg()

    def open(self, device: torch.device) -> NvjpegSession:
        return NvjpegSession(device)


DECODERS.register(Nvjpeg.name, Nvjpeg())
