"""What ``show``, ``compare``, ``report`` and ``history`` derive from a stored serve result. Pure: no torch, no LoadGen.

- :func:`is_serve_result`: whether a result file is a ``clsbench serve`` result.
- :func:`scenario_summary`: a (mode, scenario) measurement's summary (its answer, as the generic table reads it).
- :func:`analyze_serve`: everything ``show`` prints, as a dict: per mode and scenario the answer, per batching
  setting the best run and its time split, the winning setting and why, every LoadGen run (the rows of
  :mod:`clsbench.serving.serve_rows`).
- :func:`render_serve`: that analysis as text (its phrases in :mod:`clsbench.serving.serve_text`).
- :func:`compare_serve` / :func:`render_serve_compare`: two serve results side by side, with Welch's t-test where
  both have repeated runs at their answer (``--confirm``).
- :func:`serve_figures`: the report's two charts (:mod:`clsbench.serving.serve_charts`), as self-contained SVG, per
  mode with their captions; :func:`render_serve_html`: both with the text table, as one HTML fragment.
- :func:`csv_rows`: every LoadGen run as a flat row (``show --format csv``).
"""

from __future__ import annotations

import html
from typing import Any

from clsbench.analysis.stats import MIN_SAMPLES
from clsbench.core.text_table import fmt_ms, fmt_rate, text_table
from clsbench.core.vocab import Status
from clsbench.results.schema import BenchmarkResult, Measurement, backend_suffix
from clsbench.serving import records
from clsbench.serving.counters import STAGES
from clsbench.serving.search import bound_text, unfinished
from clsbench.serving.serve_charts import batch_histogram_svg, latency_chart_svg
from clsbench.serving.serve_rows import (
    PERCENTILES,
    per_setting,
    percentiles_ms,
    sample_count,
    scenario_headline,
    step_row,
)
from clsbench.serving.serve_text import (
    LOCAL_SPLIT_HEADER,
    TARGET_SPLIT_HEADER,
    artifacts_text,
    duration_text,
    figure_text,
    target_text,
    winner_and_why,
)

#: Workload name of a serve measurement: ``serve-offline``, ``serve-server``, ...
WORKLOAD_PREFIX = "serve-"
#: Serve workloads whose rate is queries per second at a latency bound rather than samples per second.
QPS_WORKLOADS = frozenset({WORKLOAD_PREFIX + "server"})
#: The issue's goal for the Server scenario: its QPS at least this fraction of offline samples/s, same mode.
SERVER_GOAL_FRACTION = 0.9


def is_serve_result(result: BenchmarkResult) -> bool:
    """Whether ``result`` was written by ``clsbench serve`` (its settings hold a ``serve`` block)."""
    return isinstance(result.settings.get("serve"), dict)


def serve_measurements(result: BenchmarkResult) -> list[Measurement]:
    return [m for m in result.measurements if m.workload.startswith(WORKLOAD_PREFIX)]


def scenario_of(m: Measurement) -> str:
    return m.workload[len(WORKLOAD_PREFIX):]


def line_of(m: Measurement) -> str:
    """The line a serve measurement belongs to: its mode, and `` @backend`` unless eager (``fp16+cl @export``)."""
    return m.mode + backend_suffix(m.backend)


def _search_of(searches: list[dict[str, Any]], line: str, scenario: str,
               setting: dict[str, Any] | None) -> dict[str, Any] | None:
    """The stored search outcome of one (line, scenario, batching setting); None when none was stored."""
    if setting is None:
        return None
    key = records.setting_key(setting)
    found = [s.get("search") for s in searches if isinstance(s, dict) and s.get("mode") == line
             and s.get("scenario") == scenario and records.setting_key(s.get("setting") or {}) == key]
    return found[-1] if found and isinstance(found[-1], dict) else None


def answer_bound(searches: list[dict[str, Any]], line: str, scenario: str, steps: list[dict[str, Any]],
                 figure: float | None, answer_setting: dict[str, Any] | None) -> dict[str, Any] | None:
    """Whether a scenario's answer is only a lower bound: the search of the answer's setting stopped before its
    resolution, or another setting's did with its bracket open above the answer (that setting might beat it).

    Returns the unfinished search's state (:func:`clsbench.serving.search.unfinished`, with ``setting``: its label),
    the answer's own first; None when the answer stands (every search that matters converged, or none was stored).
    """
    if figure is None:
        return None
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for step in steps:
        seen.setdefault(records.setting_key(step.get("setting") or {}), step.get("setting") or {})
    if answer_setting is not None:
        seen = {records.setting_key(answer_setting): answer_setting, **seen}
    for index, setting in enumerate(seen.values()):
        state = unfinished(_search_of(searches, line, scenario, setting) or {"converged": True})
        if state is None:
            continue
        if index == 0 and answer_setting is not None or state["hi_qps"] is None or state["hi_qps"] > figure:
            return {**state, "setting": records.setting_label(setting),
                    "answer_setting": index == 0 and answer_setting is not None}
    return None


def answer_text(entry: dict[str, Any]) -> str:
    """A scenario's answer with its unit, or, where its search did not converge, the bound it gives
    (:func:`clsbench.serving.search.bound_text`)."""
    state = entry.get("unfinished")
    if not state:
        return figure_text(entry.get("figure"), entry.get("unit") or "")
    text = bound_text({**state, "best_qps": entry["figure"]})
    return text if state.get("answer_setting") else text + f" (of setting {state['setting']})"


def scenario_summary(scenario: str, steps: list[dict[str, Any]], settings: dict[str, Any], *,
                     searches: list[dict[str, Any]] | None = None, line: str | None = None) -> dict[str, Any]:
    """A serve measurement's summary, in the keys the generic table and the history index read.

    ``throughput_img_s`` is the scenario's rate answer (offline samples/s, server QPS), ``latency_ms`` the LoadGen
    latencies of the run the answer comes from, ``serve`` the answer itself (figure, unit, label, note, setting, and
    ``converged``: False with ``bound`` where a search stopped before its resolution, :func:`answer_bound`, given the
    serve facts' ``searches`` and the measurement's ``line``).
    """
    head = scenario_headline(scenario, steps, settings)
    if head is None:
        return {}
    step = head.get("step")
    summary: dict[str, Any] = {"serve": {
        "figure": head.get("figure"), "unit": head.get("unit"), "label": head.get("label"),
        "note": head.get("note") or "", "setting": records.setting_label(step.get("setting") or {}) if step else None,
        "step_index": step.get("index") if step else None, "runs": len(steps),
        "valid_runs": sum(1 for s in steps if records.is_valid(s))}}
    if searches and line is not None:
        bound = answer_bound(searches, line, scenario, steps, head.get("figure"),
                             (step.get("setting") or {}) if step else None)
        summary["serve"]["converged"] = bound is None
        if bound is not None:
            summary["serve"]["bound"] = bound
    if head.get("unit") in ("samples/s", "qps") and head.get("figure") is not None:
        summary["throughput_img_s"] = head["figure"]
    if step and head.get("figure") is not None:
        latency = {**percentiles_ms(step), "mean": records.latency_ms(step, "mean"),
                   "max": records.latency_ms(step, "max")}
        count = sample_count(step)
        withheld = {name: f"needs >= {MIN_SAMPLES[key]} samples; the run had {count}"
                    for name, key in PERCENTILES.items() if count is not None and count < MIN_SAMPLES[key]
                    and records.latency_ms(step, name) is not None}
        summary["latency_ms"] = {**{k: v for k, v in latency.items() if v is not None},
                                 **({"n": count} if count else {}), **({"withheld": withheld} if withheld else {})}
    return summary


# ------------------------------------------------------------------------------------------------ analysis


def analyze_serve(result: BenchmarkResult) -> dict[str, Any]:
    """Everything ``show`` prints for a serve result (see the module docstring). Pure; reads only the file."""
    facts = result.settings.get("serve") or {}
    settings = facts.get("settings") or {}
    modes: dict[str, dict[str, Any]] = {}
    all_rows = []
    for m in serve_measurements(result):
        scenario = scenario_of(m)
        steps = [dict(r) for r in m.repeats]
        rows = per_setting(scenario, steps, settings) if m.status == Status.OK else []
        head = (scenario_headline(scenario, steps, settings) or {}) if m.status == Status.OK else {}
        best = head.get("step")
        higher = scenario in ("offline", "server")
        answer_setting = records.setting_label(best.get("setting") or {}) if best else None
        winner, why = winner_and_why(scenario, rows, higher, answer_setting) if higher else (
            (rows[0]["setting"] if rows and rows[0]["figure"] is not None else None), "")
        searches = facts.get("searches") or []
        for row in rows:
            state = unfinished(_search_of(searches, line_of(m), scenario, ((row["best"] or {}).get("setting_facts")))
                               or {"converged": True})
            row["unfinished"] = {**state, "answer_setting": True} if state else None
        entry = {"scenario": scenario, "status": m.status, "reason": m.detail or m.reason, "reason_code": m.reason,
                 "unfinished": answer_bound(searches, line_of(m), scenario, steps, head.get("figure"),
                                            (best.get("setting") or {}) if best else None),
                 "figure": head.get("figure"), "unit": head.get("unit"), "label": head.get("label"),
                 "note": head.get("note") or "", "best": step_row(best) if best else None,
                 "settings": rows, "best_setting": winner, "why": why,
                 "steps": [step_row(s) for s in steps]}
        line = line_of(m)
        modes.setdefault(line, {"mode": line, "backend": m.backend, "scenarios": [],
                                "artifacts": artifacts_summary(((facts.get("modes") or {}).get(line) or {})
                                                               .get("artifacts"))})["scenarios"].append(entry)
        all_rows.extend(entry["steps"])
    for mode in modes.values():
        by_name = {e["scenario"]: e for e in mode["scenarios"]}
        offline, server = by_name.get("offline"), by_name.get("server")
        if offline and server and offline["figure"] and server["figure"] is not None:
            ratio = server["figure"] / offline["figure"]
            mode["goal"] = {"server_qps": server["figure"], "offline_qps": offline["figure"], "ratio": ratio,
                            "server_is_bound": bool(server.get("unfinished")),
                            "goal_fraction": SERVER_GOAL_FRACTION, "met": ratio >= SERVER_GOAL_FRACTION}
    return {
        "model": (result.measurements[0].model if result.measurements else settings.get("model")),
        "device": settings.get("device"), "gpu": (result.environment.get("gpu") or {}).get("name"),
        "bound_ms": settings.get("latency_bound_ms"), "percentile": settings.get("latency_percentile"),
        "min_duration_s": settings.get("min_duration_s"), "min_queries": settings.get("min_queries"),
        "loadgen_version": facts.get("loadgen_version"), "log_dir": facts.get("log_dir"),
        "target": target_summary(facts.get("target")),
        "modes": list(modes.values()), "steps": all_rows,
    }


def target_summary(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``show`` says of a ``--target`` server: where, which server, its model config's batching, and whether
    its statistics (the server-side time split) were readable; None for clsbench's own server."""
    if not isinstance(facts, dict):
        return None
    server = facts.get("server") or {}
    config = facts.get("config") or {}
    dynamic = config.get("dynamic_batching") or {}
    groups = config.get("instance_group") or []
    statistics = facts.get("statistics")
    name = " ".join(str(x) for x in (server.get("name"), server.get("version")) if x)
    readable = "readable" if statistics == "readable" else \
        f"unavailable ({(statistics or {}).get('unavailable')}): no server-side time split"
    return {"url": facts.get("url"), "server": name, "platform": config.get("platform") or config.get("backend"),
            "max_batch_size": config.get("max_batch_size"), "preferred": dynamic.get("preferred_batch_size") or [],
            "delay_us": dynamic.get("max_queue_delay_microseconds"), "dynamic_batching": bool(dynamic),
            "instances": ", ".join(f"{g.get('count')} x {g.get('kind')}" for g in groups) or "default",
            "statistics": readable}


def artifacts_summary(facts: dict[str, Any] | None) -> dict[str, Any] | None:
    """What ``show`` says of an artifact backend's buckets: how many were built now or taken from the cache, the
    build seconds, the worst parity error against its tolerance; None for eager (no artifacts)."""
    if not isinstance(facts, dict):
        return None
    buckets = [b for b in facts.get("buckets") or [] if isinstance(b, dict)]
    backend = [b.get("backend") or {} for b in buckets]
    errors = [(b.get("parity") or {}).get("max_abs_err_rel") for b in buckets]
    errors = [e for e in errors if isinstance(e, (int, float))]
    tolerances = [(b.get("parity") or {}).get("tolerance") for b in buckets]
    return {"name": facts.get("name"), "buckets": [b.get("bucket") for b in buckets],
            "built": sum(1 for f in backend if f.get("built_now")),
            "cached": sum(1 for f in backend if f.get("cache_hit")),
            "build_s": sum(float(f.get("build_s") or 0.0) for f in backend if f.get("built_now")),
            "parity_max_err": max(errors) if errors else None,
            "parity_tolerance": next((t for t in tolerances if t is not None), None),
            "parity_passed": all((b.get("parity") or {}).get("passed") for b in buckets) if buckets else None}


def side_by_side(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per line (mode and backend): its offline and server answers and their ratio, the way a reader
    compares backends. Lines without either answer show what they have."""
    rows = []
    for mode in analysis.get("modes") or []:
        by_name = {e["scenario"]: e for e in mode["scenarios"]}
        offline, server = by_name.get("offline") or {}, by_name.get("server") or {}
        status = next((f"{e['status'].upper()}: {e['reason']}" for e in mode["scenarios"] if e["status"] != Status.OK),
                      None)
        ratio = (mode.get("goal") or {}).get("ratio")
        rows.append({"line": mode["mode"], "backend": mode.get("backend") or "eager",
                     "offline_samples_s": offline.get("figure"), "server_qps": server.get("figure"),
                     "server_is_bound": bool(server.get("unfinished")),
                     "server_p99_ms": (server.get("best") or {}).get("p99_ms") if server.get("figure") is not None
                     else None,
                     "server_setting": server.get("best_setting"), "server_over_offline": ratio, "status": status})
    return rows


# ------------------------------------------------------------------------------------------------ text


def _side_by_side_text(analysis: dict[str, Any]) -> list[str]:
    rows = side_by_side(analysis)
    if len(rows) < 2:
        return []
    bound = {True: ">= ", False: ""}
    table = [(r["line"], fmt_rate(r["offline_samples_s"]), bound[r["server_is_bound"]] + fmt_rate(r["server_qps"]),
              fmt_ms(r["server_p99_ms"]), "-" if r["server_over_offline"] is None else
              f"{bound[r['server_is_bound']]}{r['server_over_offline'] * 100:.1f}%",
              r["server_setting"] or "-", r["status"] or "") for r in rows]
    header = ("mode @backend", "offline samples/s", "server qps", "server p99", "server/offline", "setting", "")
    return ["", "side by side:", *("  " + line for line in text_table(header, table, right={1, 2, 3, 4}))]


def _withheld_text(steps: list[dict[str, Any]]) -> str:
    """The footnote when some run's percentile reads ``-``: too few samples for it (as the run table withholds)."""
    short = [r for r in steps if r.get("samples") is not None and r.get("max_ms") is not None
             and any(r.get(f"{name}_ms") is None for name in PERCENTILES)]
    if not short:
        return ""
    fewest = min(r["samples"] for r in short)
    return (f"p90/p99/p99.9 -: {len(short)} LoadGen run(s) covered too few samples for that percentile (the fewest: "
            f"{fewest}; p90 needs {MIN_SAMPLES['p90']}, p99 {MIN_SAMPLES['p99']}, p99.9 {MIN_SAMPLES['p999']}); "
            "max is the slowest sample; more samples: --min-queries or --min-duration-s")


def render_serve(analysis: dict[str, Any]) -> str:
    """The text ``clsbench show`` prints for a serve result."""
    bound, pct = analysis.get("bound_ms"), analysis.get("percentile") or 0.99
    out = [f"serve {analysis.get('model')} on {analysis.get('device')}"
           + (f" ({analysis['gpu']})" if analysis.get("gpu") else "")
           + (f"; server bound: p{pct * 100:g} <= {bound:g} ms" if bound else "")
           + (duration_text(analysis["min_duration_s"]) if analysis.get("min_duration_s") else "")
           + (f" (LoadGen {analysis['loadgen_version']})" if analysis.get("loadgen_version") else "")]
    out += target_text(analysis["target"]) if analysis.get("target") else []
    split_header = TARGET_SPLIT_HEADER if analysis.get("target") else LOCAL_SPLIT_HEADER
    out += _side_by_side_text(analysis)
    for mode in analysis.get("modes") or []:
        out += ["", f"{mode['mode']}"]
        if mode.get("artifacts"):
            out.append(artifacts_text(mode["artifacts"]))
        rows = []
        for e in mode["scenarios"]:
            if e["status"] != Status.OK:
                rows.append((e["scenario"], "-", f"{e['status'].upper()}: {e['reason']}", "", ""))
                continue
            best = e["best"] or {}
            answer = f"{e['label']}: {answer_text(e)}"
            lat = "  ".join(f"{name} {fmt_ms(best.get(name + '_ms'))}" for name in ("p50", "p90", "p99", "p99.9")) \
                if best else ""
            verdict = "VALID" if best.get("valid") else ("INVALID: " + (e["note"] or best.get("reason") or "")) \
                if best else e["note"]
            rows.append((e["scenario"], e["best_setting"] or best.get("setting") or "-", answer, lat, verdict))
        header = ("scenario", "setting", "answer", "latency ms", "result")
        out += ["  " + line for line in text_table(header, rows)]
        goal = mode.get("goal")
        if goal:
            bound = goal.get("server_is_bound")
            verdict = "met" if goal["met"] else \
                "not known: the server search did not converge" if bound else "not met"
            out.append(f"  server / offline: {'>= ' if bound else ''}{goal['ratio'] * 100:.1f}% "
                       f"(goal >= {goal['goal_fraction'] * 100:.0f}%: {verdict})")
        for e in mode["scenarios"]:
            if len(e["settings"]) > 1:
                out += ["", f"  {e['scenario']} per batching setting:"]
                rows = []
                for s in e["settings"]:
                    b = s["best"] or {}
                    split = b.get("split_ms") or {}
                    rows.append((s["setting"], answer_text(s), fmt_ms(b.get("p99_ms")),
                                 "-" if b.get("mean_batch") is None else f"{b['mean_batch']:.1f}",
                                 *(fmt_ms(split.get(c)) if split else "-" for c in ("queue", *STAGES)),
                                 f"{s['valid_runs']}/{s['runs']}"))
                header = ("setting", "answer", "p99 ms", "batch", *split_header, "valid")
                out += ["    " + line for line in text_table(header, rows, right=set(range(1, len(header))))]
            if e["why"]:
                out += ["", f"  {e['scenario']}: which setting, and why:"] + ["    " + line
                                                                           for line in e["why"].splitlines()]
        steps = [r for e in mode["scenarios"] for r in e["steps"]]
        if steps:
            out += ["", "  LoadGen runs (time split: mean ms per request; logs under "
                        f"{analysis.get('log_dir') or '-'}):"]
            rows = []
            for r in sorted(steps, key=lambda r: r["index"] or 0):
                split = r.get("split_ms") or {}
                rate = r["target_qps"] if r["target_qps"] is not None else r["samples_per_second"]
                rows.append((str(r["index"]), r["scenario"], r["setting"], r["role"] or "", fmt_rate(rate),
                             fmt_rate(r["samples_per_second"] if r["completed_qps"] is None else r["completed_qps"]),
                             fmt_ms(r["p50_ms"]), fmt_ms(r["p90_ms"]), fmt_ms(r["p99_ms"]), fmt_ms(r["p99.9_ms"]),
                             fmt_ms(r.get("max_ms")),
                             "-" if r["mean_batch"] is None else f"{r['mean_batch']:.1f}",
                             fmt_ms(split.get("queue")) if split else "-",
                             fmt_ms(split.get("compute")) if split else "-",
                             "VALID" if r["valid"] else f"INVALID: {r['reason']}"))
            header = ("#", "scenario", "setting", "role", "target/s", "done/s", "p50", "p90", "p99", "p99.9",
                      "max", "batch", "queue", "compute", "result")
            out += ["    " + line for line in text_table(header, rows, right={0, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})]
    note = _withheld_text(analysis.get("steps") or [])
    out += ["", note] if note else []
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------ compare


def _answer_samples(entry: dict[str, Any], key: str) -> list[float]:
    """Per-run figures at the answer: the answer's run and its ``confirm`` repeats (same setting and target)."""
    best = entry.get("best")
    if not best:
        return []
    same = [r for r in entry["steps"] if r["setting"] == best["setting"] and r["valid"]
            and r["target_qps"] == best["target_qps"] and r[key] is not None]
    return [float(r[key]) for r in same]


#: Why a test is missing when a side has no run at its answer with that figure (offline has no completed QPS; only
#: the server's answer is repeated by ``serve --confirm``).
NO_ANSWER_RUNS = "no run at the answer with this figure"


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _asked_input_size(result: BenchmarkResult) -> int | None:
    """The input size a serve run asked for (None: the model's default)."""
    return _size(((result.settings.get("serve") or {}).get("settings") or {}).get("input_size"))


def _built_input_sizes(result: BenchmarkResult) -> dict[str, int | None]:
    """Per mode, the input size the serving engine was built at (recorded once the mode was built)."""
    modes = (result.settings.get("serve") or {}).get("modes") or {}
    return {mode: _size((facts or {}).get("input_size")) for mode, facts in modes.items() if isinstance(mode, str)}


def serve_input_sizes(results: list[BenchmarkResult]) -> list[dict[tuple[str, str], int | None]]:
    """Per result, the input size of each (mode, scenario): the size its engine was built at, else the size asked
    for, else the model's default as the results show it (a result that asked for none and built a mode at some
    size; one size across them); None: the model's default, whose size no result shows. ``compare`` pairs answers
    of one input size only."""
    defaults = {size for r in results if _asked_input_size(r) is None for size in _built_input_sizes(r).values()
                if size is not None}
    default = next(iter(defaults)) if len(defaults) == 1 else None
    out = []
    for result in results:
        built, asked = _built_input_sizes(result), _asked_input_size(result)
        sizes = {}
        for m in serve_measurements(result):
            size = built.get(line_of(m)) or asked or _size(m.input_size)
            sizes[(line_of(m), scenario_of(m))] = size if size is not None else default
        out.append(sizes)
    return out


def serve_model(result: BenchmarkResult) -> str | None:
    """The model a serve result served (one per file)."""
    return analyze_serve(result)["model"]


def compare_serve(a: BenchmarkResult, b: BenchmarkResult, *, alpha: float = 0.05) -> dict[str, Any]:
    """Two serve results' answers side by side per (mode, scenario) present in both at the same input size
    (:func:`serve_input_sizes`), with the ratio and, where both have at least two runs at their answer
    (``--confirm``), Welch's t-test on completed QPS and on p99. ``unmatched`` lists the (mode, scenario) that both
    answered at different input sizes: never compared."""
    from clsbench.analysis.significance import welch_t_test

    ea = {(m["mode"], e["scenario"]): e for m in analyze_serve(a)["modes"] for e in m["scenarios"]}
    eb = {(m["mode"], e["scenario"]): e for m in analyze_serve(b)["modes"] for e in m["scenarios"]}
    size_a, size_b = serve_input_sizes([a, b])
    rows = []
    unmatched = [{"mode": k[0], "scenario": k[1], "a_input_size": size_a.get(k), "b_input_size": size_b.get(k)}
                 for k in ea if k in eb and size_a.get(k) != size_b.get(k)]
    for key in [k for k in ea if k in eb and size_a.get(k) == size_b.get(k)]:
        x, y = ea[key], eb[key]
        row: dict[str, Any] = {"mode": key[0], "scenario": key[1], "input_size": size_a.get(key),
                               "label": x["label"] or y["label"],
                               "unit": x["unit"] or y["unit"], "a": x["figure"], "b": y["figure"],
                               "a_p99_ms": (x["best"] or {}).get("p99_ms"), "b_p99_ms": (y["best"] or {}).get("p99_ms"),
                               "ratio": (y["figure"] / x["figure"]) if x["figure"] and y["figure"] is not None
                               else None,
                               # A search that stopped before its resolution gives a lower bound, not an answer.
                               "a_bound": x.get("unfinished"), "b_bound": y.get("unfinished")}
        tests = {}
        for name, field in (("completed_qps", "completed_qps"), ("p99_ms", "p99_ms")):
            sa, sb = _answer_samples(x, field), _answer_samples(y, field)
            test = welch_t_test(sa, sb, alpha) if sa and sb else None
            tests[name] = {"p": test.p if test else None, "significant": bool(test and test.significant),
                           "b_larger": None if test is None or test.t is None else test.t < 0,
                           "n_a": len(sa), "n_b": len(sb),
                           "note": (test.reason if test else NO_ANSWER_RUNS) or ""}
        row["tests"] = tests
        rows.append(row)
    return {"rows": rows, "unmatched": unmatched, "alpha": alpha, "loop_differences": loop_differences(a, b)}


def _loop_facts(result: BenchmarkResult) -> dict[str, Any]:
    """How a serve result's own server ran, beyond its batching settings: what :func:`loop_differences` compares."""
    serve = result.settings.get("serve") or {}
    asked = serve.get("settings") or {}
    setups = [s for s in serve.get("setups") or [] if isinstance(s, dict)]
    if asked.get("target"):
        overlap = "- (a --target server)"
    elif setups and all("overlap" not in s for s in setups):
        overlap = "off (served before serve --overlap)"
    else:
        overlap = "on" if any(s.get("overlap") for s in setups) else "off"
    per_setting = sorted({s["torch_threads"] for s in setups if isinstance(s.get("torch_threads"), int)})
    threads = ", ".join(map(str, per_setting)) if per_setting else serve.get("torch_threads")  # older: one figure
    return {"overlap": overlap, "torch threads": threads,
            "sample pool": asked.get("sample_count"), "min duration s": asked.get("min_duration_s"),
            "min queries": asked.get("min_queries")}


def loop_differences(a: BenchmarkResult, b: BenchmarkResult) -> list[dict[str, Any]]:
    """The serving-loop facts two serve results differ in (overlap, torch threads, the sample pool, LoadGen's
    minimums): a changed figure may come from them rather than from what the rows name."""
    fa, fb = _loop_facts(a), _loop_facts(b)
    return [{"fact": k, "a": fa[k], "b": fb[k]} for k in fa if fa[k] != fb[k]]


def unmatched_text(comparison: dict[str, Any]) -> str:
    """The answers :func:`compare_serve` did not compare because their input sizes differ, in words, e.g.
    ``bf16+cl server, bf16+cl offline (input size 64 vs 160)``; empty when there are none."""
    by_sizes: dict[tuple[Any, Any], list[str]] = {}
    for d in comparison.get("unmatched") or ():
        by_sizes.setdefault((d["a_input_size"], d["b_input_size"]), []).append(f"{d['mode']} {d['scenario']}")
    return "; ".join(f"{', '.join(names)} (input size {'default' if a is None else a} vs "
                     f"{'default' if b is None else b})" for (a, b), names in by_sizes.items())


def render_serve_compare(comparison: dict[str, Any]) -> str:
    """The text ``clsbench compare`` prints for two serve results."""
    out = []
    for r in comparison["rows"]:
        unit = r["unit"] or ""
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        verdicts = []
        for name, t in r["tests"].items():
            if t["p"] is None:
                verdicts.append(f"{name}: significance not assessed ({t['note']})")
            else:
                verdicts.append(f"{name}: {'significant' if t['significant'] else 'not significant'} (p={t['p']:.3g}, "
                                f"n={t['n_a']}/{t['n_b']})")
        marks = {side: ">= " if r.get(f"{side}_bound") else "" for side in ("a", "b")}
        out.append(f"{r['mode']} {r['scenario']}: {r['label']}: {marks['a']}{figure_text(r['a'], unit)} -> "
                   f"{marks['b']}{figure_text(r['b'], unit)} ({ratio}); p99 {fmt_ms(r['a_p99_ms'])} -> "
                   f"{fmt_ms(r['b_p99_ms'])} ms")
        out += ["  " + v for v in verdicts]
        for side, name in (("a", "baseline"), ("b", "this run")):
            state = r.get(f"{side}_bound")
            if state:
                out.append(f"  {name}'s answer is a lower bound, not an answer: "
                           f"{answer_text({'unfinished': state, 'figure': r[side]})}; the ratio is not the change")
    differ = comparison.get("loop_differences") or []
    if differ:
        out.append("the two servers ran differently (baseline -> this run): "
                   + "; ".join(f"{d['fact']} {d['a']} -> {d['b']}" for d in differ))
    return "\n".join(out) + ("\n" if out else "no (mode, scenario) in common\n")


# ------------------------------------------------------------------------------------------------ charts


def serve_figures(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """Per mode, its charts as ``{"svg", "caption"}``: latency against offered load with the bound drawn (every
    Server run), and the batch-size histogram of the best Server run. Self-contained SVG, every text escaped."""
    out = []
    for mode in analysis.get("modes") or []:
        charts = []
        chart = latency_chart_svg(analysis, mode["mode"])
        if chart:
            charts.append({"svg": chart, "caption": "p99 (solid) and p50 (dashed) latency against offered load; "
                                                    "filled: VALID, hollow: INVALID; dashed grey: the bound"})
        server = next((e for e in mode["scenarios"] if e["scenario"] == "server" and e.get("best")), None)
        histogram = batch_histogram_svg(server["best"]) if server else ""
        if histogram:
            best = server["best"]
            charts.append({"svg": histogram, "caption": f"batch sizes of the best Server run ({best['setting']}, "
                                                        f"{best['target_qps']:,.0f} qps)"})
        out.append({"mode": mode["mode"], "charts": charts})
    return out


def render_serve_html(analysis: dict[str, Any]) -> str:
    """One HTML fragment: per mode the charts of :func:`serve_figures`, then the text table. Self-contained (inline
    SVG), escaped."""
    parts = ['<section class="serve">', f"<h2>Serving: {html.escape(str(analysis.get('model')))}</h2>"]
    for mode in serve_figures(analysis):
        parts.append(f"<h3>{html.escape(mode['mode'])}</h3>")
        parts += [f"<figure>{c['svg']}<figcaption>{html.escape(c['caption'])}</figcaption></figure>"
                  for c in mode["charts"]]
    parts.append(f"<pre>{html.escape(render_serve(analysis))}</pre></section>")
    return "\n".join(parts)


def csv_rows(analysis: dict[str, Any]) -> list[dict[str, Any]]:
    """Every LoadGen run as one flat row, units in the column names (the time split as ``<part>_ms``)."""
    rows = []
    for r in analysis.get("steps") or []:
        row = {k: v for k, v in r.items() if k not in ("histogram", "split_ms", "per_batch_ms", "busy_pct",
                                                       "setting_facts")}
        for part, ms in (r.get("split_ms") or {}).items():
            row[f"{part}_ms"] = ms
        busy = r.get("busy_pct") or []
        row["busy_pct"] = sum(busy) / len(busy) if busy else None
        rows.append(row)
    return rows
