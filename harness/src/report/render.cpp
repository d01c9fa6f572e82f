// Text tables (markdown and CSV) and the table printed at the end of a run.
#include "attnbench/render.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <ostream>

#include "attnbench/ceilings.hpp"

namespace attnbench {

namespace {

// Display width: UTF-8 continuation bytes take no column.
std::size_t width(const std::string& s) {
  std::size_t w = 0;
  for (const char c : s) w += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return w;
}

std::string md_cell(const std::string& s) {
  std::string r;
  for (const char c : s) {
    if (c == '|') r += '\\';
    r += c == '\n' ? ' ' : c;
  }
  return r;
}

bool numeric_like(const std::string& s) {
  if (s.empty() || s == "skip" || s == "FAIL" || s == "inf") return true;
  const char c = s[0];
  return (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+';
}

}  // namespace

void render_markdown(const TextTable& t, std::ostream& out) {
  if (!t.title.empty()) out << "### " << t.title << "\n\n";
  const std::size_t ncol = t.header.size();
  std::vector<std::size_t> w(ncol, 3);
  for (std::size_t c = 0; c < ncol; ++c) w[c] = std::max(w[c], width(md_cell(t.header[c])));
  for (const auto& r : t.rows)
    for (std::size_t c = 0; c < ncol && c < r.size(); ++c)
      w[c] = std::max(w[c], width(md_cell(r[c])));
  // Columns of numbers (and their skip/FAIL/- markers) right-aligned, text left-aligned.
  std::vector<bool> right(ncol, true);
  for (const auto& r : t.rows)
    for (std::size_t c = 0; c < ncol && c < r.size(); ++c)
      right[c] = right[c] && numeric_like(r[c]);
  if (ncol) right[0] = false;  // the row label
  auto line = [&](const std::vector<std::string>& cells) {
    out << "|";
    for (std::size_t c = 0; c < ncol; ++c) {
      const std::string s = c < cells.size() ? md_cell(cells[c]) : "";
      const std::string pad(w[c] - width(s), ' ');
      out << " " << (right[c] ? pad + s : s + pad) << " |";
    }
    out << "\n";
  };
  line(t.header);
  out << "|";
  // Streamed piece by piece: ":" + std::string(...) trips GCC 12's false -Wrestrict here.
  for (std::size_t c = 0; c < ncol; ++c) {
    const std::string dashes(w[c] + 1, '-');
    if (right[c])
      out << dashes << ":|";
    else
      out << ":" << dashes << "|";
  }
  out << "\n";
  for (const auto& r : t.rows) line(r);
  if (!t.note.empty()) out << "\n" << t.note << "\n";
  out << "\n";
}

std::string csv_escape(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string r = "\"";
  for (const char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
  return r + "\"";
}

void render_csv(const TextTable& t, std::ostream& out) {
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < cells.size(); ++c) out << (c ? "," : "") << csv_escape(cells[c]);
    out << "\n";
  };
  if (!t.title.empty()) line({t.title});
  line(t.header);
  for (const auto& r : t.rows) line(r);
  out << "\n";
}

// ---- The table at the end of a run -----------------------------------------------------------

namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string rate_text(double t) {
  return t >= 10 ? fmt("%.1f", t) : t >= 0.1 ? fmt("%.3f", t) : fmt("%.5f", t);
}

// One row of the run's table (a row that was not skipped); giga: the rate in GFLOP/s; bw: with
// the GB/s column (memory-bound rows: ResultRow::gbps), read_gbps > 0: and the fraction of the
// run's read ceiling (context.ceilings.read_tbps) after it; curve (the run's ceilings, when they
// have a read_curve): and a column with the fraction of a read of the row's own bytes
// (read_tbps_at).
std::vector<std::string> run_table_row(const ResultRow& r, bool giga, bool bw, double read_gbps,
                                       const nlohmann::ordered_json* curve) {
  std::string impl = r.impl;
  if (!r.options.empty()) {
    impl += " [";
    bool first = true;
    for (const auto& [k, v] : r.options) {
      impl += (first ? "" : ",") + k + "=" + std::to_string(v);
      first = false;
    }
    impl += "]";
  }
  std::string ratio = "-";
  if (r.verified && r.verify_mode != VerifyMode::off && !r.outputs.empty() && !r.baseline.empty()) {
    ratio = fmt("%.2f", r.max_ratio());
  }
  std::string note = r.reason;
  if (note.size() > 70) note = note.substr(0, 67) + "...";
  if (r.status == Status::pass && r.verified) note = to_string(r.verify_mode);
  const auto tf = r.tflops();
  // Built in column order (push_back, not an insert into the middle: g++ 13's -Warray-bounds
  // misfires on vector<string>::insert here).
  std::vector<std::string> cells;
  cells.reserve(12);
  cells.push_back(r.case_label);
  cells.push_back(impl);
  cells.emplace_back(to_string(r.pass));
  cells.emplace_back(r.status == Status::fail ? "FAIL" : to_string(r.status));
  cells.push_back(ratio);
  cells.push_back(r.time ? fmt("%.3f", r.time->median_ms) : "-");
  cells.push_back(r.time && r.time->repetitions > 1 ? fmt("%.1f", r.time->cv * 100) : "-");
  cells.push_back(tf ? rate_text(*tf * (giga ? 1e3 : 1)) : "-");
  if (bw) {
    const auto g = r.gbps();
    std::string cell = g ? rate_text(*g) : "-";
    if (g && read_gbps > 0) cell += fmt(" (%.0f%%)", 100 * *g / read_gbps);
    cells.push_back(cell);
    if (curve) {
      const auto at = g ? read_tbps_at(*curve, static_cast<double>(r.hbm_bytes)) : std::nullopt;
      cells.push_back(at ? fmt("%.0f%%", 100 * *g / (*at * 1e3)) : "-");
    }
  }
  cells.push_back(r.memory ? fmt("%.1f", static_cast<double>(r.memory->workspace_bytes) / (1 << 20))
                           : "-");
  cells.push_back(note);
  return cells;
}

// The table's lines: columns padded to their widest cell, numbers right-aligned, text
// left-aligned; the last column is not padded.
void print_aligned(const std::vector<std::string>& header,
                   const std::vector<std::vector<std::string>>& rows, std::ostream& out) {
  // Numbers: from err/naive to ws MiB (the column before the note).
  const std::size_t last_numeric = header.size() - 2;
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto numeric = [&](std::size_t c) { return c >= 4 && c <= last_numeric; };
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < cells.size(); ++c) {
      if (c + 1 == cells.size()) {
        out << cells[c];
        break;
      }
      out << (numeric(c) ? std::right : std::left) << std::setw(static_cast<int>(w[c])) << cells[c]
          << "  ";
    }
    out << std::left << "\n";
  };
  out << "\n";
  line(header);
  std::vector<std::string> rule;
  for (std::size_t c = 0; c < header.size(); ++c)
    rule.push_back(std::string(c + 1 == header.size() ? 4 : w[c], '-'));
  line(rule);
  for (const auto& r : rows) line(r);
}

// Per device: its rows, how many were timed, and the wall time its rows took (the run's
// context, device_wall_s: verification and timing).
void print_per_device(const ResultsFile& res, std::ostream& out) {
  struct Count {
    int rows = 0, pass = 0, fail = 0, skip = 0, timed = 0;
  };
  std::map<std::string, Count> by_device;
  for (const ResultRow& r : res.rows) {
    Count& c = by_device[r.device];
    ++c.rows;
    (r.status == Status::pass ? c.pass : r.status == Status::fail ? c.fail : c.skip)++;
    if (r.time) ++c.timed;
  }
  const auto wall = res.context.find("device_wall_s");
  for (const auto& [dev, c] : by_device) {
    out << "  " << dev << ": " << count_of(c.rows, "row") << ", " << c.pass << " pass, " << c.fail
        << " fail, " << c.skip << " skip, " << c.timed << " timed";
    if (wall != res.context.end() && wall->is_object() && wall->contains(dev) &&
        (*wall)[dev].is_number())
      out << ", " << fmt("%.1f", (*wall)[dev].get<double>()) << " s";
    out << "\n";
  }
}

}  // namespace

void print_run_table(const ResultsFile& res, std::ostream& out) {
  // One unit for the column, as `attnbench table` chooses it: GFLOP/s when every rate is below
  // 1 TFLOP/s (a CPU run), else TFLOP/s.
  double top = 0;
  for (const ResultRow& r : res.rows)
    if (const auto tf = r.tflops(); r.status == Status::pass && tf && std::isfinite(*tf))
      top = std::max(top, *tf);
  const bool giga = top > 0 && top < 1;
  // GB/s only when a row that ran is memory-bound (paged or decode: ResultRow::hbm_bytes).
  const bool bw = std::any_of(res.rows.begin(), res.rows.end(), [](const ResultRow& r) {
    return r.status != Status::skip && r.hbm_bytes > 0;
  });
  std::vector<std::string> header{
      "case",      "impl",      "pass", "status",
      "err/naive", "median ms", "cv %", giga ? "GFLOP/s" : "TFLOP/s",
      "ws MiB",    "note"};
  // The same run's HBM read ceiling, when it measured one (CUDA rows ran).
  double read_gbps = 0;
  const nlohmann::ordered_json* curve = nullptr;  // the ceilings, when they have a read curve
  if (const auto c = res.context.find("ceilings"); c != res.context.end() && c->is_object()) {
    if (const auto t = c->find("read_tbps"); t != c->end() && t->is_number())
      read_gbps = t->get<double>() * 1e3;
    if (const auto rc = c->find("read_curve"); rc != c->end() && rc->is_array() && !rc->empty())
      curve = &*c;
  }
  if (!bw) curve = nullptr;
  if (bw) header.insert(header.begin() + 8, read_gbps > 0 ? "GB/s (of read)" : "GB/s");
  // The fraction of a same-size read (the read curve at the row's hbm_bytes): what a call of that
  // many bytes can reach, its fixed cost included.
  if (curve) header.insert(header.begin() + 9, "of read at size");
  std::vector<std::vector<std::string>> rows;
  // Skipped rows are counted by reason below the table, not listed: in a sweep they are
  // mostly "no backward pass" or "no CUDA device", and would bury the rows that ran.
  std::map<std::string, int> skipped;
  int n_pass = 0, n_fail = 0, n_skip = 0;
  for (const ResultRow& r : res.rows) {
    (r.status == Status::pass ? n_pass : r.status == Status::fail ? n_fail : n_skip)++;
    if (r.status == Status::skip) {
      ++skipped[r.reason];
      continue;
    }
    rows.push_back(run_table_row(r, giga, bw, read_gbps, curve));
  }
  print_aligned(header, rows, out);
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [why, n] : skipped) by_count.emplace_back(n, why);
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [n, why] : by_count) out << "skipped " << count_of(n, "row") << ": " << why << "\n";
  out << count_of(static_cast<long long>(res.rows.size()), "row") << ": " << n_pass << " pass, " << n_fail
      << " fail, " << n_skip << " skip";
  if (!res.complete) out << "; INCOMPLETE: " << res.stop_reason;
  out << "\n";
  print_per_device(res, out);
}

}  // namespace attnbench
