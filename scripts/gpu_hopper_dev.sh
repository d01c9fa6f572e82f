#!/usr/bin/env bash
# Hopper kernel work on the GPU machine in one device call: build, check, time, sanitize, profile.
#
#   scripts/gpu_hopper_dev.sh OUTDIR [IMPL_GLOB]      (IMPL_GLOB default cuda.flash_fwd_wgmma)
#
# Steps, each under its own time limit so that a hung kernel cannot eat the call:
#   1. build attnbench and test_cuda_impls (sm_90a; cuDNN from PyTorch's wheel, as gpu_run.sh);
#   2. configs/sanitize.json with --verify full for the implementation (odd shapes, every dtype);
#   3. configs/tune_fwd_wgmma.json: the implementation beside flash_fwd_mma and cudnn_sdpa;
#   4. test_cuda_impls (every CUDA implementation on the odd-shape list);
#   5. compute-sanitizer memcheck, racecheck, synccheck (scripts/compute_sanitizer.sh);
#   6. one ncu report of the d128 16k non-causal forward (SKIP_NCU=1 leaves it out).
# VARIANTS="0 1 2" instead runs steps 2 and 3 once per value of ATTNBENCH_WGMMA_VARIANT (the
# kernel's experiment switch; step 3 then with --verify off, step 2 verifies), in the order given;
# SKIP_TESTS=1 leaves out steps 4 and 5.
# OUTDIR gets the results files, logs.tar.gz and summary.txt (also printed).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_hopper_dev.sh OUTDIR [IMPL_GLOB]}"
IMPL="${2:-cuda.flash_fwd_wgmma}"
mkdir -p "$OUT/logs"
LOG="$OUT/logs"
BUILD="${ATTN_BUILD_DIR:-$ROOT/build-gpu}"
SUM="$OUT/summary.txt"
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
pack() { tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOG"; }
trap pack EXIT

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
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  "-DATTNBENCH_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" "${CMAKE_EXTRA[@]}" > "$LOG/configure.txt" 2>&1 \
  || { tail -20 "$LOG/configure.txt"; exit 3; }
if ! cmake --build "$BUILD" -j "$(nproc)" --target attnbench test_cuda_impls > "$LOG/build.txt" 2>&1; then
  grep -E 'error' "$LOG/build.txt" | head -30; exit 3
fi
say "build: $(( $(date +%s) - t0 )) s"
EXE="$BUILD/attnbench"

step() {  # step NAME LIMIT_S CMD...
  local name=$1 limit=$2; shift 2
  local s; s=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" > "$LOG/$name.txt" 2>&1
  local rc=$?
  say "$name: rc $rc, $(( $(date +%s) - s )) s"
  return $rc
}

if [ -n "${VARIANTS:-}" ]; then
  for v in $VARIANTS; do
    export ATTNBENCH_WGMMA_VARIANT=$v
    step "odd_shapes_v$v" 120 "$EXE" run "$ROOT/configs/sanitize.json" --impl "$IMPL" --pass fwd \
      --verify full -q --out "$LOG/odd_shapes_v$v.json"
    tail -2 "$LOG/odd_shapes_v$v.txt" | head -1 | tee -a "$SUM"
    step "tune_v$v" 200 "$EXE" run "$ROOT/configs/tune_fwd_wgmma.json" --impl "$IMPL" --verify off \
      --out "$OUT/tune_v$v.json" -q
    grep -E "flash_fwd_wgmma" "$LOG/tune_v$v.txt" | sed "s/^/v$v /" | tee -a "$SUM"
  done
  unset ATTNBENCH_WGMMA_VARIANT
  step tune_cudnn 200 "$EXE" run "$ROOT/configs/tune_fwd_wgmma.json" --impl cuda.cudnn_sdpa --verify off \
    --out "$OUT/tune_cudnn.json" -q
  grep -E "cudnn_sdpa" "$LOG/tune_cudnn.txt" | tee -a "$SUM"
else
step odd_shapes 120 "$EXE" run "$ROOT/configs/sanitize.json" --impl "$IMPL" --pass fwd --verify full \
  -q --out "$OUT/odd_shapes.json"
grep -E "FAIL|fail" "$LOG/odd_shapes.txt" | head -20 | tee -a "$SUM"
tail -3 "$LOG/odd_shapes.txt" | tee -a "$SUM"

step tune 240 "$EXE" run "$ROOT/configs/tune_fwd_wgmma.json" --out "$OUT/tune_fwd_wgmma.json" -q
grep -vE "^\s*$" "$LOG/tune.txt" | tail -60 | tee -a "$SUM"
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
step test_cuda_impls 200 "$BUILD/tests/test_cuda_impls"
grep -E "PASSED|FAILED|tests ran" "$LOG/test_cuda_impls.txt" | head -20 | tee -a "$SUM"

IMPLS="$IMPL" TOOLS="memcheck racecheck synccheck" TOOL_TIMEOUT_S=60 EXTRA="--pass fwd" \
  step sanitizer 220 "$ROOT/scripts/compute_sanitizer.sh" "$BUILD" "$LOG/sanitizer"
cat "$LOG/sanitizer/summary.md" 2>/dev/null | tee -a "$SUM"
fi

if [ "${SKIP_NCU:-0}" != 1 ] && command -v ncu > /dev/null; then
  step ncu 120 env ATTNBENCH_WGMMA_VARIANT="${NCU_VARIANT:-0}" ncu --clock-control none --set full -k "regex:flash_fwd_wgmma" -c 1 \
    "$EXE" run --batch 1 --heads-q 16 --seq 16384 --head-dim 128 --dtype bf16 --impl "$IMPL" \
    --pass fwd --profile --verify off -q
  grep -E "Duration|SM Throughput|Tensor|Registers|Achieved Occupancy|Stall|Issue Slots|Executed Ipc" \
    "$LOG/ncu.txt" | head -30 | tee -a "$SUM"
fi
say "total: $(( $(date +%s) - t0 )) s"
