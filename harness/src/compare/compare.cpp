// `attnbench compare`: matches the rows of two results files and flags regressions. The rules
// (the test over many rows, the spread rule for rows without samples, status, error growth,
// missing rows, the rerun) are defined in compare.hpp; the statistics are stats.hpp's.
#include "attnbench/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>

#include "attnbench/render.hpp"
#include "attnbench/rerun.hpp"

namespace attnbench {

using json = nlohmann::ordered_json;

namespace {

std::string fmt_ms(double v) {
  char b[64];
  std::snprintf(b, sizeof b, v >= 100 ? "%.1f" : v >= 1 ? "%.3f" : "%.4g", v);
  return b;
}
std::string fmt_x(double v) {
  if (!std::isfinite(v)) return v > 0 ? "inf" : "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}
std::string fmt_p(double p) {
  if (!std::isfinite(p)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, p < 1e-3 ? "%.0e" : "%.3f", p);
  return b;
}
std::string fmt_cv(double cv) {
  if (!std::isfinite(cv)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.1f", cv * 100);
  return b;
}
json num(double x) {
  if (!std::isfinite(x)) return nullptr;
  return x;
}

// The spread of a row's time: see compare.hpp.
double spread(const TimeStats& t) {
  return std::max(t.cv * t.median_ms, t.median_ms - t.min_ms);
}

std::string ctx_text(const json& ctx, const char* key) {
  const auto it = ctx.find(key);
  if (it == ctx.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}
std::string device_field(const json& ctx, const char* key) {
  const auto devs = ctx.find("devices");
  if (devs == ctx.end() || !devs->is_array()) return "";
  std::string s;
  for (const json& d : *devs) {
    if (!d.is_object()) continue;
    const auto it = d.find(key);
    const std::string v = it == d.end()     ? ""
                          : it->is_string() ? it->get<std::string>()
                                            : it->dump();
    s += (s.empty() ? "" : ", ") + v;
  }
  return s;
}
// The 1-minute load averages a run recorded (at its start and, newer files, its end).
std::vector<double> loads(const json& ctx) {
  std::vector<double> v;
  for (const char* k : {"load_average", "load_average_end"}) {
    const auto it = ctx.find(k);
    if (it != ctx.end() && it->is_array() && !it->empty() && (*it)[0].is_number())
      v.push_back((*it)[0].get<double>());
  }
  return v;
}
std::string load_text(const std::vector<double>& l) {
  char b[64];
  if (l.size() >= 2)
    std::snprintf(b, sizeof b, "%.2f at the start, %.2f at the end", l[0], l[1]);
  else
    std::snprintf(b, sizeof b, "%.2f at the start", l[0]);
  return b;
}

std::vector<std::string> context_warnings(const ResultsFile& a, const ResultsFile& b) {
  std::vector<std::string> w;
  auto differ = [&](const std::string& what, const std::string& x, const std::string& y) {
    if (x != y) w.push_back(what + " differs: BASE \"" + x + "\" vs NEW \"" + y + "\"");
  };
  differ("host", ctx_text(a.context, "host"), ctx_text(b.context, "host"));
  differ("device", device_field(a.context, "name"), device_field(b.context, "name"));
  differ("SM clock (MHz)", device_field(a.context, "sm_clock_mhz"),
         device_field(b.context, "sm_clock_mhz"));
  differ("memory clock (MHz)", device_field(a.context, "mem_clock_mhz"),
         device_field(b.context, "mem_clock_mhz"));
  differ("CPU", ctx_text(a.context, "cpu"), ctx_text(b.context, "cpu"));
  differ("OpenMP threads", ctx_text(a.context, "omp_threads"), ctx_text(b.context, "omp_threads"));
  differ("build type", ctx_text(a.context, "build_type"), ctx_text(b.context, "build_type"));
  differ("compiler", ctx_text(a.context, "compiler"), ctx_text(b.context, "compiler"));
  differ("CUDA driver", ctx_text(a.context, "cuda_driver"), ctx_text(b.context, "cuda_driver"));
  differ("CUDA runtime", ctx_text(a.context, "cuda_runtime"), ctx_text(b.context, "cuda_runtime"));
  auto gb_build = [](const json& ctx) {
    const auto it = ctx.find("benchmark_library");
    return it != ctx.end() && it->is_object() ? it->value("build_type", std::string())
                                              : std::string();
  };
  if (!gb_build(a.context).empty() && !gb_build(b.context).empty())
    differ("Google Benchmark library build", gb_build(a.context), gb_build(b.context));
  differ("test slowdown (ATTNBENCH_TEST_SLOWDOWN)", ctx_text(a.context, "test_slowdown"),
         ctx_text(b.context, "test_slowdown"));

  // Load: CPU rows share the cores with every other process.
  const std::vector<double> la = loads(a.context), lb = loads(b.context);
  const double cores_a = a.context.value("cpu_cores", 0.0),
               cores_b = b.context.value("cpu_cores", 0.0);
  const double cores = std::max({cores_a, cores_b, 1.0});
  if (!la.empty() && !lb.empty()) {
    const double ma = *std::max_element(la.begin(), la.end()),
                 mb = *std::max_element(lb.begin(), lb.end());
    if (std::fabs(ma - mb) >= std::max(1.0, cores / 2)) {
      w.push_back("load average differs: BASE " + load_text(la) + ", NEW " + load_text(lb) + " (" +
                  fmt_ms(cores) + " cores): CPU rows measure the machine's load too");
    }
  }
  for (const auto* f : {&a, &b}) {
    const char* which = f == &a ? "BASE" : "NEW";
    const std::vector<double>& l = f == &a ? la : lb;
    // Busy for the whole run: the load average above the cores at its start and at its end (the
    // 1-minute average at the start alone is still high a minute after a build).
    if (!l.empty() && *std::min_element(l.begin(), l.end()) > cores) {
      w.push_back(std::string(which) + " ran on a busy machine: load average " + load_text(l) +
                  ", " + fmt_ms(cores) + " cores");
    }
    if (ctx_text(f->context, "git_dirty") == "true") {
      w.push_back(std::string(which) + " was built from a dirty tree (git " +
                  ctx_text(f->context, "git_revision").substr(0, 12) +
                  "): its code is not a commit");
    }
    if (!f->complete) {
      w.push_back(std::string(which) + " is an incomplete run" +
                  (f->stop_reason.empty() ? "" : " (" + f->stop_reason + ")"));
    }
  }
  return w;
}

// slower: the row's own repetitions say slower (the test) and new/base is above the threshold;
// suspect: so, but within the noise between the runs (compare.hpp); slower_in_noise: above the
// threshold, not significant.
enum class TimeVerdict { untimed, same, slower, slower_in_noise, faster, suspect };
constexpr const char* kTimeNames[] = {"untimed", "same",   "slower",
                                      "slower_in_noise", "faster", "suspect"};

// The noise between the two runs, from all their timed rows (stats.hpp between_runs), and what
// it decides: a row is slower (or faster) beyond it when its log(new/base) is more than `bound`
// from the file's shift; the whole file is shifted when the shift is beyond the threshold and the
// rows agree (the sign test).
struct Between {
  BetweenRuns est;
  bool estimated = false;   // enough rows (kMinRows) to estimate it
  double sigma = 0;         // est.sigma, at least kSigmaFloor
  double z = 0, bound = 0;  // bound = z * MAD / kT3Mad, z: t3 at alpha / rows (Bonferroni)
  double p_shift = 1;       // sign test of the rows slower, in the direction of the shift
  int shifted = 0;          // +1 the whole file slower, -1 faster, 0 neither
  bool superseded = false;  // every timed row was measured again by the rerun
  static constexpr std::size_t kMinRows = 8;
  static constexpr double kSigmaFloor = 0.005;  // half a percent: no two runs agree better
};

// One matched row and everything decided about it.
struct Judged {
  const ResultRow* b = nullptr;
  const ResultRow* n = nullptr;
  bool timed = false;
  double ratio = NAN;  // new median / base median
  bool test = false;   // decided by the U test (else the spread rule)
  double p_slower = 1, p_faster = 1, p_adjusted = NAN;  // adjusted: in the direction of ratio
  TimeVerdict time = TimeVerdict::untimed;
  double growth = NAN;
  std::string worst_output;
  std::vector<std::string> regress;  // status and error reasons (the time reason is added last)
  bool fixed = false;
  // --rerun
  bool rerun = false;
  TimeVerdict first_time = TimeVerdict::untimed;  // before the rerun
  double first_ratio = NAN;                       // before the rerun
  std::vector<double> rerun_ratios;  // NEW / BASE of each round with a time on both sides
  std::string rerun_note;
};

// Which rows a test can decide: those whose smallest possible p-value (min_p: the test's, for
// the row's samples) could still be significant after the correction over the rows so chosen:
// alpha / N for Holm and Benjamini-Hochberg (the strictest step of both, which the first rejection
// must pass), alpha without a correction. N shrinks as rows drop out, so the choice is repeated
// until it holds for every row kept. The others go to the spread rule.
std::vector<bool> testable(const std::vector<double>& min_p, const CompareOptions& o) {
  std::vector<bool> keep(min_p.size(), true);
  std::size_t n = min_p.size();
  for (bool changed = true; changed && n > 0;) {
    changed = false;
    const double limit =
        o.correction == Correction::none ? o.alpha : o.alpha / static_cast<double>(n);
    for (std::size_t i = 0; i < min_p.size(); ++i) {
      if (keep[i] && !(min_p[i] <= limit)) {
        keep[i] = false;
        changed = true;
      }
    }
    n = static_cast<std::size_t>(std::count(keep.begin(), keep.end(), true));
  }
  return keep;
}

// Mann-Whitney's smallest p-value for these sample counts; above any level (2) with fewer than 2
// samples on a side.
double u_min_p(std::size_t nb, std::size_t nn) {
  return nb >= 2 && nn >= 2 ? mann_whitney_min_p(nb, nn) : 2;
}

// The verdicts of a family of rows (chosen by testable) from their one-sided p-values, slower
// (ps) and faster (pf), with the correction over the family.
void decide_family(std::vector<Judged*>& rows, const std::vector<double>& ps,
                   const std::vector<double>& pf, const CompareOptions& o) {
  const std::vector<double> as = adjust_p(ps, o.correction), af = adjust_p(pf, o.correction);
  for (std::size_t k = 0; k < rows.size(); ++k) {
    Judged& j = *rows[k];
    j.test = true;
    j.p_slower = ps[k];
    j.p_faster = pf[k];
    const bool slower = j.ratio > 1 + o.threshold && as[k] <= o.alpha;
    const bool faster = j.ratio * (1 + o.threshold) < 1 && af[k] <= o.alpha;
    j.p_adjusted = j.ratio >= 1 ? as[k] : af[k];
    j.time = slower                      ? TimeVerdict::slower
             : faster                    ? TimeVerdict::faster
             : j.ratio > 1 + o.threshold ? TimeVerdict::slower_in_noise
                                         : TimeVerdict::same;
  }
}

// The U tests of a family of rows, each on (base samples, new samples).
void test_family(std::vector<Judged*>& rows, const std::vector<std::vector<double>>& bs,
                 const std::vector<std::vector<double>>& ns, const CompareOptions& o) {
  std::vector<double> ps, pf;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ps.push_back(mann_whitney_greater(bs[i], ns[i]));
    pf.push_back(mann_whitney_greater(ns[i], bs[i]));
  }
  decide_family(rows, ps, pf, o);
}

// The spread rule (compare.hpp) for rows without usable samples.
TimeVerdict spread_rule(const TimeStats& b, const TimeStats& n, double threshold) {
  const double bm = b.median_ms, nm = n.median_ms;
  const double noise = spread(b) + spread(n);
  if (nm > bm * (1 + threshold))
    return nm - bm > noise ? TimeVerdict::slower : TimeVerdict::slower_in_noise;
  if (bm > nm * (1 + threshold) && bm - nm > noise) return TimeVerdict::faster;
  return TimeVerdict::same;
}

// The noise between the runs from every timed row (Between), and the rows' verdicts it changes:
// slower within it becomes suspect, faster within it the same. Fewer than Between::kMinRows
// timed rows: not estimated, and the rows keep the verdicts of their own repetitions.
Between judge_between(std::vector<Judged>& judged, const CompareOptions& o) {
  std::vector<double> xs;
  for (const Judged& j : judged)
    if (j.timed && j.ratio > 0 && std::isfinite(j.ratio)) xs.push_back(std::log(j.ratio));
  Between b;
  b.est = between_runs(xs);
  b.estimated = xs.size() >= Between::kMinRows;
  if (!b.estimated) return b;
  b.sigma = std::max(b.est.sigma, Between::kSigmaFloor);
  // Bonferroni over the rows, and heavy tails: the noise between runs is modelled as Student's t
  // with 3 degrees of freedom scaled to the rows' MAD. A normal model (z 3.04, 4.5 MADs over 42
  // rows) flagged rows of identical builds in 3 of 10 pairs of configs/default.json's CPU rows on
  // the 2-core machine, up to 7.9 MADs above the median (docs/gate_figures.md); t3 puts the
  // bound at 12.6 MADs there.
  const double level =
      o.correction == Correction::none ? o.alpha : o.alpha / static_cast<double>(xs.size());
  b.z = t3_upper_quantile(level);
  b.bound = b.z * b.sigma / (1.482602218505602 * kT3Mad);  // sigma / 1.4826 = the rows' MAD
  for (Judged& j : judged) {
    if (!j.timed || !(j.ratio > 0) || !std::isfinite(j.ratio)) continue;
    const double excess = std::log(j.ratio) - b.est.shift;
    if (j.time == TimeVerdict::slower && !(excess > b.bound)) j.time = TimeVerdict::suspect;
    if (j.time == TimeVerdict::faster && !(-excess > b.bound)) j.time = TimeVerdict::same;
  }
  const double t = std::log1p(o.threshold);
  const int n = static_cast<int>(xs.size());
  const int below = static_cast<int>(std::count_if(xs.begin(), xs.end(), [](double x) { return x < 0; }));
  if (b.est.shift > t) {
    b.p_shift = sign_test_greater(b.est.above, n);
    if (b.p_shift <= o.alpha) b.shifted = 1;
  } else if (b.est.shift < -t) {
    b.p_shift = sign_test_greater(below, n);
    if (b.p_shift <= o.alpha) b.shifted = -1;
  }
  return b;
}

void judge_errors(Judged& j, const CompareOptions& o) {
  const ResultRow& b = *j.b;
  const ResultRow& n = *j.n;
  if (b.status == Status::pass && n.status != Status::pass)
    j.regress.push_back(std::string("pass->") + to_string(n.status));
  j.fixed = b.status != Status::pass && n.status == Status::pass;
  for (const auto& ne : n.outputs) {
    const auto it = std::find_if(b.outputs.begin(), b.outputs.end(),
                                 [&](const OutputReport& e) { return e.name == ne.name; });
    if (it == b.outputs.end() || !std::isfinite(it->max_abs)) continue;
    const double floor = std::isfinite(it->atol) ? it->atol / 4 : 0;
    const double denom = std::max(it->max_abs, floor);
    // NaN error in NEW (written as null) where BASE was finite counts as unbounded growth.
    const double g = !std::isfinite(ne.max_abs) ? INFINITY
                     : denom > 0                ? ne.max_abs / denom
                     : ne.max_abs > 0           ? INFINITY
                                                : 1.0;
    if (!(g <= j.growth)) {
      j.growth = g;
      j.worst_output = ne.name;
    }
  }
  if (std::isfinite(j.growth) ? j.growth > o.error_factor : !std::isnan(j.growth)) {
    j.regress.push_back(j.worst_output + " error x" + fmt_x(j.growth));
  }
}

std::string row_name(const ResultRow& r) {
  return r.case_label + " " + r.impl_label() + " " + std::string(to_string(r.pass)) +
         (r.device.empty() ? "" : " (" + r.device + ")");
}

std::vector<double> samples_of(const ResultRow& r) {
  return r.time ? r.time->samples_ms : std::vector<double>{};
}

}  // namespace

bool rerun_two_stages(const CompareOptions& o) {
  return o.rerun_more_rounds != 0;
}

int rerun_rounds_for(std::size_t rows, const CompareOptions& o) {
  if (o.rerun_rounds > 0) return o.rerun_rounds;
  // With the second stage each stage tests at alpha / 2 (Bonferroni over the two looks).
  const double alpha = rerun_two_stages(o) ? o.alpha / 2 : o.alpha;
  const double level = o.correction == Correction::none
                           ? alpha
                           : alpha / static_cast<double>(std::max<std::size_t>(rows, 1));
  // 2^-R <= level, and 2 rounds more, so that a round or two against the trend (a burst of
  // another process) can still leave the row significant.
  return std::max(6, static_cast<int>(std::ceil(std::log2(1 / level))) + 2);
}

namespace {

// --rerun: the rows chosen (--rerun-rows) measured again, round by round. A round times every row
// chosen once a side: one invocation of BASE's binary and one of NEW's for each implementation's
// rows, BASE NEW in even rounds and NEW BASE in odd ones (so that a drift of the machine's load
// falls on both sides alike). Each implementation runs in invocations of its own, and the
// implementations' order is shuffled every round (a fixed seed), so that what one implementation
// leaves behind (its threads, caches, heap or clocks; a regression's side effects) never falls
// on another's rows in the same way every round: it becomes noise between rounds instead of a
// shift. Each invocation's median of a row is one sample; the two of a round are a pair, and the
// row is decided by the signed-rank test on log(NEW / BASE) over the rounds, its ratio the median
// of the rounds' ratios. Without --rerun-base, NEW's invocations are paired with BASE's recorded
// median.
// The rerun's measurements: per row, the median of each round on each side (bm BASE's, or its
// recorded median without --rerun-base; nm NEW's), and NEW's latest rerun row.
struct RerunRounds {
  std::vector<std::vector<double>> bm, nm;
  std::vector<std::optional<ResultRow>> last;
};

RerunRounds measure_rounds(const std::vector<Judged*>& rows, Rerunner& new_runner,
                           std::optional<Rerunner>& base_runner, const CompareOptions& o,
                           int rounds, const std::string& label, std::ostream& log) {
  const bool both = base_runner.has_value();
  // The rows by implementation (as NEW's file names it), in the order of first appearance.
  std::vector<std::string> impls;
  std::vector<std::vector<const ResultRow*>> brows, nrows;
  for (const Judged* j : rows) {
    const std::string& impl = j->n->impl_in_file.empty() ? j->n->impl : j->n->impl_in_file;
    auto it = std::find(impls.begin(), impls.end(), impl);
    const std::size_t g = static_cast<std::size_t>(it - impls.begin());
    if (it == impls.end()) {
      impls.push_back(impl);
      brows.emplace_back();
      nrows.emplace_back();
    }
    brows[g].push_back(j->b);
    nrows[g].push_back(j->n);
  }
  auto time_of = [](const std::map<std::string, ResultRow>& got, const ResultRow& r) {
    const auto it = got.find(r.key());
    return it != got.end() && it->second.status == Status::pass && it->second.time
               ? it->second.time->median_ms
               : NAN;
  };
  RerunRounds m;
  m.bm.resize(rows.size());  // per round
  m.nm.resize(rows.size());
  m.last.resize(rows.size());  // NEW's latest rerun row
  std::vector<std::size_t> order(impls.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937 rng(20261202u);  // a fixed seed: the same orders every time
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    log << label << " " << round + 1 << "/" << rounds << ": "
        << count_of(static_cast<long long>(rows.size()), "row") << ", "
        << (both ? (round % 2 == 0 ? "BASE then NEW" : "NEW then BASE") : "NEW");
    if (impls.size() > 1) {
      log << " for each of " << impls.size() << " implementations (";
      for (std::size_t k = 0; k < order.size(); ++k) log << (k ? " " : "") << impls[order[k]];
      log << ")";
    }
    log << std::endl;
    std::map<std::string, ResultRow> gb, gn;
    for (const std::size_t g : order) {
      for (int k = 0; k < 2; ++k) {
        const bool is_base = (k == 0) == (round % 2 == 0);
        if (is_base && !both) continue;
        auto got = is_base ? base_runner->measure(brows[g], o.rerun_repetitions)
                           : new_runner.measure(nrows[g], o.rerun_repetitions);
        (is_base ? gb : gn).merge(got);
      }
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto it = gn.find(rows[i]->n->key());
      m.last[i] = it != gn.end() ? std::optional<ResultRow>(it->second) : std::nullopt;
      m.nm[i].push_back(time_of(gn, *rows[i]->n));
      m.bm[i].push_back(both ? time_of(gb, *rows[i]->b) : rows[i]->b->time->median_ms);
    }
  }
  return m;
}

// A warning when a rerun binary recorded another git revision than the file it measures again.
void warn_other_build(const Rerunner& new_runner, const std::optional<Rerunner>& base_runner,
                      const ResultsFile& base, const ResultsFile& next,
                      std::vector<std::string>& warnings) {
  std::string revision_note;
  auto check_revision = [&](const Rerunner& r, const ResultsFile& origin, const char* which) {
    const std::string rev = ctx_text(origin.context, "git_revision");
    if (r.runs() > 0 && r.revision() != rev) {
      revision_note += std::string(revision_note.empty() ? "" : "; ") + which +
                       "'s rerun binary is git " + r.revision().substr(0, 12) + ", its file's " +
                       rev.substr(0, 12);
    }
  };
  if (base_runner) check_revision(*base_runner, base, "BASE");
  check_revision(new_runner, next, "NEW");
  if (!revision_note.empty()) {
    warnings.push_back("the rerun ran another build than the file it measures again (" +
                       revision_note + ")");
  }
}

// The rows measured again decided on their rounds: the signed-rank test over the rows whose
// rounds can reach the level, the spread rule on the rounds' medians for the others.
void decide_rerun(std::vector<Judged*>& rows, const RerunRounds& m, const CompareOptions& o,
                  int rounds, std::vector<std::string>& warnings) {
  std::vector<Judged*> measured;
  std::vector<std::vector<double>> ds;      // log(NEW / BASE) per paired round
  std::vector<std::vector<double>> vb, vn;  // the paired rounds' medians
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Judged* j = rows[i];
    if (!j->rerun) j->first_ratio = j->ratio;  // the files' ratio, kept through both stages
    j->rerun = true;
    j->rerun_ratios.clear();
    j->rerun_note.clear();
    const std::optional<ResultRow>& l = m.last[i];
    if (!l || l->status != Status::pass || !l->time) {
      // Not measured again: its first verdict stands, with the reason.
      j->rerun_note = !l ? "not in the rerun"
                         : "rerun " + std::string(to_string(l->status)) +
                               (l->reason.empty() ? "" : ": " + l->reason);
      if (l && l->status != Status::pass)
        j->regress.push_back("rerun pass->" + std::string(to_string(l->status)));
      continue;
    }
    std::vector<double> d, b, n;
    for (int r = 0; r < rounds; ++r) {
      const double x = m.bm[i][r], y = m.nm[i][r];
      if (!(x > 0) || !(y > 0)) continue;
      d.push_back(std::log(y / x));
      b.push_back(x);
      n.push_back(y);
      j->rerun_ratios.push_back(y / x);
    }
    if (d.empty()) {
      j->rerun_note = "no round timed both sides";
      continue;
    }
    j->ratio = median(j->rerun_ratios);
    measured.push_back(j);
    ds.push_back(std::move(d));
    vb.push_back(std::move(b));
    vn.push_back(std::move(n));
  }
  std::vector<double> min_p;
  for (const auto& d : ds) min_p.push_back(d.size() >= 2 ? signed_rank_min_p(d.size()) : 2);
  const std::vector<bool> keep = testable(min_p, o);
  std::vector<Judged*> family;
  std::vector<double> ps, pf;
  int untestable = 0;
  for (std::size_t k = 0; k < measured.size(); ++k) {
    Judged* j = measured[k];
    if (keep[k]) {
      family.push_back(j);
      ps.push_back(signed_rank_greater(ds[k]));
      std::vector<double> neg(ds[k]);
      for (double& x : neg) x = -x;
      pf.push_back(signed_rank_greater(neg));
    } else {
      ++untestable;
      j->test = false;
      j->time = spread_rule(summarize_samples(vb[k]), summarize_samples(vn[k]), o.threshold);
    }
  }
  decide_family(family, ps, pf, o);
  if (untestable > 0) {
    CompareOptions auto_rounds = o;
    auto_rounds.rerun_rounds = 0;
    warnings.push_back(
        count_of(untestable, "rerun row") + " had too few rounds for the signed-rank test (" +
        count_of(rounds, "round") + " give p >= " + fmt_p(signed_rank_min_p(rounds)) +
        ", above the level the correction needs over " +
        count_of(static_cast<long long>(measured.size()), "row") +
        "); they were decided by the spread rule. Leave --rerun-rounds out to get enough (" +
        std::to_string(rerun_rounds_for(measured.size(), auto_rounds)) + " here)");
  }
}

// Whether a row measured again is still open after a stage: its ratio beyond the threshold, either
// way, without the significance that would decide it.
bool ambiguous(const Judged& j, double threshold) {
  if (j.time == TimeVerdict::slower_in_noise) return true;
  return j.ratio * (1 + threshold) < 1 && j.time != TimeVerdict::faster;
}

// The rerun, in up to two stages (compare.hpp): every row for `rounds` rounds, each decided at
// alpha / 2; then the rows that stage leaves ambiguous for o.rerun_more_rounds more rounds (auto:
// three times as many), decided again on all their rounds at alpha / 2, in a family of their own.
// Without the second stage (rerun_more_rounds 0) one stage at alpha.
void rerun_rows(std::vector<Judged*>& rows, const ResultsFile& base, const ResultsFile& next,
                const CompareOptions& o, int rounds, std::ostream& log, CompareSummary& s) {
  Rerunner new_runner(o.rerun, next);
  std::optional<Rerunner> base_runner;
  if (!o.rerun_base.empty()) base_runner.emplace(o.rerun_base, base);
  CompareOptions stage = o;
  if (rerun_two_stages(o)) stage.alpha = o.alpha / 2;
  const RerunRounds m =
      measure_rounds(rows, new_runner, base_runner, o, rounds, "rerun round", log);
  decide_rerun(rows, m, stage, rounds, s.warnings);
  if (rerun_two_stages(o)) {
    std::vector<std::size_t> open;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i]->rerun_note.empty() && ambiguous(*rows[i], o.threshold)) open.push_back(i);
    if (!open.empty()) {
      const int more = o.rerun_more_rounds > 0 ? o.rerun_more_rounds : 3 * rounds;
      log << "rerun stage 2: " << count_of(static_cast<long long>(open.size()), "row")
          << " beyond the threshold but not significant, " << more << " more rounds" << std::endl;
      std::vector<Judged*> sub;
      for (std::size_t i : open) sub.push_back(rows[i]);
      const RerunRounds m2 =
          measure_rounds(sub, new_runner, base_runner, o, more, "rerun stage 2 round", log);
      RerunRounds all;
      for (std::size_t k = 0; k < open.size(); ++k) {
        std::vector<double> bm = m.bm[open[k]], nm = m.nm[open[k]];
        bm.insert(bm.end(), m2.bm[k].begin(), m2.bm[k].end());
        nm.insert(nm.end(), m2.nm[k].begin(), m2.nm[k].end());
        all.bm.push_back(std::move(bm));
        all.nm.push_back(std::move(nm));
        all.last.push_back(m2.last[k] ? m2.last[k] : m.last[open[k]]);
      }
      decide_rerun(sub, all, stage, rounds + more, s.warnings);
      s.rerun_more = static_cast<int>(open.size());
      s.rerun_more_rounds = more;
    }
  }
  warn_other_build(new_runner, base_runner, base, next, s.warnings);
}

// Everything compare_results decides, for the report in either format.
struct Comparison {
  Comparison(const ResultsFile& b, const ResultsFile& n, const CompareOptions& opts)
      : base(b), next(n), o(opts) {}
  const ResultsFile& base;
  const ResultsFile& next;
  const CompareOptions& o;
  CompareSummary s;
  std::vector<std::string> notes;
  std::vector<Judged> judged;             // BASE's rows found in NEW, in BASE's order
  std::vector<bool> used;                 // NEW's rows matched by one of BASE
  std::vector<const ResultRow*> missing;  // BASE's rows not in NEW
  Between between;
  std::vector<std::string> verdicts;     // per judged row
  std::vector<std::string> regressions;  // repeated after the table, where a reader looks
  std::vector<std::string> suspects;
  std::string method, rerun_method;  // how a row was found slower, and a row measured again
};

// Pairs BASE's rows with NEW's. A key may repeat (a case listed twice): the k-th occurrence in
// BASE matches the k-th in NEW.
void match_rows(Comparison& c) {
  std::map<std::string, std::vector<std::size_t>> in_next;
  for (std::size_t i = 0; i < c.next.rows.size(); ++i) in_next[c.next.rows[i].key()].push_back(i);
  c.used.assign(c.next.rows.size(), false);
  c.judged.reserve(c.base.rows.size());
  for (const ResultRow& b : c.base.rows) {
    const ResultRow* n = nullptr;
    for (const std::size_t i : in_next[b.key()]) {
      if (!c.used[i]) {
        c.used[i] = true;
        n = &c.next.rows[i];
        break;
      }
    }
    if (!n) {
      c.missing.push_back(&b);
      continue;
    }
    Judged j;
    j.b = &b;
    j.n = n;
    j.timed = b.time && n->time;
    if (j.timed) j.ratio = n->time->median_ms / b.time->median_ms;
    judge_errors(j, c.o);
    c.judged.push_back(std::move(j));
  }
  c.s.matched = static_cast<int>(c.judged.size());
}

// Time: the test over the family of rows with samples; the spread rule for the others.
void judge_times(Comparison& c) {
  int hot_mismatch = 0;  // timed rows whose L2 flushing differs: their times do not compare
  int flush_mismatch = 0;  // both flushed, one by writing and one by reading (FlushMode)
  std::vector<Judged*> timed;
  std::vector<double> min_p;
  for (Judged& j : c.judged) {
    if (!j.timed) continue;
    if (j.b->time->hot != j.n->time->hot) {
      ++hot_mismatch;
    } else if (!j.b->time->hot) {  // an older file's empty flush was a write
      const std::string fb = j.b->time->flush.empty() ? "write" : j.b->time->flush;
      const std::string fn = j.n->time->flush.empty() ? "write" : j.n->time->flush;
      if (fb != fn) ++flush_mismatch;
    }
    timed.push_back(&j);
    min_p.push_back(u_min_p(samples_of(*j.b).size(), samples_of(*j.n).size()));
  }
  const std::vector<bool> keep = testable(min_p, c.o);
  std::vector<Judged*> family;
  std::vector<std::vector<double>> bs, ns;
  for (std::size_t k = 0; k < timed.size(); ++k) {
    Judged& j = *timed[k];
    if (keep[k]) {
      family.push_back(&j);
      bs.push_back(samples_of(*j.b));
      ns.push_back(samples_of(*j.n));
    } else {
      j.time = spread_rule(*j.b->time, *j.n->time, c.o.threshold);
      ++c.s.spread_rule;
    }
  }
  test_family(family, bs, ns, c.o);
  c.s.tested = static_cast<int>(family.size());
  if (hot_mismatch > 0) {
    c.s.warnings.push_back(count_of(hot_mismatch, "row") + (hot_mismatch == 1 ? " was" : " were") +
                           " timed with hot caches in one run and flushed in the other");
  }
  if (flush_mismatch > 0) {
    c.s.warnings.push_back(count_of(flush_mismatch, "row") +
                           (flush_mismatch == 1 ? " was" : " were") +
                           " timed after a write flush of L2 in one run and a read flush in the "
                           "other (timing.flush)");
  }
}

// --rerun: which rows are measured again (--rerun-rows): those found slower, those whose median
// is above the threshold at all (slower, or slower within the noise), or every timed row.
void rerun_chosen(Comparison& c, std::ostream& log) {
  const CompareOptions& o = c.o;
  std::vector<Judged*> again;
  for (Judged& j : c.judged) {
    j.first_time = j.time;
    const bool slower = j.time == TimeVerdict::slower || j.time == TimeVerdict::suspect;
    const bool pick = o.rerun_rows == "all"       ? j.time != TimeVerdict::untimed
                      : o.rerun_rows == "suspect" ? slower || j.time == TimeVerdict::slower_in_noise
                                                  : slower;
    if (pick) again.push_back(&j);
  }
  if (again.empty()) return;
  c.s.rerun_rounds = rerun_rounds_for(again.size(), o);
  rerun_rows(again, c.base, c.next, o, c.s.rerun_rounds, log, c.s);
  c.s.rerun = static_cast<int>(again.size());
  for (const Judged* j : again) c.s.confirmed += j->time == TimeVerdict::slower;
  // Every timed row measured again, both sides alternating: the rounds decided each row on
  // fresh pairs, and the files' shift no longer decides anything.
  if (o.rerun_rows == "all" && !o.rerun_base.empty()) {
    c.between.superseded = true;
    c.between.shifted = 0;
  }
}

// Each row's verdict text, the counts of the summary, and the lines repeated after the table.
void give_verdicts(Comparison& c) {
  CompareSummary& s = c.s;
  c.verdicts.assign(c.judged.size(), std::string());
  for (std::size_t i = 0; i < c.judged.size(); ++i) {
    Judged& j = c.judged[i];
    std::vector<std::string> reasons;
    if (j.time == TimeVerdict::slower) {
      std::string r = "slower x" + fmt_x(j.ratio);
      if (j.rerun) {
        r += std::string(j.first_time == TimeVerdict::slower ? " (confirmed by the rerun"
                                                             : " (found by the rerun") +
             "; first x" + fmt_x(j.first_ratio) + ")";
      }
      reasons.push_back(r);
    }
    reasons.insert(reasons.end(), j.regress.begin(), j.regress.end());
    std::string& verdict = c.verdicts[i];
    if (!reasons.empty()) {
      ++s.regressed;
      verdict = "REGRESSED:";
      for (const auto& r : reasons) verdict += " " + r;
      c.regressions.push_back(row_name(*j.b) + ":" + verdict.substr(verdict.find(':') + 1));
    } else if (j.time == TimeVerdict::suspect) {
      ++s.suspect;
      verdict = "SUSPECT: slower x" + fmt_x(j.ratio) + ", within the noise between the runs";
      c.suspects.push_back(row_name(*j.b) + ": slower x" + fmt_x(j.ratio));
    } else if (j.time == TimeVerdict::faster || j.fixed) {
      ++s.improved;
      verdict = j.time == TimeVerdict::faster ? "faster" : "fixed";
    } else if (j.rerun) {
      verdict =
          std::string(j.first_time == TimeVerdict::slower ? "ok (not confirmed by the rerun: x"
                                                          : "ok (rerun: x") +
          fmt_x(j.ratio) + "; first x" + fmt_x(j.first_ratio) +
          (j.rerun_note.empty() ? "" : "; " + j.rerun_note) + ")";
    } else {
      verdict = j.time == TimeVerdict::slower_in_noise ? "ok (slower, within noise)" : "ok";
    }
  }
  s.missing = static_cast<int>(c.missing.size());
  for (std::size_t i = 0; i < c.next.rows.size(); ++i) s.added += !c.used[i];
  s.missing_fails = s.missing > 0 && !c.o.allow_missing;
  s.shifted = c.between.shifted;
}

// The method lines: how a row is found slower, and (after a rerun) how a row measured again is.
void describe_methods(Comparison& c) {
  const CompareOptions& o = c.o;
  c.method = "one-sided Mann-Whitney U on each row's repetitions (time.samples_ms), " +
             describe(o.correction) + " at alpha " + fmt_p(o.alpha) + " over " +
             count_of(c.s.tested, "row") + ", and new/base above " + fmt_x(1 + o.threshold) +
             (c.between.estimated && !c.between.superseded
                  ? ", and beyond the noise between the runs (log new/base more than " +
                        fmt_x(c.between.z) + " t3 scales from the file's median, Bonferroni)"
                  : std::string());
  c.rerun_method =
      "one-sided Wilcoxon signed-rank on log(new/base) of each round's invocation medians " +
      std::string(o.rerun_base.empty() ? "(NEW's, against BASE's recorded median)"
                                       : "(BASE and NEW, paired by round)") +
      ", " + describe(o.correction) + " over the " + count_of(c.s.rerun, "row") +
      " measured again, and the median of the rounds' new/base above " + fmt_x(1 + o.threshold) +
      (rerun_two_stages(o)
           ? "; two stages at alpha " + fmt_p(o.alpha / 2) +
                 " each (Bonferroni), the second for the rows the first left beyond the "
                 "threshold but not significant, on all their rounds"
           : std::string());
  if (c.s.rerun > 0) c.method += "; rows measured again: " + c.rerun_method;
}

// ---- The report as JSON (--format json) --------------------------------------------------------

json method_json(const Comparison& c) {
  const CompareOptions& o = c.o;
  return {{"test", "mann-whitney-u, one-sided, on time.samples_ms"},
          {"between_runs",
           "log(new/base) beyond z * MAD / 0.7649 from the rows' median, z "
           "Student's t3 quantile for alpha / rows (Bonferroni); the whole "
           "file by the sign test"},
          {"correction", to_string(o.correction)},
          {"alpha", o.alpha},
          {"threshold", o.threshold},
          {"error_factor", o.error_factor},
          {"tested", c.s.tested},
          {"spread_rule", c.s.spread_rule},
          {"rerun", o.rerun.empty() ? json(nullptr) : json(o.rerun)},
          {"rerun_base", o.rerun_base.empty() ? json(nullptr) : json(o.rerun_base)},
          {"rerun_rows", o.rerun.empty() ? json(nullptr) : json(o.rerun_rows)},
          {"rerun_rounds", o.rerun.empty() ? 0 : c.s.rerun_rounds},
          {"rerun_stage2_rows", c.s.rerun_more},
          {"rerun_stage2_rounds", c.s.rerun_more_rounds},
          {"rerun_repetitions", o.rerun.empty() ? 0 : o.rerun_repetitions},
          {"rerun_test", c.s.rerun > 0 ? json(c.rerun_method) : json(nullptr)}};
}

json row_json(const Judged& r, const std::string& v) {
  json row;
  row["case"] = r.b->case_label;
  row["impl"] = r.b->impl;
  row["options"] = json::object();
  for (const auto& [k, x] : r.b->options) row["options"][k] = x;
  row["pass"] = to_string(r.b->pass);
  row["device"] = r.b->device;
  row["base_ms"] = r.b->time ? num(r.b->time->median_ms) : json(nullptr);
  row["new_ms"] = r.n->time ? num(r.n->time->median_ms) : json(nullptr);
  row["ratio"] = num(r.ratio);
  row["base_cv"] = r.b->time ? num(r.b->time->cv) : json(nullptr);
  row["new_cv"] = r.n->time ? num(r.n->time->cv) : json(nullptr);
  row["base_samples"] = r.b->time ? r.b->time->samples_ms.size() : 0;
  row["new_samples"] = r.n->time ? r.n->time->samples_ms.size() : 0;
  row["rule"] = !r.timed                             ? "untimed"
                : !r.test                            ? "spread"
                : r.rerun && !r.rerun_ratios.empty() ? "signed-rank"
                                                     : "u-test";
  row["p_slower"] = r.test ? num(r.p_slower) : json(nullptr);
  row["p_faster"] = r.test ? num(r.p_faster) : json(nullptr);
  row["p_adjusted"] = r.test ? num(r.p_adjusted) : json(nullptr);
  row["time"] = kTimeNames[static_cast<int>(r.time)];
  row["error_growth"] = num(r.growth);
  row["worst_output"] = r.worst_output;
  row["base_status"] = to_string(r.b->status);
  row["new_status"] = to_string(r.n->status);
  if (r.rerun) {
    json ratios = json::array();
    for (double x : r.rerun_ratios) ratios.push_back(num(x));
    row["rerun"] = {{"first_ratio", num(r.first_ratio)},
                    {"pairs", r.rerun_ratios.size()},
                    {"round_ratios", std::move(ratios)},
                    {"note", r.rerun_note}};
  }
  row["verdict"] = v.rfind("REGRESSED", 0) == 0    ? "regressed"
                   : v.rfind("SUSPECT", 0) == 0    ? "suspect"
                   : v == "faster" || v == "fixed" ? "improved"
                                                   : "ok";
  row["detail"] = v;
  return row;
}

json between_json(const Between& between) {
  return {{"rows", between.est.rows},
          {"estimated", between.estimated},
          {"shift", between.estimated ? num(std::exp(between.est.shift)) : json(nullptr)},
          {"sigma", between.estimated ? num(between.sigma) : json(nullptr)},
          {"z", between.estimated ? num(between.z) : json(nullptr)},
          {"rows_slower", between.est.above},
          {"p_shift", between.estimated ? num(between.p_shift) : json(nullptr)},
          {"shifted", between.shifted > 0   ? "slower"
                      : between.shifted < 0 ? "faster"
                                            : "no"},
          {"superseded_by_rerun", between.superseded}};
}

void print_json(const Comparison& c, std::ostream& out) {
  const CompareSummary& s = c.s;
  json j;
  j["schema"] = "attnbench.compare/1";
  j["base"] = c.o.base;
  j["new"] = c.o.next;
  j["method"] = method_json(c);
  j["warnings"] = s.warnings;
  j["notes"] = c.notes;
  j["rows"] = json::array();
  for (std::size_t i = 0; i < c.judged.size(); ++i)
    j["rows"].push_back(row_json(c.judged[i], c.verdicts[i]));
  j["missing"] = json::array();
  for (const ResultRow* m : c.missing) j["missing"].push_back(row_name(*m));
  j["added"] = json::array();
  for (std::size_t i = 0; i < c.next.rows.size(); ++i)
    if (!c.used[i]) j["added"].push_back(row_name(c.next.rows[i]));
  j["between_runs"] = between_json(c.between);
  j["summary"] = {{"matched", s.matched},     {"regressed", s.regressed},
                  {"suspect", s.suspect},     {"improved", s.improved},
                  {"missing", s.missing},     {"added", s.added},
                  {"shifted", s.shifted},     {"rerun", s.rerun},
                  {"confirmed", s.confirmed}, {"exit_code", s.exit_code()}};
  out << j.dump(2) << "\n";
}

// ---- The report as text ------------------------------------------------------------------------

// The rows' table (--only-changed: without the rows whose verdict is ok), with its note.
void print_rows_table(const Comparison& c, std::ostream& out) {
  const CompareOptions& o = c.o;
  // The device kind is shown only when the rows do not all run on the same kind (rows are
  // matched on the kind: a --devices sweep over cuda:0..N-1 compares with a one-GPU run).
  bool multi_device = false;
  for (const ResultRow& r : c.base.rows)
    multi_device = multi_device || r.device_kind() != c.base.rows[0].device_kind();
  TextTable t;
  t.header = {"case",          "impl", "pass",    "base ms", "new ms", "new/base",
              "cv % base/new", "p",    "error ×", "status",  "verdict"};
  int hidden = 0;
  for (std::size_t i = 0; i < c.judged.size(); ++i) {
    const Judged& j = c.judged[i];
    if (o.only_changed && c.verdicts[i].rfind("ok", 0) == 0 && j.b->status == j.n->status) {
      ++hidden;
      continue;
    }
    const ResultRow& b = *j.b;
    const ResultRow& n = *j.n;
    const std::string status =
        b.status == n.status ? to_string(b.status)
                             : std::string(to_string(b.status)) + " -> " + to_string(n.status);
    const std::string cv = j.timed ? fmt_cv(b.time->cv) + "/" + fmt_cv(n.time->cv) : "-";
    t.rows.push_back({b.case_label,
                      b.impl_label() + (multi_device ? " (" + b.device_kind() + ")" : ""),
                      std::string(to_string(b.pass)), b.time ? fmt_ms(b.time->median_ms) : "-",
                      n.time ? fmt_ms(n.time->median_ms) : "-",
                      fmt_x(j.timed ? n.time->median_ms / b.time->median_ms : NAN), cv,
                      j.test ? fmt_p(j.p_adjusted) : "-",
                      std::isnan(j.growth) ? "-" : fmt_x(j.growth), status, c.verdicts[i]});
  }
  if (!t.rows.empty()) {
    t.note =
        "new/base: median time ratio (> 1 is slower); cv: the repetitions' standard deviation / "
        "mean; p: the test's p-value after the correction, in the direction of the change; "
        "error ×: largest max_abs growth over the outputs. Slower: " +
        c.method + "." +
        (c.s.spread_rule > 0
             ? " Rows without p (" + std::to_string(c.s.spread_rule) +
                   ": no samples_ms, or too few to reach the level): above " +
                   fmt_x(1 + o.threshold) +
                   "× and beyond both runs' spread (max(cv·median, median − min), added)."
             : std::string()) +
        (hidden > 0
             ? "\n" + count_of(hidden, "row") + " with verdict ok not shown (--only-changed)."
             : std::string());
    render_markdown(t, out);
  } else if (c.judged.empty()) {
    out << "No rows in common.\n\n";
  } else {
    out << "No row changed (" << count_of(hidden, "row")
        << " with verdict ok; --only-changed).\n\n";
  }
}

// The attnbench binary that wrote a file (its context's "executable"), or a placeholder.
std::string exe(const ResultsFile& f, const char* who) {
  const std::string e = ctx_text(f.context, "executable");
  return e.empty() ? std::string("<") + who + "'s attnbench>" : e;
}

// The command that decides what the files cannot: the rows measured again, both builds
// alternating (rows: the --rerun-rows value, or none for the default).
std::string rerun_command(const Comparison& c, const char* rows) {
  return "attnbench compare " + c.o.base + " " + c.o.next + " --rerun " + exe(c.next, "NEW") +
         " --rerun-base " + exe(c.base, "BASE") +
         (rows ? std::string(" --rerun-rows ") + rows : "");
}

// The rerun's line, and the noise between the runs (with the command that decides what it
// cannot).
void print_rerun_and_between(const Comparison& c, std::ostream& out) {
  const CompareOptions& o = c.o;
  const Between& between = c.between;
  if (c.s.rerun > 0) {
    const char* noun = o.rerun_rows == "all" ? "timed row" : "row";
    const char* which = o.rerun_rows == "all"       ? " (all)"
                        : o.rerun_rows == "suspect" ? " above the threshold"
                                                    : " found slower";
    out << "rerun: " << count_of(c.s.rerun, noun) << which << (c.s.rerun == 1 ? " was" : " were")
        << " measured again (" << count_of(c.s.rerun_rounds, "round") << " of "
        << (o.rerun_base.empty() ? "one invocation of NEW per implementation, against BASE's "
                                   "recorded median"
                                 : "one invocation a side per implementation, BASE and NEW "
                                   "alternating, the implementations in a shuffled order")
        << ", " << o.rerun_repetitions << " repetitions each; an invocation's median is one sample"
        << (c.s.rerun_more > 0 ? "; then " + count_of(c.s.rerun_more, "row") +
                                     " beyond the threshold but not significant " +
                                     count_of(c.s.rerun_more_rounds, "round") + " more"
                               : std::string())
        << "): " << c.s.confirmed << " confirmed\n";
  }
  if (between.superseded) {
    out << "between runs: every timed row was measured again, both sides alternating; the rounds "
           "decided each row\n";
  } else if (between.estimated) {
    out << "between runs: over " << count_of(between.est.rows, "timed row") << " NEW/BASE is x"
        << fmt_x(std::exp(between.est.shift)) << " (median; " << count_of(between.est.above, "row")
        << " slower), and a row varies by " << fmt_cv(between.sigma)
        << "% (1.4826 MAD of log new/base): a row is slower beyond that noise above x"
        << fmt_x(std::exp(between.est.shift + between.bound)) << "\n";
  } else {
    out << "between runs: not estimated (" << count_of(between.est.rows, "timed row") << ", "
        << Between::kMinRows
        << " needed): each row is judged on its own repetitions and the threshold alone\n";
  }
  if (between.shifted != 0) {
    out << (between.shifted > 0 ? "SHIFTED: NEW is slower across the whole file, x"
                                : "note: NEW is faster across the whole file, x")
        << fmt_x(std::exp(between.est.shift)) << " (" << between.est.above << " of "
        << count_of(between.est.rows, "row") << " slower, sign test p " << fmt_p(between.p_shift)
        << "): the machine or the code";
    if (between.shifted > 0) out << "; decide with:\n  " << rerun_command(c, "all");
    out << "\n";
  }
}

// The lines a reader acts on (regressed, suspect, missing, new rows), the summary and the method.
void print_findings(const Comparison& c, std::ostream& out) {
  const CompareOptions& o = c.o;
  const CompareSummary& s = c.s;
  for (const auto& r : c.regressions) out << "REGRESSED " << r << "\n";
  for (const auto& r : c.suspects)
    out << "SUSPECT " << r << ", within the noise between the runs\n";
  if (!c.suspects.empty())
    out << "decide the SUSPECT rows with:\n  " << rerun_command(c, nullptr) << "\n";
  for (const ResultRow* m : c.missing)
    out << (o.allow_missing ? "missing (allowed): " : "MISSING in NEW: ") << row_name(*m) << "\n";
  if (s.missing_fails)
    out << s.missing << " row" << (s.missing == 1 ? "" : "s")
        << " of BASE not in NEW (another config, or --case/--impl?): --allow-missing accepts that\n";
  for (std::size_t i = 0; i < c.next.rows.size(); ++i)
    if (!c.used[i]) out << "new row (not in BASE): " << row_name(c.next.rows[i]) << "\n";

  const int code = s.exit_code();
  out << "\ncompare: " << s.matched << " matched, " << s.regressed << " regressed, " << s.suspect
      << " suspect, " << s.improved << " improved, " << s.missing << " missing, " << s.added
      << " new -> "
      << (code == 1 ? "REGRESSION" : code == 3 ? "SHIFTED" : code == 4 ? "MISSING" : "OK")
      << " (exit " << code << ")\n";
  out << "method: " << c.method
      << (s.spread_rule ? "; " + count_of(s.spread_rule, "row") + " by the spread rule" : "")
      << "\n";
}

void print_text(const Comparison& c, std::ostream& out) {
  for (const auto& w : c.s.warnings) out << "WARNING: " << w << "\n";
  for (const auto& n : c.notes) out << "note: " << n << "\n";
  if (!c.s.warnings.empty() || !c.notes.empty()) out << "\n";
  print_rows_table(c, out);
  print_rerun_and_between(c, out);
  print_findings(c, out);
}

}  // namespace

CompareSummary compare_results(const ResultsFile& base, const ResultsFile& next,
                               const CompareOptions& o, std::ostream& out, std::ostream& log) {
  Comparison c(base, next, o);
  c.s.warnings = context_warnings(base, next);
  if (ctx_text(base.context, "config_hash") != ctx_text(next.context, "config_hash")) {
    c.notes.push_back(
        "the two runs used different configs (" + ctx_text(base.context, "config_name") + " vs " +
        ctx_text(next.context, "config_name") + "): only the rows they share are compared");
  }
  match_rows(c);
  judge_times(c);
  c.between = judge_between(c.judged, o);
  if (!o.rerun.empty()) rerun_chosen(c, log);
  give_verdicts(c);
  describe_methods(c);
  if (o.format == "json") {
    print_json(c, out);
  } else {
    print_text(c, out);
  }
  return c.s;
}

int run_compare(const CompareOptions& o, std::ostream& out, std::ostream& err) {
  if (!(o.threshold >= 0)) {
    err << "attnbench compare: --threshold must be >= 0, got " << o.threshold << "\n";
    return 2;
  }
  if (!(o.error_factor >= 1)) {
    err << "attnbench compare: --error-factor must be >= 1, got " << o.error_factor << "\n";
    return 2;
  }
  if (!(o.alpha > 0 && o.alpha < 1)) {
    err << "attnbench compare: --alpha must be in (0, 1), got " << o.alpha << "\n";
    return 2;
  }
  if (o.format != "text" && o.format != "json") {
    err << "attnbench compare: --format must be text or json, got \"" << o.format << "\"\n";
    return 2;
  }
  if (o.rerun_rounds < 0 || o.rerun_repetitions < 1) {
    err << "attnbench compare: --rerun-rounds must be >= 0 (0: enough for the test) and "
           "--rerun-repetitions >= 1, got "
        << o.rerun_rounds << " and " << o.rerun_repetitions << "\n";
    return 2;
  }
  if (o.rerun_more_rounds < -1) {
    err << "attnbench compare: --rerun-more-rounds must be -1 (auto: 3x the first stage's), 0 "
           "(no second stage) or a number of rounds, got "
        << o.rerun_more_rounds << "\n";
    return 2;
  }
  if (o.rerun_rows != "slower" && o.rerun_rows != "suspect" && o.rerun_rows != "all") {
    err << "attnbench compare: --rerun-rows must be slower, suspect or all, got \"" << o.rerun_rows
        << "\"\n";
    return 2;
  }
  if (!o.rerun_base.empty() && o.rerun.empty()) {
    err << "attnbench compare: --rerun-base needs --rerun (NEW's binary)\n";
    return 2;
  }
  ResultsFile base, next;
  try {
    base = load_results(o.base);
    next = load_results(o.next);
  } catch (const ResultsError& e) {
    err << "attnbench compare: " << e.what() << "\n";
    return 2;
  }
  if (o.format == "text") {
    out << "BASE " << o.base << " (" << device_name(base.context) << ")\nNEW  " << o.next << " ("
        << device_name(next.context) << ")\n\n";
  }
  try {
    return compare_results(base, next, o, out, err).exit_code();
  } catch (const std::runtime_error& e) {
    err << "attnbench compare: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace attnbench
