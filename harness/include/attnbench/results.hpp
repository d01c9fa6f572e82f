// The results file (docs/results_schema.md): its one row model, the atomic writer, the two
// readers and the checks of `run --resume`. Everything in C++ that writes or reads a results file
// goes through this module:
//   - the run loop fills ResultRows and writes them (write_results, after every case);
//   - `table`, `compare` and `run --resume` read a file back into the same rows (load_results:
//     strict, a malformed file is a ResultsError naming the file, the JSON path and the value);
//   - tests and tools that want the JSON itself use read_results_json (lenient: any JSON object
//     with the schema tag).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

// The schema tag: its one definition in the C++ code (scripts/results_io.py holds Python's).
// Version 2 renamed the rows' "params" to "options"; the readers take version 1 files too,
// their "params" read as "options" (docs/results_schema.md, Compatibility).
inline constexpr const char* kResultsSchema = "attnbench.results/2";
inline constexpr const char* kResultsSchemaV1 = "attnbench.results/1";
// Whether the readers take a file with this schema tag (this version or an earlier one).
bool results_schema_supported(std::string_view tag);

enum class Status { pass, fail, skip };
const char* to_string(Status s);

struct TimeStats {
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  double cv = 0;  // stddev / mean over the repetitions (0 with one repetition)
  int repetitions = 1;
  std::int64_t iterations = 0;  // timed calls per repetition
  bool hot = false;             // caches not flushed between calls
  // Every repetition's time (its mean per call), in the order measured: what compare's
  // significance test reads. Empty in files written before it was recorded.
  std::vector<double> samples_ms;
  // The CPU cores other processes kept busy while this row was timed (/proc/stat minus this
  // process, averaged over its timing): how much of the machine was not ours. Absent off Linux
  // and in older files.
  std::optional<double> others_cores;
  // When not hot: how L2 was flushed before each call, "write" or "read" (FlushMode); empty in
  // files written before it was recorded (they were written flushes).
  std::string flush;
};

// median, min, mean, cv and repetitions of these samples (ms), and the samples themselves; the
// rest as default. All zero for none.
TimeStats summarize_samples(const std::vector<double>& samples_ms);

struct MemoryStats {
  std::int64_t io_bytes = 0;               // inputs + outputs of the pass
  std::int64_t workspace_bytes = 0;        // what the implementation asked for
  std::optional<std::int64_t> peak_bytes;  // absent when it could not be measured
  std::string peak_method;                 // how peak_bytes was measured (see the schema doc)
};

// One (case, implementation, option set, pass) of a run.
struct ResultRow {
  // What ran: from the run's plan, or read from the file.
  std::string case_label;  // "case": Problem::label()
  int case_index = -1;     // -1 when the file has none
  Problem problem;         // scale: the one used (0 only when a file omits it)
  Options options;         // the option set it ran with ("options"; "params" in version 1 files)
  std::string impl, device;  // device: "cpu" or "cuda:<index>"
  // The name the file wrote when it was a former name (the reader gives `impl` the current one,
  // Registry::canonical); "" otherwise. compare --rerun gives it to the binary that wrote it.
  std::string impl_in_file;
  Pass pass = Pass::fwd;
  double flops = 0;
  // Memory-bound rows (forward of a paged or decode problem, Problem::memory_bound): the bytes the
  // pass moves at least, Problem::hbm_bytes_fwd (K and V of the contexts once, Q, O); else 0.
  std::int64_t hbm_bytes = 0;
  std::string nvtx;  // the NVTX range of its calls

  // What it gave.
  Status status = Status::pass;
  std::string reason;                        // why fail/skip
  bool verified = false;                     // "verify" present: absent for rows that never ran
  VerifyMode verify_mode = VerifyMode::off;  // full | sampled | off, as resolved
  std::string baseline;                      // the naive implementation errors are compared to
  std::vector<OutputReport> outputs;
  std::optional<TimeStats> time;
  std::optional<MemoryStats> memory;
  // Merged in by tools after the run (ncu's HBM bytes); a run writes none, --resume keeps none.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  // The file's own "tflops", as read; a run leaves it empty and tflops() computes it.
  std::optional<double> tflops_in_file;

  double max_ratio() const;  // worst OutputReport::ratio, 0 when none
  // The schema's "tflops": tflops_in_file when read, else flops / median time when timed.
  std::optional<double> tflops() const;
  // hbm_bytes over the median time, in GB/s (1e9 bytes), when both are there.
  std::optional<double> gbps() const;
  // (case, impl, pass, options, device kind): what compare matches rows on. The kind ("cpu",
  // "cuda"), not the index: the rows of a `run --devices` sweep, spread over cuda:0..N-1, match
  // those of a one-GPU run (the context says which GPUs; compare warns when their model differs).
  std::string key() const;
  std::string device_kind() const;  // "cuda" of "cuda:3
  // impl, plus " [k=v, ...]" when options are given.
  std::string impl_label() const;
};

// FlashAttention convention: fwd, bwd = 2.5 x fwd, fwd_bwd = 3.5 x fwd.
double pass_flops(const Problem& p, Pass pass);
// A row's hbm_bytes: Problem::hbm_bytes_fwd for the forward of a memory-bound problem, else 0.
std::int64_t pass_hbm_bytes(const Problem& p, Pass pass);

struct ResultsFile {
  std::string path;  // where it was read from; "" for a run's own results
  bool complete = true;
  std::string stop_reason;
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  std::vector<ResultRow> rows;
};

// ---- Writer ----------------------------------------------------------------------------------

nlohmann::ordered_json problem_to_json(const Problem& p);
nlohmann::ordered_json row_to_json(const ResultRow& r);
nlohmann::ordered_json results_to_json(const ResultsFile& f);

// Writes text to path atomically: a temporary file in the same folder, fsync, rename (and an
// fsync of the folder), so a reader never sees half a file. Creates missing parent folders.
// Refuses (throws) a path that is a device, FIFO, socket, directory or read-only file
// (output_refusal); a symlink's target is replaced, the link kept.
// Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& text);
void write_results(const std::string& path, const ResultsFile& f);

// ---- Readers ---------------------------------------------------------------------------------

// A file that cannot be read, is not JSON, or does not follow the schema. The message names the
// file, the JSON path and the offending value.
struct ResultsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Strict: every row typed, as the writer wrote it. origin names the source in messages (a path,
// or "<fixture>"). Files of an earlier schema version and former names are read as today's: a
// row's "params" as "options" (both in one row is an error), a former implementation name as the
// current one (Registry::canonical; the row keeps the name written in impl_in_file). Throws
// ResultsError.
ResultsFile parse_results(const nlohmann::ordered_json& j, const std::string& origin);
ResultsFile load_results(const std::string& path);

// Lenient: the file as JSON, after checking its schema tag only (results_schema_supported); the
// rows as written (an older file's "params", former names). Throws ResultsError.
nlohmann::json read_results_json(const std::string& path);

// context.devices[0].name, else the CPU model, else "unknown device".
std::string device_name(const nlohmann::ordered_json& context);

// ---- run --devices: the parts of one run ------------------------------------------------------

// The parts written by the workers of one `run --devices` run (each a results file of its own
// cases) as one file: every part's rows, in case order (a part's own order within a case);
// complete when every part is; stop_reason names the parts that are not. The context is the
// caller's. Throws ResultsError when a row (its NVTX call name) is in two parts.
ResultsFile merge_parts(const std::vector<ResultsFile>& parts, nlohmann::ordered_json context);

// ---- run --resume ----------------------------------------------------------------------------

// Why a run (its config_hash, --profile, and git revision) must not resume `earlier`, read from
// `path`: another config, another mode or another build would mix two runs' rows under one
// context. "" when it may. The message starts with "--resume = <path>: ".
std::string resume_refusal(const ResultsFile& earlier, const std::string& path,
                           const std::string& config_hash, bool profile,
                           const std::string& git_revision);

// Whether a resumed run keeps an earlier row as it is: a FAIL, or a PASS with a time (any PASS
// when profiling, which times nothing). SKIP rows run again; untimed PASS rows, see below.
bool kept_on_resume(const ResultRow& earlier, bool profile);

// Whether a resumed run keeps an earlier row's verdict but times it again: a PASS without a time
// (verified, then cut before or during the timing phase, or "not timed: ..."), when the run times
// (not --profile). Its verification is not repeated (the same config, overrides and build wrote
// it: resume_refusal), which is most of a large case's cost (its inputs and float64 reference).
bool verdict_kept_on_resume(const ResultRow& earlier, bool profile);

// A kept row: the earlier row's measurements (status, reason, verification, time, memory) under
// the plan's identity of the row (`to`: case, problem, impl, options, pass, flops, nvtx).
void copy_measurements(const ResultRow& from, ResultRow& to);

}  // namespace attnbench
