#!/usr/bin/env bash
# The GPU workflow, run ON the GPU machine: build with all cores (cuDNN headers/library from
# PyTorch's wheel), run the tests, then run the chosen configs and write results JSON + logs.
#
#   scripts/gpu_run.sh OUTDIR [--tests|--no-tests] [--peers] [--hbm] [CONFIG ...] [-- extra attnbench args]
#
# OUTDIR receives results-<config>.json for each config, torch-<config>.json with --peers,
# and logs.tar.gz (build, ctest, run logs, nvidia-smi). With --hbm, each results file also gets
# Nsight Compute's HBM bytes per row (scripts/ncu_hbm.py: a second, profiled run of the config;
# for FlashAttention-1-sized configs, not the whole grid). `-- --case GLOB` runs part of a config
# (the peer too): a grid too long for one device call, in parts. Commit results under results/h200/.
set -uo pipefail
# The tree copied to the GPU machine carries no trustworthy git metadata (none, or the session
# start's): export ATTNBENCH_GIT_REVISION (and ATTNBENCH_GIT_DIRTY=0/1) from the checkout when
# calling this; the results record that revision, with git_revision_source saying so.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_run.sh OUTDIR [--no-tests] [--peers] [CONFIG ...]}"; shift
RUN_TESTS=1; PEERS=0; HBM=0; CONFIGS=(); EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) RUN_TESTS=0 ;;
    --tests) RUN_TESTS=1 ;;
    --peers) PEERS=1 ;;
    --hbm) HBM=1 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) CONFIGS+=("$1") ;;
  esac
  shift
done
mkdir -p "$OUT/logs"
LOG="$OUT/logs"
BUILD="${ATTN_BUILD_DIR:-$ROOT/build-gpu}"

# cuDNN from PyTorch's wheel: headers for the build, library for cuda.cudnn_sdpa (common.sh).
source "$ROOT/scripts/common.sh"
attn_cudnn_from_wheel
CMAKE_EXTRA=("${ATTN_CMAKE_ARGS[@]}")
nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1 || true
nvidia-smi -q -d CLOCK >> "$LOG/nvidia-smi.txt" 2>&1 || true

pack() { tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOG"; }
trap pack EXIT
trap 'exit 143' TERM INT

start=$(date +%s)
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_NATIVE=ON \
  "-DATTNBENCH_CUDA_GENCODE=$ATTN_GPU_GENCODE" "${CMAKE_EXTRA[@]}" > "$LOG/configure.txt" 2>&1 \
  || { tail -30 "$LOG/configure.txt"; exit 3; }
# ATTN_TARGETS="a b": build only those targets; ATTN_TESTS=REGEX: run only matching tests.
TARGET_ARGS=()
for t in ${ATTN_TARGETS:-}; do TARGET_ARGS+=(--target "$t"); done
if ! cmake --build "$BUILD" -j "$(nproc)" "${TARGET_ARGS[@]}" > "$LOG/build.txt" 2>&1; then
  grep -E 'error|Error' "$LOG/build.txt" | head -40; exit 3
fi
echo "build: $(( $(date +%s) - start )) s"

# The run's --case globs (after --) select the same cases for the peer and the HBM profile.
CASES=(); prev=""
for x in "${EXTRA[@]}"; do
  [ "$prev" = "--case" ] && CASES+=(--case "$x")
  case "$x" in --case=*) CASES+=(--case "${x#--case=}") ;; esac
  prev="$x"
done

rc=0
if [ "$RUN_TESTS" = 1 ]; then
  ( cd "$BUILD" && ctest --output-on-failure -j 4 --timeout 400 ${ATTN_TESTS:+-R "$ATTN_TESTS"} ) > "$LOG/ctest.txt" 2>&1 || rc=1
  grep -E 'tests passed|tests failed|\(Failed\)|\(SEGFAULT\)|Timeout|Not Run' "$LOG/ctest.txt" | head -30
  grep -E '^\[  FAILED|Failure|failed:' "$LOG/ctest.txt" | head -40
fi
for cfg in "${CONFIGS[@]}"; do
  name="$(basename "$cfg" .json)"
  echo "== $cfg"
  "$BUILD/attnbench" run "$ROOT/$cfg" --out "$OUT/results-$name.json" "${EXTRA[@]}" > "$LOG/run-$name.txt" 2> "$LOG/run-$name.err" || rc=1
  tail -60 "$LOG/run-$name.txt"
  if [ "$HBM" = 1 ] && [ -f "$OUT/results-$name.json" ]; then
    python3 "$ROOT/scripts/ncu_hbm.py" "$ROOT/$cfg" --attnbench "$BUILD/attnbench" --results "$OUT/results-$name.json" \
      "${CASES[@]}" --out "$OUT/results-$name.json" > "$LOG/hbm-$name.txt" 2>&1 || rc=1
    tail -25 "$LOG/hbm-$name.txt"
  fi
  if [ "$PEERS" = 1 ]; then
    python3 "$ROOT/scripts/peers/torch_sdpa.py" "$ROOT/$cfg" "${CASES[@]}" --attnbench "$BUILD/attnbench" \
      --out "$OUT/torch-$name.json" > "$LOG/torch-$name.txt" 2>&1 || rc=1
    tail -5 "$LOG/torch-$name.txt"
  fi
done
echo "total: $(( $(date +%s) - start )) s, rc=$rc"
exit $rc
