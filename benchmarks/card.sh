# Sourced by the device scripts (through lib.sh or directly): card_dir prints the folder under benchmarks/results/ for
# this machine's first GPU: h100, h200, else the card's name lowercased with '-' for other characters; cpu without one.
card_dir() {
  local card; card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
  case "$card" in *H200*) echo h200 ;; *H100*) echo h100 ;; "") echo cpu ;;
                  *) echo "$card" | tr -c 'A-Za-z0-9\n' '-' | tr 'A-Z' 'a-z' ;; esac
}
