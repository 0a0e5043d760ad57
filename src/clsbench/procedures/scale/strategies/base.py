"""The strategy interface: how the GPUs of one measurement share the training step. One module per strategy.

A strategy has two halves that meet only through a JSON *job* file:

* in the parent (``clsbench scale``): whether it can run here (:meth:`Strategy.unsupported_reason`) and the
  command that starts it (:meth:`Strategy.command`); :mod:`clsbench.procedures.scale.launch` runs that command in its
  own session with a wall-clock limit;
* in each process it starts (:mod:`clsbench.procedures.scale.rank`): a :class:`Session` that sets up the devices and the
  process group, wraps the prepared model, and offers the few collective operations the timed loop needs, so the
  loop (:mod:`clsbench.procedures.scale.rank_loop`) is the same for every strategy.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from clsbench.modes.base import Prepared
    from clsbench.procedures.scale.plan import ScalePlan

#: The module every launched process runs (``python -m clsbench.procedures.scale.rank --job FILE``).
WORKER_MODULE = "clsbench.procedures.scale.rank"


class Session(Protocol):
    """One launched process's view of the measurement.

    Attributes:
        rank: global rank of this process (0 for DataParallel).
        local_rank: rank on this node.
        world_size: processes taking part (1 for DataParallel).
        gpus: GPUs this process drives (1 for a DDP rank, k for DataParallel).
        batch_size: images this process feeds per step.
        device: the device its inputs, labels and CUDA events live on.
        devices: every device it drives (synchronised at block edges, memory read on each).
    """

    rank: int
    local_rank: int
    world_size: int
    gpus: int
    batch_size: int
    device: torch.device
    devices: list[torch.device]

    def wrap(self, prepared: Prepared, compile_mode: str | None) -> Prepared:
        """Wrap the mode-prepared module for this strategy; ``compile_mode`` asks for torch.compile on top."""

    def synchronize(self) -> None:
        """Wait for all queued work on every device of this process."""

    def barrier(self) -> None:
        """Return only when every process has reached it (no-op for one process)."""

    def agree_max(self, values: list[int]) -> list[int]:
        """The element-wise maximum of ``values`` over all processes, so every rank takes the same decisions."""

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which backward skips the gradient all-reduce, or None when the strategy has none."""

    def gather(self, record: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Every process's record on rank 0 (None elsewhere)."""

    def facts(self) -> dict[str, Any]:
        """How the strategy was realised here (backend, NCCL version, wrapper options), for the result."""

    def close(self) -> None:
        """Return once every process has finished its device work (the process then leaves at once)."""


class Strategy(Protocol):
    """One way to spread training over GPUs."""

    name: str  # "ddp", "dp"
    description: str  # one line for the table's legend

    def unsupported_reason(self, plan: ScalePlan, gpus: int) -> str | None:
        """Why this strategy cannot run ``gpus`` GPUs per node of ``plan`` here (recorded as skipped), or None."""

    def command(self, plan: ScalePlan, gpus: int, job_path: Path, launch_index: int) -> list[str]:
        """The command line that starts the measurement's processes on this node."""

    def cudnn_benchmark(self, requested: bool | None, gpus: int) -> tuple[bool, str | None]:
        """cuDNN autotuning for ``gpus`` GPUs given the user's choice (None: none made), and a note for the result
        when the value or its consequence needs saying, else None."""

    def open_session(self, job: dict[str, Any]) -> Session:
        """In a launched process: set up devices (and the process group) for ``job``."""


def synchronize_all(devices: list[torch.device]) -> None:
    import torch

    for device in devices:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
