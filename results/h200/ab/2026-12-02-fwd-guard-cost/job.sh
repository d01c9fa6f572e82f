#!/usr/bin/env bash
# Issue 28: what the large-logit guard costs. The wgmma forward at main (ed52a1a), without the guard
# (exp/fwd-noguard, f09c9d3's one-FFMA loop) and with the guard as one warp-uniform branch per tile
# (exp/fwd-uniform-guard), built and timed in one GPU job, two rounds (forward, then reverse order).
# Tarballs: git archive REV | gzip > build-ab/NAME.tar.gz.
set -uo pipefail
W=/tmp/guard; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
revs=(main exp-fwd-noguard exp-fwd-uniform-guard)
for r in "${revs[@]}"; do
  mkdir -p $W/$r/src && tar -xzf build-ab/$r.tar.gz -C $W/$r/src
  ( cmake -S $W/$r/src -B $W/$r/build -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && cmake --build $W/$r/build -j 5 --target attnbench ) > $W/logs/build-$r.txt 2>&1 &
done
wait; t=$(date +%s); echo "builds done"
for r in "${revs[@]}"; do [ -x $W/$r/build/attnbench ] || echo "build $r FAILED"; done
ARGS=(--impl cuda.flash_fwd_wgmma --pass fwd --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*' --verify off)
for k in 1 2; do
  order=("${revs[@]}"); [ $k = 2 ] && order=(exp-fwd-uniform-guard exp-fwd-noguard main)
  for r in "${order[@]}"; do
    ATTNBENCH_GIT_REVISION=$r $W/$r/build/attnbench run $W/$r/src/configs/fa3_grid.json "${ARGS[@]}" --out $W/$r-$k.json > $W/logs/run-$r-$k.txt 2>&1; echo "$r run $k rc=$? $(( $(date +%s) - t )) s"
  done
done
for r in exp-fwd-noguard exp-fwd-uniform-guard; do
  python3 scripts/ab_summary.py --base $W/main-{1,2}.json --new $W/$r-{1,2}.json --out $W/ab-main-$r.md > /dev/null 2>&1; echo "$r vs main: $(grep 'All rows' $W/ab-main-$r.md)"
done
