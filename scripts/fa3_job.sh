#!/usr/bin/env bash
# The FlashAttention-3 grid job, run ON the GPU machine (issue 14; docs/peers.md, "The FA3 job"):
# build, peers (FA4 + PyTorch) on configs/fa3_grid.json, attnbench on the same grid, the
# timing-parity check, the cuDNN ncu comparison, and a report. Every part writes under WORK and
# records its start, end and exit code in WORK/progress.txt, so a part killed by a call's time
# limit leaves what it finished and a later call can collect it.
#
#   scripts/fa3_job.sh WORK [PART ...]          run the parts in order, in the foreground
#   scripts/fa3_job.sh WORK --detach [PART ...] the same in a new session (setsid), returns at once
#   scripts/fa3_job.sh WORK --wait SECONDS      wait for a detached job (prints progress), then return
#   scripts/fa3_job.sh WORK --collect DIR       copy the results, report.md and logs.tar.gz into DIR
#   scripts/fa3_job.sh WORK --detach --wait 540 --collect "$OUT" [PART ...]   all three, in one call
#   scripts/fa3_job.sh WORK --dry-run [PART ...]  print each part's commands; runs only the cheap
#                                                  checks (attnbench expand, the peers' --dry-run)
# A device call holds the machine only while it runs: start with --detach --wait, then call
# --wait --collect again (back to back) until progress.txt says "job done". Each --collect
# leaves in DIR what is finished so far.
#
# PART: build smoke parity ncu peers grid report (default: all of them, in this order: the quick
# answers first).
# Environment (all optional):
#   BUILD=DIR           attnbench build folder (default ROOT/build-gpu; --dry-run: ROOT/build)
#   IMPLS="GLOB ..."    attnbench run's --impl globs for the grid (default: every CUDA implementation);
#                       globs this build has no implementation for are dropped with a note
#   CASES="GLOB ..."    --case globs for the grid and the peers (default: every case)
#   PASSES=fwd,bwd,...  --pass for the grid and the peers (default: the config's)
#   TORCH_BACKENDS=flash,efficient,cudnn   PyTorch backends of the peer (math is left out: slow, N^2)
#   FA4_SITE=DIR        FA4's site folder (default /tmp/fa4site; see ../shared/peers/README.md)
#   PARITY_IMPLS, PARITY_CASES, NCU_CASES   the parity and ncu parts' implementations and cases
#   ATTNBENCH_GIT_REVISION / ATTNBENCH_GIT_DIRTY   the checkout's revision (the copied tree's .git is stale)
# Outputs in WORK: fa3_grid.json (attnbench), fa3_grid.peers.json (FA4 + PyTorch), smoke.peers.json
# (the peers on configs/smoke.json's odd shapes: GQA, bottom-right causal), parity.json, report.md
# (progress, parity, ncu, the summary tables), logs/ (packed into logs.tar.gz by --collect).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:?usage: scripts/fa3_job.sh WORK [--detach|--wait S|--collect DIR|--dry-run] [PART ...]}"; shift
MODE=run; DETACH=0; WAIT_S=""; COLLECT=""; PARTS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --detach) DETACH=1 ;;
    --wait) WAIT_S="${2:?--wait SECONDS}"; shift ;;
    --collect) COLLECT="${2:?--collect DIR}"; shift ;;
    --dry-run) MODE=dry ;;
    -*) echo "fa3_job.sh: unknown flag '$1'" >&2; exit 2 ;;
    *) PARTS+=("$1") ;;
  esac
  shift
done
[ "$DETACH" = 1 ] || [ -n "$WAIT_S" ] || [ -n "$COLLECT" ] && [ "$MODE" != dry ] && MODE=control
ALL_PARTS=(build smoke parity ncu peers grid report)
[ ${#PARTS[@]} -eq 0 ] && PARTS=("${ALL_PARTS[@]}")
for p in "${PARTS[@]}"; do
  case " ${ALL_PARTS[*]} " in *" $p "*) ;; *) echo "fa3_job.sh: unknown part '$p' (parts: ${ALL_PARTS[*]})" >&2; exit 2 ;; esac
done
mkdir -p "$WORK/logs"
LOG="$WORK/logs"; PROGRESS="$WORK/progress.txt"
CONFIG="$ROOT/configs/fa3_grid.json"
BUILD="${BUILD:-$ROOT/build-gpu}"
[ "$MODE" = dry ] && BUILD="${BUILD_DRY:-$ROOT/build}"
EXE="$BUILD/attnbench"
PY="${PYTHON:-python3}"
FA4_SITE="${FA4_SITE:-/tmp/fa4site}"
TORCH_BACKENDS="${TORCH_BACKENDS:-flash,efficient,cudnn}"
PARITY_IMPLS="${PARITY_IMPLS:-cuda.cudnn_sdpa cuda.flash_fwd_mma cuda.flash_bwd_mma}"
# The 2026-12-01 cuDNN differences (d128 2k fwd, d256 16k fwd), a small case where host dispatch
# would show, and the largest d64 case.
PARITY_CASES="${PARITY_CASES:-*_sq512_skv512_d128_bf16 *_sq2048_skv2048_d128_bf16 *_sq16384_skv16384_d256_bf16 *_sq16384_skv16384_d64_bf16}"
NCU_CASES="${NCU_CASES:-*_sq2048_skv2048_d128_bf16 *_sq16384_skv16384_d256_bf16}"

note() { [ "${FA3_JOB_QUIET:-0}" = 1 ] || printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >> "$PROGRESS"; }
say() { printf '+ %s\n' "$*"; }

# ---- detach / wait / collect (no part runs in this process) -------------------------------------
if [ "$MODE" = control ]; then
  crc=0
  if [ "$DETACH" = 1 ]; then
    if [ -f "$PROGRESS" ] && ! grep -q 'job done' "$PROGRESS" && grep -q 'job start' "$PROGRESS"; then
      echo "fa3_job.sh: a job is running in $WORK (no 'job done' in $PROGRESS): not starting another" >&2; exit 2
    fi
    [ -f "$PROGRESS" ] && mv "$PROGRESS" "$WORK/progress.prev.txt"
    note "detached: parts ${PARTS[*]}"
    setsid nohup bash "$0" "$WORK" "${PARTS[@]}" > "$LOG/job.log" 2>&1 < /dev/null &
    echo "fa3_job.sh: started parts ${PARTS[*]} in session $! (progress: $PROGRESS, log: $LOG/job.log)"
  fi
  if [ -n "$WAIT_S" ]; then
    end=$(( $(date +%s) + WAIT_S ))
    while [ "$(date +%s)" -lt "$end" ] && ! grep -q 'job done' "$PROGRESS" 2>/dev/null; do sleep 5; done
    cat "$PROGRESS" 2>/dev/null
    if ! grep -q 'job done' "$PROGRESS" 2>/dev/null; then
      echo "fa3_job.sh: still running after ${WAIT_S}s; last lines of the log:"; tail -5 "$LOG/job.log" 2>/dev/null
      crc=3
    fi
  fi
  if [ -n "$COLLECT" ]; then
    # report.md from what is there now (the job writes it at its end; a cut-short job does not).
    grep -q 'job done' "$PROGRESS" 2>/dev/null || FA3_JOB_QUIET=1 bash "$0" "$WORK" report > /dev/null 2>&1
    mkdir -p "$COLLECT"
    for f in fa3_grid.json fa3_grid.peers.json smoke.peers.json parity.json report.md; do
      [ -f "$WORK/$f" ] && cp "$WORK/$f" "$COLLECT/"
    done
    cp "$PROGRESS" "$LOG/" 2>/dev/null
    tar -C "$WORK" -czf "$COLLECT/logs.tar.gz" --exclude='*.ncu-rep' logs
    ls -l "$COLLECT"
  fi
  exit $crc
fi

# ---- shared set-up -----------------------------------------------------------------------------
# cuDNN from PyTorch's wheel: headers for the build, library for cuda.cudnn_sdpa (common.sh).
source "$ROOT/scripts/common.sh"
attn_cudnn_from_wheel
CMAKE_EXTRA=("${ATTN_CMAKE_ARGS[@]}")
# Only a site that exists: the peers refuse a named site folder that is missing (exit 2), and this job
# promises SKIP rows for FA4 then (2026-12-04: a job without the site lost its cuDNN rows too).
if [ -d "$FA4_SITE" ]; then export ATTNBENCH_FA4_SITE="$FA4_SITE"; else unset ATTNBENCH_FA4_SITE; fi
# Split CASES on blanks without expanding its globs against the current folder (CASES="*" gave file names).
CASE_ARGS=(); read -r -a _cases <<< "${CASES:-}"; for c in "${_cases[@]}"; do CASE_ARGS+=(--case "$c"); done
PASS_ARGS=(); [ -n "${PASSES:-}" ] && PASS_ARGS=(--pass "$PASSES")

# run NAME CMD...: a part's command, logged; its exit code is returned and noted.
run() {
  local name="$1"; shift
  if [ "$MODE" = dry ]; then
    say "$*"
    # The peers' own dry run (cases from attnbench expand, flags checked) is cheap: run it.
    case " $* " in *" --dry-run "*) "$@" > "$LOG/$name.dry.txt" 2>&1 || { cat "$LOG/$name.dry.txt"; return 2; }
                                    tail -1 "$LOG/$name.dry.txt" ;; esac
    return 0
  fi
  local t0=$(date +%s)
  "$@" > "$LOG/$name.txt" 2>&1
  local rc=$?
  note "  $name: exit $rc after $(( $(date +%s) - t0 )) s"
  tail -3 "$LOG/$name.txt"
  return $rc
}

# The grid's --impl globs that this build has implementations for (a glob that matches nothing is a
# config error for attnbench run; here it is a note, so one IMPLS list serves builds with and
# without e.g. cuda.flash_fwd_wgmma).
impl_args() {
  IMPL_ARGS=()
  for g in ${IMPLS:-}; do
    if "$EXE" expand "$CONFIG" --impl "$g" > /dev/null 2>&1; then IMPL_ARGS+=(--impl "$g")
    else note "  IMPLS: '$g' matches no implementation of this build: dropped"; fi
  done
}

part_build() {
  if [ "$MODE" = dry ]; then
    say cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "-DATTNBENCH_CUDA_GENCODE=$ATTN_GPU_GENCODE" "${CMAKE_EXTRA[@]}"
    say cmake --build "$BUILD" -j "$(nproc)" --target attnbench attnbench_capi
    return 0
  fi
  run configure cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_NATIVE=ON \
    "-DATTNBENCH_CUDA_GENCODE=$ATTN_GPU_GENCODE" "${CMAKE_EXTRA[@]}" || return 3
  run build cmake --build "$BUILD" -j "$(nproc)" --target attnbench attnbench_capi || return 3
  "$EXE" list > "$LOG/list.txt" 2>&1
  nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1; nvidia-smi -q -d CLOCK >> "$LOG/nvidia-smi.txt" 2>&1
  { [ -d "$FA4_SITE" ] && echo "FA4 site: $FA4_SITE" || echo "FA4 site $FA4_SITE missing: fa4 rows will be SKIP"; } >> "$LOG/list.txt"
}

PEERS=("$PY" "$ROOT/scripts/peers/peers.py")
part_smoke() {
  # The odd shapes (GQA, MQA, bottom-right causal, seq_q > seq_kv, head_dim 40/256, f16) through
  # every peer: layout, head mapping and causal alignment, verified by the project's rule.
  run smoke "${PEERS[@]}" "$ROOT/configs/smoke.json" --peers fa4,torch_sdpa --backend "$TORCH_BACKENDS" \
    --attnbench "$EXE" --out "$WORK/smoke.peers.json" ${DRY:+--dry-run}
}

part_peers() {
  run peers "${PEERS[@]}" "$CONFIG" --peers fa4,torch_sdpa --backend "$TORCH_BACKENDS" "${CASE_ARGS[@]}" \
    "${PASS_ARGS[@]}" --attnbench "$EXE" --out "$WORK/fa3_grid.peers.json" ${DRY:+--dry-run}
}

part_grid() {
  impl_args
  local resume=()
  # A grid killed by a time limit is resumed (same build, same config and overrides).
  if [ -f "$WORK/fa3_grid.json" ] && grep -q '"complete": false' "$WORK/fa3_grid.json"; then resume=(--resume "$WORK/fa3_grid.json"); fi
  if [ "$MODE" = dry ]; then
    "$EXE" expand "$CONFIG" "${IMPL_ARGS[@]}" "${CASE_ARGS[@]}" "${PASS_ARGS[@]}" > /dev/null || return 2
  fi
  run grid "$EXE" run "$CONFIG" "${IMPL_ARGS[@]}" "${CASE_ARGS[@]}" "${PASS_ARGS[@]}" "${resume[@]}" \
    --out "$WORK/fa3_grid.json"
  local rc=$?; [ $rc -eq 1 ] && note "  grid: a row FAILED (see report.md)"; [ $rc -le 1 ]
}

part_parity() {
  local pc=() pi=() names=""
  for c in $PARITY_CASES; do pc+=(--case "$c"); done
  for i in $PARITY_IMPLS; do
    if "$EXE" expand "$CONFIG" --impl "$i" > /dev/null 2>&1 || [ "$MODE" = dry ]; then pi+=(--impl "$i"); names+="${names:+,}$i"; fi
  done
  # The same kernels under the harness's timer ...
  run parity-run "$EXE" run "$CONFIG" "${pi[@]}" "${pc[@]}" --pass fwd,bwd --out "$LOG/parity.run.json"
  # ... and under the peers' timer (through libattnbench_capi), with PyTorch's cuDNN beside them.
  run parity-peers "${PEERS[@]}" "$CONFIG" --peers attnbench,torch_sdpa --impl "$names" --backend cudnn "${pc[@]}" \
    --pass fwd,bwd --attnbench "$EXE" --out "$LOG/parity.peers.json" ${DRY:+--dry-run}
  # Eager calls too (host dispatch included): how much the CUDA graph takes away at small shapes.
  run parity-eager "${PEERS[@]}" "$CONFIG" --peers attnbench,torch_sdpa --impl "$names" --backend cudnn "${pc[@]}" \
    --pass fwd --no-graph --attnbench "$EXE" --out "$LOG/parity.eager.json" ${DRY:+--dry-run}
  [ "$MODE" = dry ] && { say "$PY" scripts/peers/timing_parity.py "$LOG/parity.run.json" "$LOG/parity.peers.json" --json "$WORK/parity.json"; return 0; }
  "$PY" "$ROOT/scripts/peers/timing_parity.py" "$LOG/parity.run.json" "$LOG/parity.peers.json" \
    --json "$WORK/parity.json" > "$LOG/parity.md" 2>&1
  "$PY" "$ROOT/scripts/peers/timing_parity.py" "$LOG/parity.run.json" "$LOG/parity.eager.json" \
    > "$LOG/parity.eager.md" 2>&1
  note "  parity: $(grep -E 'pairs within' "$LOG/parity.md" | head -1)"
}

part_ncu() {
  local nc=(); for c in $NCU_CASES; do nc+=(--case "$c"); done
  if ! command -v ncu > /dev/null && [ "$MODE" != dry ]; then note "  ncu: not on PATH, skipped"; return 0; fi
  run ncu "$PY" "$ROOT/scripts/ncu_kernels.py" "$CONFIG" "${nc[@]}" --pass fwd --attnbench "$EXE" \
    --impl cuda.cudnn_sdpa --torch-backend cudnn --out "$LOG/ncu_cudnn.md" --json "$LOG/ncu_cudnn.json" --keep "$LOG/ncu"
  rm -f "$LOG"/ncu/*.ncu-rep  # large; the CSVs and logs stay
}

part_report() {
  [ "$MODE" = dry ] && { say "$PY" scripts/fa3_grid_summary.py "$WORK/fa3_grid.json" "$WORK/fa3_grid.peers.json"; return 0; }
  {
    echo "# FA3 job report ($(date -u +%Y-%m-%dT%H:%M:%SZ), revision ${ATTNBENCH_GIT_REVISION:-unknown})"
    echo; echo '```'; cat "$PROGRESS"; echo '```'; echo
    for f in parity.md parity.eager.md ncu_cudnn.md; do [ -f "$LOG/$f" ] && { cat "$LOG/$f"; echo; }; done
    if [ -f "$WORK/fa3_grid.json" ] && [ -f "$WORK/fa3_grid.peers.json" ]; then
      "$PY" "$ROOT/scripts/fa3_grid_summary.py" "$WORK/fa3_grid.json" "$WORK/fa3_grid.peers.json" 2>&1
    fi
    for f in smoke.peers.json fa3_grid.peers.json fa3_grid.json; do
      [ -f "$WORK/$f" ] && "$PY" - "$WORK/$f" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
s, fails = d.get("summary", {}), [r for r in d["rows"] if r.get("status") == "fail"]
print(f"- {sys.argv[1].split('/')[-1]}: complete={d.get('complete')} {s}")
for r in fails[:20]:
    print(f"  - FAIL {r.get('nvtx')}: {r.get('reason', '')[:200]}")
EOF
    done
  } > "$WORK/report.md" 2>&1
  return 0
}

# ---- the parts ----------------------------------------------------------------------------------
[ "$MODE" = dry ] && DRY=1 || DRY=""
[ "$MODE" = dry ] || note "job start: parts ${PARTS[*]} (IMPLS='${IMPLS:-all}' CASES='${CASES:-all}')"
rc=0
for p in "${PARTS[@]}"; do
  [ "$MODE" = dry ] && echo "== $p" || note "$p: start"
  "part_$p"; prc=$?
  [ "$MODE" = dry ] || note "$p: end (exit $prc)"
  [ $prc -ne 0 ] && rc=$prc
  if [ "$p" = build ] && [ $prc -ne 0 ]; then note "build failed: later parts skipped"; break; fi
done
[ "$MODE" = dry ] || note "job done (exit $rc)"
exit $rc
