#!/usr/bin/env bash
# One device call: the seed suite with telemetry, probe and busy time, timed; must finish inside the 10-minute call.
# Prints the median spread over cells and the host CPU contention seen, last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
# Each progress line gets the seconds since the start, so the gaps between repeats can be read off progress.log.
stamp() { python3 -u -c 'import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    print(f"{time.monotonic() - t0:8.2f} {line}", end="", flush=True)'; }
timeout -s INT ${LIMIT_S:-588} python3 -m clsbench run --suite seed --device cuda -o "$OUT/seed-suite.json" \
    2> >(stamp > "$OUT/progress.log") >"$OUT/table.txt"
rc=$?
# The time stamper finishes the log. Bash does not always give a process substitution's pid in $! (the H200's bash
# did not, on 2026-12-02: "$!: unbound variable" under set -u ended the script before its summary), so wait only
# when there is one, else give the stamper a moment.
if [ -n "${!:-}" ]; then wait "$!" 2>/dev/null; else sleep 0.5; fi
echo "rc=$rc seed suite: $(( $(date +%s) - t0 )) s"
tail -n 45 "$OUT/table.txt"
python3 - "$OUT/seed-suite.json" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1]))
ms = [m for m in d["measurements"] if m["status"] == "ok"]
spreads = sorted(m["summary"]["spread_pct"] for m in ms if m["summary"].get("spread_pct") is not None)
print(f"ok {len(ms)}/{len(d['measurements'])}; median spread {statistics.median(spreads):.2f}%; "
      f"cells under 3%: {sum(s < 3 for s in spreads)}/{len(spreads)}")
for m in ms:
    h = m["summary"].get("host_cpu") or {}
    print(f"{m['model'][:18]:18} {m['workload'][:12]:12} {m['mode']:9} spread {m['summary']['spread_pct']:6.2f}% "
          f"steal max {h.get('steal_pct_max') or 0:5.2f}% other cores max {h.get('other_busy_cores_max') or 0:5.2f} "
          f"invol/s {h.get('involuntary_switches_per_s_max') or 0:7.1f}")
# Where the suite's time went, per repeat (seconds summed over every repeat): the parts inside each worker, and
# what overlap did (prepared ahead, stopped while another was timed, waiting for the previous worker to exit).
rs = [r for m in d["measurements"] for r in m.get("repeats", []) if r.get("status") == "ok"]
def total(section, key):
    return sum((r.get(section) or {}).get(key) or 0 for r in rs)
parts = {k: total("timings", k) for k in ("prepare_s", "context_s", "setup_s", "first_iteration_s", "warmup_s")}
parts["timed_s"] = total("validity", "timed_seconds")
print("repeats", len(rs), " ".join(f"{k} {v:.1f}" for k, v in parts.items()), f"sum {sum(parts.values()):.1f}")
measure = total("timings", "measure_s")
if measure:  # since commit 33e0120: all of measure, and the busy-time profile inside it
    inside = measure - sum(v for k, v in parts.items() if k != "prepare_s")
    print(f"measure_s {measure:.1f}, of which outside the phases above {inside:.1f} "
          f"(busy-time profiles {total('busy', 'profile_s'):.1f})")
ov = [r["overlap"] for r in rs if "overlap" in r]
if ov:
    print(f"overlap: prepared ahead {sum(o['prepared_ahead'] for o in ov)}/{len(ov)}; worker ahead stopped while "
          f"timed {sum(o['ahead_stopped_when_timed'] is True for o in ov)}; waiting for the previous worker to exit "
          f"{sum(o['exit_wait_s'] for o in ov):.1f} s")
PY
