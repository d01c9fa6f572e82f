#!/usr/bin/env bash
# Issues 28 and 30, forward step 14 (written 2026-12-05, not yet run): cuda.flash_fwd_wgmma with
# every 4th 8-column group's exponentials computed on the FMA pipes (option exp2_poly=1,
# common/exp2_poly.hpp) against all of them on MUFU.EX2 (exp2_poly=0, the default), both from one
# build in one run, row after row: exp2_poly.json (the FA3 grid's 24 forward rows at 2k-16k and
# configs/softcap.json's 12 forward rows at softcap 30).
# Prediction (docs/tuning_flash_wgmma.md, step 14): soft cap d128 1.04-1.10x (its cost against the
# dense forward from 14-18% towards 10%), d256 soft cap 1.00-1.04x; dense and causal 0.99-1.03x
# (the SFU bounds the softmax, but the pingpong hides most of the softmax under the other
# consumer's GEMMs); d64 1.00-1.04x.
# Run from the repository root on the GPU machine after a build: B (default build/attnbench), W
# (default /tmp/abexp2): exp2_poly.json (the results), run.txt, ab.md (scripts/option_ab.py:
# exp2_poly=1 / exp2_poly=0 per case, above 1 where the polynomial is faster).
set -uo pipefail
W=${W:-/tmp/abexp2}; mkdir -p $W
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-05-fwd-exp2-poly
timeout 420 $B run $HERE/exp2_poly.json --out $W/exp2_poly.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py $W/exp2_poly.json --option exp2_poly --impl cuda.flash_fwd_wgmma \
  --class softcap=softcap --class causal=_causal_ --out $W/ab.md > /dev/null
grep "All rows" $W/ab.md
