#!/usr/bin/env bash
# Issue 27, step 1 of the Hopper backward (written 2026-12-02, not yet run): the tile's LSE·log2e
# and D rows in shared memory before the consumers need them (af0fca2: bulk-copied into the Q/dO
# stage by the producer; since c1d676f, which the tree this runs in holds: cp.async'd a tile ahead
# by one consumer warp into a double buffer, racecheck-clean) against af0fca2's parent
# (the consumers loading them from L2 after their Sᵀ/dPᵀ GEMMs), cuda.flash_bwd_wgmma on the FA3
# grid's backward rows at seq 2k-16k (d64, d128; causal and not; bf16), two rounds alternating,
# NEW verified on its first run. Prediction: the backward faster by 5-15% (one L2 round trip per
# query tile off the critical path of each consumer; 4 fewer kernels with spills), most at d64
# (128-row tiles: 16 loads a thread per tile before).
# Run from the repository root on the GPU machine (it builds both sides: ~3 min on 16 cores) with
# the parent's tree as a tarball in an ignored folder, made here and sent with `carry`:
#   mkdir -p build-ab && git archive af0fca2~1 | gzip > build-ab/bwd-base.tar.gz
# Outputs in $W (default /tmp/abbwd): base-K.json, new-K.json, ab.md (scripts/ab_summary.py).
set -uo pipefail
W=${W:-/tmp/abbwd}; mkdir -p $W
AB_BASE_REV=$(echo af0fca2~1) AB_NEW_REV=${AB_NEW_REV:-c1d676f} \
  scripts/gpu_ab.sh build-ab/bwd-base.tar.gz $W --rounds 2 --verify-new -- \
  configs/fa3_grid.json --impl cuda.flash_bwd_wgmma --pass bwd \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "ab rc=$?"; grep -i "all rows" $W/ab.md
