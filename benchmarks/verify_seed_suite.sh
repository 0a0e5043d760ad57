#!/usr/bin/env bash
# One device call: the seed suite with telemetry, probe and busy time, timed; must finish inside the 10-minute call.
# Prints the median spread over cells and the host CPU contention seen, last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
timeout -s INT 585 python3 -m clsbench run --suite seed --device cuda -o "$OUT/seed-suite.json" 2>"$OUT/progress.log" \
    >"$OUT/table.txt"
echo "rc=$? seed suite: $(( $(date +%s) - t0 )) s"
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
PY
