#!/usr/bin/env bash
# GPU check of the kernel-side changes of issues 15 and 17 (branch kern), run ON the GPU machine
# in under 5 minutes:
#   1. build this tree (sm_90a) and run the CUDA implementation tests (test_cuda_impls: odd
#      shapes with head_dims 16..256 including 40/80/96, large scales, outlier inputs);
#   2. odd shapes of cuda.flash_fwd_mma / cuda.flash_bwd_mma at head_dim 40, 80, 96, 200, 256 with
#      --verify full, normal and outlier inputs, bf16 and f16 (deterministic mode too);
#   3. the outlier case of issue 17 item 5 for every CUDA implementation (cuda.standard_cublas's dV);
#   4. with BASE_TREE (the sources of the branch point, e.g. made on the CPU machine with
#      `git archive 635b881 --prefix=base-tree/ | tar -x` in the repository root, so that it
#      travels as an untracked folder): the same build of BASE_TREE, and a short timing of the
#      kernels whose SASS changed (flash_fwd_mma, flash_bwd_mma, flash_bwd, online_2pass,
#      standard_cublas bwd) at head_dim 64 and 128, seq 4096, bf16, causal and not, before and
#      after, then `attnbench compare` (exit 1 on a real regression).
#
#   scripts/gpu_check_kernels.sh OUTDIR [BASE_TREE]
#
# OUTDIR gets the logs, the results JSON of every step and summary.txt. Exit 0 when every step
# passed. Both builds run at once, each on half the cores.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_check_kernels.sh OUTDIR [BASE_TREE]}"
BASE="${2:-}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
[ -n "$BASE" ] && BASE="$(cd "$BASE" && pwd)"
J=$(( $(nproc) / 2 > 0 ? $(nproc) / 2 : 1 ))
SUM="$OUT/summary.txt"
: > "$SUM"
say() { echo "$*" | tee -a "$SUM"; }
rc=0
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

build() {  # src build-dir log targets...
  local src="$1" dir="$2" log="$3"; shift 3
  local targets=(); for t in "$@"; do targets+=(--target "$t"); done
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DATTNBENCH_NATIVE=ON \
    "-DATTNBENCH_CUDA_GENCODE=-gencode=arch=compute_90a,code=sm_90a" > "$log" 2>&1 &&
    cmake --build "$dir" -j "$J" "${targets[@]}" >> "$log" 2>&1
}
t0=$(date +%s)
build "$ROOT" "$ROOT/build-check" "$OUT/build.txt" attnbench test_cuda_impls &
pid_after=$!
if [ -n "$BASE" ]; then
  build "$BASE" "$BASE/build-check" "$OUT/build-base.txt" attnbench &
  pid_base=$!
fi
wait "$pid_after" || { say "FAIL build (see build.txt)"; grep -E 'error' "$OUT/build.txt" | head -20; exit 3; }
say "build: $(( $(date +%s) - t0 )) s"
AB="$ROOT/build-check/attnbench"

# 1. The CUDA implementation tests.
if "$ROOT/build-check/tests/test_cuda_impls" > "$OUT/test_cuda_impls.txt" 2>&1; then
  say "PASS test_cuda_impls: $(grep -E '^\[  PASSED' "$OUT/test_cuda_impls.txt")"
else
  rc=1
  say "FAIL test_cuda_impls"
  grep -E '^\[  FAILED|Failure' "$OUT/test_cuda_impls.txt" | head -20 | tee -a "$SUM"
fi

# 2 and 3. Configs of odd shapes for the mma kernels, and the issue's outlier case.
cat > "$OUT/check_mma.json" <<'EOF'
{
  "name": "check_mma",
  "description": "flash_{fwd,bwd}_mma at padded head_dims and d256, odd sequence lengths, GQA, causal with seq_q != seq_kv",
  "sweep": {
    "product": {"dtype": ["bf16", "f16"], "head_dim": [40, 80, 96, 200, 256], "causal": [false, true]},
    "zip": [{"seq_q": [17, 300], "seq_kv": [129, 257], "batch": [2, 1], "heads_q": [4, 8], "heads_kv": [2, 1]}]
  },
  "implementations": ["cuda.flash_fwd_mma", "cuda.flash_bwd_mma"],
  "params": {"cuda.flash_bwd_mma": {"deterministic": [0, 1]}},
  "passes": ["fwd", "bwd", "fwd_bwd"],
  "verify": {"mode": "full"},
  "timing": {"min_time_s": 0.001, "repetitions": 1}
}
EOF
sed -e 's/"check_mma"/"check_mma_outlier"/' -e 's/"timing"/"inputs": {"distribution": "outlier", "seed": 1234},\n  "timing"/' \
  "$OUT/check_mma.json" > "$OUT/check_mma_outlier.json"
cat > "$OUT/check_outlier_cublas.json" <<'EOF'
{
  "name": "check_outlier_cublas",
  "description": "issue 17 item 5: cuda.standard_cublas's backward on FlashAttention-3's outlier inputs, and every CUDA implementation beside it",
  "sweep": {"product": {"dtype": ["bf16", "f16"]},
            "zip": [{"seq_q": [1, 4096], "seq_kv": [4097, 4096], "batch": [4, 1], "heads_q": [32, 8], "heads_kv": [8, 2]}]},
  "problem": {"head_dim": 128},
  "implementations": ["cuda.*"],
  "passes": ["fwd", "bwd"],
  "inputs": {"distribution": "outlier", "seed": 1234},
  "verify": {"mode": "auto"},
  "timing": {"min_time_s": 0.001, "repetitions": 1}
}
EOF
for cfg in check_mma check_mma_outlier check_outlier_cublas; do
  if "$AB" run "$OUT/$cfg.json" --out "$OUT/results-$cfg.json" -q \
      > "$OUT/$cfg.txt" 2>&1; then
    say "PASS $cfg: $(tail -2 "$OUT/$cfg.txt" | head -1)"
  else
    rc=1
    say "FAIL $cfg: $(grep -E '^[0-9]+ rows' "$OUT/$cfg.txt")"
    grep -E ' FAIL ' "$OUT/$cfg.txt" | head -20 | tee -a "$SUM"
  fi
  grep -E 'standard_cublas.*bwd' "$OUT/$cfg.txt" | head -8 >> "$SUM"
done

# 4. Before/after timing of the kernels whose SASS changed.
if [ -n "$BASE" ]; then
  wait "$pid_base" || { say "FAIL base build (see build-base.txt)"; exit 3; }
  cat > "$OUT/check_timing.json" <<'EOF'
{
  "name": "check_timing",
  "description": "before/after timing of the kernels whose SASS changed (branch kern)",
  "problem": {"dtype": "bf16", "batch": 4, "heads_q": 16, "heads_kv": 16, "seq": 4096},
  "sweep": {"product": {"head_dim": [64, 128], "causal": [false, true]}},
  "implementations": ["cuda.flash_fwd_mma", "cuda.flash_bwd_mma", "cuda.flash_bwd", "cuda.online_2pass", "cuda.standard_cublas"],
  "passes": ["fwd", "bwd"],
  "verify": {"mode": "sampled", "sample_heads": 1, "sample_rows": 16},
  "timing": {"min_time_s": 0.05, "repetitions": 5}
}
EOF
  # Alternate the two binaries twice, so that clock drift hits both alike.
  for i in 1 2; do
    for side in base after; do
      bin="$AB"; [ "$side" = base ] && bin="$BASE/build-check/attnbench"
      "$bin" run "$OUT/check_timing.json" --out "$OUT/timing-$side-$i.json" -q > "$OUT/timing-$side-$i.txt" 2>&1 ||
        { rc=1; say "FAIL timing run $side $i"; }
    done
  done
  for i in 1 2; do
    "$AB" compare "$OUT/timing-base-$i.json" "$OUT/timing-after-$i.json" > "$OUT/compare-$i.txt" 2>&1
    c=$?
    say "compare run $i (base -> after): exit $c"
    cat "$OUT/compare-$i.txt" >> "$SUM"
  done
fi
say "total: $(( $(date +%s) - t0 )) s, exit $rc"
exit "$rc"
