"""Serving an inference backend's artifact (``clsbench serve --backend NAME``): the artifacts ``run --backend``
builds, one per bucket, checked for parity before the first query, loaded once per model instance.

Artifacts have static shapes (a compiler specialises on them), so a server with buckets 32, 64 and 128 serves three
artifacts: each is the very artifact ``clsbench run --backend NAME --batch-size B`` builds for that bucket (the same
:class:`~clsbench.backends.BackendRequest`, cache key, isolated build process and variants), and a second serve or
run of the same setting takes it from the cache. Every bucket's artifact passes the backend's parity check against
fp32 eager (:func:`clsbench.backends.check_parity`) before any LoadGen query; one that fails is that setting's
failure (reason ``parity_failed``), never served.

Each model instance loads its own copy of every bucket's artifact (:meth:`BackendRunners.load_instance`, in the
instance's own thread, before its warm-up). A loaded runner is not safe to share between threads: the AOTInductor
runner is loaded single-threaded (no locking), ONNX Runtime's IO binding and a TensorRT execution context keep
per-call state. That is also what Triton's ``instance_group`` does: a model copy per instance.

CUDA graphs (``--cuda-graphs`` or ``+cudagraph``): each instance captures the device part of every bucket around
its loaded runner, in CUDA's *relaxed* capture mode, as ``run --backend`` does (:class:`clsbench.backends.apply
.CapturedForward`): the AOTInductor runner queries an event between runs, which the default mode forbids. A backend
that cannot be captured says so through its ``unsupported_reason`` for the ``+cudagraph`` request, and the setting
is skipped with that reason.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clsbench.backends import BackendNotRun, BackendRequest, apply_backend, check_parity, get_backend
from clsbench.backends.base import PARITY_FAILED, artifact_mode
from clsbench.core.vocab import Status

#: Builds running at once on a GPU machine. Each build is its own process (export, C++ compilation, Triton
#: kernels), and most of its time is single-threaded host work, so a few overlap well on a many-core host; the
#: recorded build seconds of overlapping builds include that contention (the result says how many overlapped).
GPU_BUILD_WORKERS = 4
#: On a CPU the builds would compete with each other for the cores they measure on: one at a time.
CPU_BUILD_WORKERS = 1

ProgressCallback = Callable[[dict[str, Any]], None]


@dataclass
class BucketArtifact:
    """One bucket's artifact: the request it was built for, ``apply_backend``'s facts (artifact path, build, cache,
    load) and its parity record."""

    bucket: int
    request: BackendRequest
    facts: dict[str, Any]
    parity: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "backend": self.facts, "parity": self.parity}


@dataclass
class BackendRunners:
    """The loaded runners of one (mode, backend): ``forward(instance, bucket)``.

    Instance 0 runs the loads the build step made (which the parity check already ran); every other instance loads
    its own (:meth:`load_instance`).
    """

    name: str
    artifacts: dict[int, BucketArtifact]
    memory_format: Any
    input_dtype: Any
    loaded: dict[int, dict[int, Callable[[Any], Any]]] = field(default_factory=dict)
    load_s: dict[int, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def forward(self, instance: int, bucket: int) -> Callable[[Any], Any]:
        return self.loaded[instance][bucket]

    def load_instance(self, instance: int, buckets: Sequence[int]) -> None:
        """Load ``instance``'s own runner of each of ``buckets`` from the artifacts (cheap: the cache holds them)."""
        with self.lock:
            have = self.loaded.setdefault(instance, {})
        missing = [b for b in buckets if b not in have]
        if not missing:
            return
        backend = get_backend(self.name)
        t0 = time.perf_counter()
        for bucket in missing:
            artifact = self.artifacts[bucket]
            loaded = backend.load(Path(artifact.facts["artifact_path"]), artifact.request,
                                  artifact.facts.get("build") or {})
            have[bucket] = loaded.forward
        self.load_s[instance] = self.load_s.get(instance, 0.0) + time.perf_counter() - t0

    def facts(self) -> dict[str, Any]:
        """What the result stores of the artifacts: per bucket the build, cache and parity facts, per instance the
        load time."""
        return {"name": self.name, "buckets": [a.to_dict() for _, a in sorted(self.artifacts.items())],
                "instance_load_s": {str(k): v for k, v in sorted(self.load_s.items())}}


def serve_requests(model: str, mode: str, device: str, buckets: Sequence[int], *, input_size: int, seed: int,
                   num_classes: int = 1000) -> dict[int, BackendRequest]:
    """The request of each bucket: exactly what ``run --backend`` asks at that batch size (``+cudagraph`` left out:
    the graph is captured by each instance around its loaded runner, not built into the artifact)."""
    return {b: BackendRequest(model=model, mode=artifact_mode(mode), batch_size=b, input_size=input_size,
                              device=device, seed=seed, num_classes=num_classes) for b in sorted(set(buckets))}


def build_runners(name: str, prepared: Any, requests: dict[int, BackendRequest], *, cache: Any,
                  no_cache: bool = False, workers: int | None = None, isolate: bool = True,
                  progress: ProgressCallback | None = None) -> BackendRunners:
    """Build (or take from the cache) and load every bucket's artifact, then check each for parity.

    Args:
        name: a registered artifact backend.
        prepared: the mode's prepared eager model (its weights go to the builds; it is not run here).
        requests: the request per bucket (:func:`serve_requests`).
        cache: the :class:`~clsbench.backends.ArtifactCache`.
        no_cache: build anew even where the cache holds an artifact.
        workers: builds at once (None: :data:`GPU_BUILD_WORKERS` on a GPU, :data:`CPU_BUILD_WORKERS` on a CPU).
        isolate: build in child processes (False: in this process, for tests).
        progress: called with ``{"kind": "build", "backend", "bucket", "facts"}`` after each bucket's build or
            cache hit, and ``{"kind": "parity", ...}`` after each check.

    Raises:
        BackendNotRun: a bucket's build or load failed (``export_error``, ``build_error``, ``build_crash``,
            ``build_timeout``, ``load_error``), or its outputs failed parity (``parity_failed``); the facts of the
            buckets done so far travel in the exception's ``facts``.
    """
    report = progress or (lambda event: None)
    first = next(iter(requests.values()))
    if workers is None:
        workers = GPU_BUILD_WORKERS if first.device_type == "cuda" else CPU_BUILD_WORKERS
    workers = max(1, min(workers, len(requests)))
    ready: dict[int, Any] = {}
    facts: dict[int, dict[str, Any]] = {}

    def build(bucket: int) -> tuple[int, Any, dict[str, Any]]:
        done, built = apply_backend(name, prepared, requests[bucket], cache=cache, no_cache=no_cache,
                                    isolate=isolate, release_eager=False)
        return bucket, done, built

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="clsbench-build") as pool:
        futures = [pool.submit(build, bucket) for bucket in requests]
        failure: BackendNotRun | None = None
        for future in concurrent.futures.as_completed(futures):
            if future.cancelled():
                continue
            try:
                bucket, done, built = future.result()
            except BackendNotRun as exc:
                failure = failure or exc
                for pending in futures:  # the line has failed: builds not yet started would be wasted
                    pending.cancel()
                continue
            built["overlapping_builds"] = workers
            ready[bucket], facts[bucket] = done, built
            report({"kind": "build", "backend": name, "bucket": bucket, "facts": built})
    if failure is not None:
        raise BackendNotRun(failure.status, failure.reason, failure.detail,
                            {"name": name, "failed": failure.facts, "buckets": [
                                {"bucket": b, "backend": f} for b, f in sorted(facts.items())]})
    artifacts: dict[int, BucketArtifact] = {}
    for bucket in sorted(requests):
        parity = check_parity(ready[bucket], requests[bucket])
        artifacts[bucket] = BucketArtifact(bucket, requests[bucket], facts[bucket], parity)
        report({"kind": "parity", "backend": name, "bucket": bucket, "parity": parity})
        if not parity.get("passed"):
            raise BackendNotRun(Status.FAILED, PARITY_FAILED,
                                f"bucket {bucket}: {parity.get('detail') or 'outputs outside the tolerance'}",
                                {"name": name, "buckets": [a.to_dict() for a in artifacts.values()]})
    spec = ready[min(ready)]
    return BackendRunners(name, artifacts, spec.memory_format, spec.input_dtype,
                          loaded={0: {bucket: done.forward for bucket, done in ready.items()}})
