"""Where AOTInductor's package loader crashes, and which build or load configuration does not (issue 16).

On the H200 image (torch 2.11) every AOTInductor package built by ``clsbench``'s ``export`` backend killed the
process that loaded it with SIGSEGV, a tiny model's too. This script settles what crashes and what works, on a tiny
convolutional network (conv, batch norm, ReLU, residual add, pooling, linear: the operators of the networks we
benchmark), in a few minutes of device time:

* **builds**, one fresh process each, run side by side: the default build and one build per suspect setting
  (kernels embedded in the shared object, constants outside it, no precompiled headers, a debug wrapper at -O0, the
  legacy ``torch._export.aot_compile``), plus a CPU build as the control;
* **loads**, one fresh process each, serially: every package with every loader (``aoti_load_package`` with and without
  ``run_single_threaded``, and ``torch._C._aoti.AOTIModelPackageLoader`` directly), a forward pass, and the output's
  error against eager PyTorch on the same weights;
* with ``--gdb``, the default package's load under ``cuda-gdb`` (a plain gdb for host code on that image), whose
  native stack says in which library and function the crash is;
* ``torch.compile(options={"cpp_wrapper": True})``: the same C++ wrapper and kernel launcher, compiled just in time.

Each row is stage, outcome (``ok``, an exception's first line, or the signal that killed the process), seconds, and
the output error. Rows go to ``OUT/aoti_probe.jsonl`` as they finish and the table to ``OUT/aoti_probe.txt``.

Usage::

    python3 benchmarks/aoti_probe.py --out /tmp/aoti --device cuda --gdb
    python3 benchmarks/aoti_probe.py --out /tmp/aoti --device cpu          # the script itself, anywhere
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: One build's Inductor settings per variant; keys this torch does not know are dropped and reported.
BUILD_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "embed-kernels": {"aot_inductor.embed_kernel_binary": True},
    "consts-outside-so": {"aot_inductor.package_constants_in_so": False},
    "no-pch": {"aot_inductor.precompile_headers": False},
    "debug-O0": {"aot_inductor.debug_compile": True},
    "no-asm-consts": {"aot_inductor.use_consts_asm_build": False},
    "mmap-weights": {"aot_inductor.force_mmap_weights": True},
    "freezing": {"freezing": True},
    "legacy-aot-compile": {},  # torch._export.aot_compile + aot_load: one .so, no package
    "system-gxx": {},  # the default build, compiled by the distribution's g++ instead of $CXX
}
#: Environment of a variant's build process beyond this one's (the H200 image sets CXX=/opt/gcc/bin/g++).
VARIANT_ENV: dict[str, dict[str, str]] = {"system-gxx": {"CXX": "/usr/bin/g++", "CC": "/usr/bin/gcc"}}
#: How a built package is loaded; the first is how clsbench's ``export`` backend loads, and every variant is loaded
#: with it (``--loaders`` changes the list).
LOADERS = ("aoti_load_package-single-threaded", "aoti_load_package", "AOTIModelPackageLoader")
#: Preference among the variants for ``--choose`` (the export backend's fix): the least intrusive first.
FIX_ORDER = ("default", "system-gxx", "embed-kernels", "no-pch", "no-asm-consts", "mmap-weights", "consts-outside-so",
             "freezing", "debug-O0")
BUILD_TIMEOUT_S = 240
LOAD_TIMEOUT_S = 120
GDB_TIMEOUT_S = 120
BATCH = 4
INPUT_SIZE = 64


def tiny_model() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                          nn.MaxPool2d(2), Block(32), Block(32), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, 10))
    with torch.no_grad():  # running statistics that are not the identity, so a lost batch norm shows
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def example(device: str) -> Any:
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, 3, INPUT_SIZE, INPUT_SIZE, generator=g).to(device)


def _emit(row: dict[str, Any]) -> None:
    print("ROW " + json.dumps(row), flush=True)


def child_build(variant: str, device: str, folder: Path) -> None:
    import torch
    from torch._inductor import config

    folder.mkdir(parents=True, exist_ok=True)
    model = tiny_model().to(device)
    x = example(device)
    with torch.no_grad():
        torch.save(model(x).cpu(), folder / "reference.pt")
    known = set(config.get_config_copy())
    wanted = BUILD_VARIANTS[variant]
    configs = {k: v for k, v in wanted.items() if k in known}
    dropped = sorted(set(wanted) - set(configs))
    t0 = time.perf_counter()
    with torch.no_grad():
        program = torch.export.export(model, (x,), strict=False)
        if variant == "legacy-aot-compile":
            from torch._export import aot_compile

            so = aot_compile(model, (x,), options=configs)
            shutil.copy(so, folder / "model.so")
        else:
            from torch._inductor import aoti_compile_and_package

            aoti_compile_and_package(program, package_path=str(folder / "model.pt2"), inductor_configs=configs)
    _emit({"stage": "build", "variant": variant, "device": device, "outcome": "ok",
           "seconds": round(time.perf_counter() - t0, 2), "configs": configs, "unknown_here": dropped,
           "CXX": os.environ.get("CXX"), "so_facts": so_facts(folder)})


def so_facts(folder: Path) -> dict[str, Any]:
    """What the package's shared object needs: the newest GLIBCXX/CXXABI versions it asks for, its libraries."""
    import re
    import zipfile

    facts: dict[str, Any] = {}
    pt2 = folder / "model.pt2"
    if not pt2.exists():
        return facts
    with zipfile.ZipFile(pt2) as z:
        names = [n for n in z.namelist() if n.endswith(".so")]
        if not names:
            return facts
        so = folder / "extracted.so"
        so.write_bytes(z.read(names[0]))
    data = so.read_bytes()
    for tag in ("GLIBCXX", "CXXABI", "GLIBC"):
        found = {m.decode() for m in re.findall(rb"%s_[0-9.]+" % tag.encode(), data)}
        facts[f"newest_{tag}"] = max(found, key=lambda v: [int(x) for x in v.split("_")[1].split(".") if x],
                                     default=None)
    ldd = subprocess.run(["ldd", str(so)], capture_output=True, text=True)
    facts["ldd"] = [ln.strip() for ln in ldd.stdout.splitlines() if "libstdc++" in ln or "not found" in ln
                    or "libgcc" in ln or "libtorch" in ln][:8]
    facts["bytes"] = len(data)
    return facts


def child_load(variant: str, loader: str, device: str, folder: Path) -> None:
    import torch

    x = example(device)
    reference = torch.load(folder / "reference.pt")
    t0 = time.perf_counter()
    if variant == "legacy-aot-compile":
        from torch._export import aot_load

        runner = aot_load(str(folder / "model.so"), device)
    elif loader == "AOTIModelPackageLoader":
        inner = torch._C._aoti.AOTIModelPackageLoader(str(folder / "model.pt2"), "model", False, 1, -1)
        runner = lambda t: inner.run([t])[0]  # noqa: E731
    else:
        from torch._inductor import aoti_load_package

        runner = aoti_load_package(str(folder / "model.pt2"), run_single_threaded=loader.endswith("single-threaded"))
    load_s = time.perf_counter() - t0
    print(f"loaded in {load_s:.2f} s; running", flush=True)
    with torch.inference_mode():
        out = runner(x)
        if isinstance(out, (list, tuple)):
            out = out[0]
        if device == "cuda":
            torch.cuda.synchronize()
    err = float((out.float().cpu() - reference).abs().max() / reference.abs().max())
    _emit({"stage": "load+run", "variant": variant, "loader": loader, "device": device, "outcome": "ok",
           "seconds": round(load_s, 2), "max_err_rel": err})


def child_cpp_wrapper(device: str) -> None:
    import torch

    model = tiny_model().to(device)
    x = example(device)
    with torch.no_grad():
        ref = model(x)
        t0 = time.perf_counter()
        out = torch.compile(model, options={"cpp_wrapper": True})(x)
        if device == "cuda":
            torch.cuda.synchronize()
    err = float((out - ref).abs().max() / ref.abs().max())
    _emit({"stage": "jit cpp_wrapper", "variant": "-", "device": device, "outcome": "ok",
           "seconds": round(time.perf_counter() - t0, 2), "max_err_rel": err})


def _signal(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def spawn(args: list[str], timeout: float, log: Path, base: dict[str, Any], env: dict[str, str] | None = None) -> dict:
    """Run this script as a child with ARGS (and ENV over this environment); the row it printed, or one made from
    how it ended."""
    cmd = [sys.executable, "-X", "faulthandler", __file__, *args]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace",
                              env={**os.environ, **(env or {})})
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        code = None
    seconds = round(time.perf_counter() - t0, 2)
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n===== {' '.join(cmd)}\n--- stdout\n{out}\n--- stderr\n{err}\n--- exit {code}\n")
    rows = [json.loads(line[4:]) for line in out.splitlines() if line.startswith("ROW ")]
    if rows and code == 0:
        return rows[-1]
    lines = [ln for ln in (err + "\n" + out).splitlines() if ln.strip()]
    reason = "timeout" if code is None else _signal(code)
    tail = [ln for ln in lines if "Error" in ln or "error" in ln or "Fatal" in ln or "File " in ln][-4:]
    return {**base, "outcome": reason, "seconds": seconds, "detail": " | ".join(tail)[:600]}


def gdb_backtrace(folder: Path, device: str, timeout: float, out: Path, loader: str) -> dict[str, Any]:
    """The native stack of the default package's load+run under cuda-gdb (or gdb), written to OUT/gdb.txt."""
    gdb = shutil.which("cuda-gdb") or shutil.which("gdb")
    if gdb is None:
        return {"stage": "gdb", "outcome": "no cuda-gdb or gdb on PATH"}
    cmd = [gdb, "-q", "-batch", "-nx", "-ex", "set pagination off", "-ex", "set confirm off",
           "-ex", "set cuda api_failures ignore" if "cuda-gdb" in gdb else "echo",
           "-ex", "handle SIGUSR1 SIGUSR2 SIGPIPE nostop noprint", "-ex", "run", "-ex", "bt 40", "-ex", "info threads",
           "-ex", "info registers rip", "-ex", "x/6i $pc", "-ex", "info sharedlibrary",
           "--args", sys.executable, __file__, "--child-load", "default", "--loader", LOADERS[0],
           "--device", device, "--dir", str(folder)]
    cmd[cmd.index("--loader") + 1] = loader
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        text = proc.stdout + "\n--- stderr\n" + proc.stderr
    except subprocess.TimeoutExpired as exc:
        text = f"timed out after {timeout} s\n" + (exc.stdout.decode(errors="replace") if exc.stdout else "")
    (out / "gdb.txt").write_text(text, encoding="utf-8")
    frames = [ln for ln in text.splitlines() if ln.startswith("#")][:12]
    return {"stage": "gdb", "variant": "default", "outcome": "see gdb.txt", "seconds":
            round(time.perf_counter() - t0, 1), "detail": " | ".join(f[:160] for f in frames)[:1500]}


def environment() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0]}
    try:
        import triton

        facts["triton"] = triton.__version__
    except ImportError:
        facts["triton"] = None
    for tool in ("g++", "gcc", "cuda-gdb", "ld"):
        path = shutil.which(tool)
        facts[tool] = path and subprocess.run([path, "--version"], capture_output=True, text=True).stdout.split(
            "\n")[0]
    facts["ldd"] = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    facts["CXX"] = os.environ.get("CXX")
    for var in ("CXX", "CC"):
        if os.environ.get(var):
            run = subprocess.run([os.environ[var], "--version"], capture_output=True, text=True)
            facts[f"{var}_version"] = run.stdout.split("\n")[0]
    facts["which g++"] = shutil.which("g++")
    facts["LD_LIBRARY_PATH"] = os.environ.get("LD_LIBRARY_PATH")
    if torch.cuda.is_available():
        facts["gpu"] = torch.cuda.get_device_name(0)
    return facts


def write_table(rows: list[dict[str, Any]], path: Path) -> str:
    lines = [f"{'stage':<16} {'variant':<20} {'loader':<36} {'dev':<5} {'outcome':<22} {'s':>7} {'err':>9}  detail"]
    for r in rows:
        err = r.get("max_err_rel")
        lines.append(f"{r.get('stage', ''):<16} {r.get('variant', ''):<20} {r.get('loader', '-'):<36} "
                     f"{r.get('device', ''):<5} {str(r.get('outcome', ''))[:22]:<22} {r.get('seconds', 0):>7} "
                     f"{'-' if err is None else f'{err:.1e}':>9}  {str(r.get('detail', ''))[:300]}")
    text = "\n".join(lines) + "\n"
    path.write_text(text, encoding="utf-8")
    return text


def choose(jsonl: Path, device: str, tolerance: float = 1e-3) -> dict[str, Any] | None:
    """The Inductor settings of the first variant in :data:`FIX_ORDER` whose package loaded and ran with the export
    backend's loader and matched eager; None when none did."""
    rows = [json.loads(line) for line in jsonl.read_text(encoding="utf-8").splitlines() if line.strip()]
    builds = {r["variant"]: r for r in rows if r.get("stage") == "build" and r.get("device") == device}
    for variant in FIX_ORDER:
        for r in rows:
            if (r.get("stage") == "load+run" and r.get("variant") == variant and r.get("device") == device
                    and r.get("outcome") == "ok" and (r.get("max_err_rel") or 0.0) <= tolerance
                    and variant in builds):
                return {"variant": variant, "configs": builds[variant].get("configs", {}),
                        "env": VARIANT_ENV.get(variant, {}), "loader": r.get("loader")}
    return None


def one_step(a: argparse.Namespace) -> int:
    """What a child process (or ``--choose``) does."""
    if a.choose:
        print(json.dumps(choose(a.choose, a.device)))
    elif a.child_build:
        child_build(a.child_build, a.device, a.dir)
    elif a.child_load:
        child_load(a.child_load, a.loader, a.device, a.dir)
    else:
        child_cpp_wrapper(a.device)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--device", default="cuda")
    p.add_argument("--variants", default=",".join(BUILD_VARIANTS))
    p.add_argument("--parallel", type=int, default=4, help="builds at once")
    p.add_argument("--gdb", action="store_true")
    p.add_argument("--child-build")
    p.add_argument("--child-load")
    p.add_argument("--child-cpp-wrapper", action="store_true")
    p.add_argument("--loader", default="aoti_load_package")
    p.add_argument("--loaders", default=",".join(LOADERS),
                   help="loaders to try on the default package, first one on the others (AOTIModelPackageLoader "
                        "alone skips the 45 s that aoti_load_package spends importing Inductor on that image)")
    p.add_argument("--no-cpp-wrapper", action="store_true")
    p.add_argument("--dir", type=Path)
    p.add_argument("--choose", type=Path, help="print the fix chosen from this aoti_probe.jsonl as JSON, and exit")
    a = p.parse_args()
    if a.choose or a.child_build or a.child_load or a.child_cpp_wrapper:
        return one_step(a)
    out: Path = a.out
    out.mkdir(parents=True, exist_ok=True)
    work = out / "packages"
    log = out / "aoti_probe.log"
    rows: list[dict[str, Any]] = []
    jsonl = (out / "aoti_probe.jsonl").open("a", encoding="utf-8")

    def record(row: dict[str, Any]) -> None:
        rows.append(row)
        jsonl.write(json.dumps(row) + "\n")
        jsonl.flush()
        print(json.dumps(row)[:400], flush=True)

    record({"stage": "environment", **environment()})
    jobs = [(v, a.device) for v in a.variants.split(",")]
    if a.device == "cuda":
        jobs.append(("default", "cpu"))  # the control: the same build on the CPU
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.parallel) as pool:
        futures = {pool.submit(spawn, ["--child-build", v, "--device", d, "--dir", str(work / f"{v}-{d}")],
                               BUILD_TIMEOUT_S, log, {"stage": "build", "variant": v, "device": d},
                               VARIANT_ENV.get(v)): (v, d)
                   for v, d in jobs}
        built = []
        for fut in concurrent.futures.as_completed(futures):
            row = fut.result()
            record(row)
            if row["outcome"] == "ok":
                built.append(futures[fut])
    print(f"builds: {time.perf_counter() - t0:.1f} s", flush=True)
    for v, d in sorted(built, key=lambda j: (j[1] != a.device, list(BUILD_VARIANTS).index(j[0]))):
        loaders = ("aot_load",) if v == "legacy-aot-compile" else tuple(a.loaders.split(","))
        if v != "default" or d != a.device:
            loaders = loaders[:1]  # every loader on the default package; the first on the others
        for loader in loaders:
            record(spawn(["--child-load", v, "--loader", loader, "--device", d, "--dir", str(work / f"{v}-{d}")],
                         LOAD_TIMEOUT_S, log, {"stage": "load+run", "variant": v, "loader": loader, "device": d}))
    if not a.no_cpp_wrapper:
        record(spawn(["--child-cpp-wrapper", "--device", a.device], BUILD_TIMEOUT_S, log,
                     {"stage": "jit cpp_wrapper", "variant": "-", "device": a.device}))
    default_ok = any(r["stage"] == "load+run" and r["variant"] == "default" and r.get("device") == a.device
                     and r["outcome"] == "ok" for r in rows)
    if a.gdb and ("default", a.device) in built and not default_ok:
        record(gdb_backtrace(work / f"default-{a.device}", a.device, GDB_TIMEOUT_S, out, a.loaders.split(",")[0]))
    print(write_table([r for r in rows if r["stage"] != "environment"], out / "aoti_probe.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
