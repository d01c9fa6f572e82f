#!/usr/bin/env bash
# Issue 28, forward step 19 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma with the four
# tensor maps prefetched at a block's start (prefetch=1, default) against none (prefetch=0), one
# build, one run, row after row: prefetch.json (the FA3 grid's 36 forward rows).
# Prediction (speed, prefetch=1 / 0): 1.01-1.03 at 2k if the maps miss the descriptor cache at a
# block's start (d256 most), under 1.005 at 16k; else 1.000 +- noise everywhere.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-prefetch prefetch
