#!/usr/bin/env bash
# Every GPU-marked test, one pytest per test file, inside one device call: each file gets what is left of LIMIT_S
# (default 570 s), so a call cut short still has the tracebacks of the files that finished (one pytest over all 55
# tests took more than 475 s on the H200 on 2026-12-02 and printed nothing when its time ran out). MLPerf LoadGen is
# installed from .whl when the call carries it (the serving tests skip otherwise). FILES overrides the list, e.g.
# FILES="backends data_gpu gpu" for the files fixed after a run. Logs go to $OUT/gpu-tests.tgz (one per file).
#
#   OUT=$OUT bash benchmarks/gpu_tests.sh        # with carry: [".whl"]
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s); LIMIT_S=${LIMIT_S:-570}
LOGS=$(mktemp -d)/gpu-tests; mkdir -p "$LOGS"
SITE=
if ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl; then
  SITE=:/tmp/site
fi
FILES=${FILES:-$(grep -l "mark.gpu" tests/test_*.py | sed 's|tests/test_||; s|\.py$||' | tr '\n' ' ')}
git rev-parse --short HEAD > "$LOGS/commit.txt" 2>/dev/null || true
for f in $FILES; do
  left=$(( LIMIT_S - ($(date +%s) - T0) ))
  if (( left < 15 )); then echo "$f: not run ($left s left)"; continue; fi
  PYTHONPATH=src:tests$SITE timeout "$left" python3 -m pytest -q -p no:cacheprovider -m gpu "tests/test_$f.py" \
    --tb=short -rfEsx > "$LOGS/$f.log" 2>&1
  echo "$f: exit $? at $(( $(date +%s) - T0 )) s: $(tail -n 1 "$LOGS/$f.log")"
done
grep -h -E "^(FAILED|ERROR|XFAIL)" "$LOGS"/*.log
if [ -n "${OUT:-}" ]; then tar -czf "$OUT/gpu-tests.tgz" -C "$(dirname "$LOGS")" gpu-tests; fi
