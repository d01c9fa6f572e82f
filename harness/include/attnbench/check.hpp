// `attnbench check [--impl GLOB] [--device cpu|cuda] [--case GLOB]`: the conformance suite
// (conformance.hpp) on registered implementations, in-tree or out-of-tree (attnbench-NAME).
//
// For each selected implementation (every one by default) it runs every case of the suite, in
// the dtypes and passes the implementation declares, shape by shape (conformance::cases). Progress
// goes to `err`: the plan, a line every 10 seconds, and each implementation's tally at the end.
// `out` gets one FAIL line per failed case (implementation, pass, case, why), one XFAIL line per
// expected failure (conformance::Result::Status::xfail: declared by the implementation, reported
// with its reason, not counted as a failure) and the summary:
//
//   attnbench check: PASS: 4 implementations, 2373 cases: 2373 passed, 0 failed, 0 skipped;
//   planted faults caught 1306/1306 (40.3 s)
//
// (SKIP instead of PASS when every case was skipped: nothing was checked.)
//
// A case the implementation does not support, or whose device is absent, is skipped with the
// reason (the distinct reasons are listed per implementation). After a sticky CUDA error every
// later CUDA case is skipped with that reason (the failed case already fails the check).
// Exit code: 0 nothing failed (skips and expected failures included), 1 a case failed, 2 bad input, with a line on
// `err` naming the option and its value: an --impl glob that matches no implementation (on the
// --device), an unknown device or one this binary has no implementation of, a --case glob set
// that matches none of the selected implementations' cases.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace attnbench {

struct CheckOptions {
  std::vector<std::string> impls;  // globs; empty: every implementation
  std::string device;              // "cpu", "cuda", or empty: both
  std::vector<std::string> cases;  // globs on the case label; empty: every case
  bool quiet = false;              // no progress lines
};

int run_check(const CheckOptions& o, std::ostream& out, std::ostream& err);

}  // namespace attnbench
