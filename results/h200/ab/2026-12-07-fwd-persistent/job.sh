#!/usr/bin/env bash
# Issue 28, forward steps 25 and 26 (written 2026-12-07, session 66): the persistent kernel on
# keys128's 128 x 128 tiles at dense d128 non-causal (step 25), its O staged in a region of its own
# (step 26), and persistent=1 against the default after steps 24-26, each in one run, row after
# row, on one build:
#   keys128_persistent.json  persistent=1, keys128=1 / 0: the FA3 grid's 12 d128 forward rows
#                            (causal: the control);
#   o_buf_persistent.json    persistent=1, o_buf=1 / 0: the FA3 grid's 36 forward rows (d256:
#                            the control);
#   persistent.json          persistent=1 / 0: the FA3 grid's 36 forward rows.
# Prediction (speed): keys128 with persistent=1, non-causal, as step 23's without it: 1.02-1.04
# at 512-2k, 0.99-1.01 at 8k-16k; causal 1.000 +- noise. o_buf=1 / 0 under persistent=1: d64 and
# d128 1.02-1.05 (the epilogue's store read and the next tile's Q load off the consumers' path:
# about a tile of a block's 3-4 tiles of fixed cost), causal more than non-causal (shorter
# blocks), 512-2k more than 8k-16k; d256 1.000. persistent=1 / 0 (session 66 compared step 24's
# persistent across two runs only: 1.03-1.13 at 512, 0.93-1.00 at 2k-16k): with step 26, 1.03-1.12
# at 512-1k and 0.97-1.03 at 2k-16k at d64/d128, d256 as before (0.93-1.00).
# Timed 2026-12-07 (session 67, an H100, 6afe9b7; run-6afe9b7/ab.md; every row verified): the
# loop ran persistent, o_buf, keys128 (the last cut at 22 of 24 rows by the session's end of
# device time: keys128_persistent.json.gz is the unfinished file, ab_keys128_persistent.md made
# from it here). persistent=1 / 0: 512 1.111-1.280 at d64/d128 (d256 1.005/1.030), 1k
# 1.034-1.098 (d256 1.000/1.006), 2k-16k 0.928-1.017 (class medians 0.963-1.004): a block per
# tile stays at 2k-16k, and the default becomes persistent at most 1024 queries and keys (forward
# step 27). o_buf=1 / 0 under persistent=1: class medians d64 1.008, d64c 1.009, d128 1.021,
# d128c 1.010 (512: 1.049-1.146), d256 control 0.995/0.997: met at 512-1k, about 1.00-1.02 at
# 2k-16k (predicted 1.02-1.05). keys128=1 / 0 under persistent=1: 512 1.072, 1k 1.034, 2k 1.007,
# 4k 0.993, 8k 0.968, 16k 0.978; causal control 0.992-1.004 (predicted 1.02-1.04 at 512-2k,
# 0.99-1.01 at 8k-16k: 8k-16k lost 2-3%; the persistent kernel at d128 runs only up to 1k by
# default now, where keys128 wins).
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B (default
# build/attnbench), W (default /tmp/ab_persistent): the results, run_*.txt and ab.md.
set -uo pipefail
HERE=results/h200/ab/2026-12-07-fwd-persistent
W=${W:-/tmp/ab_persistent}; mkdir -p "$W"
B=${B:-build/attnbench}
: > "$W/ab.md"
for pair in persistent:persistent o_buf_persistent:o_buf keys128_persistent:keys128; do
  cfg=${pair%%:*} opt=${pair#*:}
  timeout 300 "$B" run "$HERE/$cfg.json" --out "$W/$cfg.json" > "$W/run_$cfg.txt" 2>&1
  echo "$cfg: run rc=$?"
  python3 scripts/option_ab.py "$W/$cfg.json" --option "$opt" --impl cuda.flash_fwd_wgmma \
    --class d64=_d64_bf --class d64c=_d64_causal --class d128=_d128_bf --class d128c=_d128_causal \
    --class d256=_d256_bf --class d256c=_d256_causal --out "$W/ab_$cfg.md" > /dev/null
  { echo "## $cfg"; cat "$W/ab_$cfg.md"; echo; } >> "$W/ab.md"
  grep "All rows" "$W/ab_$cfg.md"
done
