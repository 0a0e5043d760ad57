#!/usr/bin/env bash
# fp8 (torchao float8 Linear layers, clsbench issue 35) against bf16 on the suite's vision Transformer, one H100/H200:
#  infer  - infer-throughput, batch 256: bf16, fp8, bf16+compile, fp8+compile (fp8 inference's baseline is bf16: the
#           weights cast, as fp8 casts everything it does not convert);
#  train  - train, batch 128: amp-bf16, fp8, amp-bf16+compile, fp8+compile (fp8 training keeps fp32 master weights
#           under bf16 autocast, as amp-bf16 does);
#  parity - the outputs against fp32 eager as tune's correctness guard checks them: fp8 and fp8+compile logits at
#           batch 16, and the loss after one fp8 training step (tolerance: PARITY_TOLERANCE["fp8"]).
# Each cell has 3 repeats (fresh worker processes) under a short stop rule: 5 warm-up iterations, then at least 20
# timed ones and 1 s. Not measured yet; estimated on an H100 at 60-90 s for infer, 90-150 s for train (the compiled
# cells' first repeat is a cold compile, 30-60 s; later repeats hit the Inductor cache) and 40 s for parity. Every
# step runs under what is left of a GUARD_S guard (default 230 s, under 4 minutes); a run cut short (SIGINT) still
# saves what it measured. If the guard cuts train or parity off, call again with PARTS="train parity".
#
# torchao is carried as a wheel (torchao 0.17.0, built against torch 2.11; .whl/ is ignored by git) and installed
# into /tmp/site first. Results go to $OUT (default /tmp/out): fp8-infer.json, fp8-train.json, fp8-parity.json and
# fp8-table.txt, the table printed last: img/s median and spread over the repeats, the median compile time (the
# first call's), the Linear layers converted, and each fp8 cell's speed-up over its baseline in the same compile state.
# MODEL (default timm/vit_tiny_patch16_224, the seed suite's ViT; timm/vit_base_patch16_224 has 4x wider layers),
# REPEATS, PARTS and GUARD_S can be set.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
MODEL=${MODEL:-timm/vit_tiny_patch16_224}
REPEATS=${REPEATS:-3}
GUARD_S=${GUARD_S:-230}
PARTS=" ${PARTS:-infer train parity} "
T0=$(date +%s)
left() { echo $(( GUARD_S - ($(date +%s) - T0) )); }

"$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/torchao*.whl || {
    echo "error: could not install the carried torchao wheel (.whl/torchao*.whl)" >&2; exit 2; }
export PYTHONPATH=/tmp/site:src PYTHONUNBUFFERED=1
"$PY" -c "import torch, torchao, timm; print('torch', torch.__version__, 'torchao', torchao.__version__, 'timm',
timm.__version__, torch.cuda.get_device_name(), 'cc', torch.cuda.get_device_capability())" 2>&1 | tail -1

STOP=(--repeats "$REPEATS" --warmup 5 --iterations 20 --min-time 1 --no-probe --timeout 300 --device cuda -q)
run() { local name=$1; shift; local out="$OUT/fp8-$name.json" t=$(date +%s)
        if [[ $PARTS != *" $name "* ]]; then echo "== $name: not in PARTS"; return; fi
        if (( $(left) < 30 )); then echo "== $name: skipped, $(left) s left of the guard"; return; fi
        timeout -s INT "$(left)" "$PY" -m clsbench run --model "$MODEL" "$@" "${STOP[@]}" -o "$out" 2>&1 | tail -6
        echo "== $name rc=${PIPESTATUS[0]} $(( $(date +%s) - t )) s (total $(( $(date +%s) - T0 )) s)"; }

run infer --workload infer-throughput --batch-size 256 --mode bf16,fp8,bf16+compile,fp8+compile
run train --workload train --batch-size 128 --mode amp-bf16,fp8,amp-bf16+compile,fp8+compile

if [[ $PARTS != *" parity "* ]]; then
    echo "== parity: not in PARTS"
elif (( $(left) > 45 )); then
    timeout -s INT "$(left)" "$PY" - "$MODEL" "$OUT/fp8-parity.json" <<'PYEOF'
import json, sys
from clsbench.procedures.tune import train_parity
from clsbench.procedures.tune import judge, output_errors
model, path = sys.argv[1:]
rows = []
for (mode, batch), check in output_errors(model, "infer-throughput", "cuda", [("fp8", 16), ("fp8+compile", 16)]).items():
    rows.append({"mode": mode, "batch_size": batch, "workload": "infer-throughput", **check, **judge(check, mode)})
for (mode, batch), check in train_parity(model, "cuda", [("fp8", 16)], steps=1).items():
    rows.append({"mode": mode, "batch_size": batch, "workload": "train", **check})
with open(path, "x") as f:  # "x": never over an existing file
    json.dump(rows, f, indent=1)
for r in rows:
    print(f"parity {r['workload']:16s} {r['mode']:12s} bs{r['batch_size']}  error {r['error']}  "
          f"last {r.get('error_last')}  tolerance {r['tolerance']}  ok {r['ok']}  {r.get('reason') or ''}")
PYEOF
    echo "== parity rc=$? (total $(( $(date +%s) - T0 )) s)"
else
    echo "== parity: skipped, $(left) s left of the guard"
fi

"$PY" - "$OUT" <<'PYEOF' | tee "$OUT/fp8-table.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
BASELINE = {"infer-throughput": "bf16", "train": "amp-bf16"}
print(f"\n{'workload':16s} {'mode':18s} {'batch':>5s} {'img/s':>9s} {'spread':>7s} {'n':>2s} {'compile s':>9s} "
      f"{'fp8 layers':>10s} {'vs bf16':>8s}  status")
for name in ("infer", "train"):
    path = out / f"fp8-{name}.json"
    if not path.exists():
        print(f"{name}: no result file")
        continue
    ms = json.loads(path.read_text())["measurements"]
    speed = {m["mode"]: (m.get("summary") or {}).get("throughput_img_s") for m in ms}
    for m in ms:
        s = m.get("summary") or {}
        notes = next((r.get("mode_notes") or {} for r in m.get("repeats") or [] if r.get("mode_notes")), {})
        fp8 = notes.get("fp8") or {}
        layers = f"{fp8['converted']}/{fp8['linear_layers']}" if fp8 else "-"
        base = BASELINE[m["workload"]] + ("+compile" if "compile" in m["mode"] else "")
        ratio = (f"{speed[m['mode']] / speed[base]:.2f}x" if m["mode"].startswith("fp8") and speed.get(m["mode"])
                 and speed.get(base) else "")
        img_s = f"{s['throughput_img_s']:,.0f}" if s.get("throughput_img_s") else "-"
        spread = f"{s['spread_pct']:.1f}%" if s.get("spread_pct") is not None else "-"
        compile_s = f"{s['compile_s']:.0f}" if s.get("compile_s") else "-"
        status = m["status"] + (f": {m['detail'][:90]}" if m.get("detail") else "")
        print(f"{m['workload']:16s} {m['mode']:18s} {m['batch_size']:5d} {img_s:>9s} {spread:>7s} "
              f"{s.get('repeats') or 0:2d} {compile_s:>9s} {layers:>10s} {ratio:>8s}  {status}")
PYEOF
