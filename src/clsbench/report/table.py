"""The plain-text results table, with warnings in words below it. Deterministic, so it can be golden-tested.

Columns: img/s is the median over repeats; spread is (max - min) / median over repeats of the stability metric
(p50 latency for infer-latency, img/s otherwise); p50/p99 are per request (infer-latency, wall clock) or per
iteration (infer-throughput, train); peak mem is torch's peak allocation on a GPU, the worker's peak RSS on a CPU;
n is repeats x samples per repeat. A backend column follows the mode when any measurement ran on an inference
backend other than eager, and a section below says how each backend's artifact was built and how its outputs
compare with fp32 eager (PARITY_FAILED in the status: outside the tolerance).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from clsbench.analysis.data import busiest_stage
from clsbench.analysis.stats import MIN_SAMPLES
from clsbench.analysis.warnings import findings, grouped
from clsbench.core.text_table import fmt_ms, fmt_rate, text_table
from clsbench.core.vocab import Status
from clsbench.results.schema import DEFAULT_BACKEND, BenchmarkResult, Measurement

MIB = 1024 * 1024
COLUMNS = ("model", "workload", "mode", "batch", "img/s", "spread", "p50 ms", "p99 ms", "peak mem", "n", "status")
RIGHT_ALIGNED = {"batch", "img/s", "spread", "p50 ms", "p99 ms", "peak mem", "n"}


def _fmt_mem(m: Measurement) -> str:
    s = m.summary
    if s.get("peak_memory_allocated_bytes") is not None:
        return f"{s['peak_memory_allocated_bytes'] / MIB:,.0f} MiB"
    if s.get("host_peak_rss_bytes") is not None:
        return f"{s['host_peak_rss_bytes'] / MIB:,.0f} MiB rss"
    return "-"


def parity_failed(m: Measurement) -> bool:
    """Whether an ok measurement's backend computed outputs outside the tolerance against fp32 eager."""
    parity = (m.summary.get("backend") or {}).get("parity") or {}
    return m.status == Status.OK and parity.get("passed") is False


def _status(m: Measurement) -> str:
    if m.status != Status.OK:
        return f"{m.status.upper()}: {m.reason}"
    flags = ["PARITY_FAILED"] if parity_failed(m) else []
    if m.summary.get("unstable"):
        flags.append("UNSTABLE")
    if flags:
        return ", ".join(flags)
    if not m.validity.get("stop_rule_met", True):
        return "ok (stop rule not met)"
    return "ok"


def backend_label(name: str) -> str:
    """The backend as the table prints it (``torchscript (legacy)``: :func:`clsbench.backends.base.backend_label`)."""
    from clsbench.backends.base import backend_label as label

    return label(name)


def has_backends(measurements: Sequence[Measurement]) -> bool:
    """Whether any measurement ran on an inference backend other than eager (then tables get a backend column)."""
    return any(m.backend != DEFAULT_BACKEND for m in measurements)


def columns(measurements: Sequence[Measurement], base: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """``base`` (:data:`COLUMNS`), with ``backend`` after ``mode`` when any measurement is not eager."""
    base = COLUMNS if base is None else base
    if not has_backends(measurements):
        return base
    at = base.index("mode") + 1
    return (*base[:at], "backend", *base[at:])


def workload_text(m: Measurement) -> str:
    """The workload, with the data settings of a real-data measurement: ``train [folder cpu w8 pin]``."""
    if m.data is None:
        return m.workload
    from clsbench.results.schema import data_label

    return f"{m.workload} [{data_label(m.data)}]"


def row(m: Measurement, backend: bool = False) -> tuple[str, ...]:
    """The table row of one measurement; ``backend`` adds its backend after the mode (:func:`columns`)."""
    s = m.summary
    latency = s.get("latency_ms") or {}
    spread = s.get("spread_pct")
    repeats = s.get("repeats") or 0
    n = f"{repeats}x{latency['n'] // repeats}" if repeats and latency.get("n") else "-"
    return (
        m.model,
        workload_text(m),
        m.mode,
        *((backend_label(m.backend),) if backend else ()),
        str(m.batch_size),
        fmt_rate(s.get("throughput_img_s")),
        "-" if spread is None else f"{spread:.1f}%",
        fmt_ms(latency.get("p50")),
        fmt_ms(latency.get("p99")),
        _fmt_mem(m),
        n,
        _status(m),
    )


def render_rows(header: Sequence[str], rows: Sequence[Sequence[str]],
                right: Collection[str] | None = None) -> list[str]:
    """The results tables' layout (:func:`clsbench.core.text_table.text_table`); ``right`` names the right-aligned
    columns (default: the numeric columns of the results tables)."""
    right = RIGHT_ALIGNED if right is None else right
    return text_table(header, rows, right={i for i, name in enumerate(header) if name in right})


EFFICIENCY_COLUMNS = ("model", "workload", "mode", "batch", "avg W", "J/img", "img/s/W", "TFLOP/s", "MFU %",
                      "bound by", "throttling")
RIGHT_ALIGNED |= {"avg W", "J/img", "img/s/W", "TFLOP/s", "MFU %"}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def efficiency_row(m: Measurement, backend: bool = False) -> tuple[str, ...]:
    """The efficiency row of one measurement; ``backend`` adds its backend after the mode."""
    tele = m.summary.get("telemetry") or {}
    eff = m.summary.get("efficiency") or {}
    mfu = eff.get("mfu_datasheet_pct")
    mfu_text = _fmt(mfu, ".1f")
    if eff.get("mfu_measured_pct") is not None:
        mfu_text += f" ({eff['mfu_measured_pct']:.0f})"
    throttling = tele.get("throttle_summary") or ("none" if tele.get("samples_n") else "-")
    return (
        m.model,
        workload_text(m),
        m.mode,
        *((backend_label(m.backend),) if backend else ()),
        str(m.batch_size),
        _fmt(tele.get("power_avg_w"), ".0f"),
        _fmt(tele.get("joules_per_image"), ".4f"),
        _fmt(tele.get("images_per_s_per_w"), ".1f"),
        _fmt(eff.get("achieved_tflop_s"), ".3g"),
        mfu_text,
        eff.get("bound_by") or "-",
        throttling,
    )


def without_empty_columns(header: Sequence[str], rows: Sequence[Sequence[str]], *,
                          keep: Collection[str] = ()) -> tuple[list[str], list[tuple[str, ...]]]:
    """The table without the columns that are "-" in every row (what this device cannot say), except ``keep``."""
    shown = [i for i, name in enumerate(header) if name in keep or any(row[i] != "-" for row in rows)]
    return [header[i] for i in shown], [tuple(row[i] for i in shown) for row in rows]


def has_efficiency(measurements: Sequence[Measurement]) -> bool:
    return any((m.summary.get("telemetry") or {}).get("samples_n") or (m.summary.get("efficiency") or {}).get(
        "achieved_tflop_s") for m in measurements)


def warnings(measurements: Sequence[Measurement]) -> list[str]:
    """Every failure, skip, instability, throttling and unmet stop rule in words (:mod:`clsbench.analysis.warnings`),
    grouped by kind, each group followed by what to do about it, said once."""
    lines = []
    for group in grouped(findings(measurements)):
        for finding in group.findings:
            lines.append(f"{group.kind:<9} {finding.label}: {finding.text}")
        lines += [f"{'':<9} what to do: {advice}" for advice in group.advice]
    return lines


def header_line(result: BenchmarkResult) -> str:
    env = result.environment
    gpu = env.get("gpu") or {}
    cpu = env.get("cpu") or {}
    software = env.get("software") or {}
    devices = sorted({m.device for m in result.measurements}) or ["-"]
    hardware = gpu.get("name") if any(d.startswith("cuda") for d in devices) and gpu.get("name") else \
        cpu.get("model") or "unknown CPU"
    parts = [
        f"clsbench {result.tool.get('version', '?')}",
        f"{hardware}",
        f"device {', '.join(devices)}",
        f"torch {software.get('torch', '?')}",
        result.created_utc or "-",
    ]
    return " | ".join(parts)


def render(result: BenchmarkResult) -> str:
    """The whole table for ``show`` and the end of ``run``."""
    measurements = list(result.measurements)
    lines = [header_line(result), ""]
    unfinished = pending_note(result)
    if not measurements:
        lines.append("(no measurements)")
        lines += ["", unfinished] if unfinished else []
        return "\n".join(lines) + "\n"
    with_backend = has_backends(measurements)
    lines.extend(render_rows(columns(measurements), [row(m, with_backend) for m in measurements]))
    ok = sum(m.status == Status.OK for m in measurements)
    unstable = sum(bool(m.summary.get("unstable")) for m in measurements)
    counts = f"{len(measurements)} measurements: {ok} ok, {unstable} unstable, " \
             f"{sum(m.status == 'failed' for m in measurements)} failed, " \
             f"{sum(m.status == 'skipped' for m in measurements)} skipped"
    lines += ["", counts]
    if unfinished:
        lines.append(unfinished)
    measured = [m for m in measurements if m.status == Status.OK]
    if has_efficiency(measured):
        header, rows = without_empty_columns(columns(measurements, EFFICIENCY_COLUMNS),
                                             [efficiency_row(m, with_backend) for m in measured],
                                             keep=columns(measurements, EFFICIENCY_COLUMNS[:4]))
        if "avg W" in header or "MFU %" in header:
            title = "power and efficiency (MFU against the datasheet peak; in brackets against the measured " \
                    "`clsbench probe` peak)"
        else:  # a CPU: no power readings and no peak to compare with
            title = "achieved compute (from the FLOPs counted on the model; this device reports no power or peak)"
        lines += ["", title, ""]
        lines.extend(render_rows(header, rows))
    if any(m.data is not None for m in measured):
        lines += data_section(measured)
    if with_backend:
        lines += backend_section(measurements)
    withheld = withheld_note(measured)
    if withheld:
        lines += ["", withheld]
    notes = warnings(measurements)
    if notes:
        lines += [""] + notes
    return "\n".join(lines) + "\n"


def pending_note(result: BenchmarkResult) -> str | None:
    """What an interrupted run left unfinished: measurements with some of their repeats saved."""
    if not result.pending:
        return None
    saved = sum(len(p.repeats) for p in result.pending)
    return (f"{len(result.pending)} more measurement(s) unfinished, {saved} repeat(s) saved: finish them with "
            f"`clsbench run --resume` on this file")


def withheld_note(measurements: Sequence[Measurement]) -> str | None:
    """Why a p99 reads "-" where latency was measured: too few timed iterations in a repeat to support one."""
    short = [m for m in measurements if "p99" in ((m.summary.get("latency_ms") or {}).get("withheld") or {})]
    if not short:
        return None
    return (f"p99 -: {len(short)} measurement(s) timed fewer than {MIN_SAMPLES['p99']} iterations in a repeat, too "
            f"few for a p99 (their slowest is in the result file as max); raise --iterations or --min-time for one")


# ------------------------------------------------------------------------------------ real-data pipelines

DATA_COLUMNS = ("model", "mode", "batch", "data", "img/s", "data wait", "epoch start", "copy", "idle", "idle by",
                "start-up s", "set-up s", "skipped", "undecodable")
DATA_RIGHT = {"batch", "img/s", "data wait", "epoch start", "copy", "idle", "start-up s", "set-up s", "skipped",
              "undecodable"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def data_rows(measurements: Sequence[Any]) -> list[tuple[str, ...]]:
    """One row per ok real-data measurement for the table's data-pipeline section."""
    rows = []
    for m in measurements:
        d = (m.summary or {}).get("data")
        if m.status != Status.OK or not d:
            continue
        idle_by = {"cuda_events": "GPU events", "host": "host"}.get(d.get("idle_method") or "", "-")
        rows.append((m.model, m.mode, str(m.batch_size), d.get("label") or "-",
                     fmt_rate(m.summary.get("throughput_img_s")), _pct(d.get("data_wait_fraction")),
                     _pct(d.get("epoch_start_wait_fraction")), _pct(d.get("copy_fraction")),
                     _pct(d.get("idle_fraction")), idle_by,
                     _seconds(d.get("data_startup_s")), _seconds(d.get("data_setup_s")),
                     str(d.get("skipped_n") if d.get("skipped_n") is not None else "-"),
                     str(d.get("decode_failures_n") or 0)))
    return rows


def data_section(measurements: Sequence[Any]) -> list[str]:
    """The lines of the table's data-pipeline section (empty when no measurement used real data)."""
    rows = data_rows(measurements)
    if not rows:
        return []
    lines = ["", "data pipelines (data wait: share of the timed wall time spent waiting for a prepared batch, of "
             "which epoch start: the first batch of an epoch begun while timing; copy: placing it on the device; "
             "idle: GPU idle between steps from CUDA events, on a CPU wait + copy; start-up: workers' start to the "
             "first batch, outside the timed region)", ""]
    lines += render_rows(DATA_COLUMNS, rows, DATA_RIGHT)
    for m in measurements:
        d = (m.summary or {}).get("data") or {}
        busiest = busiest_stage(d.get("running"))
        if busiest is not None:
            cpu = busiest.get("cpu_ms")
            lines.append(f"stage threads: {m.model} {m.mode} bs{m.batch_size} [{d.get('label')}]: busiest while "
                         f"training: {busiest['stage']}, {busiest['work_ms']:.1f} ms per batch"
                         + (f" ({cpu:.1f} ms of it on its CPU)" if cpu is not None else "")
                         + (f"; the host decoded {d['host_decode_share']:.0%} of each batch"
                            if d.get("host_decode_share") is not None else "")
                         + " (`clsbench diagnose` shows every stage)")
        if d.get("decode_failures_n"):
            names = ", ".join(d.get("decode_failures") or [])
            lines.append(f"warning: {m.model} {m.mode} bs{m.batch_size} [{d.get('label')}]: "
                         f"{d['decode_failures_n']} image(s) failed to decode and were replaced: {names}")
    return lines


# ------------------------------------------------------------------------------------ inference backends

BACKEND_COLUMNS = ("model", "workload", "mode", "backend", "batch", "build s", "load s", "artifact MB", "cache",
                   "parity err", "top-1 %", "parity")
BACKEND_RIGHT = {"batch", "build s", "load s", "artifact MB", "parity err", "top-1 %"}


def _cache_text(b: dict[str, Any]) -> str:
    """Whether the first repeat found the artifact cached (``hit``), or built it (``built``, and why again)."""
    if b.get("cache_hit") is None:
        return "-"
    if b["cache_hit"]:
        return "hit"
    if b.get("no_cache"):
        return "built (--no-cache)"
    return "rebuilt" if b.get("rebuilt_reason") else "built"


def backend_row(m: Measurement) -> tuple[str, ...]:
    """One row of the backend section: the build, the artifact and the outputs' parity with fp32 eager."""
    b = m.summary.get("backend") or {}
    parity = b.get("parity") or {}
    size = b.get("artifact_bytes")
    if not parity:
        verdict = "-"
    elif parity.get("passed"):
        verdict = f"ok (<= {parity.get('tolerance'):g})" if parity.get("tolerance") is not None else "ok"
    else:
        verdict = "PARITY_FAILED"
    error = parity.get("max_abs_err_rel")
    top1 = parity.get("top1_agreement_pct")
    return (
        m.model,
        workload_text(m),
        m.mode,
        m.backend,
        str(m.batch_size),
        _fmt(b.get("build_s"), ".1f"),
        _fmt(b.get("load_s"), ".2f"),
        "-" if not size else f"{size / 1e6:,.1f}" if size >= 1e5 else f"{size / 1e6:.2g}",
        _cache_text(b),
        "-" if error is None else f"{float(error):.1e}" if isinstance(error, (int, float)) else str(error),
        _fmt(top1, ".1f"),
        verdict,
    )


def backend_section(measurements: Sequence[Measurement]) -> list[str]:
    """The lines of the table's inference-backend section (empty when every measurement is eager)."""
    shown = [m for m in measurements if m.backend != DEFAULT_BACKEND and m.status == Status.OK]
    if not shown:
        return []
    lines = ["", "inference backends (build s: export + compile of the artifact, from the cache's record on a hit; "
             "load s: median over repeats; parity err: max |out - ref| / max |ref| against fp32 eager on a fixed "
             "batch, top-1 %: arg-max agreement)", ""]
    lines += render_rows(BACKEND_COLUMNS, [backend_row(m) for m in shown], BACKEND_RIGHT)
    return lines
