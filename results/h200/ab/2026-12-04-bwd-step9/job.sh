#!/usr/bin/env bash
# Issue 27, backward step 9 (written 2026-12-04, not yet run): cuda.flash_bwd_wgmma's dQ tile
# stored to shared memory with 64-bit stores into XOR-swizzled columns (bwd_wgmma::dq_swizzle;
# docs/tuning_flash_wgmma.md, "Backward step 9") against 7c85667 (the same kernels with scalar
# stores into plain rows: 8-way bank conflicts, 21% of the main kernel's shared wavefronts in the
# ncu profile of 4eb9745). Same GPU job, two rounds alternating, NEW verified on its first run:
#   1. the FA3 grid's backward rows at seq 2k, 8k, 16k (d64, d128, d256; causal and not; bf16);
#   2. configs/softcap.json's backward rows at soft cap 30 (d128, d256; causal and not).
# Predictions (time NEW / BASE): d64 and d128 0.91-0.97 (+3 to +10%), d256 0.93-0.98, soft cap
# like its head_dim. No control: every row stores a dQ tile.
# Run from the repository root on the GPU machine, with 7c85667's tree as a tarball:
#   mkdir -p build-ab && git archive 7c85667 -- . ':!results' | gzip > build-ab/bwd-7c85667.tar.gz
# (results/h200/issue27/session.sh with AB=1 AB_JOB=<this> AB_BASE_NAME=bwd-7c85667.tar.gz takes it
# from /tmp instead). Outputs in $W (default /tmp/abbwd9): dense/ and softcap/ (gpu_ab.sh's files
# each), ab.md (both summaries).
set -uo pipefail
W=${W:-/tmp/abbwd9}; mkdir -p $W
BASE=${AB_BASE_SRC:-build-ab/bwd-7c85667.tar.gz}
export AB_BASE_REV=7c85667 AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
scripts/gpu_ab.sh "$BASE" $W/dense --rounds 2 --verify-new -- \
  configs/fa3_grid.json --impl cuda.flash_bwd_wgmma --pass bwd \
  --case '*_sq2048_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "dense ab rc=$?"
scripts/gpu_ab.sh "$BASE" $W/softcap --rounds 2 --verify-new -- \
  configs/softcap.json --impl cuda.flash_bwd_wgmma --pass bwd --case '*_softcap30'
echo "softcap ab rc=$?"
{ echo "# Backward step 9 against 7c85667"; echo
  for part in dense softcap; do echo "## $part"; echo; cat $W/$part/ab.md 2>/dev/null || echo "(no ab.md)"; echo; done
} > $W/ab.md
grep -i "all rows" $W/ab.md
