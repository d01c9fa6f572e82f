#!/usr/bin/env bash
# Issue 28, forward step 19 (written 2026-12-07, session 64): cuda.flash_fwd_wgmma with the four
# tensor maps prefetched at a block's start (prefetch=1, default) against none (prefetch=0), one
# build, one run, row after row: prefetch.json (the FA3 grid's 36 forward rows).
# Prediction (speed, prefetch=1 / 0): 1.01-1.03 at 2k if the maps miss the descriptor cache at a
# block's start (d256 most), under 1.005 at 16k; else 1.000 +- noise everywhere.
# Timed 2026-12-07 (session 65, an H100, c93de73; run-c93de73/ab.md): class medians 0.991-1.002
# (d256 0.978-1.000): no gain; the option was removed after this run, so this job no longer runs
# against HEAD (flash_fwd_wgmma rejects an unknown option).
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-prefetch prefetch
