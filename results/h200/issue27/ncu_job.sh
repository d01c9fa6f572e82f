#!/usr/bin/env bash
# Issue 27's first step (written 2026-12-02, fourth session, for a later GPU session): Nsight
# Compute on our two backwards and FA4's SM90 backward at the issue's case (b1, 16 heads, seq
# 16384, d128, bf16, non-causal and causal), the sections that say which overlap is missing:
# SpeedOfLight, ComputeWorkloadAnalysis (tensor pipe), MemoryWorkloadAnalysis, Occupancy,
# WarpStateStats (issue stalls), SchedulerStats, LaunchStats. One call each (--profile), ncu's
# default cache control. Run from the repository root under setsid after the gate (its build) and
# with FA4 in /tmp/fa4site; everything under $W (default /tmp/j27): <side>.ncu-rep and
# <side>.details.txt (ncu -i ... --page details). About 5 minutes.
# Since 2026-12-04 (second profile) also:
#  - PASSES (default "bwd fwd"): fwd profiles issue 28's forward the same way, cuda.flash_fwd_wgmma
#    and FA4's forward at b1, seq 16384, d128 (16 heads) and d256 (8 heads), causal and not
#    (since 2026-12-07 also at b8, seq 2048: the grid's forward loses most against FA4 at 2k-4k,
#    where a block has 8x fewer tiles to spread its start and its end over);
#  - <side>.source.csv.gz (ncu --page source, SASS with per-instruction counters) and
#    <side>.source.txt (scripts/ncu_source.py: the instructions with the most stall samples and
#    excess shared wavefronts) for our kernels;
#  - FA4 filtered by kernel name at once (its NVTX ranges matched nothing on 2026-12-04);
#  - compare.md: scripts/ncu_details.py's tables, ours beside FA4 per pass, and our backward's
#    pre/postprocess.
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
PASSES=${PASSES:-bwd fwd}
# case PASS FILE: the profiled rows of PASS (bwd: issue 27's d128 case; fwd: issue 28's d128 and
# d256 cases), implementations chosen per side on the command line.
case_json() {
  if [ "$1" = bwd ]; then
    echo '{"name": "issue27_ncu", "description": "issue 27 ncu case: b1, 16 heads, seq 16384, d128, bf16",
 "problem": {"batch": 1, "heads_q": 16, "heads_kv": 16, "seq_q": 16384, "seq_kv": 16384,
             "head_dim": 128, "dtype": "bf16"},
 "sweep": {"product": {"causal": [false, true]}},
 "implementations": ["cuda.flash_bwd_wgmma", "cuda.flash_bwd_mma"], "passes": ["bwd"],
 "verify": {"mode": "off"}}' > "$2"
  else
    echo '{"name": "issue28_ncu", "description": "issue 28 ncu cases: 16k tokens at seq 2048 (b8) and 16384 (b1), d128 (16 heads) and d256 (8 heads), bf16",
 "problem": {"dtype": "bf16"},
 "sweep": {"zip": [{"head_dim": [128, 256], "heads_q": [16, 8], "heads_kv": [16, 8]},
                   {"seq": [2048, 16384], "batch": [8, 1]}],
           "product": {"causal": [false, true]}},
 "implementations": ["cuda.flash_fwd_wgmma"], "passes": ["fwd"],
 "verify": {"mode": "off"}}' > "$2"
  fi
}
# source BASE: BASE.source.csv.gz and its summary BASE.source.txt, the main kernels only
# (flash_*_kernel, not the pre/postprocess); unfiltered if ncu takes no filter on import.
source_page() {
  ncu -i "$1.ncu-rep" --page source --csv --print-source sass --kernel-name 'regex:flash_.*_kernel' \
    2> "$1.source.err" | gzip > "$1.source.csv.gz"
  if ! zcat "$1.source.csv.gz" | grep Address > /dev/null; then  # not -q: SIGPIPE under pipefail
    ncu -i "$1.ncu-rep" --page source --csv --print-source sass 2>> "$1.source.err" | gzip > "$1.source.csv.gz"
  fi
  python3 scripts/ncu_source.py "$1.source.csv.gz" > "$1.source.txt" 2>&1
}
# fa4_profile PASS LOG FILTER...: FA4's PASS (peers.py, one call per row) under ncu with FILTER.
fa4_profile() {
  local pass=$1 log=$2; shift 2
  timeout 400 ncu "${SECTIONS[@]}" "$@" -o $W/fa4.$pass -f \
    python3 scripts/peers/peers.py $W/$pass.json --peers fa4 --fa4-site /tmp/fa4site --attnbench $B \
    --profile --out $W/fa4.$pass.peers.json > "$log" 2>&1
}
for pass in $PASSES; do
  case_json $pass $W/$pass.json
  if [ $pass = bwd ]; then impls="cuda.flash_bwd_wgmma cuda.flash_bwd_mma"; re='(bwd|Bwd|BWD|backward|Backward)'; n=12
  else impls="cuda.flash_fwd_wgmma"; re='(fwd|Fwd|FWD|forward|Forward)'; n=16; fi
  for impl in $impls; do
    side=$impl; [ $pass = fwd ] && side=$impl.fwd
    timeout 300 ncu "${SECTIONS[@]}" --nvtx --nvtx-include "regex:attnbench@${impl//./\\.}:.*:$pass/" \
      -o $W/$side -f $B run $W/$pass.json --impl $impl --pass $pass --profile --verify off -q > $W/$side.log 2>&1
    el "ncu $side rc=$?"
    ncu -i $W/$side.ncu-rep --page details > $W/$side.details.txt 2>&1
    stalls $W/$side
    source_page $W/$side
    # The forward's fixed cost per block, instruction by instruction (since 2026-12-07): the
    # non-causal d128 (12 and 94 tiles of 176 keys a block) and d256 (26 and 205 of 80) pairs of
    # fwd.json's 2k and 16k cases, tables 0:1 and 2:3 of the source page.
    if [ $pass = fwd ]; then
      python3 scripts/ncu_fixed_cost.py $W/$side.source.csv.gz --pair 0:1:12:94 --pair 2:3:26:205 \
        > $W/$side.fixed.txt 2>&1
    fi
  done
  # FA4's kernels by name: its forward and backward (and their pre/postprocess), at most n.
  fa4_profile $pass $W/fa4.$pass.log --kernel-name "regex:$re" --launch-count $n
  el "ncu fa4 $pass rc=$? ($(grep -c '==PROF== Profiling' $W/fa4.$pass.log) kernels)"
  ncu -i $W/fa4.$pass.ncu-rep --page details > $W/fa4.$pass.details.txt 2>&1
  stalls $W/fa4.$pass
done
# The forward's L2 traffic by kind (since 2026-12-07): at 18e424b FA4's forward showed about half
# our "L2 Cache Throughput" at d128 non-causal (29% against 52% at 16k) while reading the same K/V
# (results/h200/issue28/ncu-2026-12-07-18e424b/). These counters say whether it moves fewer L2
# sectors or the same ones another way (the far partition, tags). A run of their own per side
# (--log-file: the CSV apart from the programs' output), so a counter this GPU lacks costs only
# this table. L2=0 leaves it out.
L2_METRICS=lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_srcunit_tex_op_read.sum
L2_METRICS+=,lts__t_sectors_srcunit_ltcfabric.sum,lts__t_requests_srcunit_tex_op_read.sum
L2_METRICS+=,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,gpu__time_duration.sum
if [[ " $PASSES " == *" fwd "* ]] && [ "${L2:-1}" = 1 ]; then
  timeout 300 ncu --metrics "$L2_METRICS" --csv --log-file $W/l2.ours.csv --nvtx \
    --nvtx-include "regex:attnbench@cuda\\.flash_fwd_wgmma:.*:fwd/" \
    $B run $W/fwd.json --impl cuda.flash_fwd_wgmma --pass fwd --profile --verify off -q > $W/l2.ours.log 2>&1
  el "ncu l2 ours rc=$?"
  timeout 300 ncu --metrics "$L2_METRICS" --csv --log-file $W/l2.fa4.csv \
    --kernel-name 'regex:(fwd|Fwd|FWD|forward|Forward)' --launch-count 16 \
    python3 scripts/peers/peers.py $W/fwd.json --peers fa4 --fa4-site /tmp/fa4site --attnbench $B \
    --profile --out $W/l2.fa4.peers.json > $W/l2.fa4.log 2>&1
  el "ncu l2 fa4 rc=$?"
fi
# l2_table: the two CSVs side by side, one row per counter, one column per profiled kernel.
l2_table() {
  python3 - "$W/l2.ours.csv" "$W/l2.fa4.csv" <<'PY'
import csv, sys
cols, vals = [], {}
for side, path in zip(("ours", "fa4"), sys.argv[1:]):
    try:
        lines = [l for l in open(path, encoding="utf-8", errors="replace") if l.startswith('"')]
    except OSError as e:
        print(f"{side}: {e}"); continue
    rows = list(csv.DictReader(lines))
    ids = []
    for r in rows:
        k = f"{side}#{r.get('ID', '?')}"
        if k not in ids: ids.append(k)
        vals[(k, r.get("Metric Name", "?"))] = f"{r.get('Metric Value', '')} {r.get('Metric Unit', '')}".strip()
    cols += ids
names = sorted({m for _, m in vals})
print("| counter | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for m in names:
    print(f"| {m} | " + " | ".join(vals.get((c, m), "-") for c in cols) + " |")
PY
}
# Side by side (scripts/ncu_details.py): our main kernels and FA4's, per pass; our pre/postprocess.
{
  for pass in $PASSES; do
    ours=$W/cuda.flash_bwd_wgmma.details.txt; [ $pass = fwd ] && ours=$W/cuda.flash_fwd_wgmma.fwd.details.txt
    printf '## %s: ours and FA4 (main kernels, in the case order of %s.json)\n\n' $pass $pass
    python3 scripts/ncu_details.py "$ours" $W/fa4.$pass.details.txt 2>&1
    echo
  done
  if [ -s $W/l2.ours.csv ] || [ -s $W/l2.fa4.csv ]; then
    printf '## fwd: L2 counters, ours and FA4 (the case order of fwd.json)\n\n'
    l2_table 2>&1
    echo
  fi
  printf '## our backward pre/postprocess\n\n'
  python3 scripts/ncu_details.py $W/cuda.flash_bwd_wgmma.details.txt --kernel 'process' \
    --metric Duration --metric 'Memory Throughput' --metric 'DRAM Throughput' 2>&1
} > $W/compare.md
el "done"
