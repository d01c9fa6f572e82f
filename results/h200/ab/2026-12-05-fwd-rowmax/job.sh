#!/usr/bin/env bash
# Issue 28, forward step 13 (written 2026-12-04 as a patch; committed to the kernel 2026-12-05, not
# yet run on a GPU): the forward's row max as four partial maxima per row (rowmax.patch in this
# folder; docs/tuning_flash_wgmma.md, step 13). NEW is this tree, which has the change; BASE is a
# copy of it with rowmax.patch reversed (the kernel before the change). The session's gate covers
# the committed tree's correctness, so this job only times.
# Predicted time NEW / BASE: d128 and d256 0.98-0.99, d64 1.00 (the FMNMX chain per row: 23 -> 9
# at d128, 11 -> 6 at d256, 17 -> 7 at d64, where MUFU rather than latency limits the loop).
# Steps: the two builds side by side (scripts/gpu_ab.sh, about 120 s); NEW's first run verified
# (--verify-new); 2 rounds alternating on the FA3 grid's 24 forward rows at 2k-16k. About 250 s.
# Run from the repository root on the GPU machine; outputs in $W (default /tmp/abrowmax): grid/
# (gpu_ab.sh's files), ab.md, and ab.tgz (all of it in one file).
set -uo pipefail
HERE=results/h200/ab/2026-12-05-fwd-rowmax
W=${W:-/tmp/abrowmax}; mkdir -p "$W"
BASET=/tmp/attn-rowmax-base
rm -rf "$BASET" && mkdir -p "$BASET" || exit 2
tar --exclude=./build --exclude='./build-*' -cf - . | tar -C "$BASET" -xf - || exit 2
patch -d "$BASET" -p1 -R < "$HERE/rowmax.patch" > "$W/patch.txt" 2>&1 ||
  { echo "rowmax.patch does not reverse:"; cat "$W/patch.txt"; exit 3; }
REV=${ATTNBENCH_GIT_REVISION:-HEAD}
# NEW's build: the session's (B, e.g. the gate's build/attnbench), so that only BASE is built.
[ -n "${B:-}" ] && export ATTN_BUILD_DIR=${ATTN_BUILD_DIR:-$(dirname "$B")}
export AB_BASE_REV="$REV-rowmax.patch" AB_NEW_REV=$REV
scripts/gpu_ab.sh "$BASET" "$W/grid" --rounds 2 --verify-new -- configs/fa3_grid.json \
  --impl cuda.flash_fwd_wgmma --pass fwd \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "grid ab rc=$?"
{ echo "# Forward row max as four partial maxima (NEW, this tree) against the single chain (BASE, rowmax.patch reversed)"; echo
  cat "$W/grid/ab.md" 2>/dev/null || echo "(no ab.md)"; } > "$W/ab.md"
tar -C "$W" -czf /tmp/abrowmax.tgz --exclude=ab.tgz . && mv /tmp/abrowmax.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
