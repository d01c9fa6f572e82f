// `compare --rerun`: re-measures some rows of a results file with an attnbench binary, so that a
// row flagged as slower is decided on fresh samples rather than on one run's luck (a busy
// machine, a burst of another process). It runs
//   BINARY run CONFIG --case C... --impl I... --pass P... --benchmark_filter=^(ROW|...)(/|$)
//          --benchmark_repetitions=N --quiet --out TMP/rerun-K.json
// with CONFIG the file's own config as run (context.config: the overrides included), the cases,
// implementations and passes of the rows, the filter timing exactly those rows (the others of
// the product are verified but not timed), N the rows' repetitions, and reads the rows back.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "attnbench/results.hpp"

namespace attnbench {

// The rows of `origin` named by keys (ResultRow::key()), measured again by `binary`. The returned
// file holds the rows of that run (the timed ones among them). log gets one line per run. Throws
// std::runtime_error when the binary cannot be run, exits with 2, or writes no results file; a
// row that fails or cannot be timed is returned as it is (compare judges it).
ResultsFile remeasure(const std::string& binary, const ResultsFile& origin,
                      const std::vector<const ResultRow*>& rows, const std::string& tag,
                      std::ostream& log);

// The regular expression Google Benchmark's --benchmark_filter needs to time exactly these
// names (each escaped; a name matches whole, or followed by Google Benchmark's "/..." suffixes).
std::string exact_filter(const std::vector<std::string>& names);

}  // namespace attnbench
