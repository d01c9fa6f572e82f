#include "attnbench/runner.hpp"

#include <malloc.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>

#include <benchmark/benchmark.h>

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "attnbench/ceilings.hpp"
#include "attnbench/context.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/npy.hpp"
#include "attnbench/nvtx.hpp"
#include "attnbench/render.hpp"

namespace attnbench {

namespace {

// ---- SIGINT: finish the current row, then stop ------------------------------------------------

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) { g_interrupted = 1; }

// Installs the handler for the run; SA_RESETHAND makes a second Ctrl-C kill at once.
class SigintGuard {
 public:
  SigintGuard() {
    g_interrupted = 0;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintGuard() { sigaction(SIGINT, &old_, nullptr); }
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction old_ {};
};

// ---- Peak memory of one call ------------------------------------------------------------------

// Fields of /proc/self/status in bytes (VmRSS, VmHWM), -1 when absent.
std::int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size())) * 1024;
  }
  return -1;
}

// CUDA: device memory in use (cudaMemGetInfo) after the validation call minus before the
// buffers were allocated: harness buffers, workspace and whatever the implementation or its
// libraries allocated. CPU: the resident-set high-water mark, reset through
// /proc/self/clear_refs ("5") before the buffers are allocated, minus the resident set then.
class PeakProbe {
 public:
  explicit PeakProbe(Device d) : device_(d) {}

  void begin() {
    if (device_ == Device::cuda) {
#ifdef ATTNBENCH_WITH_CUDA
      std::size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
        before_ = static_cast<std::int64_t>(total - free);
        method_ = "cudaMemGetInfo";
      } else {
        cudaGetLastError();
      }
#endif
      return;
    }
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
    clear.flush();
    if (clear.good()) {
      before_ = proc_status_bytes("VmRSS");
      method_ = "VmHWM-reset";
    } else {
      // Without the reset only growth beyond the process's earlier peak is visible.
      before_ = proc_status_bytes("VmHWM");
      method_ = "VmHWM-growth";
    }
  }

  std::optional<std::int64_t> end() const {
    if (method_.empty() || before_ < 0) return std::nullopt;
    std::int64_t after = -1;
    if (device_ == Device::cuda) {
#ifdef ATTNBENCH_WITH_CUDA
      std::size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        cudaGetLastError();
        return std::nullopt;
      }
      after = static_cast<std::int64_t>(total - free);
#endif
    } else {
      after = proc_status_bytes("VmHWM");
    }
    if (after < 0) return std::nullopt;
    return std::max<std::int64_t>(0, after - before_);
  }

  const std::string& method() const { return method_; }

 private:
  Device device_;
  std::int64_t before_ = -1;
  std::string method_;
};

// ---- CUDA context health ------------------------------------------------------------------------

// After a CUDA row failed: is the context poisoned by a sticky error (illegal address, ...)?
// Non-sticky errors are cleared; a sticky one survives a second synchronize.
bool cuda_context_broken(std::string& why) {
#ifdef ATTNBENCH_WITH_CUDA
  if (cudaDeviceSynchronize() == cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaGetLastError();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return false;
  why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  return true;
#else
  (void)why;
  return false;
#endif
}

// ---- Rows -----------------------------------------------------------------------------------

struct PlannedRow {
  const ConfigGroup* group = nullptr;
  const Problem* problem = nullptr;
  int case_index = 0;
  const Implementation* impl = nullptr;
  const Options* params = nullptr;
  Pass pass = Pass::fwd;
  std::string name;  // NVTX range and benchmark name
};

std::string device_label(Device d) { return d == Device::cpu ? "cpu" : "cuda:0"; }

std::string safe_file_part(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' && c != '=' && c != '+') c = '_';
  }
  return s;
}

// The outputs a standalone poisoned call produces (the naive baseline's, for the error rule).
Outputs run_once(const Implementation& impl, const Problem& p, Pass pass, const Options& opts,
                 const CaseInputs& in, const Reference& ref, const std::string& range) {
  CaseBuffers buf(impl, p, pass, opts);
  buf.upload_inputs(in);
  if (pass == Pass::bwd) {
    if (!ref.lse_in.empty()) buf.upload_fwd_outputs(ref.o_in, ref.lse_in);
    else buf.produce_fwd_outputs();
  }
  buf.poison_outputs();
  {
    nvtx::Range r(range);
    buf.call(pass);
    buf.synchronize();
  }
  return buf.download();
}

// Everything phase 1 shares between the rows of one case.
struct CaseState {
  std::optional<CaseInputs> inputs;
  Reference ref;
  // Naive baseline outputs per (device, pass); null when the baseline cannot run the case.
  std::map<std::pair<Device, Pass>, std::shared_ptr<Outputs>> naive;
  std::map<std::pair<Device, Pass>, std::string> naive_note;
  bool inputs_dumped = false;
};

// ---- Google Benchmark: a reporter that keeps what it is given ----------------------------------

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
  std::vector<BRun> iterations;          // one per repetition
  std::map<std::string, BRun> aggregates;  // mean, median, stddev, cv, min
  std::string error;
};

// on_done(name) is called as soon as a benchmark has reported everything it will report (its
// aggregates, its single run, or an error), so the caller can write its time into the results
// file then rather than at the end of the timing phase.
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
               : per_rep.empty() ? t.median_ms
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

// ---- The run ----------------------------------------------------------------------------------

class Runner {
 public:
  Runner(const Config& c, const RunOptions& o, std::ostream& out, std::ostream& err)
      : cfg_(c), opts_(o), out_(out), err_(err) {}

  int run();

 private:
  const Config& cfg_;
  const RunOptions& opts_;
  std::ostream& out_;
  std::ostream& err_;
  ResultsFile results_;
  std::vector<PlannedRow> plan_;
  std::vector<std::size_t> timed_;  // indices into plan_/results_.rows of rows to time
  std::string cuda_broken_;         // set once a sticky CUDA error was seen
  std::size_t done_ = 0;
  bool dump_failed_ = false;
  bool cuda_present_ = false;  // asked once: the CUDA runtime's device query is not free
  // --resume: the earlier file's rows to keep, by call name (impl, options, case, pass).
  std::map<std::string, const ResultRow*> kept_;
  std::size_t reused_ = 0;

  void build_plan();
  void run_case(std::size_t first, std::size_t last);
  ResultRow run_row(const PlannedRow& pr, CaseState& cs);
  void time_rows();
  void save(bool final_write);
  void progress(const PlannedRow& pr, const ResultRow& r);
  void dump(const PlannedRow& pr, CaseState& cs, const Outputs& outs);
  void index_resumed_rows();

  ResultRow blank_row(const PlannedRow& pr) const {
    ResultRow r;
    r.case_label = pr.problem->label();
    r.case_index = pr.case_index;
    r.problem = *pr.problem;
    r.params = *pr.params;
    r.impl = pr.impl->name();
    r.device = device_label(pr.impl->device());
    r.pass = pr.pass;
    r.flops = pass_flops(*pr.problem, pr.pass);
    r.nvtx = pr.name;
    return r;
  }

  // Why a row cannot run, or "" when it can.
  std::string skip_reason(const PlannedRow& pr) const {
    const Implementation& impl = *pr.impl;
    if (impl.device() == Device::cuda) {
      if (!cuda_present_) return kNoCudaDevice;
      if (!cuda_broken_.empty()) return "CUDA context unusable after an earlier error (" + cuda_broken_ + ")";
    }
    const Capabilities caps = impl.capabilities();
    // A backward-only implementation's fwd row would time its partner's forward under its name.
    if (pr.pass == Pass::fwd && !caps.forward) {
      return "backward-only" + (caps.fwd_partner.empty() ? std::string() : " (its forward is " + caps.fwd_partner + ")");
    }
    if (Support s = impl.supports(*pr.problem, pr.pass); !s) return s.reason;
    if (Support s = impl.supports_options(*pr.problem, pr.pass, *pr.params); !s) return s.reason;
    return {};
  }
};

void Runner::build_plan() {
  int case_index = 0;
  for (const ConfigGroup& g : cfg_.groups) {
    for (const Problem& p : g.cases) {
      for (const ImplRun& ir : g.impls) {
        for (const Options& o : ir.option_sets) {
          for (Pass pass : g.passes) {
            PlannedRow pr;
            pr.group = &g;
            pr.problem = &p;
            pr.case_index = case_index;
            pr.impl = ir.impl;
            pr.params = &o;
            pr.pass = pass;
            pr.name = nvtx::call_range_name(ir.impl->name(), o, p.label(), pass);
            plan_.push_back(std::move(pr));
          }
        }
      }
      ++case_index;
    }
  }
}

void Runner::progress(const PlannedRow& pr, const ResultRow& r) {
  ++done_;
  if (opts_.quiet) return;
  err_ << "[" << done_ << "/" << plan_.size() << "] " << pr.impl->name();
  for (const auto& [k, v] : *pr.params) err_ << " " << k << "=" << v;
  err_ << " " << r.case_label << " " << to_string(pr.pass) << " ... " << to_string(r.status);
  if (kept_.count(pr.name)) err_ << " [kept from " << opts_.resume_path << "]";
  if (!r.reason.empty()) {
    std::string why = r.reason;
    if (why.size() > 160) why = why.substr(0, 157) + "...";
    err_ << " (" << why << ")";
  }
  err_ << "\n" << std::flush;
}

void Runner::dump(const PlannedRow& pr, CaseState& cs, const Outputs& outs) {
  namespace fs = std::filesystem;
  const Problem& p = *pr.problem;
  const fs::path dir = fs::path(opts_.dump_dir) / p.label();
  fs::create_directories(dir);
  const std::vector<std::int64_t> qs{p.batch, p.seq_q, p.heads_q, p.head_dim};
  const std::vector<std::int64_t> ks{p.batch, p.seq_kv, p.heads_kv, p.head_dim};
  const std::vector<std::int64_t> ls{p.batch, p.heads_q, p.seq_q};
  if (!cs.inputs_dumped) {
    const CaseInputs& in = *cs.inputs;
    write_npy((dir / "Q.npy").string(), in.q.data(), p.dtype, qs);
    write_npy((dir / "K.npy").string(), in.k.data(), p.dtype, ks);
    write_npy((dir / "V.npy").string(), in.v.data(), p.dtype, ks);
    write_npy((dir / "dO.npy").string(), in.dout.data(), p.dtype, qs);
    // The float64 reference, rounded to float32, where it was computed in full.
    auto ref_out = [&](const RefOutput& r, const char* name, const std::vector<std::int64_t>& shape) {
      if (r.empty() || !r.idx.empty()) return;
      std::vector<float> f(r.val.begin(), r.val.end());
      write_npy((dir / name).string(), f.data(), DType::f32, shape);
    };
    ref_out(cs.ref.o, "ref_O.npy", qs);
    ref_out(cs.ref.lse, "ref_LSE.npy", ls);
    ref_out(cs.ref.dq, "ref_dQ.npy", qs);
    ref_out(cs.ref.dk, "ref_dK.npy", ks);
    ref_out(cs.ref.dv, "ref_dV.npy", ks);
    cs.inputs_dumped = true;
  }
  std::string stem = pr.impl->name();
  for (const auto& [k, v] : *pr.params) stem += "+" + k + "=" + std::to_string(v);
  stem = safe_file_part(stem) + "." + std::string(to_string(pr.pass)) + ".";
  if (outs.o.numel > 0) write_npy((dir / (stem + "O.npy")).string(), outs.o.data(), p.dtype, qs);
  if (!outs.lse.empty()) write_npy((dir / (stem + "LSE.npy")).string(), outs.lse.data(), DType::f32, ls);
  if (outs.dq.numel > 0) write_npy((dir / (stem + "dQ.npy")).string(), outs.dq.data(), p.dtype, qs);
  if (outs.dk.numel > 0) write_npy((dir / (stem + "dK.npy")).string(), outs.dk.data(), p.dtype, ks);
  if (outs.dv.numel > 0) write_npy((dir / (stem + "dV.npy")).string(), outs.dv.data(), p.dtype, ks);
}

ResultRow Runner::run_row(const PlannedRow& pr, CaseState& cs) {
  ResultRow r = blank_row(pr);
  const Problem& p = *pr.problem;
  const Implementation& impl = *pr.impl;
  const Device dev = impl.device();
  const Reference& ref = cs.ref;

  // The same-device naive baseline, once per (device, pass) of the case.
  const auto key = std::make_pair(dev, pr.pass);
  if (ref.mode != VerifyMode::off && !cs.naive.count(key)) {
    std::shared_ptr<Outputs> outs;
    const Implementation* base = naive_baseline(dev);
    if (!base) {
      cs.naive_note[key] = "no " + std::string(to_string(dev)) + ".naive_3pass registered";
    } else if (Support s = base->supports(p, pr.pass); !s) {
      cs.naive_note[key] = base->name() + " cannot run this case: " + s.reason;
    } else {
      try {
        static const Options none;
        outs = std::make_shared<Outputs>(run_once(*base, p, pr.pass, none, *cs.inputs, ref,
                                                  nvtx::call_range_name(base->name(), none, p.label(), pr.pass) + ":baseline"));
      } catch (const std::exception& e) {
        cs.naive_note[key] = base->name() + " failed: " + e.what();
      }
    }
    cs.naive[key] = outs;
  }

  r.verified = true;
  r.verify_mode = ref.mode;
  if (const Implementation* base = naive_baseline(dev)) r.baseline = base->name();
  try {
    PeakProbe probe(dev);
    probe.begin();
    CaseBuffers buf(impl, p, pr.pass, *pr.params);
    buf.upload_inputs(*cs.inputs);
    if (pr.pass == Pass::bwd) {
      if (!ref.lse_in.empty()) buf.upload_fwd_outputs(ref.o_in, ref.lse_in);
      else buf.produce_fwd_outputs();
    }
    buf.poison_outputs();
    {
      nvtx::Range range(pr.name);
      buf.call(pr.pass);
      buf.synchronize();
    }
    MemoryStats mem;
    mem.io_bytes = buf.io_bytes();
    mem.workspace_bytes = buf.workspace_bytes();
    mem.peak_bytes = probe.end();
    mem.peak_method = probe.method();
    r.memory = mem;
    const Outputs outs = buf.download();
    const Outputs* naive = nullptr;
    if (auto it = cs.naive.find(key); it != cs.naive.end() && it->second) naive = it->second.get();
    else if (ref.mode != VerifyMode::off) r.baseline.clear();
    // With verification off this still fails NaN, Inf and unwritten (poisoned) elements.
    const Verdict v = verify(p, pr.pass, outs, naive, ref);
    r.outputs = v.outputs;
    r.status = v.ok ? Status::pass : Status::fail;
    r.reason = v.failure();
    if (auto note = cs.naive_note.find(key); note != cs.naive_note.end()) {
      r.reason += (r.reason.empty() ? "" : "; ") + std::string("baseline: ") + note->second;
    }
    if (!opts_.dump_dir.empty()) {
      // A full disk is not the implementation's failure: say so once and go on.
      try {
        dump(pr, cs, outs);
      } catch (const std::exception& e) {
        if (!dump_failed_) err_ << "attnbench: --dump: " << e.what() << "\n";
        dump_failed_ = true;
      }
    }
  } catch (const OutOfMemory& e) {
    r = blank_row(pr);
    r.status = Status::skip;
    r.reason = std::string("out of memory: ") + e.what();
  } catch (const std::bad_alloc&) {
    r = blank_row(pr);
    r.status = Status::skip;
    r.reason = "out of host memory";
  } catch (const std::exception& e) {
    r.status = Status::fail;
    r.reason = e.what();
    r.memory.reset();
    if (dev == Device::cuda) {
      std::string why;
      if (cuda_context_broken(why)) {
        cuda_broken_ = why;
        results_.complete = false;
        results_.stop_reason = "sticky CUDA error in " + pr.name + ": " + why + "; later CUDA rows skipped";
      }
    }
  }
  return r;
}

void Runner::index_resumed_rows() {
  for (const ResultRow& row : opts_.resume.rows) {
    if (!row.nvtx.empty() && kept_on_resume(row, opts_.profile)) kept_[row.nvtx] = &row;
  }
}

void Runner::run_case(std::size_t first, std::size_t last) {
  const PlannedRow& head = plan_[first];
  const Problem& p = *head.problem;
  std::vector<std::string> reasons(last - first);
  std::vector<const ResultRow*> kept(last - first, nullptr);
  bool need_fwd = false, need_bwd = false, any = false;
  for (std::size_t i = first; i < last; ++i) {
    if (auto it = kept_.find(plan_[i].name); it != kept_.end()) {
      kept[i - first] = it->second;  // no inputs or reference needed for it
      continue;
    }
    reasons[i - first] = skip_reason(plan_[i]);
    if (!reasons[i - first].empty()) continue;
    any = true;
    need_fwd = need_fwd || plan_[i].pass != Pass::bwd;
    need_bwd = need_bwd || plan_[i].pass != Pass::fwd;
  }
  CaseState cs;
  std::string case_error;
  if (any) {
    try {
      nvtx::Range range("inputs+reference:" + p.label());
      cs.inputs = make_inputs(p, cfg_.seed, cfg_.distribution);
      const VerifySettings& vs = head.group->verify;
      cs.ref = compute_reference(*cs.inputs, vs.mode, need_fwd, need_bwd, cfg_.seed, vs.sample);
    } catch (const std::bad_alloc&) {
      case_error = "out of host memory for the inputs or the reference";
    }
  }
  nvtx::Range case_range(p.label());
  for (std::size_t i = first; i < last; ++i) {
    if (g_interrupted) return;
    const PlannedRow& pr = plan_[i];
    ResultRow r;
    if (const ResultRow* earlier = kept[i - first]) {
      r = blank_row(pr);  // the plan's identity (the call name matched), the file's measurements
      copy_measurements(*earlier, r);
      ++reused_;
      progress(pr, r);
      results_.rows.push_back(std::move(r));
      continue;
    }
    // Re-checked: a sticky CUDA error in this case disables the case's later CUDA rows.
    if (std::string why = reasons[i - first].empty() ? skip_reason(pr) : reasons[i - first]; !why.empty()) {
      r = blank_row(pr);
      r.status = Status::skip;
      r.reason = why;
    } else if (!case_error.empty()) {
      r = blank_row(pr);
      r.status = Status::skip;
      r.reason = case_error;
    } else {
      r = run_row(pr, cs);
    }
    progress(pr, r);
    if (r.status == Status::pass && !opts_.profile) timed_.push_back(results_.rows.size());
    results_.rows.push_back(std::move(r));
  }
}

void Runner::time_rows() {
  if (timed_.empty() || g_interrupted) return;
  // One slot of live buffers: the benchmark being run. Google Benchmark calls a benchmark's
  // function several times (iteration estimate, repetitions), so the buffers are kept between
  // calls and rebuilt only when another row starts.
  struct Slot {
    std::size_t row = SIZE_MAX;
    std::unique_ptr<CaseBuffers> buf;
    int inputs_case = -1;
    std::optional<CaseInputs> inputs;
#ifdef ATTNBENCH_WITH_CUDA
    cudaEvent_t start = nullptr, stop = nullptr;
#endif
    ~Slot() {
#ifdef ATTNBENCH_WITH_CUDA
      if (start) cudaEventDestroy(start);
      if (stop) cudaEventDestroy(stop);
#endif
    }
  };
  auto slot = std::make_shared<Slot>();

  auto prepare = [this, slot](std::size_t row) -> CaseBuffers& {
    if (slot->row == row && slot->buf) return *slot->buf;
    slot->buf.reset();
    slot->row = SIZE_MAX;
    const PlannedRow& pr = plan_[row];
    const Problem& p = *pr.problem;
    if (slot->inputs_case != pr.case_index) {
      slot->inputs.reset();
      slot->inputs = make_inputs(p, cfg_.seed, cfg_.distribution);
      slot->inputs_case = pr.case_index;
    }
    auto buf = std::make_unique<CaseBuffers>(*pr.impl, p, pr.pass, *pr.params);
    buf->upload_inputs(*slot->inputs);
    // The backward reads O and LSE: the implementation's own forward produces them (untimed).
    if (pr.pass == Pass::bwd) buf->produce_fwd_outputs();
    buf->synchronize();
#ifdef ATTNBENCH_WITH_CUDA
    if (pr.impl->device() == Device::cuda && !slot->start) {
      if (cudaEventCreate(&slot->start) != cudaSuccess || cudaEventCreate(&slot->stop) != cudaSuccess) {
        throw std::runtime_error("cudaEventCreate failed");
      }
    }
#endif
    slot->buf = std::move(buf);
    slot->row = row;
    return *slot->buf;
  };

  std::map<std::string, std::size_t> by_name;
  for (std::size_t k : timed_) {
    const PlannedRow& pr = plan_[k];
    const TimingSettings& ts = pr.group->timing;
    const bool cuda = pr.impl->device() == Device::cuda;
    by_name[pr.name] = k;
    // Warm-up is done here rather than with MinWarmUpTime: Google Benchmark 1.8.x can then give
    // repetitions different iteration counts (a failed check in its debug builds).
    auto warmed = std::make_shared<bool>(false);
    auto fn = [this, slot, prepare, k, cuda, hot = ts.hot, warmup_s = ts.warmup_s,
               warmed](benchmark::State& st) {
      // An interrupt skips the rows not started yet. A row already started finishes its
      // repetitions (seconds at most): Google Benchmark's statistics need every repetition to
      // have the same iteration count (its debug builds abort otherwise, losing the run).
      if (g_interrupted && !*warmed) {
        st.SkipWithError("interrupted");
        return;
      }
      if (cuda && !cuda_broken_.empty()) {
        st.SkipWithError("CUDA context unusable after an earlier error");
        return;
      }
      const std::string& name = plan_[k].name;
      try {
        CaseBuffers& buf = prepare(k);
        DeviceOps& ops = buf.ops();
        const Pass pass = plan_[k].pass;
        if (!*warmed) {
          const auto t0 = std::chrono::steady_clock::now();
          do {
            buf.call(pass);
            buf.synchronize();
          } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < warmup_s);
          *warmed = true;
        }
        for (auto _ : st) {
          if (!hot) ops.flush_cache();
          if (cuda) {
#ifdef ATTNBENCH_WITH_CUDA
            auto stream = static_cast<cudaStream_t>(ops.stream());
            nvtx::Range range(name);
            if (cudaEventRecord(slot->start, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
            buf.call(pass);
            if (cudaEventRecord(slot->stop, stream) != cudaSuccess) throw std::runtime_error("cudaEventRecord failed");
            const cudaError_t e = cudaEventSynchronize(slot->stop);
            if (e != cudaSuccess) throw std::runtime_error(std::string("timed call: ") + cudaGetErrorString(e));
            float ms = 0;
            cudaEventElapsedTime(&ms, slot->start, slot->stop);
            st.SetIterationTime(static_cast<double>(ms) * 1e-3);
#endif
          } else {
            nvtx::Range range(name);
            const auto t0 = std::chrono::steady_clock::now();
            buf.call(pass);
            buf.synchronize();
            const auto t1 = std::chrono::steady_clock::now();
            st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
          }
        }
        buf.synchronize();
      } catch (const std::exception& e) {
        slot->buf.reset();
        slot->row = SIZE_MAX;
        std::string why;
        if (cuda && cuda_context_broken(why)) {
          cuda_broken_ = why;
          results_.complete = false;
          results_.stop_reason = "sticky CUDA error while timing " + name + ": " + why;
        }
        st.SkipWithError(e.what());
      }
    };
    auto* b = benchmark::RegisterBenchmark(pr.name.c_str(), fn);
    b->UseManualTime()->Unit(benchmark::kMillisecond);
    if (!opts_.benchmark_flags.count("benchmark_repetitions")) b->Repetitions(ts.repetitions);
    if (!opts_.benchmark_flags.count("benchmark_min_time")) b->MinTime(ts.min_time_s);
    b->ComputeStatistics("min", [](const std::vector<double>& v) {
      return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
    });
  }

  std::map<std::string, Collected> collected;
  // Each row's time goes into the results file as soon as its benchmark is done, so a run
  // stopped during timing (a kill, the device's time limit) keeps every row timed so far.
  auto apply = [&](const std::string& name) {
    auto it = by_name.find(name);
    auto c = collected.find(name);
    if (it == by_name.end() || c == collected.end()) return;
    ResultRow& r = results_.rows[it->second];
    if (!c->second.error.empty()) {
      // Not timed because of something else (an interrupt, or another implementation's sticky
      // CUDA error): the row keeps its verdict and says why it has no time.
      if (c->second.error == "interrupted" || c->second.error == "CUDA context unusable after an earlier error") {
        r.reason = "not timed: " + c->second.error;
      } else {
        r.status = Status::fail;
        r.reason = "timed call failed: " + c->second.error;
      }
    } else {
      r.time = time_from(c->second, plan_[it->second].group->timing.hot);
    }
  };
  auto on_done = [&](const std::string& name) {
    apply(name);
    save(false);
  };
  std::unique_ptr<benchmark::BenchmarkReporter> display;
  if (!opts_.quiet) display.reset(benchmark::CreateDefaultDisplayReporter());
  CollectingReporter reporter(display.get(), collected, on_done);
  if (!opts_.quiet) err_ << "timing " << timed_.size() << " rows with Google Benchmark\n" << std::flush;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  slot->buf.reset();
  // Normally a no-op (on_done applied each row already); it covers a benchmark whose last report
  // did not look final to the reporter (e.g. repetitions changed by a --benchmark_* flag).
  for (const auto& kv : collected) apply(kv.first);
}

void Runner::save(bool final_write) {
  if (opts_.out_path.empty()) return;
  ResultsFile snapshot_meta;
  if (!final_write) {
    // Written after every case, so a crash or a kill leaves the rows measured so far.
    const bool complete = results_.complete;
    const std::string reason = results_.stop_reason;
    results_.complete = false;
    if (results_.stop_reason.empty()) results_.stop_reason = "run in progress";
    write_results(opts_.out_path, results_);
    results_.complete = complete;
    results_.stop_reason = reason;
    return;
  }
  write_results(opts_.out_path, results_);
}

int Runner::run() {
  // Installed first: a Ctrl-C from here on ends with a results file and exit code 130.
  SigintGuard guard;
  build_plan();
  cuda_present_ = device_present(Device::cuda);
  // A fixed mmap threshold: large buffers are mapped and unmapped, never recycled from the heap,
  // so the CPU peak (resident-set growth) of each row sees its own allocations.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  auto& ctx = results_.context;
  ctx = collect_context();
  ctx["config_path"] = opts_.config_path;
  ctx["config_name"] = cfg_.name;
  ctx["config_hash"] = cfg_.hash();
  ctx["config"] = cfg_.json;
  ctx["seed"] = cfg_.seed;
  ctx["distribution"] = cfg_.distribution == Distribution::normal ? "normal" : "outlier";
  ctx["command_line"] = opts_.command_line;
  ctx["profile"] = opts_.profile;
  ctx["rows_planned"] = plan_.size();
  ctx["multi_gpu"] = "CUDA rows run on device 0 only";
  if (!opts_.resume_path.empty()) {
    const std::string why = resume_refusal(opts_.resume, opts_.resume_path, cfg_.hash(),
                                           opts_.profile, ctx.value("git_revision", ""));
    if (!why.empty()) throw std::runtime_error(why);
    index_resumed_rows();
    ctx["resumed_from"] = opts_.resume_path;
  }
  // Fails here (before any work) when the results file cannot be written.
  save(false);

  const bool any_cuda_row = std::any_of(plan_.begin(), plan_.end(), [](const PlannedRow& r) {
    return r.impl->device() == Device::cuda;
  });
  if (any_cuda_row && !opts_.profile && cuda_present_) {
    ctx["ceilings"] = measure_ceilings();
  }

  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t first = 0; first < plan_.size() && !g_interrupted;) {
    std::size_t last = first;
    while (last < plan_.size() && plan_[last].case_index == plan_[first].case_index) ++last;
    run_case(first, last);
    save(false);
    first = last;
  }
  time_rows();
  if (!opts_.resume_path.empty()) ctx["rows_kept_from_resume"] = reused_;
  ctx["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_interrupted) {
    results_.complete = false;
    results_.stop_reason = "interrupted (SIGINT)";
  }
  save(true);
  print_run_table(results_, out_);
  if (!opts_.out_path.empty()) out_ << "results: " << opts_.out_path << "\n";
  if (g_interrupted) {
    err_ << "interrupted: results written with complete=false\n";
    return 130;
  }
  const bool any_fail = std::any_of(results_.rows.begin(), results_.rows.end(),
                                    [](const ResultRow& r) { return r.status == Status::fail; });
  return any_fail ? 1 : 0;
}

}  // namespace

int run_config(const Config& config, const RunOptions& opts, std::ostream& out, std::ostream& err) {
  Runner r(config, opts, out, err);
  return r.run();
}

}  // namespace attnbench
