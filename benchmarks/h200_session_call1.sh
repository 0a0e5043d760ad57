#!/usr/bin/env bash
# One device call (2026-12-02): issue 21's container check, issue 19's two profiles, then every GPU-marked test
# with what is left of LIMIT_S (default 585 s). Everything is packed into $OUT/call1.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s); LIMIT_S=${LIMIT_S:-585}
R=/tmp/call1; rm -rf "$R"; mkdir -p "$R"
if ls .whl/*.whl >/dev/null 2>&1; then  # MLPerf LoadGen for the serving GPU tests
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && SITE=:/tmp/site
fi
OUT=$R/container timeout 120 bash benchmarks/verify_container.sh > "$R/container.log" 2>&1
echo "container: exit $? $(( $(date +%s) - T0 )) s"
PART=profile GPU_TESTS=0 OUT=$R bash benchmarks/soak_profile_h200.sh > "$R/profile.log" 2>&1
echo "profile: exit $? $(( $(date +%s) - T0 )) s"
left=$(( LIMIT_S - ($(date +%s) - T0) - 10 ))
PYTHONPATH=src:tests${SITE:-} timeout "$left" python3 -m pytest -q -p no:cacheprovider -m gpu tests/ -rs \
  > "$R/gpu-tests.log" 2>&1
echo "gpu tests: exit $? $(( $(date +%s) - T0 )) s ($left s given): $(tail -n 1 "$R/gpu-tests.log")"
grep -E "^(FAILED|ERROR)" "$R/gpu-tests.log" | head -20
tail -n 25 "$R/profile.log"
[ -n "${OUT:-}" ] && tar -czf "$OUT/call1.tgz" -C /tmp call1
