"""GPU telemetry over a measurement's timed region: one small interface, one module per source.

* ``base``: the ``TelemetrySource`` protocol, the raw record layout, clock-event reason names.
* ``nvml``: the real source, a background thread sampling NVML (nvidia-ml-py).
* ``fake``: a scripted source for tests on machines without a GPU.
* ``none``: the source used where there is no telemetry; its record says why.
The record's layout is :mod:`clsbench.results.telemetry`; its statistics, :mod:`clsbench.analysis.telemetry`.

Typical use inside a workload::

    source = make_source("cuda:0")
    source.start()
    ...  # the timed region
    record = source.stop()  # raw samples, stored in the result file
    figures = summarize_telemetry(record, images=n_images, wall_s=elapsed_s)
"""

from __future__ import annotations

from clsbench.errors import InvalidInputError
from clsbench.system.nvml import cuda_index_of
from clsbench.system.telemetry.base import DEFAULT_INTERVAL_S, SOURCES, TelemetrySource
from clsbench.system.telemetry.fake import FakeSource
from clsbench.system.telemetry.none import NoneSource

__all__ = ["DEFAULT_INTERVAL_S", "FakeSource", "NoneSource", "TelemetrySource", "make_source"]


def make_source(device: str, *, interval_s: float = DEFAULT_INTERVAL_S, source: str = "nvml") -> TelemetrySource:
    """The telemetry source for a device: NVML for a GPU it can read, otherwise a ``NoneSource`` saying why.

    Never fails for lack of telemetry: CPU devices, a machine without nvidia-ml-py or a driver, and a CUDA index
    NVML cannot map (e.g. ``CUDA_VISIBLE_DEVICES`` naming a MIG instance) all give a ``NoneSource`` whose record
    carries the reason. Creates no CUDA context.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (N counts the GPUs visible to this process, as torch
            does); any other string gives a ``NoneSource``.
        interval_s: seconds between samples; the default 0.05 s samples at 20 Hz.
        source: the registered source to use for a GPU (:data:`~clsbench.system.telemetry.base.SOURCES`).

    Raises:
        InvalidInputError: ``interval_s`` is not positive.
    """
    if not interval_s > 0:
        raise InvalidInputError(f"telemetry interval must be positive, got {interval_s!r}", hint="e.g. 0.05")
    try:
        cuda_index = cuda_index_of(device)
    except InvalidInputError:
        return NoneSource(f"no GPU telemetry for device {device!r}", interval_s=interval_s)
    if cuda_index is None:
        return NoneSource("device is cpu", interval_s=interval_s)
    return SOURCES.get(source)(cuda_index, interval_s)
