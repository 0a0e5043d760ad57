# Sourced by the device scripts (backends_h200.sh, pipeline_h200.sh, pipeline_levers.sh, tune_h200.sh): strict mode,
# the repository root as the working directory, the source tree on PYTHONPATH, a new result folder that is never
# overwritten, and the time left of the script's guard (GUARD_S).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/card.sh"
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-src}
PY=${PY:-python3}

new_dest() {  # PREFIX: DEST becomes <DEST, default benchmarks/results/<card>>/PREFIX-<UTC time>, created; T0 starts
  DEST=${DEST:-benchmarks/results/$(card_dir)}/$1-$(date -u +%Y%m%dT%H%M%SZ)
  if [ -e "$DEST" ]; then echo "error: $DEST exists; results are never overwritten" >&2; exit 3; fi
  mkdir -p "$DEST" || exit 3
  T0=$(date +%s)
}

left() { echo $(( GUARD_S - ($(date +%s) - T0) )); }
