// `attnbench table`: a results file rendered as the papers' tables. The layout of the tables is
// described in table.hpp; the file is read by results.hpp's typed reader.
#include "attnbench/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <tuple>

#include "attnbench/render.hpp"
#include "attnbench/results.hpp"

namespace attnbench {

using ojson = nlohmann::ordered_json;

namespace {

// Looks up a key of an object; null when absent.
const ojson* find(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// Three significant figures without exponents for the magnitudes these tables hold.
std::string fmt(double v) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  const double a = std::fabs(v);
  if (a >= 100 || a == 0)
    std::snprintf(b, sizeof b, "%.0f", v);
  else if (a >= 10)
    std::snprintf(b, sizeof b, "%.1f", v);
  else if (a >= 1)
    std::snprintf(b, sizeof b, "%.2f", v);
  else if (a >= 1e-3)
    std::snprintf(b, sizeof b, "%.3g", v);
  else
    std::snprintf(b, sizeof b, "%.2e", v);
  return b;
}
std::string fmt_ratio(double v) {
  if (!std::isfinite(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

constexpr double kMiB = 1024.0 * 1024.0;

using GroupKey = std::tuple<int, int, bool, std::string>;  // pass, head_dim, causal, dtype

// One table group: its cases (columns) and row labels (implementations).
struct Group {
  std::string pass;
  int head_dim = 0;
  bool causal = false;
  std::string dtype;
  std::vector<const ResultRow*> rows;
  std::vector<std::string> cases;                                        // column order
  std::map<std::string, const Problem*> prob;                      // case -> problem
  std::vector<std::string> labels;                                       // row order (file order)
  std::map<std::string, std::string> impl_of;                            // label -> impl name
  std::map<std::pair<std::string, std::string>, const ResultRow*> cell;  // (label, case)
  std::string baseline_label;  // empty: no baseline in this group
  std::string title;
  std::vector<std::string> col_names;
};

struct Field {
  const char* name;
  double (*get)(const Problem&);
};
// Order of priority when sorting columns: the sequence lengths are the usual swept axis.
const Field kFields[] = {
    {"skv", [](const Problem& p) { return double(p.seq_kv); }},
    {"sq", [](const Problem& p) { return double(p.seq_q); }},
    {"b", [](const Problem& p) { return double(p.batch); }},
    {"hq", [](const Problem& p) { return double(p.heads_q); }},
    {"hkv", [](const Problem& p) { return double(p.heads_kv); }},
    {"scale", [](const Problem& p) { return p.scale; }},
};
constexpr int kNumFields = 6;

std::string num_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Labels the columns by what varies between the group's cases and titles the group by what
// does not.
void name_columns(Group& g) {
  bool varies[kNumFields] = {};
  for (int f = 0; f < kNumFields; ++f)
    for (const auto& c : g.cases)
      if (kFields[f].get(*g.prob[c]) != kFields[f].get(*g.prob[g.cases[0]])) varies[f] = true;
  bool square = true;  // seq_q == seq_kv in every case: print one "seq"
  for (const auto& c : g.cases) square = square && g.prob[c]->seq_q == g.prob[c]->seq_kv;
  const bool seq_varies = varies[0] || varies[1];

  auto describe = [&](const Problem& p, bool want_varying) {
    std::vector<std::string> parts;
    // Columns show seq when it varies, or when nothing does; otherwise the title does.
    const bool others_vary = varies[2] || varies[3] || varies[4] || varies[5];
    const bool seq_shown =
        want_varying ? (seq_varies || !others_vary) : (!seq_varies && others_vary);
    if (seq_shown) {
      if (square)
        parts.push_back("seq " + std::to_string(p.seq_kv));
      else
        parts.push_back("sq " + std::to_string(p.seq_q) + " skv " + std::to_string(p.seq_kv));
    }
    for (int f = 2; f < kNumFields; ++f) {
      if (varies[f] != want_varying) continue;
      // The default scale 1/sqrt(head_dim) goes without saying.
      if (f == 5 && !want_varying &&
          (p.scale == 0 || std::fabs(p.scale * std::sqrt(double(p.head_dim)) - 1) < 1e-9))
        continue;
      parts.push_back(std::string(kFields[f].name) + " " + num_text(kFields[f].get(p)));
    }
    std::string s;
    for (const auto& x : parts) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  for (const auto& c : g.cases) g.col_names.push_back(describe(*g.prob[c], true));
  g.title = g.pass + " · d " + std::to_string(g.head_dim) + " · " +
            (g.causal ? "causal" : "non-causal") + " · " + g.dtype;
  const std::string fixed = describe(*g.prob[g.cases[0]], false);
  if (!fixed.empty()) g.title += " · " + fixed;
}

std::vector<Group> make_groups(const ResultsFile& f, const std::string& baseline) {
  // An impl seen on more than one kind of device gets "@cpu" / "@cuda" in its label; the GPUs of
  // a `run --devices` sweep (cuda:0 .. cuda:N-1) are one kind, so their rows share a column.
  std::map<std::string, std::set<std::string>> devices_of;
  for (const auto& r : f.rows) devices_of[r.impl_label()].insert(r.device_kind());
  auto label_of = [&](const ResultRow& r) {
    return devices_of[r.impl_label()].size() > 1 ? r.impl_label() + " @" + r.device_kind()
                                                 : r.impl_label();
  };

  std::map<GroupKey, Group> groups;
  for (const auto& r : f.rows) {
    const std::string dtype(to_string(r.problem.dtype));
    Group& g = groups[{static_cast<int>(r.pass), r.problem.head_dim, r.problem.causal, dtype}];
    g.pass = to_string(r.pass);
    g.head_dim = r.problem.head_dim;
    g.causal = r.problem.causal;
    g.dtype = dtype;
    g.rows.push_back(&r);
    if (!g.prob.count(r.case_label)) {
      g.prob[r.case_label] = &r.problem;
      g.cases.push_back(r.case_label);
    }
    const std::string label = label_of(r);
    if (std::find(g.labels.begin(), g.labels.end(), label) == g.labels.end())
      g.labels.push_back(label);
    g.impl_of[label] = r.impl;
    g.cell.emplace(std::make_pair(label, r.case_label), &r);  // first row wins on duplicates
  }

  std::vector<Group> out;
  for (auto& kv : groups) {
    Group& g = kv.second;  // a named reference: clang < 16 cannot capture a structured binding
    std::stable_sort(g.cases.begin(), g.cases.end(),
                     [&](const std::string& a, const std::string& b) {
                       for (const auto& fld : kFields) {
                         const double x = fld.get(*g.prob[a]), y = fld.get(*g.prob[b]);
                         if (x != y) return x < y;
                       }
                       return false;
                     });
    name_columns(g);
    // Baseline: the requested label (to pick an options variant) or impl name, else the first
    // default present; an exact label match is the variant without options.
    std::vector<std::string> wanted;
    if (!baseline.empty())
      wanted = {baseline};
    else
      wanted = {"cuda.standard_cublas", "cpu.naive_3pass"};
    for (const auto& w : wanted) {
      if (std::find(g.labels.begin(), g.labels.end(), w) != g.labels.end()) {
        g.baseline_label = w;
        break;
      }
      for (const auto& l : g.labels)
        if (g.impl_of[l] == w) {
          g.baseline_label = l;
          break;
        }
      if (!g.baseline_label.empty()) break;
    }
    out.push_back(std::move(g));
  }
  return out;
}

const ResultRow* find_cell(const Group& g, const std::string& label, const std::string& c) {
  const auto it = g.cell.find({label, c});
  return it == g.cell.end() ? nullptr : it->second;
}

bool timed_pass(const ResultRow* r) {
  return r && r->status == Status::pass && r->time;
}

std::string status_cell(const ResultRow* r) {
  if (!r) return "";
  if (r->status == Status::skip) return "skip";
  if (r->status == Status::fail) return "FAIL";
  return "";
}

double metric_value(const ResultRow& r, const std::string& metric) {
  if (metric == "ms") return r.time ? r.time->median_ms : NAN;
  if (metric == "memory")
    return r.memory && r.memory->peak_bytes.value_or(0) > 0 ? double(*r.memory->peak_bytes) / kMiB : NAN;
  return r.tflops().value_or(NAN);
}

double speedup(const ResultRow* base, const ResultRow* r) {
  if (!timed_pass(base) || !timed_pass(r)) return NAN;
  return base->time->median_ms / r->time->median_ms;
}

double footprint(const ResultRow* r) {
  if (!r || !r->memory || r->status == Status::skip) return NAN;
  return double(r->memory->io_bytes + r->memory->workspace_bytes);
}
double peak(const ResultRow* r) {
  if (!r || !r->memory || r->status == Status::skip || r->memory->peak_bytes.value_or(0) <= 0) return NAN;
  return double(*r->memory->peak_bytes);
}
double hbm_bytes(const ResultRow* r) {
  if (!r) return NAN;
  const ojson* rd = find(r->extra, "hbm_read_bytes");
  const ojson* wr = find(r->extra, "hbm_write_bytes");
  if (!rd || !wr || !rd->is_number() || !wr->is_number()) return NAN;
  return rd->get<double>() + wr->get<double>();
}

std::vector<std::string> header_for(const Group& g, const char* corner) {
  std::vector<std::string> h{corner};
  h.insert(h.end(), g.col_names.begin(), g.col_names.end());
  return h;
}

// One row per label: cell(label, row) gives the text for each case, with skip/FAIL first.
template <typename F>
TextTable wide(const Group& g, const std::string& title, const std::vector<std::string>& labels,
               F value) {
  TextTable t;
  t.title = title;
  t.header = header_for(g, "impl");
  for (const auto& l : labels) {
    std::vector<std::string> row{l};
    for (const auto& c : g.cases) {
      const ResultRow* r = find_cell(g, l, c);
      const std::string s = status_cell(r);
      row.push_back(!r ? "" : !s.empty() ? s : value(r, c));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

// The labels with a row that ran in some case. Implementations skipped in every case of the
// group (e.g. a forward-only one in a bwd group) would be rows of "skip": they go to not_run, for
// a note, instead.
std::vector<std::string> shown_labels(const Group& g, std::string& not_run) {
  std::vector<std::string> shown;
  for (const auto& l : g.labels) {
    const ResultRow* ran = nullptr;
    const ResultRow* any = nullptr;
    for (const auto& c : g.cases) {
      const ResultRow* r = find_cell(g, l, c);
      if (r && !any) any = r;
      if (r && r->status != Status::skip && !ran) ran = r;
    }
    if (ran)
      shown.push_back(l);
    else
      not_run += (not_run.empty() ? "" : "; ") + l +
                 (any && !any->reason.empty() ? " (" + any->reason + ")" : "");
  }
  return shown;
}

// The table of the metric (--metric) itself.
TextTable metric_table(const Group& g, const TableOptions& o, const std::vector<std::string>& shown,
                       const std::string& not_run) {
  // CPU rates are far below 1 TFLOP/s: print GFLOP/s then.
  double top = 0;
  for (const ResultRow* r : g.rows)
    if (r->status == Status::pass && std::isfinite(metric_value(*r, o.metric)))
      top = std::max(top, metric_value(*r, o.metric));
  const bool giga = o.metric == "tflops" && top > 0 && top < 1;
  const char* unit = o.metric == "ms"       ? "median ms"
                     : o.metric == "memory" ? "peak MiB"
                     : giga                 ? "GFLOP/s"
                                            : "TFLOP/s";
  TextTable t = wide(g, g.title + " — " + unit, shown, [&](const ResultRow* r, const std::string&) {
    return fmt(metric_value(*r, o.metric) * (giga ? 1e3 : 1));
  });
  t.note = "skip: not supported or out of memory; FAIL: verification failed; -: not timed.";
  if (!not_run.empty()) t.note += "\nSkipped in every case: " + not_run + ".";
  return t;
}

// Memory: workspace and peak per row (with the inputs' and outputs' size on top), and the
// reduction over the baseline.
void add_memory_tables(const Group& g, const std::vector<std::string>& shown,
                       const std::vector<std::string>& others, bool any_peak,
                       std::vector<TextTable>& tables) {
  auto base_of = [&](const std::string& c) { return find_cell(g, g.baseline_label, c); };
  TextTable t =
      wide(g, g.title + " — memory (MiB): workspace / peak", shown,
           [&](const ResultRow* r, const std::string&) {
             if (!r->memory) return std::string("-");
             return fmt(double(r->memory->workspace_bytes) / kMiB) + " / " + fmt(peak(r) / kMiB);
           });
  std::vector<std::string> io{"(inputs + outputs)"};
  for (const auto& c : g.cases) {
    double v = NAN;
    for (const auto& l : g.labels)
      if (const ResultRow* r = find_cell(g, l, c); r && r->memory && !std::isfinite(v))
        v = double(r->memory->io_bytes);
    io.push_back(fmt(v / kMiB));
  }
  t.rows.insert(t.rows.begin(), io);
  std::set<std::string> methods;
  for (const ResultRow* r : g.rows)
    if (r->memory && !r->memory->peak_method.empty()) methods.insert(r->memory->peak_method);
  const bool rss = methods.count("VmHWM-reset") || methods.count("VmHWM-growth");
  t.note = std::string(
               "workspace: what the implementation asked the harness for; peak: measured during "
               "the call") +
           (any_peak ? "" : " (not measured in this run)") + "." +
           (methods.count("cudaMemGetInfo") ? " CUDA peak: device memory in use (cudaMemGetInfo)."
                                            : "") +
           (rss ? " CPU peak: the growth of the process's resident memory (VmHWM) over the call: "
                  "pages written only, so a workspace that is not written in full counts for less "
                  "than its size, and small sizes show the page granularity."
                : "");
  tables.push_back(std::move(t));
  if (!g.baseline_label.empty() && !others.empty()) {
    tables.push_back(
        wide(g, g.title + " — memory reduction vs " + g.baseline_label + " (×): footprint / peak",
             others, [&](const ResultRow* r, const std::string& c) {
               const ResultRow* b = base_of(c);
               return fmt_ratio(footprint(b) / footprint(r)) + " / " + fmt_ratio(peak(b) / peak(r));
             }));
    tables.back().note =
        "footprint = inputs + outputs + workspace; each ratio is baseline / implementation.";
  }
}

std::vector<TextTable> group_tables(const Group& g, const TableOptions& o) {
  std::vector<TextTable> tables;
  std::string not_run;
  const std::vector<std::string> shown = shown_labels(g, not_run);
  if (shown.empty()) return tables;  // every cell a skip: run_table lists the group in one line
  tables.push_back(metric_table(g, o, shown, not_run));

  std::vector<std::string> others;
  for (const auto& l : shown)
    if (l != g.baseline_label) others.push_back(l);
  auto base_of = [&](const std::string& c) { return find_cell(g, g.baseline_label, c); };

  if (!g.baseline_label.empty() && !others.empty()) {
    tables.push_back(wide(g, g.title + " — speedup over " + g.baseline_label + " (×)", others,
                          [&](const ResultRow* r, const std::string& c) {
                            return fmt_ratio(speedup(base_of(c), r));
                          }));
    tables.back().note =
        "baseline median time / implementation median time on the same case; -: the baseline has "
        "no timed passing row.";
  }

  bool any_memory = false, any_peak = false, any_hbm = false;
  for (const ResultRow* r : g.rows) {
    any_memory = any_memory || r->memory;
    any_peak = any_peak || std::isfinite(peak(r));
    any_hbm = any_hbm || std::isfinite(hbm_bytes(r));
  }
  if (any_memory) add_memory_tables(g, shown, others, any_peak, tables);
  if (any_hbm) {
    tables.push_back(
        wide(g, g.title + " — HBM traffic, read + write (GB, Nsight Compute)", shown,
             [&](const ResultRow* r, const std::string&) { return fmt(hbm_bytes(r) / 1e9); }));
  }
  return tables;
}

void render_long(const std::vector<Group>& groups, std::ostream& out) {
  TextTable t;
  t.header = {"pass",           "head_dim",
              "causal",         "dtype",
              "batch",          "heads_q",
              "heads_kv",       "seq_q",
              "seq_kv",         "case",
              "impl",           "options",
              "device",         "status",
              "reason",         "median_ms",
              "min_ms",         "cv",
              "repetitions",    "tflops",
              "baseline",       "speedup",
              "io_mib",         "workspace_mib",
              "peak_mib",       "footprint_reduction",
              "peak_reduction", "hbm_gb"};
  auto num = [](double v) {
    if (!std::isfinite(v)) return std::string();
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return std::string(b);
  };
  for (const auto& g : groups) {
    for (const ResultRow* r : g.rows) {
      const ResultRow* b =
          g.baseline_label.empty() ? nullptr : find_cell(g, g.baseline_label, r->case_label);
      const auto& p = r->problem;
      t.rows.push_back({std::string(to_string(r->pass)),
                        std::to_string(p.head_dim),
                        p.causal ? "true" : "false",
                        std::string(to_string(p.dtype)),
                        std::to_string(p.batch),
                        std::to_string(p.heads_q),
                        std::to_string(p.heads_kv),
                        std::to_string(p.seq_q),
                        std::to_string(p.seq_kv),
                        r->case_label,
                        r->impl,
                        r->options.empty() ? "" : nlohmann::json(r->options).dump(),
                        r->device,
                        to_string(r->status),
                        r->reason,
                        num(r->time ? r->time->median_ms : NAN),
                        num(r->time ? r->time->min_ms : NAN),
                        num(r->time ? r->time->cv : NAN),
                        r->time ? std::to_string(r->time->repetitions) : std::string(),
                        num(metric_value(*r, "tflops")),
                        g.baseline_label,
                        num(b ? speedup(b, r) : NAN),
                        num(r->memory ? double(r->memory->io_bytes) / kMiB : NAN),
                        num(r->memory ? double(r->memory->workspace_bytes) / kMiB : NAN),
                        num(peak(r) / kMiB),
                        num(b ? footprint(b) / footprint(r) : NAN),
                        num(b ? peak(b) / peak(r) : NAN),
                        num(hbm_bytes(r) / 1e9)});
    }
  }
  for (std::size_t c = 0; c < t.header.size(); ++c) out << (c ? "," : "") << t.header[c];
  out << "\n";
  for (const auto& row : t.rows) {
    for (std::size_t c = 0; c < row.size(); ++c) out << (c ? "," : "") << csv_escape(row[c]);
    out << "\n";
  }
}

std::string context_line(const ResultsFile& f, bool cpu_only) {
  const ojson& c = f.context;
  auto s = [&](const char* k) {
    const ojson* v = find(c, k);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  };
  std::string dev = cpu_only && !s("cpu").empty() ? s("cpu") : device_name(c);
  std::string line = "device " + dev;
  if (!s("date").empty()) line += ", " + s("date");
  if (!s("build_type").empty()) line += ", " + s("build_type");
  if (!s("git_revision").empty()) {
    const ojson* d = find(c, "git_dirty");
    line += ", git " + s("git_revision").substr(0, 12) +
            (d && d->is_boolean() && d->get<bool>() ? " (dirty)" : "");
  }
  return line;
}

}  // namespace

int run_table(const TableOptions& o, std::ostream& out, std::ostream& err) {
  if (o.format != "markdown" && o.format != "csv" && o.format != "long" && o.format != "wide-csv") {
    err << "attnbench table: --format must be markdown, csv, wide-csv or long, got \"" << o.format
        << "\"\n";
    return 2;
  }
  if (o.metric != "tflops" && o.metric != "ms" && o.metric != "memory") {
    err << "attnbench table: --metric must be tflops, ms or memory, got \"" << o.metric << "\"\n";
    return 2;
  }
  ResultsFile f;
  try {
    f = load_results(o.results);
  } catch (const ResultsError& e) {
    err << "attnbench table: " << e.what() << "\n";
    return 2;
  }
  // A former name (its rows read under the current one) names the current implementation; a
  // label's " [k=v]" part stays as it is.
  std::string baseline = o.baseline;
  if (const auto cut = baseline.find(" ["); !baseline.empty()) {
    const std::string name = baseline.substr(0, cut);
    if (const std::string now = Registry::instance().canonical(name); now != name) {
      err << "attnbench table: note: " << name << " is the former name of " << now << "\n";
      baseline = now + (cut == std::string::npos ? std::string() : baseline.substr(cut));
    }
  }
  const std::vector<Group> groups = make_groups(f, baseline);
  if (!o.baseline.empty()) {
    bool seen = false;
    for (const auto& g : groups) seen = seen || !g.baseline_label.empty();
    if (!seen)
      err << "attnbench table: warning: baseline \"" << o.baseline << "\" has no rows in "
          << o.results << "\n";
  }
  if (o.format == "csv" || o.format == "long") {  // "long": its earlier name
    render_long(groups, out);
    return 0;
  }

  bool cpu_only = true;
  for (const auto& r : f.rows) cpu_only = cpu_only && r.device.rfind("cuda", 0) != 0;
  if (o.format == "markdown") {
    const ojson* name = find(f.context, "config_name");
    out << "## attnbench results"
        << (name && name->is_string() ? ": " + name->get<std::string>() : "") << "\n\n"
        << context_line(f, cpu_only) << "\n\n";
    if (!f.complete)
      out << "**Incomplete run**: " << (f.stop_reason.empty() ? "stopped early" : f.stop_reason)
          << "\n\n";
    if (f.rows.empty()) out << "No rows.\n";
  }
  // Groups where no row ran (e.g. every CUDA group on a machine without a GPU) are not tables of
  // "skip": they are named in one line, with the reasons.
  std::map<std::string, int> skipped_reasons;
  std::vector<std::string> skipped_groups;
  for (const auto& g : groups) {
    const std::vector<TextTable> tables = group_tables(g, o);
    if (tables.empty() && !g.rows.empty()) {
      skipped_groups.push_back(g.title);
      for (const ResultRow* r : g.rows) ++skipped_reasons[r->reason];
      continue;
    }
    for (const auto& t : tables) {
      if (o.format == "markdown")
        render_markdown(t, out);
      else
        render_csv(t, out);
    }
  }
  if (!skipped_groups.empty() && o.format == "markdown") {
    out << count_of(static_cast<long long>(skipped_groups.size()), "section")
        << " with every row skipped (not shown): ";
    for (std::size_t i = 0; i < skipped_groups.size(); ++i)
      out << (i ? "; " : "") << skipped_groups[i];
    out << ". Why:";
    bool first = true;
    for (const auto& [why, n] : skipped_reasons) {
      out << (first ? " " : "; ") << (why.empty() ? "no reason recorded" : why) << " ("
          << count_of(n, "row") << ")";
      first = false;
    }
    out << ".\n";
  }
  return 0;
}

}  // namespace attnbench
