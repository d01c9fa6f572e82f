#!/usr/bin/env bash
# One-off (not committed): the wgmma forward at f09c9d3, a80d083, d3ace93 and d229067, one job.
set -uo pipefail
ROOT=$(pwd); W=/tmp/bis; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
revs=(f09c9d3 a80d083 d3ace93 d229067)
for r in "${revs[@]}"; do
  src=build-ab/bis-$r.tar.gz; [ $r = d229067 ] && src=build-ab/new-d229067.tar.gz
  mkdir -p $W/$r/src && tar -xzf $src -C $W/$r/src
  ( cmake -S $W/$r/src -B $W/$r/build -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && cmake --build $W/$r/build -j 4 --target attnbench ) > $W/logs/build-$r.txt 2>&1 &
done
wait; t=$(date +%s); echo "builds done"
for r in "${revs[@]}"; do [ -x $W/$r/build/attnbench ] || echo "build $r FAILED"; done
ARGS=(--impl cuda.flash_fwd_wgmma --pass fwd --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*' --verify off)
for k in 1 2; do
  order=("${revs[@]}"); [ $k = 2 ] && order=(d229067 d3ace93 a80d083 f09c9d3)
  for r in "${order[@]}"; do
    ATTNBENCH_GIT_REVISION=$r $W/$r/build/attnbench run $W/$r/src/configs/fa3_grid.json "${ARGS[@]}" --out $W/$r-$k.json > $W/logs/run-$r-$k.txt 2>&1; echo "$r run $k rc=$? $(( $(date +%s) - t )) s"
  done
done
for r in a80d083 d3ace93 d229067; do
  python3 scripts/ab_summary.py --base $W/f09c9d3-{1,2}.json --new $W/$r-{1,2}.json --out $W/ab-f09c9d3-$r.md > /dev/null 2>&1; echo "$r: $(grep 'All rows' $W/ab-f09c9d3-$r.md)"
done
