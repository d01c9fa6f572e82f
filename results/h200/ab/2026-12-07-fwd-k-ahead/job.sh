#!/usr/bin/env bash
# Issue 28, forward step 18 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma with the
# producer loading K one tile ahead of V (k_ahead=1, default: K_0, K_1, V_0, K_2, V_1, ..., the
# order in which the consumers wait for them) against each tile's K and V together (k_ahead=0,
# the order before), one build, one run, row after row: k_ahead.json (the FA3 grid's 36 forward
# rows). Only a block's start differs: S_1 no longer waits behind V_0's bytes.
# Prediction (speed, k_ahead=1 / 0): 1.00-1.04 at 512-2k (the fewer tiles a block has, the more:
# d128 causal and d256 most, d64's 16-KiB tiles least), 1.00-1.01 at 8k-16k, nowhere below 0.99.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B
# (default build/attnbench), W (default /tmp/abkahead): k_ahead.json (the results), run.txt, ab.md.
set -uo pipefail
W=${W:-/tmp/abkahead}; mkdir -p "$W"
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-07-fwd-k-ahead
timeout 420 "$B" run $HERE/k_ahead.json --out "$W/k_ahead.json" > "$W/run.txt" 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py "$W/k_ahead.json" --option k_ahead --impl cuda.flash_fwd_wgmma \
  --class d64=_d64_bf --class d64c=_d64_causal --class d128=_d128_bf --class d128c=_d128_causal \
  --class d256=_d256_bf --class d256c=_d256_causal --out "$W/ab.md" > /dev/null
grep "All rows" "$W/ab.md"
