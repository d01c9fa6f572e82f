#!/usr/bin/env bash
# Issue 27 (and 30), backward steps 7 and 8 (written 2026-12-04, not yet run): cuda.flash_bwd_wgmma's
# dK GEMM reads dSᵀ from shared memory (SS-wgmma) instead of registers (step 7), and stays in
# flight into the next query tile (step 8); docs/tuning_flash_wgmma.md. Against 66605db (the
# gated revision before them), same GPU job, two rounds alternating, NEW verified on its first run:
#   1. the FA3 grid's backward rows at seq 2k, 8k, 16k (d64, d128, d256; causal and not; bf16);
#   2. configs/softcap.json's backward rows at soft cap 30 (d128, d256; causal and not).
# d256 (kSplitCols) does not take either step: its rows are the control (expected 1.00 ± 0.02).
# Predictions: dense d64 and d128 +0 to +8% (step 7 alone -3 to +1%: 8 KiB more shared-memory
# reads per consumer and tile; step 8 +3 to +8%); soft cap d128 +20 to +30% (ptxas no longer
# serializes those kernels' wgmma: job5 measured them at 0.74-0.78 of the dense backward).
# Run from the repository root on the GPU machine, with 66605db's tree as a tarball:
#   mkdir -p build-ab && git archive 66605db -- . ':!results' | gzip > build-ab/bwd-66605db.tar.gz
# (results/h200/issue27/session.sh with AB=1 AB_JOB=<this> AB_BASE_NAME=bwd-66605db.tar.gz takes it
# from /tmp instead, sent with its second call). Outputs in $W (default /tmp/abbwd78): dense/ and
# softcap/ (gpu_ab.sh's files each), ab.md (both summaries).
set -uo pipefail
W=${W:-/tmp/abbwd78}; mkdir -p $W
BASE=${AB_BASE_SRC:-build-ab/bwd-66605db.tar.gz}
export AB_BASE_REV=66605db AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
scripts/gpu_ab.sh "$BASE" $W/dense --rounds 2 --verify-new -- \
  configs/fa3_grid.json --impl cuda.flash_bwd_wgmma --pass bwd \
  --case '*_sq2048_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "dense ab rc=$?"
scripts/gpu_ab.sh "$BASE" $W/softcap --rounds 2 --verify-new -- \
  configs/softcap.json --impl cuda.flash_bwd_wgmma --pass bwd --case '*_softcap30'
echo "softcap ab rc=$?"
{ echo "# Backward steps 7 and 8 against 66605db"; echo
  for part in dense softcap; do echo "## $part"; echo; cat $W/$part/ab.md 2>/dev/null || echo "(no ab.md)"; echo; done
} > $W/ab.md
grep -i "all rows" $W/ab.md
