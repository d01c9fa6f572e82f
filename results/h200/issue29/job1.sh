#!/usr/bin/env bash
# Issue 29, cuda.flash_decode's first GPU job (written 2026-12-02, fourth session, for the next
# GPU session): run from the repository root under setsid, right after the gate of the same
# revision on the same warm machine (whose build it reuses; else it builds this tree), and after
# the FA4 parts are in /tmp/fa4site (../shared/peers/README.md) when the FA4 rows are wanted.
#   1. `attnbench check --impl cuda.flash_decode`: the conformance suite (its paged and decode
#      cases; the gate's check covers them too when it ran);
#   2. configs/flash_decoding.json (batch 1, contiguous 8k-128k contexts, GQA 32:8 and MHA):
#      the split-KV kernel against the kernels that parallelise over queries only
#      (cuda.flash_fwd_mma, cuda.flash_fwd_wgmma, cuda.cudnn_sdpa), same run, with the read
#      ceiling in context.ceilings; forced splits 1 beside the automatic plan;
#   3. the peers on flash_decoding.json: PyTorch SDPA (cuDNN, flash: issue 29's best measured)
#      and FA4;
#   4. configs/decode_grid.json (291 cases: contiguous and paged), cuda.flash_decode and cuDNN
#      (its contiguous cells; the naive baseline
#      verifies; its own timing at these sizes is not wanted), then its peers: FA4 (page_table,
#      seqused_k), FlashInfer (batch decode; its site in /tmp/fisite from
#      scripts/peers/flashinfer_wheels.sh, sent like FA4's parts) and SDPA's SKIP rows;
#   5. configs/decode_ragged.json, cuda.flash_decode.
# Progress in $W/progress.txt; everything under $W (default /tmp/j29).
set -uo pipefail
W=${W:-/tmp/j29}; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
B=${B:-build/attnbench}
if [ ! -x "$B" ] || [ ! -e "$(dirname $B)/libattnbench_capi.so" ]; then
  ( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" && time cmake --build build-gpu -j 16 --target attnbench attnbench_capi ) > $W/logs/build.txt 2>&1
  B=build-gpu/attnbench
fi
[ -x $B ] || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }; el "build: $B"
timeout 300 $B check --impl cuda.flash_decode -q > $W/check_decode.txt 2>&1; el "check cuda.flash_decode rc=$?"
# The split-KV claim: ours (automatic, and forced to one split) against the query-parallel kernels.
python3 - "$W/flash_decoding_splits.json" <<'PY'
import json, sys
c = json.load(open("configs/flash_decoding.json"))
c["options"] = {"cuda.flash_decode": {"splits": [0, 1]}}
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
timeout 400 $B run $W/flash_decoding_splits.json --impl cuda.flash_decode --impl cuda.flash_fwd_mma \
  --impl cuda.flash_fwd_wgmma --impl cuda.cudnn_sdpa --out $W/flash_decoding.json > $W/logs/flash_decoding.txt 2>&1
el "flash_decoding rc=$?"
timeout 400 python3 scripts/peers/peers.py configs/flash_decoding.json --peers torch_sdpa,fa4 \
  --fa4-site /tmp/fa4site --attnbench $B --out $W/flash_decoding.peers.json \
  > $W/logs/flash_decoding.peers.txt 2>&1; el "peers flash_decoding rc=$?"
timeout 580 $B run configs/decode_grid.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa --out $W/decode_grid.json \
  > $W/logs/decode_grid.txt 2>&1; el "decode_grid rc=$?"
timeout 500 python3 scripts/peers/peers.py configs/decode_grid.json --peers fa4,flashinfer,torch_sdpa \
  --fa4-site /tmp/fa4site --attnbench $B --out $W/decode_grid.peers.json \
  > $W/logs/decode_grid.peers.txt 2>&1; el "peers decode_grid rc=$?"
timeout 300 $B run configs/decode_ragged.json --impl cuda.flash_decode --out $W/decode_ragged.json \
  > $W/logs/decode_ragged.txt 2>&1; el "decode_ragged rc=$?"
el "job done"
