// Reading results files (docs/results_schema.md) and rendering them as the papers' tables.
//
// `attnbench table RESULTS.json` groups rows by (pass, head_dim, causal, dtype). For each group it
// prints one table whose rows are implementations (with their params, e.g. block_c=64) and whose
// columns are the cases of the group, labelled by the problem fields that vary inside it (the
// swept axes: seq, or batch and seq together for a zipped sweep). Cells hold the chosen metric of
// that row; a skipped row shows "skip", a failed one "FAIL", an untimed one "-". Then come a
// speedup table (baseline time / impl time on the same case), a memory table and, when ncu bytes
// were merged into the rows' "extra", an HBM traffic table.
//
// Formats: "markdown" (pipe tables, columns padded so they also read well in a terminal),
// "csv" (the same wide tables; each preceded by a one-cell title line and followed by an empty
// line), and "long" (tidy CSV: one line per results row with every metric and the ratios against
// the baseline, for spreadsheets and pandas).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnbench {

// ---- Results reader --------------------------------------------------------------------------

// A file that cannot be read, is not JSON, or does not follow the schema. The message names the
// file, the JSON path and the offending value.
struct ResultsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TimeStats {
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  double cv = 0;  // coefficient of variation (stddev / mean) over repetitions
  int repetitions = 0;
  bool hot = false;
};

struct OutputError {
  std::string name;  // O, LSE, dQ, dK, dV
  double max_abs = 0, rel_l2 = 0, atol = 0;
  std::int64_t nonfinite = 0;
  bool ok = true;
};

struct MemoryStats {
  std::int64_t io_bytes = 0, workspace_bytes = 0, peak_bytes = 0;
};

// The problem fields of a row, as written in "problem" (dtype kept as text).
struct ProblemFields {
  int batch = 0, heads_q = 0, heads_kv = 0, seq_q = 0, seq_kv = 0, head_dim = 0;
  bool causal = false;
  double scale = 0;
  std::string dtype;
};

struct ResultRow {
  std::string case_label;  // "case"
  int case_index = -1;
  ProblemFields problem;
  nlohmann::json params = nlohmann::json::object();
  std::string impl, device, pass, status, reason;
  std::string verify_mode;  // full | sampled | off | "" when absent
  std::vector<OutputError> outputs;
  std::optional<TimeStats> time;  // absent when the row was not timed
  double flops = 0;
  std::optional<double> tflops;
  std::optional<MemoryStats> memory;
  nlohmann::json extra = nlohmann::json::object();

  // (case, impl, pass, params, device): what compare matches rows on.
  std::string key() const;
  // impl, plus " [k=v, ...]" when params are given.
  std::string impl_label() const;
};

struct ResultsFile {
  std::string path;
  bool complete = true;
  std::string stop_reason;
  nlohmann::json context = nlohmann::json::object();
  std::vector<ResultRow> rows;
};

// Throws ResultsError. origin names the source in messages (a path, or "<fixture>").
ResultsFile parse_results(const nlohmann::json& j, const std::string& origin);
ResultsFile load_results(const std::string& path);

// context.devices[0].name, else the CPU model, else "unknown device".
std::string device_name(const nlohmann::json& context);

// ---- Text tables -----------------------------------------------------------------------------

struct TextTable {
  std::string title;  // printed above the table ("### title" in markdown)
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string note;  // printed below the table, if not empty
};
// Pipe table; numeric-looking columns right-aligned.
void render_markdown(const TextTable& t, std::ostream& out);
void render_csv(const TextTable& t, std::ostream& out);
std::string csv_escape(const std::string& s);

// ---- attnbench table -------------------------------------------------------------------------

struct TableOptions {
  std::string results;
  std::string format = "markdown";  // markdown | csv | long
  // Implementation the speedup and memory-reduction tables divide by. Empty: the first of
  // cuda.standard_cublas, cpu.naive_3pass present in each group.
  std::string baseline;
  std::string metric = "tflops";  // tflops | ms | memory (peak MiB)
};

// Exit code: 0, or 2 for a bad results file or a bad option (message on err).
int run_table(const TableOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace attnbench
