// `attnbench table RESULTS.json` groups rows by (pass, head_dim, causal, dtype). For each group it
// prints one table whose rows are implementations (with their options, e.g. block_c=64) and whose
// columns are the cases of the group, labelled by the problem fields that vary inside it (the
// swept axes: seq, or batch and seq together for a zipped sweep). Cells hold the chosen metric of
// that row; a skipped row shows "skip", a failed one "FAIL", an untimed one "-". Then come a
// speedup table (baseline time / impl time on the same case), a memory table and, when ncu bytes
// were merged into the rows' "extra", an HBM traffic table.
//
// Formats: "markdown" (pipe tables, columns padded so they also read well in a terminal), "csv"
// (tidy: one header line, then one line per results row with every metric and the ratios against
// the baseline, for spreadsheets and pandas.read_csv; "long" is its earlier name), and
// "wide-csv" (the markdown tables as CSV blocks, each preceded by a one-cell title line and
// followed by an empty line).
#pragma once

#include <iosfwd>
#include <string>

namespace attnbench {

struct TableOptions {
  std::string results;
  std::string format = "markdown";  // markdown | csv (tidy; "long" too) | wide-csv
  // Implementation the speedup and memory-reduction tables divide by. Empty: the first of
  // cuda.standard_cublas, cpu.naive_3pass present in each group.
  std::string baseline;
  std::string metric = "tflops";  // tflops | ms | memory (peak MiB)
};

// Exit code: 0, or 2 for a bad results file or a bad option (message on err).
int run_table(const TableOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace attnbench
