#!/usr/bin/env bash
# Issue 29 (written 2026-12-06, session 56; not yet run on a GPU): the merge of cuda.flash_decode's
# splits with its loads batched, against the merge as it is (combine.patch in this folder, also
# commit b647481 on branch exp/decode-combine-batch: BASE is this tree, NEW this tree with the
# patch applied; main's CUDA code is unchanged, so its gate still holds).
#   - The combine kernel: one warp per row issued its loads in five rounds at batch 1 with 16
#     splits and d64 (the LSEs, then four passes of four splits' partial rows), nine at d128. NEW
#     loads 16 splits' rows at once, the first batch together with the LSEs and each next batch
#     (or the next 64 columns) before the current one is summed: one round at d64, two at d128.
#   - The fused combine (fused_combine=1): the last block loaded each split's LSE twice (for the
#     max, then for the weight) and the partial rows two splits a round. NEW loads the LSEs once
#     into registers and 32 float2 a thread at once (8 splits at d64, 4 at d128, 2 at d256).
#   Predicted time NEW / BASE at batch 1 (configs/decode_merge_ab.json, fused_ab.sh's cells: GQA
#   32:8 and 64:8, d64 and d128, 4k-128k keys, read flush): 0.95-0.98 at 4k-16k (0.5-1 us of
#   15-25 us: a few rounds of L2 latency at about 0.15-0.3 us each), 0.98-1.00 at 32k-128k;
#   fused_combine=1 gains more than 0 (its rounds were more). No change at batch >= 8 (one
#   split: no merge).
# NEW's first run is verified (the emulator passed 16/16 decode cases with it, planted faults
# caught); merging it into the kernel needs a gate of its own. About 8 minutes (two builds, 2
# rounds a side). Run from the repository root on the GPU machine (session.sh JOBS=<this>, which
# gives B and W); outputs in $W (default /tmp/abcombine): fwd/ (gpu_ab.sh's files), ab.md.
set -uo pipefail
HERE=results/h200/ab/2026-12-06-decode-combine-batch
W=${W:-/tmp/abcombine}; mkdir -p "$W"
BASET=/tmp/attn-combine-base NEWT=/tmp/attn-combine-new
for t in "$BASET" "$NEWT"; do
  rm -rf "$t" && mkdir -p "$t" || exit 2
  tar --exclude=./build --exclude='./build-*' -cf - . | tar -C "$t" -xf - || exit 2
done
patch -d "$NEWT" -p1 < "$HERE/combine.patch" > "$W/patch.txt" 2>&1 ||
  { echo "combine.patch does not apply:"; cat "$W/patch.txt"; exit 3; }
REV=${ATTNBENCH_GIT_REVISION:-HEAD}
export AB_BASE_REV=$REV AB_NEW_REV="$REV+combine.patch"
# cuDNN runs on both sides: the control (the same library, so its NEW / BASE ratio is the noise).
scripts/gpu_ab.sh "$BASET" "$W/fwd" --rounds 2 --verify-new --new-src "$NEWT" -- configs/decode_merge_ab.json
echo "ab rc=$?"
# Each side's first round as fused_ab.sh tabulates it (fused_combine 1 against 0 and cuDNN): BASE's
# is main's fused A/B, NEW's the same with the patch.
{ echo "# The splits' merge with batched loads: NEW, this tree with combine.patch, against BASE, this tree"
  printf '\n'; cat "$W/fwd/ab.md" 2>/dev/null || echo "(no ab.md)"
  for side in base new; do
    printf '\n## %s, round 1: fused_combine 1 against 0 and cuDNN\n\n' "$side"
    python3 results/h200/issue29/fused_summary.py "$W/fwd/$side-1.json" 2>&1
  done; } > "$W/ab.md"
grep -i "all rows" "$W/ab.md"
