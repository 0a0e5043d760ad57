"""The correctness guard of ``clsbench tune``: a candidate wins only if its outputs match fp32 eager's.

**Inference** (:func:`output_errors`): the network is built afresh for every case with the same seed (identical
weights) and fed the same seeded input as the workloads; the logits are compared with fp32 eager's, normalised by
the largest reference logit, against the precision's tolerance (:data:`~clsbench.procedures.tune.settings.OUTPUT_RTOL`).

**Training parity** (:func:`train_parity`): does a mode's training step train like fp32 eager? The loss after N
steps, compared. It builds the network afresh for each case with the same seed, feeds it the same seeded batch as
the train workload (``randn`` from ``data_seed``, labels from ``data_seed + 1``), and runs the step exactly as a
worker runs it: the mode applied by ``parse_mode(mode).configure`` and ``.prepare``, the optimizer and the step from
:mod:`clsbench.workloads.step` (``+foreach``, ``+fused``, ``+compiled-step``, ``+cudagraph`` included). The
reference is plain fp32 eager with the default optimizer, for as many steps as the case made: a captured step
(``+cudagraph``) makes its warm-up steps before the capture, and they count. The first loss (the forward before any
update) must lie within the precision's output tolerance (:func:`~clsbench.procedures.tune.settings.tolerance_for`),
the loss after the last step within ``TRAIN_LOSS_RTOL``. Its entries have the shape of :func:`output_errors`'
entries (``metric``, ``error``, ``error_last``, ``detail``), so :func:`judge` reads them too.

Both run in a fresh process where flags must not leak (TF32, cuDNN): :func:`output_errors_in_subprocess`. The search
calls :func:`check_candidates`: best candidate within the limits first, a group per process, until enough passed; a
backend candidate is judged by the parity check its own measurement made.
"""

from __future__ import annotations

import gc
import importlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

from clsbench.core.plan import TrainSettings
from clsbench.procedures.tune.figures import number, parity_verdict
from clsbench.procedures.tune.settings import TRAIN_CHECK_STEPS, TRAIN_LOSS_RTOL, tolerance_for
from clsbench.results.schema import DEFAULT_BACKEND, Measurement

#: Candidates whose outputs one fresh check process compares after the top candidate was rejected (the best
#: unchecked ones, in rank order): a process costs a CUDA context and imports, each extra case perhaps a compile.
CHECK_GROUP = 3
#: The mode every case is compared with: fp32 eager, the default optimizer.
REFERENCE_MODE = "fp32"


def quiet_random_layers(model: Any) -> None:
    """Dropout and stochastic depth off (eval) inside a training model, so that compiled and eager code draw no
    different random masks; BatchNorm stays in training mode."""
    for module in model.modules():
        name = type(module).__name__
        if "Dropout" in name or "DropPath" in name or "StochasticDepth" in name:
            module.eval()


def train_losses(model: str, mode: str, batch_size: int, device: str, *, steps: int = TRAIN_CHECK_STEPS,
                 seed: int = 0, data_seed: int = 0, input_size: int | None = None, compile_mode: str = "default",
                 cudnn_benchmark: bool = True, train: TrainSettings | None = None,
                 num_classes: int = 1000) -> list[float] | str:
    """The loss of every update ``mode``'s training step made in ``steps`` calls (more than ``steps`` when a
    captured step warmed up first), or a string saying why the mode cannot run here."""
    import torch

    from clsbench.measure.device import device_capabilities
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads.step import build_optimizer, make_step

    dev = torch.device(device)
    parsed = parse_mode(mode)
    bf16, tf32 = device_capabilities(dev)
    ctx = parsed.context(dev, "train", bf16_supported=bf16, tf32_supported=tf32, compile_mode=compile_mode)
    reason = parsed.unsupported_reason(ctx)
    if reason:
        return f"unsupported here: {reason}"
    torch.backends.cudnn.benchmark = cudnn_benchmark
    parsed.configure(ctx)
    spec = get_model_spec(model)
    side = input_size or spec.input_size
    net = spec.build(seed=seed, num_classes=num_classes, input_size=input_size).to(dev)
    try:
        prepared = parsed.prepare(net, ctx)
        prepared.model.train()
        quiet_random_layers(prepared.model)
        scaler = torch.amp.GradScaler(dev.type) if prepared.grad_scaler else None
        step = make_step(prepared, build_optimizer(prepared, train or TrainSettings()), scaler, dev)
        images = torch.randn((batch_size, 3, side, side), generator=torch.Generator().manual_seed(data_seed))
        x = images.to(dtype=prepared.input_dtype).contiguous(memory_format=prepared.memory_format).to(dev)
        labels = torch.randint(0, num_classes, (batch_size,), generator=torch.Generator().manual_seed(data_seed + 1))
        labels = labels.to(dev)
        losses = [float(step(x, labels).detach()) for _ in range(steps)]
        return [float(loss) for loss in getattr(step, "warmup_losses", [])] + losses
    finally:
        if "compile" in {m.split(":")[0] for m in parsed.modifier_names}:
            # Every fresh module recompiles the same code; without a reset dynamo's recompile limit would silently
            # fall back to eager after a few cases.
            importlib.import_module("torch._dynamo").reset()


def relative_error(value: float, reference: float) -> float:
    """``|value - reference| / |reference|``; infinite for a non-finite value."""
    if not math.isfinite(value):
        return math.inf
    return abs(value - reference) / abs(reference) if reference else (0.0 if value == reference else math.inf)


def compare_losses(mode: str, losses: list[float] | str, reference: list[float]) -> dict[str, Any]:
    """One case's entry: the first and last losses' relative errors against the reference's, and the verdict."""
    entry: dict[str, Any] = {"metric": "loss", "error": None, "error_last": None, "detail": None,
                             "steps": None, "tolerance": tolerance_for(mode), "tolerance_last": TRAIN_LOSS_RTOL,
                             "ok": False, "reason": None}
    if isinstance(losses, str):
        entry["detail"] = entry["reason"] = losses
        return entry
    entry["steps"] = len(losses)
    entry["error"] = relative_error(losses[0], reference[0])
    entry["error_last"] = relative_error(losses[-1], reference[len(losses) - 1])
    if not entry["error"] <= entry["tolerance"]:
        entry["reason"] = (f"the first-step loss differs from fp32 eager's by {entry['error']:.3g} (relative; "
                           f"tolerance {entry['tolerance']:g})")
    elif not entry["error_last"] <= TRAIN_LOSS_RTOL:
        entry["reason"] = (f"the loss after {len(losses)} steps differs from fp32 eager's by "
                           f"{entry['error_last']:.3g} (relative; tolerance {TRAIN_LOSS_RTOL:g})")
    else:
        entry["ok"] = True
    return entry


def free_memory(device: str) -> None:
    """Collect the previous case's network, optimizer state and graphs, and on a GPU hand the cached blocks back, so
    that every case starts from the same memory (tune checks several candidates in one process)."""
    import torch

    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def train_parity(model: str, device: str, cases: Sequence[tuple[str, int]], *, steps: int = TRAIN_CHECK_STEPS,
                 **kwargs: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """Compare each ``(mode, batch_size)`` case's training losses with fp32 eager's, in this process.

    Args:
        kwargs: ``seed``, ``data_seed``, ``input_size``, ``compile_mode``, ``cudnn_benchmark``, ``train``,
            ``num_classes``, as :func:`train_losses` takes them.

    Returns:
        For each case, :func:`compare_losses`' entry: ``error`` and ``error_last`` (relative errors of the first
        and last loss), ``steps`` (updates compared), ``tolerance`` and ``tolerance_last``, ``ok``, ``reason``, and
        ``detail`` when the case could not run (a mode this device cannot run, or the error it raised).
    """
    references: dict[int, list[float]] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for mode, batch in cases:
        try:
            losses = train_losses(model, mode, batch, device, steps=steps, **kwargs)
            needed = steps if isinstance(losses, str) else len(losses)
            if len(references.get(batch, [])) < needed:
                reference = train_losses(model, REFERENCE_MODE, batch, device, steps=needed, **kwargs)
                if isinstance(reference, str):
                    raise RuntimeError(f"the fp32 eager reference cannot run: {reference}")
                references[batch] = reference
            out[(mode, batch)] = compare_losses(mode, losses, references[batch])
        except Exception as exc:  # noqa: BLE001 - a case that cannot run is reported, the others go on
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            out[(mode, batch)] = compare_losses(mode, f"the check failed: {text}", [])
        finally:
            free_memory(device)
    return out


# --------------------------------------------------------------------------------------- outputs against fp32 eager


def _case_errors(metric: str, got: Any, ref: Any) -> dict[str, Any]:
    """One inference case's entry of :func:`output_errors`: how far its logits lie from fp32 eager's.

    Args:
        metric: "logits".
        got: the case's logits, or a string saying why it could not run here (the entry's ``detail``).
        ref: fp32 eager's logits on the same input.
    """
    import torch

    if isinstance(got, str):
        return {"metric": metric, "error": None, "error_last": None, "detail": got}
    finite = bool(torch.isfinite(got).all())
    scale = float(ref.abs().max())
    diff = float((got - ref).abs().max())
    error = math.inf if not finite else (diff / scale if scale else (0.0 if diff == 0 else math.inf))
    return {"metric": metric, "error": error, "error_last": None, "detail": None}


def output_errors(
    model: str,
    workload: str,
    device: str,
    cases: Sequence[tuple[str, int]],
    *,
    seed: int = 0,
    data_seed: int = 0,
    input_size: int | None = None,
    compile_mode: str = "default",
    cudnn_benchmark: bool = True,
    train: TrainSettings | None = None,
    num_classes: int = 1000,
    train_steps: int = TRAIN_CHECK_STEPS,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Compare each ``(mode, batch_size)`` case's outputs with fp32 eager's, in this process.

    The network is built afresh for every case with the same seed (identical weights) and fed the same seeded
    input as the workloads (``randn`` from ``data_seed``); the mode is applied exactly as a worker applies it
    (``parse_mode(mode).configure`` and ``.prepare``). Inference compares logits. Train compares the loss of the
    first step and after ``train_steps`` updates through
    :func:`train_parity`, which builds the optimizer and the step the way the
    worker does (:mod:`clsbench.workloads.step`: ``+foreach``, ``+fused``, ``+compiled-step``, ``+cudagraph``), so
    that what is checked is what was measured; its entries also say how many updates they compared (``steps``).

    Returns:
        For each case: ``metric`` ("logits" or "loss"), ``error`` (max relative error of the logits, normalised by
        the largest reference logit; for train the first loss's relative error), ``error_last`` (train: the
        relative error of the loss after the last step), and ``detail`` (why there is no error figure, e.g. the
        mode cannot run here). A non-finite output gives an infinite error.
    """
    import torch

    from clsbench.measure.device import device_capabilities
    from clsbench.models import get_model_spec
    from clsbench.modes import parse_mode
    from clsbench.workloads import get_workload

    kind = get_workload(workload).kind
    if kind != "inference":
        return train_parity(model, device, cases, steps=train_steps, seed=seed, data_seed=data_seed,
                            input_size=input_size, compile_mode=compile_mode, cudnn_benchmark=cudnn_benchmark,
                            train=train, num_classes=num_classes)
    dev = torch.device(device)
    spec = get_model_spec(model)
    side = input_size or spec.input_size
    bf16, tf32 = device_capabilities(dev)
    metric = "logits"

    def run(mode_name: str, batch: int) -> Any:
        mode = parse_mode(mode_name)
        ctx = mode.context(dev, kind, bf16_supported=bf16, tf32_supported=tf32, compile_mode=compile_mode)
        reason = mode.unsupported_reason(ctx)
        if reason:
            return f"unsupported here: {reason}"
        torch.backends.cudnn.benchmark = cudnn_benchmark
        mode.configure(ctx)
        net = spec.build(seed=seed, num_classes=num_classes, input_size=input_size).to(dev).eval()
        prepared = mode.prepare(net, ctx)
        images = torch.randn((batch, 3, side, side), generator=torch.Generator().manual_seed(data_seed))
        x = images.to(dtype=prepared.input_dtype).contiguous(memory_format=prepared.memory_format).to(dev)
        try:
            with torch.inference_mode(), prepared.autocast(dev.type):
                return prepared.forward(x).float().cpu()  # a copy: a graph's static output is overwritten later
        finally:
            if "compile" in {m.split(":")[0] for m in mode.modifier_names}:
                # Every fresh module recompiles the same forward code; without a reset dynamo's recompile limit
                # would silently fall back to eager after a few cases.
                importlib.import_module("torch._dynamo").reset()

    references: dict[int, Any] = {}
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for mode_name, batch in cases:
        key = (mode_name, batch)
        try:
            if batch not in references:
                references[batch] = run("fp32", batch)
                free_memory(device)
            ref = references[batch]
            got = run(mode_name, batch)
            free_memory(device)
            out[key] = _case_errors(metric, got, ref)
        except Exception as exc:  # noqa: BLE001 - a case that cannot run is reported, the others go on
            free_memory(device)
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            out[key] = {"metric": metric, "error": None, "error_last": None, "detail": f"the check failed: {text}"}
    return out



def _check_main(conn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Entry point of the fresh check process (ended without waiting once it has answered)."""
    from clsbench.system.lifetime import release_compile_workers, thread_lock_for_progress_bars

    thread_lock_for_progress_bars()
    try:
        try:
            answer: Any = output_errors(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - e.g. the model cannot be built: every case fails with the reason
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
            answer = {tuple(case): {"metric": None, "error": None, "error_last": None,
                                    "detail": f"the check failed: {text}"} for case in args[3]}
        release_compile_workers()
        conn.send(answer)
    finally:
        conn.close()


def output_errors_in_subprocess(model: str, workload: str, device: str, cases: Sequence[tuple[str, int]], *,
                                timeout_s: float = 900.0, **kwargs: Any) -> dict[tuple[str, int], dict[str, Any]]:
    """:func:`output_errors` in a fresh process (forkserver, or spawn where there is none), as the measurements
    run: a clean CUDA context and allocator, and process-wide flags (TF32, cuDNN) that do not leak."""
    import multiprocessing

    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:
        ctx = multiprocessing.get_context("spawn")
    cases = [tuple(c) for c in cases]
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_check_main, args=(sender, (model, workload, device, cases), kwargs), daemon=True,
                          name="clsbench-output-check")
    process.start()
    sender.close()
    answer = None
    try:
        if receiver.poll(timeout_s):
            answer = receiver.recv()
    except (EOFError, OSError):
        answer = None
    finally:
        if process.is_alive():
            process.kill()
        process.join(5.0)
        receiver.close()
    if answer is None:
        why = (f"the check process gave no answer within {timeout_s:g} s" if process.exitcode is None
               else f"the check process died (exit code {process.exitcode}) without an answer")
        return {case: {"metric": None, "error": None, "error_last": None, "detail": why} for case in cases}
    return answer


def judge(check: dict[str, Any], mode: str, tolerances: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Turn a raw :func:`output_errors` entry into a verdict with its tolerances and reason (pure)."""
    tolerance = tolerance_for(mode, tolerances)
    error, error_last = number(check.get("error")), number(check.get("error_last"))
    verdict = {"metric": check.get("metric"), "error": error, "tolerance": tolerance, "error_last": error_last,
               "tolerance_last": TRAIN_LOSS_RTOL if error_last is not None else None, "ok": False, "reason": None}
    if check.get("steps") is not None:  # train parity: the updates compared (a captured step's warm-up counts)
        verdict["steps"] = check["steps"]
    what = "logits" if check.get("metric") == "logits" else "first-step loss"
    if error is None:
        verdict["reason"] = check.get("detail") or "no output to compare"
    elif not error <= tolerance:
        verdict["reason"] = f"{what} differ from fp32 eager by {error:.3g} (relative; tolerance {tolerance:g})"
    elif error_last is not None and not error_last <= TRAIN_LOSS_RTOL:
        verdict["reason"] = (f"the loss after {check.get('steps') or TRAIN_CHECK_STEPS} steps differs from fp32 "
                             f"eager's by {error_last:.3g} (relative; tolerance {TRAIN_LOSS_RTOL:g})")
    else:
        verdict["ok"] = True
    return verdict


# -------------------------------------------------------------------------------------------- the guard


def check_candidates(search: Any, needed: int) -> None:
    """Check outputs, best candidate within the limits first (highest rung, then score), a group per fresh process,
    until ``needed`` candidates passed; each check process must fit in the budget, like a candidate.

    Args:
        search: the :class:`~clsbench.procedures.tune.search.Search` (its settings give the tolerances, its run the
            isolation: ``inline`` checks in this process).
        needed: how many candidates must pass (the confirmation's).
    """
    tolerances = search.settings.tolerances
    isolation = search.run.execution.isolation
    run = search.run
    facts = run.facts
    passed = 0
    done: dict[tuple[str, int], dict[str, Any]] = {
        (c["mode"], c["batch_size"]): c for c in facts["correctness"] if (c.get("backend") or DEFAULT_BACKEND)
        == DEFAULT_BACKEND}  # checked before an interruption: not again
    ranked = search.ranked()
    for position, m in enumerate(ranked):
        if passed >= needed:
            return
        if m.backend != DEFAULT_BACKEND or m.mode == "fp32":
            verdict = _own_verdict(m, tolerances) if m.backend != DEFAULT_BACKEND else {"ok": True}
            if m.backend != DEFAULT_BACKEND and not any(
                    (c["mode"], c["batch_size"], c.get("backend")) == (m.mode, m.batch_size, m.backend)
                    for c in facts["correctness"]):
                facts["correctness"].append({"mode": m.mode, "batch_size": m.batch_size, "backend": m.backend,
                                             **verdict})
                search.save()
            passed += bool(verdict["ok"])  # fp32 eager is the reference itself; a backend has its own check
            continue
        key = (m.mode, m.batch_size)
        if key not in done:
            # The top candidate alone first (it usually passes); after a rejection, a few at a time.
            size = CHECK_GROUP if any(not v["ok"] for v in done.values()) else 1
            group = list(dict.fromkeys((x.mode, x.batch_size) for x in ranked[position:] if x.mode != "fp32"
                                       and x.backend == DEFAULT_BACKEND and (x.mode, x.batch_size) not in done))
            group = group[:size]  # a real-data cell and its synthetic ceiling are one case: the same mode and batch
            if not _check_group(search, group, done, tolerances, isolation):
                return  # the budget holds no check process more
        passed += bool(done[key]["ok"])


def _own_verdict(m: Measurement, tolerances: Mapping[str, float] | None) -> dict[str, Any]:
    """A backend's verdict: the parity check its own measurement made (repeat 0)."""
    return parity_verdict(m) or {"metric": "logits", "error": None, "tolerance": tolerance_for(m.mode, tolerances),
                                 "ok": False, "reason": "the measurement holds no parity check"}


def _check_group(search: Any, group: list[tuple[str, int]], done: dict[tuple[str, int], dict[str, Any]],
                 tolerances: Mapping[str, float] | None, isolation: str) -> bool:
    """Check one group of cases in one process if the budget holds it; record each verdict. False: no budget."""
    run = search.run
    plan, facts = run.plan, run.facts
    estimate = search.cost.check_s()
    if not search.budget.fits(estimate, search.reserve_s("check")):
        search.leave_out(None, "check", None, "check", estimate, search.reserve_s("check"))
        return False
    options = {"seed": plan.seed, "data_seed": plan.data_seed, "input_size": facts.get("input_size"),
               "compile_mode": plan.compile_mode, "cudnn_benchmark": plan.cudnn_benchmark, "train": plan.train}
    model, workload, device = facts["model"], facts["workload"], facts["device"]
    before = search.budget.clock()
    if isolation == "inline":
        answers = output_errors(model, workload, device, group, **options)
    else:
        answers = output_errors_in_subprocess(model, workload, device, group, timeout_s=plan.timeout_s, **options)
    search.cost.observe_check(search.budget.clock() - before)
    for case in group:
        verdict = judge(answers.get(case, {"detail": "no answer for this case"}), case[0], tolerances)
        done[case] = verdict
        facts["correctness"].append({"mode": case[0], "batch_size": case[1], **verdict})
    search.save()
    return True


__all__ = ["CHECK_GROUP", "REFERENCE_MODE", "check_candidates", "compare_losses", "free_memory", "judge",
           "output_errors", "output_errors_in_subprocess", "quiet_random_layers", "relative_error", "train_losses",
           "train_parity"]
