// `attnbench compare BASE.json NEW.json`: a noise-aware regression gate for CI.
//
// Rows are matched on (case, impl, pass, params, device). For each match it prints the base and
// new median times, new/base, the speedup (base/new), the worst error growth over the outputs
// and the status change. A matched row REGRESSED when any of these holds:
//
//  1. Slower beyond the noise. With spread(r) = max(cv * median_ms, median_ms - min_ms) (the
//     repetitions' standard deviation, or how far the median sits above the best run, whichever
//     is larger), a row is slower when
//         new.median > base.median * (1 + threshold)                      and
//         new.median - base.median > spread(base) + spread(new).
//     The spreads are added, not combined in quadrature, so that a CI gate does not flake on
//     noisy machines: a change smaller than the two runs' noise together is not reported.
//     Rows without timing in either file are not time-checked.
//  2. The status got worse: base "pass" and new "fail" or "skip".
//  3. An error grew: for an output present in both, new.max_abs > error_factor * max(base.max_abs,
//     base.atol / 4). The floor keeps a baseline with (near-)zero error, e.g. identical
//     arithmetic, from turning any rounding difference into a regression: a quarter of the
//     tolerance is below the dtype's own rounding of the reference.
//
// A row of BASE missing from NEW is reported and is a regression unless allow_missing. A row only
// in NEW is reported as information. When the two contexts differ in device name, SM or memory
// clock, CPU model, build type, compiler, CUDA driver or runtime, when either run was made from a
// dirty tree or is incomplete, or when matched rows were timed hot in one run and with flushed
// caches in the other, a "WARNING:" line says so: the comparison may measure the setup, not the
// code.
//
// Exit code: 0 no regression, 1 regression, 2 bad input (unreadable, not JSON, wrong schema).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "attnbench/results.hpp"

namespace attnbench {

struct CompareOptions {
  std::string base, next;      // paths of the two results files
  double threshold = 0.05;     // relative slowdown tolerated (on top of the noise)
  bool allow_missing = false;  // rows of base absent in next are not a failure
  double error_factor = 2.0;   // max_abs growth tolerated
};

// What compare found, for callers that want more than the printed report.
struct CompareSummary {
  int matched = 0, regressed = 0, improved = 0, missing = 0, added = 0;
  std::vector<std::string> warnings;  // context differences, without the "WARNING: " prefix
  int exit_code() const { return regressed > 0 ? 1 : 0; }
};

// Compares two parsed files; prints the report on out.
CompareSummary compare_results(const ResultsFile& base, const ResultsFile& next,
                               const CompareOptions& opts, std::ostream& out);

// Loads both files, compares, prints. Returns the exit code (0, 1 or 2; messages on err).
int run_compare(const CompareOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace attnbench
