"""``dp``: ``torch.nn.DataParallel`` in one process driving k GPUs.

The process feeds one batch of ``batch_size_per_gpu x k`` images from GPU 0. Every forward, DataParallel scatters
the batch, copies the module to GPUs 1..k-1, runs the replicas in k threads and gathers the logits on GPU 0;
the backward pass sums the gradients back onto GPU 0, where the optimizer steps. That per-step replication and
the single Python thread driving k GPUs are what DDP avoids, and what this strategy is here to show.

Autocast is thread-local, and DataParallel's replica threads re-enter it without the dtype (they would run
amp-bf16 in float16). So, as PyTorch's AMP notes advise for DataParallel, the module is wrapped in
:class:`AutocastForward`, which enters the mode's autocast, dtype included, inside every replica's forward.

cuDNN autotuning is off by default on 2+ GPUs. PyTorch keeps the algorithms ``cudnn.benchmark`` found in a
thread-local cache, and DataParallel runs each forward in threads it starts anew, so every step autotunes every
convolution again: ResNet-50 amp-bf16+cl at 256 per GPU on two H200s trained at 326 img/s that way, against
4,717 img/s on one GPU (where DataParallel calls the module in the calling thread). ``--cudnn-benchmark`` measures
that behaviour on purpose; either way the result says which was used and why.

Not measured (skipped with the reason): a CPU (DataParallel without GPUs just calls the module), several nodes
(one process cannot span them) and ``+compile`` (the module is replicated anew on every forward).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clsbench.procedures.scale.strategies.base import WORKER_MODULE, synchronize_all

if TYPE_CHECKING:
    import torch

    from clsbench.modes.base import Prepared
    from clsbench.procedures.scale.plan import ScalePlan

#: Testing hook: lets the DataParallel process run on a CPU (unwrapped: DataParallel has nothing to replicate
#: there), so CI without a GPU exercises this strategy's process, loop and result path.
CPU_TEST_ENV = "CLSBENCH_TEST_DP_ON_CPU"


def _autocast_forward_class() -> type:
    import torch
    from torch import nn

    class AutocastForward(nn.Module):
        """Enters autocast with the mode's dtype inside forward, so DataParallel's replica threads get it."""

        def __init__(self, module: nn.Module, device_type: str, dtype: torch.dtype, cache_enabled: bool) -> None:
            super().__init__()
            self.module = module
            self.device_type = device_type
            self.dtype = dtype
            self.cache_enabled = cache_enabled

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            with torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=self.cache_enabled):
                return self.module(*args, **kwargs)

    return AutocastForward


class DataParallelStrategy:
    name = "dp"
    description = "torch.nn.DataParallel, one process driving every GPU"

    def unsupported_reason(self, plan: ScalePlan, gpus: int) -> str | None:
        if plan.multi_node:
            return f"DataParallel runs in one process on one node; it cannot span {plan.nnodes} nodes"
        if plan.device != "cuda" and not os.environ.get(CPU_TEST_ENV):
            return ("DataParallel replicates a module over CUDA GPUs; on a CPU it calls the module unreplicated in "
                    "one process, so there is nothing to measure")
        if "compile" in {part.split(":")[0] for part in plan.mode.split("+")[1:]}:
            return "DataParallel copies the module to every GPU on each forward, which torch.compile cannot follow"
        return None

    def command(self, plan: ScalePlan, gpus: int, job_path: Path, launch_index: int) -> list[str]:
        return [sys.executable, "-m", WORKER_MODULE, "--job", str(job_path)]

    def cudnn_benchmark(self, requested: bool | None, gpus: int) -> tuple[bool, str | None]:
        if gpus < 2:
            return (True if requested is None else requested), None
        if requested is None:
            return False, ("cuDNN autotuning off, the default for DataParallel on 2+ GPUs: PyTorch keeps autotuned "
                           "algorithms per thread and DataParallel runs every forward in new threads, so each step "
                           "would autotune again (--cudnn-benchmark measures that)")
        if requested:
            return True, ("cuDNN autotuning on (--cudnn-benchmark): PyTorch keeps autotuned algorithms per thread "
                          "and DataParallel runs every forward in new threads, so every step autotunes again")
        return False, None

    def open_session(self, job: dict[str, Any]) -> DpSession:
        return DpSession(job)


class DpSession:
    """The one DataParallel process: GPUs 0..k-1, inputs on GPU 0, no process group."""

    def __init__(self, job: dict[str, Any]) -> None:
        import torch

        self.rank = 0
        self.local_rank = 0
        self.world_size = 1
        self.gpus = int(job["gpus"])
        self.batch_size = int(job["batch_size_per_gpu"]) * self.gpus
        if job["device"] == "cuda":
            self.devices = [torch.device("cuda", i) for i in range(self.gpus)]
            self.device = self.devices[0]
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
            self.devices = [self.device]
        self.wrapped = False

    def wrap(self, prepared: Prepared, compile_mode: str | None) -> Prepared:
        from torch import nn

        if compile_mode:
            raise RuntimeError("DataParallel with torch.compile is not measured")  # refused before launch
        if self.device.type != "cuda":
            return prepared  # the CPU test hook: DataParallel would call the module as it is
        module: nn.Module = prepared.model
        if prepared.autocast_dtype is not None:
            module = _autocast_forward_class()(module, "cuda", prepared.autocast_dtype, prepared.autocast_cache)
        wrapper = nn.DataParallel(module, device_ids=list(range(self.gpus)), output_device=0)
        self.wrapped = True
        return dataclasses.replace(prepared, forward=wrapper)

    def synchronize(self) -> None:
        synchronize_all(self.devices)

    def barrier(self) -> None:
        pass

    def agree_max(self, values: list[int]) -> list[int]:
        return list(values)

    def no_sync(self) -> contextlib.AbstractContextManager[Any] | None:
        return None

    def gather(self, record: dict[str, Any]) -> list[dict[str, Any]] | None:
        return [record]

    def facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"backend": None, "wrapper": "torch.nn.DataParallel" if self.wrapped else None,
                                 "device_ids": list(range(self.gpus)), "output_device": 0,
                                 "autocast_inside_replicas": self.wrapped}
        if not self.wrapped:
            facts["note"] = "CPU test hook: the module ran unwrapped (DataParallel needs CUDA GPUs)"
        return facts

    def close(self) -> None:
        pass
