"""What the worker calls: check a backend against a request, then build (or reuse), load and wrap its artifact.

Order inside one repeat (the worker's ``measure``), all before the timed region:

1. :func:`backend_unsupported_reason` before preparing anything: a reason means the record is ``skipped``
   (reason ``unsupported_backend``).
2. The mode prepares the model as today (precision, memory format, eval, on the device).
3. :func:`apply_backend` returns a :class:`~clsbench.modes.Prepared` whose ``forward`` runs the backend, and the
   backend's facts for the record; a failure raises :class:`BackendNotRun`, whose :meth:`~BackendNotRun.record`
   is the repeat's record (``failed`` with ``export_error``, ``build_error``, ``build_crash``, ``build_timeout`` or
   ``load_error``; ``skipped`` with ``unsupported_backend``).
4. :func:`clsbench.backends.parity.check_parity` on the returned Prepared.
5. The workload runs ``Prepared.forward`` exactly as it runs an eager model.

``eager`` builds nothing: :func:`apply_backend` returns the Prepared unchanged with facts that say so.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from clsbench.backends.base import (
    BACKENDS,
    FAILED_BUILD,
    FAILED_CRASH,
    FAILED_LOAD,
    SKIPPED_UNSUPPORTED,
    Backend,
    BackendRequest,
    check_inference,
    first_line,
    get_backend,
)
from clsbench.backends.cache import ArtifactCache, cache_key, device_identity, key_fields, weights_digest
from clsbench.backends.isolate import (
    BUILD_LOG,
    DEFAULT_BUILD_TIMEOUT_S,
    WEIGHTS_FILE,
    BuildJob,
    build_isolated,
    save_weights,
    torch_flags,
)
from clsbench.core.vocab import Status

if TYPE_CHECKING:
    import torch

    from clsbench.modes import Prepared

#: Build outcomes after which the next build variant is tried (an exporter's refusal is the model's, not the
#: configuration's, and a timeout would only repeat itself).
RETRY_REASONS = (FAILED_BUILD, FAILED_CRASH)


class BackendNotRun(Exception):
    """The backend could not produce a runnable model for this measurement.

    Attributes:
        status: ``skipped`` or ``failed``.
        reason: the reason code (``unsupported_backend``, ``export_error``, ``build_error``, ``build_crash``,
            ``build_timeout``, ``load_error``).
        detail: one line.
        facts: the backend facts gathered so far (cache, attempts, build log tail), for the record.
    """

    def __init__(self, status: str, reason: str, detail: str, facts: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail
        self.facts = facts or {}

    def record(self) -> dict[str, Any]:
        """The repeat record for this outcome (the worker's record shape: status, reason, detail, backend)."""
        return {"status": self.status, "reason": self.reason, "detail": self.detail, "backend": self.facts}


def common_unsupported_reason(request: BackendRequest) -> str | None:
    """Why no artifact backend can express ``request``: the mode parts that only eager PyTorch has."""
    if request.autocast:
        cast = request.precision.removeprefix("amp-")
        return (f"{request.precision} is autocast, a run-time policy of eager PyTorch; an exported artifact has "
                f"fixed dtypes (torch.export ignores autocast, tracing under it fails): use {cast} (weights cast)")
    if "compile" in request.modifiers:
        return ("+compile is torch.compile, itself a backend of eager PyTorch; it does not apply to an exported "
                "artifact: use --backend eager with +compile, or --backend export (AOTInductor)")
    return None


def backend_unsupported_reason(name: str, request: BackendRequest) -> str | None:
    """Why ``name`` cannot run ``request`` here (the record is then ``skipped``, ``unsupported_backend``), or None.

    Raises:
        InvalidInputError: an unknown backend (one line, closest names), or a training workload.
    """
    backend = get_backend(name)
    check_inference(request)
    if backend.builds_artifact:
        reason = common_unsupported_reason(request)
        if reason:
            return reason
    return backend.unsupported_reason(request)


def check_backend_selection(names: list[str] | tuple[str, ...], workload_kinds: list[str] | tuple[str, ...]) -> None:
    """Validate ``--backend`` against the plan before anything runs (the CLI's one error line).

    Raises:
        InvalidInputError: an unknown backend name, or a non-eager backend with a training workload.
    """
    from clsbench.errors import InvalidInputError

    for name in names:
        get_backend(name)
    if any(n != "eager" for n in names) and any(kind != "inference" for kind in workload_kinds):
        raise InvalidInputError("--backend applies to inference workloads only (infer-latency, infer-throughput)",
                                "measure train without --backend (it is eager), or drop train from --workload")


def library_versions() -> dict[str, dict[str, str]]:
    """Every registered backend's library versions, for the result's environment (missing libraries: absent)."""
    out: dict[str, dict[str, str]] = {}
    for name, backend in BACKENDS.items():
        with contextlib.suppress(Exception):  # a broken library install is that backend's skip reason, not an error
            out[name] = backend.versions()
    return out


def _release(model: torch.nn.Module) -> None:
    """Drop the eager module's weights from the device: the backend holds its own copy, and memory figures should
    show the backend's footprint, not both."""
    with contextlib.suppress(Exception):
        model.to("meta")


class CapturedForward:
    """A loaded runner captured once into a CUDA graph and replayed (``+cudagraph`` on an artifact backend).

    Like :class:`clsbench.modes.cudagraph.GraphedForward` (static input and output, a copy into the static input
    unless the caller passes it, ``static_input`` for the throughput workload), with two differences: capture
    happens when the backend is applied, so a runner that cannot be captured fails there as ``load_error``; and
    capture runs in CUDA's *relaxed* mode, because a runner may make host calls the default (global) mode forbids
    while a stream is capturing: AOTInductor's default runner queries the event of its previous run
    (``cudaEventQuery``) before each run. (It is loaded single-threaded here, which skips that, but a capture should
    not depend on it.)
    """

    def __init__(self, forward: Any, example: torch.Tensor) -> None:
        import torch

        self._forward = forward
        self.static_input = example.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(CAPTURE_WARMUP_CALLS):
                forward(self.static_input)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self._graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(self._graph, capture_error_mode="relaxed"):
            self._static_output = forward(self.static_input)
        torch.cuda.synchronize()

    def __call__(self, x: torch.Tensor) -> Any:
        if x is not self.static_input:
            if x.shape != self.static_input.shape:
                raise ValueError(f"graph captured for {tuple(self.static_input.shape)}, got {tuple(x.shape)}")
            self.static_input.copy_(x, non_blocking=True)
        self._graph.replay()
        return self._static_output


#: Calls before capture: TorchScript's profiling executor optimises a graph on its second call and may compile
#: fusion kernels then; cuDNN autotuning allocates memory, which capture forbids. Four covers both.
CAPTURE_WARMUP_CALLS = 4


def _wrap_cuda_graph(forward: Any, example: torch.Tensor) -> tuple[Any, float]:
    """Capture ``forward`` in a CUDA graph now; return the replaying callable and the capture time."""
    t0 = time.perf_counter()
    graphed = CapturedForward(forward, example)
    return graphed, time.perf_counter() - t0


def apply_backend(
    name: str,
    prepared: Prepared,
    request: BackendRequest,
    *,
    cache: ArtifactCache | None = None,
    no_cache: bool = False,
    isolate: bool = True,
    build_timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    release_eager: bool = True,
    variants: tuple[str, ...] | None = None,
) -> tuple[Prepared, dict[str, Any]]:
    """Run ``request`` on backend ``name``: build its artifact (or reuse the cached one), load it, wrap it.

    Call it after the mode has prepared the model (precision and memory format applied, on its device, eval) and
    before the timed region.

    Args:
        name: a registered backend.
        prepared: the mode's Prepared; its ``model`` supplies the weights (its ``forward`` is replaced).
        request: the measurement; must match how ``prepared`` was made.
        cache: where artifacts live; None: :class:`ArtifactCache` at its default location.
        no_cache: build anew even if the cache holds the artifact (the new build replaces the entry).
        isolate: build in a child process (the default; False builds in this process, for tests and debugging).
        build_timeout_s: limit on one build attempt.
        release_eager: move the eager module to the meta device once the artifact is loaded, so the measurement's
            memory is the backend's alone. The worker never uses the module again for inference workloads.
        variants: build variants to try instead of the backend's own list (verification scripts); a forced list
            is part of the cache key.

    Returns:
        ``(prepared, facts)``: a new Prepared whose ``forward`` runs the backend (``model`` is the eager module,
        released or not; ``input_dtype`` and ``memory_format`` are what the backend takes; no autocast), and the
        facts for the record: ``name``, ``artifact_path``, ``artifact_bytes``, ``build_s`` (of the build that
        made the artifact, from the cache on a hit), ``built_now``, ``build_process_s``, ``load_s``,
        ``graph_capture_s``, ``cache_dir``, ``cache_key``, ``cache_hit``, ``rebuilt_reason``, ``no_cache``,
        ``variant``, ``attempts``, ``versions``, ``build`` (the backend's build facts), ``runtime`` (how it runs:
        provider, IO binding, CUDA graph), ``lookup_s``.

    Raises:
        BackendNotRun: skipped (unsupported here) or failed (export, build, crash, timeout, load); its
            :meth:`~BackendNotRun.record` is the repeat's record.
        InvalidInputError: an unknown backend or a training workload.
    """
    import torch

    from clsbench.modes import Prepared

    backend = get_backend(name)
    check_inference(request)
    if not backend.builds_artifact:
        facts = {"name": backend.name, "artifact_path": None, "artifact_bytes": None, "build_s": None,
                 "load_s": None, "cache_hit": None, "versions": backend.versions()}
        return prepared, facts
    reason = backend_unsupported_reason(name, request)
    if reason:
        raise BackendNotRun(Status.SKIPPED, SKIPPED_UNSUPPORTED, reason, {"name": name})

    cache = cache if cache is not None else ArtifactCache()
    t0 = time.perf_counter()
    versions = backend.versions()
    forced = tuple(variants) if variants else None
    fields = key_fields(request, name, versions, weights_digest(prepared.model), device_identity(request.device),
                        variant="|".join(forced) if forced else None)
    key = cache_key(fields)
    entry, rebuilt_reason = (None, None) if no_cache else cache.lookup(key)
    facts: dict[str, Any] = {"name": name, "cache_dir": str(cache.root), "cache_key": key, "cache_hit": False,
                             "no_cache": no_cache, "rebuilt_reason": rebuilt_reason, "versions": versions,
                             "lookup_s": time.perf_counter() - t0, "attempts": []}
    loaded = None
    if entry is not None:
        t1 = time.perf_counter()
        try:
            loaded = backend.load(entry.path, request, entry.manifest.get("build_facts", {}))
            facts.update(cache_hit=True, load_s=time.perf_counter() - t1)
        except Exception as exc:  # noqa: BLE001 - an unloadable entry is rebuilt, and the result says so
            facts["rebuilt_reason"] = f"unloadable: {first_line(exc)}"
            cache.evict(key)
            entry = None
    if entry is None:
        entry = _build(backend, prepared.model, request, cache, key, fields, facts, forced, isolate, build_timeout_s)
        t1 = time.perf_counter()
        try:
            loaded = backend.load(entry.path, request, entry.manifest.get("build_facts", {}))
        except Exception as exc:  # noqa: BLE001 - recorded as this measurement's failure
            raise BackendNotRun(Status.FAILED, FAILED_LOAD, f"the {name} artifact was built but does not load: "
                                f"{first_line(exc)}", facts) from None
        facts["load_s"] = time.perf_counter() - t1
    assert loaded is not None and entry is not None
    manifest = entry.manifest
    facts.update(artifact_path=str(entry.path), artifact_bytes=entry.artifact_bytes, build_s=manifest.get("build_s"),
                 variant=manifest.get("variant"), build=manifest.get("build_facts", {}), runtime=dict(loaded.facts))
    facts.setdefault("built_now", False)

    memory_format = loaded.memory_format
    if memory_format is None:
        memory_format = torch.channels_last if request.channels_last else torch.contiguous_format
    forward = loaded.forward
    facts["graph_capture_s"] = None
    if request.cudagraph and request.device_type == "cuda" and not loaded.facts.get("cuda_graph"):
        example = request.example().contiguous(memory_format=memory_format)
        try:
            forward, facts["graph_capture_s"] = _wrap_cuda_graph(forward, example)
        except Exception as exc:  # noqa: BLE001 - a runner that cannot be captured fails this measurement
            raise BackendNotRun(Status.FAILED, FAILED_LOAD, f"CUDA graph capture around the {name} runner failed: "
                                f"{first_line(exc)}", facts) from None
        facts["runtime"]["cuda_graph"] = "captured by clsbench around the loaded runner"
    if release_eager:
        _release(prepared.model)
    notes = {**prepared.notes, "backend": name}
    notes.pop("cudagraph", None)  # the mode's own capture of the eager module is not what runs
    if request.cudagraph and request.device_type == "cuda":
        notes["cudagraph"] = facts["runtime"].get("cuda_graph")
    ready = Prepared(model=prepared.model, forward=forward, input_dtype=request.dtype, memory_format=memory_format,
                     autocast_dtype=None, notes=notes)
    return ready, facts


def _build(backend: Backend, model: torch.nn.Module, request: BackendRequest, cache: ArtifactCache, key: str,
           fields: dict[str, Any], facts: dict[str, Any], forced: tuple[str, ...] | None, isolate: bool,
           timeout_s: float) -> Any:
    """Build the artifact, trying each variant in turn while builds fail or crash; commit the first that works."""
    attempts: list[dict[str, Any]] = facts["attempts"]
    outcome = None
    for variant in forced or backend.variants(request):
        staging = cache.staging(key)
        weights = staging / WEIGHTS_FILE
        save_weights(model, weights)
        job = BuildJob(backend=backend, request=request, weights_path=str(weights), out_dir=str(staging),
                       variant=variant, flags=torch_flags())
        outcome = build_isolated(job, timeout_s=timeout_s, isolate=isolate)
        weights.unlink(missing_ok=True)
        attempt = {"variant": variant, "ok": outcome.ok, "reason": outcome.reason, "detail": outcome.detail,
                   "build_s": outcome.build_s, "smoke_load_s": outcome.smoke_load_s, "process_s": outcome.process_s,
                   "exitcode": outcome.exitcode}
        if not outcome.ok:
            attempt["log_tail"] = outcome.log_tail
        attempts.append(attempt)
        if outcome.ok:
            entry = cache.commit(key, staging, fields, backend=backend.name, variant=variant, build_s=outcome.build_s,
                                 build_facts=outcome.facts, exclude=(BUILD_LOG,))
            facts.update(built_now=True, build_process_s=outcome.process_s)
            return entry
        cache.discard(staging)
        if outcome.reason not in RETRY_REASONS:
            break
    assert outcome is not None
    tried = ", ".join(a["variant"] for a in attempts)
    detail = outcome.detail or outcome.reason or "the build failed"
    if len(attempts) > 1:
        detail = f"{detail} (variants tried: {tried})"
    raise BackendNotRun(Status.FAILED, outcome.reason or FAILED_BUILD, detail, facts)
