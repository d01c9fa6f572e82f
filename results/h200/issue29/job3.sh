#!/usr/bin/env bash
# Issue 29, the acceptance job, second try (written 2026-12-04 after job2): run from the repository
# root under setsid (results/h200/issue27/session.sh ISSUE29=1 starts it), once /tmp/fisite (and,
# for FA4's rows, /tmp/fa4site) hold the peers' sites (../shared/peers/README.md;
# scripts/peers/flashinfer_wheels.sh). It needs a session of its own: about 20-25 minutes.
# What job2 (11e14f3, results/h200/issue29/job2) taught:
#   - configs/decode_grid.json's untimed phase alone ran 418 s for 112 of 126 rows and hit its
#     420 s limit, so none of our rows was timed: the limit is 900 s here, and a run cut short is
#     resumed (--resume) instead of started again;
#   - the FA4 and PyTorch SDPA peers did 120 of 189 rows in their 300 s: 900 s here;
#   - FlashInfer compiled its decode modules (d128 and d64) in under a minute each and ran all 42
#     paged rows, which failed on the LSE's layout ([b, hq] for [b, hq, 1]; fixed in
#     scripts/peers/flashinfer.py since, test_peers covers it);
#   - configs/flash_decoding.json and the splits sweep were measured (job2); here only the
#     combine's dependent launch against the plain one (option pdl).
# Since job2 the sampled reference copies to float64 only what it reads (harness/src/verify/
# verify.cpp): a 2 GiB decode case's untimed phase 47.6 -> 30.1 s on a 2-core host. Step 1 below
# measures the untimed phase on this host (verified and not), so that the rest of it (input
# generation, uploads, the naive baseline) is known rather than guessed.
# Steps: 0. flush_probe.py (does the L2 flush's write-back make the batch-1 cost per call?);
#    1. the untimed phase of 3 cases (b64 x 8k, 2 GiB of K and V each, the three layouts),
#    --profile, verify auto and off, timed; 2. `attnbench check --impl cuda.flash_decode`, then
#    flash_decoding.json with pdl 0 and 1 (pdl_ab.md); 3. decode_grid, cuda.flash_decode and
#    cuda.cudnn_sdpa (resumed if cut); 4. FlashInfer's paged rows (its own file, first: its rows
#    are the ones never measured); 5. FA4 and PyTorch SDPA; 6. scripts/decode_summary.py's tables.
# Outputs under $W (default /tmp/j29); progress in $W/progress.txt.
set -uo pipefail
W=${W:-/tmp/j29}; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
attn_job_build $W/logs/build.txt || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }; el "build: $B"
# Is the flush's write-back the batch-1 cost per call? (flush_probe.py's header; PyTorch only)
timeout 180 python3 results/h200/issue29/flush_probe.py --out $W/flush_probe.json > $W/flush_probe.md 2>&1
el "flush_probe rc=$?"
for v in auto off; do  # bash's time: /usr/bin/time need not be installed there
  TIMEFORMAT="verify $v: %R s wall, %U s user, %S s sys"
  { time $B run configs/decode_grid.json --case 'b64_hq64_hkv8_sq1_skv8192_d128_*' \
      --impl cuda.flash_decode --verify $v --profile -q --out $W/untimed_$v.json \
      > $W/logs/untimed_$v.txt 2>&1; } 2>> $W/untimed_phase.txt
  el "untimed phase, $(tail -1 $W/untimed_phase.txt)"
done
timeout 300 $B check --impl cuda.flash_decode -q > $W/check_decode.txt 2>&1; el "check cuda.flash_decode rc=$?"
# The combine as a dependent launch (de67daf, option pdl, default 1) against the plain launch,
# one run: configs/flash_decoding.json (batch 1, 8k-128k) with pdl 0 and 1 beside cuDNN.
# Predicted: 1-3 us less per call with pdl=1 (32:8 32k: 51.0 -> 48-50 us in job2's terms).
python3 - "$W/flash_decoding_pdl.json" <<'PY'
import json, sys
c = json.load(open("configs/flash_decoding.json"))
c["options"] = {"cuda.flash_decode": {"pdl": [0, 1]}}
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
timeout 300 $B run $W/flash_decoding_pdl.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa \
  --out $W/flash_decoding.json > $W/logs/flash_decoding.txt 2>&1; el "flash_decoding (pdl 0/1) rc=$?"
python3 - $W/flash_decoding.json > $W/pdl_ab.md 2>&1 <<'PY'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["rows"] if r.get("time") and r.get("hbm_bytes")]
med = {}
for r in rows:
    key = "cudnn" if r["impl"] == "cuda.cudnn_sdpa" else f"pdl{(r.get('options') or {}).get('pdl', 1)}"
    med[(r["case"], key)] = r["time"]["median_ms"] * 1e3
print("| case | pdl=0 us | pdl=1 us | pdl1/pdl0 | cuDNN us | pdl=1 / cuDNN time |")
print("|---|---:|---:|---:|---:|---:|")
for case in dict.fromkeys(c for c, _ in med):
    a, b, n = med.get((case, "pdl0")), med.get((case, "pdl1")), med.get((case, "cudnn"))
    if a and b:
        print(f"| {case} | {a:.1f} | {b:.1f} | {b / a:.3f} | {n:.1f} | {b / n:.3f} |" if n else
              f"| {case} | {a:.1f} | {b:.1f} | {b / a:.3f} | - | - |")
PY
cat $W/pdl_ab.md
# The same rows after a read flush of L2 instead of a write (timing.flush, --flush read): the
# flush_probe hypothesis on our kernel and our cuDNN row, in attnbench's own timing.
timeout 300 $B run $W/flash_decoding_pdl.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa \
  --flush read --out $W/flash_decoding.read.json > $W/logs/flash_decoding.read.txt 2>&1
el "flash_decoding --flush read rc=$?"
for f in flash_decoding flash_decoding.read; do
  python3 scripts/decode_summary.py $W/$f.json $W/$f.json > $W/${f}_summary.md 2>&1
done
timeout 900 $B run configs/decode_grid.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa \
  --out $W/decode_grid.json > $W/logs/decode_grid.txt 2>&1; rc=$?; el "decode_grid rc=$rc"
if [ $rc = 124 ] || [ $rc = 143 ]; then
  timeout 600 $B run configs/decode_grid.json --impl cuda.flash_decode --impl cuda.cudnn_sdpa \
    --resume $W/decode_grid.json > $W/logs/decode_grid.resume.txt 2>&1; el "decode_grid resumed rc=$?"
fi
timeout 420 python3 scripts/peers/peers.py configs/decode_grid.json --peers flashinfer \
  --attnbench $B --out $W/decode_grid.flashinfer.json > $W/logs/decode_grid.flashinfer.txt 2>&1
el "peers decode_grid (FlashInfer) rc=$?"
timeout 900 python3 scripts/peers/peers.py configs/decode_grid.json --peers fa4,torch_sdpa \
  --backend cudnn,flash --fa4-site /tmp/fa4site --attnbench $B --out $W/decode_grid.peers.json \
  > $W/logs/decode_grid.peers.txt 2>&1; el "peers decode_grid (FA4, SDPA) rc=$?"
files=($W/decode_grid.json)
for f in $W/decode_grid.peers.json $W/decode_grid.flashinfer.json; do [ -f $f ] && files+=($f); done
python3 scripts/decode_summary.py "${files[@]}" > $W/decode_summary.md 2>&1
el "job done"
