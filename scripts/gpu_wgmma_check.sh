#!/usr/bin/env bash
# GPU check of the Hopper kernels (cuda.flash_fwd_wgmma, cuda.flash_bwd_wgmma) in one device call,
# each step under its own time limit:
#   1. build attnbench and test_cuda_impls (sm_90a, cuDNN from PyTorch's wheel) in BUILD;
#   2. configs/sanitize.json for both kernels with --verify full, fwd and bwd, both option values
#      (persistent 0/1, deterministic 0/1), normal and then outlier inputs;
#   3. test_cuda_impls (every CUDA implementation on the odd-shape list, large scales, outliers,
#      WgmmaPersistent, DeterministicBackwardIsBitIdentical);
#   4. compute-sanitizer memcheck, racecheck, synccheck on both kernels (scripts/compute_sanitizer.sh);
#   5. configs/tune_bwd_wgmma.json (the backward beside flash_bwd_mma and cuDNN) and
#      configs/tune_fwd_wgmma.json (persistent 0 and 1 beside flash_fwd_mma and cuDNN).
#
#   scripts/gpu_wgmma_check.sh OUTDIR       env: BUILD (default build-check), STEPS (default all:
#                                           "build odd test sanitizer tune_bwd tune_fwd")
# OUTDIR gets the results files, the logs and summary.txt (also printed). Exit 0 when every step
# that ran passed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_wgmma_check.sh OUTDIR}"
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/logs"
BUILD="${BUILD:-$ROOT/build-check}"
STEPS=" ${STEPS:-build odd test sanitizer tune_bwd tune_fwd} "
SUM="$OUT/summary.txt"
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
want() { [[ "$STEPS" == *" $1 "* ]]; }
rc=0
SITE="$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)"
CUDNN="$SITE/nvidia/cudnn"
CMAKE_EXTRA=()
if [ -f "$CUDNN/include/cudnn.h" ]; then
  CMAKE_EXTRA+=("-DCUDNN_INCLUDE_DIR=$CUDNN/include")
  export LD_LIBRARY_PATH="$CUDNN/lib:${LD_LIBRARY_PATH:-}"
  export ATTNBENCH_CUDNN_LIB="$CUDNN/lib/libcudnn.so.9"
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$LOG/nvidia-smi.txt" 2>&1
t0=$(date +%s)

step() {  # step NAME LIMIT_S CMD...: rc of CMD, its output in logs/NAME.txt
  local name=$1 limit=$2; shift 2
  local s; s=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOG/$name.txt" 2>&1
  local r=$?
  say "$name: rc $r, $(( $(date +%s) - s )) s"
  [ $r -eq 0 ] || rc=1
  return $r
}

if want build; then
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_NATIVE=ON \
    "-DATTNBENCH_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" "${CMAKE_EXTRA[@]}" > "$LOG/configure.txt" 2>&1 \
    || { tail -20 "$LOG/configure.txt"; exit 3; }
  step build 400 cmake --build "$BUILD" -j "$(nproc)" --target attnbench test_cuda_impls \
    || { grep -E 'error' "$LOG/build.txt" | head -30 | tee -a "$SUM"; exit 3; }
fi
EXE="$BUILD/attnbench"

if want odd; then
  sed -e 's/"distribution": "normal"/"distribution": "outlier"/' -e 's/"name": "sanitize"/"name": "sanitize_outlier"/' \
    "$ROOT/configs/sanitize.json" > "$OUT/sanitize_outlier.json"
  for cfg in "$ROOT/configs/sanitize.json" "$OUT/sanitize_outlier.json"; do
    n=$(basename "$cfg" .json)
    step "odd_$n" 240 "$EXE" run "$cfg" --impl 'cuda.flash_*_wgmma' --verify full -q --out "$OUT/odd_$n.json"
    grep -E ' FAIL ' "$LOG/odd_$n.txt" | head -20 | tee -a "$SUM"
    grep -E '^[0-9]+ rows' "$LOG/odd_$n.txt" | tee -a "$SUM"
  done
fi

if want test; then
  step test_cuda_impls 300 "$BUILD/tests/test_cuda_impls"
  grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED|Failure' "$LOG/test_cuda_impls.txt" | head -30 | tee -a "$SUM"
fi

if want sanitizer; then
  IMPLS="cuda.flash_fwd_wgmma cuda.flash_bwd_wgmma" TOOLS="memcheck racecheck synccheck" TOOL_TIMEOUT_S=80 \
    step sanitizer 300 "$ROOT/scripts/compute_sanitizer.sh" "$BUILD" "$LOG/sanitizer"
  cat "$LOG/sanitizer/summary.md" 2>/dev/null | tee -a "$SUM"
fi

for t in tune_bwd tune_fwd; do
  want "$t" || continue
  step "$t" 300 "$EXE" run "$ROOT/configs/${t}_wgmma.json" --out "$OUT/${t}_wgmma.json" -q
  grep -vE '^\s*$' "$LOG/$t.txt" | tail -80 >> "$SUM"
done
say "total: $(( $(date +%s) - t0 )) s, exit $rc"
exit "$rc"
