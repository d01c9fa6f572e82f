#!/usr/bin/env bash
# Issue 29: where batch-1 GQA decode loses its time (written 2026-12-04; run 2026-12-06 at 1f65ac1:
# results/h200/issue29/ncu-2026-12-06-1f65ac1/). job2
# (results/h200/issue29/job2) measured cuda.flash_decode at 32:8, d128, batch 1 at 0.59 of the
# read ceiling at 32k and 0.74 at 64k (target 0.765), and the splits sweep ruled the split count
# out. Taking time = F + bytes / ceiling, F is about 16-21 us for ours at every context and
# 14-19 us for cuDNN (cuda.cudnn_sdpa, same job): a cost per call, not per byte. This job names
# it, under Nsight Compute with the GPU's own clocks (--clock-control none) and the caches
# flushed before each kernel (ncu's default, as attnbench's timing flushes L2):
#   - each kernel's duration (the split kernel and the combine), DRAM throughput and achieved
#     bandwidth, waves, registers, and the launch's grid;
#   - the same for cuDNN's kernel(s) at the same case, and at 128k, where both reach 0.86-0.98;
#   - the split kernel's duration against job2's timed median (51.0 us at 32k): what is left is
#     launch and the gap between the two kernels.
# Run from the repository root on the GPU machine after a build (B, default build/attnbench);
# about 2 minutes. Outputs in $W (default /tmp/ncu29): *.ncu-rep, *.csv (ncu --page raw),
# summary.txt (kernel, duration, DRAM bytes and throughput per launch).
set -uo pipefail
W=${W:-/tmp/ncu29}; mkdir -p $W
source scripts/common.sh; attn_cudnn_from_wheel
B=${B:-build/attnbench}
cat > $W/decode_ncu.json <<'JSON'
{"name": "issue29_ncu", "description": "issue 29 ncu cases: decode, batch 1, 32 query heads over 8 kv heads, d128, bf16, contiguous cache, 8k, 32k and 128k",
 "problem": {"batch": 1, "heads_q": 32, "heads_kv": 8, "seq_q": 1, "head_dim": 128, "causal": true, "dtype": "bf16"},
 "sweep": {"product": {"seq_kv": [8192, 32768, 131072]}},
 "implementations": ["cuda.flash_decode", "cuda.cudnn_sdpa"], "passes": ["fwd"],
 "verify": {"mode": "off"}}
JSON
METRICS=gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__waves_per_multiprocessor,sm__throughput.avg.pct_of_peak_sustained_elapsed
timeout 300 ncu --clock-control none --nvtx --metrics $METRICS --section LaunchStats --section SpeedOfLight \
  --section MemoryWorkloadAnalysis -o $W/decode -f $B run $W/decode_ncu.json --profile --verify off -q \
  --out $W/decode_ncu.results.json > $W/ncu.log 2>&1
echo "ncu rc=$?" | tee -a $W/ncu.log
ncu -i $W/decode.ncu-rep --page raw --csv > $W/decode.csv 2>> $W/ncu.log
python3 - $W/decode.csv > $W/summary.txt 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0]
want = ["Kernel Name", "gpu__time_duration.sum", "dram__bytes_read.sum",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed", "launch__grid_size", "launch__block_size",
        "launch__registers_per_thread", "launch__waves_per_multiprocessor"]
idx = [head.index(w) for w in want if w in head]
nvtx = [i for i, h in enumerate(head) if h.startswith("NVTX")]
print(" | ".join(head[i] for i in idx + nvtx[:1]))
print(" | ".join(rows[1][i] for i in idx + nvtx[:1]))  # units
for r in rows[2:]:
    print(" | ".join(r[i][:60] for i in idx) + (" | " + r[nvtx[0]][:90] if nvtx else ""))
PY
cat $W/summary.txt
