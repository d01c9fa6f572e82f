#!/usr/bin/env bash
# Issues 28 and 30, forward step 14 (written 2026-12-05, not yet run): cuda.flash_fwd_wgmma with
# every 4th 8-column group's exponentials computed on the FMA pipes (option exp2_poly=1,
# common/exp2_poly.hpp) against all of them on MUFU.EX2 (exp2_poly=0, the default), both from one
# build in one run, row after row: exp2_poly.json (the FA3 grid's 12 forward rows at 2k and 16k
# and configs/softcap.json's 8 forward rows at softcap 30, 2k and 16k; trimmed from 2k-16k on
# 2026-12-05 to keep the session's jobs within its device time).
# Prediction (docs/tuning_flash_wgmma.md, step 14): soft cap d128 1.04-1.10x (its cost against the
# dense forward from 14-18% towards 10%), d256 soft cap 1.00-1.04x; dense and causal 0.99-1.03x
# (the SFU bounds the softmax, but the pingpong hides most of the softmax under the other
# consumer's GEMMs); d64 1.00-1.04x.
# Added 2026-12-05 (stop 49), same run: persistent=1 against the default on the FA3 grid's rows
# (issue 28; tuning log step 4: never timed on the dense grid). FA4's SM90 forward is not
# persistent either (its wheel's flash_fwd_sm90.py: SingleTileScheduler, LPT order for causal),
# so the prediction is no gain: 0.97-1.01x, the low end at causal d128/d256 16k, where the
# producer's spills and the O store from registers cost; at most +2% at 2k.
# Added the same day: fused_tail=1 against the default (forward step 15: the P V wait, O's rescale
# and P's conversion in the exponent loop's branch, one basic block with the exponentials, as in
# FA4's SASS). Predicted d128 and d64 1.00-1.04x (non-causal most), d256 1.00-1.02x (there only
# P's conversion moves: O is rescaled early, under the next S GEMM), soft cap d128 (its rows
# too) 1.00-1.04x; the risk is the P V wait, which ptxas now places after about a fifth of the
# exponentials: if the P V GEMM is still running there, the warp stalls where the old order
# issued exponentials.
# Run from the repository root on the GPU machine after a build: B (default build/attnbench), W
# (default /tmp/abexp2): exp2_poly.json (the results), run.txt, ab.md (scripts/option_ab.py:
# exp2_poly=1 / exp2_poly=0 per case with persistent=0, above 1 where the polynomial is faster;
# then persistent=1 / persistent=0 and fused_tail=1 / fused_tail=0, the other options at 0).
set -uo pipefail
W=${W:-/tmp/abexp2}; mkdir -p $W
B=${B:-build/attnbench}
HERE=results/h200/ab/2026-12-05-fwd-exp2-poly
timeout 660 $B run $HERE/exp2_poly.json --out $W/exp2_poly.json > $W/run.txt 2>&1
echo "run rc=$?"
python3 scripts/option_ab.py $W/exp2_poly.json --option exp2_poly --impl cuda.flash_fwd_wgmma \
  --where persistent=0 --where fused_tail=0 --class softcap=softcap --class causal=_causal_ \
  --out $W/ab_poly.md > /dev/null
python3 scripts/option_ab.py $W/exp2_poly.json --option persistent --impl cuda.flash_fwd_wgmma \
  --where exp2_poly=0 --where fused_tail=0 --class causal=_causal_ --out $W/ab_persistent.md > /dev/null
python3 scripts/option_ab.py $W/exp2_poly.json --option fused_tail --impl cuda.flash_fwd_wgmma \
  --where exp2_poly=0 --where persistent=0 --class softcap=softcap --class d64=_d64_ \
  --class d128=_d128_ --class d256=_d256_ \
  --out $W/ab_fused.md > /dev/null
cat $W/ab_poly.md $W/ab_persistent.md $W/ab_fused.md > $W/ab.md
grep "All rows" $W/ab.md
