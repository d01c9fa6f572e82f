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
# 300: a tool cut short says so in the summary, with the rows it covered), CONFIG, EXTRA (more
# attnbench flags, e.g. "--impl cuda.flash_fwd*"), COMPUTE_SANITIZER (the binary).
# Exit code: 0 when every tool finished with no error, 1 otherwise.
# Expected size on an H200: 1380 planned rows, most of them SKIP (dtype or head_dim outside an
# implementation's capabilities); memcheck and synccheck take a minute or two, racecheck the most.
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
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
read -r -a extra <<<"${EXTRA:-}"

[[ -x "$exe" ]] || { echo "no attnbench in $build" >&2; exit 2; }
[[ -x "$cs" ]] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 2; }
if ! "$exe" list | grep -q '^cuda\.'; then
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
  echo "attnbench: $exe ($(git -C "$root" rev-parse --short HEAD 2>/dev/null)); per-tool limit ${limit} s"
  echo
  echo "| tool | errors | exit | wall s | rows |"
  echo "|---|---|---|---|---|"
} >"$out/summary.md"

status=0
for tool in $tools; do
  args=(--tool "$tool" --error-exitcode 9 --print-limit 200 --log-file "$out/$tool.log")
  case "$tool" in
    racecheck) args+=(--racecheck-report all) ;;  # shared-memory hazards, with the analysis
    memcheck) args+=(--check-device-heap yes) ;;
  esac
  echo "== $tool (limit ${limit} s)"
  start=$(date +%s)
  # SIGINT first: attnbench finishes the row and writes its results (complete=false).
  timeout -s INT -k 60 "$limit" "$cs" "${args[@]}" "$exe" run "$config" --profile --verify full --quiet \
    --out "$out/$tool.results.json" "${extra[@]}" >"$out/$tool.stdout" 2>&1
  rc=$?
  wall=$(( $(date +%s) - start ))
  # "ERROR SUMMARY: N errors" (memcheck, synccheck, initcheck) or "RACECHECK SUMMARY: ..." lines.
  summary=$(grep -hE "(ERROR|RACECHECK) SUMMARY" "$out/$tool.log" 2>/dev/null | sed 's/^=* *//' | tr '\n' ' ')
  errors=$(grep -hoE "ERROR SUMMARY: [0-9]+" "$out/$tool.log" 2>/dev/null | grep -oE "[0-9]+$" | tail -1)
  note=""
  ran=$(python3 -c 'import json,sys; print(sum(r["status"] != "skip" for r in json.load(open(sys.argv[1]))["rows"]))' \
    "$out/$tool.results.json" 2>/dev/null || echo 0)
  if [[ "$ran" == "0" ]]; then
    note=" (no row ran: no usable GPU? a sanitizer run that checks nothing proves nothing)"
    status=1
  elif [[ $rc -eq 124 || $rc -eq 130 || $rc -eq 137 ]]; then
    note=" (stopped at the ${limit} s limit)"
    status=1
  elif [[ $rc -eq 9 || "${errors:-0}" != "0" ]]; then
    status=1
  elif [[ $rc -ne 0 && $rc -ne 1 ]]; then
    note=" (attnbench or the tool failed: see $tool.stdout)"
    status=1
  fi
  echo "| $tool | ${summary:-no summary line}$note | $rc | $wall | $(rows_of "$out/$tool.results.json") |" >>"$out/summary.md"
  echo "   $tool: rc $rc, ${wall} s, ${summary:-no summary}$note"
done

{
  echo
  echo "Exit 9: the tool found errors (details in <tool>.log). Exit 1 without errors: a row failed"
  echo "verification (see <tool>.results.json; the same rows fail without the sanitizer, which is"
  echo "for the implementation's owner, not a sanitizer finding). Rows SKIP where an implementation"
  echo "does not support the dtype or head_dim."
} >>"$out/summary.md"
cat "$out/summary.md"
exit $status
