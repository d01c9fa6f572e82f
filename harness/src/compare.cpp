// `attnbench compare`: matches the rows of two results files and flags regressions. The rules
// (noise-aware slowdown, status, error growth, missing rows) are defined in compare.hpp.
#include "attnbench/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>

#include "attnbench/render.hpp"

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

std::vector<std::string> context_warnings(const ResultsFile& a, const ResultsFile& b) {
  std::vector<std::string> w;
  auto differ = [&](const std::string& what, const std::string& x, const std::string& y) {
    if (x != y) w.push_back(what + " differs: BASE \"" + x + "\" vs NEW \"" + y + "\"");
  };
  differ("device", device_field(a.context, "name"), device_field(b.context, "name"));
  differ("SM clock (MHz)", device_field(a.context, "sm_clock_mhz"),
         device_field(b.context, "sm_clock_mhz"));
  differ("memory clock (MHz)", device_field(a.context, "mem_clock_mhz"),
         device_field(b.context, "mem_clock_mhz"));
  differ("CPU", ctx_text(a.context, "cpu"), ctx_text(b.context, "cpu"));
  differ("build type", ctx_text(a.context, "build_type"), ctx_text(b.context, "build_type"));
  differ("compiler", ctx_text(a.context, "compiler"), ctx_text(b.context, "compiler"));
  differ("CUDA driver", ctx_text(a.context, "cuda_driver"), ctx_text(b.context, "cuda_driver"));
  differ("CUDA runtime", ctx_text(a.context, "cuda_runtime"), ctx_text(b.context, "cuda_runtime"));
  for (const auto* f : {&a, &b}) {
    const char* which = f == &a ? "BASE" : "NEW";
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

struct RowVerdict {
  std::vector<std::string> regress;  // reasons; any makes the row a regression
  bool faster = false;
  bool slower_in_noise = false;  // beyond the threshold but within the runs' noise
};

RowVerdict judge(const ResultRow& b, const ResultRow& n, const CompareOptions& o, double& worst_growth,
              std::string& worst_output) {
  RowVerdict v;
  if (b.time && n.time) {
    const double bm = b.time->median_ms, nm = n.time->median_ms;
    const double noise = spread(*b.time) + spread(*n.time);
    if (nm > bm * (1 + o.threshold)) {
      if (nm - bm > noise)
        v.regress.push_back("slower x" + fmt_x(nm / bm));
      else
        v.slower_in_noise = true;
    } else if (bm > nm * (1 + o.threshold) && bm - nm > noise) {
      v.faster = true;
    }
  }
  if (b.status == Status::pass && n.status != Status::pass) v.regress.push_back(std::string("pass->") + to_string(n.status));

  worst_growth = NAN;
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
    if (!(g <= worst_growth)) {
      worst_growth = g;
      worst_output = ne.name;
    }
  }
  if (std::isfinite(worst_growth) ? worst_growth > o.error_factor : !std::isnan(worst_growth)) {
    v.regress.push_back(worst_output + " error x" + fmt_x(worst_growth));
  }
  return v;
}

std::string row_name(const ResultRow& r) {
  return r.case_label + " " + r.impl_label() + " " + std::string(to_string(r.pass)) +
         (r.device.empty() ? "" : " (" + r.device + ")");
}

}  // namespace

CompareSummary compare_results(const ResultsFile& base, const ResultsFile& next,
                               const CompareOptions& o, std::ostream& out) {
  CompareSummary s;
  s.warnings = context_warnings(base, next);
  for (const auto& w : s.warnings) out << "WARNING: " << w << "\n";
  if (ctx_text(base.context, "config_hash") != ctx_text(next.context, "config_hash")) {
    out << "note: the two runs used different configs (" << ctx_text(base.context, "config_name")
        << " vs " << ctx_text(next.context, "config_name")
        << "): only the rows they share are compared\n";
  }
  if (!s.warnings.empty()) out << "\n";

  // A key may repeat (a case listed twice): the k-th occurrence in BASE matches the k-th in NEW.
  std::map<std::string, std::vector<std::size_t>> in_next;
  for (std::size_t i = 0; i < next.rows.size(); ++i) in_next[next.rows[i].key()].push_back(i);
  std::vector<bool> used(next.rows.size(), false);
  std::vector<const ResultRow*> missing;
  int hot_mismatch = 0;  // timed rows whose L2 flushing differs: their times do not compare
  std::vector<std::string> regressions;  // repeated after the table, where a reader looks

  // The device kind is shown only when the rows do not all run on the same kind (rows are
  // matched on the kind: a --devices sweep over cuda:0..N-1 compares with a one-GPU run).
  bool multi_device = false;
  for (const ResultRow& r : base.rows)
    multi_device = multi_device || r.device_kind() != base.rows[0].device_kind();

  TextTable t;
  t.header = {"case",     "impl",    "pass",    "base ms", "new ms",
              "new/base", "speedup", "error ×", "status",  "verdict"};
  for (const ResultRow& b : base.rows) {
    const ResultRow* n = nullptr;
    for (const std::size_t i : in_next[b.key()]) {
      if (!used[i]) {
        used[i] = true;
        n = &next.rows[i];
        break;
      }
    }
    if (!n) {
      missing.push_back(&b);
      continue;
    }
    ++s.matched;
    double growth = NAN;
    std::string worst;
    const RowVerdict v = judge(b, *n, o, growth, worst);
    const bool timed = b.time && n->time;
    if (timed && b.time->hot != n->time->hot) ++hot_mismatch;
    const double ratio = timed ? n->time->median_ms / b.time->median_ms : NAN;
    std::string verdict;
    if (!v.regress.empty()) {
      ++s.regressed;
      verdict = "REGRESSED:";
      for (const auto& r : v.regress) verdict += " " + r;
      regressions.push_back(row_name(b) + ":" + verdict.substr(verdict.find(':') + 1));
    } else if (v.faster || (b.status != Status::pass && n->status == Status::pass)) {
      ++s.improved;
      verdict = v.faster ? "faster" : "fixed";
    } else {
      verdict = v.slower_in_noise ? "ok (slower, within noise)" : "ok";
    }
    const std::string status = b.status == n->status ? to_string(b.status)
                               : std::string(to_string(b.status)) + " -> " + to_string(n->status);
    t.rows.push_back({b.case_label, b.impl_label() + (multi_device ? " (" + b.device_kind() + ")" : ""),
                      std::string(to_string(b.pass)), b.time ? fmt_ms(b.time->median_ms) : "-",
                      n->time ? fmt_ms(n->time->median_ms) : "-", fmt_x(ratio), fmt_x(1 / ratio),
                      std::isnan(growth) ? "-" : fmt_x(growth), status, verdict});
  }
  if (!t.rows.empty()) {
    t.note =
        "new/base: median time ratio (> 1 is slower); speedup = base/new; error ×: largest max_abs "
        "growth "
        "over the outputs. Slower counts only above " +
        fmt_x(1 + o.threshold) +
        "× and beyond both runs' spread (max(cv·median, median − min), added).";
    render_markdown(t, out);
  } else {
    out << "No rows in common.\n\n";
  }

  if (hot_mismatch > 0) {
    s.warnings.push_back(std::to_string(hot_mismatch) +
                         " rows were timed with hot caches in one run and flushed in the other");
    out << "WARNING: " << s.warnings.back() << "\n";
  }
  for (const auto& r : regressions) out << "REGRESSED " << r << "\n";
  for (const ResultRow* m : missing) {
    ++s.missing;
    out << (o.allow_missing ? "missing (allowed): " : "MISSING in NEW: ") << row_name(*m) << "\n";
  }
  for (std::size_t i = 0; i < next.rows.size(); ++i) {
    if (used[i]) continue;
    ++s.added;
    out << "new row (not in BASE): " << row_name(next.rows[i]) << "\n";
  }
  if (!o.allow_missing) s.regressed += s.missing;

  out << (s.missing || s.added || !regressions.empty() ? "\n" : "") << "compare: " << s.matched
      << " matched, " << s.regressed << " regressed, " << s.improved << " improved, " << s.missing
      << " missing, " << s.added << " new -> " << (s.exit_code() ? "REGRESSION" : "OK") << "\n";
  return s;
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
  ResultsFile base, next;
  try {
    base = load_results(o.base);
    next = load_results(o.next);
  } catch (const ResultsError& e) {
    err << "attnbench compare: " << e.what() << "\n";
    return 2;
  }
  out << "BASE " << o.base << " (" << device_name(base.context) << ")\nNEW  " << o.next << " ("
      << device_name(next.context) << ")\n\n";
  return compare_results(base, next, o, out).exit_code();
}

}  // namespace attnbench
