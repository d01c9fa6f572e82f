#!/usr/bin/env bash
# Issue 29, the acceptance job (written 2026-12-03 for the next GPU session): run from the
# repository root under setsid, right after the gate of the same revision on the same warm machine
# (whose build it reuses; else it builds this tree), once /tmp/fa4site and /tmp/fisite hold FA4's
# and FlashInfer's sites (../shared/peers/README.md; scripts/peers/flashinfer_wheels.sh).
# job1 (2026-12-03, results/h200/issue29/job1) measured flash_decoding.json with its peers, but
# the 291-case grid (now configs/decode_grid_full.json) did not fit the session's device time
# (about 3 s per GB of K and V for the host's inputs, per pass), and FlashInfer's rows were SKIP
# (the peer imported itself, fixed since). This job:
#   1. `attnbench check --impl cuda.flash_decode` (the conformance suite's decode and paged cases);
#   2. configs/flash_decoding.json again, cuda.flash_decode (automatic and 1 split) and the
#      query-parallel kernels beside it: the paged-row change of this revision must not move the
#      contiguous rows;
#   3. configs/decode_grid.json (63 cases, about 12 GiB of K and V per layout), cuda.flash_decode
#      and cuda.cudnn_sdpa, verification auto;
#   4. its peers: FA4 (page_table / seqused_k, all cells) and PyTorch SDPA's cuDNN and flash
#      backends (contiguous cells; the math backend is 45 GB/s and ran out of memory at 256 x 4k
#      in job1) in decode_grid.peers.json, then FlashInfer (paged cells; JIT) in
#      decode_grid.flashinfer.json, verification auto; scripts/decode_summary.py's tables of all.
# About 7 minutes on the H200 (estimate from job1's rates). Progress in $W/progress.txt;
# everything under $W (default /tmp/j29).
set -uo pipefail
W=${W:-/tmp/j29}; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
attn_job_build $W/logs/build.txt || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }; el "build: $B"
timeout 300 $B check --impl cuda.flash_decode -q > $W/check_decode.txt 2>&1; el "check cuda.flash_decode rc=$?"
python3 - "$W/flash_decoding_splits.json" <<'PY'
import json, sys
c = json.load(open("configs/flash_decoding.json"))
# Automatic, one split, and forced counts around the automatic choice (batch 1: 8 or 32 kv heads,
# so 16 splits fill 128 of 132 SMs at 32:8): is the batch-1 GQA miss (0.55 of the ceiling at
# 32:8 32k in job1, a ~26 us fixed cost per call) the split count, the wave's tail or neither?
c["options"] = {"cuda.flash_decode": {"splits": [0, 1, 8, 16, 32, 64, 128]}}
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
timeout 300 $B run $W/flash_decoding_splits.json --impl cuda.flash_decode --impl cuda.flash_fwd_wgmma \
  --impl cuda.cudnn_sdpa --out $W/flash_decoding.json > $W/logs/flash_decoding.txt 2>&1
el "flash_decoding rc=$?"
timeout 420 $B run configs/decode_grid.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa \
  --out $W/decode_grid.json > $W/logs/decode_grid.txt 2>&1; el "decode_grid rc=$?"
timeout 300 python3 scripts/peers/peers.py configs/decode_grid.json --peers fa4,torch_sdpa \
  --backend cudnn,flash --fa4-site /tmp/fa4site --attnbench $B --out $W/decode_grid.peers.json \
  > $W/logs/decode_grid.peers.txt 2>&1; el "peers decode_grid (FA4, SDPA) rc=$?"
# FlashInfer last and in a file of its own: it compiles its decode kernels just in time (nvcc on
# the GPU machine; one module per head_dim, minutes not measured yet), so a slow compile cannot
# cost the other peers' rows.
timeout 420 python3 scripts/peers/peers.py configs/decode_grid.json --peers flashinfer \
  --attnbench $B --out $W/decode_grid.flashinfer.json > $W/logs/decode_grid.flashinfer.txt 2>&1
el "peers decode_grid (FlashInfer) rc=$?"
fi_file=(); [ -f $W/decode_grid.flashinfer.json ] && fi_file=($W/decode_grid.flashinfer.json)
python3 scripts/decode_summary.py $W/decode_grid.json $W/decode_grid.peers.json "${fi_file[@]}" > $W/decode_summary.md 2>&1
python3 scripts/decode_summary.py $W/flash_decoding.json $W/flash_decoding.json > $W/flash_decoding_summary.md 2>&1
# The splits sweep: GB/s of cuda.flash_decode per (case, splits), median times.
python3 - $W/flash_decoding.json > $W/splits_sweep.md 2>&1 <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"]
        if r.get("impl") == "cuda.flash_decode" and r.get("gbps")]
cases = sorted({r["case"] for r in rows}, key=lambda c: [r["case"] for r in rows].index(c))
splits = sorted({(r.get("options") or {}).get("splits", 0) for r in rows})
print("| case | " + " | ".join("auto" if s == 0 else str(s) for s in splits) + " |")
print("|---" * (len(splits) + 1) + "|")
for c in cases:
    g = {(r.get("options") or {}).get("splits", 0): r["gbps"] for r in rows if r["case"] == c}
    print(f"| {c} | " + " | ".join(f"{g[s]:.0f}" if s in g else "" for s in splits) + " |")
PY
el "job done"
