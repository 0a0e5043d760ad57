"""Building a run plan: the cross product of models x workloads x modes x batch sizes x inference backends,
validated against the registries, with the stop rules the options give."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any

from clsbench.core.data_settings import DataSettings
from clsbench.core.options import Execution, MeasureOptions
from clsbench.core.plan import Cell, ProfileSettings, RunPlan, default_stop_rules, validate_batch_size
from clsbench.core.suites import Suite, default_suite_name, get_suite, resolve_modes
from clsbench.errors import InvalidInputError
from clsbench.results.schema import DEFAULT_BACKEND
from clsbench.system.machine import bf16_supported, resolve_device


def plan_run(
    *,
    suite: str | None = None,
    models: Sequence[str] = (),
    workloads: Sequence[str] = (),
    modes: Sequence[str] = (),
    batch_sizes: Sequence[int] = (),
    device: str = "auto",
    options: MeasureOptions = MeasureOptions(),
    execution: Execution = Execution(),
    environment: dict[str, Any] | None = None,
    data: DataSettings | None = None,
    backends: Sequence[str] = (DEFAULT_BACKEND,),
    no_cache: bool = False,
    cache_dir: str | None = None,
    profile: ProfileSettings | None = None,
) -> RunPlan:
    """Build the cross product to measure.

    A suite supplies defaults for every axis; any axis given explicitly replaces the suite's. With neither a
    suite nor models, the default suite for the device is used (``seed`` on a GPU, ``quick`` on a CPU).

    ``data`` trains on real images through a pipeline instead of the resident synthetic batch: the workloads
    default to ``train`` (the only one it feeds), the dataset is scanned now (bad input fails here), every cell
    carries the settings, and overlapped preparation is turned off (building the next model would take CPU time
    from the pipeline being measured).

    Args:
        options: repeats, the stop rules' protocol and overrides, input size, timeout, compile mode, seed, cuDNN
            autotuning, telemetry.
        execution: ``overlap`` is recorded in the plan; the rest of it applies when the plan runs.
        environment: the recorded environment, to choose amp-fp16 for the suite's amp-bf16 on a GPU without bf16.
        modes: a mode made for one kind of workload (``+freeze`` for inference; ``+foreach``, ``+fused``,
            ``+compiled-step`` for train) is planned for the workloads of that kind only when the workloads are the
            defaults, and is one error line when they were given (:func:`refused_pairs`).
        backends: the inference backends (:data:`clsbench.backends.BACKENDS`) every cell is measured on; a
            backend other than ``eager`` applies to the inference workloads only (``--backend`` with ``train`` is
            one error line). A cell a backend cannot express here is recorded as skipped with the reason.
        no_cache, cache_dir: the backends' artifact cache: build anew, and where it lives (None: its default).
        profile: profile the first repeat of every cell after its timed region (``run --profile``).
    """
    options.validate()
    resolved_device = resolve_device(device)
    if suite is None and not models:
        suite = default_suite_name(resolved_device)
    base = get_suite(suite) if suite else get_suite(default_suite_name(resolved_device))
    models = expand_models(models)
    for name in models:
        get_model_spec(name)  # fail fast on a name no source knows, before the other axes are read
    chosen_models = tuple(models) or (base.models if suite else ())
    chosen_workloads = _choose_workloads(workloads, base, suite, data)
    chosen_modes = _choose_modes(modes, base, suite, environment, resolved_device)
    for size in batch_sizes:
        validate_batch_size(size)
    chosen_backends, chosen_workloads = _choose_backends(backends, workloads, chosen_workloads, data)
    for name in dict.fromkeys(chosen_models):  # once per model, before any worker: what a worker would only meet
        check_model(name, options.input_size, train="train" in chosen_workloads)
    refused = refused_pairs(chosen_modes, chosen_workloads, explicit=bool(workloads))
    cells = [cell for cell in _cells(chosen_models, chosen_workloads, chosen_modes, batch_sizes, chosen_backends,
                                     base, resolved_device, options.input_size)
             if (cell.mode, cell.workload) not in refused]

    overlap = execution.overlap
    if data is not None:
        from clsbench.data.plan import prepare_data_settings

        data, _ = prepare_data_settings(data, [cell.batch_size for cell in cells])
        cells = [dataclasses.replace(cell, data=data) for cell in cells]
        overlap = False
    rules = {name: rule.with_overrides(**options.stop_overrides())
             for name, rule in default_stop_rules(resolved_device, options.protocol).items()}
    plan = RunPlan(cells=tuple(dict.fromkeys(cells)), repeats=options.repeats, stop_rules=rules, seed=options.seed,
                   data_seed=options.seed, timeout_s=options.timeout_s, compile_mode=options.compile_mode,
                   cudnn_benchmark=bool(options.cudnn_benchmark), overlap_prepare=overlap, order=execution.order,
                   telemetry=options.telemetry, suite=suite, no_cache=no_cache, cache_dir=cache_dir,
                   profile=profile, protocol=options.protocol)
    plan.validate()
    return plan


def _choose_workloads(workloads: Sequence[str], base: Suite, suite: str | None,
                      data: DataSettings | None) -> tuple[str, ...]:
    """The workloads to plan: the ones given (each checked against the registry), else ``train`` alone with real
    data, else the suite's, else every registered workload.

    Raises:
        InvalidInputError: a name no workload has (one line with the closest names), or real data with a workload
            other than ``train`` (the data pipeline feeds nothing else).
    """
    from clsbench.workloads import WORKLOADS

    for name in workloads:
        WORKLOADS.get(name)  # an unknown name is one error line with the closest names
    chosen = tuple(workloads) or (
        tuple(base.batch_sizes) if suite and data is None else ("train",) if data is not None
        else tuple(WORKLOADS.names())
    )
    if data is not None and set(chosen) != {"train"}:
        raise InvalidInputError("real data (--data) feeds the train workload only",
                                "add --workload train, or drop --data")
    return chosen


def _choose_modes(modes: Sequence[str], base: Suite, suite: str | None, environment: dict[str, Any] | None,
                  device: str) -> tuple[str, ...]:
    """The modes to plan, by canonical name: the ones given, else the suite's (amp-bf16 becomes amp-fp16 where
    the environment says the device lacks bf16), else fp32 alone."""
    from clsbench.modes import parse_mode

    if modes:
        return tuple(parse_mode(m).name for m in modes)
    if suite:
        return resolve_modes(base.modes, bf16_supported=bf16_supported(environment or {}, device))
    return ("fp32",)


def refused_pairs(modes: Sequence[str], workloads: Sequence[str], *, explicit: bool) -> set[tuple[str, str]]:
    """The (mode, workload) pairs of the cross product that no device can run: a modifier made for another kind
    of workload (:meth:`clsbench.modes.ExecutionMode.refusal`). Default workloads just leave them out.

    Raises:
        InvalidInputError: ``explicit`` (the workloads were given) and a pair is refused; or a mode that no chosen
            workload can run.
    """
    from clsbench.modes import parse_mode
    from clsbench.workloads import WORKLOADS

    refused: set[tuple[str, str]] = set()
    for mode in modes:
        reasons = {w: parse_mode(mode).refusal(WORKLOADS.get(w).kind) for w in workloads}
        for workload, reason in reasons.items():
            if reason and (explicit or all(reasons.values())):
                raise InvalidInputError(f"mode {mode} cannot run the {workload} workload: {reason}",
                                        "drop the mode, or name the workloads it applies to with --workload")
            if reason:
                refused.add((mode, workload))
    return refused


def _choose_backends(backends: Sequence[str], workloads: Sequence[str], chosen_workloads: tuple[str, ...],
                     data: DataSettings | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The inference backends to plan, deduplicated, and the workloads they leave.

    With a backend other than ``eager``, default workloads (none given in ``workloads``) narrow to the inference
    ones, since no backend applies to ``train``; workloads given explicitly are kept and the selection is checked
    against their kinds instead.

    Returns:
        (backends, workloads).

    Raises:
        InvalidInputError: a backend with real data, or a selection :func:`check_backend_selection` refuses.
    """
    from clsbench.workloads import WORKLOADS

    chosen_backends = tuple(dict.fromkeys(backends)) or (DEFAULT_BACKEND,)
    if chosen_backends != (DEFAULT_BACKEND,):
        from clsbench.backends import check_backend_selection

        if data is not None:
            raise InvalidInputError("--backend applies to inference workloads only, and real data (--data) feeds "
                                    "train", "drop --backend, or drop --data")
        if not workloads:  # the default workloads, less the ones no backend applies to
            chosen_workloads = tuple(w for w in chosen_workloads if WORKLOADS.get(w).kind == "inference")
        check_backend_selection(chosen_backends, [WORKLOADS.get(w).kind for w in chosen_workloads])
    return chosen_backends, chosen_workloads


def _cells(models: Sequence[str], workloads: Sequence[str], modes: Sequence[str], batch_sizes: Sequence[int],
           backends: Sequence[str], base: Suite, device: str, input_size: int | None) -> list[Cell]:
    """The cross product, in plan order (model, workload, mode, batch size, backend; duplicates kept).

    Without explicit batch sizes each workload gets the suite's size for it, or the ``seed`` suite's where the
    suite names none.
    """
    cells = []
    for model, workload, mode in itertools.product(models, workloads, modes):
        sizes = tuple(batch_sizes) or (base.batch_sizes.get(workload) or get_suite("seed").batch_sizes[workload],)
        for size in sizes:
            for backend in backends:
                cells.append(Cell(model, workload, mode, size, device, input_size, backend=backend))
    return cells


#: The classes every model must output: the train workload draws labels from ImageNet-1k's range.
NUM_CLASSES = 1000
WILDCARDS = frozenset("*?[")


def expand_models(names: Sequence[str]) -> list[str]:
    """Model names with wildcard patterns (``resnet1*``, as ``clsbench models`` takes them) replaced by the names
    they match; a pattern matching nothing is one error line."""
    from clsbench.models import list_models

    out: list[str] = []
    for name in names:
        if WILDCARDS & set(name) and ":" not in name:
            matched = list_models(name)
            if not matched:
                raise InvalidInputError(f"no model matches {name!r}", "see `clsbench models PATTERN`")
            out.extend(matched)
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def get_model_spec(name: str) -> Any:
    """The model's spec (:func:`clsbench.models.get_model_spec`): one error line for a name no source knows."""
    from clsbench.models import get_model_spec as spec_of

    return spec_of(name)


def check_model(name: str, input_size: int | None = None, *, train: bool = False) -> None:
    """Refuse, in one line and before anything runs, what a worker would otherwise meet only after starting
    (docs/run.md, "Checked before timing"):

    - a name no source knows;
    - a builder that raises (its own message), or that breaks the contract of a custom model: it must take
      ``num_classes`` and return an ``nn.Module``;
    - with ``train``, a custom network whose head has another number of classes than the labels the train workload
      draws (:data:`NUM_CLASSES`): :func:`check_head`;
    - an ``input_size`` other than the model's own that its layers cannot take (``inception_v3`` at 32 px):
      :func:`check_input_size`.

    The network is built on the meta device (shapes only: no memory, no arithmetic); a builder that fails there is
    built once for real, and refused only if it fails there too. A custom network's forward is never called here:
    it may crash or hang, which is for a worker to meet and record. A zoo model at its own input size is only
    resolved: it builds and runs at that size.
    """
    spec = get_model_spec(name)
    custom = spec.source == "custom"
    if not custom and (input_size is None or input_size == spec.input_size):
        return
    model = _build_checked(spec, input_size)
    if custom:
        if train:
            check_head(name, model)
        return
    check_input_size(spec, model, input_size or spec.input_size)


#: Characters of an exception's first line quoted in an error line.
QUOTED_ERROR_CHARS = 200


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    line = line if len(line) <= QUOTED_ERROR_CHARS else line[:QUOTED_ERROR_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _build_checked(spec: Any, input_size: int | None) -> Any:
    """The network of ``spec`` built on the meta device, else (its builder needs real tensors) on the CPU.

    Raises:
        InvalidInputError: the builder breaks the contract, or raises on the CPU too (its message quoted).
    """
    import torch

    try:
        with torch.device("meta"):
            return spec.build(seed=0, num_classes=NUM_CLASSES, input_size=input_size)
    except InvalidInputError:
        raise
    except Exception:  # noqa: BLE001 - the meta device alone cannot tell: a real build decides below
        pass
    try:
        return spec.build(seed=0, num_classes=NUM_CLASSES, input_size=input_size)
    except InvalidInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the builder is the model's, said in one line
        raise InvalidInputError(f"model {spec.name!r} cannot be built: its builder raised {_first_line(exc)}",
                                "fix the builder; it is called as builder(num_classes=1000), with input_size= when "
                                "it takes one (docs/run.md: your own model)") from None


def check_head(name: str, model: Any, num_classes: int = NUM_CLASSES) -> None:
    """Refuse a network whose head gives another number of classes than ``num_classes``, the range the train
    workload draws its synthetic labels from (training would stop with ``Target 845 is out of bounds``).

    The head is read from the layers, not from a forward pass: the last ``nn.Linear``'s ``out_features``. A network
    with any layer of ``num_classes`` outputs (a Linear or a convolution, as SqueezeNet's head is) passes, as does one
    without a Linear layer: the structure alone cannot tell, and the worker records what happens.
    """
    import torch

    linear = [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)]
    outputs = {getattr(m, "out_features", getattr(m, "out_channels", None)) for m in model.modules()}
    if not linear or num_classes in outputs:
        return
    raise InvalidInputError(
        f"model {name!r} has a head of {linear[-1]} classes (its last Linear layer), but the train workload draws "
        f"labels from {num_classes} classes, so training would fail",
        f"size its head with the num_classes argument its builder is given ({num_classes}), or measure inference "
        "only: --workload infer-latency,infer-throughput")


def _forward_error(model: Any, input_size: int, device: str) -> BaseException | None:
    """The error a batch-1 forward at ``input_size`` raises on ``device``, or None."""
    import torch

    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, 3, input_size, input_size, device=device))
    except Exception as exc:  # noqa: BLE001 - whatever it raises, it is reported as the model's
        return exc
    return None


def _meta_gap(error: BaseException) -> bool:
    """Whether a meta-device forward failed for want of a meta kernel (an operator the meta device cannot run),
    not for the input's shape."""
    return isinstance(error, NotImplementedError) or "meta" in str(error).lower()


def check_input_size(spec: Any, model: Any, input_size: int) -> None:
    """Refuse an input size a zoo network cannot take, with the smallest side its layers take.

    A batch-1 forward on the meta device (shapes only: about 0.1 s for a ResNet-50 on a busy 2-core host) finds
    it, and a bisection of such forwards the smallest side (about 2 s for inception_v3, on the refusing path only).
    A failure for want of a meta kernel is confirmed by a real batch-1 forward on the CPU before anything is refused,
    so that a gap in the meta kernels never refuses a size the network takes.
    """
    import torch

    on_meta = next(iter(model.parameters()), torch.empty(0)).device.type == "meta"
    error = _forward_error(model, input_size, "meta") if on_meta else None
    if on_meta and error is None:
        return
    if error is None or _meta_gap(error):
        error = _forward_error(spec.build(seed=0, num_classes=NUM_CLASSES, input_size=input_size), input_size, "cpu")
        if error is None:
            return
    smallest = _smallest_input_size(spec, input_size)
    hint = f"use --input-size {smallest} or more (the smallest side its layers take; its own is {spec.input_size})" \
        if smallest is not None else f"use a larger --input-size (its own is {spec.input_size})"
    raise InvalidInputError(f"{spec.name} cannot take {input_size}x{input_size} inputs: {_first_line(error)}", hint)


def _smallest_input_size(spec: Any, failing: int) -> int | None:
    """The smallest side between ``failing`` and the model's own that a meta-device forward takes (bisection: about
    ten shape checks), or None when the model's own side does not pass there either (the meta device cannot
    tell) or ``failing`` is above it."""
    import torch

    def passes(size: int) -> bool:
        try:
            with torch.device("meta"):
                model = spec.build(seed=0, num_classes=NUM_CLASSES, input_size=size)
        except Exception:  # noqa: BLE001 - a builder refusing the size: it does not take it
            return False
        error = _forward_error(model, size, "meta")
        return error is None or _meta_gap(error)

    low, high = failing, spec.input_size
    if low >= high or not passes(high):
        return None
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if passes(middle) else (middle, high)
    return high


def resume_counts(result: Any, *, retry_failed: bool = False) -> tuple[int, int, int] | None:
    """What ``run --resume`` of ``result`` would do: (cells to measure, measurements finished, of them failed); None
    for a file whose plan ``run --resume`` does not continue (a ``scale`` result, a budgeted ``tune`` search, no
    usable plan: :func:`clsbench.engine.runner.resume` says why). With ``retry_failed`` the failed cells count as
    to measure."""
    from clsbench.core.vocab import Status

    tune = result.settings.get("tune")
    if "scale" in result.settings or (isinstance(tune, dict) and (tune.get("format") or 1) >= 2):
        return None
    try:
        plan = RunPlan.from_dict(result.settings)
    except (KeyError, TypeError, ValueError):
        return None
    failed = sum(1 for m in result.measurements if m.status == Status.FAILED)
    todo = [cell for cell in plan.cells if (m := result.find(cell.key)) is None
            or (retry_failed and m.status == Status.FAILED)]
    return len(todo), len(result.measurements), failed


def data_preflight(facts: dict[str, Any], cells: Any) -> dict[str, Any]:
    """``facts`` with the container checks redone for what the cells' real data asks of the machine: DataLoader
    workers' shared memory, the CPU quota, a dataset held in memory (the checks of the same name are replaced)."""
    from clsbench.system.container_checks import container_checks, loader_batch_bytes

    data = [(cell, cell.data) for cell in cells if cell.data is not None]
    if not data:
        return facts
    cpu = [(cell, d) for cell, d in data if d.pipeline == "cpu"]
    batch_bytes = max((loader_batch_bytes(cell.batch_size, cell.input_size or 224, uint8=d.normalize == "device")
                       for cell, d in cpu), default=None)
    dataset_bytes = None
    if any(d.source == "memory" for _, d in data):
        from clsbench.data.scan import scan_folder

        dataset_bytes = max(sum(scan_folder(d.directory).sizes) for _, d in data if d.source == "memory")
    checks = container_checks(
        facts.get("container") or {}, device=cells[0].device, num_workers=max(d.num_workers for _, d in cpu) if cpu
        else 0, prefetch_factor=max((d.prefetch_factor or 2 for _, d in cpu), default=None), batch_bytes=batch_bytes,
        data_source="memory" if dataset_bytes is not None else None, dataset_bytes=dataset_bytes,
        cpu_threads=(facts.get("torch_flags") or {}).get("num_threads"))
    names = {c["check"] for c in checks}
    return {**facts, "preflight": [c for c in facts.get("preflight") or [] if c.get("check") not in names] + checks}
