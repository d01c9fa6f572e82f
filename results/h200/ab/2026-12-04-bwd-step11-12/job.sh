#!/usr/bin/env bash
# Issue 27, backward steps 11 and 12 (written 2026-12-04, not yet run), each against its parent in
# one GPU job (docs/tuning_flash_wgmma.md):
#   step 11 (08d0bf9 against d79c984): the main kernel's blocks in block_coords' grouped order,
#            causal longest first. Rows: the FA3 grid's causal backward rows at 2k, 4k and 8k
#            (d64, d128, d256) and two non-causal controls at 2k.
#            Predicted time NEW / BASE: causal d128 and d256 at 2k-4k (d128 8k too) 0.93-0.97,
#            causal d64 0.96-0.99, the controls 0.99-1.01.
#   step 12 (NEW = this tree against 08d0bf9): dK and dV by TMA store through the K/V stages.
#            Rows: the FA3 grid's 24 backward rows at 2k-16k; with DET=1 also tune_bwd_wgmma.json's
#            causal rows in both dQ modes (about 100 s more).
#            Predicted: 0.97-0.99 at 2k (blocks of few query tiles, where the epilogue weighs
#            most), 0.99-1.00 at 8k-16k; deterministic causal d128 may lose up to 1% (it now
#            reloads 2 spilled values in its loop). Part window: configs/window.json's window-128
#            rows at 16k (d128; the kLocal kernels take the TMA path by a flag), predicted
#            0.90-0.97 at (128, 128). Each tarball keeps its own build per side (gpu_ab.sh):
#            part step12 builds 08d0bf9 as BASE beside this tree, part window builds nothing.
# Run from the repository root on the GPU machine with the two parents' trees as tarballs:
#   git archive d79c984 -- . ':!results' | gzip > build-ab/bwd-d79c984.tar.gz
#   git archive 08d0bf9 -- . ':!results' | gzip > build-ab/bwd-08d0bf9.tar.gz
# (AB_BASE_SRC / AB_MID_SRC point elsewhere). NEW is not verified here (about 150 s saved): run it
# after the gate of the same revision, which verifies every implementation. About 500 s in all.
# Outputs in $W (default /tmp/abbwd1112): step11/, step12/, window/, det/ (DET=1) (gpu_ab.sh's
# files each), ab.md (the summaries) and ab.tgz (all of it in one file: the device tool returns at
# most 8 files from $OUT).
set -uo pipefail
W=${W:-/tmp/abbwd1112}; mkdir -p "$W"
BASE=${AB_BASE_SRC:-build-ab/bwd-d79c984.tar.gz}
MID=${AB_MID_SRC:-build-ab/bwd-08d0bf9.tar.gz}
# A tarball not under build-ab/ here (results/h200/issue27/session.sh runs in a copy of the tree
# without build folders) is taken from /tmp, where the device call copies it.
[ -f "$BASE" ] || BASE=/tmp/$(basename "$BASE")
[ -f "$MID" ] || MID=/tmp/$(basename "$MID")
NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
PARTS=()
# part NAME BASE_SRC BASE_REV NEW_SRC NEW_REV CONFIG ARGS...: cuda.flash_bwd_wgmma's backward rows.
part() {
  local name=$1 base=$2 base_rev=$3 new=$4 new_rev=$5 cfg=$6; shift 6
  local newsrc=(); [ "$new" = . ] || newsrc=(--new-src "$new")
  AB_BASE_REV=$base_rev AB_NEW_REV=$new_rev scripts/gpu_ab.sh "$base" "$W/$name" --rounds 2 \
    "${newsrc[@]}" -- "$cfg" --impl cuda.flash_bwd_wgmma --pass bwd "$@"
  echo "$name ab rc=$?"
  PARTS+=("$name")
}
part step11 "$BASE" d79c984 "$MID" 08d0bf9 configs/fa3_grid.json \
  --case '*_sq2048_*causal*' --case '*_sq4096_*causal*' --case '*_sq8192_*causal*' \
  --case 'b8_hq16_hkv16_sq2048_skv2048_d128_bf16' --case 'b8_hq8_hkv8_sq2048_skv2048_d256_bf16'
part step12 "$MID" 08d0bf9 . "$NEW_REV" configs/fa3_grid.json \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*'
part window "$MID" 08d0bf9 . "$NEW_REV" configs/window.json --case 'b1_*_wl128_*'
[ "${DET:-0}" = 1 ] && part det "$MID" 08d0bf9 . "$NEW_REV" configs/tune_bwd_wgmma.json --case '*causal*'
{
  echo "# Backward steps 11 and 12, each against its parent"
  for name in "${PARTS[@]}"; do printf '\n## %s\n\n' "$name"; cat "$W/$name/ab.md" 2>/dev/null || echo "(no ab.md)"; done
} > "$W/ab.md"
tar -C "$W" -czf /tmp/abbwd1112.tgz --exclude=ab.tgz . && mv /tmp/abbwd1112.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
