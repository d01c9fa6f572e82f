#!/usr/bin/env bash
# Issue 29 (written 2026-12-06, session 59; first run at 234b5a6 in session 60, an H100:
# results/h200/issue29/splits-2026-12-06-234b5a6/ and the README's "split-count A/B" section; the
# prediction below was wrong, and the plan's small-batch rule changed after it; second run at
# cdf16f6 in session 61, an H200: splits-2026-12-06-cdf16f6/, "The split-count A/B again", the
# rule changed again; the README gives the next run's prediction): batch-1 decode's split count.
# configs/decode_splits_ab.json: GQA 64:8, d64 and d128, 1k-32k keys (8k and 16k since session
# 61), cuda.flash_decode with splits 0 (automatic) and 4-64 forced, beside cuDNN, read flush,
# every row verified. Job5 at d705a79 had both libraries at about 0.11 of the read ceiling at 1k keys, where the automatic
# plan runs 4 splits (32 blocks on 132 SMs), and ours 2.9% slower than cuDNN there.
# Prediction (before any run): at 1k and 4k keys, 16-32 splits take 10-20% off the automatic
# plan's time (more blocks reading at once; the merge of more partials costs less than that), and
# at 32k no forced count beats the automatic one by more than 2%. If so, the plan's rule of at
# least two K/V tiles per warp is wrong for short contexts; otherwise it stands.
# Run from the repository root on the GPU machine after a build (B, default build/attnbench);
# session.sh JOBS=<this> runs it (about 2 minutes with 1k/4k/32k, 108 s on the H200; about 3
# with 8k and 16k). Outputs in $W (default /tmp/splits):
# splits.json, run.txt, splits.md (per case: each split count's time against the automatic
# plan's and cuDNN's, and GB/s).
set -uo pipefail
W=${W:-/tmp/splits}; mkdir -p "$W"
B=${B:-build/attnbench}
source scripts/common.sh; attn_cudnn_from_wheel
timeout 300 "$B" run configs/decode_splits_ab.json --out "$W/splits.json" > "$W/run.txt" 2>&1
echo "run rc=$?"
python3 - "$W/splits.json" > "$W/splits.md" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
t, gbs = {}, {}
for r in rows:
    if r["status"] != "pass" or "time" not in r:
        continue
    key = (r["case"], r["impl"], int(r["options"].get("splits", -1)))
    t[key] = r["time"]["median_ms"] * 1000.0
    gbs[key] = r["hbm_bytes"] / (r["time"]["median_ms"] * 1e-3) / 1e9
print("# Batch-1 decode: forced split counts against the automatic plan and cuDNN (one run)\n")
print("| case | splits | us | GB/s | / automatic | / cuDNN |\n|---|---|---|---|---|---|")
for case in sorted({k[0] for k in t}):
    auto = t.get((case, "cuda.flash_decode", 0))
    cudnn = t.get((case, "cuda.cudnn_sdpa", -1))
    for (c, impl, s), us in sorted(t.items(), key=lambda kv: (kv[0][1], kv[0][2])):
        if c != case:
            continue
        name = "cuDNN" if impl == "cuda.cudnn_sdpa" else ("auto" if s == 0 else str(s))
        ra = f"{us / auto:.3f}" if auto else "-"
        rc = f"{us / cudnn:.3f}" if cudnn else "-"
        print(f"| {case} | {name} | {us:.2f} | {gbs[(c, impl, s)]:.0f} | {ra} | {rc} |")
PY
head -3 "$W/splits.md"
