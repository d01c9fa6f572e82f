#!/usr/bin/env bash
# Issue 28, forward step 23 (written 2026-12-07, session 65): cuda.flash_fwd_wgmma's dense d128
# non-causal forward on 128 x 128 tiles (keys128=1) against 128 x 176 (keys128=0, default), one
# build, one run, row after row: keys128.json (the FA3 grid's 12 d128 forward rows; the causal
# ones, on 128 x 128 tiles either way, are the control).
# Prediction (speed, keys128=1 / 0, non-causal): 0.97-1.03. Step 2 measured 176 keys +3% over 128
# before steps 3-22; the 2026-12-07 profile had ours at 19.9 SM-cycles a key on 176-key tiles and
# FA4 at 18.9 on 128-key ones, and 176-key tiles waste 3.1% of their keys past seq_kv at 512-4k
# (none at 128). Above 1.00 at 512-4k if the waste and the register pressure of S (88 registers)
# outweigh the fewer hand-offs per key; causal 1.000 +- noise.
# Timed 2026-12-07 (session 65, an H100, c93de73; run-c93de73/ab.md): non-causal 1.042, 1.036,
# 1.033, 1.016, 1.005, 0.992 at 512-16k, causal control 0.991-1.015: met; the default is keys128=1 since.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-keys128 keys128
