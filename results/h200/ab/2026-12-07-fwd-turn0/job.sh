#!/usr/bin/env bash
# Issue 28, forward step 21 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma issuing each
# consumer's first S GEMM of a block on its pingpong turn (turn0=1) against at once (turn0=0,
# default), one build, one run, row after row: turn0.json (the FA3 grid's 36 forward rows; d256
# has no pingpong: a control).
# Prediction (speed, turn0=1 / 0): d128 and d64 1.005-1.02 at 512-2k, 1.000-1.005 at 8k-16k (one
# softmax under the other consumer's S_0 at each block's start, at most about 0.3 of a tile's
# time); d256 1.000 +- noise.
# Timed 2026-12-07 (session 65, an H100, c93de73; run-c93de73/ab.md): d64/d128 0.970-1.039 (class
# medians 1.003-1.010) with the d256 control at 0.984-1.041 in the same run: not shown; default stays
# 0, a second run wanted.
# Timed again 2026-12-07 (session 66, an H100, c94d983; run-c94d983/ab.md): class medians
# 0.995-1.012, d256 control 0.932-1.003: no gain in two runs. The option was removed after this
# run (forward step 25's commit), so this job no longer runs against HEAD (flash_fwd_wgmma rejects
# an unknown option).
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-turn0 turn0
