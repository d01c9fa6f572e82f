#!/usr/bin/env bash
# Issue 28, forward step 22 (written 2026-12-07, session 65): cuda.flash_fwd_wgmma with a Q
# mbarrier per consumer's 64 rows, K_0 loaded between the first consumer's rows and the others'
# (q_split=1), against one barrier for the whole Q tile (q_split=0, default), one build, one run,
# row after row: q_split.json (the FA3 grid's 36 forward rows).
# Prediction (speed, q_split=1 / 0): d256 1.01-1.03 at 512-2k (the first consumer's S_0 waits for
# 32 KiB of Q and K_0 instead of 64 KiB and K_0: the 2026-12-07 profile put about 0.9 of a
# tile's time of a d256 block in the Q wait), d128 1.005-1.015 there, 1.000 +- noise at 8k-16k
# (a block's start is a small share of its time).
# Timed 2026-12-07 (session 65, an H100, c93de73; run-c93de73/ab.md): 1.015-1.062 at 512-1k (all 12
# cells), 0.98-1.02 at 2k-16k: met; the default is q_split=1 since.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-q-split q_split
