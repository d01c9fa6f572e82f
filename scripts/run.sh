#!/usr/bin/env bash
# The README's run command: install what is missing (as root), build the attnbench CLI (warnings
# stay warnings: a newer compiler's new warning must not stop a user), then run the main job:
# configs/default.json on every device present (CPU always, CUDA GPUs when there are any),
# print the table and write results/local/<config>-<date>.json. Extra arguments go to
# `attnbench run` (e.g. another config, --impl 'cuda.*', --out FILE).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
attn_install_deps
attn_cudnn_from_wheel
attn_build "${ATTN_BUILD_DIR:-$ATTN_ROOT/build}" attnbench  # only what it runs: no test targets
cd "$ATTN_ROOT"
if [ $# -eq 0 ] || [[ "$1" == -* ]]; then
  set -- configs/default.json "$@"
fi
exec "$ATTN_BUILD/attnbench" run "$@"
