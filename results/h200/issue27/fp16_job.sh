#!/usr/bin/env bash
# Issues 27 and 28's fp16 target (written 2026-12-04; first whole run 2026-12-06 at 1f65ac1, its
# files in results/h200/issue27/2026-12-06-1f65ac1/): cuda.flash_fwd_wgmma and
# cuda.flash_bwd_wgmma in fp16 and bf16 on configs/fp16_parity.json (the FA3 grid's shapes at seq
# 2k, 8k, 16k; d64, d128, d256; causal and not), one run, every row verified first (sampled).
# Target: each fp16 row within 5% of its bf16 twin (fp16 TFLOP/s >= 0.95 x bf16). Run from the
# repository root on the GPU machine after a build (B, default build/attnbench); session.sh
# JOBS=<this> runs it. Outputs in $W (default /tmp/fp16): fp16.json, run.txt, fp16.md (the ratio
# per case and pass, and the rows below 0.95).
set -uo pipefail
W=${W:-/tmp/fp16}; mkdir -p $W
B=${B:-build/attnbench}
source scripts/common.sh; attn_cudnn_from_wheel
timeout 420 $B run configs/fp16_parity.json --out $W/fp16.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 - "$W/fp16.json" > $W/fp16.md <<'PY'
import json, sys
t = {}
for r in json.load(open(sys.argv[1]))["rows"]:
    if r["status"] == "pass" and r.get("tflops"):
        dtype = r["problem"]["dtype"]
        t[(r["case"].replace("_" + dtype, ""), r["impl"], r["pass"], dtype)] = r["tflops"]
print("# fp16 against bf16: TFLOP/s, one run\n")
print("| case | implementation | pass | bf16 | fp16 | fp16 / bf16 |\n|---|---|---|---|---|---|")
low = []
for key in sorted({k[:3] for k in t}):
    b, f = t.get(key + ("bf16",)), t.get(key + ("f16",))
    if b and f:
        print(f"| {key[0]} | {key[1]} | {key[2]} | {b:.1f} | {f:.1f} | {f / b:.3f} |")
        if f / b < 0.95:
            low.append(f"{key[0]} {key[1]} {key[2]} ({f / b:.3f})")
print(f"\nBelow 0.95: {len(low)}" + ("" if not low else ": " + "; ".join(low)))
PY
tail -1 $W/fp16.md
