// Timing (ARCHITECTURE.md, Timing and memory): Google Benchmark is the engine. Every timed row is
// one registered benchmark with manual time; Google Benchmark chooses the iteration count, runs
// the repetitions and computes the statistics (median, mean, cv, and a "min" added here), and a
// reporter hands each row's TimeStats back as soon as its benchmark is done.
//   CUDA: CUDA events around each call on the buffers' stream, the L2 flushed (a memset of twice
//         its size) before every call unless hot.
//   CPU:  the wall clock (steady_clock) around call + synchronize; no cache flush.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attnbench/config.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/results.hpp"

namespace attnbench {

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
  // `for (auto _ : st)`: flush (unless hot), call, SetIterationTime. Throws on a CUDA error.
  void time(benchmark::State& st, CaseBuffers& buf, Device device, Pass pass, bool hot,
            const std::string& range);

 private:
  // cudaEvent_t; unused in a build without CUDA.
  [[maybe_unused]] void* start_ = nullptr;
  [[maybe_unused]] void* stop_ = nullptr;
};

// One benchmark to register: a row to time.
struct TimedBenchmark {
  std::string name;       // unique; the row's NVTX range name
  TimingSettings timing;  // repetitions and min_time_s (unless a --benchmark_* flag sets them), hot
  std::function<void(benchmark::State&)> body;  // st.SkipWithError(why) when it cannot time
};

// What one benchmark gave: its statistics, or the message it was skipped with.
struct TimingOutcome {
  std::optional<TimeStats> time;  // absent with an error, or without a usable measurement
  std::string error;
};

// Registers the benchmarks, runs them and clears them again. on_done(name, outcome) is called
// as soon as a benchmark has reported everything it will (its aggregates, its single run, or an
// error), so the caller can save it then. Returns every benchmark's final outcome by name: it
// also covers one whose last report did not look final (repetitions changed by a flag).
// benchmark_flags: the --benchmark_* flags given (names without dashes), which win over the
// settings. quiet: no Google Benchmark console output.
std::map<std::string, TimingOutcome> run_benchmarks(
    const std::vector<TimedBenchmark>& benchmarks, const std::set<std::string>& benchmark_flags,
    bool quiet, const std::function<void(const std::string&, const TimingOutcome&)>& on_done);

}  // namespace attnbench
