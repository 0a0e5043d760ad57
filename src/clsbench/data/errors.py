"""Errors of the data pipelines, and how a worker records them (status and reason code of the repeat).

| exception | status | reason |
| --- | --- | --- |
| :class:`PipelineUnsupportedError` | skipped | ``unsupported_pipeline`` (gpu decode without CUDA, DALI not installed) |
| :class:`DataError` | failed | ``data_error`` (nothing usable in the directory, every image of a batch undecodable) |
| :class:`DataLoaderTimeoutError` | failed | ``data_loader_timeout`` (no batch within the data timeout: a hung worker) |
| :class:`DataWorkerError` | failed | ``data_loader_crash`` (a DataLoader worker died, or raised) |

In the parent (planning a run) a :class:`DataError` is bad input: one ``error:`` line and exit 2.
"""

from __future__ import annotations

import traceback
from typing import Any

from clsbench.core.vocab import Reason, Status
from clsbench.errors import InvalidInputError


class DataError(InvalidInputError):
    """The dataset cannot be used: missing or empty directory, no usable image left, a batch that cannot decode."""


class PipelineUnsupportedError(InvalidInputError):
    """The pipeline cannot run here (the measurement is recorded as skipped, with this reason)."""


class DataLoaderTimeoutError(RuntimeError):
    """No batch arrived within the data timeout."""


class DataWorkerError(RuntimeError):
    """A DataLoader worker process died or raised."""


def translate_loader_error(exc: BaseException) -> BaseException:
    """Map the RuntimeErrors torch's DataLoader raises to the data errors above (others are returned unchanged).

    torch words them "DataLoader timed out after N seconds", "DataLoader worker (pid(s) ...) exited unexpectedly",
    "DataLoader worker (pid N) is killed by signal: ..." and "Caught X in DataLoader worker process N"; these
    texts have been stable since torch 1.x and are the only signal the DataLoader gives.
    """
    if isinstance(exc, (DataError, DataLoaderTimeoutError, DataWorkerError, PipelineUnsupportedError)):
        return exc
    text = str(exc)
    if "DataLoader timed out" in text:
        return DataLoaderTimeoutError(text.splitlines()[0])
    if "DataLoader worker" in text or "Pin memory thread exited" in text:
        first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        return DataWorkerError(first)
    return exc


def data_failure_record(exc: BaseException) -> dict[str, Any] | None:
    """The repeat record for a data-pipeline exception, or None when ``exc`` is not one."""
    exc = translate_loader_error(exc)
    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]
    if isinstance(exc, PipelineUnsupportedError):
        return {"status": Status.SKIPPED, "reason": Reason.UNSUPPORTED_PIPELINE, "detail": str(exc)}
    if isinstance(exc, DataError):
        return {"status": Status.FAILED, "reason": Reason.DATA_ERROR, "detail": str(exc)[:500]}
    if isinstance(exc, DataLoaderTimeoutError):
        return {"status": Status.FAILED, "reason": Reason.DATA_LOADER_TIMEOUT, "detail": message}
    if isinstance(exc, DataWorkerError):
        return {"status": Status.FAILED, "reason": Reason.DATA_LOADER_CRASH, "detail": message,
                "traceback": traceback.format_exc(limit=8)}
    return None
