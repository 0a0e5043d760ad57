"""``clsbench probe``: the measured ceilings of this GPU, so MFU can be stated against them as well as the datasheet.

Two numbers per dtype, timed with CUDA events after warm-up (median of the timed repeats):

* dense matmul rate: an N x N by N x N product (N = 8192 by default: 1.1 TFLOP per product, far past launch
  overhead and 3 x 128 MiB of bf16 operands, several times any L2), random normal operands (zeros run faster on
  some GPUs, so they would overstate the ceiling); 2 N^3 FLOPs per product;
* device-to-device copy bandwidth: a 2 GiB tensor copied into another, counting bytes read plus bytes written.

Run in its own process by the CLI so the parent never holds a CUDA context.
"""

from __future__ import annotations

from typing import Any

MATMUL_N = 8192
COPY_BYTES = 2 * 1024**3
WARMUP = 3
REPEATS = 10
PROBE_DTYPES = ("fp32", "tf32", "bf16", "fp16")


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _time_ms(fn: Any, repeats: int = REPEATS, warmup: int = WARMUP) -> list[float]:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def run_probe(device: str = "cuda", *, n: int = MATMUL_N, copy_bytes: int = COPY_BYTES) -> dict[str, Any]:
    """Measure matmul FLOP/s per dtype and copy bandwidth on ``device``; never changes any GPU setting."""
    import torch

    from clsbench.measure.device import set_tf32

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return {"unavailable": f"the probe needs a CUDA GPU; device is {device}"}
    torch.cuda.set_device(dev.index or 0)
    generator = torch.Generator(device=dev).manual_seed(0)
    out: dict[str, Any] = {"matmul_n": n, "copy_bytes": copy_bytes, "repeats": REPEATS, "matmul_flop_s": {},
                           "matmul_ms": {}}
    dtypes = {"fp32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    for key in PROBE_DTYPES:
        set_tf32(key == "tf32")
        try:
            a = torch.randn(n, n, device=dev, dtype=dtypes[key], generator=generator)
            b = torch.randn(n, n, device=dev, dtype=dtypes[key], generator=generator)
            times = _time_ms(lambda a=a, b=b: torch.mm(a, b))
            out["matmul_ms"][key] = times
            out["matmul_flop_s"][key] = 2.0 * n**3 / (_median(times) / 1000.0)
            del a, b
        except Exception as exc:  # noqa: BLE001 - one dtype failing (e.g. no bf16) leaves the others
            out["matmul_flop_s"][key] = None
            out.setdefault("errors", {})[key] = f"{type(exc).__name__}: {exc}"[:200]
    set_tf32(False)
    src = torch.empty(copy_bytes // 4, device=dev, dtype=torch.float32).normal_(generator=generator)
    dst = torch.empty_like(src)
    times = _time_ms(lambda: dst.copy_(src))
    out["copy_ms"] = times
    out["copy_bytes_s"] = 2.0 * copy_bytes / (_median(times) / 1000.0)  # read + write
    out["gpu_name"] = torch.cuda.get_device_name(dev)
    out["torch"] = torch.__version__
    return out


def probe_in_subprocess(device: str = "cuda", timeout_s: float = 300.0) -> dict[str, Any]:
    """Run :func:`run_probe` in a fresh process (the caller keeps no CUDA context); never raises."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_probe_child, args=(child, device), daemon=True)
    process.start()
    child.close()
    try:
        if parent.poll(timeout_s):
            return parent.recv()
        return {"unavailable": f"the probe did not finish within {timeout_s:g} s"}
    except EOFError:
        return {"unavailable": f"the probe process died (exit code {process.exitcode})"}
    finally:
        if process.is_alive():
            process.kill()
        process.join(5)


def _probe_child(conn: Any, device: str) -> None:
    try:
        conn.send(run_probe(device))
    except Exception as exc:  # noqa: BLE001 - reported to the parent as unavailable
        conn.send({"unavailable": f"{type(exc).__name__}: {exc}"[:300]})
    finally:
        conn.close()
