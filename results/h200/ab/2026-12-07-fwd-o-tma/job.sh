#!/usr/bin/env bash
# Issue 28, forward step 20 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma storing O by
# TMA through the Q stage (o_tma=1, default) against from registers (o_tma=0), one build, one
# run, row after row: o_tma.json (the FA3 grid's 36 forward rows).
# Prediction (speed, o_tma=1 / o_tma=0, so below 1 where the register store wins): d256 0.94-0.98
# at 2k and d128 0.96-0.99 if the TMA store's read wait is the block's fixed cost the 2026-12-07
# profile points at, 0.99-1.00 at 16k; about 1.00 everywhere if the wait only moves to the
# registers' stores.
# Timed 2026-12-07 (session 65, an H100, c93de73; run-c93de73/ab.md): o_tma=1 / 0 1.02-1.07 class
# medians, 1.09-1.28 at 512: the prediction was wrong the other way (the TMA store wins); default
# stays 1.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-o-tma o_tma
