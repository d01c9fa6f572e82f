// Text output of results: pipe (markdown) and CSV tables, used by `table` and `compare`, and the
// table a run prints when it ends.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "attnbench/results.hpp"

namespace attnbench {

// "1 row", "3 rows": a count and its noun, singular or plural (nouns with a plain -s plural).
inline std::string count_of(long long n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

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

// The readable table printed at the end of a run: every row that ran; skipped rows are counted
// by reason below it (the results file has each one).
void print_run_table(const ResultsFile& results, std::ostream& out);

}  // namespace attnbench
