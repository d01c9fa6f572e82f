#!/usr/bin/env bash
# The CPU code and its tests under AddressSanitizer + UndefinedBehaviorSanitizer.
#
#   scripts/sanitize.sh            build build-asan (CPU only) and run the CTest suite
#   scripts/sanitize.sh -R config  extra arguments go to ctest (here: only tests matching "config")
#
# Configures build-asan with -DATTNBENCH_SANITIZE=ON -DATTNBENCH_CUDA=OFF (the top-level
# CMakeLists.txt then compiles every C++ target with -fsanitize=address,undefined and
# -fno-sanitize-recover=undefined, and drops -march=native), builds it and runs ctest. Any
# sanitizer report makes its test fail: ASan and UBSan abort the process with a non-zero exit
# code, and the tests that start the attnbench binary check its exit code and print its output.
# Exit code: ctest's (0 when every test passed).
#
# Which tests: all of them but test_plot (SANITIZE_EXCLUDE, a ctest -E pattern, default
# '^test_plot$'; empty: none left out). test_plot runs Python alone (scripts/plot.py on committed
# results files, no attnbench binary), so the sanitizers see nothing of it, and the plain ctest
# runs it anyway: under this script it only cost 40 s of test time (2026-12-06, session 60, where
# the suite measured 441 + 394 s and then 451 + 453 s of CTest time in two clean-clone runs).
# On the shared 2-core development machine the whole CPU suite took
# 77 to 165 s under the sanitizers before the conformance suite (issue 19) replaced the tests'
# shape list; since then test_cpu_impls alone took 838 s there (one run, load average 8 to 14 from
# other jobs; test_planted 30 s, test_scripts 9 s, test_plot 20 s), and a cold build 25 min under
# that load. At 0a54df9 (idle machine, one test at a time) the suite took 530 s, test_cpu_impls
# 223 s of it, 159 s in the conformance suite's outlier and random groups: under ASan those groups
# now run each shape in one dtype (tests/test_cpu_impls.cpp says how), and two tests run at once.
# At d705a79: 396 s (test_cpu_impls 306 s, sharing the cores). Pass ctest arguments to choose
# a subset by hand.
# Env: ATTNBENCH_ASAN_BUILD (build folder), JOBS (build parallelism, default 2), CTEST_JOBS (tests
# at once, default 2), SANITIZE_EXCLUDE (above).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTNBENCH_ASAN_BUILD:-$root/build-asan}
jobs=${JOBS:-2}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DATTNBENCH_SANITIZE=ON \
  -DATTNBENCH_CUDA=OFF >/dev/null
cmake --build "$build" -j"$jobs"

# detect_leaks: LeakSanitizer at exit. allocator_may_return_null: a huge request returns null as
# malloc does (the host-OOM fault test asks for 1 PiB). halt_on_error: the first report ends the
# process, so it cannot be lost in later output.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:halt_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
# Two tests at once (CTEST_JOBS): most of the suite's tests start the attnbench binary and wait on
# it, or run one thread; on the 2-core development machine (2026-12-06, before the thinning) -j2
# took the suite from 543 to 475 s (the CPU kernels' tests then share the cores, and take longer
# each).
ctest_jobs=${CTEST_JOBS:-2}

start=$(date +%s)
set +e
exclude_pattern=${SANITIZE_EXCLUDE-'^test_plot$'}
exclude=(); [ -z "$exclude_pattern" ] || exclude=(-E "$exclude_pattern")
ctest --test-dir "$build" --output-on-failure --timeout 900 -j "$ctest_jobs" "${exclude[@]}" "$@"
rc=$?
set -e
echo "sanitize.sh: ctest exit code $rc after $(( $(date +%s) - start )) s (ASAN_OPTIONS=$ASAN_OPTIONS)"
exit $rc
