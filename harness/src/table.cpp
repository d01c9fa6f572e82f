// Results reader (schema attnbench.results/1, with messages that name the JSON path) and the
// `attnbench table` renderer. The layout of the tables is described in table.hpp.
#include "attnbench/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <tuple>

namespace attnbench {

using nlohmann::json;

// ============================================================================ reader

namespace {

constexpr const char* kSchema = "attnbench.results/1";

std::string short_dump(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

[[noreturn]] void bad(const std::string& origin, const std::string& path, const std::string& what) {
  throw ResultsError(origin + ": " + path + ": " + what);
}

// Looks up a key of an object; null when absent.
const json* find(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

struct Reader {
  const std::string& origin;

  const json& object(const json& parent, const char* key, const std::string& path) const {
    const json* v = find(parent, key);
    if (!v) bad(origin, path + "." + key, "missing (expected an object)");
    if (!v->is_object()) bad(origin, path + "." + key, "expected an object, got " + short_dump(*v));
    return *v;
  }
  std::string str(const json& parent, const char* key, const std::string& path, bool required,
                  const std::string& fallback = "") const {
    const json* v = find(parent, key);
    if (!v || v->is_null()) {
      if (required) bad(origin, path + "." + key, "missing (expected a string)");
      return fallback;
    }
    if (!v->is_string()) bad(origin, path + "." + key, "expected a string, got " + short_dump(*v));
    return v->get<std::string>();
  }
  // JSON has no NaN: the writer stores NaN and Inf as null, which reads back as NaN here.
  double num(const json& parent, const char* key, const std::string& path, bool required,
             double fallback = 0) const {
    const json* v = find(parent, key);
    if (!v) {
      if (required) bad(origin, path + "." + key, "missing (expected a number)");
      return fallback;
    }
    if (v->is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v->is_number()) bad(origin, path + "." + key, "expected a number, got " + short_dump(*v));
    return v->get<double>();
  }
  std::int64_t integer(const json& parent, const char* key, const std::string& path, bool required,
                       std::int64_t fallback = 0) const {
    const json* v = find(parent, key);
    if (!v || v->is_null()) {
      if (required) bad(origin, path + "." + key, "missing (expected an integer)");
      return fallback;
    }
    if (v->is_number_integer()) return v->get<std::int64_t>();
    if (v->is_number_float()) {  // tolerate 1.0e9 written by other tools, not 1.5
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d)) return static_cast<std::int64_t>(d);
    }
    bad(origin, path + "." + key, "expected an integer, got " + short_dump(*v));
  }
  bool boolean(const json& parent, const char* key, const std::string& path, bool required,
               bool fallback = false) const {
    const json* v = find(parent, key);
    if (!v) {
      if (required) bad(origin, path + "." + key, "missing (expected true or false)");
      return fallback;
    }
    if (!v->is_boolean())
      bad(origin, path + "." + key, "expected true or false, got " + short_dump(*v));
    return v->get<bool>();
  }
  void one_of(const std::string& value, std::initializer_list<const char*> allowed,
              const std::string& path) const {
    for (const char* a : allowed)
      if (value == a) return;
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
    bad(origin, path, "\"" + value + "\" is not one of " + list);
  }

  ResultRow row(const json& r, const std::string& path) const {
    if (!r.is_object()) bad(origin, path, "expected an object, got " + short_dump(r));
    ResultRow row;
    row.case_label = str(r, "case", path, true);
    row.case_index = static_cast<int>(integer(r, "case_index", path, false, -1));
    const json& p = object(r, "problem", path);
    const std::string pp = path + ".problem";
    row.problem.batch = static_cast<int>(integer(p, "batch", pp, true));
    row.problem.heads_q = static_cast<int>(integer(p, "heads_q", pp, true));
    row.problem.heads_kv = static_cast<int>(integer(p, "heads_kv", pp, true));
    row.problem.seq_q = static_cast<int>(integer(p, "seq_q", pp, true));
    row.problem.seq_kv = static_cast<int>(integer(p, "seq_kv", pp, true));
    row.problem.head_dim = static_cast<int>(integer(p, "head_dim", pp, true));
    row.problem.causal = boolean(p, "causal", pp, true);
    row.problem.scale = num(p, "scale", pp, false);
    row.problem.dtype = str(p, "dtype", pp, true);
    if (const json* params = find(r, "params"); params && !params->is_null()) {
      if (!params->is_object())
        bad(origin, path + ".params", "expected an object, got " + short_dump(*params));
      row.params = *params;
    }
    row.impl = str(r, "impl", path, true);
    row.device = str(r, "device", path, false);
    row.pass = str(r, "pass", path, true);
    one_of(row.pass, {"fwd", "bwd", "fwd_bwd"}, path + ".pass");
    row.status = str(r, "status", path, true);
    one_of(row.status, {"pass", "fail", "skip"}, path + ".status");
    row.reason = str(r, "reason", path, false);

    if (const json* v = find(r, "verify"); v && !v->is_null()) {
      const std::string vp = path + ".verify";
      if (!v->is_object()) bad(origin, vp, "expected an object, got " + short_dump(*v));
      row.verify_mode = str(*v, "mode", vp, false);
      if (const json* outs = find(*v, "outputs"); outs && !outs->is_null()) {
        if (!outs->is_array())
          bad(origin, vp + ".outputs", "expected an array, got " + short_dump(*outs));
        for (std::size_t i = 0; i < outs->size(); ++i) {
          const json& o = (*outs)[i];
          const std::string op = vp + ".outputs[" + std::to_string(i) + "]";
          if (!o.is_object()) bad(origin, op, "expected an object, got " + short_dump(o));
          OutputError e;
          e.name = str(o, "name", op, true);
          e.max_abs = num(o, "max_abs", op, true);
          e.rel_l2 = num(o, "rel_l2", op, false);
          e.atol = num(o, "atol", op, false);
          e.nonfinite = integer(o, "nonfinite", op, false);
          e.ok = boolean(o, "ok", op, false, true);
          row.outputs.push_back(e);
        }
      }
    }
    if (const json* t = find(r, "time"); t && !t->is_null()) {
      const std::string tp = path + ".time";
      if (!t->is_object()) bad(origin, tp, "expected an object, got " + short_dump(*t));
      TimeStats ts;
      ts.median_ms = num(*t, "median_ms", tp, true);
      if (ts.median_ms < 0 || std::isinf(ts.median_ms))
        bad(origin, tp + ".median_ms",
            "expected a time >= 0, got " + short_dump((*t)["median_ms"]));
      ts.min_ms = num(*t, "min_ms", tp, false, ts.median_ms);
      ts.mean_ms = num(*t, "mean_ms", tp, false, ts.median_ms);
      ts.cv = num(*t, "cv", tp, false, 0);
      if (!std::isfinite(ts.min_ms)) ts.min_ms = ts.median_ms;
      if (!std::isfinite(ts.cv)) ts.cv = 0;
      ts.repetitions = static_cast<int>(integer(*t, "repetitions", tp, false));
      ts.hot = boolean(*t, "hot", tp, false);
      if (!std::isnan(ts.median_ms)) row.time = ts;  // null (NaN when written): not measured
    }
    row.flops = num(r, "flops", path, false);
    if (const json* t = find(r, "tflops"); t && !t->is_null())
      row.tflops = num(r, "tflops", path, true);
    if (const json* m = find(r, "memory"); m && !m->is_null()) {
      const std::string mp = path + ".memory";
      if (!m->is_object()) bad(origin, mp, "expected an object, got " + short_dump(*m));
      MemoryStats ms;
      ms.io_bytes = integer(*m, "io_bytes", mp, false);
      ms.workspace_bytes = integer(*m, "workspace_bytes", mp, false);
      ms.peak_bytes = integer(*m, "peak_bytes", mp, false);
      row.memory = ms;
    }
    if (const json* e = find(r, "extra"); e && !e->is_null()) {
      if (!e->is_object())
        bad(origin, path + ".extra", "expected an object, got " + short_dump(*e));
      row.extra = *e;
    }
    return row;
  }
};

std::string param_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

}  // namespace

std::string ResultRow::key() const {
  return case_label + "|" + impl + "|" + pass + "|" + params.dump() + "|" + device;
}

std::string ResultRow::impl_label() const {
  if (params.empty()) return impl;
  std::string s = impl + " [";
  bool first = true;
  for (const auto& [k, v] : params.items()) {
    s += (first ? "" : ", ") + k + "=" + param_text(v);
    first = false;
  }
  return s + "]";
}

ResultsFile parse_results(const json& j, const std::string& origin) {
  const Reader rd{origin};
  if (!j.is_object()) bad(origin, "$", "expected a results object, got " + short_dump(j));
  const std::string schema = rd.str(j, "schema", "$", true);
  if (schema != kSchema) {
    bad(origin, "$.schema", "\"" + schema + "\" is not supported (expected \"" + kSchema + "\")");
  }
  ResultsFile f;
  f.path = origin;
  f.complete = rd.boolean(j, "complete", "$", false, true);
  f.stop_reason = rd.str(j, "stop_reason", "$", false);
  f.context = rd.object(j, "context", "$");
  const json* rows = find(j, "rows");
  if (!rows) bad(origin, "$.rows", "missing (expected an array)");
  if (!rows->is_array()) bad(origin, "$.rows", "expected an array, got " + short_dump(*rows));
  f.rows.reserve(rows->size());
  for (std::size_t i = 0; i < rows->size(); ++i) {
    f.rows.push_back(rd.row((*rows)[i], "$.rows[" + std::to_string(i) + "]"));
  }
  return f;
}

ResultsFile load_results(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ResultsError(path + ": cannot open the file");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw ResultsError(path + ": not valid JSON: " + e.what());
  }
  return parse_results(j, path);
}

std::string device_name(const json& context) {
  if (const json* devs = find(context, "devices"); devs && devs->is_array() && !devs->empty()) {
    const json& d0 = (*devs)[0];
    if (d0.is_object())
      if (const json* n = find(d0, "name"); n && n->is_string()) return n->get<std::string>();
  }
  if (const json* c = find(context, "cpu"); c && c->is_string() && !c->get<std::string>().empty())
    return c->get<std::string>();
  return "unknown device";
}

// ============================================================================ text tables

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
  for (std::size_t c = 0; c < ncol; ++c)
    out << (right[c] ? std::string(w[c] + 1, '-') + ":" : ":" + std::string(w[c] + 1, '-')) << "|";
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

// ============================================================================ attnbench table

namespace {

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

int pass_rank(const std::string& p) {
  return p == "fwd" ? 0 : p == "bwd" ? 1 : 2;
}

using GroupKey = std::tuple<int, int, bool, std::string>;  // pass, head_dim, causal, dtype

// One table group: its cases (columns) and row labels (implementations).
struct Group {
  std::string pass;
  int head_dim = 0;
  bool causal = false;
  std::string dtype;
  std::vector<const ResultRow*> rows;
  std::vector<std::string> cases;                                        // column order
  std::map<std::string, const ProblemFields*> prob;                      // case -> problem
  std::vector<std::string> labels;                                       // row order (file order)
  std::map<std::string, std::string> impl_of;                            // label -> impl name
  std::map<std::pair<std::string, std::string>, const ResultRow*> cell;  // (label, case)
  std::string baseline_label;  // empty: no baseline in this group
  std::string title;
  std::vector<std::string> col_names;
};

struct Field {
  const char* name;
  double (*get)(const ProblemFields&);
};
// Order of priority when sorting columns: the sequence lengths are the usual swept axis.
const Field kFields[] = {
    {"skv", [](const ProblemFields& p) { return double(p.seq_kv); }},
    {"sq", [](const ProblemFields& p) { return double(p.seq_q); }},
    {"b", [](const ProblemFields& p) { return double(p.batch); }},
    {"hq", [](const ProblemFields& p) { return double(p.heads_q); }},
    {"hkv", [](const ProblemFields& p) { return double(p.heads_kv); }},
    {"scale", [](const ProblemFields& p) { return p.scale; }},
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

  auto describe = [&](const ProblemFields& p, bool want_varying) {
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
  // An impl seen on more than one device gets "@device" in its label.
  std::map<std::string, std::set<std::string>> devices_of;
  for (const auto& r : f.rows) devices_of[r.impl_label()].insert(r.device);
  auto label_of = [&](const ResultRow& r) {
    return devices_of[r.impl_label()].size() > 1 ? r.impl_label() + " @" + r.device
                                                 : r.impl_label();
  };

  std::map<GroupKey, Group> groups;
  for (const auto& r : f.rows) {
    Group& g = groups[{pass_rank(r.pass), r.problem.head_dim, r.problem.causal, r.problem.dtype}];
    g.pass = r.pass;
    g.head_dim = r.problem.head_dim;
    g.causal = r.problem.causal;
    g.dtype = r.problem.dtype;
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
    // Baseline: the requested label (to pick a params variant) or impl name, else the first
    // default present; an exact label match is the variant without params.
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
  return r && r->status == "pass" && r->time;
}

std::string status_cell(const ResultRow* r) {
  if (!r) return "";
  if (r->status == "skip") return "skip";
  if (r->status == "fail") return "FAIL";
  return "";
}

double metric_value(const ResultRow& r, const std::string& metric) {
  if (metric == "ms") return r.time ? r.time->median_ms : NAN;
  if (metric == "memory")
    return r.memory && r.memory->peak_bytes > 0 ? double(r.memory->peak_bytes) / kMiB : NAN;
  if (r.tflops) return *r.tflops;
  if (r.time && r.flops > 0) return r.flops / (r.time->median_ms * 1e-3) / 1e12;
  return NAN;
}

double speedup(const ResultRow* base, const ResultRow* r) {
  if (!timed_pass(base) || !timed_pass(r)) return NAN;
  return base->time->median_ms / r->time->median_ms;
}

double footprint(const ResultRow* r) {
  if (!r || !r->memory || r->status == "skip") return NAN;
  return double(r->memory->io_bytes + r->memory->workspace_bytes);
}
double peak(const ResultRow* r) {
  if (!r || !r->memory || r->status == "skip" || r->memory->peak_bytes <= 0) return NAN;
  return double(r->memory->peak_bytes);
}
double hbm_bytes(const ResultRow* r) {
  if (!r) return NAN;
  const json* rd = find(r->extra, "hbm_read_bytes");
  const json* wr = find(r->extra, "hbm_write_bytes");
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

std::vector<TextTable> group_tables(const Group& g, const TableOptions& o) {
  std::vector<TextTable> tables;
  // Implementations skipped in every case of the group (e.g. a forward-only one in a bwd group)
  // would be rows of "skip": they are named in a note instead.
  std::vector<std::string> shown;
  std::string not_run;
  for (const auto& l : g.labels) {
    const ResultRow* ran = nullptr;
    const ResultRow* any = nullptr;
    for (const auto& c : g.cases) {
      const ResultRow* r = find_cell(g, l, c);
      if (r && !any) any = r;
      if (r && r->status != "skip" && !ran) ran = r;
    }
    if (ran)
      shown.push_back(l);
    else
      not_run += (not_run.empty() ? "" : "; ") + l +
                 (any && !any->reason.empty() ? " (" + any->reason + ")" : "");
  }
  if (shown.empty()) shown = g.labels;

  // CPU rates are far below 1 TFLOP/s: print GFLOP/s then.
  double top = 0;
  for (const ResultRow* r : g.rows)
    if (r->status == "pass" && std::isfinite(metric_value(*r, o.metric)))
      top = std::max(top, metric_value(*r, o.metric));
  const bool giga = o.metric == "tflops" && top > 0 && top < 1;
  const char* unit = o.metric == "ms"       ? "median ms"
                     : o.metric == "memory" ? "peak MiB"
                     : giga                 ? "GFLOP/s"
                                            : "TFLOP/s";
  tables.push_back(
      wide(g, g.title + " — " + unit, shown, [&](const ResultRow* r, const std::string&) {
        return fmt(metric_value(*r, o.metric) * (giga ? 1e3 : 1));
      }));
  tables.back().note =
      "skip: not supported or out of memory; FAIL: verification failed; -: not timed.";
  if (!not_run.empty()) tables.back().note += "\nSkipped in every case: " + not_run + ".";

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
  if (any_memory) {
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
    t.note = std::string(
                 "workspace: what the implementation asked the harness for; peak: measured during "
                 "the call") +
             (any_peak ? "" : " (not measured in this run)") + ".";
    tables.push_back(std::move(t));
    if (!g.baseline_label.empty() && !others.empty()) {
      tables.push_back(wide(
          g, g.title + " — memory reduction vs " + g.baseline_label + " (×): footprint / peak",
          others, [&](const ResultRow* r, const std::string& c) {
            const ResultRow* b = base_of(c);
            return fmt_ratio(footprint(b) / footprint(r)) + " / " + fmt_ratio(peak(b) / peak(r));
          }));
      tables.back().note =
          "footprint = inputs + outputs + workspace; each ratio is baseline / implementation.";
    }
  }
  if (any_hbm) {
    tables.push_back(
        wide(g, g.title + " — HBM traffic, read + write (GB, Nsight Compute)", shown,
             [&](const ResultRow* r, const std::string&) { return fmt(hbm_bytes(r) / 1e9); }));
  }
  return tables;
}

void render_long(const std::vector<Group>& groups, std::ostream& out) {
  TextTable t;
  t.header = {"pass",
              "head_dim",
              "causal",
              "dtype",
              "batch",
              "heads_q",
              "heads_kv",
              "seq_q",
              "seq_kv",
              "case",
              "impl",
              "params",
              "device",
              "status",
              "reason",
              "median_ms",
              "min_ms",
              "cv",
              "tflops",
              "baseline",
              "speedup",
              "io_mib",
              "workspace_mib",
              "peak_mib",
              "footprint_reduction",
              "peak_reduction",
              "hbm_gb"};
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
      t.rows.push_back({r->pass,
                        std::to_string(p.head_dim),
                        p.causal ? "true" : "false",
                        p.dtype,
                        std::to_string(p.batch),
                        std::to_string(p.heads_q),
                        std::to_string(p.heads_kv),
                        std::to_string(p.seq_q),
                        std::to_string(p.seq_kv),
                        r->case_label,
                        r->impl,
                        r->params.empty() ? "" : r->params.dump(),
                        r->device,
                        r->status,
                        r->reason,
                        num(r->time ? r->time->median_ms : NAN),
                        num(r->time ? r->time->min_ms : NAN),
                        num(r->time ? r->time->cv : NAN),
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
  const json& c = f.context;
  auto s = [&](const char* k) {
    const json* v = find(c, k);
    return v && v->is_string() ? v->get<std::string>() : std::string();
  };
  std::string dev = cpu_only && !s("cpu").empty() ? s("cpu") : device_name(c);
  std::string line = "device " + dev;
  if (!s("date").empty()) line += ", " + s("date");
  if (!s("build_type").empty()) line += ", " + s("build_type");
  if (!s("git_revision").empty()) {
    const json* d = find(c, "git_dirty");
    line += ", git " + s("git_revision").substr(0, 12) +
            (d && d->is_boolean() && d->get<bool>() ? " (dirty)" : "");
  }
  return line;
}

}  // namespace

int run_table(const TableOptions& o, std::ostream& out, std::ostream& err) {
  if (o.format != "markdown" && o.format != "csv" && o.format != "long") {
    err << "attnbench table: --format must be markdown, csv or long, got \"" << o.format << "\"\n";
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
  const std::vector<Group> groups = make_groups(f, o.baseline);
  if (!o.baseline.empty()) {
    bool seen = false;
    for (const auto& g : groups) seen = seen || !g.baseline_label.empty();
    if (!seen)
      err << "attnbench table: warning: baseline \"" << o.baseline << "\" has no rows in "
          << o.results << "\n";
  }
  if (o.format == "long") {
    render_long(groups, out);
    return 0;
  }

  bool cpu_only = true;
  for (const auto& r : f.rows) cpu_only = cpu_only && r.device.rfind("cuda", 0) != 0;
  if (o.format == "markdown") {
    const json* name = find(f.context, "config_name");
    out << "## attnbench results"
        << (name && name->is_string() ? ": " + name->get<std::string>() : "") << "\n\n"
        << context_line(f, cpu_only) << "\n\n";
    if (!f.complete)
      out << "**Incomplete run**: " << (f.stop_reason.empty() ? "stopped early" : f.stop_reason)
          << "\n\n";
    if (f.rows.empty()) out << "No rows.\n";
  }
  for (const auto& g : groups) {
    for (const auto& t : group_tables(g, o)) {
      if (o.format == "markdown")
        render_markdown(t, out);
      else
        render_csv(t, out);
    }
  }
  return 0;
}

}  // namespace attnbench
