#!/usr/bin/env bash
# Issue 27, backward step 4 (written 2026-12-03, not yet run): FlashAttention-3's order within a
# query tile and the dQ writer warps (0612e7c, 15e1e80; docs/tuning_flash_wgmma.md, "Backward
# step 4") against step 3 (dcbd94a: the same kernel before the reorder, d256 and the variants
# already in), cuda.flash_bwd_wgmma on the FA3 grid's backward rows at seq 2k-16k (d64, d128,
# d256; causal and not; bf16), two rounds alternating, NEW verified on its first run.
# Prediction: +10-25% at d64 and d128, less at d256. Run it only if the session's FA3 grid job
# (results/h200/issue27/session.sh) shows the backward slower than b467d5b's or than predicted:
# it separates step 4 from the rest.
# Run from the repository root on the GPU machine (it builds both sides: ~3-4 min on 16 cores)
# with step 3's tree as a tarball in an ignored folder, made here and sent with `carry`:
#   mkdir -p build-ab && git archive dcbd94a | gzip > build-ab/bwd-step3.tar.gz
# Outputs in $W (default /tmp/abbwd4): base-K.json, new-K.json, ab.md (scripts/ab_summary.py).
set -uo pipefail
W=${W:-/tmp/abbwd4}; mkdir -p $W
AB_BASE_REV=dcbd94a AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}} \
  scripts/gpu_ab.sh build-ab/bwd-step3.tar.gz $W --rounds 2 --verify-new -- \
  configs/fa3_grid.json --impl cuda.flash_bwd_wgmma --pass bwd \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "ab rc=$?"; grep -i "all rows" $W/ab.md
