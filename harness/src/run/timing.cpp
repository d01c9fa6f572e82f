// Timing through Google Benchmark (timing.hpp): the per-call timer, the registration of the
// timed rows, and a reporter that keeps what Google Benchmark measured and turns it into
// TimeStats.
#include "attnbench/timing.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "attnbench/nvtx.hpp"

#ifndef ATTNBENCH_BENCHMARK_VERSION
#define ATTNBENCH_BENCHMARK_VERSION "unknown"
#endif

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

namespace {

// The counters of one repetition, from its own timed calls (Google Benchmark's rate counters
// would divide by the benchmark thread's CPU time, not by the manual time).
void set_counters(benchmark::State& st, const CallCounters& c, double seconds) {
  const double calls = static_cast<double>(st.iterations());
  if (!(seconds > 0) || !(calls > 0)) return;
  st.counters["TFLOP/s"] = benchmark::Counter(c.flops * calls / seconds / 1e12);
  st.counters["bytes_per_second"] =
      benchmark::Counter(static_cast<double>(c.io_bytes) * calls / seconds);
  st.counters["io_bytes"] = benchmark::Counter(static_cast<double>(c.io_bytes));
}

}  // namespace

void CallTimer::time(benchmark::State& st, CaseBuffers& buf, Device device, Pass pass, bool hot,
                     FlushMode flush, const std::string& range, const CallCounters& counters,
                     double slowdown) {
  DeviceOps& ops = buf.ops();
  double total_s = 0;
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
      if (!hot) ops.flush_cache(flush);
      nvtx::Range r(range);
      if (cudaEventRecord(start, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
      buf.call(pass);
      if (cudaEventRecord(stop, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
      const cudaError_t e = cudaEventSynchronize(stop);
      if (e != cudaSuccess) throw std::runtime_error(std::string("timed call: ") + cudaGetErrorString(e));
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      st.SetIterationTime(static_cast<double>(ms) * 1e-3);
      total_s += static_cast<double>(ms) * 1e-3;
    }
#else
    throw std::runtime_error("attnbench was built without CUDA");
#endif
    set_counters(st, counters, total_s);
    return;
  }
  using clock = std::chrono::steady_clock;
  for (auto _ : st) {
    if (!hot) ops.flush_cache(flush);
    nvtx::Range r(range);
    const auto t0 = clock::now();
    buf.call(pass);
    buf.synchronize();
    auto t1 = clock::now();
    if (slowdown > 1) {
      // A test's controlled slowdown: the call takes `slowdown` times as long as it just did,
      // busy (this thread on a core) as a slower implementation would be.
      const auto until = t0 + std::chrono::duration_cast<clock::duration>((t1 - t0) * slowdown);
      while ((t1 = clock::now()) < until) {
      }
    }
    const double s = std::chrono::duration<double>(t1 - t0).count();
    st.SetIterationTime(s);
    total_s += s;
  }
  set_counters(st, counters, total_s);
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

// The row's name alone: Google Benchmark appends /min_time:T/repeats:N when they are set per
// benchmark (from the config, unless a flag sets them for all), and /manual_time, so the same
// row would have another name in another run and compare.py would match nothing.
void stable_name(BRun& r) {
  r.run_name.min_time.clear();
  if constexpr (requires { r.run_name.min_warmup_time; }) r.run_name.min_warmup_time.clear();
  r.run_name.repetitions.clear();
  r.run_name.iterations.clear();
  r.run_name.time_type.clear();
}

// Hands runs on to another reporter under their stable names. Google Benchmark sets the output
// streams of the reporter it is given (this one) before the context: they are passed on then.
class StableNames : public benchmark::BenchmarkReporter {
 public:
  explicit StableNames(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}
  bool ReportContext(const Context& c) override {
    inner_->SetOutputStream(&GetOutputStream());
    inner_->SetErrorStream(&GetErrorStream());
    return inner_->ReportContext(c);
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> renamed = runs;
    for (Run& r : renamed) stable_name(r);
    inner_->ReportRuns(renamed);
  }
  void Finalize() override { inner_->Finalize(); }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
};

// Console output options: colour when the stream is a terminal, unless --benchmark_color says.
benchmark::ConsoleReporter::OutputOptions console_options(
    const std::map<std::string, std::string>& flags, int fd) {
  using CR = benchmark::ConsoleReporter;
  const auto color = flags.find("benchmark_color");
  const bool colored =
      color == flags.end() || color->second == "auto" || color->second.empty()
          ? ::isatty(fd) != 0
          : color->second == "true" || color->second == "yes" || color->second == "1";
  const auto tab = flags.find("benchmark_counters_tabular");
  const bool tabular =
      tab != flags.end() && (tab->second.empty() || tab->second == "true" || tab->second == "1");
  return static_cast<CR::OutputOptions>((colored ? CR::OO_Color : CR::OO_None) |
                                        (tabular ? CR::OO_Tabular : CR::OO_None));
}

// Google Benchmark's reporter for a --benchmark_format / --benchmark_out_format value.
std::unique_ptr<benchmark::BenchmarkReporter> reporter_for(
    const std::string& format, const std::map<std::string, std::string>& flags, int fd) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  if (format == "csv") {
    // Deprecated by Google Benchmark, still what --benchmark_format=csv asks for.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    return std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
  }
  if (format == "console")
    return std::make_unique<benchmark::ConsoleReporter>(fd < 0 ? benchmark::ConsoleReporter::OO_None
                                                               : console_options(flags, fd));
  throw std::runtime_error("--benchmark_format / --benchmark_out_format = " + format +
                           ": must be console, json or csv");
}

struct Collected {
  std::vector<BRun> iterations;            // one per repetition
  std::map<std::string, BRun> aggregates;  // mean, median, stddev, cv, min
  std::string error;
};

// on_done(name) is called as soon as a benchmark has reported everything it will report.
// console: Google Benchmark's console lines, each row's median and cv (the results file has
// them all). report: the full report a --benchmark_format asked for. Either may be null.
class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  CollectingReporter(benchmark::BenchmarkReporter* console, std::ostream* console_stream,
                     benchmark::BenchmarkReporter* report, const std::set<std::string>& failed,
                     std::map<std::string, Collected>& out,
                     std::function<void(const std::string&)> on_done)
      : console_(console),
        console_stream_(console_stream),
        report_(report),
        failed_(failed),
        out_(out),
        on_done_(std::move(on_done)) {}

  bool ReportContext(const Context& c) override {
    if (console_ && console_stream_) {
      // Instead of Google Benchmark's context block, whose "Library was built as DEBUG" warning
      // Debian's package prints on every run: one line that says what it means here.
      const auto lib = benchmark_library();
      *console_stream_ << "Google Benchmark " << lib.value("version", "?");
      if (lib.value("build_type", "") == "debug") {
        *console_stream_ << " (a debug build of the library; it does not enter attnbench's times, "
                            "which are measured around each call: manual time)";
      }
      *console_stream_ << "\n";
      // Its context block (machine, caches, the warning) goes nowhere; it keeps the name width.
      std::ostream discard(nullptr);
      console_->SetOutputStream(&discard);
      console_->SetErrorStream(&discard);
      console_->ReportContext(c);
      console_->SetOutputStream(console_stream_);
      console_->SetErrorStream(console_stream_);
    }
    return report_ ? report_->ReportContext(c) : true;
  }

  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> shown;
    std::vector<std::string> done;
    for (const Run& r : runs) {
      const std::string& name = r.run_name.function_name;
      Collected& c = out_[name];
      std::string msg;
      if (run_failed(r, msg)) {
        c.error = msg;
        // A row that failed verification is in the table already; one whose timing failed is news.
        if (!failed_.count(name)) shown.push_back(r);
        done.push_back(name);
      } else if (r.run_type == Run::RT_Aggregate) {
        c.aggregates[r.aggregate_name] = r;
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
    if (console_ && !shown.empty()) {
      for (Run& r : shown) stable_name(r);
      console_->ReportRuns(shown);
    }
    if (report_) report_->ReportRuns(runs);
    done.erase(std::unique(done.begin(), done.end()), done.end());
    if (on_done_)
      for (const auto& n : done) on_done_(n);
  }

  void Finalize() override {
    if (console_) console_->Finalize();
    if (report_) report_->Finalize();
  }

 private:
  benchmark::BenchmarkReporter* console_;
  std::ostream* console_stream_;
  benchmark::BenchmarkReporter* report_;
  const std::set<std::string>& failed_;
  std::map<std::string, Collected>& out_;
  std::function<void(const std::string&)> on_done_;
};

double run_ms(const BRun& r) {
  return r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit) * 1e3;
}

std::optional<TimeStats> time_from(const Collected& c, const TimingSettings& ts) {
  const bool hot = ts.hot;
  TimeStats t;
  t.hot = hot;
  std::vector<double> per_rep;
  for (const BRun& r : c.iterations) {
    if (r.iterations > 0) per_rep.push_back(r.real_accumulated_time / static_cast<double>(r.iterations) * 1e3);
  }
  t.samples_ms = per_rep;
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
    const std::int64_t iterations = t.iterations;
    t = summarize_samples(per_rep);
    t.hot = hot;
    t.iterations = iterations;
  }
  if (!hot) t.flush = to_string(ts.flush);
  if (!(t.median_ms > 0)) return std::nullopt;
  return t;
}

std::string flag(const BenchmarkSettings& s, const char* name, const std::string& fallback = "") {
  const auto it = s.flags.find(name);
  return it == s.flags.end() ? fallback : it->second;
}

}  // namespace

std::map<std::string, TimingOutcome> run_benchmarks(
    const std::vector<TimedBenchmark>& benchmarks, const BenchmarkSettings& settings,
    const std::function<void(const std::string&, const TimingOutcome&)>& on_done) {
  std::map<std::string, TimingSettings> timing;
  std::set<std::string> failed;
  for (const TimedBenchmark& tb : benchmarks) {
    timing[tb.name] = tb.timing;
    benchmark::internal::Benchmark* b = nullptr;
    if (!tb.failed.empty()) {
      failed.insert(tb.name);
      const std::string why = tb.failed;
      b = benchmark::RegisterBenchmark(
          tb.name.c_str(), [why](benchmark::State& st) { st.SkipWithError(why.c_str()); });
    } else {
      // Warm-up is the body's (CallTimer::warm_up) rather than MinWarmUpTime: Google Benchmark
      // 1.8.x can then give repetitions different iteration counts (a failed check in its debug
      // builds).
      b = benchmark::RegisterBenchmark(tb.name.c_str(), tb.body);
    }
    b->UseManualTime()->Unit(benchmark::kNanosecond);
    if (!settings.flags.count("benchmark_repetitions")) b->Repetitions(tb.timing.repetitions);
    if (!settings.flags.count("benchmark_min_time")) b->MinTime(tb.timing.min_time_s);
    b->ComputeStatistics("min", [](const std::vector<double>& v) {
      return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    });
  }
  for (const auto& [k, v] : settings.context) benchmark::AddCustomContext(k, v);

  std::map<std::string, Collected> collected;
  auto outcome = [&](const std::string& name) {
    const Collected& c = collected[name];
    TimingOutcome o;
    o.error = c.error;
    if (o.error.empty()) o.time = time_from(c, timing[name]);
    return o;
  };
  // The console lines on the progress stream; the report --benchmark_format asked for on
  // stdout; the file report of --benchmark_out.
  std::unique_ptr<benchmark::BenchmarkReporter> console, report, file;
  // With --benchmark_format the asked report is on stdout and the console lines are left out.
  const bool asked = settings.flags.count("benchmark_format") && settings.stdout_report;
  if (!settings.quiet && settings.progress && settings.console_lines && !asked) {
    console = std::make_unique<benchmark::ConsoleReporter>(
        console_options(settings.flags, STDERR_FILENO));
  }
  if (asked) {
    report = std::make_unique<StableNames>(
        reporter_for(flag(settings, "benchmark_format"), settings.flags, STDOUT_FILENO));
    report->SetOutputStream(settings.stdout_report);
    report->SetErrorStream(settings.stdout_report);
  }
  if (!flag(settings, "benchmark_out").empty()) {
    file = std::make_unique<StableNames>(
        reporter_for(flag(settings, "benchmark_out_format", "json"), settings.flags, -1));
  }
  CollectingReporter reporter(console.get(), settings.progress, report.get(), failed, collected,
                              [&](const std::string& name) {
                                if (on_done && !failed.count(name)) on_done(name, outcome(name));
                              });
  benchmark::RunSpecifiedBenchmarks(&reporter, file.get());
  benchmark::ClearRegisteredBenchmarks();
  std::map<std::string, TimingOutcome> all;
  for (const auto& kv : collected)
    if (!failed.count(kv.first)) all[kv.first] = outcome(kv.first);
  return all;
}

nlohmann::ordered_json benchmark_library() {
  static const nlohmann::ordered_json info = [] {
    nlohmann::ordered_json j;
    j["version"] = ATTNBENCH_BENCHMARK_VERSION;
    // The library's build type is known only to the library: its JSON context says it.
    using Ctx = benchmark::BenchmarkReporter::Context;
    const char* const exe = Ctx::executable_name;
    if (!exe) Ctx::executable_name = "attnbench";  // the JSON context writes it
    std::ostringstream ss;
    benchmark::JSONReporter json;
    json.SetOutputStream(&ss);
    json.SetErrorStream(&ss);
    json.ReportContext(Ctx());
    Ctx::executable_name = exe;
    const std::string text = ss.str();
    const std::string key = "\"library_build_type\": \"";
    const auto at = text.find(key);
    j["build_type"] =
        at == std::string::npos
            ? std::string("unknown")
            : text.substr(at + key.size(), text.find('"', at + key.size()) - at - key.size());
    return j;
  }();
  return info;
}

CpuTicks cpu_ticks() {
  CpuTicks t;
  std::ifstream stat("/proc/stat");
  std::string line;
  while (std::getline(stat, line)) {
    if (line.rfind("cpu", 0) != 0) break;
    std::istringstream in(line);
    std::string name;
    in >> name;
    // user nice system idle iowait irq softirq steal (guest time is inside user already)
    double f[8] = {};
    for (double& x : f) in >> x;
    if (!in) continue;
    if (name == "cpu") {
      for (double x : f) t.total += x;
      t.busy = t.total - f[3] - f[4];
      t.ok = true;
    } else {
      ++t.cores;
    }
  }
  std::ifstream self("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  // Fields after the command name (which may hold spaces) in parentheses: utime and stime are
  // the 12th and 13th after it.
  const auto close = text.rfind(')');
  if (close == std::string::npos) {
    t.ok = false;
    return t;
  }
  std::istringstream in(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int k = 1; k <= 13 && in >> field; ++k) {
    if (k == 12) utime = std::atof(field.c_str());
    if (k == 13) stime = std::atof(field.c_str());
  }
  t.self = utime + stime;
  t.ok = t.ok && static_cast<bool>(in);
  return t;
}

std::optional<double> others_cores(const CpuTicks& a, const CpuTicks& b) {
  const double total = b.total - a.total;
  if (!a.ok || !b.ok || !(total > 0) || b.cores <= 0) return std::nullopt;
  const double others = (b.busy - a.busy) - (b.self - a.self);
  return std::max(0.0, others / total * b.cores);
}

double TestSlowdown::factor(const std::string& impl) const {
  for (const auto& [glob, f] : rules)
    if (glob_match(glob, impl)) return f;
  return 1;
}

std::optional<TestSlowdown> test_slowdown_from_env() {
  const char* v = std::getenv("ATTNBENCH_TEST_SLOWDOWN");
  if (!v || !*v) return std::nullopt;
  TestSlowdown t;
  t.spec = v;
  std::stringstream ss(t.spec);
  std::string rule;
  while (std::getline(ss, rule, ',')) {
    const auto eq = rule.rfind('=');
    char* end = nullptr;
    const double f = eq == std::string::npos ? 0 : std::strtod(rule.c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq == 0 || end == rule.c_str() + eq + 1 || *end != '\0' ||
        !(f >= 1) || !std::isfinite(f)) {
      throw std::runtime_error("ATTNBENCH_TEST_SLOWDOWN = " + t.spec +
                               ": expected GLOB=FACTOR[,GLOB=FACTOR...] " +
                               "with factors >= 1 (e.g. '*=1.15'), got '" + rule + "'");
    }
    t.rules.emplace_back(rule.substr(0, eq), f);
  }
  if (t.rules.empty())
    throw std::runtime_error("ATTNBENCH_TEST_SLOWDOWN = " + t.spec + ": no rule");
  return t;
}

}  // namespace attnbench
