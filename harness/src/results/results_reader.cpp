// Reading results files back (docs/results_schema.md): the strict typed reader of `table`,
// `compare` and `run --resume`, whose messages name the JSON path and the value; the lenient
// JSON reader; and the checks that decide whether a run may resume a file, and which of its
// rows it keeps.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>

#include "attnbench/results.hpp"

namespace attnbench {

using ojson = nlohmann::ordered_json;

namespace {

std::string short_dump(const ojson& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

[[noreturn]] void bad(const std::string& origin, const std::string& path, const std::string& what) {
  throw ResultsError(origin + ": " + path + ": " + what);
}

// Looks up a key of an object; null when absent.
const ojson* find(const ojson& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

struct Reader {
  const std::string& origin;

  const ojson& object(const ojson& parent, const char* key, const std::string& path) const {
    const ojson* v = find(parent, key);
    if (!v) bad(origin, path + "." + key, "missing (expected an object)");
    if (!v->is_object()) bad(origin, path + "." + key, "expected an object, got " + short_dump(*v));
    return *v;
  }
  std::string str(const ojson& parent, const char* key, const std::string& path, bool required,
                  const std::string& fallback = "") const {
    const ojson* v = find(parent, key);
    if (!v || v->is_null()) {
      if (required) bad(origin, path + "." + key, "missing (expected a string)");
      return fallback;
    }
    if (!v->is_string()) bad(origin, path + "." + key, "expected a string, got " + short_dump(*v));
    return v->get<std::string>();
  }
  // JSON has no NaN: the writer stores NaN and Inf as null, which reads back as NaN here.
  double num(const ojson& parent, const char* key, const std::string& path, bool required,
             double fallback = 0) const {
    const ojson* v = find(parent, key);
    if (!v) {
      if (required) bad(origin, path + "." + key, "missing (expected a number)");
      return fallback;
    }
    if (v->is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v->is_number()) bad(origin, path + "." + key, "expected a number, got " + short_dump(*v));
    return v->get<double>();
  }
  std::int64_t integer(const ojson& v, const std::string& path) const {
    if (v.is_number_integer()) return v.get<std::int64_t>();
    if (v.is_number_float()) {  // tolerate 1.0e9 written by other tools, not 1.5
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d)) return static_cast<std::int64_t>(d);
    }
    bad(origin, path, "expected an integer, got " + short_dump(v));
  }
  std::int64_t integer(const ojson& parent, const char* key, const std::string& path, bool required,
                       std::int64_t fallback = 0) const {
    const ojson* v = find(parent, key);
    if (!v || v->is_null()) {
      if (required) bad(origin, path + "." + key, "missing (expected an integer)");
      return fallback;
    }
    return integer(*v, path + "." + key);
  }
  bool boolean(const ojson& parent, const char* key, const std::string& path, bool required,
               bool fallback = false) const {
    const ojson* v = find(parent, key);
    if (!v) {
      if (required) bad(origin, path + "." + key, "missing (expected true or false)");
      return fallback;
    }
    if (!v->is_boolean())
      bad(origin, path + "." + key, "expected true or false, got " + short_dump(*v));
    return v->get<bool>();
  }
  // The position of value in allowed; a message listing them otherwise.
  std::size_t one_of(const std::string& value, std::initializer_list<const char*> allowed,
                     const std::string& path) const {
    std::size_t i = 0;
    for (const char* a : allowed) {
      if (value == a) return i;
      ++i;
    }
    std::string list;
    for (const char* a : allowed) list += std::string(list.empty() ? "" : ", ") + a;
    bad(origin, path, "\"" + value + "\" is not one of " + list);
  }

  Problem problem(const ojson& r, const std::string& path) const {
    const ojson& j = object(r, "problem", path);
    const std::string pp = path + ".problem";
    Problem p;
    p.batch = static_cast<int>(integer(j, "batch", pp, true));
    p.heads_q = static_cast<int>(integer(j, "heads_q", pp, true));
    p.heads_kv = static_cast<int>(integer(j, "heads_kv", pp, true));
    p.seq_q = static_cast<int>(integer(j, "seq_q", pp, true));
    p.seq_kv = static_cast<int>(integer(j, "seq_kv", pp, true));
    p.head_dim = static_cast<int>(integer(j, "head_dim", pp, true));
    p.causal = boolean(j, "causal", pp, true);
    p.scale = num(j, "scale", pp, false);
    const std::string dtype = str(j, "dtype", pp, true);
    const auto t = parse_dtype(dtype);
    if (!t) bad(origin, pp + ".dtype", "\"" + dtype + "\" is not one of f32, f16, bf16");
    p.dtype = *t;
    p.window_left = static_cast<int>(integer(j, "window_left", pp, false, -1));
    p.window_right = static_cast<int>(integer(j, "window_right", pp, false, -1));
    p.softcap = num(j, "softcap", pp, false, 0.0);
    p.seqlens_q = lengths(j, "seqlens_q", pp);
    p.seqlens_kv = lengths(j, "seqlens_kv", pp);
    // Paged (problem_to_json writes these only for a paged problem): the table rebuilt from
    // page_order, or read whole when it was explicit.
    const std::int64_t page_size = integer(j, "page_size", pp, false, 0);
    if (page_size < 0 || page_size > std::numeric_limits<int>::max())
      bad(origin, pp + ".page_size", "expected a page size >= 0");
    p.page_size = static_cast<int>(page_size);
    const std::int64_t num_pages = integer(j, "num_pages", pp, false, 0);
    if (num_pages < 0 || num_pages > std::numeric_limits<int>::max())
      bad(origin, pp + ".num_pages", "expected a page count >= 0");
    p.num_pages = static_cast<int>(num_pages);
    if (const ojson* t = find(j, "block_table"); t && !t->is_null()) {
      const std::string tp = pp + ".block_table";
      if (!t->is_array()) bad(origin, tp, "expected an array of rows of pages, got " + short_dump(*t));
      std::vector<std::vector<int>> rows;
      for (std::size_t b = 0; b < t->size(); ++b) {
        const std::string rp = tp + "[" + std::to_string(b) + "]";
        if (!(*t)[b].is_array()) bad(origin, rp, "expected a row of pages, got " + short_dump((*t)[b]));
        std::vector<int> row;
        for (std::size_t i = 0; i < (*t)[b].size(); ++i) {
          const std::int64_t x = integer((*t)[b][i], rp + "[" + std::to_string(i) + "]");
          if (x < 0 || x > std::numeric_limits<int>::max())
            bad(origin, rp + "[" + std::to_string(i) + "]", "expected a page index >= 0");
          row.push_back(static_cast<int>(x));
        }
        rows.push_back(std::move(row));
      }
      p.set_block_table(rows);
    } else {
      const std::string order = str(j, "page_order", pp, false, "sequential");
      const auto o = parse_page_order(order);
      if (!o) bad(origin, pp + ".page_order", "\"" + order + "\" is not one of sequential, shuffled");
      p.page_order = *o;
    }
    p.make_block_table();
    return p;
  }

  // A varlen problem's per-sequence lengths (absent for a dense one: empty).
  std::vector<int> lengths(const ojson& parent, const char* key, const std::string& path) const {
    std::vector<int> out;
    const ojson* v = find(parent, key);
    if (!v || v->is_null()) return out;
    const std::string kp = path + "." + key;
    if (!v->is_array()) bad(origin, kp, "expected an array of lengths, got " + short_dump(*v));
    for (std::size_t i = 0; i < v->size(); ++i) {
      const std::string ip = kp + "[" + std::to_string(i) + "]";
      const std::int64_t n = integer((*v)[i], ip);
      if (n < 0 || n > std::numeric_limits<int>::max())
        bad(origin, ip, "expected a length >= 0, got " + short_dump((*v)[i]));
      out.push_back(static_cast<int>(n));
    }
    return out;
  }

  void verification(const ojson& v, const std::string& vp, ResultRow& row) const {
    if (!v.is_object()) bad(origin, vp, "expected an object, got " + short_dump(v));
    row.verified = true;
    if (const ojson* m = find(v, "mode"); m && !m->is_null()) {
      constexpr VerifyMode modes[] = {VerifyMode::full, VerifyMode::sampled, VerifyMode::off};
      row.verify_mode =
          modes[one_of(str(v, "mode", vp, true), {"full", "sampled", "off"}, vp + ".mode")];
    }
    row.baseline = str(v, "baseline", vp, false);
    const ojson* outs = find(v, "outputs");
    if (!outs || outs->is_null()) return;
    if (!outs->is_array())
      bad(origin, vp + ".outputs", "expected an array, got " + short_dump(*outs));
    for (std::size_t i = 0; i < outs->size(); ++i) {
      const ojson& o = (*outs)[i];
      const std::string op = vp + ".outputs[" + std::to_string(i) + "]";
      if (!o.is_object()) bad(origin, op, "expected an object, got " + short_dump(o));
      OutputReport e;
      e.name = str(o, "name", op, true);
      e.checked = integer(o, "checked", op, false);
      e.nonfinite = integer(o, "nonfinite", op, false);
      e.max_abs = num(o, "max_abs", op, true);
      e.rel_l2 = num(o, "rel_l2", op, false);
      e.naive_max_abs = num(o, "naive_max_abs", op, false, -1);
      e.atol = num(o, "atol", op, false);
      e.bound = num(o, "bound", op, false);
      e.ratio = num(o, "ratio", op, false);
      e.abs_bound = num(o, "abs_bound", op, false);
      e.naive_ok = boolean(o, "naive_ok", op, false, true);
      e.naive_nonfinite = integer(o, "naive_nonfinite", op, false);
      e.ok = boolean(o, "ok", op, false, true);
      e.why = str(o, "why", op, false);
      row.outputs.push_back(std::move(e));
    }
  }

  // Absent (not timed) when median_ms is null: NaN when it was written.
  std::optional<TimeStats> time(const ojson& t, const std::string& tp) const {
    if (!t.is_object()) bad(origin, tp, "expected an object, got " + short_dump(t));
    TimeStats ts;
    ts.median_ms = num(t, "median_ms", tp, true);
    if (ts.median_ms < 0 || std::isinf(ts.median_ms))
      bad(origin, tp + ".median_ms", "expected a time >= 0, got " + short_dump(t["median_ms"]));
    ts.min_ms = num(t, "min_ms", tp, false, ts.median_ms);
    ts.mean_ms = num(t, "mean_ms", tp, false, ts.median_ms);
    ts.cv = num(t, "cv", tp, false, 0);
    if (!std::isfinite(ts.min_ms)) ts.min_ms = ts.median_ms;
    if (!std::isfinite(ts.cv)) ts.cv = 0;
    ts.repetitions = static_cast<int>(integer(t, "repetitions", tp, false));
    ts.iterations = integer(t, "iterations", tp, false);
    ts.hot = boolean(t, "hot", tp, false);
    ts.flush = str(t, "flush", tp, false);
    if (!ts.flush.empty() && ts.flush != "write" && ts.flush != "read")
      bad(origin, tp + ".flush", "expected \"write\" or \"read\", got " + short_dump(t["flush"]));
    if (const ojson* s = find(t, "samples_ms"); s && !s->is_null()) {
      if (!s->is_array())
        bad(origin, tp + ".samples_ms", "expected an array, got " + short_dump(*s));
      for (std::size_t i = 0; i < s->size(); ++i) {
        const std::string sp = tp + ".samples_ms[" + std::to_string(i) + "]";
        const ojson& x = (*s)[i];
        if (!x.is_number() || !(x.get<double>() >= 0))
          bad(origin, sp, "expected a time >= 0, got " + short_dump(x));
        ts.samples_ms.push_back(x.get<double>());
      }
    }
    if (const ojson* o = find(t, "others_cores"); o && !o->is_null())
      ts.others_cores = num(t, "others_cores", tp, true);
    if (std::isnan(ts.median_ms)) return std::nullopt;
    return ts;
  }

  MemoryStats memory(const ojson& m, const std::string& mp) const {
    if (!m.is_object()) bad(origin, mp, "expected an object, got " + short_dump(m));
    MemoryStats ms;
    ms.io_bytes = integer(m, "io_bytes", mp, false);
    ms.workspace_bytes = integer(m, "workspace_bytes", mp, false);
    if (const ojson* pk = find(m, "peak_bytes"); pk && !pk->is_null())
      ms.peak_bytes = integer(*pk, mp + ".peak_bytes");
    ms.peak_method = str(m, "peak_method", mp, false);
    return ms;
  }

  // The row's option set: "options", or "params", its name before schema version 2.
  Options options(const ojson& r, const std::string& path) const {
    const ojson* now = find(r, "options");
    const ojson* former = find(r, "params");
    if (now && former)
      bad(origin, path, "both \"options\" and \"params\" (its former name): a row has one");
    const char* key = former ? "params" : "options";
    const ojson* v = former ? former : now;
    Options o;
    if (!v || v->is_null()) return o;
    const std::string op = path + "." + key;
    if (!v->is_object()) bad(origin, op, "expected an object, got " + short_dump(*v));
    for (const auto& [k, x] : v->items()) o[k] = integer(x, op + "." + k);
    return o;
  }

  ResultRow row(const ojson& r, const std::string& path) const {
    if (!r.is_object()) bad(origin, path, "expected an object, got " + short_dump(r));
    ResultRow row;
    row.case_label = str(r, "case", path, true);
    row.case_index = static_cast<int>(integer(r, "case_index", path, false, -1));
    row.problem = problem(r, path);
    row.options = options(r, path);
    // A former name (an implementation renamed since the file was written) reads as the current
    // one, so that table and compare match its rows with today's.
    row.impl = str(r, "impl", path, true);
    if (const std::string now = Registry::instance().canonical(row.impl); now != row.impl) {
      row.impl_in_file = row.impl;
      row.impl = now;
    }
    row.device = str(r, "device", path, false);
    constexpr Pass passes[] = {Pass::fwd, Pass::bwd, Pass::fwd_bwd};
    row.pass =
        passes[one_of(str(r, "pass", path, true), {"fwd", "bwd", "fwd_bwd"}, path + ".pass")];
    constexpr Status statuses[] = {Status::pass, Status::fail, Status::skip};
    row.status =
        statuses[one_of(str(r, "status", path, true), {"pass", "fail", "skip"}, path + ".status")];
    row.reason = str(r, "reason", path, false);
    if (const ojson* v = find(r, "verify"); v && !v->is_null())
      verification(*v, path + ".verify", row);
    row.baseline = Registry::instance().canonical(row.baseline);
    if (const ojson* t = find(r, "time"); t && !t->is_null()) row.time = time(*t, path + ".time");
    row.flops = num(r, "flops", path, false);
    row.hbm_bytes = integer(r, "hbm_bytes", path, false, 0);  // gbps() recomputes "gbps"
    if (const ojson* t = find(r, "tflops"); t && !t->is_null())
      row.tflops_in_file = num(r, "tflops", path, true);
    if (const ojson* m = find(r, "memory"); m && !m->is_null())
      row.memory = memory(*m, path + ".memory");
    row.nvtx = str(r, "nvtx", path, false);
    if (const ojson* e = find(r, "extra"); e && !e->is_null()) {
      if (!e->is_object())
        bad(origin, path + ".extra", "expected an object, got " + short_dump(*e));
      row.extra = *e;
    }
    return row;
  }
};

// The file as JSON (Json: ordered for the typed reader, plain for the lenient one), or a
// ResultsError naming it.
template <class Json>
Json parse_file(const std::string& path) {
  // A folder opens as a stream on Linux and throws ios failure on the first read (std::terminate
  // in table and compare, exit 134, before this check).
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ResultsError(path + ": is a directory, not a results file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ResultsError(path + ": cannot open the file");
  try {
    return Json::parse(in);
  } catch (const typename Json::exception& e) {
    throw ResultsError(path + ": not valid JSON: " + e.what());
  } catch (const std::ios_base::failure& e) {
    throw ResultsError(path + ": cannot read the file: " + e.what());
  }
}

void check_schema(const Reader& rd, const ojson& j) {
  if (!j.is_object()) bad(rd.origin, "$", "expected a results object, got " + short_dump(j));
  const std::string schema = rd.str(j, "schema", "$", true);
  if (!results_schema_supported(schema)) {
    bad(rd.origin, "$.schema",
        "\"" + schema + "\" is not supported (expected \"" + std::string(kResultsSchema) +
            "\" or \"" + kResultsSchemaV1 + "\")");
  }
}

std::string context_text(const ojson& ctx, const char* key) {
  const ojson* v = ctx.is_object() ? find(ctx, key) : nullptr;
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace

bool results_schema_supported(std::string_view tag) {
  return tag == kResultsSchema || tag == kResultsSchemaV1;
}

ResultsFile parse_results(const ojson& j, const std::string& origin) {
  const Reader rd{origin};
  check_schema(rd, j);
  ResultsFile f;
  f.path = origin;
  f.complete = rd.boolean(j, "complete", "$", false, true);
  f.stop_reason = rd.str(j, "stop_reason", "$", false);
  f.context = rd.object(j, "context", "$");
  const ojson* rows = find(j, "rows");
  if (!rows) bad(origin, "$.rows", "missing (expected an array)");
  if (!rows->is_array()) bad(origin, "$.rows", "expected an array, got " + short_dump(*rows));
  f.rows.reserve(rows->size());
  for (std::size_t i = 0; i < rows->size(); ++i) {
    f.rows.push_back(rd.row((*rows)[i], "$.rows[" + std::to_string(i) + "]"));
  }
  return f;
}

ResultsFile load_results(const std::string& path) {
  return parse_results(parse_file<ojson>(path), path);
}

nlohmann::json read_results_json(const std::string& path) {
  nlohmann::json j = parse_file<nlohmann::json>(path);
  if (!j.is_object() || !j.contains("schema") || !j["schema"].is_string() ||
      !results_schema_supported(j["schema"].get<std::string>())) {
    throw ResultsError(path + ": not an attnbench results file (schema " +
                       std::string(kResultsSchema) + " or " + kResultsSchemaV1 + ")");
  }
  return j;
}

std::string device_name(const ojson& context) {
  if (const ojson* devs = find(context, "devices"); devs && devs->is_array() && !devs->empty()) {
    const ojson& d0 = (*devs)[0];
    if (d0.is_object())
      if (const ojson* n = find(d0, "name"); n && n->is_string()) return n->get<std::string>();
  }
  if (const ojson* c = find(context, "cpu"); c && c->is_string() && !c->get<std::string>().empty())
    return c->get<std::string>();
  return "unknown device";
}

std::string resume_refusal(const ResultsFile& earlier, const std::string& path,
                           const std::string& config_hash, bool profile,
                           const std::string& git_revision) {
  const ojson& ctx = earlier.context;
  const std::string at = "--resume = " + path + ": ";
  if (const std::string hash = context_text(ctx, "config_hash"); hash != config_hash) {
    return at + "written by another config (config_hash '" + hash + "', this run's '" +
           config_hash + "'): resume with the same config and overrides";
  }
  const ojson* p = find(ctx, "profile");
  const bool old_profile = p && p->is_boolean() && p->get<bool>();
  if (old_profile != profile) {
    return at + "written " + (old_profile ? "with" : "without") + " --profile, this run is " +
           (profile ? "with" : "without") + " it";
  }
  // Rows of another build would mix two binaries' numbers under one revision.
  if (const std::string rev = context_text(ctx, "git_revision"); rev != git_revision) {
    return at + "written by git revision '" + rev + "', this build is '" + git_revision +
           "': rerun instead of mixing two builds' rows";
  }
  return {};
}

bool kept_on_resume(const ResultRow& earlier, bool profile) {
  return earlier.status == Status::fail ||
         (earlier.status == Status::pass && (profile || earlier.time));
}

bool verdict_kept_on_resume(const ResultRow& earlier, bool profile) {
  return !profile && earlier.status == Status::pass && !earlier.time;
}

void copy_measurements(const ResultRow& from, ResultRow& to) {
  to.status = from.status;
  to.reason = from.reason;
  to.verified = from.verified;
  to.verify_mode = from.verify_mode;
  to.baseline = from.baseline;
  to.outputs = from.outputs;
  to.time = from.time;
  to.memory = from.memory;
}

}  // namespace attnbench
