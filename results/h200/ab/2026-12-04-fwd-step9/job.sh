#!/usr/bin/env bash
# Issue 28, forward step 9 (written 2026-12-04, not yet run): the tiles in decode's grouped order
# ((head, sequence) pairs in groups of about a wave, query block by query block, causal longest
# first over the group) against 2a5af5d (the same kernels in the old order: a pair's blocks
# together, longest first; docs/tuning_flash_wgmma.md, "Step 9").
# Same GPU job, two rounds alternating: the FA3 grid's 24 forward rows at seq 2k-16k (d64, d128,
# d256; causal and not; bf16).
# Predictions (time NEW / BASE; results/h200/issue27/block_order_model.py --fwd): causal d128
# 0.93-0.95 at 2k-8k, causal d256 0.88-0.90 at 2k-8k (d64 0.97-0.99: its blocks are shorter and
# more fit per wave), 16k and every non-causal row 0.99-1.01.
# Run from the repository root on the GPU machine, with 2a5af5d's tree as a tarball:
#   git archive 2a5af5d -- . ':!results' | gzip > build-ab/fwd-2a5af5d.tar.gz
# (AB_BASE_SRC points elsewhere). About 250 s. Outputs in $W (default /tmp/abfwd9): grid/
# (gpu_ab.sh's files), ab.md and ab.tgz (all of it in one file: the device tool returns at most 8
# files from $OUT).
set -uo pipefail
W=${W:-/tmp/abfwd9}; mkdir -p "$W"
BASE=${AB_BASE_SRC:-build-ab/fwd-2a5af5d.tar.gz}
# A tarball not under build-ab/ here (results/h200/issue27/session.sh runs in a copy of the tree
# without build folders) is taken from /tmp, where the device call copies it.
[ -f "$BASE" ] || BASE=/tmp/$(basename "$BASE")
export AB_BASE_REV=2a5af5d AB_NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
scripts/gpu_ab.sh "$BASE" "$W/grid" --rounds 2 -- configs/fa3_grid.json --impl cuda.flash_fwd_wgmma \
  --pass fwd --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "grid ab rc=$?"
{ echo "# Forward step 9 (launch order) against 2a5af5d"; echo; cat "$W/grid/ab.md" 2>/dev/null || echo "(no ab.md)"; } > "$W/ab.md"
tar -C "$W" -czf /tmp/abfwd9.tgz --exclude=ab.tgz . && mv /tmp/abfwd9.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
