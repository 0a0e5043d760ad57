"""Inference backends (clsbench.backends): each CPU backend builds, runs and passes parity on the tiny net; a wrong
artifact fails parity; the artifact cache reuses, invalidates and rebuilds; builds that crash, raise or hang become
failed records; TensorRT is tested up to its library calls; the axis takes a backend registered from this module.

Builds that go through the real isolated path (a ``spawn`` child) are few and shared through module fixtures; the
cache tests build inline (``isolate=False``), which exercises the same cache logic without a process per build.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from clsbench.backends import (
    BACKENDS,
    PARITY_TOLERANCE,
    ArtifactCache,
    BackendNotRun,
    BackendRequest,
    BuildStepError,
    Loaded,
    apply_backend,
    backend_unsupported_reason,
    check_backend_selection,
    check_parity,
    get_backend,
    library_versions,
)
from clsbench.backends import apply as apply_module
from clsbench.backends import cache as cache_module
from clsbench.backends import ort as ort_module
from clsbench.backends import trt as trt_module
from clsbench.backends.base import FAILED_BUILD, FAILED_CRASH, FAILED_EXPORT, FAILED_TIMEOUT, PARITY_FAILED
from clsbench.backends.isolate import rebuild_model, save_weights
from clsbench.backends.parity import judge_parity, parity_figures
from clsbench.errors import InvalidInputError
from clsbench.models import get_model_spec
from clsbench.modes import Prepared, parse_mode

TINY = "clsbench_testmodels:tiny"
CLASSES = 10
BATCH = 4
SIDE = 32


def request(mode: str = "fp32", **changes: Any) -> BackendRequest:
    base = BackendRequest(model=TINY, mode=mode, batch_size=BATCH, input_size=SIDE, device="cpu", seed=0,
                          num_classes=CLASSES)
    return dataclasses.replace(base, **changes)


def prepared_for(req: BackendRequest, *, perturb: float = 0.0) -> Prepared:
    """The tiny net prepared for ``req``'s mode as the worker prepares it (optionally with perturbed weights)."""
    mode = parse_mode(req.mode)
    ctx = mode.context(torch.device(req.device), "inference", bf16_supported=True, tf32_supported=False)
    mode.configure(ctx)
    model = get_model_spec(req.model).build(seed=req.seed, num_classes=req.num_classes).eval()
    if perturb:
        with torch.no_grad():
            model.conv.weight.mul_(1.0 + perturb)
    return mode.prepare(model.to(req.device), ctx)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> ArtifactCache:
    return ArtifactCache(tmp_path_factory.mktemp("artifacts"))


# ---------------------------------------------------------------------------------------- real builds (isolated)

#: (backend, mode) pairs built once each through the isolated path and shared by the tests below.
CPU_CASES = [("torchscript", "fp32"), ("torchscript", "bf16+cl"), ("export", "fp32"), ("export-frozen", "fp32"),
             ("onnxruntime", "fp32"), ("onnxruntime", "fp16")]


@pytest.fixture(scope="module")
def built(cache: ArtifactCache) -> dict[tuple[str, str], tuple[Prepared, dict[str, Any]]]:
    """Each CPU case applied once (the export case is the slow one: AOTInductor compiles C++)."""
    out = {}
    for name, mode in CPU_CASES:
        req = request(mode)
        # fp32 goes through the real build process; the other precisions build inline, to spare a process each.
        out[(name, mode)] = apply_backend(name, prepared_for(req), req, cache=cache, isolate=mode == "fp32")
    return out


@pytest.mark.parametrize(("name", "mode"), CPU_CASES)
def test_backend_builds_runs_and_passes_parity(built: dict, name: str, mode: str) -> None:
    ready, facts = built[(name, mode)]
    req = request(mode)
    assert facts["name"] == name and facts["built_now"] and not facts["cache_hit"]
    assert facts["build_s"] > 0 and facts["load_s"] >= 0 and facts["artifact_bytes"] > 0
    assert Path(facts["artifact_path"]).is_dir() and facts["versions"]["torch"] == torch.__version__
    assert [a["ok"] for a in facts["attempts"]] == [True]
    x = req.example().contiguous(memory_format=ready.memory_format)
    with torch.inference_mode():
        out = ready.forward(x)
    assert tuple(out.shape) == (BATCH, CLASSES) and out.dtype == req.dtype
    parity = check_parity(ready, req)
    assert parity["passed"], parity
    assert parity["reason"] is None and parity["top1_agreement_pct"] == 100.0
    assert parity["max_abs_err_rel"] <= PARITY_TOLERANCE[req.precision]


def test_onnxruntime_records_the_provider_and_binds_io(built: dict) -> None:
    ready, facts = built[("onnxruntime", "fp32")]
    runtime = facts["runtime"]
    assert runtime["provider"] == "CPUExecutionProvider" and runtime["io_binding"] is True
    assert runtime["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert ready.memory_format == torch.contiguous_format  # ONNX's boundary is NCHW
    static = ready.forward.static_input
    with torch.inference_mode():
        first = ready.forward(static).clone()
        again = ready.forward(static.clone())  # a copy goes through the bound buffer: same answer
    assert torch.equal(first, again)


def test_export_build_facts_say_what_was_compiled(built: dict) -> None:
    _, facts = built[("export", "fp32")]
    assert facts["variant"] == "default" and facts["build"]["compile_s"] > 0
    assert facts["build"]["compiler"] and facts["build"]["compiler_choice"]  # the wrapper's compiler, and why
    assert facts["versions"]["cxx"] == facts["build"]["compiler"]
    assert facts["runtime"]["runner"] == "torch._C._aoti.AOTIModelPackageLoader"  # the C++ loader, directly
    assert (Path(facts["artifact_path"]) / "model.pt2").is_file()


def test_export_frozen_builds_with_freezing_as_another_artifact(built: dict) -> None:
    _, plain = built[("export", "fp32")]
    _, frozen = built[("export-frozen", "fp32")]
    assert frozen["build"]["inductor_configs"]["freezing"] is True
    assert plain["build"]["inductor_configs"].get("freezing") is not True  # plain export keeps its weights as given
    assert frozen["artifact_path"] != plain["artifact_path"] and frozen["cache_key"] != plain["cache_key"]


def test_both_export_loaders_run_the_package_alike(built: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct C++ loader and ``aoti_load_package`` (CLSBENCH_AOTI_LOADER=python) give the same logits."""
    from clsbench.backends.base import BACKENDS

    ready, facts = built[("export", "fp32")]
    req = request("fp32")
    monkeypatch.setenv("CLSBENCH_AOTI_LOADER", "python")
    python_loaded = BACKENDS.get("export").load(Path(facts["artifact_path"]), req, facts["build"])
    assert python_loaded.facts["runner"] == "torch._inductor.aoti_load_package"
    x = req.example()
    with torch.inference_mode():
        assert torch.allclose(ready.forward(x), python_loaded.forward(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["export", "export-frozen", "onnxruntime", "torchscript"])
def test_an_artifact_of_other_weights_fails_parity(built: dict, name: str) -> None:
    """The artifact was built from seed 0's weights; judged as seed 1's network it is wrong, and parity says so."""
    ready, _ = built[(name, "fp32")]
    parity = check_parity(ready, request("fp32", seed=1))
    assert not parity["passed"] and parity["reason"] == PARITY_FAILED
    assert parity["max_abs_err_rel"] > PARITY_TOLERANCE["fp32"]  # the figures are kept
    assert "differ from fp32 eager" in parity["detail"]


def test_a_perturbed_build_fails_parity_and_is_another_artifact(cache: ArtifactCache, built: dict) -> None:
    req = request("fp32")
    ready, facts = apply_backend("torchscript", prepared_for(req, perturb=0.5), req, cache=cache, isolate=False)
    assert facts["built_now"] and facts["cache_key"] != built[("torchscript", "fp32")][1]["cache_key"]
    parity = check_parity(ready, req)
    assert not parity["passed"] and parity["reason"] == PARITY_FAILED and parity["max_abs_err_rel"] > 0.01


def test_apply_releases_the_eager_weights_and_keeps_the_notes(cache: ArtifactCache, built: dict) -> None:
    req = request("fp32")
    eager = prepared_for(req)
    eager.notes["something"] = 1
    ready, facts = apply_backend("torchscript", eager, req, cache=cache, isolate=False)
    assert facts["cache_hit"] and next(eager.model.parameters()).device.type == "meta"
    assert ready.notes["backend"] == "torchscript" and ready.notes["something"] == 1
    assert ready.autocast_dtype is None


# ----------------------------------------------------------------------------------------------------- cache


def _no_build(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a build ran although the cache holds the artifact")


def test_second_apply_is_a_cache_hit_without_a_build(cache: ArtifactCache, built: dict,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    first = built[("onnxruntime", "fp32")][1]
    monkeypatch.setattr(apply_module, "build_isolated", _no_build)
    req = request("fp32")
    ready, facts = apply_backend("onnxruntime", prepared_for(req), req, cache=cache)
    assert facts["cache_hit"] and not facts["built_now"] and facts["rebuilt_reason"] is None
    assert facts["cache_key"] == first["cache_key"] and facts["artifact_path"] == first["artifact_path"]
    assert facts["build_s"] == first["build_s"]  # the build that made it, from the manifest
    assert check_parity(ready, req)["passed"]


def test_cudagraph_shares_the_build_of_its_mode(cache: ArtifactCache) -> None:
    """The key leaves +cudagraph out (capture wraps a loaded artifact); a CPU request cannot carry it anyway."""
    a, b = request("bf16+cl"), request("bf16+cl+cudagraph")
    assert a.artifact_mode == b.artifact_mode == "bf16+cl"
    fields = [cache_module.key_fields(r, "export", {"torch": "x"}, "w", "cpu") for r in (a, b)]
    assert cache_module.cache_key(fields[0]) == cache_module.cache_key(fields[1])


def test_version_change_is_another_key(cache: ArtifactCache, monkeypatch: pytest.MonkeyPatch) -> None:
    req = request("fp32")
    fields = cache_module.key_fields(req, "torchscript", {"torch": "2.14.1"}, "w", "cpu")
    other = cache_module.key_fields(req, "torchscript", {"torch": "2.15.0"}, "w", "cpu")
    assert cache_module.cache_key(fields) != cache_module.cache_key(other)
    # End to end: the same request with a different library version misses the cache and builds.
    _, before = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    backend = get_backend("torchscript")
    monkeypatch.setattr(type(backend), "versions", lambda self: {"torch": "99.0-test"})
    _, after = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    assert after["built_now"] and not after["cache_hit"] and after["cache_key"] != before["cache_key"]


def test_corrupt_artifact_is_rebuilt_and_said_once(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    req = request("fp32")
    _, facts = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    artifact = Path(facts["artifact_path"]) / "model.pt"
    artifact.write_bytes(artifact.read_bytes()[:100])  # truncated
    ready, rebuilt = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    assert rebuilt["built_now"] and not rebuilt["cache_hit"]
    assert rebuilt["rebuilt_reason"].startswith("corrupt: model.pt has 100 bytes")
    assert check_parity(ready, req)["passed"]
    _, third = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    assert third["cache_hit"] and third["rebuilt_reason"] is None  # said once


def test_stale_and_unloadable_entries_are_rebuilt(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    req = request("fp32")
    _, facts = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    entry = Path(facts["artifact_path"])
    (entry / "manifest.json").unlink()  # as an interrupted build leaves it
    _, stale = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    assert stale["built_now"] and stale["rebuilt_reason"].startswith("stale: the entry has no manifest")
    # Garbage whose hash the manifest agrees with: it verifies, then fails to load.
    artifact = entry / "model.pt"
    artifact.write_bytes(b"not a torchscript archive")
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["files"]["model.pt"] = {"bytes": artifact.stat().st_size, "sha256": cache_module.file_sha256(artifact)}
    (entry / "manifest.json").write_text(json.dumps(manifest))
    ready, unloadable = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    assert unloadable["built_now"] and unloadable["rebuilt_reason"].startswith("unloadable: ")
    assert check_parity(ready, req)["passed"]


def test_no_cache_rebuilds_and_replaces_the_entry(tmp_path: Path) -> None:
    cache = ArtifactCache(tmp_path)
    req = request("fp32")
    _, first = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False)
    _, again = apply_backend("torchscript", prepared_for(req), req, cache=cache, isolate=False, no_cache=True)
    assert again["built_now"] and not again["cache_hit"] and again["no_cache"]
    assert again["cache_key"] == first["cache_key"]
    assert cache.lookup(again["cache_key"])[0] is not None


def test_cache_location_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLSBENCH_CACHE", str(tmp_path / "elsewhere"))
    assert ArtifactCache().root == tmp_path / "elsewhere"
    monkeypatch.delenv("CLSBENCH_CACHE")
    assert ArtifactCache().root == Path("~/.cache/clsbench/artifacts").expanduser()


def test_weights_digest_is_about_values_not_layout() -> None:
    spec = get_model_spec(TINY)
    a, b = spec.build(seed=0, num_classes=CLASSES), spec.build(seed=0, num_classes=CLASSES)
    assert cache_module.weights_digest(a) == cache_module.weights_digest(b.to(memory_format=torch.channels_last))
    assert cache_module.weights_digest(a) != cache_module.weights_digest(spec.build(seed=1, num_classes=CLASSES))


def test_the_build_process_gets_the_exact_weights(tmp_path: Path) -> None:
    req = request("bf16+cl")
    model = prepared_for(req, perturb=0.25).model
    save_weights(model, tmp_path / "w.pt")
    rebuilt = rebuild_model(req, tmp_path / "w.pt")
    for (name, a), (_, b) in zip(model.state_dict().items(), rebuilt.state_dict().items(), strict=True):
        assert torch.equal(a, b) and a.dtype == b.dtype, name
    assert rebuilt.conv.weight.dtype == torch.bfloat16
    assert rebuilt.conv.weight.is_contiguous(memory_format=torch.channels_last)


# ---------------------------------------------------------------------------------- failing and crashing builds


class Scripted:
    """A backend whose build does what ``behaviour`` says (module level, so the build process can unpickle it)."""

    builds_artifact = True
    build_imports = ()

    def __init__(self, behaviour: str, variants: tuple[str, ...] = ("only",)) -> None:
        self.name = f"scripted-{behaviour}"
        self.behaviour = behaviour
        self._variants = variants

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        return None

    def versions(self) -> dict[str, str]:
        return {"torch": torch.__version__}

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return self._variants

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        if self.behaviour == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        if self.behaviour == "exit":
            os._exit(3)
        if self.behaviour == "raise":
            raise RuntimeError("the compiler broke\nsecond line that the record leaves out")
        if self.behaviour == "export":
            raise BuildStepError(FAILED_EXPORT, "torch.export: Unsupported operator aten::frobnicate")
        if self.behaviour == "hang":
            (path / "pid").write_text(str(os.getpid()))
            time.sleep(3600)
        torch.save(model.state_dict(), path / "state.pt")
        return {"variant_seen": variant}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        model = get_model_spec(request.model).build(seed=request.seed, num_classes=request.num_classes)
        model.load_state_dict(torch.load(path / "state.pt", weights_only=True))
        return Loaded(forward=model.eval(), facts={"runner": "scripted"})


@pytest.fixture
def register(request: pytest.FixtureRequest) -> Any:
    names = []

    def add(backend: Any) -> Any:
        BACKENDS.register(backend.name, backend, replace=True)
        names.append(backend.name)
        return backend

    yield add
    for name in names:
        BACKENDS.unregister(name)


def test_a_backend_registered_here_is_an_axis_value(register: Any, tmp_path: Path) -> None:
    """Adding a backend is adding an object to the registry: no other code knows the name."""
    backend = register(Scripted("works"))
    assert backend.name in BACKENDS.names("scripted-*")
    req = request("fp32")
    ready, facts = apply_backend(backend.name, prepared_for(req), req, cache=ArtifactCache(tmp_path))
    assert facts["built_now"] and facts["build"] == {"variant_seen": "only"}
    assert facts["runtime"]["runner"] == "scripted"
    assert check_parity(ready, req)["passed"]


@pytest.mark.parametrize(("behaviour", "reason", "words", "attempts"), [
    ("segv", FAILED_CRASH, "SIGSEGV", 2),  # a crash tries the next variant, then fails
    ("exit", FAILED_CRASH, "exit code 3", 1),
    ("raise", FAILED_BUILD, "RuntimeError: the compiler broke", 1),
    ("export", FAILED_EXPORT, "Unsupported operator aten::frobnicate", 1),
])
def test_a_failing_build_becomes_a_failed_record(register: Any, tmp_path: Path, behaviour: str, reason: str,
                                                 words: str, attempts: int) -> None:
    variants = ("first", "second") if behaviour == "segv" else ("only",)
    backend = register(Scripted(behaviour, variants))
    req = request("fp32")
    with pytest.raises(BackendNotRun) as caught:
        apply_backend(backend.name, prepared_for(req), req, cache=ArtifactCache(tmp_path))
    record = caught.value.record()
    assert record["status"] == "failed" and record["reason"] == reason
    assert words in record["detail"] and "\n" not in record["detail"]
    assert "second line" not in record["detail"]
    assert len(record["backend"]["attempts"]) == attempts
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # no entry left behind
    if behaviour == "segv":
        assert "variants tried: first, second" in record["detail"]
        assert any("Fatal Python error" in line for line in record["backend"]["attempts"][0]["log_tail"])


def test_a_hanging_build_is_killed_as_a_timeout(register: Any, tmp_path: Path) -> None:
    backend = register(Scripted("hang"))
    req = request("fp32")
    with pytest.raises(BackendNotRun) as caught:
        apply_backend(backend.name, prepared_for(req), req, cache=ArtifactCache(tmp_path), build_timeout_s=5)
    assert caught.value.reason == FAILED_TIMEOUT and "limit of 5 s" in caught.value.detail


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as f:
            return any(line.startswith("State:") and "Z" in line.split()[1] for line in f)  # a zombie is dead
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's")
def test_a_build_dies_with_its_parent(tmp_path: Path) -> None:
    """A worker killed on its own timeout must not leave its build compiling on (the build leads its own group)."""
    import subprocess

    script = f"""
import sys
sys.path[:0] = {sys.path!r}
from pathlib import Path
from test_backends import Scripted, request, prepared_for
from clsbench.backends.isolate import BuildJob, build_isolated, save_weights
req = request("fp32")
save_weights(prepared_for(req).model, Path({str(tmp_path)!r}) / "w.pt")
build_isolated(BuildJob(Scripted("hang"), req, {str(tmp_path / "w.pt")!r}, {str(tmp_path)!r}, "only"), timeout_s=600)
"""
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "pid").exists():
            assert time.monotonic() < deadline and parent.poll() is None, "the build never started"
            time.sleep(0.2)
        child = int((tmp_path / "pid").read_text())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 20
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(child)


# ------------------------------------------------------------------------------------------ what is refused


def test_every_backend_of_the_issue_is_registered() -> None:
    assert {"eager", "torchscript", "export", "onnxruntime", "tensorrt"} <= set(BACKENDS.names())
    assert BACKENDS.names()[0] != "" and "eager" in BACKENDS


def test_unknown_backend_is_one_line_with_suggestions() -> None:
    with pytest.raises(InvalidInputError) as caught:
        get_backend("onnxruntim")
    assert str(caught.value) == "unknown backend 'onnxruntim' (did you mean: onnxruntime?)"
    with pytest.raises(InvalidInputError, match="unknown backend 'tvm'"):
        check_backend_selection(["eager", "tvm"], ["inference"])


def test_backend_with_train_is_one_error_line() -> None:
    with pytest.raises(InvalidInputError) as caught:
        check_backend_selection(["eager", "torchscript"], ["inference", "train"])
    assert "inference workloads only" in str(caught.value) and "\n" not in str(caught.value)
    check_backend_selection(["eager"], ["train"])  # eager is today's behaviour: fine
    with pytest.raises(InvalidInputError, match="inference workloads only"):
        backend_unsupported_reason("torchscript", request("fp32", workload_kind="train"))


@pytest.mark.parametrize(("name", "mode", "words"), [
    ("torchscript", "amp-bf16", "autocast"),
    ("export", "amp-fp16+cl", "use fp16 (weights cast)"),
    ("onnxruntime", "fp32+compile", "+compile is torch.compile"),
    ("onnxruntime", "bf16", "no bfloat16 convolution kernel"),
    ("onnxruntime", "fp32+cl", "chooses its own (blocked) layout"),
])
def test_modes_a_backend_cannot_express_are_skipped_with_a_reason(name: str, mode: str, words: str) -> None:
    reason = backend_unsupported_reason(name, request(mode))
    assert reason is not None and words in reason


def test_eager_takes_every_mode_and_returns_the_prepared_model() -> None:
    req = request("amp-bf16+cl")
    assert backend_unsupported_reason("eager", req) is None
    eager = prepared_for(req)
    ready, facts = apply_backend("eager", eager, req)
    assert ready is eager and facts["artifact_path"] is None and facts["cache_hit"] is None


def test_apply_raises_a_skipped_record_for_an_unsupported_request() -> None:
    req = request("bf16")
    with pytest.raises(BackendNotRun) as caught:
        apply_backend("onnxruntime", prepared_for(req), req)
    record = caught.value.record()
    assert record["status"] == "skipped" and record["reason"] == "unsupported_backend"


def test_request_reads_its_mode() -> None:
    req = request("bf16+cl+cudagraph", device="cuda:1")
    assert (req.precision, req.dtype, req.channels_last, req.cudagraph, req.autocast) == (
        "bf16", torch.bfloat16, True, True, False)
    assert (req.device_type, req.device_index, req.artifact_mode) == ("cuda", 1, "bf16+cl")
    assert request("amp-fp16").dtype == torch.float32 and request("amp-fp16").autocast


# ------------------------------------------------------------------------------------------ onnxruntime paths


def test_onnxruntime_without_a_gpu_provider_is_skipped_with_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort_module, "available_providers", lambda: ["CPUExecutionProvider"])
    reason = backend_unsupported_reason("onnxruntime", request("fp16", device="cuda"))
    assert "no GPU execution provider" in reason and "pip install onnxruntime-gpu" in reason
    monkeypatch.setattr(ort_module, "available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert ort_module.planned_provider(request("fp16", device="cuda")) == "TensorrtExecutionProvider"
    assert ort_module.OnnxRuntime().providers(request("fp16", device="cuda"))[-1] == "CPUExecutionProvider"


def test_onnxruntime_missing_library_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ort_module, "has_module", lambda name: name != "onnxscript")
    reason = backend_unsupported_reason("onnxruntime", request("fp32"))
    assert reason == "onnxscript not installed: pip install 'clsbench[onnx]'"


def test_onnxruntime_provider_options_follow_the_mode(tmp_path: Path) -> None:
    cuda = ort_module.provider_options("CUDAExecutionProvider", request("fp32+cl+cudagraph", device="cuda:1"),
                                       tmp_path, 1234)
    assert cuda == {"device_id": 1, "user_compute_stream": "1234", "use_tf32": 0, "prefer_nhwc": 1,
                    "enable_cuda_graph": 1}
    assert ort_module.provider_options("CUDAExecutionProvider", request("tf32", device="cuda"), tmp_path,
                                       None)["use_tf32"] == 1
    trt = ort_module.provider_options("TensorrtExecutionProvider", request("fp16", device="cuda"), tmp_path, None)
    assert trt["trt_fp16_enable"] and trt["trt_engine_cache_enable"]
    assert trt["trt_engine_cache_path"] == str(tmp_path / "trt")


# ------------------------------------------------------------------------------------------- tensorrt paths


def _no_tensorrt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trt_module, "has_module", lambda name: name != "torch_tensorrt" and importlib.util.find_spec(
        name) is not None)
    monkeypatch.setattr(trt_module, "available_providers", lambda: ["CPUExecutionProvider"])


def test_tensorrt_without_the_library_is_skipped_with_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_tensorrt(monkeypatch)
    reason = backend_unsupported_reason("tensorrt", request("bf16+cl", device="cuda"))
    assert reason.startswith("TensorRT is not installed") and "pip install torch-tensorrt" in reason
    assert get_backend("tensorrt").versions() == {"route": "none"}
    with pytest.raises(BackendNotRun) as caught:
        apply_backend("tensorrt", prepared_for(request("fp32")), request("fp32"))
    assert caught.value.status == "skipped" and "TensorRT is not installed" in caught.value.detail


def test_tensorrt_routes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trt_module, "has_module", lambda name: name in ("onnxruntime", "onnxscript"))
    monkeypatch.setattr(trt_module, "available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    assert trt_module.route() == "onnxruntime-trt"
    assert "bf16 through onnxruntime's TensorRT provider" in backend_unsupported_reason(
        "tensorrt", request("bf16+cl", device="cuda"))
    assert backend_unsupported_reason("tensorrt", request("fp16+cl", device="cuda")) is None
    assert "NVIDIA GPUs only" in backend_unsupported_reason("tensorrt", request("fp16"))
    monkeypatch.setattr(trt_module, "has_module", lambda name: True)
    assert trt_module.route() == "torch_tensorrt"
    assert backend_unsupported_reason("tensorrt", request("bf16+cl", device="cuda")) is None


def _fake_torch_tensorrt(calls: dict[str, Any]) -> types.ModuleType:
    """A stand-in with torch-tensorrt's calls, recording its arguments; "engines" are traced TorchScript."""
    fake = types.ModuleType("torch_tensorrt")

    class Input:
        def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, format: torch.memory_format) -> None:
            calls["input"] = {"shape": shape, "dtype": dtype, "format": format}

    def compile(model: Any, ir: str, inputs: list[Any], **settings: Any) -> Any:
        calls["compile"] = {"ir": ir, **settings}
        return model

    def save(module: Any, path: str, output_format: str, inputs: list[Any]) -> None:
        calls["save"] = output_format
        torch.jit.save(torch.jit.trace(module, inputs[0]), path)

    def load(path: str) -> Any:
        return types.SimpleNamespace(module=lambda: torch.jit.load(path))

    fake.Input, fake.compile, fake.save, fake.load = Input, compile, save, load
    return fake


@pytest.mark.filterwarnings("ignore::FutureWarning")  # the stand-in uses torch.jit, which warns it is deprecated
def test_tensorrt_through_torch_tensorrt_up_to_the_library(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: dict[str, Any] = {}
    monkeypatch.setitem(sys.modules, "torch_tensorrt", _fake_torch_tensorrt(calls))
    req = request("fp32+cl")
    model = prepared_for(req).model
    facts = trt_module.build_torch_tensorrt(model, req.example(), req, tmp_path)
    assert calls["compile"] == {"ir": "dynamo", "enabled_precisions": {torch.float32}, "disable_tf32": True}
    assert calls["input"] == {"shape": (BATCH, 3, SIDE, SIDE), "dtype": torch.float32, "format": torch.channels_last}
    assert calls["save"] == "exported_program" and facts["route"] == "torch_tensorrt"
    loaded = trt_module.TensorRT().load(tmp_path, req, facts)
    ready = Prepared(model=model, forward=loaded.forward, memory_format=torch.channels_last)
    assert check_parity(ready, req)["passed"]
    bf16 = request("bf16")
    trt_module.build_torch_tensorrt(prepared_for(bf16).model, bf16.example(), bf16, tmp_path)
    assert calls["compile"]["enabled_precisions"] == {torch.bfloat16} and "disable_tf32" not in calls["compile"]


def test_library_versions_cover_every_registered_backend() -> None:
    versions = library_versions()
    assert {"eager", "torchscript", "export", "onnxruntime", "tensorrt"} <= set(versions)
    assert versions["onnxruntime"]["onnxruntime"] and versions["export"]["torch"] == torch.__version__


# ---------------------------------------------------------------------------------------------------- parity


def test_a_float16_failure_whose_logits_underflow_float16_says_so() -> None:
    # MobileNetV3-Large, seed 0: fp32 logits of at most 8.0e-10, all zeros in fp16 (error 1, top-1 0%).
    failed = judge_parity(1.0, 0.0, 5e-3, dtype_name="float16", scale=8.0e-10)
    assert failed["detail"] == ("outputs differ from fp32 eager by 1 of the logits' scale (tolerance 0.005); top-1 "
                                "agreement 0.0%; the fp32 logits' largest magnitude is 8e-10, below float16's "
                                "smallest normal number (6.1e-05): this model's seeded random-weight logits "
                                "underflow float16; bf16 keeps fp32's range")
    assert failed["scale"] == 8.0e-10 and "dtype_name" not in failed
    for dtype_name, scale in (("bfloat16", 8.0e-10), ("float16", 3.0), ("float16", 0.0), (None, 8.0e-10)):
        detail = judge_parity(1.0, 0.0, 5e-3, dtype_name=dtype_name, scale=scale)["detail"]
        assert "underflow" not in detail, (dtype_name, scale)  # a wide exponent, logits of a usual size, no scale
    assert judge_parity(1e-3, 100.0, 5e-3, dtype_name="float16", scale=8.0e-10)["detail"] is None  # passed


def test_parity_figures_are_relative_to_the_largest_reference_logit() -> None:
    ref = torch.tensor([[1.0, 2.0, -4.0], [0.5, 0.0, 3.0]])
    out = torch.tensor([[1.0, 2.2, -4.0], [0.5, 4.0, 3.0]])  # row 2's arg-max moves
    error, top1, scale = parity_figures(out, ref)
    assert scale == 4.0 and error == pytest.approx(1.0) and top1 == 50.0
    error, _, _ = parity_figures(torch.tensor([[float("nan"), 0.0]]), torch.tensor([[1.0, 0.0]]))
    assert error == float("inf")
    assert not judge_parity(float("inf"), 100.0, 1e-4)["passed"]
    assert judge_parity(1e-4, 100.0, 1e-4)["passed"]  # the tolerance is inclusive


def test_parity_of_eager_bf16_matches_the_documented_tolerance() -> None:
    req = request("bf16")
    parity = check_parity(prepared_for(req), req)
    assert parity["passed"] and 0 < parity["max_abs_err_rel"] <= PARITY_TOLERANCE["bf16"]
    assert parity["reference"].startswith("fp32 eager")


def test_a_parity_check_that_cannot_run_fails_without_raising() -> None:
    req = request("fp32")

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("kaput")

    parity = check_parity(Prepared(model=torch.nn.Identity(), forward=broken), req)
    assert not parity["passed"] and "kaput" in parity["detail"] and parity["max_abs_err_rel"] is None


def test_parity_tolerances_are_the_ones_tune_uses() -> None:
    for module in ("clsbench.tune", "clsbench.procedures.tune"):
        try:
            tune = importlib.import_module(module)
            break
        except ImportError:
            continue
    else:
        pytest.skip("tune is not importable here")
    assert tune.OUTPUT_RTOL == PARITY_TOLERANCE


# ------------------------------------------------------------------------------------------------------ GPU

GPU_CASES = [("torchscript", "bf16+cl"), ("torchscript", "fp32"), ("export", "bf16+cl"), ("export", "fp32"),
             ("export", "bf16+cl+cudagraph"), ("export-frozen", "bf16+cl"), ("onnxruntime", "fp16"),
             ("tensorrt", "bf16+cl")]


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "mode"), GPU_CASES)
def test_backend_on_the_gpu(name: str, mode: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every backend that runs here builds, loads, runs on the device and passes parity. The export cases crashed
    at load on the H200 image until the wrapper's compiler was chosen by its C++ library (2026-12-03: $CXX there
    is /opt/gcc/bin/g++, whose packages die in the model's constructor; see export.choose_compiler)."""
    req = request(mode, device="cuda")
    reason = backend_unsupported_reason(name, req)
    if reason:
        pytest.skip(reason)
    cache = ArtifactCache(tmp_path_factory.mktemp("gpu-artifacts"))
    ready, facts = apply_backend(name, prepared_for(req), req, cache=cache)
    x = req.example().contiguous(memory_format=ready.memory_format)
    with torch.inference_mode():
        out = ready.forward(x)
    assert out.device.type == "cuda"  # IO binding and graphs keep outputs on the device
    parity = check_parity(ready, req)
    assert parity["passed"], parity
    if req.cudagraph:
        assert facts["runtime"]["cuda_graph"] and hasattr(ready.forward, "static_input")
