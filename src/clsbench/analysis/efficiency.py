"""Compute efficiency from stored numbers: achieved FLOP/s, MFU, roofline verdict, energy per image.

Pure functions of plain numbers, no torch, so a report can derive every figure from result files alone.
Every function takes ``None`` for a number that was not measured (no NVML, CPU run, unknown GPU) and then
returns ``None`` (or, for the verdict, ``bound_by: None`` with the reason) instead of failing: a missing
telemetry source must never fail a run. A number that is present but impossible (negative, or zero where it
divides) raises :class:`~clsbench.errors.InvalidInputError`.

Units live in the names: ``_flop_s`` is FLOP per second, ``_tflop_s`` 1e12 FLOP per second, ``_bytes_s``
bytes per second, ``_flop_per_byte`` arithmetic intensity, ``_w`` watts, ``_j`` joules.

The roofline (Williams, Waterman and Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 2009): a kernel of arithmetic intensity ``I`` FLOP/byte can reach at most
``min(peak_flop_s, I * peak_bytes_s)``; the intensity where the two meet, ``peak_flop_s / peak_bytes_s``, is
the ridge point. Below it the memory system is the ceiling, above it the arithmetic units are.
"""

from __future__ import annotations

import math
from typing import Any

from clsbench.errors import InvalidInputError

#: Below this fraction of the wall time spent with a kernel running on the GPU, a measurement is
#: launch/overhead-bound: the GPU idles more than half the time waiting for the host (Python, the framework's
#: dispatcher, kernel launches, synchronisation), so neither its arithmetic nor its memory is the ceiling, and
#: a faster GPU would not make it faster. Batch-1 latency of a small network is the typical case. Half is the
#: point where host time, not device time, is the larger part of every step.
LAUNCH_BOUND_BUSY_FRACTION = 0.5

BOUND_BY_VALUES = ("compute", "memory", "launch")


def _check(name: str, value: float | None, *, positive: bool = False) -> None:
    """Raise for a present but impossible number: not a finite real, negative, or zero where ``positive``."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidInputError(f"{name} must be a finite number or None, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise InvalidInputError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")


def achieved_flop_s(flops_per_image: float | None, images_per_s: float | None) -> float | None:
    """FLOP/s delivered: FLOPs per image times images per second (None if either is unknown)."""
    _check("flops_per_image", flops_per_image)
    _check("images_per_s", images_per_s)
    if flops_per_image is None or images_per_s is None:
        return None
    return flops_per_image * images_per_s


def achieved_tflop_s(flops_per_image: float | None, images_per_s: float | None) -> float | None:
    """:func:`achieved_flop_s` in TFLOP/s (1e12 FLOP/s), as tables show it."""
    flop_s = achieved_flop_s(flops_per_image, images_per_s)
    return None if flop_s is None else flop_s / 1e12


def mfu(achieved_flop_s: float | None, peak_flop_s: float | None) -> float | None:
    """Model FLOPs utilisation: achieved over peak FLOP/s, a fraction (0.42 = 42%).

    "Model" FLOPs are the network's own FLOPs (:mod:`clsbench.measure.flops`), whatever the kernels actually
    executed (recomputation, padding), as in PaLM's definition (Chowdhery et al. 2022, appendix B). None if
    either number is unknown; ``peak_flop_s`` None also means the GPU has no unit for the precision.
    """
    _check("achieved_flop_s", achieved_flop_s)
    _check("peak_flop_s", peak_flop_s, positive=True)
    if achieved_flop_s is None or peak_flop_s is None:
        return None
    return achieved_flop_s / peak_flop_s


def min_bytes_per_image(*, param_bytes: float | None, activation_bytes: float | None,
                        batch_size: int) -> float | None:
    """Minimal memory traffic per image at a batch size: the weights are read once per batch, not per image.

    ``param_bytes / batch_size + activation_bytes``, from :func:`clsbench.measure.flops.count_model_costs`
    (which reports the batch-1 figure, ``min_bytes_forward``). None if either is unknown.
    """
    _check("param_bytes", param_bytes)
    _check("activation_bytes", activation_bytes)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    if param_bytes is None or activation_bytes is None:
        return None
    return param_bytes / batch_size + activation_bytes


def roofline_verdict(
    *,
    flops_per_image: float | None,
    bytes_per_image: float | None,
    images_per_s: float | None,
    peak_flop_s: float | None,
    peak_bytes_s: float | None,
    gpu_busy_fraction: float | None,
) -> dict[str, Any]:
    """What limits a measurement: ``"compute"``, ``"memory"`` or ``"launch"``, and the numbers behind it.

    The rule, in order:

    1. ``gpu_busy_fraction`` (time with a kernel running on the GPU over the wall time of the timed region)
       known and below :data:`LAUNCH_BOUND_BUSY_FRACTION` -> ``"launch"``: the host is the bottleneck.
    2. arithmetic intensity (``flops_per_image / bytes_per_image``) below the ridge point
       (``peak_flop_s / peak_bytes_s``) -> ``"memory"``.
    3. otherwise -> ``"compute"``.

    Steps 2-3 need ``flops_per_image``, ``bytes_per_image``, ``peak_flop_s`` and ``peak_bytes_s``; when one is
    None (and step 1 did not decide), ``bound_by`` is None and ``reason`` names what is missing. A
    ``gpu_busy_fraction`` of None skips step 1 (the busy time was not measured). ``images_per_s`` is needed
    only for the achieved rate and the fractions.

    Returns:
        ``bound_by`` (one of :data:`BOUND_BY_VALUES`, or None), ``reason`` (one sentence),
        ``arithmetic_intensity_flop_per_byte``, ``ridge_point_flop_per_byte``, ``attainable_flop_s``
        (``min(peak_flop_s, intensity * peak_bytes_s)``), ``achieved_flop_s``, ``fraction_of_attainable``,
        ``fraction_of_peak`` (the MFU), ``gpu_busy_fraction`` and ``launch_bound_busy_fraction`` (the
        threshold used). Numbers that cannot be computed are None.
    """
    _check("flops_per_image", flops_per_image)
    _check("bytes_per_image", bytes_per_image, positive=True)
    _check("images_per_s", images_per_s)
    _check("peak_flop_s", peak_flop_s, positive=True)
    _check("peak_bytes_s", peak_bytes_s, positive=True)
    _check("gpu_busy_fraction", gpu_busy_fraction)

    intensity = None if flops_per_image is None or bytes_per_image is None else flops_per_image / bytes_per_image
    ridge = None if peak_flop_s is None or peak_bytes_s is None else peak_flop_s / peak_bytes_s
    attainable = None
    if intensity is not None and peak_flop_s is not None and peak_bytes_s is not None:
        attainable = min(peak_flop_s, intensity * peak_bytes_s)
    achieved = achieved_flop_s(flops_per_image, images_per_s)
    out: dict[str, Any] = {
        "bound_by": None,
        "reason": "",
        "arithmetic_intensity_flop_per_byte": intensity,
        "ridge_point_flop_per_byte": ridge,
        "attainable_flop_s": attainable,
        "achieved_flop_s": achieved,
        "fraction_of_attainable": None if achieved is None or not attainable else achieved / attainable,
        "fraction_of_peak": mfu(achieved, peak_flop_s),
        "gpu_busy_fraction": gpu_busy_fraction,
        "launch_bound_busy_fraction": LAUNCH_BOUND_BUSY_FRACTION,
    }

    if gpu_busy_fraction is not None and gpu_busy_fraction < LAUNCH_BOUND_BUSY_FRACTION:
        out["bound_by"] = "launch"
        out["reason"] = (f"the GPU was busy {gpu_busy_fraction:.0%} of the wall time (below "
                         f"{LAUNCH_BOUND_BUSY_FRACTION:.0%}): it waits for the host to launch work")
        return out
    missing = [name for name, value in (("flops_per_image", flops_per_image), ("bytes_per_image", bytes_per_image),
                                        ("peak_flop_s", peak_flop_s), ("peak_bytes_s", peak_bytes_s))
               if value is None]
    if intensity is None or ridge is None:
        out["reason"] = "no verdict: unknown " + ", ".join(missing)
        return out
    if intensity < ridge:
        out["bound_by"] = "memory"
        out["reason"] = (f"arithmetic intensity {intensity:.3g} FLOP/byte is below the ridge point "
                         f"{ridge:.3g} FLOP/byte: memory bandwidth is the ceiling")
    else:
        out["bound_by"] = "compute"
        out["reason"] = (f"arithmetic intensity {intensity:.3g} FLOP/byte is at or above the ridge point "
                         f"{ridge:.3g} FLOP/byte: arithmetic throughput is the ceiling")
    return out


def joules_per_image(energy_j: float | None, images: float | None) -> float | None:
    """Energy per image: joules over the timed region divided by the images processed in it.

    Equal to average power over throughput (W / (img/s) = J/img). None if either is unknown or no image was
    processed.
    """
    _check("energy_j", energy_j)
    _check("images", images)
    if energy_j is None or not images:
        return None
    return energy_j / images


def images_per_s_per_w(images_per_s: float | None, avg_power_w: float | None) -> float | None:
    """Throughput per watt (img/s/W, the same as images per joule). None if unknown or the power is zero."""
    _check("images_per_s", images_per_s)
    _check("avg_power_w", avg_power_w)
    if images_per_s is None or not avg_power_w:
        return None
    return images_per_s / avg_power_w
