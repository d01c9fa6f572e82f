#!/usr/bin/env bash
# Issue 28, a candidate not committed to the kernel (written 2026-12-04): the forward's row max as
# four partial maxima per row (rowmax.patch in this folder; docs/tuning_flash_wgmma.md, "The
# consumers' stalls apart from the producer's", candidate 1). The patch is applied to a copy of
# this tree (NEW); BASE is this tree as it is, so the kernel code of main stays the gated one
# until the change has been measured and checked on the GPU.
# Predicted time NEW / BASE: d128 and d256 0.98-0.99, d64 1.00 (the FMNMX chain per row: 23 -> 9
# at d128, 11 -> 6 at d256, 17 -> 7 at d64, where MUFU rather than latency limits the loop).
# Steps: the two builds side by side (scripts/gpu_ab.sh, about 120 s); NEW's first run verified
# (--verify-new); 2 rounds alternating on the FA3 grid's 24 forward rows at 2k-16k; then the
# gate's check and odd-shape steps on the patched tree (below). About 450 s in all.
# Run from the repository root on the GPU machine; outputs in $W (default /tmp/abrowmax): grid/
# (gpu_ab.sh's files), gate/ (gpu_gate.sh's summary and logs), ab.md, and ab.tgz (all of it in
# one file).
set -uo pipefail
HERE=results/h200/ab/2026-12-05-fwd-rowmax
W=${W:-/tmp/abrowmax}; mkdir -p "$W"
NEWT=/tmp/attn-rowmax-new
rm -rf "$NEWT" && mkdir -p "$NEWT" || exit 2
tar --exclude=./build --exclude='./build-*' -cf - . | tar -C "$NEWT" -xf - || exit 2
patch -d "$NEWT" -p1 --forward < "$HERE/rowmax.patch" > "$W/patch.txt" 2>&1 ||
  { echo "rowmax.patch does not apply:"; cat "$W/patch.txt"; exit 3; }
REV=${ATTNBENCH_GIT_REVISION:-HEAD}
export AB_BASE_REV=$REV AB_NEW_REV="$REV+rowmax.patch"
scripts/gpu_ab.sh . "$W/grid" --rounds 2 --verify-new --new-src "$NEWT" -- configs/fa3_grid.json \
  --impl cuda.flash_fwd_wgmma --pass fwd \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
echo "grid ab rc=$?"
# The patched tree's correctness by the gate's own steps (scripts/gpu_gate.sh, GATE_STEPS "check
# odd": `attnbench check --impl 'cuda.*'` and the odd shapes with normal and outlier inputs, every
# CUDA implementation), on NEW's build folder (the gate reconfigures it with warnings as errors and
# builds every target: about 100 s more). Its summary is named <date>-<rev>-dirty.md: a patched
# tree, not a gate of a commit.
( cd "$NEWT" && ATTNBENCH_GIT_REVISION="$REV" ATTNBENCH_GIT_DIRTY=1 GATE_STEPS="check odd" \
    GATE_BUILD=/tmp/attn-ab-new/build scripts/gpu_gate.sh "$W/gate" > "$W/gate.txt" 2>&1 )
echo "gate (check, odd shapes) of the patched tree rc=$?"
grep -h "^# GPU gate" "$W"/gate/*.md 2>/dev/null
{ echo "# Forward row max as four partial maxima (rowmax.patch) against this tree"; echo
  cat "$W/grid/ab.md" 2>/dev/null || echo "(no ab.md)"; } > "$W/ab.md"
tar -C "$W" -czf /tmp/abrowmax.tgz --exclude=ab.tgz . && mv /tmp/abrowmax.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
