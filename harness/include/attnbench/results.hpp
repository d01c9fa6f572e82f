// The results of a run (docs/results_schema.md): rows, their JSON form, and the atomic writer.
//
// The typed reader used by `compare` and `table` lives in table.hpp (parse_results); this file
// only writes, plus a plain JSON reader that checks the schema tag.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnbench/implementation.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

inline constexpr const char* kResultsSchema = "attnbench.results/1";

enum class Status { pass, fail, skip };
const char* to_string(Status s);

struct TimeResult {
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  double cv = 0;              // stddev / mean over the repetitions (0 with one repetition)
  int repetitions = 1;
  std::int64_t iterations = 0;  // timed calls per repetition
  bool hot = false;           // caches not flushed between calls
};

struct MemoryResult {
  std::int64_t io_bytes = 0;         // inputs + outputs of the pass
  std::int64_t workspace_bytes = 0;  // what the implementation asked for
  std::optional<std::int64_t> peak_bytes;  // absent when it could not be measured
  std::string peak_method;           // how peak_bytes was measured (see the schema doc)
};

struct RowResult {
  std::string case_label;
  int case_index = 0;
  Problem problem;
  Options params;
  std::string impl, device;  // device: "cpu" or "cuda:<index>"
  Pass pass = Pass::fwd;
  Status status = Status::pass;
  std::string reason;  // why fail/skip
  // Verification: absent for skipped rows that never ran.
  bool verified = false;
  VerifyMode verify_mode = VerifyMode::off;  // full | sampled | off, as resolved
  std::string baseline;                      // the naive implementation errors are compared to
  std::vector<OutputReport> outputs;
  std::optional<TimeResult> time;
  double flops = 0;
  std::optional<MemoryResult> memory;
  std::string nvtx;

  double max_ratio() const;  // worst OutputReport::ratio, 0 when none
  std::optional<double> tflops() const;
};

// FlashAttention convention: fwd, bwd = 2.5 x fwd, fwd_bwd = 3.5 x fwd.
double pass_flops(const Problem& p, Pass pass);

struct RunResults {
  bool complete = true;
  std::string stop_reason;
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  std::vector<RowResult> rows;
};

nlohmann::ordered_json problem_to_json(const Problem& p);
nlohmann::ordered_json row_to_json(const RowResult& r);
// The inverse of row_to_json for what a run measured: status, reason, verify, time, memory (null
// numbers back as NaN). The row's identity (case, problem, impl, params, pass, flops, nvtx) stays
// the caller's. Used by `run --resume` to keep an earlier file's rows.
void measurements_from_json(const nlohmann::json& j, RowResult& r);
nlohmann::ordered_json results_to_json(const RunResults& r);

// Writes text to path atomically: a temporary file in the same folder, fsync, rename (and an
// fsync of the folder), so a reader never sees half a file. Creates missing parent folders.
// Throws std::runtime_error naming the path.
void write_file_atomic(const std::string& path, const std::string& text);
void write_results(const std::string& path, const RunResults& r);

// Reads a results file as JSON and checks its "schema" tag. Throws std::runtime_error.
nlohmann::json read_results_json(const std::string& path);

}  // namespace attnbench
