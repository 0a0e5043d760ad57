"""The vocabulary stored in result files, typed: a measurement's status and the reason codes of one not ``ok``.

Both are string-valued enums, so they compare equal to, and are written to JSON as, the plain strings older
files hold (``Status.OK == "ok"``; ``json.dumps(Reason.OOM)`` is ``"oom"``). Readers may meet codes a newer
clsbench wrote: compare against members, never assume a stored string is one.
"""

from __future__ import annotations

from enum import Enum


class _StrEnum(str, Enum):
    """A string enum that prints as its value (``f"{Reason.OOM}"`` is ``oom``) on every Python version."""

    __str__ = str.__str__
    __format__ = str.__format__


class Status(_StrEnum):
    """What became of a measurement (or of one of its repeats)."""

    OK = "ok"
    FAILED = "failed"  # it ran and broke: the reason says how
    SKIPPED = "skipped"  # it could not run here (a mode or pipeline this device lacks): the reason says why


class Reason(_StrEnum):
    """Why a measurement is ``failed`` or ``skipped``."""

    OOM = "oom"  # out of device (or host) memory
    NAN_LOSS = "nan_loss"  # the training loss became NaN or infinite
    COMPILE_ERROR = "compile_error"  # torch.compile (dynamo / inductor) failed
    MODEL_ERROR = "model_error"  # the model could not be resolved or built
    CRASH = "crash"  # any other exception, or the worker process died
    TIMEOUT = "timeout"  # no result within the time limit; the worker was killed
    UNSUPPORTED_MODE = "unsupported_mode"  # the mode cannot run on this device or workload (skipped)
    DATA_ERROR = "data_error"  # the dataset cannot be read as asked
    DATA_LOADER_TIMEOUT = "data_loader_timeout"  # a batch took longer than the data timeout
    DATA_LOADER_CRASH = "data_loader_crash"  # a DataLoader worker died
    UNSUPPORTED_PIPELINE = "unsupported_pipeline"  # the data pipeline cannot run here (skipped)
    UNSUPPORTED_STRATEGY = "unsupported_strategy"  # scale: the strategy cannot run at this GPU count (skipped)
    RANK_FAILED = "rank_failed"  # scale: a rank failed for a reason of its own
    SERVER_ERROR = "server_error"  # serve: the serving loop itself raised (not the model)
    LOADGEN_ERROR = "loadgen_error"  # serve: MLPerf's LoadGen failed to run
    INTERRUPTED = "interrupted"  # serve: Ctrl-C ended the LoadGen run
    UNSUPPORTED_BACKEND = "unsupported_backend"  # the inference backend cannot express this here (skipped)
    EXPORT_ERROR = "export_error"  # the backend's exporter (torch.jit.trace, torch.export, torch.onnx) refused
    BUILD_ERROR = "build_error"  # compiling or serialising the exported graph raised
    BUILD_CRASH = "build_crash"  # the backend's build process died (a signal such as SIGSEGV)
    BUILD_TIMEOUT = "build_timeout"  # the backend's build ran past its limit and was killed
    LOAD_ERROR = "load_error"  # the built artifact does not load or run in the measuring process
    PARITY_FAILED = "parity_failed"  # outputs outside the tolerance against fp32 eager (figures kept, never a winner)


#: Reasons of a measurement that did not run here rather than one that broke.
SKIP_REASONS = frozenset({Reason.UNSUPPORTED_MODE, Reason.UNSUPPORTED_PIPELINE, Reason.UNSUPPORTED_STRATEGY,
                          Reason.UNSUPPORTED_BACKEND})
