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
# (default /tmp/abbwdnarrow): window_tiles.json (the results), run.txt, ab.md (scripts/option_ab.py:
# wide_tiles=1 / wide_tiles=0 per case, below 1 where the narrow tiles are faster, and each over
# cuDNN).
set -uo pipefail
W=${W:-/tmp/abbwdnarrow}; mkdir -p $W
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-05-bwd-narrow-window
timeout 420 $B run $HERE/window_tiles.json --out $W/window_tiles.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py $W/window_tiles.json --option wide_tiles --impl cuda.flash_bwd_wgmma \
  --peer cuda.cudnn_sdpa --class causal=_causal_ --out $W/ab.md > /dev/null
grep "All rows" $W/ab.md
