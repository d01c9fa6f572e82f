#!/usr/bin/env bash
# Issue 30, forward step 16 (written 2026-12-06, session 61; run 2026-12-07 at f0e34e4 on an
# H100: ab.md, run.txt and cap_max.results.json.gz beside this file, read in the tuning log's
# step 16): cuda.flash_fwd_wgmma under a soft cap with the cap's bound (t = tanh(.) <= 1) as every
# row's maximum (cap_max=1, the default in bf16) against the running maxima (cap_max=0), both from
# one build in one run, row after row: cap_max.json (softcap.json's forward shapes at softcap 0,
# 30 and 50; 0 is the control, where both settings run the same code). About 2-3 minutes.
# At f0e34e4 the bound stopped at softcap 41.5 and softcap 50 was a control too; since step 16b
# (the exponent shifted, up to softcap 51.9) softcap 50 takes the bound as well.
# Prediction at f0e34e4 (step 16): softcap 30, d128: cap_max=1 / cap_max=0 time 0.92-0.97, d256
# 0.97-1.00; softcap 50 and 0: 0.99-1.01. Measured: d128 0.96-0.97 (one cell 1.002), d256
# 0.85-0.88. Prediction for step 16b (speed, cap_max=1 / 0): softcap 50 d128 1.02-1.05, d256
# 1.12-1.18; softcap 30 as before; softcap 0 0.97-1.02.
# Run from the repository root on the GPU machine after a build (session.sh JOBS=<this>): B
# (default build/attnbench), W (default /tmp/abcapmax): cap_max.json (the results), run.txt, ab.md
# (scripts/option_ab.py: cap_max=1 / cap_max=0 per case, above 1 where the bound is faster).
set -uo pipefail
W=${W:-/tmp/abcapmax}; mkdir -p "$W"
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-07-fwd-cap-max
timeout 420 "$B" run $HERE/cap_max.json --out "$W/cap_max.json" > "$W/run.txt" 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py "$W/cap_max.json" --option cap_max --impl cuda.flash_fwd_wgmma \
  --class softcap30=softcap30 --class softcap50=softcap50 --class d128=_d128_ --class d256=_d256_ \
  --out "$W/ab.md" > /dev/null
grep "All rows" "$W/ab.md"
