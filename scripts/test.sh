#!/usr/bin/env bash
# The README's test command: install what is missing (as root), build, run every test with CTest.
# CUDA tests skip with a reason on a machine without a GPU. Extra arguments go to ctest.
# Warnings are errors in CI (CI=true) or with ATTN_WERROR=1 (-DATTNBENCH_WERROR=ON), else warnings.
# In CI (CI=true), or with ATTN_SANITIZE=1, the CPU suite then runs again under AddressSanitizer
# and UBSan (scripts/sanitize.sh, its own build in build-asan).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
attn_install_deps python3-matplotlib  # for test_plot (scripts/plot.py)
attn_cudnn_from_wheel
if [ "${CI:-}" = true ] || [ "${ATTN_WERROR:-0}" = 1 ]; then
  ATTN_CMAKE_ARGS+=(-DATTNBENCH_WERROR=ON)  # warnings are errors in CI (and the GPU gate)
fi
attn_build "${ATTN_BUILD_DIR:-$ATTN_ROOT/build}"
(cd "$ATTN_BUILD" && ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@")
if [ "${CI:-}" = true ] || [ "${ATTN_SANITIZE:-0}" = 1 ]; then
  attn_log "CPU tests again under AddressSanitizer + UBSan (scripts/sanitize.sh)"
  "$ATTN_ROOT/scripts/sanitize.sh"
fi
