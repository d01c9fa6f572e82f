#!/usr/bin/env bash
# Issues 28 and 27 (written 2026-12-04/05, not yet run on a GPU): one BASE build for three parts.
# NEW is this tree; BASE is a copy of it with rowmax.patch and bwd16-18.patch reversed (both in
# this folder), built once (scripts/gpu_ab.sh, about 120 s) and reused by every part.
#   fwd:     forward step 13 (rowmax.patch, in the kernel since 2026-12-05): the forward's row max
#            as four partial maxima per row. Rows: the FA3 grid's 12 forward rows at 2k and 16k.
#            Predicted time NEW / BASE: d128 and d256 0.98-0.99, d64 1.00 (the FMNMX chain per
#            row: 23 -> 9 at d128, 11 -> 6 at d256, 17 -> 7 at d64, where MUFU rather than latency
#            limits the loop). The backward patch does not touch the forward's kernels.
#   bwd:     backward steps 16 to 18 (bwd16-18.patch: `git diff 789a095 <rev> --` the backward
#            kernel and hopper/ptx.cuh): the tile's LSE·log2e and D rows read in pairs (16),
#            the dQ tile's shared-memory region double-buffered where it fits, d128 and the
#            narrow-window tiles (17), and dSᵀ (and Pᵀ) stored by stmatrix (18). Rows: the FA3
#            grid's 12 backward rows at 2k and 16k. Predicted: d128 0.97-0.99 (17: the consumers'
#            wait at the dQ region's empty barrier, 2.5% of their stall samples at 2b4b482, mostly
#            gone; 18: 4 STSM for 16 STS a tile, 32 instructions fewer), d64 0.98-1.00 and d256
#            0.99-1.00 (one dQ region: the second does not fit; 18 only).
#   softcap: the same pair on configs/softcap.json's 8 backward rows at softcap 30, 2k and 16k.
#            Predicted d128 0.96-0.99 (16: 48-64 instructions fewer per kernel; 17; 18), d256
#            0.99-1.00.
# The session's gate covers the committed tree's correctness, so this job only times (NEW's
# first forward run verified). About 400 s (trimmed to 2k and 16k on 2026-12-05). Run from the
# repository root on the GPU machine;
# outputs in $W (default /tmp/abrowmax): fwd/, bwd/, softcap/ (gpu_ab.sh's files), ab.md, and
# ab.tgz (all of it in one file).
set -uo pipefail
HERE=results/h200/ab/2026-12-05-fwd-rowmax
W=${W:-/tmp/abrowmax}; mkdir -p "$W"
BASET=/tmp/attn-rowmax-base
rm -rf "$BASET" && mkdir -p "$BASET" || exit 2
tar --exclude=./build --exclude='./build-*' -cf - . | tar -C "$BASET" -xf - || exit 2
for p in rowmax bwd16-18; do
  patch -d "$BASET" -p1 -R < "$HERE/$p.patch" > "$W/patch-$p.txt" 2>&1 ||
    { echo "$p.patch does not reverse:"; cat "$W/patch-$p.txt"; exit 3; }
done
REV=${ATTNBENCH_GIT_REVISION:-HEAD}
# NEW's build: the session's (B, e.g. the gate's build/attnbench), so that only BASE is built.
[ -n "${B:-}" ] && export ATTN_BUILD_DIR=${ATTN_BUILD_DIR:-$(dirname "$B")}
export AB_BASE_REV="$REV-rowmax.patch-bwd16-18.patch" AB_NEW_REV=$REV
PARTS=()
part() {  # part NAME [--verify-new] -- RUN_ARGS...
  local name=$1; shift
  scripts/gpu_ab.sh "$BASET" "$W/$name" --rounds 2 "$@"
  echo "$name ab rc=$?"
  PARTS+=("$name")
}
ends=(--case '*_sq2048_*' --case '*_sq16384_*')
part fwd --verify-new -- configs/fa3_grid.json --impl cuda.flash_fwd_wgmma --pass fwd "${ends[@]}"
part bwd -- configs/fa3_grid.json --impl cuda.flash_bwd_wgmma --pass bwd "${ends[@]}"
part softcap -- configs/softcap.json --impl cuda.flash_bwd_wgmma --pass bwd \
  --case '*_sq2048_*_softcap30' --case '*_sq16384_*_softcap30'
{ echo "# Forward step 13 (rowmax.patch) and backward steps 16-18 (bwd16-18.patch): NEW, this tree, against BASE, both patches reversed"
  for name in "${PARTS[@]}"; do printf '\n## %s\n\n' "$name"; cat "$W/$name/ab.md" 2>/dev/null || echo "(no ab.md)"; done
} > "$W/ab.md"
tar -C "$W" -czf /tmp/abrowmax.tgz --exclude=ab.tgz . && mv /tmp/abrowmax.tgz "$W/ab.tgz"
grep -i "all rows" "$W/ab.md"
