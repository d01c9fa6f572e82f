// Timing (docs/architecture.md, "One case, end to end"): Google Benchmark is the engine. Every
// timed row is one registered benchmark with manual time; Google Benchmark chooses the iteration
// count, runs the repetitions and computes the statistics (median, mean, cv, and a "min" added here), and a
// reporter hands each row's TimeStats back (with every repetition's time, samples_ms) as soon as
// its benchmark is done.
//   CUDA: CUDA events around each call on the buffers' stream, the L2 flushed (a memset of twice
//         its size) before every call unless hot.
//   CPU:  the wall clock (steady_clock) around call + synchronize; no cache flush.
//
// What Google Benchmark's own outputs get (--benchmark_out=FILE, --benchmark_format=F), so that
// its tools (tools/compare.py) read them:
//   - names: the row's NVTX range name and nothing else, whatever flags repeat or change the
//     config's repetitions and min time (Google Benchmark would append /repeats:N/min_time:T);
//   - times in nanoseconds (Google Benchmark's default unit; compare.py prints whole units);
//   - counters TFLOP/s, bytes_per_second (io_bytes per call / time) and io_bytes;
//   - failed rows as benchmarks with error_occurred and the verdict as error_message;
//   - the run's provenance as custom context (git revision, device, config hash).
// Google Benchmark's console lines (each row's median and cv) go to the progress stream
// (stderr); stdout carries Google Benchmark's report only when --benchmark_format asks for it.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <iosfwd>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/config.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/results.hpp"

namespace attnbench {

// What one call computes and moves: the rate counters of a timed row.
struct CallCounters {
  double flops = 0;
  std::int64_t io_bytes = 0;
};

// Times the calls of one Google Benchmark loop, one call per iteration, each inside its NVTX
// range. Owns the CUDA events (created on first CUDA use), so one lives for all the timed rows.
class CallTimer {
 public:
  CallTimer() = default;
  ~CallTimer();
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

  // Untimed calls until warmup_s has passed (at least one).
  static void warm_up(CaseBuffers& buf, Pass pass, double warmup_s);
  // `for (auto _ : st)`: flush (unless hot, as `flush` says), call, SetIterationTime; then the
  // counters. Throws on a CUDA error. slowdown > 1 (ATTNBENCH_TEST_SLOWDOWN, CPU rows only)
  // stretches each timed call to slowdown times its own measured duration by spinning on the
  // clock after it.
  void time(benchmark::State& st, CaseBuffers& buf, Device device, Pass pass, bool hot,
            FlushMode flush, const std::string& range, const CallCounters& counters,
            double slowdown = 1);

 private:
  // cudaEvent_t; unused in a build without CUDA.
  [[maybe_unused]] void* start_ = nullptr;
  [[maybe_unused]] void* stop_ = nullptr;
};

// One benchmark to register: a row to time, or a failed row to report.
struct TimedBenchmark {
  std::string name;       // unique; the row's NVTX range name
  TimingSettings timing;  // repetitions and min_time_s (unless a --benchmark_* flag sets them), hot
  std::function<void(benchmark::State&)> body;  // st.SkipWithError(why) when it cannot time
  // Not empty: a row that failed verification. It is not timed; Google Benchmark's outputs list
  // it with error_occurred and this message (the body is not used).
  std::string failed;
};

// What one benchmark gave: its statistics, or the message it was skipped with.
struct TimingOutcome {
  std::optional<TimeStats> time;  // absent with an error, or without a usable measurement
  std::string error;
};

struct BenchmarkSettings {
  // The --benchmark_* flags given: name without dashes -> value ("" for a bare flag). They win
  // over the rows' settings (benchmark_repetitions, benchmark_min_time); benchmark_out and
  // benchmark_out_format choose the file report, benchmark_format the report on stdout.
  std::map<std::string, std::string> flags;
  bool quiet = false;                     // no console lines on the progress stream
  std::ostream* progress = nullptr;       // where the console lines go (stderr); null: none
  // Google Benchmark's own console lines (about 250 columns a row) on the progress stream. Off in
  // a run, whose one progress line a row says the same (--benchmark_format=console prints them
  // on stdout).
  bool console_lines = false;
  std::ostream* stdout_report = nullptr;  // with benchmark_format: where that report goes
  // Added to Google Benchmark's context (AddCustomContext), e.g. git_revision, config_hash.
  std::vector<std::pair<std::string, std::string>> context;
};

// Registers the benchmarks, runs them and clears them again. on_done(name, outcome) is called
// as soon as a benchmark has reported everything it will (its aggregates, its single run, or an
// error), so the caller can save it then. Returns every benchmark's final outcome by name: it
// also covers one whose last report did not look final (repetitions changed by a flag).
std::map<std::string, TimingOutcome> run_benchmarks(
    const std::vector<TimedBenchmark>& benchmarks, const BenchmarkSettings& settings,
    const std::function<void(const std::string&, const TimingOutcome&)>& on_done);

// The Google Benchmark library this binary runs with: {"version": "1.7.1", "build_type":
// "debug" | "release"} (the build type as the library itself reports it in its JSON context).
// Debian's package is a debug build; attnbench's rows use manual time measured around each call
// by CallTimer, so the library's own optimisation level does not enter them.
nlohmann::ordered_json benchmark_library();

// The machine's CPU time so far: every core's busy and total ticks (/proc/stat) and this
// process's own (/proc/self/stat). Two samples give the cores other processes kept busy in
// between: what a CPU row shared its cores with while it was timed (TimeStats::others_cores).
struct CpuTicks {
  double busy = 0, total = 0, self = 0;  // clock ticks; total summed over the cores
  int cores = 0;
  bool ok = false;  // false where /proc is not readable
};
CpuTicks cpu_ticks();
// Cores busy with other processes between a and b; nullopt without /proc or time between them.
std::optional<double> others_cores(const CpuTicks& a, const CpuTicks& b);

// ATTNBENCH_TEST_SLOWDOWN="GLOB=FACTOR[,GLOB=FACTOR...]" (e.g. "*=1.15", "cpu.flash_fwd=1.15"):
// a controlled slowdown for testing the regression gate (scripts/gate_figures.py). The first
// rule whose glob matches an implementation's name gives its factor; CPU rows only. The context
// records the spec ("test_slowdown"), so such a file is never mistaken for a measurement.
struct TestSlowdown {
  std::string spec;
  std::vector<std::pair<std::string, double>> rules;
  double factor(const std::string& impl) const;  // 1 when no rule matches
};
// The variable's rules; nullopt when it is unset or empty. A malformed value is a
// std::runtime_error naming it.
std::optional<TestSlowdown> test_slowdown_from_env();

}  // namespace attnbench
