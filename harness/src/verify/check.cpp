// `attnbench check` (check.hpp): the conformance suite over the selected implementations.
#include "attnbench/check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "attnbench/conformance.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/implementation.hpp"

namespace attnbench {

namespace {

using Clock = std::chrono::steady_clock;
using conformance::Result;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fixed1(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

struct Tally {
  int passed = 0, failed = 0, skipped = 0, xfailed = 0;
  long planted = 0, caught = 0;
  void add(const Tally& t) {
    passed += t.passed;
    failed += t.failed;
    skipped += t.skipped;
    xfailed += t.xfailed;
    planted += t.planted;
    caught += t.caught;
  }
  std::string text() const {
    std::ostringstream s;
    s << passed << " passed, " << failed << " failed, " << skipped << " skipped";
    if (xfailed > 0) s << ", " << xfailed << " expected failure" << (xfailed == 1 ? "" : "s");
    s << "; planted faults caught " << caught << "/" << planted;
    return s.str();
  }
};

// Implementations named by the globs (all when none) on the device (both when empty), by name.
// unmatched: the --impl globs that name no implementation there (bad input: a typo must not shrink
// the check silently). A former name written out exactly names the implementation it became
// (Registry::canonical), with a line in notes, as in a config.
std::vector<const Implementation*> select(const CheckOptions& o,
                                          std::vector<std::string>& unmatched,
                                          std::vector<std::string>& notes) {
  std::set<std::string> seen;
  std::vector<const Implementation*> v;
  const std::vector<std::string> globs = o.impls.empty() ? std::vector<std::string>{"*"} : o.impls;
  const Registry& reg = Registry::instance();
  for (const std::string& g : globs) {
    bool any = false;
    std::vector<const Implementation*> named = reg.match(g);
    if (named.empty() && reg.is_former_name(g)) {
      if (const Implementation* i = reg.find(reg.canonical(g))) {
        named.push_back(i);
        notes.push_back("note: " + g + " is the former name of " + i->name() + ", which is checked instead");
      }
    }
    for (const Implementation* i : named) {
      if (!o.device.empty() && to_string(i->device()) != o.device) continue;
      any = true;
      if (seen.insert(i->name()).second) v.push_back(i);
    }
    if (!any && !o.impls.empty()) unmatched.push_back(g);
  }
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  return v;
}

// Whether this binary registers any implementation of the device (a build without CUDA has none).
bool has_device(std::string_view device) {
  for (const Implementation* i : Registry::instance().match("*"))
    if (to_string(i->device()) == device) return true;
  return false;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s.append(s.empty() ? "" : ", ").append("'" + x + "'");
  return s;
}

bool case_selected(const CheckOptions& o, const conformance::Case& c) {
  if (o.cases.empty()) return true;
  const std::string label = c.shape.p.label();
  return std::any_of(o.cases.begin(), o.cases.end(),
                     [&](const std::string& g) { return glob_match(g, label); });
}

// The implementations to check, or nullopt after the message when the selection is bad input.
std::optional<std::vector<const Implementation*>> checked_impls(const CheckOptions& o,
                                                                std::ostream& err) {
  if (!o.device.empty() && o.device != "cpu" && o.device != "cuda") {
    err << "attnbench check: --device " << o.device << ": unknown device (cpu or cuda)\n";
    return std::nullopt;
  }
  std::vector<std::string> unmatched, notes;
  const std::vector<const Implementation*> impls = select(o, unmatched, notes);
  for (const std::string& n : notes) err << "attnbench check: " << n << "\n";
  if (!unmatched.empty()) {
    err << "attnbench check: --impl " << joined(unmatched)
        << (o.device.empty() ? "" : " on --device " + o.device)
        << ": matches no registered implementation (attnbench list shows them)";
    const bool cuda_asked = o.device == "cuda" || std::any_of(unmatched.begin(), unmatched.end(),
                                                              [](const std::string& g) {
                                                                return g.rfind("cuda", 0) == 0;
                                                              });
    if (cuda_asked && !has_device("cuda"))
      err << "; this binary has no cuda implementations (built without CUDA)";
    err << "\n";
    return std::nullopt;
  }
  if (impls.empty()) {  // --device alone, with no implementation of it
    err << "attnbench check: --device " << o.device << ": this binary has no " << o.device
        << " implementations" << (o.device == "cuda" ? " (built without CUDA)" : "") << "\n";
    return std::nullopt;
  }
  return impls;
}

// What the suite found so far.
struct SuiteTally {
  std::map<std::string, Tally> tally;                              // per implementation
  std::map<std::string, std::map<std::string, int>> skip_reasons;  // per implementation
  std::string cuda_broken;  // set once a sticky CUDA error was seen
};

// One case checked (skipped after a sticky CUDA error), counted, and its FAIL or XFAIL line.
void check_one(const conformance::Case& c, SuiteTally& st, std::ostream& out) {
  const Implementation& impl = *c.impl;
  Result r;
  if (!st.cuda_broken.empty() && impl.device() == Device::cuda) {
    r.status = Result::Status::skip;
    r.reason = "an earlier sticky CUDA error: " + st.cuda_broken;
  } else {
    r = conformance::check_case(c);
    if (r.status == Result::Status::fail && impl.device() == Device::cuda) {
      std::string why;
      if (cuda_context_broken(why)) st.cuda_broken = why;
    }
  }
  Tally& t = st.tally[impl.name()];
  t.planted += r.planted;
  t.caught += r.planted_caught;
  switch (r.status) {
    case Result::Status::pass:
      ++t.passed;
      break;
    case Result::Status::skip:
      ++t.skipped;
      ++st.skip_reasons[impl.name()][r.reason];
      break;
    case Result::Status::fail:
      ++t.failed;
      out << "FAIL " << c.name() << " [" << conformance::to_string(c.shape.group)
          << "]: " << r.reason << "\n";
      out.flush();
      break;
    case Result::Status::xfail:  // declared by the implementation: reported, not a failure
      ++t.xfailed;
      out << "XFAIL " << c.name() << " [" << conformance::to_string(c.shape.group)
          << "]: " << r.reason << "\n";
      out.flush();
      break;
  }
}

// The total over the implementations, and (unless quiet) a line for each with its skip reasons.
Tally total(const std::vector<const Implementation*>& impls, SuiteTally& st, bool quiet,
            std::ostream& err) {
  Tally all;
  for (const Implementation* impl : impls) {
    const Tally& t = st.tally[impl->name()];
    all.add(t);
    if (quiet) continue;
    err << "  " << impl->name() << ": " << t.text() << "\n";
    int shown = 0;
    for (const auto& [why, count] : st.skip_reasons[impl->name()]) {
      if (++shown > 5) {
        err << "    skipped: " << st.skip_reasons[impl->name()].size() - 5 << " more reasons\n";
        break;
      }
      err << "    skipped " << count << ": " << why << "\n";
    }
  }
  return all;
}

}  // namespace

int run_check(const CheckOptions& o, std::ostream& out, std::ostream& err) {
  const auto selected = checked_impls(o, err);
  if (!selected) return 2;
  const std::vector<const Implementation*>& impls = *selected;
  std::vector<conformance::Case> plan = conformance::cases(impls);
  std::erase_if(plan, [&](const conformance::Case& c) { return !case_selected(o, c); });
  if (plan.empty()) {
    err << "attnbench check: --case " << joined(o.cases)
        << ": matches none of the suite's cases for these implementations (case labels look like "
           "b2_hq8_hkv2_sq65_skv40_d64_causal_bf16; globs: * and ?)\n";
    return 2;
  }
  if (!o.quiet) {
    err << "attnbench check: " << impls.size() << " implementation"
        << (impls.size() == 1 ? "" : "s") << ", " << plan.size()
        << " cases (the conformance suite: " << conformance::shapes().size()
        << " shapes in the dtypes and passes each declares)\n";
  }

  const Clock::time_point t0 = Clock::now();
  Clock::time_point last = t0;
  SuiteTally st;
  for (std::size_t n = 0; n < plan.size(); ++n) {
    const conformance::Case& c = plan[n];
    check_one(c, st, out);
    if (!o.quiet && seconds_since(last) >= 10.0 && n + 1 < plan.size()) {
      last = Clock::now();
      err << "  [" << n + 1 << "/" << plan.size() << "] " << c.name() << " ("
          << fixed1(seconds_since(t0)) << " s)\n";
    }
  }
  const Tally all = total(impls, st, o.quiet, err);
  // SKIP, not PASS, when nothing was checked (e.g. CUDA implementations on a machine without a
  // GPU): the exit code stays 0, as for a run whose rows all skip, but no CI log can read it as a
  // pass.
  const char* word = all.failed > 0 ? "FAIL" : all.passed + all.xfailed == 0 ? "SKIP" : "PASS";
  out << "attnbench check: " << word << ": " << impls.size()
      << " implementation" << (impls.size() == 1 ? "" : "s") << ", " << plan.size()
      << " cases: " << all.text() << " (" << fixed1(seconds_since(t0)) << " s)\n";
  if (all.passed == 0 && all.failed == 0 && all.xfailed == 0)
    out << "attnbench check: note: every case was skipped: nothing was checked\n";
  return all.failed > 0 ? 1 : 0;
}

}  // namespace attnbench
