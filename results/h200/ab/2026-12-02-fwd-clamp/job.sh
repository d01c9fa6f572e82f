#!/usr/bin/env bash
# Issue 28: the wgmma forward at f09c9d3 (the fast one), main (ed52a1a) and the clamp candidate
# (c8c3f5b = exp/fwd-softmax-clamp rebased on ed52a1a), built and timed in one GPU job, two rounds
# (forward, then reverse order); then `check` of the candidate's forward (every case of the
# default check set, large logits included). Tarballs: git archive REV | gzip > build-ab/NAME.tar.gz.
set -uo pipefail
W=/tmp/clamp; mkdir -p $W/logs
source scripts/common.sh; attn_cudnn_from_wheel
revs=(f09c9d3 main exp-clamp-rebased)
for r in "${revs[@]}"; do
  mkdir -p $W/$r/src && tar -xzf build-ab/$r.tar.gz -C $W/$r/src
  ( cmake -S $W/$r/src -B $W/$r/build -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && cmake --build $W/$r/build -j 5 --target attnbench ) > $W/logs/build-$r.txt 2>&1 &
done
wait; t=$(date +%s); echo "builds done"
for r in "${revs[@]}"; do [ -x $W/$r/build/attnbench ] || echo "build $r FAILED"; done
ARGS=(--impl cuda.flash_fwd_wgmma --pass fwd --case '*_sq2048_*' --case '*_sq4096_*' --case '*_sq8192_*' --case '*_sq16384_*' --verify off)
for k in 1 2; do
  order=("${revs[@]}"); [ $k = 2 ] && order=(exp-clamp-rebased main f09c9d3)
  for r in "${order[@]}"; do
    ATTNBENCH_GIT_REVISION=$r $W/$r/build/attnbench run $W/$r/src/configs/fa3_grid.json "${ARGS[@]}" --out $W/$r-$k.json > $W/logs/run-$r-$k.txt 2>&1; echo "$r run $k rc=$? $(( $(date +%s) - t )) s"
  done
done
for r in main exp-clamp-rebased; do
  python3 scripts/ab_summary.py --base $W/f09c9d3-{1,2}.json --new $W/$r-{1,2}.json --out $W/ab-f09c9d3-$r.md > /dev/null 2>&1; echo "$r vs f09c9d3: $(grep 'All rows' $W/ab-f09c9d3-$r.md)"
done
python3 scripts/ab_summary.py --base $W/main-{1,2}.json --new $W/exp-clamp-rebased-{1,2}.json --out $W/ab-main-clamp.md > /dev/null 2>&1; echo "clamp vs main: $(grep 'All rows' $W/ab-main-clamp.md)"
$W/exp-clamp-rebased/build/attnbench check --impl cuda.flash_fwd_wgmma > $W/logs/check-clamp.txt 2>&1; echo "check rc=$? $(( $(date +%s) - t )) s"; tail -5 $W/logs/check-clamp.txt
