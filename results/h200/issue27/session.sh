#!/usr/bin/env bash
# A GPU session's device work (issues 27-30) as one chain on one machine, started by the first
# device call and fed by the next: the peers' sites come in parts, one a call (scripts/peers/
# device_parts.sh: since 2026-12-05, with the tree at 19 MB, FA4 in 2 parts of 36 MB and
# FlashInfer in 1 of 42 MB, in build-peers/fa4 and build-peers/fi), unpacked into /tmp/fa4site and
# /tmp/fisite once all are there; every later call only waits and collects, back to back (the
# machine goes back after 30 s idle, and /tmp with it: 2026-12-03 lost a gate and, later, a grid's
# timing phase that way, 2026-12-04 a job when the turn between two calls was interrupted, and
# 2026-12-05 the first FA4 part: the second call found a fresh machine).
#
# A session's calls, each right after the previous one returns, all the same command (kind
# nvidia-h200; REV the full sha; the exports are the chain's settings, e.g. GATE=1 GRID=1):
#   export ATTNBENCH_GIT_REVISION=REV ATTNBENCH_GIT_DIRTY=0 GATE=1 GRID=1 ...;
#   bash results/h200/issue27/session.sh --step [--part P] --wait 540 --collect $OUT
# with carry [P, dirname(P)/parts.sha256] while parts are left to send (P: build-peers/fa4/
# fa4site.part-00, then -01, then build-peers/fi/fisite.part-00 when a step needs FlashInfer) and
# no carry after; timeout_s 580, or --wait 60 while parts are left, so the next part follows soon.
# Prefer --wait 300 to 540 when a long job runs: a machine taken back during a call returns
# nothing of that call (2026-12-05, session 54: job5's first 9 minutes lost with the machine,
# nothing collected), so shorter waits bring the files made so far home more often.
# The first call starts the chain; a call that lands on a fresh machine (its reply says warm:
# false) starts it again there, and its output names the parts still to send. Another chain on
# the same warm machine: rm /tmp/session.started first.
#
#   results/h200/issue27/session.sh                 the chain (in the background: setsid nohup ... &)
#   results/h200/issue27/session.sh --wait S        wait up to S seconds for 'session done', print progress
#   results/h200/issue27/session.sh --collect DIR   DIR/session.tgz (everything under $W, no .ncu-rep)
#                                                   and DIR/progress.txt; --wait S --collect DIR: both
#
# The chain:
#   0. it copies the tree to $WT (default /tmp/wt) and runs there: a later device call re-sends the
#      working tree into the repository root, and a build running in it saw a header vanish for a
#      moment (2026-12-03: 'attnbench/config.hpp: No such file or directory', a false build FAIL);
#   1. GATE=1 (default): the gate of this revision (scripts/gpu_gate.sh, WERROR build in build/);
#      GATE=0 when results/h200/gate/ already holds this revision's gate: a plain build instead;
#      GATE=last: the plain build here, the gate after JOBS (step 1c) and before the grid;
#   1b. AB=1: a tuning step's A/B job (AB_JOB: a results/h200/ab/*/job.sh that reads AB_BASE_SRC and
#      W) once /tmp/$AB_BASE_NAME.ready exists: the parent's sources, sent with the second call
#      (`git archive PARENT -- . ':!results' | gzip`, 0.75 MB), copied to /tmp/$AB_BASE_NAME and
#      then touched as /tmp/$AB_BASE_NAME.ready;
#   1c. JOBS: other jobs on the same build (W=$W/jobs<N>, B), e.g. an option's A/B; the three of
#      2026-12-05 (about 13 minutes together, trimmed to 2k and 16k):
#      JOBS="results/h200/ab/2026-12-05-fwd-exp2-poly/job.sh
#      results/h200/ab/2026-12-05-bwd-narrow-window/job.sh results/h200/ab/2026-12-05-fwd-rowmax/job.sh"
#      (exp2_poly, persistent and fused_tail from one run; the backward's window tiles; forward
#      step 13 and backward steps 16-17 against one BASE build beside the gate's: about 6 minutes);
#   2. GRID=1 (default): our grid: the FA3 grid's PASSES rows (default bwd,fwd_bwd) of IMPLS
#      (default cuda.flash_bwd_wgmma and cuda.flash_bwd_mma; scripts/fa3_job.sh's grid part), before
#      anything that waits for FA4;
#   3. GRID=1, once /tmp/fa4site/.ready exists: the peers on the same rows (FA4 and its
#      deterministic mode, PyTorch cuDNN) and the report (scripts/fa3_grid_summary.py: ours
#      against them, cell by cell);
#   4. NCU=1: results/h200/issue27/ncu_job.sh (our two backwards, our forward and FA4's, under
#      Nsight Compute; NCU_PASSES="bwd" for the backward only);
#   5. ISSUE29=1: issue 29's acceptance job, ISSUE29_JOB (default results/h200/issue29/job5.sh:
#      the decode grid and every peer after the read flush, about 15-25 minutes; it waits up to
#      300 s for /tmp/fisite/.ready: FlashInfer's site, one part of 42 MB, build-peers/fi);
#   4b. NCU29=1: results/h200/issue29/ncu_decode.sh (batch-1 GQA decode's kernels under Nsight
#      Compute, about 2 minutes; no peer needed);
#   6. JOB3=1: issue 30's job3 on CONFIGS (default "varlen window").
#   7. POST_JOBS: like JOBS, run after everything else.
# Everything under $W (default /tmp/sess): progress.txt, gate/, fa3/, ncu/, ncu29/, j29/, j3/.
# Export ATTNBENCH_GIT_REVISION (the full sha) and ATTNBENCH_GIT_DIRTY=0 first: the copied tree's
# .git is not this checkout's.
set -uo pipefail
W=${W:-/tmp/sess}
WAIT_S=""; COLLECT=""; STEP=0; PARTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wait) WAIT_S="${2:?--wait SECONDS}"; shift ;;
    --collect) COLLECT="${2:?--collect DIR}"; shift ;;
    --step) STEP=1 ;;
    --part) PARTS+=("${2:?--part PATH}"); shift ;;
    *) echo "session.sh: unknown argument '$1' (--step, --part PATH, --wait SECONDS, --collect DIR)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#PARTS[@]} -eq 0 ] || [ "$STEP" = 1 ] || { echo "session.sh: --part goes with --step" >&2; exit 2; }

# --step: what every device call of a session runs, the same command each time (only the carried
# part changes), so that a call landing on a fresh machine simply starts over:
#   1. no chain on this machine yet (/tmp/session.started absent): start it in the background
#      (setsid), with this call's environment;
#   2. each --part PATH (build-peers/fa4/fa4site.part-NN or build-peers/fi/fisite.part-NN,
#      carried by this call) is checked against its folder's manifest (parts.sha256, from
#      scripts/peers/device_parts.sh, carried too) and copied to /tmp/fap or /tmp/fip;
#   3. a site whose parts are all there is unpacked (/tmp/fa4site, /tmp/fisite) and marked .ready;
#   4. it prints which parts each site still lacks, then waits and collects (--wait, --collect).
if [ "$STEP" = 1 ]; then
  if [ ! -f /tmp/session.started ]; then
    touch /tmp/session.started
    (setsid nohup bash "$0" > /tmp/sess.log 2>&1 < /dev/null &)
    echo "session.sh --step: no chain on this machine: started one (GATE=${GATE:-1} GRID=${GRID:-1} ...)"
    sleep 5
  fi
  for part in "${PARTS[@]}"; do
    dir=$(dirname "$part"); name=$(basename "$part")
    case "$name" in
      fa4site.part-*) dest=/tmp/fap ;;
      fisite.part-*) dest=/tmp/fip ;;
      *) echo "session.sh --step: --part $part: expected fa4site.part-NN or fisite.part-NN" >&2; exit 2 ;;
    esac
    [ -f "$part" ] || { echo "session.sh --step: --part $part: not here (name it in the call's carry)" >&2; exit 2; }
    [ -f "$dir/parts.sha256" ] || { echo "session.sh --step: $dir/parts.sha256 not here (carry it with the part)" >&2; exit 2; }
    want=$(awk -v n="$name" '$2 == n {print $1}' "$dir/parts.sha256")
    got=$(sha256sum "$part" | cut -d' ' -f1)
    [ -n "$want" ] && [ "$want" = "$got" ] ||
      { echo "session.sh --step: $part: sha256 $got, the manifest says '${want:-nothing}': not used" >&2; exit 2; }
    mkdir -p "$dest" && cp "$dir/parts.sha256" "$dest/" && cp "$part" "$dest/$name.tmp" && mv "$dest/$name.tmp" "$dest/$name"
    echo "session.sh --step: $name in $dest"
  done
  for pair in fa4site:/tmp/fap fisite:/tmp/fip; do
    site=/tmp/${pair%%:*}; src=${pair#*:}
    [ -f "$site/.ready" ] && { echo "session.sh --step: $site ready"; continue; }
    [ -f "$src/parts.sha256" ] || continue
    missing=$(awk '{print $2}' "$src/parts.sha256" | while read -r n; do [ -f "$src/$n" ] || printf '%s ' "$n"; done)
    if [ -n "$missing" ]; then
      echo "session.sh --step: $site still lacks: $missing(carry each in a later call)"
      continue
    fi
    mkdir -p "$site" && cat $(awk -v d="$src" '{print d "/" $2}' "$src/parts.sha256") | xz -d -T8 | tar -C "$site" -x &&
      touch "$site/.ready" && echo "session.sh --step: $site unpacked and ready" ||
      echo "session.sh --step: $site: unpacking failed" >&2
  done
  [ -n "$WAIT_S$COLLECT" ] || WAIT_S=1
fi
if [ -n "$WAIT_S$COLLECT" ]; then
  # No progress file at all: this is a fresh machine (the chain's /tmp went with the old one), so
  # waiting is pointless: say so at once (2026-12-04 spent 560 s of device time waiting on nothing).
  if [ -n "$WAIT_S" ] && [ -f "$W/progress.txt" ]; then
    # Done means a 'session done' after the last chain's first line: a second chain on the same
    # machine appends to the first's progress.txt (2026-12-07: the wait returned at once on the
    # first chain's 'session done').
    chain_done() {
      awk '/ s: session.sh at /{done = 0} / s: session done/{done = 1} END {exit !done}' "$W/progress.txt" 2>/dev/null
    }
    end=$(( $(date +%s) + WAIT_S ))
    while [ "$(date +%s)" -lt "$end" ] && ! chain_done; do sleep 5; done
  fi
  cat "$W/progress.txt" 2>/dev/null || echo "session.sh: no $W/progress.txt (a fresh machine? /tmp is lost with the old one)"
  if [ -n "$COLLECT" ] && [ -d "$W" ]; then
    mkdir -p "$COLLECT"
    cp "$W/progress.txt" "$COLLECT/" 2>/dev/null
    tar -C "$(dirname "$W")" -czf "$COLLECT/session.tgz" --exclude='*.ncu-rep' "$(basename "$W")"
    ls -l "$COLLECT"
  fi
  exit 0
fi

if [ "${AB:-0}" = 1 ] && { [ ! -f "${AB_JOB:-}" ] || [ -z "${AB_BASE_NAME:-}" ]; }; then
  echo "session.sh: AB=1 needs AB_JOB (an existing results/h200/ab/*/job.sh reading AB_BASE_SRC and W; now '${AB_JOB:-}') and AB_BASE_NAME (now '${AB_BASE_NAME:-}')" >&2
  exit 2
fi
if [ "${SESSION_IN_COPY:-0}" != 1 ]; then
  WT=${WT:-/tmp/wt}
  rm -rf "$WT" && mkdir -p "$WT" || exit 2
  tar --exclude=./build --exclude='./build-*' -cf - . | tar -C "$WT" -xf - || exit 2
  cd "$WT" && SESSION_IN_COPY=1 exec bash results/h200/issue27/session.sh
fi

mkdir -p "$W"
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s: $*" | tee -a "$W/progress.txt"; }
# wait_ready SITE SECONDS NAME: wait for SITE/.ready (a peer's unpacked site) and say how it went.
wait_ready() {
  local end=$(( $(date +%s) + $2 ))
  while [ ! -f "$1/.ready" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  [ -f "$1/.ready" ] && el "$3 site ready" || el "no $1/.ready after $2 s: $3 rows will SKIP"
}
el "session.sh at ${ATTNBENCH_GIT_REVISION:-unknown revision}, in $PWD (GATE=${GATE:-1} AB=${AB:-0} JOBS=${JOBS:-} POST_JOBS=${POST_JOBS:-} GRID=${GRID:-1} NCU=${NCU:-0} NCU29=${NCU29:-0} ISSUE29=${ISSUE29:-0} JOB3=${JOB3:-0})"
if [ "${GATE:-1}" = 1 ]; then
  mkdir -p "$W/gate"
  GATE_BUILD=$PWD/build scripts/gpu_gate.sh "$W/gate" > "$W/gate.log" 2>&1
  el "gate rc=$?"
  B=$PWD/build/attnbench
else
  source scripts/common.sh; attn_cudnn_from_wheel
  B=""; attn_job_build "$W/build.log"; brc=$?
  el "build rc=$brc: $B"
  [ $brc -eq 0 ] || { el "session done (no build)"; exit 3; }
  B=$PWD/$B
fi
BUILD=$(dirname "$B")
if [ "${AB:-0}" = 1 ]; then
  # The tuning step's A/B against its parent: the parent's sources come as /tmp/$AB_BASE_NAME
  # (sent with the second call's carry, beside FA4's second part).
  end=$(( $(date +%s) + 300 ))
  while [ ! -f "/tmp/$AB_BASE_NAME.ready" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
  if [ -f "/tmp/$AB_BASE_NAME.ready" ]; then
    ATTN_BUILD_DIR=$BUILD AB_BASE_SRC="/tmp/$AB_BASE_NAME" W="$W/ab" bash "$AB_JOB" > "$W/ab.log" 2>&1
    el "A/B ($AB_JOB) rc=$?: $(grep -i 'all rows' "$W/ab/ab.md" 2>/dev/null | head -1)"
  else
    el "no /tmp/$AB_BASE_NAME.ready after 300 s: A/B skipped"
  fi
fi
# JOBS="A/job.sh B/job.sh": other jobs on this build, each with B and W=$W/jobs<N> (e.g. an option
# A/B such as results/h200/ab/2026-12-04-fwd-narrow-window/job.sh), before the grid.
n_job=0
for j in ${JOBS:-}; do
  n_job=$((n_job + 1))
  W="$W/jobs$n_job" B="$B" bash "$j" > "$W/jobs$n_job.log" 2>&1
  el "job $j rc=$?: $(grep -h 'All rows' "$W/jobs$n_job"/*.md 2>/dev/null | head -6 | tr '\n' ' ')"
done
# GATE=last: the gate after the jobs (they ran on a plain build), so that a machine or a budget
# that ends early costs the gate, not the jobs' timings (2026-12-07, session 65: device starts
# failing for half an hour left too little time for both in a fixed order).
if [ "${GATE:-1}" = last ]; then
  mkdir -p "$W/gate"
  GATE_BUILD=$PWD/build scripts/gpu_gate.sh "$W/gate" > "$W/gate.log" 2>&1
  el "gate rc=$?"
fi
# IMPLS and PASSES: the grid's rows (issue 27's default; issues 27 and 28 together, the final job:
# IMPLS="cuda.flash_fwd_wgmma cuda.flash_bwd_wgmma cuda.flash_bwd_mma" PASSES=fwd,bwd,fwd_bwd).
export BUILD IMPLS="${IMPLS:-cuda.flash_bwd_wgmma cuda.flash_bwd_mma}" PASSES="${PASSES:-bwd,fwd_bwd}" TORCH_BACKENDS=cudnn \
  FA4_SITE=/tmp/fa4site
if [ "${GRID:-1}" = 1 ]; then
  scripts/fa3_job.sh "$W/fa3" grid > "$W/fa3.grid.log" 2>&1
  el "our bwd grid rc=$?"
  wait_ready /tmp/fa4site 600 FA4
  scripts/fa3_job.sh "$W/fa3" peers report > "$W/fa3.peers.log" 2>&1
  el "peers + report rc=$?"
fi
# ncu and job3 time FA4 too: GRID=0 has not waited for its site yet.
if { [ "${NCU:-0}" = 1 ] || [ "${JOB3:-0}" = 1 ]; } && [ ! -f /tmp/fa4site/.ready ]; then
  wait_ready /tmp/fa4site 600 FA4
fi
if [ "${NCU:-0}" = 1 ]; then
  W="$W/ncu" B="$B" PASSES="${NCU_PASSES:-bwd fwd}" bash results/h200/issue27/ncu_job.sh > "$W/ncu.log" 2>&1
  el "ncu rc=$?"
fi
if [ "${NCU29:-0}" = 1 ]; then
  W="$W/ncu29" B="$B" bash results/h200/issue29/ncu_decode.sh > "$W/ncu29.log" 2>&1
  el "issue 29 ncu_decode rc=$?"
fi
if [ "${ISSUE29:-0}" = 1 ]; then
  wait_ready /tmp/fisite 300 FlashInfer
  W="$W/j29" B="$B" bash "${ISSUE29_JOB:-results/h200/issue29/job5.sh}" > "$W/j29.log" 2>&1
  el "issue 29 ${ISSUE29_JOB:-results/h200/issue29/job5.sh} rc=$?"
fi
if [ "${JOB3:-0}" = 1 ]; then
  CONFIGS="${CONFIGS:-varlen window}" W="$W/j3" B="$B" bash results/h200/issue30/job3.sh > "$W/j3.log" 2>&1
  el "job3 rc=$?"
fi
# POST_JOBS="A/job.sh ...": jobs as JOBS, but last, after every other step, so that a budget or a
# machine that ends early costs the extras, not the main job (2026-12-06: the final grid and its
# peers first, then issue 27's fp16 job, cut by the budget after 4 minutes).
for j in ${POST_JOBS:-}; do
  n_job=$((n_job + 1))
  W="$W/jobs$n_job" B="$B" bash "$j" > "$W/jobs$n_job.log" 2>&1
  el "post job $j rc=$?: $(grep -h 'All rows' "$W/jobs$n_job"/*.md 2>/dev/null | head -2 | tr '\n' ' ')"
done
el "session done"
