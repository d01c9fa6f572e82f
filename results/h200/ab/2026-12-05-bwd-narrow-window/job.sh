#!/usr/bin/env bash
# Issue 30, backward step 15 (written 2026-12-05, not yet run): cuda.flash_bwd_wgmma's narrow-window
# tiles at d128 (BwdNarrow: 64-key blocks, the consumers splitting dK/dV by columns, two Q/dO
# stages; the default for a window spanning at most 640 keys) against its wide ones (option
# wide_tiles=1: 128-key blocks, as before), both from one build in one run, row after row, with
# cuda.cudnn_sdpa on the same rows: window_tiles.json (configs/window.json's cases, backward only;
# the windows (512, 512) and 4096 span more than 640 keys and stay wide in both: the control,
# expected 1.00 ± 0.02).
# Prediction (docs/tuning_flash_wgmma.md, backward step 15): (128, 0) and (128, 128) 1.10-1.25x,
# (512, 0) 0.97-1.08x.
# Run from the repository root on the GPU machine after a build: B (default build/attnbench), W
# (default /tmp/abbwdnarrow): window_tiles.json (the results), run.txt, ab.md (narrow over wide,
# and each over cuDNN, per case).
set -uo pipefail
W=${W:-/tmp/abbwdnarrow}; mkdir -p $W
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-05-bwd-narrow-window
timeout 420 $B run $HERE/window_tiles.json --out $W/window_tiles.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 - "$W/window_tiles.json" > $W/ab.md <<'PY'
import json, statistics, sys
res = json.load(open(sys.argv[1]))
t = {}
for r in res["rows"]:
    if r["status"] == "pass" and r.get("tflops"):
        key = "cudnn" if r["impl"] == "cuda.cudnn_sdpa" else r["options"].get("wide_tiles", 0)
        t[(r["case"], key)] = r["tflops"]
print("# Backward narrow-window tiles (wide_tiles=0) against the wide ones (wide_tiles=1), "
      "TFLOP/s of useful scores, cuDNN beside them\n")
print("| case | narrow | wide | narrow / wide | cuDNN | narrow / cuDNN | wide / cuDNN |")
print("|---|---|---|---|---|---|---|")
ratios = []
for case in sorted({k[0] for k in t}):
    n, w, c = t.get((case, 0)), t.get((case, 1)), t.get((case, "cudnn"))
    if n and w:
        ratios.append(n / w)
        nc = f"{n / c:.3f}" if c else "-"
        wc = f"{w / c:.3f}" if c else "-"
        cs = f"{c:.1f}" if c else "-"
        print(f"| {case} | {n:.1f} | {w:.1f} | {n / w:.3f} | {cs} | {nc} | {wc} |")
if ratios:
    print(f"\nAll rows: narrow/wide median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} ({len(ratios)} cases)")
PY
grep "All rows" $W/ab.md
