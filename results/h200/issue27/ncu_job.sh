#!/usr/bin/env bash
# Issue 27's first step (written 2026-12-02, fourth session, for a later GPU session): Nsight
# Compute on our two backwards and FA4's SM90 backward at the issue's case (b1, 16 heads, seq
# 16384, d128, bf16, non-causal and causal), the sections that say which overlap is missing:
# SpeedOfLight, ComputeWorkloadAnalysis (tensor pipe), MemoryWorkloadAnalysis, Occupancy,
# WarpStateStats (issue stalls), SchedulerStats, LaunchStats. One call each (--profile), ncu's
# default cache control. Run from the repository root under setsid after the gate (its build) and
# with FA4 in /tmp/fa4site; everything under $W (default /tmp/j27): <side>.ncu-rep and
# <side>.details.txt (ncu -i ... --page details). About 5 minutes.
set -uo pipefail
W=${W:-/tmp/j27}; mkdir -p $W
source scripts/common.sh; attn_cudnn_from_wheel
B=${B:-build/attnbench}
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
SECTIONS=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis
          --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats
          --section SourceCounters)
# stalls BASE: BASE.stalls.txt, the warp stall reasons of every profiled kernel (every raw metric
# whose name has issue_stalled; the details page shows only their sum). 2026-12-04's profile
# had no breakdown.
stalls() {
  ncu -i "$1.ncu-rep" --page raw --csv 2>/dev/null | python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 3: sys.exit("no raw rows")
head = rows[0]
cols = [i for i, h in enumerate(head) if "issue_stalled" in h or h in ("Kernel Name", "ID")]
for r in rows[2:]:
    print(" | ".join(f"{head[i]}={r[i]}" for i in cols))' > "$1.stalls.txt" 2>&1
}
cat > $W/case.json <<'JSON'
{"name": "issue27_ncu", "description": "issue 27's ncu case: b1, 16 heads, seq 16384, d128, bf16",
 "problem": {"batch": 1, "heads_q": 16, "heads_kv": 16, "seq_q": 16384, "seq_kv": 16384,
             "head_dim": 128, "dtype": "bf16"},
 "sweep": {"product": {"causal": [false, true]}},
 "implementations": ["cuda.flash_bwd_wgmma", "cuda.flash_bwd_mma"], "passes": ["bwd"],
 "verify": {"mode": "off"}}
JSON
for impl in cuda.flash_bwd_wgmma cuda.flash_bwd_mma; do
  timeout 300 ncu "${SECTIONS[@]}" --nvtx --nvtx-include "regex:attnbench@${impl//./\\.}:.*:bwd/" \
    -o $W/$impl -f $B run $W/case.json --impl $impl --profile --verify off -q > $W/$impl.log 2>&1
  el "ncu $impl rc=$?"
  ncu -i $W/$impl.ncu-rep --page details > $W/$impl.details.txt 2>&1
  stalls $W/$impl
done
# fa4_profile LOG FILTER...: FA4's backward (peers.py, one call per row) under ncu with FILTER.
fa4_profile() {
  local log=$1; shift
  timeout 400 ncu "${SECTIONS[@]}" "$@" -o $W/fa4 -f \
    python3 scripts/peers/peers.py $W/case.json --peers fa4 --fa4-site /tmp/fa4site --attnbench $B \
    --profile --out $W/fa4.peers.json > "$log" 2>&1
}
fa4_profile $W/fa4.log --nvtx --nvtx-include "regex:fa4\.flash_attn:.*:bwd/"
el "ncu fa4 rc=$?"
# 2026-12-04 (66605db): the NVTX filter above matched no kernel of FA4's ('No kernels were
# profiled': PyTorch's default-domain ranges were not seen), so filter by kernel name instead:
# every launch whose name says backward (FA4's pre/postprocess too, as ours), at most 12.
if [ ! -f $W/fa4.ncu-rep ]; then
  fa4_profile $W/fa4.byname.log --kernel-name 'regex:(?i)(bwd|backward)' --launch-count 12
  el "ncu fa4 by kernel name rc=$? ($(grep -c '==PROF== Profiling' $W/fa4.byname.log) kernels)"
fi
ncu -i $W/fa4.ncu-rep --page details > $W/fa4.details.txt 2>&1
stalls $W/fa4
el "done"
