#!/usr/bin/env bash
# Issue 27 (and 30), backward steps 9 and 10 (written 2026-12-04, not yet run), against 7c85667 (the
# same kernels before them; docs/tuning_flash_wgmma.md):
#   step 9:  the dQ tile's shared-memory stores without bank conflicts (bwd_wgmma::dq_swizzle);
#   step 10: the preprocess (D = rowsum(dO ∘ O)) and postprocess (dQ from the accumulator) at
#            HBM speed: 16-byte accesses, a row per kLanes lanes, a block per token, no 64-bit
#            divisions per element. They cost the same per token at every seq (the FA3 grid keeps
#            16k tokens), so they matter most at 2k and in narrow windows.
# Same GPU job, two rounds alternating, NEW verified on its first run:
#   1. the FA3 grid's backward rows at seq 2k, 8k, 16k (d64, d128, d256; causal and not; bf16);
#   2. configs/softcap.json's backward rows at soft cap 30 (d128, d256; causal and not);
#   3. configs/window.json's backward rows at windows 128 and 512, seq 16k (d128; causal and not).
# Predictions (time NEW / BASE): step 9 alone 0.91-0.97 at d64/d128 and 0.93-0.98 at d256; step 10
# alone about -0.16 ms a row (pre + post from about 0.25 to 0.09 ms at 16k tokens): 0.86-0.91 at 2k,
# 0.95-0.97 at 8k, 0.97-0.99 at 16k (causal: more); so together 0.80-0.90 at 2k, 0.88-0.95 at 8k-16k;
# window (128, 128) 0.70-0.80. Attribution: ncu_job.sh's kernel durations (the main kernel at d128
# 16k against ncu-2026-12-04-66605db's, whose main kernels have 7c85667's SASS; pre/post against
# its 92 and 196 us).
# Run from the repository root on the GPU machine, with 7c85667's tree as a tarball:
#   mkdir -p build-ab && git archive 7c85667 -- . ':!results' | gzip > build-ab/bwd-7c85667.tar.gz
# (results/h200/issue27/session.sh with AB=1 AB_JOB=<this> AB_BASE_NAME=bwd-7c85667.tar.gz takes it
# from /tmp instead). Outputs in $W (default /tmp/abbwd9): dense/, softcap/ and window/ (gpu_ab.sh's
# files each), ab.md (the summaries).
set -uo pipefail
W=${W:-/tmp/abbwd9}; mkdir -p $W
BASE=${AB_BASE_SRC:-build-ab/bwd-7c85667.tar.gz}
export AB_BASE_REV=7c85667 AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
PARTS=()
# part NAME CONFIG CASE...: cuda.flash_bwd_wgmma's backward rows of CONFIG's CASEs, BASE against NEW.
part() {
  local name=$1 cfg=$2; shift 2
  local args=()
  for c in "$@"; do args+=(--case "$c"); done
  scripts/gpu_ab.sh "$BASE" "$W/$name" --rounds 2 --verify-new -- \
    "$cfg" --impl cuda.flash_bwd_wgmma --pass bwd "${args[@]}"
  echo "$name ab rc=$?"
  PARTS+=("$name")
}
part dense configs/fa3_grid.json '*_sq2048_*' '*_sq8192_*' '*_sq16384_*'
part softcap configs/softcap.json '*_softcap30'
part window configs/window.json 'b1_*_wl128_*' 'b1_*_wl512_*'
{
  echo "# Backward steps 9 and 10 against 7c85667"
  for name in "${PARTS[@]}"; do printf '\n## %s\n\n' "$name"; cat "$W/$name/ab.md" 2>/dev/null || echo "(no ab.md)"; done
} > $W/ab.md
grep -i "all rows" $W/ab.md
