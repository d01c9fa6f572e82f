#!/usr/bin/env bash
# Issue 28 (written 2026-12-08, session 69): fused_tail=1 (each tile's P V wait, O's rescale where
# it is late, and P's conversion scheduled among its exponentials) against fused_tail=0 at d64
# and d256, on today's tiles. Step 15 timed it there on 2026-12-05 within noise (0.96-1.03x) and
# fused_auto() leaves it off; since then the d128 kernel gained 1-4% from it (step 28), and the
# d64 and d256 kernels changed (steps 17-27). One build, one run, row after row: fused_tail.json
# (the FA3 grid's d64 and d256 forward rows at 1k-16k, causal and not; 1k runs the persistent
# schedule, which the option leaves alone: the control).
# Prediction (speed, fused_tail=1 / 0): d64 non-causal and causal 0.99-1.03 (64 exponentials a
# row-tile like d128's 128-key tiles, three consumers to hide them); d256 0.99-1.02 (its O rescale
# already runs early under the next S GEMM, so the tail is the P V wait and 20 F2FP); control
# 1.000 +- noise. A class that gains more than 2% with nothing losing more than 1% gets the default.
# Timed 2026-12-08 (session 69, an H100, 4c77e95, two runs on one build: run-4c77e95/ and
# run-4c77e95-second/, every row verified): d64 1.016-1.041 non-causal and 1.007-1.039 causal at
# 2k-16k; d256 0.996-1.028 and 0.970-1.020 (medians 1.00-1.01); control 0.992-1.003. d64 met
# (above the range in two cells) and takes fused_tail=1 by default since (forward step 29); d256
# stays 0.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-08-fwd-fused-tail-d64-d256 fused_tail
