"""One launched process of ``clsbench scale``: a DDP rank under torchrun, or the single DataParallel process.

``python -m clsbench.procedures.scale.rank --job FILE`` reads the job (JSON, written by the parent), and:

1. writes ``pid-RANK`` into the job's folder at once, so the parent can find and end it whatever happens;
2. opens the strategy's session (devices, process group), builds the model exactly as the train workload does
   (the registry's seeded weights, then the mode's components in canonical order, then the strategy's wrapper),
   and runs the training step of the train workload (``clsbench.workloads.train.train_step``) through the
   lockstep loop of :mod:`clsbench.procedures.scale.rank_loop`;
3. writes its record to ``rank-RANK.json`` (atomically), then gathers every rank's record on rank 0, which writes
   ``gathered.json``: on several nodes that is the only place all records meet.

On any exception it writes a failed record (reason and one-line detail, as ``clsbench.engine.worker`` classifies them)
and leaves at once with exit code 1 (``os._exit``: a rank that failed must not wait in interpreter shutdown for
peers that wait for it); torchrun then ends the other ranks. A process that succeeded leaves with ``os._exit(0)``
once every rank has finished (see ``DdpSession.close``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from clsbench.core.vocab import Reason, Status
from clsbench.procedures.scale.files import GATHERED_FILE, PID_FILE, RANK_FILE


def write_json(path: Path, data: Any) -> None:
    """Write atomically (temporary file + rename), so the parent never reads half a record."""
    from clsbench.results.io import jsonable

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(jsonable(data)), encoding="utf-8")
    os.replace(tmp, path)


def _rank_from_environment() -> int:
    return int(os.environ.get("RANK", "0"))


def measure(job: dict[str, Any], session: Any) -> dict[str, Any]:
    """Build, prepare, wrap and train; return this process's record (raises on failure)."""
    import torch

    from clsbench.core.plan import StopRule, TrainSettings
    from clsbench.engine.worker import build_model, configure_mode, no_gc
    from clsbench.measure.clock import WallClock
    from clsbench.measure.device import memory_readings, reset_peak_memory
    from clsbench.modes.base import Prepared
    from clsbench.modes.compile import Compile
    from clsbench.procedures.scale.rank_loop import run_rank_loop
    from clsbench.workloads.train import make_optimizer, train_step

    t0 = time.perf_counter()
    model, input_size = build_model(job["model"], seed=job["seed"], num_classes=job["num_classes"],
                                    input_size=job["input_size"])
    prepare_s = time.perf_counter() - t0

    device = session.device
    # An unsupported mode raises ClsbenchError: recorded as skipped (unsupported_mode).
    mode, ctx, flags = configure_mode(job["mode"], device, "train", compile_mode=job["compile_mode"],
                                      cudnn_benchmark=bool(job["cudnn_benchmark"]))

    t0 = time.perf_counter()
    model = model.to(device)
    prepared = Prepared(model=model, forward=model)
    compile_mode = None
    for component in mode.components:
        if isinstance(component, Compile):
            compile_mode = component.effective_mode(ctx)  # applied by the strategy, around its wrapper
            prepared.notes["compile_mode"] = compile_mode
        else:
            prepared = component.apply(prepared, ctx)
    prepared = session.wrap(prepared, compile_mode)
    session.synchronize()
    setup_s = time.perf_counter() - t0
    for each in session.devices:
        reset_peak_memory(each)

    # Each rank draws its own seeded batch, as it would read its own shard of a dataset.
    generator = torch.Generator().manual_seed(job["data_seed"] + session.rank)
    shape = (session.batch_size, 3, input_size, input_size)
    images = torch.randn(shape, generator=generator).to(dtype=prepared.input_dtype)
    images = images.contiguous(memory_format=prepared.memory_format).to(device)
    label_generator = torch.Generator().manual_seed(job["data_seed"] + 1 + session.rank)
    labels = torch.randint(0, job["num_classes"], (session.batch_size,), generator=label_generator).to(device)

    model.train()
    optimizer = make_optimizer(model, TrainSettings(**job["train"]))
    scaler = torch.amp.GradScaler(device.type) if prepared.grad_scaler else None
    flag = torch.zeros((), dtype=torch.bool, device=device)
    last: list[torch.Tensor] = []

    def step() -> None:
        loss = train_step(prepared, images, labels, optimizer, scaler, device.type).detach()
        torch.logical_or(flag, ~torch.isfinite(loss), out=flag)
        last[:] = [loss]

    losses: list[float] = []

    def nonfinite() -> bool:
        if not losses:
            losses.append(float(last[0]))  # the first call's loss
        return bool(flag)

    with no_gc():
        out = run_rank_loop(session, step, StopRule(**job["stop"]), WallClock(), nonfinite=nonfinite,
                            comm_share=bool(job["comm_share"]))
    flags["gc_disabled_while_running"] = True
    out["samples"]["loss_first"] = losses[0] if losses else None
    out["samples"]["loss_last"] = float(last[0]) if last else None
    out["timings"].update({"prepare_s": prepare_s, "setup_s": setup_s})
    readings = [{"device": str(each), **memory_readings(each)} for each in session.devices]
    return {
        "status": Status.OK,
        "reason": None,
        "detail": None,
        **out,
        "memory": readings[0],
        "devices_memory": readings,
        "flags": flags,
        "mode_notes": prepared.notes,
        "input_size": input_size,
        "batch_size": session.batch_size,
        "gpus": session.gpus,
        "distributed": {**session.facts(), "env": _communication_env()},
    }


def _communication_env() -> dict[str, str]:
    from clsbench.procedures.scale.nccl import communication_env

    return communication_env()


def _identity(session: Any, rank: int) -> dict[str, Any]:
    return {
        "rank": rank,
        "local_rank": getattr(session, "local_rank", int(os.environ.get("LOCAL_RANK", "0"))),
        "world_size": getattr(session, "world_size", int(os.environ.get("WORLD_SIZE", "1"))),
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "device": str(getattr(session, "device", "")) or None,
    }


def failure_record(exc: BaseException) -> dict[str, Any]:
    """The failed (or skipped) record of an exception, classified as a single-process worker classifies it, with
    the wall-clock time of the failure (the earliest failure over the ranks is the cause)."""
    from clsbench.engine.worker import failure_record as classify

    try:
        record = classify(exc)
    except Exception:  # noqa: BLE001 - classification must never hide the original failure
        record = {"status": Status.FAILED, "reason": Reason.CRASH, "detail": f"{type(exc).__name__}: {exc}"[:500]}
    record.setdefault("traceback", traceback.format_exc(limit=8))
    record["failed_at"] = time.time()  # wall clock: the earliest failure over the ranks is the cause
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m clsbench.procedures.scale.rank")
    parser.add_argument("--job", required=True, help="the job file written by `clsbench scale`")
    args = parser.parse_args(argv)
    from clsbench.system.lifetime import die_with_parent

    die_with_parent()  # a rank never outlives its launcher (torchrun, or the parent of the DataParallel process)
    job_path = Path(args.job)
    folder = job_path.parent
    rank = _rank_from_environment()
    (folder / PID_FILE.format(rank=rank)).write_text(str(os.getpid()), encoding="utf-8")
    session = None
    wrote = False
    try:
        job = json.loads(job_path.read_text(encoding="utf-8"))
        from clsbench.procedures.scale.strategies import get_strategy

        session = get_strategy(job["strategy"]).open_session(job)
        record = {**_identity(session, rank), **measure(job, session)}
        write_json(folder / RANK_FILE.format(rank=rank), record)
        wrote = True
        everyone = session.gather(record)
        if everyone is not None:
            write_json(folder / GATHERED_FILE, everyone)
        session.close()
    except BaseException as exc:  # noqa: BLE001 - every failure is written down, then the process leaves
        if not wrote:
            try:
                write_json(folder / RANK_FILE.format(rank=rank), {**_identity(session, rank), **failure_record(exc)})
            except Exception:  # noqa: BLE001 - nothing more can be said; the parent sees no record
                pass
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    # Every rank has finished its device work and said so (Session.close): leave without interpreter
    # finalisation, where torch.distributed's C++ threads can abort the process (seen with gloo: "terminate called
    # without an active exception") and turn a complete measurement into a failed launch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
