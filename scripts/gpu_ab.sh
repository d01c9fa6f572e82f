#!/usr/bin/env bash
# Two revisions of attnbench timed against each other in one GPU job, run ON the GPU machine: the
# before/after measurement of a kernel change (issue 25's acceptance, each tuning step of the
# Hopper kernels). BASE is another revision's source tree; NEW is this checkout.
#
#   scripts/gpu_ab.sh BASE_SRC OUT [--rounds N] [--verify-new] [--new-src NEW_SRC] -- RUN_ARGS...
#
# BASE_SRC: a folder holding the base revision's tree, or a tarball of it (e.g. made here with
#           `git archive REV | gzip > build-ab/base.tar.gz`: build* folders are ignored, so it
#           travels with the device tool's `carry`).
# NEW_SRC:  the same for NEW (default: this checkout), e.g. a commit while the working tree has
#           other, unfinished changes.
# OUT:      base-K.json, new-K.json (K = 1..N), ab.md (scripts/ab_summary.py), build and run logs
#           (logs.tar.gz). Nothing else is written outside OUT, /tmp/attn-ab-* and the builds.
# RUN_ARGS: attnbench run's arguments for both sides, e.g.
#           configs/fa3_grid.json --impl cuda.flash_fwd_wgmma --pass fwd --case '*sq2048*'
# The results record each side's revision from AB_BASE_REV and AB_NEW_REV (environment; NEW
# defaults to ATTNBENCH_GIT_REVISION, BASE to "unknown": the copied trees carry no git metadata).
# Both builds are configured like scripts/gpu_run.sh (Release, sm_90a, cuDNN from PyTorch's wheel)
# and built side by side (attnbench only): a tarball's tree and build in /tmp/attn-ab-SIDE-KEY/
# (KEY from its contents, so that each tarball keeps its own build), a folder's build in
# /tmp/attn-ab-SIDE/build, NEW in ATTN_BUILD_DIR (default build-gpu). The runs alternate, BASE
# NEW NEW BASE BASE NEW ..., so that a drift of the machine falls on both sides alike;
# --verify-new verifies NEW's first run (the others, and BASE's, run with --verify off). N
# defaults to 2. Exit: 0, or 2 on a bad argument, 1 when a build or a run fails (OUT keeps what
# finished).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage="usage: scripts/gpu_ab.sh BASE_SRC OUT [--rounds N] [--verify-new] [--new-src NEW_SRC] -- RUN_ARGS..."
BASE_SRC="${1:?$usage}"; OUT="${2:?$usage}"; shift 2
ROUNDS=2; VERIFY_NEW=0; NEW_SRC=""; RUN_ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="${2:?--rounds N}"; shift ;;
    --verify-new) VERIFY_NEW=1 ;;
    --new-src) NEW_SRC="${2:?--new-src NEW_SRC}"; shift ;;
    --) shift; RUN_ARGS=("$@"); break ;;
    *) echo "gpu_ab.sh: unknown argument '$1' ($usage)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_ab.sh: --rounds '$ROUNDS': a positive integer" >&2; exit 2; }
[ ${#RUN_ARGS[@]} -gt 0 ] || { echo "gpu_ab.sh: no attnbench run arguments after -- ($usage)" >&2; exit 2; }
[ -e "$BASE_SRC" ] || { echo "gpu_ab.sh: BASE_SRC '$BASE_SRC' does not exist" >&2; exit 2; }
mkdir -p "$OUT/logs" || exit 2
LOG="$OUT/logs"
source "$ROOT/scripts/common.sh"
attn_cudnn_from_wheel
pack() { tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOG"; }
trap pack EXIT
trap 'exit 143' TERM INT

# A side's tree: a folder, or a tarball unpacked once under /tmp/attn-ab-SIDE-KEY/src, KEY from
# the tarball's contents, with its build beside it in ../build. A folder per tarball: a job that
# A/Bs several pairs reuses each side's build, and never builds one tarball's tree in another's
# build folder (git archive keeps the commit's mtimes, so make would take an older revision's
# objects for up to date and time the wrong BASE).
tree_of() {  # SRC SIDE -> prints the folder
  local src=$1 dir=$1
  if [ -f "$src" ]; then
    dir=/tmp/attn-ab-$2-$(sha1sum "$src" | cut -c1-12)/src
    if [ ! -f "$dir/../unpacked" ]; then
      rm -rf "$dir" && mkdir -p "$dir" && tar -xf "$src" -C "$dir" && touch "$dir/../unpacked" ||
        { echo "gpu_ab.sh: cannot unpack $src" >&2; return 2; }
    fi
  fi
  [ -f "$dir/CMakeLists.txt" ] || { echo "gpu_ab.sh: $dir has no CMakeLists.txt" >&2; return 2; }
  echo "$dir"
}
# build_of ROOT SIDE: a tarball's build beside its tree; a folder's in /tmp/attn-ab-SIDE/build.
build_of() {
  case "$1" in /tmp/attn-ab-*/src) echo "$(dirname "$1")/build" ;; *) echo "/tmp/attn-ab-$2/build" ;; esac
}
BASE_ROOT=$(tree_of "$BASE_SRC" base) || exit 2
BASE_BUILD=$(build_of "$BASE_ROOT" base)
NEW_ROOT="$ROOT"; NEW_BUILD="${ATTN_BUILD_DIR:-$ROOT/build-gpu}"
if [ -n "$NEW_SRC" ]; then
  [ -e "$NEW_SRC" ] || { echo "gpu_ab.sh: NEW_SRC '$NEW_SRC' does not exist" >&2; exit 2; }
  NEW_ROOT=$(tree_of "$NEW_SRC" new) || exit 2
  NEW_BUILD=$(build_of "$NEW_ROOT" new)
fi

build() {  # SRC BUILD NAME
  local jobs=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
  { cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" \
      "${ATTN_CMAKE_ARGS[@]}" && cmake --build "$2" -j "$jobs" --target attnbench; } > "$LOG/build-$3.txt" 2>&1
}
start=$(date +%s)
attn_log "building BASE ($BASE_ROOT) and NEW ($NEW_ROOT) side by side"
build "$BASE_ROOT" "$BASE_BUILD" base & pb=$!
build "$NEW_ROOT" "$NEW_BUILD" new & pn=$!
wait $pb; rb=$?; wait $pn; rn=$?
attn_log "builds: BASE exit $rb, NEW exit $rn ($(( $(date +%s) - start )) s)"
[ $rb -eq 0 ] && [ $rn -eq 0 ] || { echo "gpu_ab.sh: a build failed (logs/build-*.txt)" >&2; exit 1; }

one() {  # SIDE K [extra args]
  local side=$1 k=$2; shift 2
  local exe="$BASE_BUILD/attnbench" rev="${AB_BASE_REV:-unknown}"
  [ "$side" = new ] && exe="$NEW_BUILD/attnbench" rev="${AB_NEW_REV:-${ATTNBENCH_GIT_REVISION:-unknown}}"
  local t0; t0=$(date +%s)
  ATTNBENCH_GIT_REVISION="$rev" "$exe" run "${RUN_ARGS[@]}" "$@" --out "$OUT/$side-$k.json" \
    > "$LOG/run-$side-$k.txt" 2>&1
  local rc=$?
  attn_log "$side run $k: exit $rc ($(( $(date +%s) - t0 )) s)"
  return $rc
}
for k in $(seq 1 "$ROUNDS"); do
  if [ $(( k % 2 )) -eq 1 ]; then order="base new"; else order="new base"; fi
  for side in $order; do
    extra=(--verify off)
    [ "$side" = new ] && [ "$k" = 1 ] && [ "$VERIFY_NEW" = 1 ] && extra=()
    one "$side" "$k" "${extra[@]}" || { echo "gpu_ab.sh: $side run $k failed (logs/run-$side-$k.txt)" >&2; exit 1; }
  done
done
bases=(); news=()
for k in $(seq 1 "$ROUNDS"); do bases+=("$OUT/base-$k.json"); news+=("$OUT/new-$k.json"); done
python3 "$ROOT/scripts/ab_summary.py" --base "${bases[@]}" --new "${news[@]}" --out "$OUT/ab.md" \
  > "$LOG/ab_summary.txt" 2>&1 || { echo "gpu_ab.sh: ab_summary.py failed" >&2; cat "$LOG/ab_summary.txt" >&2; exit 1; }
attn_log "done in $(( $(date +%s) - start )) s: $OUT/ab.md"
