// Timing through Google Benchmark (timing.hpp): the per-call timer, the registration of the
// timed rows, and a reporter that keeps what Google Benchmark measured and turns it into
// TimeStats.
#include "attnbench/timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "attnbench/nvtx.hpp"

namespace attnbench {

// ---- One call per iteration ---------------------------------------------------------------------

CallTimer::~CallTimer() {
#ifdef ATTNBENCH_WITH_CUDA
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
#endif
}

void CallTimer::warm_up(CaseBuffers& buf, Pass pass, double warmup_s) {
  const auto t0 = std::chrono::steady_clock::now();
  do {
    buf.call(pass);
    buf.synchronize();
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < warmup_s);
}

void CallTimer::time(benchmark::State& st, CaseBuffers& buf, Device device, Pass pass, bool hot,
                     const std::string& range) {
  DeviceOps& ops = buf.ops();
  if (device == Device::cuda) {
#ifdef ATTNBENCH_WITH_CUDA
    if (!start_) {
      cudaEvent_t a = nullptr, b = nullptr;
      if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
        throw std::runtime_error("cudaEventCreate failed");
      }
      start_ = a;
      stop_ = b;
    }
    const auto start = static_cast<cudaEvent_t>(start_), stop = static_cast<cudaEvent_t>(stop_);
    const auto stream = static_cast<cudaStream_t>(ops.stream());
    for (auto _ : st) {
      if (!hot) ops.flush_cache();
      nvtx::Range r(range);
      if (cudaEventRecord(start, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
      buf.call(pass);
      if (cudaEventRecord(stop, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
      const cudaError_t e = cudaEventSynchronize(stop);
      if (e != cudaSuccess) throw std::runtime_error(std::string("timed call: ") + cudaGetErrorString(e));
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      st.SetIterationTime(static_cast<double>(ms) * 1e-3);
    }
#else
    throw std::runtime_error("attnbench was built without CUDA");
#endif
    return;
  }
  for (auto _ : st) {
    if (!hot) ops.flush_cache();
    nvtx::Range r(range);
    const auto t0 = std::chrono::steady_clock::now();
    buf.call(pass);
    buf.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}

// ---- Google Benchmark: a reporter that keeps what it is given ----------------------------------

namespace {

using BRun = benchmark::BenchmarkReporter::Run;

template <class R>
bool run_failed(const R& r, std::string& msg) {
  if constexpr (requires { r.skipped; }) {  // Google Benchmark >= 1.8
    if (static_cast<int>(r.skipped) == 0) return false;
    msg = r.skip_message;
    return true;
  } else {  // 1.7
    if (!r.error_occurred) return false;
    msg = r.error_message;
    return true;
  }
}

struct Collected {
  std::vector<BRun> iterations;            // one per repetition
  std::map<std::string, BRun> aggregates;  // mean, median, stddev, cv, min
  std::string error;
};

// on_done(name) is called as soon as a benchmark has reported everything it will report.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  CollectingReporter(benchmark::BenchmarkReporter* display, std::map<std::string, Collected>& out,
                     std::function<void(const std::string&)> on_done)
      : display_(display), out_(out), on_done_(std::move(on_done)) {}

  bool ReportContext(const Context& c) override { return display_ ? display_->ReportContext(c) : true; }

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    std::vector<std::string> done;
    for (const Run& r : runs) {
      const std::string& name = r.run_name.function_name;
      Collected& c = out_[name];
      std::string msg;
      if (run_failed(r, msg)) {
        c.error = msg;
        shown.push_back(r);
        done.push_back(name);
      } else if (r.run_type == Run::RT_Aggregate) {
        c.aggregates[r.aggregate_name] = r;
        // The console gets the median and the cv of each row (the results file has them all,
        // and --benchmark_out gets Google Benchmark's full report).
        if (r.aggregate_name == "median" || r.aggregate_name == "cv") shown.push_back(r);
        done.push_back(name);
      } else {
        c.iterations.push_back(r);
        if (r.repetitions <= 1) {
          shown.push_back(r);  // with repetitions, show the aggregates only
          done.push_back(name);
        }
      }
    }
    if (display_ && !shown.empty()) display_->ReportRuns(shown);
    done.erase(std::unique(done.begin(), done.end()), done.end());
    if (on_done_)
      for (const auto& n : done) on_done_(n);
  }

  void Finalize() override {
    if (display_) display_->Finalize();
  }

 private:
  benchmark::BenchmarkReporter* display_;
  std::map<std::string, Collected>& out_;
  std::function<void(const std::string&)> on_done_;
};

double run_ms(const BRun& r) {
  return r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit) * 1e3;
}

std::optional<TimeStats> time_from(const Collected& c, bool hot) {
  TimeStats t;
  t.hot = hot;
  std::vector<double> per_rep;
  for (const BRun& r : c.iterations) {
    if (r.iterations > 0) per_rep.push_back(r.real_accumulated_time / static_cast<double>(r.iterations) * 1e3);
  }
  if (!c.iterations.empty()) t.iterations = c.iterations.front().iterations;
  if (auto med = c.aggregates.find("median"); med != c.aggregates.end()) {
    // Google Benchmark's own statistics over the repetitions.
    t.median_ms = run_ms(med->second);
    t.repetitions = static_cast<int>(med->second.repetitions);
    auto mean = c.aggregates.find("mean");
    t.mean_ms = mean != c.aggregates.end() ? run_ms(mean->second) : t.median_ms;
    auto cv = c.aggregates.find("cv");
    t.cv = cv != c.aggregates.end() ? cv->second.real_accumulated_time : 0;  // a fraction
    auto mn = c.aggregates.find("min");
    t.min_ms = mn != c.aggregates.end() ? run_ms(mn->second)
               : per_rep.empty()        ? t.median_ms
                                        : *std::min_element(per_rep.begin(), per_rep.end());
  } else {
    if (per_rep.empty()) return std::nullopt;
    std::vector<double> s = per_rep;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    t.median_ms = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    t.min_ms = s.front();
    double sum = 0;
    for (double x : s) sum += x;
    t.mean_ms = sum / static_cast<double>(n);
    double var = 0;
    for (double x : s) var += (x - t.mean_ms) * (x - t.mean_ms);
    t.cv = n > 1 && t.mean_ms > 0 ? std::sqrt(var / static_cast<double>(n - 1)) / t.mean_ms : 0;
    t.repetitions = static_cast<int>(n);
  }
  if (!(t.median_ms > 0)) return std::nullopt;
  return t;
}

}  // namespace

std::map<std::string, TimingOutcome> run_benchmarks(
    const std::vector<TimedBenchmark>& benchmarks, const std::set<std::string>& benchmark_flags,
    bool quiet, const std::function<void(const std::string&, const TimingOutcome&)>& on_done) {
  std::map<std::string, bool> hot;
  for (const TimedBenchmark& tb : benchmarks) {
    hot[tb.name] = tb.timing.hot;
    // Warm-up is the body's (CallTimer::warm_up) rather than MinWarmUpTime: Google Benchmark
    // 1.8.x can then give repetitions different iteration counts (a failed check in its debug
    // builds).
    auto* b = benchmark::RegisterBenchmark(tb.name.c_str(), tb.body);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (!benchmark_flags.count("benchmark_repetitions")) b->Repetitions(tb.timing.repetitions);
    if (!benchmark_flags.count("benchmark_min_time")) b->MinTime(tb.timing.min_time_s);
    b->ComputeStatistics("min", [](const std::vector<double>& v) {
      return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    });
  }
  std::map<std::string, Collected> collected;
  auto outcome = [&](const std::string& name) {
    const Collected& c = collected[name];
    TimingOutcome o;
    o.error = c.error;
    if (o.error.empty()) o.time = time_from(c, hot[name]);
    return o;
  };
  std::unique_ptr<benchmark::BenchmarkReporter> display;
  if (!quiet) display.reset(benchmark::CreateDefaultDisplayReporter());
  CollectingReporter reporter(display.get(), collected, [&](const std::string& name) {
    if (on_done) on_done(name, outcome(name));
  });
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  std::map<std::string, TimingOutcome> all;
  for (const auto& kv : collected) all[kv.first] = outcome(kv.first);
  return all;
}

}  // namespace attnbench
