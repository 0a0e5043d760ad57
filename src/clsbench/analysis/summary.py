"""From repeat records to a measurement: status, summary and validity. Pure; reads only the records.

Definitions (docs/methodology/measurement-protocol.md, section 4, has the long form):

* throughput of a repeat = images in the timed region / wall seconds of the timed region; the measurement's
  ``throughput_img_s`` is the median over its repeats;
* ``latency_ms``: per request wall time (infer-latency) or per iteration time (infer-throughput, train); each
  statistic is the median over repeats of that statistic within each repeat; ``n`` is the total sample count;
* ``spread_pct`` = (max - min) / median over repeats of the *stability metric*: p50 request latency for
  infer-latency, throughput otherwise; above :data:`clsbench.analysis.stats.UNSTABLE_SPREAD_PCT` the figure is UNSTABLE.
* ``within_repeat_drift_pct`` = median over repeats of :func:`clsbench.analysis.stats.segment_drift_pct` of the series
  behind the stability metric (request wall times for infer-latency, iteration times otherwise): how far the
  speed moved *inside* one process; ``within_repeat_drift_pct_max`` is the largest per-repeat value, which picks
  the UNSTABLE advice (:func:`unstable_advice`).
"""

from __future__ import annotations

from typing import Any

from clsbench.analysis import stats
from clsbench.core.plan import Cell, StopRule
from clsbench.core.vocab import Status
from clsbench.results.schema import DEFAULT_BACKEND, Measurement

UNSTABLE_ADVICE = (
    "results moved by more than {limit:.0f}% between fresh processes: stop other work on {where}{check}, and raise "
    "--min-time or --repeats"
)
#: What the advice names on a GPU and on a CPU: where other work competes, and what to check.
ADVICE_WORDS = {
    "gpu": {"where": "the GPU and its host", "check": ", check clocks and temperature (`clsbench env`)"},
    "cpu": {"where": "this machine", "check": ""},
}

#: An UNSTABLE spread is put down to a time-varying cause when the largest drift within any one repeat
#: (``within_repeat_drift_pct_max``) reaches the UNSTABLE limit itself or this share of the spread between repeats:
#: ``drift_max >= min(UNSTABLE_SPREAD_PCT, DRIFT_SHARE_OF_SPREAD * spread)``; otherwise to a per-process cause.
#: The largest, not the median, because one repeat that slowed down while it ran is enough to make the spread (on
#: the H200: repeats drifting 1.6%, 28.6% and 6.5%, the second also the slow one), whereas a per-process cause such
#: as cuDNN autotuning is settled before the timed region and leaves every repeat steady.
DRIFT_SHARE_OF_SPREAD = 0.5

TIME_VARYING_ADVICE = (
    "the speed changed while a process ran, so the cause varies over time (host CPU shared or throttled, other "
    "work on {where}{clocks}) and fresh processes cannot remove it. Run on a quiet, dedicated host{check}"
    "{launch}, or raise --min-time so each repeat averages over the changes"
)
#: The GPU-only parts of :data:`TIME_VARYING_ADVICE` (a CPU has neither clocks NVML reads nor kernel launches).
TIME_VARYING_GPU = {"clocks": ", clocks moving with temperature or power",
                    "check": " and check clocks (`clsbench env`)",
                    "launch": "; for a launch-bound cell take the host out of the loop with a `+cudagraph` (inference) "
                              "or `+compile` mode"}

PER_PROCESS_ADVICE = (
    "each repeat was steady but they differed, so the cause is fixed per process ({causes}). Raise --repeats so the "
    "median rests on more processes{cudnn}"
)


def _throughput(record: dict[str, Any]) -> float | None:
    samples = record["samples"]
    wall_s = samples.get("wall_s") or 0.0
    return samples["images"] / wall_s if wall_s > 0 else None


def _latency_samples(workload: str, record: dict[str, Any]) -> list[float]:
    samples = record["samples"]
    return samples["wall_ms"] if workload == "infer-latency" else samples["iteration_ms"]


def _median_of(records: list[dict[str, Any]], section: str, key: str) -> float | None:
    values = [r.get(section, {}).get(key) for r in records]
    values = [v for v in values if v is not None]
    return stats.median(values) if values else None


def _max_of(records: list[dict[str, Any]], section: str, key: str) -> int | None:
    values = [r.get(section, {}).get(key) for r in records]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def drift_is_time_varying(drift_max: float, spread: float) -> bool:
    """Whether the largest drift within a repeat explains an UNSTABLE spread (see :data:`DRIFT_SHARE_OF_SPREAD`)."""
    return drift_max >= min(stats.UNSTABLE_SPREAD_PCT, DRIFT_SHARE_OF_SPREAD * spread)


def unstable_advice(spread: float | None, drift_max: float | None, device: str = "cuda") -> str:
    """What to do about an UNSTABLE figure: a time-varying cause, a per-process cause, or the generic text when the
    drift within repeats is unknown (every repeat too short to cut into segments, or an old file). The text holds no
    figure of its own cell (the warning says those), so cells with the same cause share one advice; and it offers
    only what applies to ``device``."""
    limit = stats.UNSTABLE_SPREAD_PCT
    gpu = device.startswith("cuda")
    words = ADVICE_WORDS["gpu" if gpu else "cpu"]
    if drift_max is None or spread is None:
        return UNSTABLE_ADVICE.format(limit=limit, **words)
    if drift_is_time_varying(drift_max, spread):
        extra = TIME_VARYING_GPU if gpu else {"clocks": "", "check": "", "launch": ""}
        return TIME_VARYING_ADVICE.format(where=words["where"], **extra)
    causes = "e.g. cuDNN autotuning picking different algorithms, memory or CPU placement" if gpu else \
        "e.g. memory or CPU placement, thread start-up"
    cudnn = ", and rerun with --no-cudnn-benchmark to test whether autotuning is the cause" if gpu else ""
    return PER_PROCESS_ADVICE.format(causes=causes, cudnn=cudnn)


def stop_rule_text(rule: StopRule | dict[str, Any]) -> str:
    r = rule if isinstance(rule, dict) else rule.to_dict()
    text = f"warm-up >= {r['warmup']} it"
    if r.get("warmup_seconds"):
        text += f" and >= {r['warmup_seconds']:g} s"
    text += f"; timed >= {r['min_iterations']} it and >= {r['min_seconds']:g} s"
    if r.get("max_iterations") is not None:
        text += f"; max {r['max_iterations']} it"
    if r.get("max_seconds") is not None:
        text += f"; max {r['max_seconds']:g} s"
    return text


def summarize(records: list[dict[str, Any]], workload: str,
              device: str = "cuda") -> tuple[dict[str, Any], dict[str, Any]]:
    """Summary and validity of the ``ok`` records of one measurement (empty summary when none is ok)."""
    ok = [r for r in records if r["status"] == Status.OK]
    if not ok:
        return {}, {"valid": False, "repeats_ok": 0, "repeats_run": len(records)}
    throughputs = [t for t in (_throughput(r) for r in ok) if t is not None]
    latency = stats.combine_repeats([stats.describe(_latency_samples(workload, r)) for r in ok])
    summary: dict[str, Any] = {
        "throughput_img_s": stats.median(throughputs) if throughputs else None,
        "throughput_img_s_by_repeat": throughputs,
        "latency_ms": latency,
        "latency_kind": "request_wall" if workload == "infer-latency" else "iteration",
    }
    gpu = [r["samples"].get("gpu_ms") for r in ok]
    if workload == "infer-latency" and all(gpu):
        summary["gpu_latency_ms"] = stats.combine_repeats([stats.describe(g) for g in gpu])
    for key in ("peak_memory_allocated_bytes", "peak_memory_reserved_bytes", "device_memory_used_bytes",
                "host_peak_rss_bytes"):
        summary[key] = _max_of(ok, "memory", key)
    # Compile caches are shared by the repeats of a cell (engine/compile_cache.py), so only the first repeat
    # compiles from nothing: ``compile_s`` is that cold compile, what a user pays once; ``compile_s_warm`` the
    # median of the repeats that found the cache warm (issue 35). Without ``+compile`` both are None.
    compiles = [(r.get("timings") or {}).get("compile_s") for r in ok]
    for key in ("first_iteration_s", "compile_s", "setup_s", "prepare_s"):
        summary[key] = _median_of(ok, "timings", key)
        if key == "compile_s" and compiles and compiles[0] is not None:
            summary[key] = compiles[0]
    if any(c is not None for c in compiles[1:]):
        summary["compile_s_warm"] = _median_of(ok[1:], "timings", "compile_s")
    if workload == "infer-latency":
        per_repeat = [stats.describe(r["samples"]["wall_ms"]).p50 for r in ok]
        summary["spread_metric"] = "latency_ms.p50"
    else:
        per_repeat = throughputs
        summary["spread_metric"] = "throughput_img_s"
    spread = stats.spread_pct(per_repeat)
    summary["spread_pct"] = spread
    summary["unstable"] = spread is not None and spread > stats.UNSTABLE_SPREAD_PCT
    drifts = [d for d in (stats.segment_drift_pct(_latency_samples(workload, r)) for r in ok) if d is not None]
    summary["within_repeat_drift_pct"] = stats.median(drifts) if drifts else None
    summary["within_repeat_drift_pct_max"] = max(drifts) if drifts else None
    summary["repeats"] = len(ok)

    stop_met = all(r.get("validity", {}).get("stop_rule_met", False) for r in ok)
    validity = {
        "valid": stop_met and len(ok) == len(records),
        "stop_rule_met": stop_met,
        "repeats_ok": len(ok),
        "repeats_run": len(records),
        "stable": not summary["unstable"],
    }
    if summary["unstable"]:
        validity["advice"] = unstable_advice(spread, summary["within_repeat_drift_pct_max"], device)
    return summary, validity


def _median_or_none(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return stats.median(present) if present else None


def combine_telemetry(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """Summarise each repeat's telemetry, then take the median over repeats of every figure.

    Throttling is reported from the repeat that throttled most: a throttled repeat is not averaged away.
    """
    from clsbench.analysis.telemetry import summarize_telemetry

    per_repeat = [
        summarize_telemetry(r.get("telemetry"), images=r["samples"].get("images"), wall_s=r["samples"].get("wall_s"))
        for r in ok
    ]
    if not per_repeat:
        return {}
    from clsbench.results.telemetry import THROTTLE_REASONS

    combined: dict[str, Any] = {}
    for key in per_repeat[0]:
        values = [p.get(key) for p in per_repeat]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if not numbers:
            combined[key] = next((v for v in values if v is not None), None)
        elif key == "samples_n":
            combined[key] = min(numbers)  # the thinnest repeat's count
        elif key.endswith(("_max_c", "_peak_w")):
            combined[key] = max(numbers)  # a peak over the measurement is the largest peak of any repeat
        else:
            combined[key] = stats.median(numbers)

    def throttling(p: dict[str, Any]) -> float:
        return sum(f for name, f in (p.get("throttle_reasons") or {}).items() if name in THROTTLE_REASONS)

    worst = max(per_repeat, key=throttling)
    combined["throttle_reasons"] = worst.get("throttle_reasons")
    combined["throttle_summary"] = worst.get("throttle_summary")
    flags = [p.get("throttled") for p in per_repeat]
    combined["throttled"] = True if any(flags) else (None if all(f is None for f in flags) else False)
    return combined


#: The precision unit an ``fp8`` measurement records, and why it has no peak to divide by.
FP8_UNIT = "fp8+bf16"
FP8_NO_PEAK = ("fp8 converts the Linear layers it can and leaves the rest in bf16: no single peak describes that "
               "mix, so MFU is withheld")


def efficiency(ok: list[dict[str, Any]], workload: str, mode: str, batch_size: int, throughput: float | None,
               environment: dict[str, Any]) -> dict[str, Any]:
    """FLOPs, achieved TFLOP/s, MFU against datasheet and measured peaks, intensity and the roofline verdict."""
    from clsbench.analysis import efficiency as eff
    from clsbench.analysis.peaks import lookup_gpu, mode_precision, precision_key

    costs = next((r.get("costs") for r in ok if r.get("costs") and not r["costs"].get("unavailable")), None)
    if not costs:
        reason = next((r["costs"]["unavailable"] for r in ok if r.get("costs")), "FLOPs were not counted")
        return {"unavailable": reason}
    train = workload == "train"
    flops = costs.get("train_step_flops" if train else "forward_flops")
    # fp8 runs the Linear layers it converts in fp8 and everything else in bf16 (modes/fp8.py): no single
    # datasheet or probe peak describes that mix, so MFU is withheld; bytes count as bf16's.
    mixed_fp8 = mode_precision(mode) == "fp8"
    unit = "bf16" if mixed_fp8 else precision_key(mode)
    out: dict[str, Any] = {
        "flops_per_image": flops,
        "flops_kind": "train step (forward + backward)" if train else "forward",
        "forward_flops_per_image": costs.get("forward_flops"),
        "train_step_flops_per_image": costs.get("train_step_flops"),
        "params": costs.get("params"),
        "precision_unit": FP8_UNIT if mixed_fp8 else unit,
    }
    achieved = flops * throughput if flops and throughput else None
    out["achieved_tflop_s"] = achieved / 1e12 if achieved else None
    gpu = environment.get("gpu") or {}
    peak = lookup_gpu(gpu.get("name") or "") if gpu.get("name") else None
    peak_flop_s = peak.flop_s(unit) if peak and not mixed_fp8 else None
    out["peak_tflop_s_datasheet"] = peak_flop_s / 1e12 if peak_flop_s else None
    out["peak_source"] = (FP8_NO_PEAK if mixed_fp8 else peak.source if peak
                          else f"no datasheet entry for {gpu.get('name') or 'this device'}")
    out["mfu_datasheet_pct"] = 100 * eff.mfu(achieved, peak_flop_s) if achieved and peak_flop_s else None
    probe = environment.get("probe") or {}
    measured = None if mixed_fp8 else (probe.get("matmul_flop_s") or {}).get(unit)
    out["peak_tflop_s_measured"] = measured / 1e12 if measured else None
    out["mfu_measured_pct"] = 100 * eff.mfu(achieved, measured) if achieved and measured else None

    # Minimal bytes per image: the weights once per batch plus every activation once; 16-bit modes move half.
    scale = 0.5 if unit in ("bf16", "fp16") else 1.0
    per_image = eff.min_bytes_per_image(param_bytes=costs.get("param_bytes", 0),
                                        activation_bytes=costs.get("activation_bytes", 0), batch_size=batch_size)
    bytes_per_image = scale * per_image * (TRAIN_BYTES_FACTOR if train else 1.0)
    out["bytes_per_image"] = bytes_per_image or None
    out["arithmetic_intensity"] = flops / bytes_per_image if flops and bytes_per_image else None

    busy = []
    for r in ok:
        per_iteration_ms = (r.get("busy") or {}).get("gpu_busy_ms_per_iteration")
        iterations = (r.get("validity") or {}).get("timed_iterations")
        wall_s = r["samples"].get("wall_s")
        if per_iteration_ms is not None and iterations and wall_s:
            busy.append(min(1.0, per_iteration_ms / (wall_s * 1000.0 / iterations)))
    out["gpu_busy_fraction"] = _median_or_none(busy)
    out["gpu_busy_method"] = "torch.profiler CUDA activity after the timed region" if busy else None
    bandwidth = (probe.get("copy_bytes_s") if probe.get("copy_bytes_s") else None) or (
        peak.memory_bandwidth_bytes_s if peak else None)
    verdict = eff.roofline_verdict(
        flops_per_image=flops, bytes_per_image=out["bytes_per_image"], images_per_s=throughput,
        peak_flop_s=measured or peak_flop_s, peak_bytes_s=bandwidth, gpu_busy_fraction=out["gpu_busy_fraction"],
    )
    out["roofline"] = verdict
    out["bound_by"] = verdict.get("bound_by")
    return out


def combine_host_cpu(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over repeats of each host CPU figure, plus the worst repeat's concerns (measure/hostcpu.py)."""
    from clsbench.analysis import hostcpu

    readings = [r.get("host_cpu") for r in ok if r.get("host_cpu")]
    if not readings:
        return {}
    out: dict[str, Any] = {}
    for key in ("steal_pct", "machine_busy_pct", "other_busy_cores", "process_cpu_pct",
                "involuntary_switches_per_s", "calibration_us_per_op"):
        out[key] = _median_or_none([r.get(key) for r in readings])
        present = [r.get(key) for r in readings if r.get(key) is not None]
        out[f"{key}_max"] = max(present) if present else None
    concerns: list[str] = []
    for index, reading in enumerate(readings, 1):
        for text in hostcpu.concerns(reading):
            concerns.append(f"repeat {index}: {text}")
    # Recorded, never a concern: on the H200 it jumped between about 1.1 and 2.0-2.6 us per op from one repeat to
    # the next without the latencies following it (measure/hostcpu.py).
    calibrations = [r.get("calibration_us_per_op") for r in readings]
    out["calibration_spread_pct"] = stats.spread_pct([c for c in calibrations if c])
    out["concerns"] = concerns
    return out


def combine_backend(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What an inference backend did over a measurement's repeats (empty for eager, whose records say nothing).

    Build facts come from the manifest of the artifact (the same in every repeat: ``build_s`` is the time of the
    build that made it, whichever repeat or earlier run that was); ``load_s`` and ``graph_capture_s`` are medians
    over the ok repeats; ``cache_hit`` is the first repeat's (False: this measurement built the artifact);
    ``parity`` is the first repeat's check against fp32 eager (:mod:`clsbench.backends.parity`).
    """
    facts = [r["backend"] for r in records if isinstance(r.get("backend"), dict)]
    if not facts:
        return {}
    first = facts[0]
    built = next((f for f in facts if f.get("built_now")), None)
    ok = [r["backend"] for r in records if r["status"] == Status.OK and isinstance(r.get("backend"), dict)]
    out: dict[str, Any] = {"name": first.get("name")}
    if len(first) > 1:  # more than the name: the backend was applied (or tried)
        out.update({
            "build_s": next((f.get("build_s") for f in facts if f.get("build_s") is not None), None),
            "built_now": built is not None,
            "build_process_s": (built or {}).get("build_process_s"),
            "load_s": _median_or_none([f.get("load_s") for f in ok]),
            "graph_capture_s": _median_or_none([f.get("graph_capture_s") for f in ok]),
            "artifact_bytes": next((f.get("artifact_bytes") for f in facts if f.get("artifact_bytes")), None),
            "cache_hit": first.get("cache_hit"),
            "cache_hits": sum(bool(f.get("cache_hit")) for f in facts),
            "rebuilt_reason": next((f.get("rebuilt_reason") for f in facts if f.get("rebuilt_reason")), None),
            "no_cache": first.get("no_cache"),
            "cache_dir": first.get("cache_dir"),
            "cache_key": first.get("cache_key"),
            "variant": next((f.get("variant") for f in facts if f.get("variant")), None),
            "build": next((f.get("build") for f in facts if f.get("build")), None),
            "attempts": (built or first).get("attempts"),
            "versions": first.get("versions"),
            "runtime": next((f.get("runtime") for f in ok if f.get("runtime")), first.get("runtime")),
        })
    parity = next((r["parity"] for r in records if isinstance(r.get("parity"), dict)), None)
    if parity is not None:
        out["parity"] = parity
    return out


#: Training moves roughly three times the forward's bytes: activations are written, then read back for the
#: backward pass, which writes gradients of the same size; weights are read twice and their gradients written.
TRAIN_BYTES_FACTOR = 3.0


def build_measurement(cell: Cell, records: list[dict[str, Any]], rule: StopRule | None = None,
                      environment: dict[str, Any] | None = None) -> Measurement:
    """Combine the repeat records of ``cell`` into a Measurement; the first non-ok record sets the status."""
    bad = next((r for r in records if r["status"] != Status.OK), None)
    summary, validity = summarize(records, cell.workload, cell.device)
    ok = [r for r in records if r["status"] == Status.OK]
    if ok:
        summary["flags"] = ok[0].get("flags")
        telemetry = combine_telemetry(ok)
        summary["telemetry"] = telemetry
        try:
            summary["efficiency"] = efficiency(ok, cell.workload, cell.mode, cell.batch_size,
                                               summary.get("throughput_img_s"), environment or {})
        except Exception as exc:  # noqa: BLE001 - a derived figure: never lose the measured ones to it
            summary["efficiency"] = {"unavailable": f"efficiency could not be computed: {exc}"}
        validity["throttled"] = bool(telemetry.get("throttled"))
        validity["throttle_summary"] = telemetry.get("throttle_summary")
        host = combine_host_cpu(ok)
        if host:
            summary["host_cpu"] = host
            if host.get("concerns"):
                validity["host_cpu_contention"] = "; ".join(host["concerns"])
        if cell.data is not None:
            from clsbench.analysis.data import summarize_data

            summary["data"] = summarize_data(ok)
        profile = next((r["profile"] for r in ok if isinstance(r.get("profile"), dict)), None)
        if profile is not None:  # run --profile: the first repeat's profile (analysis/profile.py)
            summary["profile"] = profile
    backend = combine_backend(records) if cell.backend != DEFAULT_BACKEND else {}
    if backend:
        summary["backend"] = backend
        parity = backend.get("parity")
        if parity is not None:
            # Figures of a network that computes something else are kept and shown, but not valid.
            validity["parity_passed"] = bool(parity.get("passed"))
            validity["valid"] = bool(validity.get("valid")) and validity["parity_passed"]
    if rule is not None:
        validity["stop_rule"] = stop_rule_text(rule)
    input_size = next((r.get("input_size") for r in records if r.get("input_size")), cell.input_size)
    status = "ok" if bad is None else bad["status"]
    detail = None
    if bad is not None:
        detail = bad.get("detail") or bad.get("reason")
        if bad["status"] == Status.FAILED:  # a skip is a property of the cell; a failure happened in one repeat
            detail = f"{detail} (repeat {records.index(bad) + 1}/{len(records)})"
    return Measurement(
        model=cell.model,
        workload=cell.workload,
        mode=cell.mode,
        batch_size=cell.batch_size,
        device=cell.device,
        input_size=input_size,
        status=status,
        reason=None if bad is None else bad.get("reason"),
        detail=detail,
        repeats=tuple(records),
        summary=summary,
        validity=validity,
        data=cell.data.to_dict() if cell.data is not None else None,
        backend=cell.backend,
    )
