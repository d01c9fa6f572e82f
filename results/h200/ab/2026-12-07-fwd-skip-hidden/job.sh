#!/usr/bin/env bash
# Issue 28, forward step 17 (written 2026-12-07, session 63): cuda.flash_fwd_wgmma with each
# consumer warpgroup skipping the block's tiles hidden from all its rows (skip_hidden=1, default)
# against computing them masked (skip_hidden=0), one build, one run, row after row:
# skip_hidden.json (the FA3 grid's causal forward rows; d128 is the control: no hidden tiles).
# Prediction (speed, skip_hidden=1 / 0): d64 causal 1.08-1.11 at 512, 1.03-1.05 at 2k, 1.01-1.03 at
# 4k, 1.00-1.02 at 8k-16k; d256 causal 1.05-1.1 at 512, 1.02-1.03 at 2k, ~1.01 at 4k-16k; d128
# 0.99-1.01.
# Measured (2026-12-07, an H100, three runs on the tree of 940140e plus step 17, run1-run3/):
# d64 1.111-1.113 at 512, 1.109-1.119 at 1k, 1.051-1.054 at 2k, 1.025-1.047 at 4k, 1.001-1.025 at 8k-16k; d256
# 1.038-1.048 at 512, 1.026-1.031 at 1k, 1.019-1.028 at 2k, 0.962-1.011 at 4k-16k; d128 0.984-1.013. Kept.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B
# (default build/attnbench), W (default /tmp/abskip): skip_hidden.json (the results), run.txt, ab.md.
set -uo pipefail
W=${W:-/tmp/abskip}; mkdir -p "$W"
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-07-fwd-skip-hidden
timeout 420 "$B" run $HERE/skip_hidden.json --out "$W/skip_hidden.json" > "$W/run.txt" 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py "$W/skip_hidden.json" --option skip_hidden --impl cuda.flash_fwd_wgmma \
  --class d64=_d64_ --class d128=_d128_ --class d256=_d256_ \
  --out "$W/ab.md" > /dev/null
grep "All rows" "$W/ab.md"
