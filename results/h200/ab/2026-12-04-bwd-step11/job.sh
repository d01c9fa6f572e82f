#!/usr/bin/env bash
# Issue 27, backward step 11 (written 2026-12-04, not yet run): the main kernel's blocks in
# block_coords' grouped order (causal longest first within each group of pairs), against d79c984
# (the same kernels in the old order; docs/tuning_flash_wgmma.md, "Backward step 11").
# Same GPU job, two rounds alternating, NEW verified on its first run (the grid's 24 bwd rows:
# seq 2k, 4k, 8k, 16k; d64, d128, d256; causal and not; bf16), then configs/tune_bwd_wgmma.json's
# causal rows at 2k, 8k and 16k in both dQ modes (deterministic 0 and 1: a pair's key blocks
# still add into dQ in the same order, but now they start in that order too).
# Predictions (time NEW / BASE): causal d128 and d256 at 2k-4k (d128 8k too) 0.93-0.97; causal
# d64 2k-8k 0.96-0.99; 16k and every non-causal row 0.99-1.01 (results/h200/issue27/
# block_order_model.py: the grid's tail in a list-scheduling model).
# Run from the repository root on the GPU machine, with d79c984's tree as a tarball:
#   mkdir -p build-ab && git archive d79c984 -- . ':!results' | gzip > build-ab/bwd-d79c984.tar.gz
# Outputs in $W (default /tmp/abbwd11): dense/, det/ (gpu_ab.sh's files each), ab.md (both
# summaries) and ab.tgz (all of it: the device tool returns at most 8 files from $OUT).
set -uo pipefail
W=${W:-/tmp/abbwd11}; mkdir -p $W
BASE=${AB_BASE_SRC:-build-ab/bwd-d79c984.tar.gz}
export AB_BASE_REV=d79c984 AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
PARTS=()
# part NAME CONFIG EXTRA_ARGS...: cuda.flash_bwd_wgmma's backward rows, BASE against NEW.
part() {
  local name=$1 cfg=$2; shift 2
  scripts/gpu_ab.sh "$BASE" "$W/$name" --rounds 2 --verify-new -- \
    "$cfg" --impl cuda.flash_bwd_wgmma --pass bwd "$@"
  echo "$name ab rc=$?"
  PARTS+=("$name")
}
part grid configs/fa3_grid.json --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
part det configs/tune_bwd_wgmma.json --case '*causal*'
{
  echo "# Backward step 11 (launch order) against d79c984"
  for name in "${PARTS[@]}"; do printf '\n## %s\n\n' "$name"; cat "$W/$name/ab.md" 2>/dev/null || echo "(no ab.md)"; done
} > $W/ab.md
tar -C "$W" -czf "$W/../abbwd11.tgz" . && mv "$W/../abbwd11.tgz" "$W/ab.tgz"
grep -i "all rows" $W/ab.md
