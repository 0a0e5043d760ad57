"""``ddp``: DistributedDataParallel, one process per GPU, started by PyTorch's own launcher (torchrun).

The parent builds a ``python -m torch.distributed.run`` command; torchrun's elastic agent starts one
``clsbench.procedures.scale.rank`` per GPU with ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` set, and tears them all down
when one fails (``--max-restarts 0``: a benchmark must not quietly restart a rank).

Rendezvous:

* one node: ``--standalone`` (a private c10d store on a free local port, so two runs never collide);
* several nodes (or an explicit ``--rdzv-endpoint``): torchrun's static rendezvous, ``--master-addr HOST
  --master-port PORT+i --node-rank R``, where i is the launch's index in the planned sequence. Static, because
  node 0 must host global rank 0, which writes the result; a port per launch, because a node that finishes
  launch i early must never reach the store of launch i on its way to launch i+1.

Each rank: ``torch.cuda.set_device(LOCAL_RANK)``, ``init_process_group`` (NCCL on GPUs, bound to the device so
the communicator is created at once; gloo on a CPU) with the launch's timeout, then
``DistributedDataParallel`` with the options in :data:`DDP_OPTIONS`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clsbench.procedures.scale.strategies.base import WORKER_MODULE, synchronize_all

if TYPE_CHECKING:
    import torch

    from clsbench.modes.base import Prepared
    from clsbench.procedures.scale.plan import ScalePlan

#: How often torchrun's agent looks at its workers (s): a failed rank is noticed within this time.
MONITOR_INTERVAL_S = 0.5

#: Options given to DistributedDataParallel, stored with every measurement:
#:
#: * ``gradient_as_bucket_view``: gradients become views into the all-reduce buckets, which saves the copy from
#:   the buckets back into ``.grad`` after every all-reduce (and its memory). The train step clears gradients
#:   with ``set_to_none=True``, so autograd writes a fresh gradient that the reducer copies into its bucket
#:   once, then points ``.grad`` at the bucket: one copy per step instead of two.
#: * ``bucket_cap_mb`` 25: PyTorch's default bucket size.
#: * ``find_unused_parameters`` False: the networks use every parameter in every step.
#: * ``static_graph`` False: it only pays off with unused parameters or re-entrant checkpointing, neither of
#:   which these networks use, and it would change what ``no_sync()`` does in the communication blocks.
#:
#: Buffers keep PyTorch's default: BatchNorm's running statistics are broadcast from rank 0 at every forward, as
#: in every plain DDP script. The option is not passed, because its name changed (``broadcast_buffers``, then
#: ``forward_sync_buffers``); the value in force is recorded as ``buffers_synced_every_forward``.
DDP_OPTIONS: dict[str, Any] = {
    "gradient_as_bucket_view": True,
    "bucket_cap_mb": 25,
    "find_unused_parameters": False,
    "static_graph": False,
}

#: Key in the process group's store that counts the ranks done with all their device work.
FINISHED_KEY = "clsbench/finished"
#: Seconds a rank waits for the others to finish before it leaves anyway (torchrun ends a launch whose rank died).
FINISH_WAIT_S = 60.0


def torchrun_command(plan: ScalePlan, gpus: int, job_path: Path, launch_index: int) -> list[str]:
    """``python -m torch.distributed.run ... -m clsbench.procedures.scale.rank --job FILE`` for this node."""
    from clsbench.procedures.scale.plan import parse_endpoint

    command = [sys.executable, "-m", "torch.distributed.run"]
    if plan.rdzv_endpoint:
        host, port = parse_endpoint(plan.rdzv_endpoint)
        command += ["--nnodes", str(plan.nnodes), "--node-rank", str(plan.node_rank),
                    "--master-addr", host, "--master-port", str(port + launch_index)]
    else:
        command += ["--standalone", "--nnodes", "1"]
    command += ["--nproc-per-node", str(gpus), "--max-restarts", "0", "--monitor-interval", f"{MONITOR_INTERVAL_S:g}",
                "-m", WORKER_MODULE, "--job", str(job_path)]
    return command


class DistributedDataParallelStrategy:
    name = "ddp"
    description = "DistributedDataParallel, one process per GPU, launched by torchrun"

    def unsupported_reason(self, plan: ScalePlan, gpus: int) -> str | None:
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - every supported torch has it, but builds can leave it out
            return "this torch build has no torch.distributed"
        if not dist.is_available():
            return "this torch build has no torch.distributed"
        if plan.device == "cuda" and not dist.is_nccl_available():
            return "this torch build has no NCCL backend for torch.distributed"
        if plan.device == "cpu" and not dist.is_gloo_available():
            return "this torch build has no gloo backend for torch.distributed"
        return None

    def command(self, plan: ScalePlan, gpus: int, job_path: Path, launch_index: int) -> list[str]:
        return torchrun_command(plan, gpus, job_path, launch_index)

    def cudnn_benchmark(self, requested: bool | None, gpus: int) -> tuple[bool, str | None]:
        return (True if requested is None else requested), None

    def open_session(self, job: dict[str, Any]) -> DdpSession:
        return DdpSession(job)


class DdpSession:
    """A DDP rank: its GPU (from ``LOCAL_RANK``), the process group and the wrapped module."""

    def __init__(self, job: dict[str, Any]) -> None:
        import time

        import torch
        import torch.distributed as dist

        self.rank = int(os.environ["RANK"])
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.gpus = 1
        self.batch_size = int(job["batch_size_per_gpu"])
        if job["device"] == "cuda":
            self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
            self.backend = "nccl"
        else:
            self.device = torch.device("cpu")
            self.backend = "gloo"
        self.devices = [self.device]
        kwargs: dict[str, Any] = {"backend": self.backend,
                                  "timeout": datetime.timedelta(seconds=float(job["timeout_s"]))}
        if self.backend == "nccl":
            kwargs["device_id"] = self.device  # create the communicator now, on this rank's GPU
        t0 = time.perf_counter()
        dist.init_process_group(**kwargs)
        self.init_process_group_s = time.perf_counter() - t0
        self._module: Any = None

    def wrap(self, prepared: Prepared, compile_mode: str | None) -> Prepared:
        import dataclasses

        import torch
        from torch.nn.parallel import DistributedDataParallel

        device_ids = [self.local_rank] if self.device.type == "cuda" else None
        self._module = DistributedDataParallel(prepared.model, device_ids=device_ids, **DDP_OPTIONS)
        # torch.compile goes around the DDP module, so its optimiser splits the graph at the bucket boundaries
        # and the all-reduces still overlap the backward pass.
        forward = torch.compile(self._module, mode=compile_mode) if compile_mode else self._module
        return dataclasses.replace(prepared, forward=forward)

    def synchronize(self) -> None:
        synchronize_all(self.devices)

    def _tensor(self, values: list[int]) -> torch.Tensor:
        import torch

        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def barrier(self) -> None:
        # An all-reduce of one number, waited for: returns only once every rank has contributed. (dist.barrier
        # would do the same, but guesses the device on older torch versions.)
        import torch.distributed as dist

        dist.all_reduce(self._tensor([0]))
        self.synchronize()

    def agree_max(self, values: list[int]) -> list[int]:
        import torch.distributed as dist

        tensor = self._tensor(values)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return [int(v) for v in tensor.tolist()]

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return self._module.no_sync() if self._module is not None else None

    def gather(self, record: dict[str, Any]) -> list[dict[str, Any]] | None:
        import torch.distributed as dist

        everyone: list[Any] = [None] * self.world_size
        dist.all_gather_object(everyone, record)
        return everyone if self.rank == 0 else None

    def facts(self) -> dict[str, Any]:
        from clsbench.procedures.scale.nccl import nccl_version

        module = self._module
        synced = getattr(module, "forward_sync_buffers", getattr(module, "broadcast_buffers", None))
        return {"backend": self.backend, "wrapper": "torch.nn.parallel.DistributedDataParallel",
                "options": dict(DDP_OPTIONS), "buffers_synced_every_forward": synced,
                "init_process_group_s": self.init_process_group_s,
                "nccl_version": nccl_version() if self.backend == "nccl" else None}

    def close(self) -> None:
        """Wait until every rank has finished all its device work; then the process may leave at once.

        A barrier, then a count in the process group's store that each rank raises and waits to see reach the
        world size: when it does, every rank has returned from the barrier's synchronisation, so no collective
        kernel anywhere still needs this rank. The worker then leaves with ``os._exit``, without
        ``destroy_process_group`` and interpreter finalisation, where torch.distributed's threads can abort the
        process (see ``clsbench.procedures.scale.rank``); the operating system releases sockets and GPU memory.
        """
        import time

        import torch.distributed as dist

        if not dist.is_initialized():
            return
        self.barrier()
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 - a torch without it: a second barrier is the next best thing
            self.barrier()
            return
        store.add(FINISHED_KEY, 1)
        deadline = time.monotonic() + FINISH_WAIT_S
        while store.add(FINISHED_KEY, 0) < self.world_size and time.monotonic() < deadline:
            time.sleep(0.01)
