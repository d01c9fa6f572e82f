#!/usr/bin/env bash
# Compiler resource report of every CUDA kernel in the project: registers, spills, stack and
# static shared memory per kernel and architecture, from ptxas (-Xptxas -v). Needs nvcc, no GPU.
#
#   scripts/resource_report.sh [-a "sm_90a sm_80"] [-j 2] [--fail-on-spill] [FILE.cu ...]
#
# Compiles each impls/cuda/**/*.cu (or the files given) with the project's flags once per
# architecture, into a temporary directory, and prints one row per kernel:
#   arch  regs  spill_st  spill_ld  stack  smem  file  kernel
# (smem: static shared memory only; the mma kernels size theirs at launch, see their traits).
# --fail-on-spill: exit 1 if any kernel spills (a check for CI). --unique-names: exit 1 if two
# files define kernels of the same name (namespaces and template arguments aside: the name ncu and
# nsys show), so that every implementation's kernels can be told apart in a profile. Rows go to
# stdout sorted by file, kernel and arch; compile errors go to stderr and make the script fail.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/common.sh"  # ATTN_NVCC_FLAGS
archs="sm_90a sm_80"
jobs=2
fail_on_spill=0
unique_names=0
files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -a|--arch) archs="$2"; shift 2 ;;
    -j|--jobs) jobs="$2"; shift 2 ;;
    --fail-on-spill) fail_on_spill=1; shift ;;
    --unique-names) unique_names=1; shift ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
if [[ ${#files[@]} -eq 0 ]]; then
  mapfile -t files < <(cd "$root" && find impls/cuda -name '*.cu' | sort)
fi
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
[[ -x "$NVCC" ]] || { echo "resource_report: nvcc not found (set NVCC)" >&2; exit 2; }
demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The flags CMakeLists.txt gives attn_impls_cuda (Release), per architecture.
compile() {  # file arch -> $tmp/<id>.log
  local f="$1" arch="$2" id
  id="$(echo "$f-$arch" | tr '/.' '__')"
  local cc="${arch#sm_}"
  if ! "$NVCC" "${ATTN_NVCC_FLAGS[@]}" -gencode="arch=compute_${cc},code=${arch}" -lineinfo \
      --Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror -Xptxas -v \
      -c "$root/$f" -o "$tmp/$id.o" > "$tmp/$id.log" 2>&1; then
    echo "resource_report: $f ($arch) failed to compile:" >&2
    cat "$tmp/$id.log" >&2
    return 1
  fi
  # ptxas prints, per kernel: "Compiling entry function 'NAME' for 'ARCH'", then
  # "N bytes stack frame, N bytes spill stores, N bytes spill loads" and
  # "Used N registers, ... N bytes smem ...".
  awk -v file="$f" -v arch="$arch" '
    /Compiling entry function/ { match($0, /function .[^'"'"']*/); name = substr($0, RSTART + 10, RLENGTH - 10) }
    /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
    /Used [0-9]+ registers/ {
      regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
      smem = 0; if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ .*/, "", smem) }
      if (name != "") printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", arch, regs, st, ld, stack, smem, file, name
      name = ""
    }' "$tmp/$id.log" > "$tmp/$id.rows"
}
export -f compile
export NVCC root tmp

pairs=()
for f in "${files[@]}"; do for a in $archs; do pairs+=("$f $a"); done; done
printf '%s\n' "${pairs[@]}" | xargs -P "$jobs" -L 1 bash -c 'compile "$0" "$1"'

{
  printf 'arch\tregs\tspill_st\tspill_ld\tstack\tsmem\tfile\tkernel\n'
  cat "$tmp"/*.rows | demangle | sort -t$'\t' -k7,7 -k8,8 -k1,1
} | column -t -s$'\t'

if [[ $fail_on_spill -eq 1 ]] && cat "$tmp"/*.rows | awk -F'\t' '$3 > 0 || $4 > 0 { bad = 1 } END { exit !bad }'; then
  echo "resource_report: some kernels spill" >&2
  exit 1
fi
if [[ $unique_names -eq 1 ]]; then
  # The kernel's own name: the demangled signature without return type, namespaces, template
  # arguments and parameters ("void attn_mma::(anonymous namespace)::flash_fwd_mma_kernel<...>(...)").
  dups="$(cat "$tmp"/*.rows | demangle | awk -F'\t' '{
      n = $8; sub(/^void /, "", n); gsub(/\(anonymous namespace\)::/, "", n); sub(/[<(].*/, "", n); sub(/.*::/, "", n)
      if (!((n, $7) in seen)) { seen[n, $7] = 1; files[n] = files[n] " " $7; count[n]++ }
    } END { for (n in count) if (count[n] > 1) print n ":" files[n] }')"
  if [[ -n "$dups" ]]; then
    echo "resource_report: kernel names defined in more than one file:" >&2
    echo "$dups" >&2
    exit 1
  fi
  echo "resource_report: every kernel name belongs to one file" >&2
fi
