#!/usr/bin/env bash
# Issue 29, the decode grid in the time left after a gate (written 2026-12-05, session 52): job3
# needs a session of its own (20-25 minutes), and the gate of a new revision takes about 9 of a
# session's 30. This is job3 trimmed to what has never been measured, most valuable first, each
# step with a time limit so that the chain ends inside the device budget:
#   1. configs/decode_grid.json: cuda.flash_decode and cuda.cudnn_sdpa (our in-harness cuDNN, which
#      ran at 1.0-1.08x PyTorch's cuDNN backend on the batch-1 cells in job2), verified and timed
#      (a run cut by its limit leaves `complete: false` with the rows it timed);
#   2. FlashInfer 0.7.2 on the same config (its paged decode; /tmp/fisite and /tmp/fa4site);
#   3. configs/flash_decoding.json with the combine's dependent launch off and on (option pdl)
#      beside cuDNN, after the usual write flush of L2, and again after a read flush (job3's
#      flush hypothesis, in attnbench's own timing);
#   4. scripts/decode_summary.py's tables.
# Limits per step: GRID_S (420 s), FI_S (300 s), PDL_S (120 s each; 0 skips step 3); CASES="GLOB ..."
# keeps only those cases of the grid (ours and FlashInfer's).
# Not here (job3 has them): the untimed-phase measurement, `check --impl cuda.flash_decode` (the
# gate's check covers it), flush_probe.py, PyTorch SDPA and FA4 as peers (FA4 has no split-KV on
# SM 9.0: 0.11-0.35x ours at batch 1 in job1).
# Run by results/h200/issue27/session.sh (ISSUE29=1 ISSUE29_JOB=results/h200/issue29/job4.sh),
# which gives B (the gate's build) and W (default /tmp/j29).
set -uo pipefail
W=${W:-/tmp/j29}; mkdir -p "$W/logs"
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a "$W/progress.txt"; }
attn_job_build "$W/logs/build.txt" || { el "build FAILED"; exit 3; }; el "build: $B"
# CASES="GLOB ...": only those cases of the grid (e.g. the target cells when the budget is short).
# (read -ra: the globs split on spaces, never expanded against this folder's files.)
case_args=()
read -ra globs <<< "${CASES:-}"
for g in "${globs[@]}"; do case_args+=(--case "$g"); done
timeout "${GRID_S:-420}" "$B" run configs/decode_grid.json "${case_args[@]}" --impl cuda.flash_decode \
  --impl cuda.cudnn_sdpa --out "$W/decode_grid.json" > "$W/logs/decode_grid.txt" 2>&1
el "decode_grid rc=$? (${CASES:-every case})"
timeout "${FI_S:-300}" python3 scripts/peers/peers.py configs/decode_grid.json "${case_args[@]}" \
  --peers flashinfer --attnbench "$B" --out "$W/decode_grid.flashinfer.json" \
  > "$W/logs/decode_grid.flashinfer.txt" 2>&1
el "peers decode_grid (FlashInfer) rc=$?"
files=("$W/decode_grid.json")
[ -f "$W/decode_grid.flashinfer.json" ] && files+=("$W/decode_grid.flashinfer.json")
python3 scripts/decode_summary.py "${files[@]}" > "$W/decode_summary.md" 2>&1
el "decode_summary rc=$?"
python3 - "$W/flash_decoding_pdl.json" <<'PY'
import json, sys
c = json.load(open("configs/flash_decoding.json"))
c["options"] = {"cuda.flash_decode": {"pdl": [0, 1]}}
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
# PDL_S=0: skip the pdl A/B (a short budget).
[ "${PDL_S:-120}" = 0 ] && { el "job done (no pdl A/B)"; exit 0; }
for flush in write read; do
  out="$W/flash_decoding.$flush.json"
  timeout "${PDL_S:-150}" "$B" run "$W/flash_decoding_pdl.json" --impl cuda.flash_decode \
    --impl cuda.cudnn_sdpa --flush "$flush" --out "$out" > "$W/logs/flash_decoding.$flush.txt" 2>&1
  el "flash_decoding pdl 0/1, --flush $flush rc=$?"
  python3 scripts/decode_summary.py "$out" "$out" > "$W/flash_decoding.${flush}_summary.md" 2>&1
done
python3 - "$W"/flash_decoding.write.json "$W"/flash_decoding.read.json > "$W/pdl_ab.md" 2>&1 <<'PY'
import json, os, sys
print("| flush | case | pdl=0 us | pdl=1 us | pdl1/pdl0 | cuDNN us | pdl=1 / cuDNN time |")
print("|---|---|---:|---:|---:|---:|---:|")
for path in sys.argv[1:]:
    if not os.path.exists(path):
        continue
    flush = path.rsplit(".", 2)[-2]
    med = {}
    for r in json.load(open(path))["rows"]:
        if not (r.get("time") and r.get("hbm_bytes")):
            continue
        opts = r.get("options") or {}
        key = "cudnn" if r["impl"] == "cuda.cudnn_sdpa" else f"pdl{opts.get('pdl', 1)}"
        med[(r["case"], key)] = r["time"]["median_ms"] * 1e3
    for case in dict.fromkeys(c for c, _ in med):
        a, b, n = med.get((case, "pdl0")), med.get((case, "pdl1")), med.get((case, "cudnn"))
        if a and b:
            tail = f"{n:.1f} | {b / n:.3f}" if n else "- | -"
            print(f"| {flush} | {case} | {a:.1f} | {b:.1f} | {b / a:.3f} | {tail} |")
PY
el "job done"
