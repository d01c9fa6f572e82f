#!/usr/bin/env bash
# Issue 30, the acceptance run (written 2026-12-02): the window, soft-cap and varlen configs with
# their peers in ONE job, for the results files; run from the repository root under
# setsid AFTER two back-to-back calls have put FA4 in /tmp/fa4site (../shared/peers/README.md).
#   1. the gate's build when it ran just before on the same machine, else a build of this tree;
#   2. (CHECK=1) `attnbench check --impl 'cuda.*'` on the conformance suite's window, soft-cap and
#      varlen cases (the gate's check covers them when it ran);
#   3. attnbench on configs/window.json, softcap.json and varlen.json, the CUDA implementations
#      that declare them (not the naive baseline's timing), every pass, verification auto
#      (window/softcap: sampled; varlen: always full);
#   4. the fa3 grid's dense d128/d256 rows of the same kernels at seq >= 2k (each kernel's own
#      dense TFLOP/s, same job), --verify off;
#   5. the peers on the same three configs, each right after our rows of it: FA4 (window_size /
#      softcap / cu_seqlens) and PyTorch SDPA (its SKIP rows say why); FlexAttention
#      (torch.flex_attention) in files of its own, last, with FLEX=1. CONFIGS picks the configs.
# Progress in $W/progress.txt; everything under $W (default /tmp/j3). Two calls: the first starts
# it and waits, the second collects (the machine must stay warm in between).
set -uo pipefail
W=${W:-/tmp/j3}; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
# The build: the gate's (GATE_BUILD=$PWD/build, every target, Release, WERROR), when this runs
# right after it on the same warm machine; else this tree is built here.
attn_job_build $W/logs/build.txt || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }; el "build: $B"
if [ -n "${CHECK:-}" ]; then
  timeout 300 $B check --impl 'cuda.*' --case '*_wl*' --case '*_wr*' --case '*_softcap*' --case '*_varlen_*' -q > $W/check_variants.txt 2>&1
  el "check variants rc=$?"
fi
# The implementations that declare the variants, not the naive baseline: it stays the
# verification baseline, but timing it at these sizes (seconds a call) took 7 of the first run's
# 8.5 minutes on window.json (2026-12-02, job3/progress.txt).
# J3_IMPLS (names, space-separated) narrows them where device time is short, e.g. to the Hopper
# kernels and cuDNN: J3_IMPLS="cuda.flash_fwd_wgmma cuda.flash_bwd_wgmma cuda.cudnn_sdpa".
IMPLS=()
for i in ${J3_IMPLS:-cuda.flash_fwd_wgmma cuda.flash_fwd_mma cuda.flash_bwd_mma cuda.flash_bwd_wgmma cuda.cudnn_sdpa}; do
  IMPLS+=(--impl "$i")
done
# Per config: our kernels, then FA4 (and SDPA's SKIP rows) on the same cases, so that a job cut
# short by the device budget still leaves same-job pairs; softcap and window first (varlen's own
# rows were measured in the first job3). Then the dense rows; FlexAttention (a compile per case)
# last, and only with FLEX=1.
for c in ${CONFIGS:-softcap window varlen}; do
  timeout 600 $B run configs/$c.json "${IMPLS[@]}" --out $W/$c.json > $W/logs/$c.txt 2>&1; el "attnbench $c rc=$?"
  timeout 600 python3 scripts/peers/peers.py configs/$c.json --peers fa4,torch_sdpa --fa4-site /tmp/fa4site \
    --attnbench $B --out $W/$c.peers.json > $W/logs/$c.peers.txt 2>&1; el "peers $c rc=$?"
done
timeout 180 $B run configs/fa3_grid.json --impl cuda.flash_fwd_wgmma --impl cuda.flash_fwd_mma --impl cuda.flash_bwd_mma --impl cuda.flash_bwd_wgmma --impl cuda.cudnn_sdpa \
  --pass fwd --pass bwd --case '*_sq2048_*d128*' --case '*_sq4096_*d128*' --case '*_sq8192_*d128*' --case '*_sq16384_*d128*' \
  --case '*_sq2048_*d256*' --case '*_sq8192_*d256*' --case '*_sq16384_*d256*' --verify off --out $W/dense.json > $W/logs/dense.txt 2>&1; el "dense rc=$?"
if [ -n "${FLEX:-}" ]; then
  for c in ${CONFIGS:-softcap window varlen}; do
    timeout 600 python3 scripts/peers/peers.py configs/$c.json --peers flex \
      --attnbench $B --out $W/$c.flex.json > $W/logs/$c.flex.txt 2>&1; el "flex $c rc=$?"
  done
fi
args=(); for c in ${CONFIGS:-softcap window varlen}; do [ -f $W/$c.json ] && [ -f $W/$c.peers.json ] && args+=($W/$c.json $W/$c.peers.json); done
[ -f $W/dense.json ] && [ ${#args[@]} -gt 0 ] && python3 scripts/variants_summary.py --dense $W/dense.json "${args[@]}" > $W/variants_summary.md 2>&1
el "job done"
