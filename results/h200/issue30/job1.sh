#!/usr/bin/env bash
# Issue 30, first GPU run of the window and soft-cap kernels (f2bed29+): one job on the GPU
# machine, run from the repository root under setsid. (Issue 28's vote-early A/B was dropped from
# it: device time went to a helper's peer runs.)
#   1. build this tree (attnbench);
#   2. `attnbench check --impl 'cuda.*'` on the conformance suite's window and soft-cap cases;
#   3. timing, verification off (step 2 and step 6 verify): configs/window.json and
#      configs/softcap.json, forward and backward, for the kernels that declare the features, and
#      the fa3 grid's dense rows at seq >= 2k for the same kernels (their own dense TFLOP/s, same job);
#   4. check of the dense conformance suite on cuda.naive_3pass, the CUDA baseline, whose mask
#      changed (the dense kernels of the others have the SASS of e03b64e).
set -uo pipefail
W=/tmp/j1; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && time cmake --build build-gpu -j 16 --target attnbench ) > $W/logs/build.txt 2>&1 &
wait; el "builds done"; grep real $W/logs/build.txt
B=build-gpu/attnbench; [ -x $B ] || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }
timeout 240 $B check --impl 'cuda.*' --case '*_wl*' --case '*_wr*' --case '*softcap*' -q > $W/check_variants.txt 2>&1; el "check variants rc=$?"; tail -3 $W/check_variants.txt
VAR=(--impl cuda.flash_fwd_wgmma --impl cuda.flash_fwd_mma --impl cuda.flash_bwd_mma --pass fwd --pass bwd --verify off)
timeout 150 $B run configs/window.json "${VAR[@]}" --out $W/window.json > $W/logs/window.txt 2>&1; el "window rc=$?"
timeout 150 $B run configs/softcap.json "${VAR[@]}" --out $W/softcap.json > $W/logs/softcap.txt 2>&1; el "softcap rc=$?"
timeout 150 $B run configs/fa3_grid.json "${VAR[@]}" --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*' --out $W/dense.json > $W/logs/dense.txt 2>&1; el "dense rc=$?"
timeout 90 $B check --impl cuda.naive_3pass -q > $W/check_dense.txt 2>&1; el "check dense rc=$?"; tail -3 $W/check_dense.txt
el "job done"
