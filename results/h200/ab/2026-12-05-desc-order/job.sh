#!/usr/bin/env bash
# Issues 27 and 28 (written 2026-12-04, not yet run): forward step 10 and backward step 13 /
# forward step 11, each against its parent, in one GPU job (docs/tuning_flash_wgmma.md):
#   step10 (a69841c against 2b4b482): the forward's grouped launch order only for causal d > 64
#            (no window, not varlen), the old order elsewhere; host code only. Rows: the FA3 grid's
#            18 forward rows at 2k-8k. Predicted time NEW / BASE: non-causal d128 and d256
#            0.97-0.99 (step 9's loss back), causal d64 0.99-1.00, causal d128/d256 1.00.
#   bwd, fwd (NEW = this tree, with forward step 12's CUDA code, against a69841c): backward
#            step 13 / forward step 11 (c2804d1: the wgmma descriptors built once per operand and
#            stage and stepped by desc_add, the warpgroup index warp-uniform, the dQ store
#            addresses by XOR), backward step 14 (459f1ef: the scores-to-P loop without the mask's
#            predicates on the tiles that need none) and forward step 12 (8bc5239: O's rescale
#            skipped where no row max moved). Rows: the FA3 grid's 24 backward and 24 forward
#            rows at 2k-16k. Predicted:
#            backward (steps 13 + 14) d128 and d256 0.90-0.96, d64 0.93-0.98; forward (steps 11 +
#            12) d256 0.94-0.98, d128 0.97-1.00, d64 0.99-1.00.
#   det (DET=1): tune_bwd_wgmma.json's causal rows in both dQ modes, same pair (about 100 s more):
#            deterministic d128 causal's 17 spilled values are gone (step 14).
# Run from the repository root on the GPU machine with the parents' trees as tarballs:
#   git archive 2b4b482 -- . ':!results' | gzip > build-ab/ab-2b4b482.tar.gz
#   git archive a69841c -- . ':!results' | gzip > build-ab/ab-a69841c.tar.gz
# (AB_BASE_SRC / AB_MID_SRC point elsewhere; a tarball missing under build-ab/ is taken from /tmp,
# where the device call copies it: results/h200/issue27/session.sh runs in a copy of the tree
# without build folders). NEW is not verified here: run it after the gate of the same revision,
# which verifies every implementation. About 600 s in all (three builds of about 100 s, two at a
# time). Outputs in $W (default /tmp/abdesc): step10/, bwd/, fwd/, det/ (gpu_ab.sh's files each),
# ab.md (the summaries) and ab.tgz (all of it in one file: the device tool returns at most 8 files
# from $OUT).
set -uo pipefail
W=${W:-/tmp/abdesc}; mkdir -p "$W"
BASE=${AB_BASE_SRC:-build-ab/ab-2b4b482.tar.gz}
MID=${AB_MID_SRC:-build-ab/ab-a69841c.tar.gz}
[ -f "$BASE" ] || BASE=/tmp/$(basename "$BASE")
[ -f "$MID" ] || MID=/tmp/$(basename "$MID")
NEW_REV=${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-HEAD}}
PARTS=()
# part NAME BASE_SRC BASE_REV NEW_SRC NEW_REV IMPL PASS CONFIG ARGS...
part() {
  local name=$1 base=$2 base_rev=$3 new=$4 new_rev=$5 impl=$6 pass=$7 cfg=$8; shift 8
  local newsrc=(); [ "$new" = . ] || newsrc=(--new-src "$new")
  AB_BASE_REV=$base_rev AB_NEW_REV=$new_rev scripts/gpu_ab.sh "$base" "$W/$name" --rounds 2 \
    "${newsrc[@]}" -- "$cfg" --impl "$impl" --pass "$pass" "$@"
  echo "$name ab rc=$?"
  PARTS+=("$name")
}
all=(--case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*')
part step10 "$BASE" 2b4b482 "$MID" a69841c cuda.flash_fwd_wgmma fwd configs/fa3_grid.json \
  --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*'
part bwd "$MID" a69841c . "$NEW_REV" cuda.flash_bwd_wgmma bwd configs/fa3_grid.json "${all[@]}"
part fwd "$MID" a69841c . "$NEW_REV" cuda.flash_fwd_wgmma fwd configs/fa3_grid.json "${all[@]}"
[ "${DET:-0}" = 1 ] && part det "$MID" a69841c . "$NEW_REV" cuda.flash_bwd_wgmma bwd \
  configs/tune_bwd_wgmma.json --case '*causal*'
{
  echo "# Forward step 10 against 2b4b482; backward step 13 and forward step 11 against a69841c"
  for name in "${PARTS[@]}"; do printf '\n## %s\n\n' "$name"; cat "$W/$name/ab.md" 2>/dev/null || echo "(no ab.md)"; done
} > "$W/ab.md"
tar -C "$W" -czf /tmp/abdesc.tgz --exclude=ab.tgz . && mv /tmp/abdesc.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
