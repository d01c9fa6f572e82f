#!/usr/bin/env bash
# Issue 28 (and 30's varlen), forward step 24 (written 2026-12-07, session 66): O through each
# warpgroup's Q stage by TMA (o_tma=1) where it used to go from registers: the persistent kernel
# (which now holds its Q stage until the store has read it, K_0 loaded ahead of the Q rows) and
# varlen warpgroups whose 64 rows all lie in their sequence. One build, one run per config, row
# after row, o_tma=1 against o_tma=0 (the store before step 24):
#   o_tma_persistent.json    persistent=1, the FA3 grid's 36 forward rows;
#   o_tma_varlen.json        varlen, configs/varlen.json's lengths (64-4096), d64/128/256, causal
#                            and not (6 rows);
#   o_tma_varlen_short.json  varlen, sequences of 64-1024 (more tails), the same 6 shapes.
# Prediction (speed, o_tma=1 / 0): persistent 1.08-1.25 at 512 and 1.03-1.10 at 1k (step 20's
# dense gain there, where a tile's epilogue weighs most), 1.00-1.04 at 4k-16k (less: the held Q
# stage makes the next tile's Q wait for the store, which the register store did not); varlen
# 1.01-1.04 at 64-4096 (step 20's 2k-4k gain), 1.03-1.08 at 64-1024.
# Timed 2026-12-07 (session 66, an H100, c94d983; run-c94d983/ab.md): persistent class medians
# 1.011-1.089 (512: 0.99-1.21, d256 most); varlen 64-4096 1.011-1.073, 64-1024 1.052-1.118:
# kept (the default o_tma=1 covers both).
# Since step 26 (option o_buf, default 1: the persistent kernel's own O region at d64/d128),
# o_tma_persistent.json pins o_buf=0, so that a second run measures step 24's store as the first.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B (default
# build/attnbench), W (default /tmp/ab_o_smem): the results, run*.txt and ab.md.
set -uo pipefail
HERE=results/h200/ab/2026-12-07-fwd-o-smem
W=${W:-/tmp/ab_o_smem}; mkdir -p "$W"
B=${B:-build/attnbench}
: > "$W/ab.md"
for cfg in o_tma_persistent o_tma_varlen o_tma_varlen_short; do
  timeout 300 "$B" run "$HERE/$cfg.json" --out "$W/$cfg.json" > "$W/run_$cfg.txt" 2>&1
  echo "$cfg: run rc=$?"
  python3 scripts/option_ab.py "$W/$cfg.json" --option o_tma --impl cuda.flash_fwd_wgmma \
    --class d64=_d64_bf --class d64c=_d64_causal --class d128=_d128_bf --class d128c=_d128_causal \
    --class d256=_d256_bf --class d256c=_d256_causal --out "$W/ab_$cfg.md" > /dev/null
  { echo "## $cfg"; cat "$W/ab_$cfg.md"; echo; } >> "$W/ab.md"
  grep "All rows" "$W/ab_$cfg.md"
done
