#!/usr/bin/env bash
# The next GPU session's whole device work in one chain (written 2026-12-03, after a session
# with no device time): start it under setsid in the FIRST device call, right after copying FA4's
# first wheel part; later calls only bring the other parts, unpack FA4 and collect.
#
#   1. the gate of this revision (scripts/gpu_gate.sh, its own build with WERROR in build/):
#      the first GPU run of the d256 backward, the variant (window / soft cap / varlen) backward
#      kernels, backward step 4's dQ writer warps and named barriers, and cuDNN's varlen graphs;
#   2. issue 27's measurement, once /tmp/fa4site/.ready exists (touch it after unpacking FA4):
#      the FA3 grid's bwd and fwd_bwd rows of cuda.flash_bwd_wgmma and cuda.flash_bwd_mma
#      beside FA4 (and its deterministic mode) and PyTorch's cuDNN, one job
#      (scripts/fa3_job.sh's peers, grid and report parts, with the gate's build);
#   3. if time is left (JOB3=1): issue 30's job3 on varlen and window (the first verified run of
#      cuda.cudnn_sdpa's varlen graphs, and the wgmma backward's variants beside FA4).
# Everything under $W (default /tmp/sess): progress.txt, gate/ (the gate's summary .md,
# check.txt, logs.tar.gz), fa3/ (fa3_grid.json, fa3_grid.peers.json, report.md), j3/.
#   setsid nohup bash results/h200/issue27/session.sh > /tmp/sess.log 2>&1 < /dev/null &
# Collect with back-to-back calls: cp -r /tmp/sess "$OUT/" (the machine must stay warm).
# Export ATTNBENCH_GIT_REVISION (the full sha) and ATTNBENCH_GIT_DIRTY=0 first: the copied tree's
# .git is not this checkout's.
set -uo pipefail
W=${W:-/tmp/sess}; mkdir -p $W/gate $W/fa3
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a $W/progress.txt; }
el "session.sh at ${ATTNBENCH_GIT_REVISION:-unknown revision}"
GATE_BUILD=$PWD/build scripts/gpu_gate.sh $W/gate > $W/gate.log 2>&1
el "gate rc=$?"
for _ in $(seq 1 120); do [ -f /tmp/fa4site/.ready ] && break; sleep 5; done
[ -f /tmp/fa4site/.ready ] && el "FA4 site ready" || el "no /tmp/fa4site/.ready after 10 min: FA4 rows will SKIP"
BUILD=$PWD/build IMPLS="cuda.flash_bwd_wgmma cuda.flash_bwd_mma" PASSES=bwd,fwd_bwd \
  TORCH_BACKENDS=cudnn FA4_SITE=/tmp/fa4site scripts/fa3_job.sh $W/fa3 peers grid report \
  > $W/fa3.log 2>&1
el "fa3 bwd grid rc=$?"
if [ -n "${JOB3:-}" ]; then
  CONFIGS="varlen window" W=$W/j3 bash results/h200/issue30/job3.sh > $W/j3.log 2>&1
  el "job3 rc=$?"
fi
el "session done"
