#!/usr/bin/env bash
# Issue 28, forward step 18 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma with the
# producer loading K one tile ahead of V (k_ahead=1, default: K_0, K_1, V_0, K_2, V_1, ..., the
# order in which the consumers wait for them) against each tile's K and V together (k_ahead=0,
# the order before), one build, one run, row after row: k_ahead.json (the FA3 grid's 36 forward
# rows). Only a block's start differs: S_1 no longer waits behind V_0's bytes.
# Prediction (speed, k_ahead=1 / 0): 1.00-1.04 at 512-2k (the fewer tiles a block has, the more:
# d128 causal and d256 most, d64's 16-KiB tiles least), 1.00-1.01 at 8k-16k, nowhere below 0.99.
# Measured (2026-12-07, an H100, 18e424b, one run, run-18e424b/): median 0.999, 0.973-1.050; 512
# 1.008-1.028 in five rows of six, elsewhere within one run's noise (d128 0.973-0.987 at 2k-8k,
# 1.022 at 16k). Kept (gated); a second and third run to settle d128.
# Timed again 2026-12-07 (session 66, an H100, c94d983; run-c94d983/ab.md): class medians
# 0.998-1.015 (0.942-1.055): within noise, d256 slightly above; stays 1.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-k-ahead k_ahead
