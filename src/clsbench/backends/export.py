"""``export``: ``torch.export.export`` then AOTInductor (``torch._inductor.aoti_compile_and_package``) into one
``model.pt2`` package, loaded by PyTorch's C++ package loader as a deployment would load it (``aoti_load_package``
where this PyTorch lacks it, or with ``CLSBENCH_AOTI_LOADER=python``).

The package holds the compiled kernels (Triton on a GPU, C++/OpenMP on a CPU), a C++ wrapper that launches them
and the weights; loading it needs no Python model code. Build and load are timed apart (``build_s``, ``load_s``).

What each device needs: a C++ compiler (``g++``, or ``$CXX``) on both, since the wrapper is always C++, whose shared
objects run with the C++ library PyTorch runs with (:func:`choose_compiler`); on a GPU also Triton (shipped with
PyTorch's CUDA wheels). The input shape is static (the request's batch), which lets Inductor specialise every
kernel; another batch size is another package.

The runner is loaded with ``run_single_threaded=True``: it drops the container's locking and per-run CUDA event
bookkeeping, which a single-threaded benchmark does not need and which costs microseconds at batch 1 and gets in the
way of CUDA-graph capture (``+cudagraph``, done by :mod:`clsbench.backends.apply` around the loaded runner).

On the H200 image a build of ResNet-50 with bf16 weights and channels_last once killed its process (SIGSEGV).
Builds run isolated (:mod:`clsbench.backends.isolate`); on a GPU, a build that crashes or fails is retried with the
``conservative`` variant (:data:`VARIANTS`): Triton kernels compiled in-process instead of in a pool of forked
workers, Inductor's layout optimisation and freezing off, no autotuning. The record lists every attempt.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from clsbench.backends.base import (
    BACKENDS,
    FAILED_BUILD,
    FAILED_EXPORT,
    BackendRequest,
    BuildStepError,
    Loaded,
    distribution_version,
    first_line,
    has_module,
    torch_versions,
)

ARTIFACT = "model.pt2"
#: Inductor settings of each build variant. ``default`` is Inductor's own; ``conservative`` removes the suspects
#: of a crash at build time: the forked compile-worker pool (``compile_threads``), layout rewriting of convolutions,
#: constant freezing and autotuning benchmarks.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "conservative": {"compile_threads": 1, "layout_optimization": False, "freezing": False, "max_autotune": False},
}


#: Environment variable holding a JSON object of Inductor settings laid over every build variant's (for example
#: ``{"aot_inductor.embed_kernel_binary": true}``): a workaround or an experiment without editing code. What it
#: holds is part of the artifact's cache key and of the recorded versions, and the build facts list it.
CONFIGS_ENV = "CLSBENCH_AOTI_CONFIGS"


def env_configs() -> dict[str, Any]:
    """The settings of :data:`CONFIGS_ENV` (empty when unset).

    Raises:
        BuildStepError: the variable is not a JSON object (the build fails with this line, not a traceback).
    """
    text = os.environ.get(CONFIGS_ENV, "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BuildStepError(FAILED_BUILD, f"{CONFIGS_ENV} is not valid JSON ({exc.msg}): give an object such as "
                                           '{"freezing": true}') from None
    if not isinstance(value, dict):
        raise BuildStepError(FAILED_BUILD, f"{CONFIGS_ENV} must be a JSON object of Inductor settings, "
                                           f"not {type(value).__name__}")
    return value


#: Environment variable naming the C++ compiler for AOTInductor's wrapper, over the choice below (never overridden).
CXX_ENV = "CLSBENCH_AOTI_CXX"
#: Compilers tried, after ``$CXX``, for one whose C++ library is the one this process runs with.
CXX_FALLBACKS = ("g++", "/usr/bin/g++")


def runtime_libstdcxx() -> str | None:
    """The C++ standard library PyTorch runs with in this process, resolved; None where it cannot be read.

    PyTorch is imported first: a process that has not imported it (the CLI recording its environment) has no C++
    library loaded yet, and would otherwise record another compiler than its workers build with.
    """
    import torch  # noqa: F401 - loads libtorch, and with it the libstdc++ it runs with

    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1]
                if "/libstdc++.so" in path:
                    return os.path.realpath(path)
    except OSError:
        pass
    return None


#: What :func:`compiler_libstdcxx` reports for a compiler whose shared objects carry their own copy of the C++
#: library (``-static-libstdc++``) instead of needing the process's: never the loaded one.
STATIC_LIBSTDCXX = "a copy linked into each shared object (-static-libstdc++)"
_PROBE_SOURCE = ('#include <sstream>\n#include <string>\n'
                 'extern "C" int clsbench_probe(int x) { std::ostringstream s; s << x; return (int)s.str().size(); }\n')


@functools.cache
def compiler_libstdcxx(cxx: str) -> str | None:
    """The C++ standard library that shared objects built by ``cxx`` run with, resolved; None when it does not say.

    A one-function shared object is built and its dynamic section read: without a ``NEEDED libstdc++`` entry the
    compiler links the library statically (:data:`STATIC_LIBSTDCXX`). That is what the H200 image's
    ``CXX=/opt/gcc/bin/g++`` does (its packages have no ``libstdc++`` in ``ldd`` and are four times the size), and
    such a package's own copy of the library, beside the one PyTorch loaded, crashed in ``std::regex``'s locale code.
    Otherwise the answer is the library the compiler links against (``-print-file-name``).
    """
    exe = shutil.which(cxx)
    if exe is None:
        return None
    if needs_shared_libstdcxx(exe) is False:
        return STATIC_LIBSTDCXX
    try:
        run = subprocess.run([exe, "-print-file-name=libstdc++.so.6"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    path = run.stdout.strip()
    return os.path.realpath(path) if os.path.isabs(path) and os.path.exists(path) else None


def needs_shared_libstdcxx(exe: str) -> bool | None:
    """Whether a shared object that ``exe`` builds needs ``libstdc++.so`` at run time (False: it carries a static
    copy); None when the probe cannot be built or read (no ``readelf`` or ``objdump``, a compiler that fails)."""
    with tempfile.TemporaryDirectory(prefix="clsbench-cxx-") as tmp:
        src, lib = Path(tmp) / "probe.cpp", Path(tmp) / "probe.so"
        src.write_text(_PROBE_SOURCE)
        try:
            built = subprocess.run([exe, "-shared", "-fPIC", "-O1", str(src), "-o", str(lib)], capture_output=True,
                                   text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if built.returncode != 0 or not lib.is_file():
            return None
        for tool in (["readelf", "-d"], ["objdump", "-p"]):
            if shutil.which(tool[0]) is None:
                continue
            try:
                out = subprocess.run([*tool, str(lib)], capture_output=True, text=True, timeout=30)
            except (OSError, subprocess.SubprocessError):
                continue
            if out.returncode == 0 and "NEEDED" in out.stdout:
                return any("NEEDED" in line and "libstdc++" in line for line in out.stdout.splitlines())
    return None


def choose_compiler() -> dict[str, Any]:
    """The C++ compiler for the wrapper, and why.

    A wrapper whose shared object runs with another C++ library than the loading process crashes when loaded. On
    the H200 image ``CXX`` is ``/opt/gcc/bin/g++``, a wrapper around the distribution's GCC 13.3 that links
    ``libstdc++`` statically: every package it built carried its own copy beside the one PyTorch loads and died with
    SIGSEGV in the model's constructor (``std::regex`` in ``parse_device_str`` reached ``std::codecvt``; cuda-gdb's
    stack is in ``benchmarks/results/h200/backends-20261203T170854Z/aoti-probe/gdb.txt``). The distribution's
    ``/usr/bin/g++`` built packages that need the shared library, and they loaded and matched eager. So:
    ``$CLSBENCH_AOTI_CXX`` if set; else ``$CXX`` (else ``g++``) when the C++ library its shared objects run with
    (:func:`compiler_libstdcxx`) is the loaded one or cannot be told; else the first of :data:`CXX_FALLBACKS` whose
    is; else ``$CXX`` anyway, with the mismatch recorded.
    """
    forced = os.environ.get(CXX_ENV)
    if forced:
        return {"compiler": forced, "compiler_choice": f"${CXX_ENV}"}
    configured = os.environ.get("CXX") or "g++"
    loaded = runtime_libstdcxx()
    own = compiler_libstdcxx(configured)
    facts: dict[str, Any] = {"compiler": configured, "runtime_libstdcxx": loaded, "compiler_libstdcxx": own}
    if loaded is None or own is None or own == loaded:
        return {**facts, "compiler_choice": "$CXX" if os.environ.get("CXX") else "g++ (no $CXX)"}
    for candidate in CXX_FALLBACKS:
        if shutil.which(candidate) and compiler_libstdcxx(candidate) == loaded:
            return {**facts, "compiler": candidate, "compiler_libstdcxx": loaded,
                    "compiler_choice": f"{candidate}: $CXX={configured} builds with {own}, not the {loaded} this "
                                       f"process loads (its packages crash at load)"}
    return {**facts, "compiler_choice": f"$CXX, though it builds with {own} and this process loads {loaded}: set "
                                        f"{CXX_ENV} to a compiler of the loaded library if loading crashes"}


def _compiler() -> str:
    """The C++ compiler named for the wrapper: ``$CLSBENCH_AOTI_CXX``, else ``$CXX``, else ``g++`` (Inductor's
    default on Linux); :func:`choose_compiler` may pick another of the same kind at build time."""
    return os.environ.get(CXX_ENV) or os.environ.get("CXX") or "g++"


def _known_configs(configs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The settings this torch's Inductor knows (an unknown key would fail the build), and the dropped ones."""
    from torch._inductor import config

    known = set(config.get_config_copy())
    kept = {k: v for k, v in configs.items() if k in known}
    return kept, sorted(set(configs) - set(kept))


class Export:
    """The ``export`` backend; other settings of the same build register under other names (``export-frozen``).

    Args:
        name: the registry name.
        configs: Inductor settings of every build of this backend, laid over each build variant's (so that the
            ``conservative`` fallback keeps them) and under :data:`CONFIGS_ENV`'s.
        tune_rank: where ``clsbench tune`` tries this backend among the others (lowest first).
    """

    builds_artifact = True
    build_imports = ("torch.export", "torch._inductor")
    #: ``export`` and ``export-frozen`` are the same build (freezing is one Inductor setting): priced as one.
    build_family = "export"
    #: Builds took 54-72 s on the H200 (ResNet-50 and MobileNetV3-Large, bf16+cl, batch 1 and 256,
    #: benchmarks/results/h200/backends-20261203T185814Z); 9-14 s for ResNet-18 at 64x64 on a 2-core CPU.
    build_s = {"cuda": 70.0, "cpu": 30.0}

    def __init__(self, name: str = "export", configs: dict[str, Any] | None = None, tune_rank: int = 30) -> None:
        self.name = name
        self.configs = dict(configs or {})
        self.tune_rank = tune_rank  # plain export: after export-frozen (20; measured faster), before ONNX Runtime

    def unsupported_reason(self, request: BackendRequest) -> str | None:
        import torch

        if not hasattr(torch, "export") or not has_module("torch._inductor"):
            return "this torch has no torch.export / AOTInductor (needs torch >= 2.6)"
        import torch._inductor as inductor

        if not hasattr(inductor, "aoti_compile_and_package"):
            return "this torch has no torch._inductor.aoti_compile_and_package (needs torch >= 2.6)"
        if shutil.which(_compiler()) is None:
            return f"AOTInductor compiles C++ and no compiler {_compiler()!r} is on PATH (install g++, or set CXX)"
        if request.device_type == "cuda" and not has_module("triton"):
            return "AOTInductor on a GPU needs Triton (pip install triton, matching your torch)"
        return None

    def versions(self) -> dict[str, str]:
        versions = torch_versions()
        triton = distribution_version("triton", "pytorch-triton")
        if triton:
            versions["triton"] = triton
        versions["cxx"] = choose_compiler()["compiler"]  # another compiler, another artifact
        with_env = os.environ.get(CONFIGS_ENV, "").strip()
        if with_env:  # not a library version, but it decides the artifact as one does: keyed and recorded alike
            versions[CONFIGS_ENV] = with_env
        return versions

    def variants(self, request: BackendRequest) -> tuple[str, ...]:
        return ("default", "conservative") if request.device_type == "cuda" else ("default",)

    def build(self, model: Any, example: Any, request: BackendRequest, path: Path, variant: str) -> dict[str, Any]:
        import torch
        from torch._inductor import aoti_compile_and_package

        configs, dropped = _known_configs({**VARIANTS[variant], **self.configs, **env_configs()})
        compiler = choose_compiler()
        t0 = time.perf_counter()
        with torch.no_grad():
            try:
                program = torch.export.export(model, (example,), strict=False)
            except Exception as exc:  # noqa: BLE001 - the exporter's refusal is the model's export error
                raise BuildStepError(FAILED_EXPORT, f"torch.export: {first_line(exc)}") from exc
            export_s = time.perf_counter() - t0
            t1 = time.perf_counter()
            # cpp.cxx is read from $CXX when Inductor is imported: the choice is patched in for this build.
            aoti_compile_and_package(program, package_path=str(path / ARTIFACT),
                                     inductor_configs={**configs, "cpp.cxx": (None, compiler["compiler"])})
        return {"method": "torch.export.export (non-strict) + aoti_compile_and_package", "export_s": export_s,
                "compile_s": time.perf_counter() - t1, "inductor_configs": configs, "configs_unknown_here": dropped,
                **compiler}

    def load(self, path: Path, request: BackendRequest, build_facts: dict[str, Any]) -> Loaded:
        device_index = request.device_index if request.device_type == "cuda" else -1
        if os.environ.get(LOADER_ENV, "").strip().lower() != "python":
            forward = direct_runner(path / ARTIFACT, device_index)
            if forward is not None:
                return Loaded(forward=forward, facts={"runner": "torch._C._aoti.AOTIModelPackageLoader",
                                                      "run_single_threaded": True})
        from torch._inductor import aoti_load_package

        params = inspect.signature(aoti_load_package).parameters
        kwargs: dict[str, Any] = {}
        if "run_single_threaded" in params:
            kwargs["run_single_threaded"] = True
        if "device_index" in params and request.device_type == "cuda":
            kwargs["device_index"] = device_index
        runner = aoti_load_package(str(path / ARTIFACT), **kwargs)
        return Loaded(forward=runner, facts={"runner": "torch._inductor.aoti_load_package",
                                             "run_single_threaded": kwargs.get("run_single_threaded", False)})


#: ``python`` loads packages with ``torch._inductor.aoti_load_package`` instead of the C++ loader directly.
LOADER_ENV = "CLSBENCH_AOTI_LOADER"


def direct_runner(package: Path, device_index: int = -1) -> Any:
    """``forward(x) -> logits`` over PyTorch's C++ package loader, or None where this PyTorch has none.

    ``aoti_load_package`` wraps the same loader but first imports ``torch._inductor`` and reads the archive in
    Python: on the H200 image that took 33-41 s per process against 0.01-0.04 s for the loader itself. A deployment
    loads the package from C++ without either, so the measured load time is the loader's alone. The package's
    input and output are one tensor each (the classifier's image batch and logits), so no pytree is needed.
    """
    import torch

    loader_cls = getattr(getattr(torch._C, "_aoti", None), "AOTIModelPackageLoader", None)
    if loader_cls is None:
        return None
    try:  # (path, model name, run_single_threaded, num_runners, device_index) since PyTorch 2.6
        loader = loader_cls(str(package), "model", True, 1, device_index)
    except TypeError:
        return None  # an older signature: aoti_load_package knows it
    run = loader.run

    def forward(x: Any) -> Any:
        return run([x])[0]

    return forward


BACKENDS.register("export", Export())
