// `compare --rerun`: measures rows of a results file again with an attnbench binary, so that a
// row found slower is decided on fresh samples rather than on one run's luck (a busy machine, a
// burst of another process). The rows of one round in one invocation:
//   BINARY run CONFIG --case C1 --case C2 ... --impl I1 ... --pass P1 ...
//          --benchmark_filter=^(ROW1|ROW2|...)(/|$) --benchmark_repetitions=N --verify off
//          --quiet --out TMP/rerun.json
// CONFIG is the file's own config as run (context.config: the overrides included); the filter
// times exactly the rows (other combinations of those cases, implementations and passes run once,
// untimed); --verify off leaves out the reference and the naive baseline (the row's verdict is in
// the file already; NaN, Inf and unwritten outputs still fail), so an invocation costs little
// more than its timing and compare can alternate BASE's and NEW's binaries, seconds apart.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attnbench/results.hpp"

namespace attnbench {

class Rerunner {
 public:
  // binary: an attnbench executable (or a script running one); origin: the results file whose
  // config it runs. Throws std::runtime_error when the binary is not executable or origin has
  // no config.
  Rerunner(const std::string& binary, const ResultsFile& origin);
  ~Rerunner();
  Rerunner(const Rerunner&) = delete;
  Rerunner& operator=(const Rerunner&) = delete;

  // The rows measured again in one invocation, with `repetitions` repetitions: the rerun's own
  // rows (status, time) by key (ResultRow::key); a row the run did not have is absent. Throws
  // std::runtime_error when the binary cannot run, exits with 2, or writes no results file.
  std::map<std::string, ResultRow> measure(const std::vector<const ResultRow*>& rows,
                                           int repetitions);

  // The git revision the binary recorded (after the first measure).
  const std::string& revision() const { return revision_; }
  int runs() const { return runs_; }

 private:
  std::string binary_;
  std::filesystem::path dir_, config_, out_;
  std::string revision_;
  int runs_ = 0;
};

// The regular expression Google Benchmark's --benchmark_filter needs to time exactly these
// names (each escaped; a name matches whole, or followed by Google Benchmark's "/..." suffixes).
std::string exact_filter(const std::vector<std::string>& names);

}  // namespace attnbench
