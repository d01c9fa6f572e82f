#!/usr/bin/env bash
# Issue 29 (written 2026-12-05, session 54): the combine fused into the split kernel (option
# fused_combine=1: the last split block of each (sequence, row tile, kv head) merges, counted in
# on an arrival counter in the workspace's zeroed prefix; the default at head_dim 72-128 since
# 2026-12-06) against the combine kernel (0, launched as a programmatic dependent grid; the
# default at the other head dims) and cuDNN, on the GPU (both options named in every row):
#   1. correctness under compute-sanitizer (initcheck: the counters are zeroed by the harness, not
#      by the kernel; memcheck; racecheck) on small ragged and paged problems with forced splits,
#      verified (the validation call) and then timed a few calls, so the sanitizers see calls
#      that start from the counters an earlier call left. (The harness verifies the first call
#      only; that a call leaves the counters at zero is test_decode_emulation's check, two calls
#      on one workspace with the outputs poisoned between them);
#   2. the A/B: batch 1, GQA 32:8 and 64:8, d64 and d128, contiguous, 4k-128k keys, read flush
#      (the decode configs' timing), fused_combine 0 and 1 side by side and cuDNN, every row
#      verified. Predicted fused/separate time 0.95-0.97 at 4k-32k (1-2 us of a 19-60 us call:
#      the second kernel's launch, its wait for the whole split grid and its read of the LSEs),
#      about 1.0 at 128k; no change where one split runs (never here);
#   3. read_size_probe.py: a plain read (torch.sum) of 8 MB to 1 GB after the read flush, its GB/s
#      and fixed cost per call: what any kernel pays at the batch-1 cells' sizes (about 10 s).
# Run by results/h200/issue27/session.sh (JOBS="results/h200/issue29/fused_ab.sh"), which gives B
# (the session's build) and W. Outputs in $W: fused_ab.json, fused_ab.md, san_*.txt, read_size_probe.md, logs/.
set -uo pipefail
W=${W:-/tmp/fused}; mkdir -p "$W/logs"
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a "$W/progress.txt"; }
if [ -z "${B:-}" ]; then attn_job_build "$W/logs/build.txt" || { el "build FAILED"; exit 3; }; fi
el "build: $B"

# 1. Sanitizers: two small problems (a ragged paged batch with a context of 0, speculative rows;
#    a contiguous GQA 8:2 one), splits forced to 5 and automatic, three timed calls each.
python3 - "$W/san.json" <<'PY'
import json, sys
c = {"name": "fused_combine_sanitize",
     "problem": {"dtype": "bf16", "heads_q": 8, "heads_kv": 2, "head_dim": 128, "causal": True},
     "groups": [
         {"problem": {"page_size": 16, "page_order": "shuffled"},
          "sweep": {"product": {"ragged": [{"batch": 4, "seq_q": 2, "min": 0, "max": 3000, "seed": 54}]}}},
         {"problem": {"batch": 2, "seq_q": 1, "seq_kv": 4097}},
     ],
     "inputs": {"distribution": "normal", "seed": 54},
     "verify": {"mode": "full"},
     "timing": {"hot": True, "min_time_s": 0.001, "repetitions": 3, "warmup_s": 0.001}}
for g in c["groups"]:
    g.update({"implementations": ["cuda.flash_decode"], "passes": ["fwd"],
              "options": {"cuda.flash_decode": {"fused_combine": [1], "splits": [0, 5]}}})
json.dump(c, open(sys.argv[1], "w"), indent=1)
PY
# SAN=0 skips them (the gate of 7fa648f ran all four sanitizers on configs/sanitize.json's paged
# group, fused_combine 0 and 1: 0 errors, 0 hazards).
for tool in $([ "${SAN:-1}" = 1 ] && echo initcheck memcheck racecheck); do
  timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 9 "$B" run "$W/san.json" -q \
    --out "$W/san_$tool.json" > "$W/san_$tool.txt" 2>&1
  el "compute-sanitizer $tool rc=$? ($(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$W/san_$tool.txt" | tail -1))"
done

# 2. The A/B.
timeout "${FUSED_S:-240}" "$B" run configs/decode_merge_ab.json \
  --out "$W/fused_ab.json" > "$W/logs/fused_ab.txt" 2>&1
el "fused A/B rc=$?"
python3 results/h200/issue29/fused_summary.py "$W/fused_ab.json" > "$W/fused_ab.md" 2>&1
el "summary rc=$?"
# 3. What a plain read of decode's sizes costs from a flushed L2 (read_size_probe.py): whether the
#    batch-1 cells' fixed cost is any kernel's at that size.
timeout 120 python3 results/h200/issue29/read_size_probe.py > "$W/read_size_probe.md" 2>&1
el "read size probe rc=$?"
el "job done"
