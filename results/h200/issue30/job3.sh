#!/usr/bin/env bash
# Issue 30, the next GPU run (written 2026-12-02, not yet run): the window and soft-cap configs
# with their peers in ONE job, verified, for the acceptance; run from the repository root
# under setsid AFTER two back-to-back calls have put FA4 in /tmp/fa4site (../shared/peers/README.md).
#   1. build this tree (attnbench target, WERROR off: the gate builds with it);
#   2. attnbench on configs/window.json and configs/softcap.json, every CUDA implementation, every
#      pass, verification auto (sampled at these sizes: the first verified rows at full size);
#   3. the peers on the same configs in the same job: FA4 (window_size / softcap) and
#      FlexAttention (torch.flex_attention), PyTorch SDPA's SKIP rows with their reason;
#   4. the fa3 grid's dense d128/d256 rows of the same kernels (their own dense TFLOP/s, same job).
# Then (not here): the README section from these files, and the gate of the final revision.
# Time: about 2 min build, ~3 min attnbench (verification on), peers ~4-6 min (flex compiles a
# kernel per case): longer than one call; collect with a second call while the machine is warm.
set -uo pipefail
W=/tmp/j3; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" && time cmake --build build-gpu -j 16 --target attnbench attnbench_capi ) > $W/logs/build.txt 2>&1
B=build-gpu/attnbench; [ -x $B ] || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }; el "build done"
for c in window softcap; do
  timeout 400 $B run configs/$c.json --out $W/$c.json > $W/logs/$c.txt 2>&1; el "attnbench $c rc=$?"
done
timeout 120 $B run configs/fa3_grid.json --impl cuda.flash_fwd_wgmma --impl cuda.flash_fwd_mma --impl cuda.flash_bwd_mma --impl cuda.cudnn_sdpa \
  --pass fwd --pass bwd --case '*_sq2048_*d128*' --case '*_sq4096_*d128*' --case '*_sq8192_*d128*' --case '*_sq16384_*d128*' \
  --case '*_sq2048_*d256*' --case '*_sq8192_*d256*' --case '*_sq16384_*d256*' --verify off --out $W/dense.json > $W/logs/dense.txt 2>&1; el "dense rc=$?"
for c in window softcap; do
  timeout 900 python3 scripts/peers/peers.py configs/$c.json --peers fa4,torch_sdpa,flex --fa4-site /tmp/fa4site \
    --attnbench $B --out $W/$c.peers.json > $W/logs/$c.peers.txt 2>&1; el "peers $c rc=$?"
done
el "job done"
