#!/usr/bin/env bash
# compute-sanitizer over every CUDA kernel: memcheck, racecheck, synccheck and initcheck, each one
# run of `attnbench run configs/sanitize.json --profile --verify full` (one call per row, no
# timing loop), on tiny shapes that reach every code path: seq 1, tails, causal with
# seq_q < seq_kv and seq_q > seq_kv, MHA/GQA/MQA, head_dim 40/64/128/256, f32/f16/bf16, forward
# and backward, every tuning option value (configs/sanitize.json says which).
#
#   scripts/compute_sanitizer.sh BUILD_DIR OUTDIR
#
# BUILD_DIR: a CUDA build (its attnbench has the cuda.* implementations; kernels carry -lineinfo,
# so reports name source lines). OUTDIR gets, per tool: <tool>.log (the sanitizer's report),
# <tool>.results.json (the run's rows: a tool stopped by the time limit still leaves the rows it
# finished, complete=false), and summary.md (one line per tool).
# Env: TOOLS (default "memcheck racecheck synccheck initcheck"), TOOL_TIMEOUT_S (per tool, default
# 300: a tool cut short says so in the summary, with the rows it covered), CONFIG, IMPLS (glob
# patterns, space-separated: only the implementations they match, e.g. "cuda.flash_*_mma"; default
# all), EXTRA (more attnbench flags, e.g. "--case '*_d64_*'"; an --impl there adds to the list
# instead of narrowing it: use IMPLS), COMPUTE_SANITIZER (the binary), VERIFY (the rows' --verify,
# default full; off leaves out the float64 reference and the naive baseline's calls, which the
# tool would slow down too, where the same rows are verified without the tool, as the GPU gate does). ATTNBENCH_GIT_REVISION, when
# set, is the revision the summary names (a copied tree's .git may be stale).
# Exit code: 0 when every tool finished with no error, 1 otherwise.
# Expected size on an H200: 1380 planned rows, most of them SKIP (dtype or head_dim outside an
# implementation's capabilities); memcheck and synccheck take a minute or two, racecheck the most.
#
# Which implementations: every cuda.* one that attnbench owns runs under every tool. cuDNN's
# kernels (cuda.cudnn_sdpa) are closed, generated wgmma/TMA code that attnbench cannot fix: they
# run under memcheck only, as their own line of the summary. Under racecheck they report
# shared-memory "RAW hazards" (4071 on one small causal GQA case, H200, cuDNN 9.19) and under
# synccheck "divergent thread(s) in block" barrier errors followed by a launch failure in the bwd
# kernel, i.e. the tools do not model those kernels' mbarrier/TMA synchronisation; their outputs
# pass verification outside the tools. THIRD_PARTY_TOOLS (default "memcheck") changes that.
set -uo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUTDIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
exe="$build/attnbench"
config=${CONFIG:-$root/configs/sanitize.json}
tools=${TOOLS:-memcheck racecheck synccheck initcheck}
limit=${TOOL_TIMEOUT_S:-300}
third_tools=${THIRD_PARTY_TOOLS:-memcheck}
verify=${VERIFY:-full}
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
read -r -a extra <<<"${EXTRA:-}"

[[ -x "$exe" ]] || { echo "no attnbench in $build" >&2; exit 2; }
[[ -x "$cs" ]] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
# grep without -q reads to the end: with pipefail, -q's early exit made `list` die of SIGPIPE (141)
# whenever it wrote after grep's match, and a CUDA build then looked like none (2026-12-05).
if ! "$exe" list | grep '^cuda\.' > /dev/null; then
  echo "$exe has no CUDA implementations: not a CUDA build" >&2
  exit 2
fi

# Row counts of a results file: "pass P, fail F, skip S of N planned, complete C".
rows_of() {
  python3 - "$1" <<'EOF' 2>/dev/null || echo "no results file"
import json, sys
j = json.load(open(sys.argv[1]))
s = {"pass": 0, "fail": 0, "skip": 0}
for r in j["rows"]:
    s[r["status"]] += 1
fails = sorted({r["impl"] for r in j["rows"] if r["status"] == "fail"})
print(f'rows: pass {s["pass"]}, fail {s["fail"]}, skip {s["skip"]} of {j["context"].get("rows_planned", "?")} planned; '
      f'complete {str(j["complete"]).lower()}' + (f'; failing: {", ".join(fails)}' if fails else ''))
EOF
}

{
  echo "# compute-sanitizer on $(basename "$config")"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $("$cs" --version | tail -1), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "attnbench: $exe (${ATTNBENCH_GIT_REVISION:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null)}); per-tool limit ${limit} s${IMPLS:+; IMPLS: $IMPLS}"
  echo
  echo "| run | errors | exit | wall s | rows |"
  echo "|---|---|---|---|---|"
} >"$out/summary.md"

# attnbench's own CUDA implementations, and the third-party ones (cuDNN).
# IMPLS: keep only the names that match one of its globs.
selected() {
  [[ -z "${IMPLS:-}" ]] && return 0
  local g pats
  read -r -a pats <<<"$IMPLS"  # no pathname expansion of the globs
  for g in "${pats[@]}"; do
    # shellcheck disable=SC2053  # $g is a glob on purpose
    [[ "$1" == $g ]] && return 0
  done
  return 1
}
mapfile -t own < <("$exe" list | awk '$1 ~ /^cuda\./ && $1 != "cuda.cudnn_sdpa" {print $1}' |
  while read -r i; do selected "$i" && echo "$i"; done)
has_cudnn=$("$exe" list | awk '$1 == "cuda.cudnn_sdpa" {print "yes"}')
selected cuda.cudnn_sdpa || has_cudnn=""
if [[ ${#own[@]} -eq 0 && -z "$has_cudnn" ]]; then
  echo "IMPLS='${IMPLS:-}' matches no CUDA implementation of $exe" >&2
  exit 2
fi
own_args=()
for i in "${own[@]}"; do own_args+=(--impl "$i"); done
echo "own implementations: ${own[*]}"

status=0
# run_tool NAME TOOL IMPL_ARGS...: one sanitizer run, one summary line.
run_tool() {
  local name=$1 tool=$2; shift 2
  local args=(--tool "$tool" --error-exitcode 9 --print-limit 200 --log-file "$out/$name.log")
  case "$tool" in
    racecheck) args+=(--racecheck-report all) ;;  # shared-memory hazards, with the analysis
    memcheck) args+=(--check-device-heap yes) ;;
  esac
  echo "== $name: $tool (limit ${limit} s)"
  local start rc wall summary errors note ran
  start=$(date +%s)
  # SIGINT first: attnbench finishes the row and writes its results (complete=false).
  timeout -s INT -k 60 "$limit" "$cs" "${args[@]}" "$exe" run "$config" --profile --verify "$verify" --quiet \
    --out "$out/$name.results.json" "$@" "${extra[@]}" >"$out/$name.stdout" 2>&1
  rc=$?
  wall=$(( $(date +%s) - start ))
  # "ERROR SUMMARY: N errors" (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ..." lines.
  summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$out/$name.log" 2>/dev/null | sed 's/^=* *//' | tr '\n' ' ')
  errors=$(grep -hoE "ERROR SUMMARY: [0-9]+" "$out/$name.log" 2>/dev/null | grep -oE "[0-9]+$" | tail -1)
  note=""
  ran=$(python3 -c 'import json,sys; print(sum(r["status"] != "skip" for r in json.load(open(sys.argv[1]))["rows"]))' \
    "$out/$name.results.json" 2>/dev/null || echo 0)
  if [[ "$ran" == "0" ]]; then
    note=" (no row ran: no usable GPU? a sanitizer run that checks nothing proves nothing)"
    status=1
  elif [[ $rc -eq 124 || $rc -eq 130 || $rc -eq 137 ]]; then
    note=" (stopped at the ${limit} s limit)"
    status=1
  elif [[ $rc -eq 9 || "${errors:-0}" != "0" ]]; then
    status=1
  elif [[ $rc -ne 0 && $rc -ne 1 ]]; then
    note=" (attnbench or the tool failed: see $name.stdout)"
    status=1
  fi
  echo "| $name | ${summary:-no summary line}$note | $rc | $wall | $(rows_of "$out/$name.results.json") |" >>"$out/summary.md"
  echo "   $name: rc $rc, ${wall} s, ${summary:-no summary}$note"
}

if [[ ${#own[@]} -gt 0 ]]; then  # (without --impl the run would take the config's whole list)
  for tool in $tools; do
    run_tool "$tool" "$tool" "${own_args[@]}"
  done
fi
if [[ "$has_cudnn" == yes ]]; then
  for tool in $third_tools; do
    [[ " $tools " == *" $tool "* ]] && run_tool "cudnn-$tool" "$tool" --impl cuda.cudnn_sdpa
  done
fi

{
  echo
  echo "Exit 9: the tool found errors (details in <tool>.log). Exit 1 without errors: a row failed"
  echo "verification (see <tool>.results.json; the same rows fail without the sanitizer, which is"
  echo "for the implementation's owner, not a sanitizer finding). Rows SKIP where an implementation"
  echo "does not support the dtype or head_dim."
} >>"$out/summary.md"
cat "$out/summary.md"
exit $status
