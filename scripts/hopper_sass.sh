#!/usr/bin/env bash
# SASS summary of the Hopper kernels (no GPU needed): per kernel, the counts of the instructions
# that say it runs the intended path: HGMMA (wgmma), UTMALDG/UTMASTG (TMA), MUFU.EX2, and local
# memory (LDL/STL: must be 0), and "serial": "yes" where ptxas serialized the kernel's wgmma
# (its C7512 "Potential Performance Loss ... insufficient register resources": every wgmma then
# waits for the one before; it must be "no" in any kernel that is timed). Compiles each file for
# sm_90a with the project's flags; ptxas's own messages go to stderr, summarised.
#
#   scripts/hopper_sass.sh [FILE.cu ...]      (default impls/cuda/hopper/flash_fwd_wgmma.cu)
#
# Needs nvcc and cuobjdump (CUOBJDUMP=...; a CUDA toolkit without it can take PyPI's
# nvidia-cuda-cuobjdump wheel: its nvidia/cu13/bin/cuobjdump reads sm_90a objects), and nvdisasm on
# the PATH for -sass (PyPI's nvidia-cuda-nvdisasm: nvidia/cu13/bin). On this project's CPU machine:
#   pip download --no-deps nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm -d /tmp/w, unzip both, then
#   PATH=<nvdisasm's bin>:$PATH CUOBJDUMP=<its bin>/cuobjdump scripts/hopper_sass.sh FILE.cu
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/common.sh"  # ATTN_NVCC_FLAGS, ATTN_GPU_GENCODE
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CUOBJDUMP="${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}"
[[ -x "$CUOBJDUMP" ]] || { echo "hopper_sass: cuobjdump not found (set CUOBJDUMP)" >&2; exit 2; }
files=("$@")
[[ ${#files[@]} -gt 0 ]] || files=(impls/cuda/hopper/flash_fwd_wgmma.cu)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
printf '%-6s %-8s %-6s %-6s %-8s %-5s %-6s %s\n' HGMMA UTMALDG UTMASTG local MUFU.EX2 regs serial kernel
for f in "${files[@]}"; do
  "$NVCC" "${ATTN_NVCC_FLAGS[@]}" $ATTN_GPU_GENCODE -c "$root/$f" -o "$tmp/k.o" 2> "$tmp/ptxas.txt" ||
    { cat "$tmp/ptxas.txt" >&2; exit 1; }
  # The functions ptxas serialized (C7512), by mangled name: the awk below marks them.
  { grep 'C7512' "$tmp/ptxas.txt" || true; } | sed -n "s/.*for the function '\([^']*\)'.*/\1/p" | sort -u > "$tmp/serial.txt"
  n_serial=$(wc -l < "$tmp/serial.txt")
  grep -v -e 'C7512' -e 'C7517' "$tmp/ptxas.txt" >&2 || true
  [ "$n_serial" -eq 0 ] || echo "hopper_sass: $f: ptxas serialized the wgmma of $n_serial kernel(s) (C7512; serial = yes below)" >&2
  "$CUOBJDUMP" -sass "$tmp/k.o" > "$tmp/k.sass"
  "$CUOBJDUMP" -res-usage "$tmp/k.o" > "$tmp/k.res" 2>/dev/null || true
  awk -v serial="$tmp/serial.txt" -v res="$tmp/k.res" '
    FILENAME == serial { ser[$0] = 1; next }
    FILENAME == res { if ($0 ~ /Function/) { fn = $2; sub(/:$/, "", fn) } if ($0 ~ /REG:/) { match($0, /REG:[0-9]+/); regs[fn] = substr($0, RSTART + 4, RLENGTH - 4) } next }
    /Function :/ { name = $3; order[++n] = name }
    /HGMMA/ { h[name]++ } /UTMALDG/ { l[name]++ } /UTMASTG/ { s[name]++ }
    /[^A-Z](LDL|STL)[. ]/ { loc[name]++ } /MUFU.EX2/ { e[name]++ }
    END { for (i = 1; i <= n; i++) { k = order[i]; printf "%-6d %-8d %-6d %-6d %-8d %-5s %-6s %s\n", h[k], l[k], s[k], loc[k], e[k], regs[k], (k in ser) ? "yes" : "no", k } }
  ' "$tmp/serial.txt" "$tmp/k.res" "$tmp/k.sass" | { command -v c++filt > /dev/null && c++filt || cat; }
done
