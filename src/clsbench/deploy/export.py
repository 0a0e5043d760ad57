"""``clsbench export --triton-repo DIR``: the model that was measured, as a Triton model repository.

Steps (:func:`export_triton_repo`):

1. Resolve what to deploy (:func:`resolve`): the options, else the best Server answer of ``--from serve.json``
   (:mod:`clsbench.deploy.serve_winner`), else the defaults (max batch 64, 2 ms, 1 instance). The mode
   is checked as ``run --backend`` checks it: autocast (``amp-*``) and ``+compile`` are refused, ``+cudagraph``
   is dropped (a CUDA graph is the server's choice around a loaded model, not part of the file); the backend must
   have a Triton format (:mod:`clsbench.deploy.base`).
2. Build the artifact in an isolated child process (:func:`clsbench.backends.isolate.build_isolated`, the
   machinery ``run --backend`` builds with) from the seeded model prepared for the mode (precision cast, memory
   format), with a dynamic batch dimension, traced at batch :data:`TRACE_BATCH`, into a staging folder.
3. Check it (:func:`check_artifact`): load it as the format's check loads it (an ONNX Runtime CPU session,
   ``torch.jit.load``), confirm its tensors are the ones the config declares, and compare its outputs with fp32
   eager PyTorch at each of :data:`CHECK_BATCHES` within the parity tolerance of the precision
   (:data:`clsbench.backends.parity.PARITY_TOLERANCE`). A failure is one line, and nothing is written.
4. Write ``config.pbtxt`` and ``README.txt`` and rename the staging folder to ``DIR/<name>``
   (:mod:`clsbench.deploy.triton_repo`).

The artifact is built and checked on the CPU: the ONNX graph does not depend on where it was exported, a traced
TorchScript file is loaded onto the server's device by Triton, and so a repository for a GPU server can be written
on a machine without one. ``--device`` says where the server runs the instances (``KIND_GPU`` or ``KIND_CPU``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import clsbench.deploy.triton_repo as triton_repo
from clsbench.backends.base import BackendRequest, artifact_mode
from clsbench.backends.isolate import DEFAULT_BUILD_TIMEOUT_S, WEIGHTS_FILE, BuildJob, build_isolated, save_weights
from clsbench.deploy.base import TRITON_TYPES, DeployFormat, ExportFailedError, TensorSpec, get_format
from clsbench.deploy.serve_winner import ServeWinner, server_winner
from clsbench.errors import InvalidInputError

#: The batch the artifact is traced or exported at. Not 1: torch.export specialises a dimension of size 1 (it
#: would stop being dynamic), and a trace at 1 could not tell a batch-sized constant from a 1. Not a check size.
TRACE_BATCH = 2
#: The batch sizes the check runs: 1, the smallest batch the dynamic batcher forms, and 3, neither the trace batch
#: nor a power of two, so an operation that baked the traced batch size in cannot pass by accident.
CHECK_BATCHES = (1, 3)
#: The defaults when neither the options nor ``--from`` say: ``clsbench serve``'s own max batch and delay
#: (``--max-batch 64 --max-delay-ms 2``), and 1 instance, of the counts serve tries (1 and 2) the one that served the
#: most within the latency bound on an H100 (benchmarks/README, "The copy stream in the serving loop"), and Triton's
#: own default of one instance per GPU.
DEFAULT_MAX_BATCH = 64
DEFAULT_MAX_DELAY_MS = 2.0
DEFAULT_INSTANCES = 1
DEFAULT_BACKEND = "onnxruntime"
DEFAULT_MODE = "fp32"
DEFAULT_DEVICE = "cuda"
#: Where the artifact is built and checked (see the module's docstring).
BUILD_DEVICE = "cpu"
#: Classes of the head: clsbench measures ImageNet-sized heads (the backends' requests use the same).
NUM_CLASSES = 1000


@dataclass(frozen=True)
class TritonExportSettings:
    """What ``clsbench export --triton-repo`` writes. None means: from ``--from``'s winner, else the default.

    Attributes:
        repo_dir: the model repository (created if missing; ``DIR/<name>`` must not exist).
        model: a model name (``clsbench models``); required without ``from_result``.
        mode: the execution mode measured (``fp16+cl``); default ``fp32``.
        backend: the measured backend whose artifact is deployed (``onnxruntime``, ``torchscript``); default
            ``onnxruntime``.
        from_result: a ``clsbench serve`` result whose best Server answer supplies model, mode, backend and the
            batching setting.
        name: the model's name in the repository; default: the model name made file-safe.
        max_batch: ``max_batch_size`` (serve's ``--max-batch``).
        max_delay_ms: the dynamic batcher's queue delay (serve's ``--max-delay-ms``).
        instances: model instances per device (serve's ``--instances``).
        preferred_batch: the dynamic batcher's preferred batch sizes (default none, as Triton advises).
        input_size: square input side (default: the served size, else the model's own).
        seed: seed of the weights (default: the serve result's, else 0).
        device: where the server runs the instances: ``cuda`` (``KIND_GPU``) or ``cpu`` (``KIND_CPU``).
        build_timeout_s: limit on the build process.
        isolate: build in a child process (False: in this one; tests).
    """

    repo_dir: str
    model: str | None = None
    mode: str | None = None
    backend: str | None = None
    from_result: str | None = None
    name: str | None = None
    max_batch: int | None = None
    max_delay_ms: float | None = None
    instances: int | None = None
    preferred_batch: tuple[int, ...] = ()
    input_size: int | None = None
    seed: int | None = None
    device: str | None = None
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S
    isolate: bool = True


@dataclass(frozen=True)
class ExportPlan:
    """What will be written, every choice resolved (:func:`resolve`).

    Attributes:
        repo_dir, name: where: ``repo_dir/name``.
        request: the artifact's build request (the model, the mode without ``+cudagraph``, the trace batch, the
            input size, the build device, the seed).
        backend: the deployed backend (the format's registry name).
        batching: the config's batching and instances.
        winner: the serve answer it came from, with ``--from``.
        notes: what was changed or chosen on the user's behalf, one line each.
    """

    repo_dir: Path
    name: str
    request: BackendRequest
    backend: str
    batching: triton_repo.Batching
    winner: ServeWinner | None = None
    notes: tuple[str, ...] = ()

    @property
    def format(self) -> DeployFormat:
        return get_format(self.backend)

    @property
    def target(self) -> Path:
        return triton_repo.model_path(self.repo_dir, self.name)


@dataclass(frozen=True)
class RepoOutcome:
    """What :func:`export_triton_repo` wrote.

    Attributes:
        path: the model's folder (``DIR/<name>``).
        plan: what was resolved.
        config: the text of ``config.pbtxt``.
        readme: the text of ``README.txt``.
        parity: one parity record per checked batch size (:func:`clsbench.backends.parity.judge_parity`'s shape).
        build: the format's build facts (exporter, opset, variant).
        runtime: how the check loaded the artifact.
        start_command: how to start Triton on the repository (one line).
        build_s: the build process's wall time.
    """

    path: Path
    plan: ExportPlan
    config: str
    readme: str
    parity: tuple[dict[str, Any], ...]
    build: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)
    start_command: str = ""
    build_s: float | None = None


def _mode(text: str, request_fields: dict[str, Any]) -> tuple[str, list[str]]:
    """The canonical mode to build, and notes; refuses what an exported artifact cannot express."""
    from clsbench.backends.apply import common_unsupported_reason
    from clsbench.modes import parse_mode

    canonical = parse_mode(text).name
    built = artifact_mode(canonical)
    notes = []
    if built != canonical:
        notes.append(f"{canonical}: +cudagraph dropped: a CUDA graph is captured around a loaded model, which is the "
                     f"server's choice, not part of the file; the artifact is {built}")
    reason = common_unsupported_reason(BackendRequest(mode=built, batch_size=TRACE_BATCH, **request_fields))
    if reason:
        raise InvalidInputError(f"--mode {canonical}: {reason}", "export a mode without amp-* and +compile")
    return built, notes


def _device(text: str) -> str:
    kind = text.split(":", 1)[0]
    if kind not in triton_repo.INSTANCE_KINDS:
        raise InvalidInputError(f"--device {text!r}: the server's instances run on cuda or cpu",
                                "--device cuda (KIND_GPU) or --device cpu (KIND_CPU)")
    return kind


def resolve(settings: TritonExportSettings) -> ExportPlan:
    """Every choice of the export, from the options, ``--from``'s winner, then the defaults; nothing is built.

    Raises:
        InvalidInputError: a bad or missing option, a mode or backend that has no deployable artifact, a serve
            file without a Server answer.
        ResultFileError: an unreadable ``--from`` file, or ``DIR/<name>`` exists already.
    """
    from clsbench.models import get_model_spec
    from clsbench.results import io as result_io

    winner = server_winner(result_io.load(settings.from_result), settings.from_result) \
        if settings.from_result else None
    model = settings.model or (winner.model if winner else None)
    if not model:
        raise InvalidInputError("--model is required without --from",
                                "e.g. --model resnet50, or --from a `clsbench serve` result")
    spec = get_model_spec(model)
    backend = settings.backend or (winner.backend if winner else DEFAULT_BACKEND)
    if winner is not None and settings.backend is None:
        try:
            get_format(backend)
        except InvalidInputError as exc:
            raise InvalidInputError(f"the best Server answer of {winner.source} ({winner.describe()}) ran on "
                                    f"{backend}: {exc.message.split(': ', 1)[-1]}",
                                    "add --backend onnxruntime (or torchscript) to deploy its mode and batching "
                                    "setting in that format") from None
    fmt = get_format(backend)
    input_size = settings.input_size or (winner.input_size if winner else None) or spec.input_size
    seed = settings.seed if settings.seed is not None else (winner.seed if winner and winner.seed is not None else 0)
    fields = {"model": spec.name, "input_size": int(input_size), "device": BUILD_DEVICE, "seed": int(seed),
              "num_classes": NUM_CLASSES}
    mode, notes = _mode(settings.mode or (winner.mode if winner else DEFAULT_MODE), fields)
    request = BackendRequest(mode=mode, batch_size=TRACE_BATCH, **fields)
    reason = fmt.unsupported_reason(request)
    if reason:
        raise InvalidInputError(f"--backend {backend} --mode {mode}: {reason}", "choose another mode or backend")
    device = _device(settings.device or (winner.device if winner and winner.device else DEFAULT_DEVICE))

    def pick(given: Any, from_winner: Any, default: Any) -> Any:
        return given if given is not None else (from_winner if winner is not None else default)

    batching = triton_repo.Batching(
        max_batch=int(pick(settings.max_batch, winner and winner.max_batch, DEFAULT_MAX_BATCH)),
        max_delay_ms=float(pick(settings.max_delay_ms, winner and winner.max_delay_ms, DEFAULT_MAX_DELAY_MS)),
        instances=int(pick(settings.instances, winner and winner.instances, DEFAULT_INSTANCES)),
        preferred=tuple(sorted(set(settings.preferred_batch))), kind=triton_repo.INSTANCE_KINDS[device]).validate()
    repo_dir = Path(settings.repo_dir)
    name = triton_repo.check_name(settings.name or triton_repo.default_name(spec.name))
    triton_repo.check_free(repo_dir, name)
    return ExportPlan(repo_dir=repo_dir, name=name, request=request, backend=backend, batching=batching,
                      winner=winner, notes=tuple(notes))


def build_artifact(plan: ExportPlan, folder: Path, timeout_s: float, isolate: bool) -> tuple[dict[str, Any], float]:
    """Build the plan's artifact into ``folder`` (the version folder) in a child process; its facts and seconds.

    The parent builds the seeded model and prepares it as the mode does (precision cast, memory format, eval),
    hands its weights over in a file beside ``folder``, and the child rebuilds and exports it
    (:func:`clsbench.backends.isolate.run_build`), then loads the result once (its smoke load).

    Raises:
        ExportFailedError: every build variant failed; the first line of the last failure.
    """
    import torch

    from clsbench.backends.isolate import BUILD_LOG
    from clsbench.models import get_model_spec

    request = plan.request
    model = get_model_spec(request.model).build(seed=request.seed, num_classes=request.num_classes,
                                                input_size=request.input_size)
    model = model.to(dtype=request.dtype)
    if request.channels_last:
        model = model.to(memory_format=torch.channels_last)
    weights = folder.parent / WEIGHTS_FILE
    save_weights(model.eval(), weights)
    del model
    outcome = None
    try:
        for variant in plan.format.variants(request):
            job = BuildJob(backend=plan.format, request=request, weights_path=str(weights),  # type: ignore[arg-type]
                           out_dir=str(folder), variant=variant)
            outcome = build_isolated(job, timeout_s=timeout_s, isolate=isolate)
            if outcome.ok:
                break
            shutil.rmtree(folder)  # the next variant starts from an empty folder
            folder.mkdir()
    finally:
        weights.unlink(missing_ok=True)
    assert outcome is not None
    log = folder / BUILD_LOG
    if not outcome.ok:
        kept = keep_log(log)
        detail = (outcome.detail or "").replace(f"see {BUILD_LOG}", f"see {kept}" if kept else "no log")
        raise ExportFailedError(f"the {plan.backend} export of {request.model} {request.mode} failed "
                                f"({outcome.reason}): {detail}",
                                (f"the build's output is in {kept}; " if kept else "")
                                + f"`clsbench run --model {request.model} --mode {request.mode} --backend "
                                f"{plan.backend} --workload infer-latency` shows whether the measured, static-batch "
                                "export works")
    log.unlink(missing_ok=True)
    return dict(outcome.facts), float(outcome.process_s or 0.0)


def keep_log(log: Path) -> Path | None:
    """Move a failed build's log out of the staging folder (which is removed) into a temporary file; its path."""
    import tempfile

    if not log.exists():
        return None
    handle, name = tempfile.mkstemp(prefix="clsbench-export-", suffix=".build.log")
    os.close(handle)
    shutil.move(str(log), name)
    return Path(name)


def _dtype_name(tensor: Any) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def check_tensors(declared: tuple[TensorSpec, TensorSpec], runtime: dict[str, Any]) -> str | None:
    """Where the artifact's own inputs and outputs (``runtime["inputs"]``/``["outputs"]``, when the loader says)
    disagree with the config's declaration, in one line; None when they agree."""
    for spec, described in zip(declared, (runtime.get("inputs"), runtime.get("outputs")), strict=True):
        if not described:
            continue
        actual = described[0]
        expected_dtype = next((k for k, v in TRITON_TYPES.items() if v == spec.data_type), spec.data_type)
        shape = list(actual.get("shape") or [])
        if actual.get("name") != spec.name or actual.get("dtype") != expected_dtype:
            return (f"the artifact's tensor is {actual.get('name')} {actual.get('dtype')}, the config declares "
                    f"{spec.name} {expected_dtype}")
        if not shape or isinstance(shape[0], int) or [int(d) for d in shape[1:]] != list(spec.dims):
            dims = ", ".join(map(str, spec.dims))
            return f"{spec.name} has shape {shape} in the artifact; the config needs [batch, {dims}]"
    return None


def check_artifact(plan: ExportPlan, folder: Path, build_facts: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                                                          dict[str, Any]]:
    """Load the artifact in ``folder`` and hold it to fp32 eager at each of :data:`CHECK_BATCHES`.

    Returns:
        The parity record of each batch size and the loader's facts.

    Raises:
        ExportFailedError: it does not load, its tensors are not the declared ones, it returns the wrong shape or
            dtype, or its outputs differ from fp32 eager beyond the tolerance.
    """
    import torch

    from clsbench.backends.base import first_line
    from clsbench.backends.parity import (
        PARITY_DATA_SEED,
        judge_parity,
        parity_figures,
        parity_input,
        reference_logits,
        tolerance_for,
    )

    request = plan.request
    fmt = plan.format
    declared = fmt.tensors(request)
    what = f"the {plan.backend} artifact of {request.model} {request.mode}"
    try:
        loaded = fmt.load(folder, request, build_facts)
    except Exception as exc:  # noqa: BLE001 - a file that does not load is this export's failure, in one line
        raise ExportFailedError(f"{what} was built but does not load: {first_line(exc)}") from None
    mismatch = check_tensors(declared, loaded.facts)
    if mismatch:
        raise ExportFailedError(f"{what} does not match its config: {mismatch}")
    largest = dataclasses.replace(request, batch_size=max(CHECK_BATCHES))
    images = parity_input(largest)
    reference = reference_logits(largest, images)
    tolerance = tolerance_for(request)
    records = []
    for batch in CHECK_BATCHES:
        x = images[:batch].to(dtype=request.dtype).contiguous()
        try:
            with torch.inference_mode():
                out = loaded.forward(x)
        except Exception as exc:  # noqa: BLE001 - a batch size the artifact refuses fails the export
            raise ExportFailedError(f"{what} fails at batch {batch}: {first_line(exc)}",
                                    "its batch dimension is not dynamic; the model may fix the batch size in its "
                                    "forward") from None
        out = out[0] if isinstance(out, (tuple, list)) else out
        expected = (batch, request.num_classes)
        if tuple(out.shape) != expected or TRITON_TYPES.get(_dtype_name(out)) != declared[1].data_type:
            raise ExportFailedError(f"{what} returns {tuple(out.shape)} {_dtype_name(out)} at batch {batch}; the "
                                    f"config declares {expected} {declared[1].data_type}")
        error, top1, scale = parity_figures(out.float(), reference[:batch])
        record = judge_parity(error, top1, tolerance, dtype_name=request.dtype_name, scale=scale, batch=batch,
                              data_seed=PARITY_DATA_SEED)
        records.append(record)
        if not record["passed"]:
            raise ExportFailedError(f"{what} at batch {batch}: {record['detail']}; nothing written",
                                    "the same mode under `clsbench run --backend` shows whether the measured artifact "
                                    "passes (fp16 can flush small random-weight logits to zero)")
    return records, dict(loaded.facts)


def readme_text(plan: ExportPlan, parity: list[dict[str, Any]], build: dict[str, Any], runtime: dict[str, Any],
                start: str, now: datetime) -> str:
    """``README.txt``: what the model folder holds, for whom reads it next to the config."""
    from clsbench.backends.parity import REFERENCE
    from clsbench.version import __version__

    request, fmt, batching = plan.request, plan.format, plan.batching
    source, target = fmt.tensors(request)
    legacy = " (legacy: deprecated upstream)" if fmt.legacy else ""
    preferred = ", ".join(map(str, batching.preferred)) or "none (the batcher forms the largest batch available)"
    figures = "; ".join(f"batch {p['batch']}: {p['max_abs_err_rel']:.2e}, top-1 agreement "
                        f"{p['top1_agreement_pct']:.0f}%" for p in parity)
    lines = [
        f"{plan.name}: {request.model} {request.mode} on {plan.backend}{legacy}, platform {fmt.platform}",
        f"written by clsbench {__version__} export --triton-repo on {now.strftime('%Y-%m-%d %H:%M UTC')}",
        "",
        f"format: {fmt.summary}",
        f"file: {triton_repo.VERSION}/{fmt.artifact}",
        f"input:  {source.name} {source.data_type} [-1, {', '.join(map(str, source.dims))}]: NCHW images, normalised "
        "as the network expects (for ImageNet networks: RGB scaled to 0..1, minus mean 0.485/0.456/0.406, divided "
        "by std 0.229/0.224/0.225); any batch from 1 to max_batch_size",
        f"output: {target.name} {target.data_type} [-1, {', '.join(map(str, target.dims))}]: logits, before softmax",
        f"weights: seeded random initialisation (seed {request.seed}), as clsbench measures: the network's speed, "
        "not a trained classifier",
        f"batching: max_batch_size {batching.max_batch}; dynamic batching, queue delay {batching.max_delay_us} us; "
        f"preferred batch sizes: {preferred}; {batching.instances} instance(s) of kind {batching.kind}",
    ]
    if plan.winner is not None:
        lines.append(f"from: {plan.winner.source}: the best Server answer, {plan.winner.describe()}")
    lines.append(f"parity against {REFERENCE}, max |out - ref| / max |ref| (tolerance {parity[0]['tolerance']:g} for "
                 f"{request.precision}): {figures}: passed")
    built = ", ".join(f"{k} {v}" for k, v in build.items() if k in ("exporter", "opset", "method", "variant",
                                                                    "weights") and v is not None)
    lines.append(f"built: traced at batch {TRACE_BATCH} on the CPU; {built}")
    lines.append(f"checked with: {runtime.get('runner', 'the format loader')} at batch sizes "
                 f"{', '.join(map(str, CHECK_BATCHES))}")
    for note in (*plan.notes, *fmt.readme_notes(request)):
        lines.append(f"note: {note}")
    lines += ["", "start Triton on this repository:", f"  {start}",
              "  (<yy.mm>: a Triton release whose ONNX Runtime or PyTorch backend reads what built this file; the "
              "versions are above)", ""]
    return "\n".join(lines)


def export_triton_repo(settings: TritonExportSettings, *,
                       progress: Callable[[str], None] | None = None) -> RepoOutcome:
    """Resolve, build, check and write one model into a Triton model repository (see the module's docstring).

    Args:
        settings: what to write.
        progress: called with a line before each slow step (building, checking); None: silent.

    Raises:
        InvalidInputError: bad input (nothing built).
        ResultFileError: ``DIR/<name>`` exists, ``DIR`` cannot be written, or ``--from`` cannot be read.
        ExportFailedError: the build or the check failed; nothing written.
    """
    say = progress or (lambda line: None)
    plan = resolve(settings)
    request = plan.request
    if plan.winner is not None:
        say(f"from {plan.winner.source}: the best Server answer, {plan.winner.describe()}")
    for note in plan.notes:
        say(f"note: {note}")
    staging = triton_repo.staging_folder(plan.repo_dir, plan.name)
    try:
        folder = staging / triton_repo.VERSION
        say(f"building {request.model} {request.mode} as {plan.format.platform} ({plan.backend}), traced at batch "
            f"{TRACE_BATCH} with a dynamic batch dimension, in a child process")
        t0 = time.perf_counter()
        build, build_s = build_artifact(plan, folder, settings.build_timeout_s, settings.isolate)
        say(f"built in {time.perf_counter() - t0:.1f} s; checking against fp32 eager at batch sizes "
            f"{', '.join(map(str, CHECK_BATCHES))}")
        parity, runtime = check_artifact(plan, folder, build)
        config = triton_repo.render_config(plan.name, plan.format.platform, plan.format.tensors(request),
                                           plan.batching)
        start = triton_repo.start_command(plan.repo_dir, plan.batching.kind)
        readme = readme_text(plan, parity, build, runtime, start, datetime.now(timezone.utc))
        path = triton_repo.commit(staging, plan.repo_dir, plan.name, config, readme)
    finally:
        triton_repo.discard(staging)  # gone already after a commit (renamed); a failure leaves nothing behind
    return RepoOutcome(path=path, plan=plan, config=config, readme=readme, parity=tuple(parity), build=build,
                       runtime=runtime, start_command=start, build_s=build_s)
