#!/usr/bin/env bash
# Fuzz the config parser (tests/fuzz/fuzz_config.cpp) with libFuzzer for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [extra libFuzzer flags...]      (default 300 seconds)
#
# Builds build-fuzz with clang (ATTNBENCH_FUZZ=ON, CPU only): every target is compiled with
# -fsanitize=fuzzer-no-link,address,undefined so the parser itself is coverage-instrumented and
# checked; the fuzz target links libFuzzer. The seeds are configs/*.json; the corpus it grows is
# kept in build-fuzz/fuzz/corpus, so later runs start where earlier ones stopped. A crash, hang
# (-timeout), out-of-memory (-rss_limit_mb) or leak leaves its input in build-fuzz/fuzz/artifacts;
# the script then exits 1. Fix it, copy the input to tests/fuzz/regressions/ as error-<what> or
# ok-<what> (test_fuzz_regressions replays it in every CTest run).
# Env: ATTNBENCH_FUZZ_BUILD (build folder), JOBS (build parallelism, default 2).
set -euo pipefail

secs=${1:-300}
shift || true
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTNBENCH_FUZZ_BUILD:-$root/build-fuzz}
jobs=${JOBS:-2}

san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
  -DATTNBENCH_FUZZ=ON -DATTNBENCH_CUDA=OFF -DATTNBENCH_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz_config

work="$build/fuzz"
mkdir -p "$work/corpus" "$work/seeds" "$work/artifacts"
cp "$root"/configs/*.json "$work/seeds/"
rm -f "$work"/artifacts/*
log="$work/fuzz-$(date -u +%Y%m%d-%H%M%S).log"

# -max_len: four times the largest shipped config; -timeout: a parse is milliseconds, 10 s is a
# hang; -rss_limit_mb: a config that expands to millions of cases must be refused, not grown
# until the machine swaps. Leaks are reported (libFuzzer's -detect_leaks defaults to on).
set +e
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
"$build/tests/fuzz_config" "$work/corpus" "$work/seeds" \
  -dict="$root/tests/fuzz/config.dict" -max_total_time="$secs" -max_len=8192 -timeout=10 \
  -rss_limit_mb=2048 -malloc_limit_mb=2048 -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
  "$@" 2>&1 | tee "$log" | grep -E "^#[0-9]+ +(INITED|DONE|pulse)|ERROR|SUMMARY|Test unit written|stat::" || true
set -e

execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
echo "fuzz_config: ${secs} s, ${execs:-?} executions, corpus $(find "$work/corpus" -type f | wc -l) inputs; log $log"
if compgen -G "$work/artifacts/*" >/dev/null; then
  echo "fuzz_config: FINDINGS (crash/timeout/oom/leak inputs):"
  ls -l "$work/artifacts/"
  exit 1
fi
echo "fuzz_config: no crash, hang, out-of-memory or leak"
