#!/usr/bin/env bash
# SASS summary of the Hopper kernels (no GPU needed): per kernel, the counts of the instructions
# that say it runs the intended path: HGMMA (wgmma), UTMALDG/UTMASTG (TMA), MUFU.EX2, and local
# memory (LDL/STL: must be 0). Compiles each file for sm_90a with the project's flags.
#
#   scripts/hopper_sass.sh [FILE.cu ...]      (default impls/cuda/hopper/flash_fwd_wgmma.cu)
#
# Needs nvcc and cuobjdump (CUOBJDUMP=...; a CUDA toolkit without it can take PyPI's
# nvidia-cuda-cuobjdump wheel: its nvidia/cu13/bin/cuobjdump reads sm_90a objects).
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
printf '%-6s %-8s %-6s %-6s %-8s %-5s %s\n' HGMMA UTMALDG UTMASTG local MUFU.EX2 regs kernel
for f in "${files[@]}"; do
  "$NVCC" "${ATTN_NVCC_FLAGS[@]}" $ATTN_GPU_GENCODE -c "$root/$f" -o "$tmp/k.o"
  "$CUOBJDUMP" -sass "$tmp/k.o" > "$tmp/k.sass"
  "$CUOBJDUMP" -res-usage "$tmp/k.o" > "$tmp/k.res" 2>/dev/null || true
  awk '
    FNR == NR { if ($0 ~ /Function/) { fn = $2; sub(/:$/, "", fn) } if ($0 ~ /REG:/) { match($0, /REG:[0-9]+/); regs[fn] = substr($0, RSTART + 4, RLENGTH - 4) } next }
    /Function :/ { name = $3; order[++n] = name }
    /HGMMA/ { h[name]++ } /UTMALDG/ { l[name]++ } /UTMASTG/ { s[name]++ }
    /[^A-Z](LDL|STL)[. ]/ { loc[name]++ } /MUFU.EX2/ { e[name]++ }
    END { for (i = 1; i <= n; i++) { k = order[i]; printf "%-6d %-8d %-6d %-6d %-8d %-5s %s\n", h[k], l[k], s[k], loc[k], e[k], regs[k], k } }
  ' "$tmp/k.res" "$tmp/k.sass" | { command -v c++filt > /dev/null && c++filt || cat; }
done
