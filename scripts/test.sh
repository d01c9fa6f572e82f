#!/usr/bin/env bash
# The README's test command: install what is missing (as root), build, run every test with CTest.
# CUDA tests skip with a reason on a machine without a GPU. Extra arguments go to ctest.
# In CI (CI=true), or with ATTN_SANITIZE=1, the CPU suite then runs again under AddressSanitizer
# and UBSan (scripts/sanitize.sh, its own build in build-asan).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
attn_install_deps python3-matplotlib  # for test_plot (scripts/plot.py)
attn_build "${ATTN_BUILD_DIR:-$ATTN_ROOT/build}"
(cd "$ATTN_BUILD" && ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)" "$@")
if [ "${CI:-}" = true ] || [ "${ATTN_SANITIZE:-0}" = 1 ]; then
  attn_log "CPU tests again under AddressSanitizer + UBSan (scripts/sanitize.sh)"
  "$ATTN_ROOT/scripts/sanitize.sh"
fi
