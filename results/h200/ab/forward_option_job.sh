#!/usr/bin/env bash
# One option's A/B on cuda.flash_fwd_wgmma, for a tuning step's job.sh (since 2026-12-07):
#
#   results/h200/ab/forward_option_job.sh DIR OPTION
#
# runs DIR/OPTION.json (a config sweeping OPTION over 0 and 1, usually the FA3 grid's 36 forward
# rows) with B (default build/attnbench) into W (default /tmp/ab_OPTION): OPTION.json (the
# results), run.txt, and ab.md (scripts/option_ab.py: OPTION=1 / OPTION=0 per case, the summary
# lines per head_dim, causal apart). Run from the repository root on the GPU machine after a build
# (results/h200/issue27/session.sh JOBS=DIR/job.sh).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: forward_option_job.sh DIR OPTION" >&2; exit 2; }
HERE=$1 OPT=$2
[ -f "$HERE/$OPT.json" ] || { echo "forward_option_job.sh: no config $HERE/$OPT.json" >&2; exit 2; }
W=${W:-/tmp/ab_$OPT}; mkdir -p "$W"
B=${B:-build/attnbench}
timeout 420 "$B" run "$HERE/$OPT.json" --out "$W/$OPT.json" > "$W/run.txt" 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py "$W/$OPT.json" --option "$OPT" --impl cuda.flash_fwd_wgmma \
  --class d64=_d64_bf --class d64c=_d64_causal --class d128=_d128_bf --class d128c=_d128_causal \
  --class d256=_d256_bf --class d256c=_d256_causal --out "$W/ab.md" > /dev/null
grep "All rows" "$W/ab.md"
