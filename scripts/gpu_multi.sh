#!/usr/bin/env bash
# Several GPUs of one host (docs/multi_gpu.md, issue 21), in one session on an N-GPU machine:
#   1. tests: test_cuda_impls (every CUDA implementation, cuda.ring_attention with one rank, vs
#      the float64 reference), test_devices, test_ring_plan;
#   2. configs/ring_check.json: cuda.ring_attention, full verification, ranks 1, 2, 4, 8 (those
#      above N SKIP), zig-zag and contiguous, fwd and bwd -> ring_check.json;
#   3. configs/fa2_grid.json without cuda.ring_attention on GPU 0 alone (fa2_grid_1gpu.json) and
#      with --devices over the N GPUs (fa2_grid.json); prints both wall times and their ratio, and
#      compares the two files' rows;
#   4. configs/ring_scaling.json (32k to 512k tokens, ranks 1..8) -> ring_scaling.json, then a
#      scaling table: time(1 rank) / (N x time(N ranks)) per case and pass;
#   5. nsys on one 128k causal forward at N ranks (ring_128k.nsys-rep) for the fraction of the
#      NCCL transfers hidden under the flash kernels.
#
#   scripts/gpu_multi.sh [OUTDIR]   env: GPUS (default: all), BUILD (default build),
#                                   STEPS (default "tests ring_check grid scaling nsys")
# OUTDIR defaults to results/h200x<N>. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
# NOT YET RUN: written in a session without any GPU.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
export NCCL_NVLS_ENABLE=0
N_ALL="$(nvidia-smi --list-gpus 2>/dev/null | wc -l)"
N="${GPUS:-$N_ALL}"
if [ "$N" -lt 1 ]; then
  echo "gpu_multi.sh: no GPU (nvidia-smi lists none)" >&2
  exit 2
fi
DEVS="$(seq -s, 0 $((N - 1)))"
export CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-$DEVS}"
OUT="${1:-$ROOT/results/h200x$N}"
mkdir -p "$OUT/logs"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/logs"
STEPS=" ${STEPS:-tests ring_check grid scaling nsys} "
want() { [[ "$STEPS" == *" $1 "* ]]; }
SUM="$OUT/summary.txt"
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
AB="$BUILD/attnbench"
rc=0
nvidia-smi topo -m > "$LOG/topo.txt" 2>&1
nvidia-smi --query-gpu=index,name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$LOG/nvidia-smi.txt" 2>&1
say "gpu_multi: $N GPUs ($DEVS), build $BUILD, out $OUT, NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"
[ -x "$AB" ] || { say "no $AB: build first (cmake --build $BUILD -j)"; exit 2; }

step() {  # name, command...
  local name="$1"; shift
  local t0; t0=$(date +%s)
  "$@" > "$LOG/$name.log" 2>&1
  local s=$?
  say "$name: exit $s ($(( $(date +%s) - t0 )) s), log $LOG/$name.log"
  [ $s -eq 0 ] || rc=1
}

if want tests; then
  step test_cuda_impls "$BUILD/tests/test_cuda_impls"
  step test_devices "$BUILD/tests/test_devices"
  step test_ring_plan "$BUILD/tests/test_ring_plan"
fi
if want ring_check; then
  step ring_check "$AB" run configs/ring_check.json --out "$OUT/ring_check.json"
fi
if want grid; then
  # Every CUDA implementation but the ring (its ranks=1 rows belong to the ring's own configs).
  IMPLS=()
  for i in $("$AB" list | awk '$2 == "cuda" {print $1}'); do
    [ "$i" = cuda.ring_attention ] || IMPLS+=(--impl "$i")
  done
  step fa2_grid_1gpu env CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES%%,*}" "$AB" run configs/fa2_grid.json "${IMPLS[@]}" \
    --out "$OUT/fa2_grid_1gpu.json"
  step fa2_grid "$AB" run configs/fa2_grid.json "${IMPLS[@]}" --devices all --out "$OUT/fa2_grid.json"
  python3 - "$OUT/fa2_grid_1gpu.json" "$OUT/fa2_grid.json" "$N" <<'PY' | tee -a "$SUM"
import json, sys
one, many, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
w1, wn = one["context"]["wall_s"], many["context"]["wall_s"]
print(f"fa2_grid wall time: 1 GPU {w1:.1f} s, {n} GPUs {wn:.1f} s, speed-up {w1 / wn:.2f}x "
      f"(efficiency {w1 / wn / n:.0%}); complete: {one['complete']}, {many['complete']}")
for w in many["context"]["workers"]:
    print(f"  worker {w['worker']} cuda:{w['device']}: {len(w['cases'])} cases, "
          f"{w['flops'] / 1e12:.1f} TFLOP, {w.get('rows', 0)} rows, {w['end']}")
PY
  step fa2_grid_compare "$AB" compare "$OUT/fa2_grid_1gpu.json" "$OUT/fa2_grid.json"
fi
if want scaling; then
  step ring_scaling "$AB" run configs/ring_scaling.json --out "$OUT/ring_scaling.json"
  python3 - "$OUT/ring_scaling.json" <<'PY' | tee -a "$SUM"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
t = {}
for r in rows:
    if r["status"] == "pass" and r.get("time"):
        t[(r["case"], r["pass"], r["options"]["ranks"])] = r["time"]["median_ms"]
print("ring scaling: efficiency = time(1 rank) / (N x time(N ranks))")
for (case, p, n), ms in sorted(t.items()):
    base = t.get((case, p, 1))
    eff = f"{base / (n * ms):.0%}" if base else "-"
    print(f"  {case} {p} ranks {n}: {ms:.2f} ms, efficiency {eff}")
PY
fi
if want nsys && command -v nsys > /dev/null; then
  cat > "$OUT/ring_128k.json" <<EOF
{"name": "ring_128k", "problem": {"batch": 1, "heads": 16, "head_dim": 128, "dtype": "bf16", "causal": true, "seq": 131072},
 "implementations": ["cuda.ring_attention"], "options": {"cuda.ring_attention": {"ranks": $N, "zigzag": 1}},
 "passes": ["fwd", "bwd"], "verify": {"mode": "off"}}
EOF
  step nsys_ring nsys profile -o "$OUT/ring_128k" --force-overwrite true --trace cuda,nvtx \
    "$AB" run "$OUT/ring_128k.json" --profile --out "$OUT/ring_128k_profile.json"
  say "nsys: $OUT/ring_128k.nsys-rep: nsys stats --report cuda_gpu_trace gives the NCCL kernels"
  say "      and the flash kernels per GPU; the hidden fraction is their overlap / the NCCL time"
fi
say "gpu_multi: exit $rc"
exit $rc
