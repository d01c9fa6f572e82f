#!/usr/bin/env bash
# Issue 30, forward step 8 (written 2026-12-04, not yet run): cuda.flash_fwd_wgmma's narrow-window
# tiles (64 x 64, one consumer, two blocks per SM: the default for a window spanning at most 640
# keys) against its wide window tiles (option wide_tiles=1: 128 x 128, two consumers, as before),
# both from one build in one run, row after row: window_tiles.json (configs/window.json's cases,
# forward only; the windows (512, 512) and 4096 span more than 640 keys and stay wide in both, the
# control, expected 1.00 ± 0.02).
# Prediction (docs/tuning_flash_wgmma.md, step 8): (128, 128) from 0.33 to 0.45-0.55 of the dense
# forward (199 -> 270-330 TFLOP/s: FA4 ran 252 in job5), (128, 0) from 116 to 150-190, (512, 0)
# +5 to +20%.
# Run from the repository root on the GPU machine after a build: B (default build/attnbench), W
# (default /tmp/abnarrow): window_tiles.json (the results), run.txt, ab.md (narrow over wide per
# case).
set -uo pipefail
W=${W:-/tmp/abnarrow}; mkdir -p $W
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-04-fwd-narrow-window
timeout 400 $B run $HERE/window_tiles.json --out $W/window_tiles.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 - "$W/window_tiles.json" > $W/ab.md <<'PY'
import json, statistics, sys
res = json.load(open(sys.argv[1]))
t = {}
for r in res["rows"]:
    if r["status"] == "pass" and r.get("tflops"):
        t[(r["case"], r["options"].get("wide_tiles", 0))] = r["tflops"]
print("# Narrow-window tiles (wide_tiles=0) against the wide ones (wide_tiles=1), forward TFLOP/s\n")
print("| case | narrow | wide | narrow / wide |\n|---|---|---|---|")
ratios = []
for case in sorted({k[0] for k in t}):
    n, w = t.get((case, 0)), t.get((case, 1))
    if n and w:
        ratios.append(n / w)
        print(f"| {case} | {n:.1f} | {w:.1f} | {n / w:.3f} |")
if ratios:
    print(f"\nAll rows: narrow/wide median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} ({len(ratios)} cases)")
PY
grep "All rows" $W/ab.md
