#!/usr/bin/env bash
# Issue 28, forward step 28 (written 2026-12-07, session 68): fused_tail=1 (each tile's P V wait,
# O's rescale and P's conversion scheduled among its exponentials, FA4's order) against the
# default on the d128 forward rows, now that fused_tail=1 keeps dense non-causal on the 128-key
# tiles (before step 28 it fell back to 128 x 176, so step 15's timing never saw this kernel).
# One build, one run, row after row: fused_tail.json (the FA3 grid's 12 d128 forward rows;
# 512 and 1k run the persistent schedule, which the option leaves alone: the control).
# Prediction (speed, fused_tail=1 / 0): non-causal 2k-16k 1.00-1.03, causal 0.99-1.02 (step 15
# measured 0.992-1.023 at d128 on these causal tiles); controls 1.000 +- noise. Why: the
# 805e194 profile puts our d128 non-causal kernel at 1.079-1.093 of FA4's SM cycles with the
# same instructions a tile; the default issues 55 of the 64 MUFU.EX2 back to back with only
# FADDs between them, then waits for the P V GEMM, rescales O (31% of the tiles) and converts P
# (32 F2FP), where FA4 issues the rescale and the conversion in the SFU's shadow.
# Timed 2026-12-07 (session 68, an H100, d9f7afc; run-d9f7afc/ab.md, every row verified, 24
# pass): non-causal 2k/4k/8k/16k 1.033/1.024/1.028/1.042, causal 1.016/1.016/1.027/1.011,
# control (512-1k, persistent) 0.992-1.005. Met (16k and causal 8k a little above the range):
# fused_tail unset is 1 for dense and causal d128 since (forward step 28). The job names both
# values, so it still measures the same pair. Second run 2026-12-08 (session 69, an H100, 4c77e95;
# run-4c77e95/): non-causal 1.027/1.038/1.029/1.045, causal 1.024/1.018/1.021/1.031, control
# 0.994-0.999.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>):
# results/h200/ab/forward_option_job.sh runs it (B, W: its header).
exec bash results/h200/ab/forward_option_job.sh results/h200/ab/2026-12-07-fwd-fused-tail-128 fused_tail
