#!/usr/bin/env bash
# Issue 27, backward step 27 (written 2026-12-07, session 67): the 80 x 128 tiles of the d128 dense
# non-causal backward (option m_tile=80) against the 64 x 128 tiles (m_tile=64, the default), one
# run, row after row, on one build:
#   m_tile.json   the FA3 grid's 12 d128 backward rows, non-causal and causal (causal: the control,
#                 the option is ignored there).
# Prediction (speed; tuning log "Backward step 27"): non-causal 1.03-1.08 (the per-tile hand-offs'
# share falls by a fifth, larger N for the Sᵀ and dPᵀ GEMMs), causal 1.000 +- noise.
# Timed 2026-12-07 (session 67, an H100, 6afe9b7; run-6afe9b7/ab.md; every row verified, 24 pass):
# non-causal 2k/4k/8k/16k 1.014/1.011/1.024/1.014, 1k 0.985, 512 0.915 (class median 1.012);
# causal control 0.994-1.005. Below the prediction (1.03-1.08 at any size); the default stays 64.
# Timed again 2026-12-07 (session 68, an H100, 805e194 after its gate, workspaces padded to 320
# rows; run-805e194/ab.md; 24 pass): non-causal 2k/4k/8k/16k 1.019/1.015/1.037/1.051, 1k 0.989,
# 512 0.909; causal control 0.990-1.003. Both runs above 1 at 2k-16k and below at 512-1k: m_tile
# unset now takes the 80-row tiles from 2048 query rows up (backward step 28); this job names
# both values, so it still measures the same pair. Third run 2026-12-08 (session 69, an H100,
# 4c77e95; run-4c77e95/; 24 pass): 2k/4k/8k/16k 1.008/1.047/1.034/1.062, 1k 0.996, 512 0.910;
# causal control 0.976-1.008.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B (default
# build/attnbench), W (default /tmp/ab_m_tile): the results, run_*.txt and ab.md.
set -uo pipefail
HERE=results/h200/ab/2026-12-07-bwd-m-tile
W=${W:-/tmp/ab_m_tile}; mkdir -p "$W"
B=${B:-build/attnbench}
: > "$W/ab.md"
for pair in m_tile:m_tile; do
  cfg=${pair%%:*} opt=${pair#*:}
  timeout 300 "$B" run "$HERE/$cfg.json" --out "$W/$cfg.json" > "$W/run_$cfg.txt" 2>&1
  echo "$cfg: run rc=$?"
  python3 scripts/option_ab.py "$W/$cfg.json" --option "$opt" --base 64 --impl cuda.flash_bwd_wgmma \
    --class d128=_d128_bf --class d128c=_d128_causal --out "$W/ab_$cfg.md" > /dev/null
  { echo "## $cfg"; cat "$W/ab_$cfg.md"; echo; } >> "$W/ab.md"
  grep "All rows" "$W/ab_$cfg.md"
done
