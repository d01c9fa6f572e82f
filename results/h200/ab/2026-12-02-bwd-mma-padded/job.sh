#!/usr/bin/env bash
# One GPU job: the gate of HEAD (scripts/gpu_gate.sh, in build/), then issue 25's last SASS item
# timed: cuda.flash_bwd_mma's padded d256-tile causal kernels (head_dim 200), 2d79b6e (before
# issue 25; built at the lowest priority beside the gate, from build-ab/2d79b6e.tar.gz) against
# HEAD (the gate's build), two rounds, BASE NEW then NEW BASE, after the gate has finished.
set -uo pipefail
export ATTNBENCH_GIT_DIRTY=0
W=/tmp/ab; mkdir -p /tmp/g $W/logs $W/base/src
source scripts/common.sh; attn_cudnn_from_wheel
( tar -xzf build-ab/2d79b6e.tar.gz -C $W/base/src &&
  nice -n 19 cmake -S $W/base/src -B $W/base/build -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF &&
  nice -n 19 cmake --build $W/base/build -j 4 --target attnbench ) > $W/logs/build-base.txt 2>&1 &
GATE_BUILD=$PWD/build scripts/gpu_gate.sh /tmp/g/gate > /tmp/g/gate.log 2>&1; echo $? > /tmp/g/gate.rc
wait
ARGS=(--batch 4 --heads-q 16 --seq 2048,8192 --head-dim 200 --causal --dtype bf16,f16 --pass bwd --impl cuda.flash_bwd_mma --verify off)
for k in 1 2; do
  order=(base new); [ $k = 2 ] && order=(new base)
  for side in "${order[@]}"; do
    exe=$W/base/build/attnbench; rev=2d79b6e
    [ $side = new ] && exe=$PWD/build/attnbench && rev=$ATTNBENCH_GIT_REVISION
    ATTNBENCH_GIT_REVISION=$rev $exe run "${ARGS[@]}" --out $W/$side-$k.json > $W/logs/run-$side-$k.txt 2>&1; echo "$side $k rc=$?"
  done
done
python3 scripts/ab_summary.py --base $W/base-{1,2}.json --new $W/new-{1,2}.json --out $W/ab.md > /dev/null 2>&1; grep 'All rows' $W/ab.md
echo 0 > $W/rc
