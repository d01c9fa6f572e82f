// The run loop: every (case, implementation, option set, pass) of a config, end to end.
//
// Phase 1, per case: seeded inputs (made once, the same for every implementation), the float64
// reference (once, full or sampled), the same-device naive baseline's outputs (once per device
// and pass), then for each row: supports? (else SKIP with the reason), the validation call
// (validation.hpp: poisoned outputs, one call inside its NVTX range, the peak memory), the
// verdict and, with --dump, the tensors as .npy (dump.hpp). A throwing implementation gives a
// FAIL row, an allocation failure a SKIP row; the run goes on.
// Phase 2: every row that passed is timed through Google Benchmark (timing.hpp: CUDA events and
// an L2 flush before each call unless hot; CPU: wall clock), and its statistics merged into it.
// The results file (results.hpp) is rewritten atomically after each case and each timed row
// (complete=false) and at the end; then the table (render.hpp) is printed. Ctrl-C
// (interrupt.hpp) finishes the current row and writes what was measured.
// --resume: the rows of an earlier run of the same config, mode and build that have a verdict
// (and, unless profiling, a time) are kept as they are, and only the others run.
#pragma once

#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/config.hpp"
#include "attnbench/results.hpp"

namespace attnbench {

struct RunOptions {
  std::string config_path;   // recorded in the context ("" for an ad-hoc problem)
  std::string out_path;      // results file; "" = do not write one
  bool profile = false;      // one validation call per row, no timing (for ncu / nsys)
  bool quiet = false;        // no progress lines, no Google Benchmark console output
  std::string dump_dir;      // "" = no .npy dump
  std::string command_line;  // recorded in the context
  // --benchmark_* flags given on the command line: name without dashes (e.g.
  // "benchmark_repetitions") -> value ("" for a bare flag). They win over the config's timing
  // settings; with benchmark_format, stdout carries Google Benchmark's report in that format and
  // the final table goes to err (timing.hpp).
  std::map<std::string, std::string> benchmark_flags;
  // --resume: an earlier results file, read from resume_path ("" when not resuming). run_config
  // refuses it (throws, before writing anything) unless it is of the same config, mode and build
  // (resume_refusal); its rows that kept_on_resume() accepts are kept, those that
  // verdict_kept_on_resume() accepts keep their verdict and are timed, the others run.
  std::string resume_path;
  ResultsFile resume;
  // A worker of `run --devices` (devices.hpp): only the cases whose index (in the config's run
  // order) is in only_cases run (all when empty); CUDA rows are labelled "cuda:<cuda_device>",
  // the parent's index of the one GPU the worker sees; worker_note goes into the context.
  std::set<int> only_cases;
  int cuda_device = 0;
  std::string worker_note;
  // Other files of the run that out_path must not be, with what they are (e.g. Google
  // Benchmark's --benchmark_out); config_path is checked as "the config file" anyway.
  std::vector<std::pair<std::string, std::string>> other_files;
};

// The context block of a run's results file: collect_context() and the run's config, seed,
// command line and mode (shared by run_config and the parent of `run --devices`).
nlohmann::ordered_json run_context(const Config& config, const RunOptions& opts);

// Reason of the SKIP rows of CUDA implementations on a machine without a usable GPU.
inline constexpr const char* kNoCudaDevice = "no CUDA device";

// Runs the config. Progress goes to err, the final table to out. Returns the exit code:
// 0 every row passed or was skipped, 1 a row failed, 130 interrupted by SIGINT (the results
// file is then written with complete=false). Throws std::runtime_error, before any work and
// before writing anything, when the results file may not or cannot be written (output_refusal:
// a device, FIFO, socket, directory, read-only file, the config or another file of the run),
// another run holds its lock (OutputBusy, naming it), the --dump folder cannot be made, or
// opts.resume may not be resumed (resume_refusal). The results file is locked (OutputLock) for
// the whole run.
int run_config(const Config& config, const RunOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace attnbench
