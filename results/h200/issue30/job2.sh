#!/usr/bin/env bash
# Issue 30, second GPU run: what the narrow windows and the soft cap cost the wgmma forward, and
# two predicted fixes, in one job (repository root, under setsid):
#   1. build this tree (0235b85: window and soft-cap kernels also persistent) and
#      exp/softcap-tanh-approx (build-ab/tanh-approx.tar.gz: the soft cap through tanh.approx.f32,
#      one SFU op instead of ex2 + rcp) side by side;
#   2. `attnbench check` of the tanh.approx build's soft-cap conformance cases (is it accurate
#      enough for the rule?);
#   3. timing, verification off: configs/window.json and configs/softcap.json, forward of
#      cuda.flash_fwd_wgmma with persistent 0 and 1 (this tree), softcap.json on the tanh.approx
#      build, and the fa3 grid's dense d128/d256 forward rows (the same job's dense TFLOP/s).
# Predictions: persistent=1 lifts window 128 from 0.17-0.30x of dense to >= 0.45x (the producer
# loads the next tile's Q and K/V while the consumers finish: the short blocks' prologue hidden);
# tanh.approx takes the d128 soft cap from 0.66-0.69x of dense to >= 0.85x (SFU ops per score
# 3 -> 2).
set -uo pipefail
W=/tmp/j2; mkdir -p $W/logs $W/cfg
source scripts/common.sh; attn_cudnn_from_wheel
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && time cmake --build build-gpu -j 9 --target attnbench ) > $W/logs/build.txt 2>&1 &
mkdir -p $W/ta/src && tar -xzf build-ab/tanh-approx.tar.gz -C $W/ta/src
( cmake -S $W/ta/src -B $W/ta/build -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_CUDA_GENCODE="$ATTN_GPU_GENCODE" "${ATTN_CMAKE_ARGS[@]}" -DBUILD_TESTING=OFF && time cmake --build $W/ta/build -j 7 --target attnbench ) > $W/logs/build-ta.txt 2>&1 &
python3 - <<'PY'
import json
for name in ['window', 'softcap']:
    c = json.load(open(f'configs/{name}.json'))
    c['name'] = name + '_fwd'
    c['implementations'] = ['cuda.flash_fwd_wgmma']
    c['passes'] = ['fwd']
    c['options'] = {'cuda.flash_fwd_wgmma': {'persistent': [0, 1]}}
    json.dump(c, open(f'/tmp/j2/cfg/{name}_fwd.json', 'w'), indent=1)
PY
wait; el "builds done"; grep real $W/logs/build*.txt
B=build-gpu/attnbench; TA=$W/ta/build/attnbench
[ -x $B ] || { el "build FAILED"; tail -30 $W/logs/build.txt; exit 3; }
[ -x $TA ] && { timeout 120 $TA check --impl cuda.flash_fwd_wgmma --case '*softcap*' > $W/check_ta.txt 2>&1; el "check tanh.approx rc=$?"; grep -E "FAIL|PASS" $W/check_ta.txt | tail -8; }
timeout 120 $B run $W/cfg/window_fwd.json --verify off --out $W/window.json > $W/logs/window.txt 2>&1; el "window rc=$?"
timeout 120 $B run $W/cfg/softcap_fwd.json --verify off --out $W/softcap.json > $W/logs/softcap.txt 2>&1; el "softcap rc=$?"
[ -x $TA ] && { ATTNBENCH_GIT_REVISION=tanh-approx timeout 100 $TA run configs/softcap.json --impl cuda.flash_fwd_wgmma --pass fwd --verify off --out $W/softcap-ta.json > $W/logs/softcap-ta.txt 2>&1; el "softcap tanh.approx rc=$?"; }
timeout 60 $B run configs/fa3_grid.json --impl cuda.flash_fwd_wgmma --pass fwd --case '*_sq2048_*d128*' --case '*_sq2048_*d256*' --case '*_sq4096_*d128*' --case '*_sq8192_*d128*' --case '*_sq8192_*d256*' --case '*_sq16384_*d128*' --case '*_sq16384_*d256*' --verify off --out $W/dense.json > $W/logs/dense.txt 2>&1; el "dense rc=$?"
el "job done"
