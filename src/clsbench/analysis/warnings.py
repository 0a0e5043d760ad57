"""The one list of warning rules: what in a result deserves the reader's attention, in words, with what to do.

Both the text table (:mod:`clsbench.report.table`) and the HTML report (:mod:`clsbench.report.html`) render these
findings, grouped by kind in the order of :data:`KINDS`, each group's advice said once (a group whose items carry
different advice, such as UNSTABLE cells with time-varying and per-process causes, says each distinct advice once).
Pure: it reads stored measurements and environments only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from clsbench.analysis.summary import drift_is_time_varying, unstable_advice
from clsbench.core.vocab import Status
from clsbench.results.schema import Measurement, backend_suffix, data_label

#: The kinds of finding, in the order they are shown, with the advice every finding of the kind shares.
ADVICE: dict[str, str] = {
    "FAILED": "the reason and the error are recorded per measurement; an oom asks for a smaller batch size",
    "SKIPPED": "the mode, pipeline or strategy does not apply to this workload or device; nothing was measured",
    "PARITY": "the backend's outputs differ from fp32 eager beyond its precision's tolerance: its figures are kept "
              "but not valid, and `clsbench tune` never picks it; try another mode (fp32, or +cl off) or backend",
    "UNSTABLE": "a figure moved by more than 10% between fresh processes (each measurement's advice says why)",
    "THROTTLED": "the figure is what a throttled card delivers: check cooling and the power limit (`clsbench env`)",
    "NOTE": "a repeat stopped at its maximum before the stop rule held: raise --max-time",
    "PRE-FLIGHT": "the machine was not in a clean state before measuring: see the pre-flight checks of the run",
}
KINDS = tuple(ADVICE)

#: The figure each workload's spread is measured on, in words (``spread_metric`` holds a key of the summary).
METRIC_WORDS = {"throughput_img_s": "img/s", "latency_ms.p50": "p50 latency"}


@dataclass(frozen=True)
class Finding:
    """One thing worth the reader's attention.

    Attributes:
        kind: one of :data:`KINDS`.
        label: what it is about (a measurement's cell, or a pre-flight check's name).
        text: what happened, in words, without advice.
        advice: what to do about it (the kind's advice, or the measurement's own where it recorded one).
        run: which run it comes from, when several are shown together.
    """

    kind: str
    label: str
    text: str
    advice: str
    run: str = ""


@dataclass(frozen=True)
class Group:
    """The findings of one kind, and each distinct advice among them (in first-seen order)."""

    kind: str
    findings: tuple[Finding, ...]
    advice: tuple[str, ...]


def cell_label(m: Measurement) -> str:
    """``model workload [data] mode bsN @backend``: how a measurement is named in warnings (``@backend`` only when
    it is not eager)."""
    workload = m.workload if m.data is None else f"{m.workload} [{data_label(m.data)}]"
    return f"{m.model} {workload} {m.mode} bs{m.batch_size}{backend_suffix(m.backend)}"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _unstable_text(m: Measurement) -> str:
    s, v = m.summary, m.validity
    spread = _num(s.get("spread_pct"))
    metric = METRIC_WORDS.get(str(s.get("spread_metric")), "the figure")
    text = f"spread {'-' if spread is None else f'{spread:.1f}%'} of {metric} over {s.get('repeats')} repeats"
    drift = _num(s.get("within_repeat_drift_pct_max"))
    if drift is not None and spread is not None:
        cause = "time-varying cause" if drift_is_time_varying(drift, spread) else "steady repeats: per-process cause"
        text += f"; up to {drift:.1f}% within a repeat ({cause})"
    if v.get("host_cpu_contention"):
        text += f"; host CPU contention seen: {v['host_cpu_contention']}"
    return text


def measurement_finding(m: Measurement, *, label: Callable[[Measurement], str] = cell_label,
                        run: str = "") -> Finding | None:
    """The finding about one measurement (the first rule that applies), or None when there is nothing to say."""
    v = m.validity
    if m.status == Status.FAILED:
        return Finding("FAILED", label(m), f"{m.reason}: {m.detail or ''}", ADVICE["FAILED"], run)
    if m.status == Status.SKIPPED:
        return Finding("SKIPPED", label(m), f"{m.reason}: {m.detail or ''}", ADVICE["SKIPPED"], run)
    if m.summary.get("unstable"):
        # A file from before per-cell advice: the generic advice for its device.
        advice = v.get("advice") or unstable_advice(None, None, m.device)
        return Finding("UNSTABLE", label(m), _unstable_text(m), str(advice), run)
    if v.get("throttled"):
        return Finding("THROTTLED", label(m), str(v.get("throttle_summary") or "throttling seen"),
                       ADVICE["THROTTLED"], run)
    if not v.get("stop_rule_met", True):
        return Finding("NOTE", label(m), f"stop rule not met ({v.get('stop_rule', '')})", ADVICE["NOTE"], run)
    return None


def parity_finding(m: Measurement, *, label: Callable[[Measurement], str] = cell_label,
                   run: str = "") -> Finding | None:
    """The finding about an ok measurement whose backend failed its parity check against fp32 eager, or None."""
    parity = (m.summary.get("backend") or {}).get("parity") if isinstance(m.summary.get("backend"), dict) else None
    if m.status != Status.OK or not isinstance(parity, dict) or parity.get("passed") is not False:
        return None
    return Finding("PARITY", label(m), str(parity.get("detail") or "outputs outside the tolerance"),
                   ADVICE["PARITY"], run)


def preflight_findings(environment: dict[str, Any], *, run: str = "") -> list[Finding]:
    """The pre-flight checks recorded with a run that warned (statuses: ok, warn, info, unavailable)."""
    checks = environment.get("preflight")
    return [Finding("PRE-FLIGHT", str(c.get("check")), f"{c.get('status')}: {c.get('message')}",
                    ADVICE["PRE-FLIGHT"], run)
            for c in (checks if isinstance(checks, list) else ()) if isinstance(c, dict) and c.get("status") == "warn"]


def findings(measurements: Iterable[Measurement], *, label: Callable[[Measurement], str] = cell_label,
             run: str = "") -> list[Finding]:
    """Every finding about ``measurements``, in their order: a failed parity check, then the first other rule
    that applies."""
    found = (f for m in measurements
             for f in (parity_finding(m, label=label, run=run), measurement_finding(m, label=label, run=run)))
    return [f for f in found if f is not None]


def grouped(items: Sequence[Finding]) -> list[Group]:
    """Findings grouped by kind in the order of :data:`KINDS`; each group's distinct advice once."""
    out = []
    for kind in KINDS:
        mine = tuple(f for f in items if f.kind == kind)
        if mine:
            out.append(Group(kind, mine, tuple(dict.fromkeys(f.advice for f in mine))))
    return out
