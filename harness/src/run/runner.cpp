// The run loop (runner.hpp): the plan of rows, each case's inputs, reference and naive baseline,
// each row's validation call and verdict, then the timing of the rows that passed, and the
// results file after every step. The pieces it drives live beside it: validation.hpp (the call),
// timing.hpp (Google Benchmark), memory_probe.hpp, interrupt.hpp (Ctrl-C), dump.hpp (--dump),
// results.hpp (rows, file, --resume) and render.hpp (the final table).
#include "attnbench/runner.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "attnbench/ceilings.hpp"
#include "attnbench/context.hpp"
#include "attnbench/dump.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/interrupt.hpp"
#include "attnbench/memory_probe.hpp"
#include "attnbench/nvtx.hpp"
#include "attnbench/output_file.hpp"
#include "attnbench/profiler.hpp"
#include "attnbench/render.hpp"
#include "attnbench/timing.hpp"
#include "attnbench/validation.hpp"

namespace attnbench {

namespace {

// Where a second signal's handler puts its stop reason in the prepared text (interrupt.hpp).
constexpr const char* kStopMarker = "@@attnbench-stop-reason@@";

// Why a timing benchmark skipped a row that had passed: not the row's failure.
constexpr const char* kInterrupted = "interrupted";
constexpr const char* kCudaUnusable = "CUDA context unusable after an earlier error";
// The reason such a row carries; a --resume that times the row again drops it.
constexpr std::string_view kNotTimed = "not timed: ";

struct PlannedRow {
  const ConfigGroup* group = nullptr;
  const Problem* problem = nullptr;
  int case_index = 0;
  const Implementation* impl = nullptr;
  const Options* options = nullptr;  // the option set ("options")
  Pass pass = Pass::fwd;
  std::string name;  // NVTX range and benchmark name
};


// Everything phase 1 shares between the rows of one case.
struct CaseState {
  std::optional<CaseInputs> inputs;
  Reference ref;
  // Naive baseline outputs per (device, pass); null when the baseline cannot run the case.
  std::map<std::pair<Device, Pass>, std::shared_ptr<Outputs>> naive;
  std::map<std::pair<Device, Pass>, std::string> naive_note;
  bool inputs_dumped = false;
};

// What a case's rows need before the case runs: the rows kept from --resume, each row's skip
// reason (unsupported, or its buffers beside the case's inputs and reference do not fit), the
// case's own error (its inputs and reference do not fit in host memory), and the passes its
// reference covers (any: a row runs at all).
struct CaseNeeds {
  std::vector<std::string> reasons;
  std::vector<const ResultRow*> kept;
  std::string case_error;
  bool need_fwd = false, need_bwd = false, any = false;
};

// The timing phase's one slot of live buffers: the benchmark being run. Google Benchmark calls a
// benchmark's function several times (iteration estimate, repetitions), so the buffers are kept
// between calls and rebuilt only when another row starts.
struct TimingSlot {
  std::size_t row = SIZE_MAX;
  std::unique_ptr<CaseBuffers> buf;
  int inputs_case = -1;
  std::optional<CaseInputs> inputs;
  CallTimer timer;
};

// What the timing phase knows of its rows, by benchmark name.
struct TimingBook {
  std::map<std::string, std::size_t> by_name;  // the row's index in plan_/results_.rows
  std::map<std::string, std::shared_ptr<CpuTicks>>
      started;  // by name: the machine's CPU time when its timing began
  std::map<std::string, std::optional<double>> ended;  // by name: others_cores once it was done
  std::set<std::string> reported;                      // rows with a progress line
};

class Runner {
 public:
  Runner(const Config& c, const RunOptions& o, std::ostream& out, std::ostream& err)
      : cfg_(c), opts_(o), out_(out), err_(err), tty_(&err == &std::cerr && ::isatty(STDERR_FILENO)) {}

  int run();

 private:
  const Config& cfg_;
  const RunOptions& opts_;
  std::ostream& out_;
  std::ostream& err_;
  ResultsFile results_;
  std::vector<PlannedRow> plan_;
  std::vector<std::size_t> timed_;        // indices into plan_/results_.rows of rows to time
  std::vector<std::size_t> failed_;       // of rows that failed verification in this run
  std::optional<TestSlowdown> slowdown_;  // ATTNBENCH_TEST_SLOWDOWN (timing.hpp)
  std::string cuda_broken_;         // set once a sticky CUDA error was seen
  std::size_t done_ = 0;
  bool dump_failed_ = false;
  bool cuda_present_ = false;  // asked once: the CUDA runtime's device query is not free
  // --resume: the earlier file's rows to keep, by call name (impl, options, case, pass).
  std::map<std::string, const ResultRow*> kept_;
  std::size_t reused_ = 0;    // kept as they were (kept_on_resume)
  std::size_t retimed_ = 0;   // their verdict kept, timed in this run (verdict_kept_on_resume)
  std::string unfinished_;  // the stop_reason of the file while the run goes on
  std::map<Device, std::int64_t> device_memory_;  // device_memory_bytes, asked once per device
  // The progress lines: when the phase (verification, timing) began and the last line was
  // written, and the wall seconds spent on each device's rows (the run's per-device summary).
  using Clock = std::chrono::steady_clock;
  Clock::time_point phase_t0_{}, last_tick_{};
  std::map<std::string, double> device_s_;
  // " [elapsed, ~left]" after `done` of `total` items of the phase; charges the time since the
  // last line to `device`.
  std::string tick(std::size_t done, std::size_t total, const std::string& device);
  // The progress output. On a terminal one line, rewritten in place, with a line of its own for
  // each failure; elsewhere (a log, CI, a test's pipe) the first and last items of a phase, every
  // twentieth of it, and each failure, so a run of hundreds of rows stays readable.
  const bool tty_;
  bool line_open_ = false;  // a rewritable line is on the terminal
  void show(const std::string& line, std::size_t done, std::size_t total, bool failed);
  void end_phase();

  void build_plan();
  void open_context();
  std::unique_ptr<OutputLock> claim_outputs();
  int finish(std::chrono::steady_clock::time_point t0);
  CaseNeeds case_needs(std::size_t first, std::size_t last);
  void run_case(std::size_t first, std::size_t last);
  ResultRow run_row(const PlannedRow& pr, CaseState& cs);
  void naive_outputs(const PlannedRow& pr, CaseState& cs);
  // Phase 2 (time_rows): the rows that passed, timed through Google Benchmark.
  void time_rows();
  CaseBuffers& timing_buffers(TimingSlot& slot, std::size_t row);
  std::vector<TimedBenchmark> timed_benchmarks(const std::shared_ptr<TimingSlot>& slot,
                                               TimingBook& book);
  std::function<void(benchmark::State&)> timed_body(const std::shared_ptr<TimingSlot>& slot,
                                                    std::size_t k, const TimingSettings& ts,
                                                    const CallCounters& counters, double slowdown,
                                                    std::shared_ptr<CpuTicks> ticks);
  void apply_timing(TimingBook& book, const std::string& name, const TimingOutcome& o);
  BenchmarkSettings benchmark_settings() const;
  void save(bool final_write);
  void progress(const PlannedRow& pr, const ResultRow& r);
  void note_cuda_error(const std::string& where, const std::string& consequence);

  ResultRow blank_row(const PlannedRow& pr) const {
    ResultRow r;
    r.case_label = pr.problem->label();
    r.case_index = pr.case_index;
    r.problem = *pr.problem;
    r.options = *pr.options;
    r.impl = pr.impl->name();
    r.device = pr.impl->device() == Device::cpu ? "cpu" : "cuda:" + std::to_string(opts_.cuda_device);
    r.pass = pr.pass;
    r.flops = pass_flops(*pr.problem, pr.pass);
    r.hbm_bytes = pass_hbm_bytes(*pr.problem, pr.pass);
    r.nvtx = pr.name;
    return r;
  }

  std::int64_t memory_of(Device dev) {
    auto [it, fresh] = device_memory_.try_emplace(dev, 0);
    if (fresh) it->second = device_memory_bytes(dev);  // asked once: cudaMemGetInfo is not free
    return it->second;
  }
  static std::string gib(std::int64_t b) {
    std::ostringstream s;
    s.precision(3);
    s << static_cast<double>(b) / (1ull << 30) << " GiB";
    return s.str();
  }
  // "out of memory: ..." when the row's buffers and workspace exceed its device's memory, else "".
  // host_extra: the case's inputs and reference, on the host beside a CPU row's buffers.
  std::string memory_reason(const PlannedRow& pr, std::int64_t host_extra) {
    const Device dev = pr.impl->device();
    const std::int64_t have = memory_of(dev);
    const std::int64_t call = call_memory_bytes(*pr.impl, *pr.problem, pr.pass, *pr.options);
    const std::int64_t extra = dev == Device::cpu ? host_extra : 0;
    const std::int64_t need = call > INT64_MAX / 2 - extra ? INT64_MAX / 2 : call + extra;
    if (have <= 0 || need <= have) return {};
    return "out of memory: needs " + gib(need) + " (inputs, outputs and workspace" +
           (extra > 0 ? ", and " + gib(extra) + " for the case's inputs and float64 reference"
                      : std::string()) +
           "), more than the " + gib(have) + " of " + std::string(to_string(dev)) +
           " memory (checked before the reference)";
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
    if (Support s = impl.supports_options(*pr.problem, pr.pass, *pr.options); !s) return s.reason;
    return {};
  }
};

void Runner::build_plan() {
  int case_index = 0;
  for (const ConfigGroup& g : cfg_.groups) {
    for (const Problem& p : g.cases) {
      if (!opts_.only_cases.empty() && !opts_.only_cases.count(case_index)) {
        ++case_index;  // another worker's case (run --devices): indices stay the config's
        continue;
      }
      for (const ImplRun& ir : g.impls) {
        for (const Options& o : ir.option_sets) {
          for (Pass pass : g.passes) {
            PlannedRow pr;
            pr.group = &g;
            pr.problem = &p;
            pr.case_index = case_index;
            pr.impl = ir.impl;
            pr.options = &o;
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

namespace {
std::string clock_text(double s) {
  const long t = std::lround(std::max(0.0, s));
  std::ostringstream o;
  if (t >= 3600) o << t / 3600 << ":" << std::setw(2) << std::setfill('0') << t % 3600 / 60;
  else o << t / 60;
  o << ":" << std::setw(2) << std::setfill('0') << t % 60;
  return o.str();
}
}  // namespace

std::string Runner::tick(std::size_t done, std::size_t total, const std::string& device) {
  const Clock::time_point now = Clock::now();
  device_s_[device] += std::chrono::duration<double>(now - last_tick_).count();
  last_tick_ = now;
  const double elapsed = std::chrono::duration<double>(now - phase_t0_).count();
  std::string t = " [" + clock_text(elapsed);
  // The rows so far at their average pace: rough when rows differ, but it moves the right way.
  if (done > 0 && done < total)
    t += ", ~" + clock_text(elapsed / static_cast<double>(done) * static_cast<double>(total - done)) + " left";
  return t + "]";
}

namespace {
// Control bytes for the terminal itself (carriage return, erase to the end of the line), past the
// PrintableBuf that std::cerr writes through (config.hpp), which would print them as \xNN; the
// text between them still goes through it.
void terminal_control(std::ostream& os, const char* bytes) {
  os.flush();
  std::streambuf* b = os.rdbuf();
  if (auto* p = dynamic_cast<PrintableBuf*>(b)) b = p->dest();
  b->sputn(bytes, static_cast<std::streamsize>(std::char_traits<char>::length(bytes)));
  b->pubsync();
}
}  // namespace

void Runner::show(const std::string& line, std::size_t done, std::size_t total, bool failed) {
  if (opts_.quiet) return;
  if (tty_) {
    // The line rewritten in place (cut to a terminal's width); a failure keeps a line of its own.
    std::string text = line;
    if (!failed && text.size() > 118) text = text.substr(0, 115) + "...";
    terminal_control(err_, "\r");
    err_ << text;
    terminal_control(err_, "\x1b[K");
    line_open_ = !failed && done < total;
    if (!line_open_) err_ << "\n";
    err_ << std::flush;
    return;
  }
  const std::size_t step = std::max<std::size_t>(1, (total + 19) / 20);
  if (done == 1 || done == total || done % step == 0 || failed) err_ << line << "\n" << std::flush;
}

void Runner::end_phase() {
  if (line_open_) err_ << "\n" << std::flush;
  line_open_ = false;
}

void Runner::progress(const PlannedRow& pr, const ResultRow& r) {
  ++done_;
  const std::string when = tick(done_, plan_.size(), r.device);
  if (opts_.quiet) return;
  std::ostringstream line;
  line << "[" << done_ << "/" << plan_.size() << "] " << pr.impl->name();
  for (const auto& [k, v] : *pr.options) line << " " << k << "=" << v;
  line << " " << r.case_label << " " << to_string(pr.pass) << " ... " << to_string(r.status);
  if (auto it = kept_.find(pr.name); it != kept_.end()) {
    line << (verdict_kept_on_resume(*it->second, opts_.profile) ? " [verified in " : " [kept from ")
         << opts_.resume_path << "]";
  }
  if (!r.reason.empty()) {
    std::string why = r.reason;
    if (why.size() > 160) why = why.substr(0, 157) + "...";
    line << " (" << why << ")";
  }
  line << when;
  show(line.str(), done_, plan_.size(), r.status == Status::fail);
}

// After a CUDA call threw: a sticky error disables every later CUDA row, and the file says so.
void Runner::note_cuda_error(const std::string& where, const std::string& consequence) {
  std::string why;
  if (!cuda_context_broken(why)) return;
  cuda_broken_ = why;
  results_.complete = false;
  results_.stop_reason = "sticky CUDA error " + where + ": " + why + consequence;
}

// The same-device naive baseline's outputs, once per (device, pass) of the case.
void Runner::naive_outputs(const PlannedRow& pr, CaseState& cs) {
  const Device dev = pr.impl->device();
  const auto key = std::make_pair(dev, pr.pass);
  if (cs.ref.mode == VerifyMode::off || cs.naive.count(key)) return;
  std::string note;
  cs.naive[key] = attnbench::naive_outputs(dev, *pr.problem, pr.pass, *cs.inputs, cs.ref, note);
  if (!note.empty()) cs.naive_note[key] = note;
}

ResultRow Runner::run_row(const PlannedRow& pr, CaseState& cs) {
  ResultRow r = blank_row(pr);
  const Problem& p = *pr.problem;
  const Device dev = pr.impl->device();
  const Reference& ref = cs.ref;
  naive_outputs(pr, cs);
  const auto key = std::make_pair(dev, pr.pass);

  r.verified = true;
  r.verify_mode = ref.mode;
  if (const Implementation* base = naive_baseline(dev)) r.baseline = base->name();
  try {
    Validated call = validation_call(*pr.impl, p, pr.pass, *pr.options, *cs.inputs, ref, pr.name,
                                     true, opts_.profile && dev == Device::cuda);
    r.memory = call.memory;
    const Outputs& outs = call.outputs;
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
        dump_row(opts_.dump_dir, p, *cs.inputs, ref, !cs.inputs_dumped, pr.impl->name(), *pr.options,
                 pr.pass, outs);
        cs.inputs_dumped = true;
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
    if (dev == Device::cuda) note_cuda_error("in " + pr.name, "; later CUDA rows skipped");
  }
  return r;
}

CaseNeeds Runner::case_needs(std::size_t first, std::size_t last) {
  const PlannedRow& head = plan_[first];
  const Problem& p = *head.problem;
  CaseNeeds n;
  n.reasons.assign(last - first, std::string());
  n.kept.assign(last - first, nullptr);
  bool need_fwd = false, need_bwd = false;
  for (std::size_t i = first; i < last; ++i) {
    if (auto it = kept_.find(plan_[i].name); it != kept_.end()) {
      n.kept[i - first] = it->second;  // no inputs or reference needed for it
      continue;
    }
    n.reasons[i - first] = skip_reason(plan_[i]);
    if (!n.reasons[i - first].empty()) continue;
    need_fwd = need_fwd || plan_[i].pass != Pass::bwd;
    need_bwd = need_bwd || plan_[i].pass != Pass::fwd;
  }
  // Before the inputs and the reference (minutes for a large case): the memory they need on the
  // host, and each row's buffers beside them. A row that cannot fit is a SKIP now.
  const VerifySettings& vs = head.group->verify;
  const std::int64_t ref_bytes = reference_host_bytes(p, vs.mode, need_fwd, need_bwd, vs.sample);
  if (need_fwd || need_bwd) {
    if (const std::int64_t host = memory_of(Device::cpu); host > 0 && ref_bytes > host) {
      n.case_error = "out of host memory: the case's inputs and float64 reference need " +
                     gib(ref_bytes) + ", more than the " + gib(host) +
                     " of host memory (checked before making them)";
    }
  }
  for (std::size_t i = first; i < last; ++i) {
    if (n.kept[i - first] || !n.reasons[i - first].empty() || !n.case_error.empty()) continue;
    n.reasons[i - first] = memory_reason(plan_[i], ref_bytes);
    if (!n.reasons[i - first].empty()) continue;
    n.any = true;
    n.need_fwd = n.need_fwd || plan_[i].pass != Pass::bwd;
    n.need_bwd = n.need_bwd || plan_[i].pass != Pass::fwd;
  }
  return n;
}

void Runner::run_case(std::size_t first, std::size_t last) {
  const PlannedRow& head = plan_[first];
  const Problem& p = *head.problem;
  const VerifySettings& vs = head.group->verify;
  CaseNeeds needs = case_needs(first, last);
  const std::vector<std::string>& reasons = needs.reasons;
  const std::vector<const ResultRow*>& kept = needs.kept;
  std::string& case_error = needs.case_error;
  const bool any = needs.any, need_fwd = needs.need_fwd, need_bwd = needs.need_bwd;
  CaseState cs;
  if (any) {
    try {
      nvtx::Range range("inputs+reference:" + p.label());
      cs.inputs = make_inputs(p, cfg_.seed, cfg_.distribution);
      ReferenceProgress told;
      if (!opts_.quiet)
        told.line = [this](const std::string& line) { err_ << line << "\n" << std::flush; };
      cs.ref =
          compute_reference(*cs.inputs, vs.mode, need_fwd, need_bwd, cfg_.seed, vs.sample, told);
    } catch (const std::bad_alloc&) {
      case_error = "out of host memory for the inputs or the reference";
    }
  }
  nvtx::Range case_range(p.label());
  for (std::size_t i = first; i < last; ++i) {
    if (interrupted()) return;
    const PlannedRow& pr = plan_[i];
    ResultRow r;
    if (const ResultRow* earlier = kept[i - first]) {
      r = blank_row(pr);  // the plan's identity (the call name matched), the file's measurements
      copy_measurements(*earlier, r);
      const bool retime = verdict_kept_on_resume(*earlier, opts_.profile);
      if (retime) {
        // Verified there, timed here: the earlier run's "not timed: ..." no longer applies.
        if (r.reason.starts_with(kNotTimed)) r.reason.clear();
        ++retimed_;
        timed_.push_back(results_.rows.size());
      } else {
        ++reused_;
      }
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
    if (r.status == Status::fail) failed_.push_back(results_.rows.size());
    results_.rows.push_back(std::move(r));
  }
}

void Runner::time_rows() {
  if (timed_.empty() && (failed_.empty() || !opts_.benchmark_flags.count("benchmark_out"))) return;
  if (interrupted() || opts_.profile) return;
  auto slot = std::make_shared<TimingSlot>();
  TimingBook book;
  const std::vector<TimedBenchmark> benchmarks = timed_benchmarks(slot, book);
  phase_t0_ = last_tick_ = Clock::now();
  if (!opts_.quiet)
    err_ << "timing " << count_of(static_cast<long long>(timed_.size()), "row")
         << " with Google Benchmark\n"
         << std::flush;
  const BenchmarkSettings bs = benchmark_settings();
  const bool any_cuda = std::any_of(timed_.begin(), timed_.end(), [&](std::size_t k) {
    return plan_[k].impl->device() == Device::cuda;
  });
  std::map<std::string, TimingOutcome> outcomes;
  {
    ProfilerCapture profiled(any_cuda && cuda_present_);  // profiler.hpp: the timing phase
    // Each row's time goes into the results file as soon as its benchmark is done, so a run
    // stopped during timing (a kill, the device's time limit) keeps every row timed so far.
    outcomes = run_benchmarks(benchmarks, bs, [&](const std::string& name, const TimingOutcome& o) {
      apply_timing(book, name, o);
      save(false);
    });
  }
  slot->buf.reset();
  // Normally a no-op (each row was applied when done); it covers a benchmark whose last report
  // did not look final to the reporter (e.g. repetitions changed by a --benchmark_* flag).
  for (const auto& [name, o] : outcomes) apply_timing(book, name, o);
}

// The slot's buffers for `row`, rebuilt (with the case's inputs, when the case changed) only when
// another row starts.
CaseBuffers& Runner::timing_buffers(TimingSlot& slot, std::size_t row) {
  if (slot.row == row && slot.buf) return *slot.buf;
  slot.buf.reset();
  slot.row = SIZE_MAX;
  const PlannedRow& pr = plan_[row];
  const Problem& p = *pr.problem;
  if (slot.inputs_case != pr.case_index) {
    slot.inputs.reset();
    slot.inputs = make_inputs(p, cfg_.seed, cfg_.distribution);
    slot.inputs_case = pr.case_index;
  }
  auto buf = std::make_unique<CaseBuffers>(*pr.impl, p, pr.pass, *pr.options);
  buf->upload_inputs(*slot.inputs);
  // The backward reads O and LSE: the implementation's own forward produces them (untimed).
  if (pr.pass == Pass::bwd) buf->produce_fwd_outputs();
  buf->synchronize();
  slot.buf = std::move(buf);
  slot.row = row;
  return *slot.buf;
}

// One benchmark per row to time, and the rows that failed verification (which go to Google
// Benchmark's outputs too, as errors), in row order.
std::vector<TimedBenchmark> Runner::timed_benchmarks(const std::shared_ptr<TimingSlot>& slot,
                                                     TimingBook& book) {
  std::vector<TimedBenchmark> benchmarks;
  std::vector<std::size_t> rows = timed_;
  for (std::size_t k : failed_) rows.push_back(k);
  std::sort(rows.begin(), rows.end());
  for (std::size_t k : rows) {
    const PlannedRow& pr = plan_[k];
    const TimingSettings& ts = pr.group->timing;
    if (results_.rows[k].status == Status::fail) {
      benchmarks.push_back({pr.name, ts, {}, "verification failed: " + results_.rows[k].reason});
      continue;
    }
    const Device dev = pr.impl->device();
    book.by_name[pr.name] = k;
    book.started[pr.name] = std::make_shared<CpuTicks>();
    const CallCounters counters{results_.rows[k].flops,
                                results_.rows[k].memory ? results_.rows[k].memory->io_bytes : 0};
    const double slowdown =
        slowdown_ && dev == Device::cpu ? slowdown_->factor(pr.impl->name()) : 1.0;
    benchmarks.push_back(
        {pr.name, ts, timed_body(slot, k, ts, counters, slowdown, book.started[pr.name]), ""});
  }
  return benchmarks;
}

// The function Google Benchmark calls for row k: warm up once, then time the calls.
std::function<void(benchmark::State&)> Runner::timed_body(const std::shared_ptr<TimingSlot>& slot,
                                                          std::size_t k, const TimingSettings& ts,
                                                          const CallCounters& counters,
                                                          double slowdown,
                                                          std::shared_ptr<CpuTicks> ticks) {
  const Device dev = plan_[k].impl->device();
  auto warmed = std::make_shared<bool>(false);
  return [this, slot, k, dev, ts, warmed, counters, slowdown,
          ticks = std::move(ticks)](benchmark::State& st) {
    // An interrupt skips the rows not started yet. A row already started finishes its
    // repetitions (seconds at most): Google Benchmark's statistics need every repetition to
    // have the same iteration count (its debug builds abort otherwise, losing the run).
    if (interrupted() && !*warmed) {
      st.SkipWithError(kInterrupted);
      return;
    }
    if (dev == Device::cuda && !cuda_broken_.empty()) {
      st.SkipWithError(kCudaUnusable);
      return;
    }
    const PlannedRow& row = plan_[k];
    try {
      CaseBuffers& buf = timing_buffers(*slot, k);
      if (!*warmed) {
        *ticks = cpu_ticks();
        CallTimer::warm_up(buf, row.pass, ts.warmup_s);
        *warmed = true;
      }
      slot->timer.time(st, buf, dev, row.pass, ts.hot, ts.flush, row.name, counters, slowdown);
      buf.synchronize();
    } catch (const std::exception& e) {
      slot->buf.reset();
      slot->row = SIZE_MAX;
      if (dev == Device::cuda) note_cuda_error("while timing " + row.name, "");
      st.SkipWithError(e.what());
    }
  };
}

// A benchmark's outcome into its row, and the row's progress line (once).
void Runner::apply_timing(TimingBook& book, const std::string& name, const TimingOutcome& o) {
  auto it = book.by_name.find(name);
  if (it == book.by_name.end()) return;
  ResultRow& r = results_.rows[it->second];
  if (!o.error.empty()) {
    // Not timed because of something else (an interrupt, or another implementation's sticky
    // CUDA error): the row keeps its verdict and says why it has no time.
    if (o.error == kInterrupted || o.error == kCudaUnusable) {
      r.reason = std::string(kNotTimed) + o.error;
    } else {
      r.status = Status::fail;
      r.reason = "timed call failed: " + o.error;
    }
  } else {
    r.time = o.time;
    // Measured when the row is first reported done (the final pass re-applies outcomes).
    if (!book.ended.count(name)) book.ended[name] = others_cores(*book.started[name], cpu_ticks());
    if (r.time) r.time->others_cores = book.ended[name];
  }
  if (!book.reported.insert(name).second) return;  // the progress line once per row
  const std::string when = tick(book.reported.size(), timed_.size(), r.device);
  if (opts_.quiet) return;
  std::ostringstream line;
  line << "[timing " << book.reported.size() << "/" << timed_.size() << "] " << name << ": ";
  if (r.time) {
    line << "median " << std::setprecision(4) << r.time->median_ms << " ms";
    if (r.time->repetitions > 1) line << ", cv " << std::setprecision(2) << r.time->cv * 100 << "%";
  } else {
    line << r.reason;
  }
  line << when;
  show(line.str(), book.reported.size(), timed_.size(), r.status == Status::fail);
}

// Google Benchmark's settings: the --benchmark_* flags, the streams, and the run's context.
BenchmarkSettings Runner::benchmark_settings() const {
  BenchmarkSettings bs;
  bs.flags = opts_.benchmark_flags;
  bs.quiet = opts_.quiet;
  bs.progress = &err_;
  bs.stdout_report = &out_;
  const auto& ctx = results_.context;
  for (const char* key :
       {"git_revision", "git_dirty", "config_name", "config_hash", "host", "cpu"}) {
    if (const auto it = ctx.find(key); it != ctx.end())
      bs.context.emplace_back(std::string("attnbench_") + key,
                              it->is_string() ? it->get<std::string>() : it->dump());
  }
  bs.context.emplace_back("attnbench_device", device_name(ctx));
  if (slowdown_) bs.context.emplace_back("attnbench_test_slowdown", slowdown_->spec);
  return bs;
}

void Runner::save(bool final_write) {
  if (opts_.out_path.empty()) return;
  SavingScope saving;  // a second signal now waits for the file to be whole
  if (!final_write) {
    // Written after every case, so a crash or a kill leaves the rows measured so far. What the
    // file says meanwhile must stay true once the process is gone: one killed by SIGKILL (or a
    // crash) never gets to change it.
    const bool complete = results_.complete;
    const std::string reason = results_.stop_reason;
    results_.complete = false;
    if (results_.stop_reason.empty()) results_.stop_reason = unfinished_;
    write_results(opts_.out_path, results_);
    // What a second signal writes (interrupt.hpp): this file, with its own stop reason.
    results_.stop_reason = reason.empty() ? std::string(kStopMarker) : reason + "; " + kStopMarker;
    const std::string text = results_to_json(results_).dump(
                                 2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                             "\n";
    const std::string quoted = std::string("\"") + kStopMarker + "\"";
    if (const auto at = text.find(quoted); at != std::string::npos) {
      set_stop_file(resolved_output_path(opts_.out_path), lock_path_of(opts_.out_path),
                    text.substr(0, at + 1), text.substr(at + quoted.size() - 1));
    }
    results_.complete = complete;
    results_.stop_reason = reason;
    return;
  }
  write_results(opts_.out_path, results_);
  clear_stop_file();  // the file is final: a second signal now only ends the process
}

int Runner::run() {
  // Installed first: a SIGINT, SIGTERM or SIGHUP from here on ends with a results file and exit
  // code 128 + the signal.
  InterruptGuard guard;
  build_plan();
  cuda_present_ = device_present(Device::cuda);
  PeakProbe::configure_process();
  open_context();
  const std::unique_ptr<OutputLock> lock = claim_outputs();
  auto& ctx = results_.context;
  unfinished_ =
      "unfinished: written while the run was going (pid " + std::to_string(::getpid()) + " on " +
      ctx.value("host", std::string("?")) + ", started " + ctx.value("date", std::string("?")) +
      "); if that process is gone, it was killed before it could say why (SIGKILL, a crash)";
  // Fails here (before any work) when the results file cannot be written.
  save(false);

  const bool any_cuda_row = std::any_of(plan_.begin(), plan_.end(), [](const PlannedRow& r) {
    return r.impl->device() == Device::cuda;
  });
  if (any_cuda_row && !opts_.profile && cuda_present_) {
    ctx["ceilings"] = measure_ceilings();
  }

  const auto t0 = std::chrono::steady_clock::now();
  phase_t0_ = last_tick_ = t0;
  for (std::size_t first = 0; first < plan_.size() && !interrupted();) {
    std::size_t last = first;
    while (last < plan_.size() && plan_[last].case_index == plan_[first].case_index) ++last;
    run_case(first, last);
    save(false);
    first = last;
  }
  end_phase();
  time_rows();
  end_phase();
  return finish(t0);
}

// The results file's context, and --resume's rows to keep (after the checks that the earlier
// file may be resumed).
void Runner::open_context() {
  auto& ctx = results_.context;
  ctx = run_context(cfg_, opts_);
  ctx["rows_planned"] = plan_.size();
  ctx["benchmark_library"] = benchmark_library();
  slowdown_ = test_slowdown_from_env();
  if (slowdown_) ctx["test_slowdown"] = slowdown_->spec;
  if (!opts_.resume_path.empty()) {
    const std::string why = resume_refusal(opts_.resume, opts_.resume_path, cfg_.hash(),
                                           opts_.profile, ctx.value("git_revision", ""));
    if (!why.empty()) throw std::runtime_error(why);
    for (const ResultRow& row : opts_.resume.rows) {
      if (row.nvtx.empty()) continue;
      if (kept_on_resume(row, opts_.profile) || verdict_kept_on_resume(row, opts_.profile))
        kept_[row.nvtx] = &row;
    }
    ctx["resumed_from"] = opts_.resume_path;
  }
}

// Before anything is written: an output that would destroy something, or that another run is
// writing, and a --dump folder that cannot be made, are refused. The lock of --out, held while
// the run lasts (null without --out).
std::unique_ptr<OutputLock> Runner::claim_outputs() {
  std::unique_ptr<OutputLock> lock;
  if (!opts_.out_path.empty()) {
    std::vector<std::string> files{opts_.config_path}, names{"the config file"};
    for (const auto& [f, what] : opts_.other_files) {
      files.push_back(f);
      names.push_back(what);
    }
    if (const std::string why = output_refusal(opts_.out_path, files, names); !why.empty()) {
      throw std::runtime_error("--out = " + opts_.out_path + ": " + why);
    }
  }
  if (!opts_.out_path.empty()) {
    try {
      lock = std::make_unique<OutputLock>(opts_.out_path, opts_.command_line);
    } catch (const OutputBusy& e) {
      throw OutputBusy("--out = " + opts_.out_path + ": " + e.what());
    }
  }
  if (!opts_.dump_dir.empty()) prepare_dump_dir(opts_.dump_dir);
  return lock;
}

// The final file and table, and the exit code (t0: when the first case began).
int Runner::finish(std::chrono::steady_clock::time_point t0) {
  auto& ctx = results_.context;
  if (!opts_.resume_path.empty()) {
    ctx["rows_kept_from_resume"] = reused_;
    ctx["rows_timed_from_resume"] = retimed_;
  }
  ctx["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ctx["device_wall_s"] = device_s_;  // verification and timing of each device's rows
  if (interrupted()) {
    results_.complete = false;
    results_.stop_reason = "interrupted (" + signal_name(interrupt_signal()) +
                           "): the row in progress finished, the rows after it did not run";
  }
  ctx["load_average_end"] = load_average();
  save(true);
  // stdout is Google Benchmark's when --benchmark_format asked for its report there.
  std::ostream& table = opts_.benchmark_flags.count("benchmark_format") ? err_ : out_;
  print_run_table(results_, table);
  if (!opts_.out_path.empty()) table << "results: " << printable(opts_.out_path) << "\n";
  if (interrupted()) {
    err_ << "interrupted by " << signal_name(interrupt_signal())
         << ": results written with complete=false\n";
    return 128 + interrupt_signal();
  }
  const bool any_fail = std::any_of(results_.rows.begin(), results_.rows.end(),
                                    [](const ResultRow& r) { return r.status == Status::fail; });
  return any_fail ? 1 : 0;
}

}  // namespace

nlohmann::ordered_json run_context(const Config& cfg, const RunOptions& opts) {
  nlohmann::ordered_json ctx = collect_context();
  ctx["config_path"] = opts.config_path;
  ctx["config_name"] = cfg.name;
  ctx["config_hash"] = cfg.hash();
  ctx["config"] = cfg.json;
  ctx["seed"] = cfg.seed;
  ctx["distribution"] = cfg.distribution == Distribution::normal ? "normal" : "outlier";
  ctx["command_line"] = opts.command_line;
  // The binary itself, so that `compare` can print the exact --rerun command for this file.
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) ctx["executable"] = exe.string();
  ctx["profile"] = opts.profile;
  ctx["multi_gpu"] = opts.worker_note.empty() ? "CUDA rows run on device 0 only" : opts.worker_note;
  return ctx;
}

int run_config(const Config& config, const RunOptions& opts, std::ostream& out, std::ostream& err) {
  Runner r(config, opts, out, err);
  return r.run();
}

}  // namespace attnbench
