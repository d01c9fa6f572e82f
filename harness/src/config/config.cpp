#include "attnbench/config.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "attnbench/context.hpp"
#include "attnbench/splitmix64.hpp"

namespace attnbench {

std::string ConfigError::text() const {
  if (path.empty() && value.empty()) return message;
  std::string s = path.empty() ? std::string("(document)") : path;
  if (!value.empty()) s.append(" = ").append(value);
  return s.append(": ").append(message);
}

std::string printable(std::string_view text) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      s.append("\\x").push_back(hex[c >> 4]);
      s.push_back(hex[c & 15]);
    } else {
      s.push_back(ch);
    }
  }
  return s;
}

PrintableBuf::int_type PrintableBuf::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  const char c = traits_type::to_char_type(ch);
  const auto u = static_cast<unsigned char>(c);
  if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
    const std::string esc = printable(std::string_view(&c, 1));
    return dest_->sputn(esc.data(), static_cast<std::streamsize>(esc.size())) ==
                   static_cast<std::streamsize>(esc.size())
               ? ch
               : traits_type::eof();
  }
  return dest_->sputc(c);
}

std::streamsize PrintableBuf::xsputn(const char* s, std::streamsize n) {
  std::streamsize done = 0;
  while (done < n) {
    // The longest run without a byte to escape goes through in one call.
    std::streamsize run = 0;
    while (done + run < n) {
      const auto u = static_cast<unsigned char>(s[done + run]);
      if ((u < 0x20 && u != '\n' && u != '\t') || u == 0x7f) break;
      ++run;
    }
    if (run > 0 && dest_->sputn(s + done, run) != run) return done;
    done += run;
    if (done < n) {
      if (traits_type::eq_int_type(overflow(traits_type::to_int_type(s[done])), traits_type::eof()))
        return done;
      ++done;
    }
  }
  return n;
}

std::string json_pointer_escape(std::string_view key) {
  std::string s;
  for (char c : key) {
    if (c == '~') s += "~0";
    else if (c == '/') s += "~1";
    else s += c;
  }
  return s;
}

std::size_t Config::case_count() const {
  std::size_t n = 0;
  for (const auto& g : groups) n += g.cases.size();
  return n;
}

std::size_t Config::row_count() const {
  std::size_t n = 0;
  for (const auto& g : groups) {
    std::size_t per_case = 0;
    for (const auto& ir : g.impls) per_case += ir.option_sets.size();
    n += g.cases.size() * per_case * g.passes.size();
  }
  return n;
}

std::string Config::hash() const {
  // Canonical form: keys sorted (nlohmann::json is a std::map), compact, no comments.
  // Invalid UTF-8 (possible in command-line overrides) is replaced rather than thrown on.
  constexpr auto replace = nlohmann::json::error_handler_t::replace;
  return hex64(fnv1a64(nlohmann::json::parse(json.dump(-1, ' ', false, replace)).dump(-1, ' ', false, replace)));
}

namespace {

using json = nlohmann::ordered_json;

struct Failure {
  ConfigError error;
};

// Limits that keep a hostile or mistaken config from exhausting memory or time before it is
// refused (the parser is fuzzed: tests/fuzz/).
constexpr std::size_t kMaxCases = 100000;       // cases of one config
constexpr std::size_t kMaxOptionSets = 10000;   // option sets of one "options" entry
constexpr std::size_t kMaxRows = 1000000;       // rows of one config
constexpr std::size_t kValueTextMax = 120;      // characters of a value quoted in a message

// A value for an error message: compact JSON, cut short. Written by hand with a depth limit,
// because nlohmann's dump() recurses once per nesting level and [[[[...]]]] can be deep.
void compact_into(const json& v, std::string& out, int depth) {
  if (out.size() > kValueTextMax) return;
  if (v.is_array() || v.is_object()) {
    const bool arr = v.is_array();
    if (depth >= 4 && !v.empty()) {
      out += arr ? "[...]" : "{...}";
      return;
    }
    out += arr ? '[' : '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ',';
      first = false;
      if (out.size() > kValueTextMax) {
        out += "...";
        break;
      }
      if (!arr) out.append(json(it.key()).dump(-1, ' ', false, json::error_handler_t::replace)).append(":");
      compact_into(it.value(), out, depth + 1);
    }
    out += arr ? ']' : '}';
    return;
  }
  // Strings from the command line are not UTF-8-checked by a parser: replace, never throw.
  out += v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string compact(const json& v) {
  std::string s;
  compact_into(v, s, 0);
  if (s.size() > kValueTextMax) s = s.substr(0, kValueTextMax - 3) + "...";
  return s;
}

[[noreturn]] void fail(const std::string& path, const json* value, const std::string& message) {
  throw Failure{{path, value ? compact(*value) : std::string(), message}};
}
[[noreturn]] void fail_text(const std::string& path, const std::string& value, const std::string& message) {
  throw Failure{{path, value, message}};
}

// '"' + s + '"' built by append: GCC 12 reports a false -Wrestrict on the operator+ chain.
std::string quoted(const std::string& s) {
  std::string q;
  q.reserve(s.size() + 2);
  q.push_back('"');
  q.append(s);
  q.push_back('"');
  return q;
}

std::string at(const std::string& path, std::string_view key) {
  return path + "/" + json_pointer_escape(key);
}
std::string at(const std::string& path, std::size_t i) { return path + "/" + std::to_string(i); }

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The key "options" had before (still read, with a note; never offered in an error).
constexpr const char* kFormerOptionsKey = "params";

// Refuses a key of obj that is neither in `allowed` nor in `former` (keys still read under a
// former name); the error names the allowed ones.
void check_keys(const json& obj, const std::string& path, const std::vector<std::string>& allowed,
                const std::vector<std::string>& former = {}) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const auto known = [&](const std::vector<std::string>& v) {
      return std::find(v.begin(), v.end(), it.key()) != v.end();
    };
    if (!known(allowed) && !known(former)) {
      fail_text(at(path, it.key()), "",
                "unknown key \"" + it.key() + "\" (allowed here: " + join(allowed) + ")");
    }
  }
}

const json& expect_object(const json& v, const std::string& path) {
  if (!v.is_object()) fail(path, &v, std::string("must be an object, not ") + v.type_name());
  return v;
}

const json& expect_array(const json& v, const std::string& path, bool allow_empty = false) {
  if (!v.is_array()) fail(path, &v, std::string("must be an array, not ") + v.type_name());
  if (!allow_empty && v.empty()) fail(path, &v, "must not be empty");
  return v;
}

std::string expect_string(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path, &v, std::string("must be a string, not ") + v.type_name());
  return v.get<std::string>();
}

bool expect_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) fail(path, &v, std::string("must be true or false, not ") + v.type_name());
  return v.get<bool>();
}

double expect_number(const json& v, const std::string& path) {
  if (!v.is_number()) fail(path, &v, std::string("must be a number, not ") + v.type_name());
  return v.get<double>();
}

std::int64_t expect_int(const json& v, const std::string& path, std::int64_t lo, std::int64_t hi,
                        const char* what) {
  if (!v.is_number_integer()) fail(path, &v, std::string("must be ") + what);
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) {
    fail(path, &v, std::string("must be ") + what);
  }
  const std::int64_t x = v.get<std::int64_t>();
  if (x < lo || x > hi) fail(path, &v, std::string("must be ") + what);
  return x;
}

// ---- Problem fields -------------------------------------------------------------------------

// varlen is the distribution that draws both seqlens_q and seqlens_kv: a field of its own, so that
// errors point at it and a case cannot take lengths from it and from a list at once.
enum class Field {
  batch,
  heads_q,
  heads_kv,
  seq_q,
  seq_kv,
  head_dim,
  causal,
  scale,
  dtype,
  window_left,
  window_right,
  softcap,
  seqlens_q,
  seqlens_kv,
  varlen,
  ragged,
  page_size,
  page_order,
  num_pages,
  block_table
};
constexpr std::size_t kFields = 20;
constexpr std::array<const char*, kFields> kFieldNames = {
    "batch",     "heads_q",    "heads_kv",    "seq_q",     "seq_kv",
    "head_dim",  "causal",     "scale",       "dtype",     "window_left",
    "window_right", "softcap", "seqlens_q",   "seqlens_kv", "varlen",
    "ragged",    "page_size",  "page_order",  "num_pages", "block_table"};

const std::vector<std::string>& problem_keys() {
  static const std::vector<std::string> k = {
      "batch",     "heads_q",    "heads_kv",  "seq_q",       "seq_kv",       "head_dim",
      "causal",    "scale",      "dtype",     "window_left", "window_right", "softcap",
      "seqlens_q", "seqlens_kv", "varlen",    "ragged",      "page_size",    "page_order",
      "num_pages", "block_table", "seq",      "heads"};
  return k;
}

// The most sequences one "varlen" distribution may draw (its total_tokens over its lengths).
constexpr std::int64_t kMaxVarlenSequences = 1 << 20;

// The "min", "max" and "seed" of a length distribution ("varlen", "ragged"): length i is
// min + splitmix64(seed + i) % (max - min + 1).
struct LengthDraw {
  std::int64_t lo, hi;
  std::uint64_t seed;
  std::int64_t operator()(std::uint64_t i) const {
    const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(splitmix64(seed + i) % span);
  }
};
LengthDraw length_draw(const json& v, const std::string& path) {
  LengthDraw d{};
  d.lo = expect_int(v["min"], at(path, "min"), 0, INT_MAX, "a length >= 0");
  d.hi = expect_int(v["max"], at(path, "max"), std::max<std::int64_t>(d.lo, 1), INT_MAX,
                    "a length >= 1 and >= min");
  if (v.contains("seed")) {
    d.seed = static_cast<std::uint64_t>(
        expect_int(v["seed"], at(path, "seed"), 0, INT64_MAX, "a non-negative integer"));
  }
  return d;
}

// "varlen": {"total_tokens": T, "min": a, "max": b, "seed": s}: lengths uniform in [a, b], drawn
// from a counter-based generator (splitmix64 of seed + index, then modulo: portable, unlike the
// standard distributions), until they sum to T; the last is cut so that the sum is exactly T (it
// may fall below min). Queries and keys get the same lengths (self-attention over packed
// sequences).
std::vector<int> draw_lengths(const json& v, const std::string& path) {
  expect_object(v, path);
  check_keys(v, path, {"total_tokens", "min", "max", "seed"});
  for (const char* k : {"total_tokens", "min", "max"}) {
    if (!v.contains(k))
      fail(path, &v, std::string("needs \"") + k + "\" (and total_tokens, min, max, seed)");
  }
  const std::int64_t total = expect_int(v["total_tokens"], at(path, "total_tokens"), 1, INT_MAX,
                                        "an integer in [1, 2^31 - 1]");
  const LengthDraw draw = length_draw(v, path);
  std::vector<int> lens;
  std::int64_t sum = 0;
  for (std::uint64_t i = 0; sum < total; ++i) {
    if (static_cast<std::int64_t>(lens.size()) >= kMaxVarlenSequences) {
      fail(path, &v,
           "draws more than " + std::to_string(kMaxVarlenSequences) +
               " sequences: raise min and max or lower total_tokens");
    }
    const std::int64_t n = std::min<std::int64_t>(draw(i), total - sum);
    lens.push_back(static_cast<int>(n));
    sum += n;
  }
  return lens;
}

// "ragged": {"batch": B, "seq_q": n, "min": a, "max": b, "seed": s}: a decode batch of B
// sequences with n new tokens each (default 1) over context lengths drawn uniformly in [a, b]
// (the generator of "varlen": splitmix64 of seed + index, modulo the range). Sets seqlens_q (n
// each) and seqlens_kv (the contexts).
void draw_ragged(const json& v, const std::string& path, Problem& p) {
  expect_object(v, path);
  check_keys(v, path, {"batch", "seq_q", "min", "max", "seed"});
  for (const char* k : {"batch", "min", "max"}) {
    if (!v.contains(k))
      fail(path, &v, std::string("needs \"") + k + "\" (and batch, seq_q, min, max, seed)");
  }
  const std::int64_t batch = expect_int(v["batch"], at(path, "batch"), 1, kMaxVarlenSequences,
                                        "a sequence count in [1, 2^20]");
  std::int64_t seq_q = 1;
  if (v.contains("seq_q"))
    seq_q = expect_int(v["seq_q"], at(path, "seq_q"), 1, INT_MAX, "a query count >= 1");
  const LengthDraw draw = length_draw(v, path);
  p.seqlens_q.assign(static_cast<std::size_t>(batch), static_cast<int>(seq_q));
  p.seqlens_kv.clear();
  for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(batch); ++i)
    p.seqlens_kv.push_back(static_cast<int>(draw(i)));
}

// "block_table": one row of physical page indices per sequence (rows may differ in length).
std::vector<std::vector<int>> page_rows(const json& v, const std::string& path) {
  expect_array(v, path);
  std::vector<std::vector<int>> rows;
  for (std::size_t b = 0; b < v.size(); ++b) {
    const std::string bp = at(path, b);
    expect_array(v[b], bp, true);  // a sequence without keys may have no page
    std::vector<int> row;
    for (std::size_t i = 0; i < v[b].size(); ++i) {
      row.push_back(static_cast<int>(
          expect_int(v[b][i], at(bp, i), 0, INT_MAX - 1, "a page index >= 0")));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// A list of lengths, one per sequence, each >= 0.
std::vector<int> length_list(const json& v, const std::string& path) {
  expect_array(v, path);
  std::vector<int> lens;
  for (std::size_t i = 0; i < v.size(); ++i) {
    lens.push_back(static_cast<int>(expect_int(v[i], at(path, i), 0, INT_MAX, "a length >= 0")));
  }
  return lens;
}

// The concrete fields a key sets: "seq" and "heads" set two.
std::vector<Field> targets(std::string_view key) {
  if (key == "seq") return {Field::seq_q, Field::seq_kv};
  if (key == "heads") return {Field::heads_q, Field::heads_kv};
  for (std::size_t i = 0; i < kFields; ++i) {
    if (key == kFieldNames[i]) return {static_cast<Field>(i)};
  }
  return {};
}

void set_field(Problem& p, Field f, const json& v, const std::string& path) {
  auto size = [&](int& dst) {
    // Beyond int (every size is an int in Problem): say so, with the limit.
    if (v.is_number_integer() &&
        (v.is_number_unsigned() ? v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT_MAX)
                                : v.get<std::int64_t>() > INT_MAX)) {
      fail(path, &v, "is too large: at most " + std::to_string(INT_MAX));
    }
    dst = static_cast<int>(expect_int(v, path, 1, INT_MAX, "a positive integer"));
  };
  switch (f) {
    case Field::batch: size(p.batch); break;
    case Field::heads_q: size(p.heads_q); break;
    case Field::heads_kv: size(p.heads_kv); break;
    case Field::seq_q: size(p.seq_q); break;
    case Field::seq_kv: size(p.seq_kv); break;
    case Field::head_dim:
      size(p.head_dim);
      if (p.head_dim > kMaxHeadDim) fail(path, &v, "head_dim must be at most " + std::to_string(kMaxHeadDim));
      break;
    case Field::causal: p.causal = expect_bool(v, path); break;
    case Field::scale: {
      const double s = expect_number(v, path);
      if (!std::isfinite(s) || s < 0) fail(path, &v, "must be a finite number >= 0 (0 means 1/sqrt(head_dim))");
      if (s > kMaxScale) fail(path, &v, kScaleOverflow);
      p.scale = s;
      break;
    }
    case Field::dtype: {
      const std::string s = expect_string(v, path);
      const auto t = parse_dtype(s);
      if (!t) fail(path, &v, "unknown dtype (f32, f16, bf16)");
      p.dtype = *t;
      break;
    }
    case Field::window_left:
    case Field::window_right: {
      int& w = f == Field::window_left ? p.window_left : p.window_right;
      w = static_cast<int>(expect_int(v, path, -1, INT_MAX, "-1 (unbounded) or a key count >= 0"));
      break;
    }
    case Field::softcap: {
      const double c = expect_number(v, path);
      if (!std::isfinite(c) || c < 0) fail(path, &v, "must be a finite number >= 0 (0 means off)");
      p.softcap = c;
      break;
    }
    case Field::seqlens_q:
      p.seqlens_q = length_list(v, path);
      break;
    case Field::seqlens_kv:
      p.seqlens_kv = length_list(v, path);
      break;
    case Field::varlen:
      p.seqlens_q = draw_lengths(v, path);
      p.seqlens_kv = p.seqlens_q;
      break;
    case Field::ragged:
      draw_ragged(v, path, p);
      break;
    case Field::page_size:
      p.page_size = static_cast<int>(
          expect_int(v, path, 0, INT_MAX, "an integer >= 0 (keys per page; 0: K and V contiguous)"));
      break;
    case Field::page_order: {
      const auto o = parse_page_order(expect_string(v, path));
      if (!o) fail(path, &v, "must be \"sequential\" or \"shuffled\" (explicit pages: \"block_table\")");
      p.page_order = *o;
      break;
    }
    case Field::num_pages:
      p.num_pages = static_cast<int>(expect_int(v, path, 1, INT_MAX, "a page count >= 1"));
      break;
    case Field::block_table:
      p.set_block_table(page_rows(v, path));
      break;
  }
}

// Where each field of a case came from, for error messages.
struct Source {
  std::string path;
  std::string value;
};
using Sources = std::array<Source, kFields>;

// ---- Sweeps -----------------------------------------------------------------------------------

struct Column {
  std::vector<Field> fields;
  std::string path;  // of the array
  const json* values;
};
// One dimension of the sweep: a product axis (one column) or a zip group (columns of equal length).
struct Dimension {
  std::vector<Column> columns;
  std::size_t size() const { return columns.front().values->size(); }
};

// ---- Sections of a config or a group: inputs, devices, passes, verify, timing -----------------

void parse_inputs(const json& v, Config& c) {
  expect_object(v, "/inputs");
  check_keys(v, "/inputs", {"distribution", "seed"});
  if (v.contains("distribution")) {
    const std::string d = expect_string(v["distribution"], "/inputs/distribution");
    if (d == "normal")
      c.distribution = Distribution::normal;
    else if (d == "outlier")
      c.distribution = Distribution::outlier;
    else
      fail("/inputs/distribution", &v["distribution"], "must be \"normal\" or \"outlier\"");
  }
  if (v.contains("seed")) {
    const json& s = v["seed"];
    if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<std::int64_t>() < 0)) {
      fail("/inputs/seed", &s, "must be a non-negative integer");
    }
    c.seed = s.get<std::uint64_t>();
  }
}

std::vector<Device> parse_devices(const json& v, const std::string& path) {
  expect_array(v, path);
  std::vector<Device> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string s = expect_string(v[i], at(path, i));
    if (s == "cpu")
      out.push_back(Device::cpu);
    else if (s == "cuda")
      out.push_back(Device::cuda);
    else
      fail(at(path, i), &v[i], "must be \"cpu\" or \"cuda\"");
  }
  return out;
}

std::vector<Pass> parse_passes(const json& v, const std::string& path) {
  expect_array(v, path);
  std::vector<Pass> out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string s = expect_string(v[i], at(path, i));
    Pass p;
    if (s == "fwd")
      p = Pass::fwd;
    else if (s == "bwd")
      p = Pass::bwd;
    else if (s == "fwd_bwd")
      p = Pass::fwd_bwd;
    else
      fail(at(path, i), &v[i], "must be \"fwd\", \"bwd\" or \"fwd_bwd\"");
    if (std::find(out.begin(), out.end(), p) != out.end())
      fail(at(path, i), &v[i], "is listed twice");
    out.push_back(p);
  }
  return out;
}

void parse_verify(const json& v, const std::string& path, VerifySettings& out) {
  expect_object(v, path);
  check_keys(v, path, {"mode", "sample_heads", "sample_rows"});
  if (v.contains("mode")) {
    const std::string m = expect_string(v["mode"], at(path, "mode"));
    if (m == "auto")
      out.mode = VerifyMode::automatic;
    else if (m == "full")
      out.mode = VerifyMode::full;
    else if (m == "sampled")
      out.mode = VerifyMode::sampled;
    else if (m == "off")
      out.mode = VerifyMode::off;
    else
      fail(at(path, "mode"), &v["mode"], "must be \"auto\", \"full\", \"sampled\" or \"off\"");
  }
  if (v.contains("sample_heads")) {
    out.sample.heads = static_cast<int>(
        expect_int(v["sample_heads"], at(path, "sample_heads"), 1, INT_MAX, "a positive integer"));
  }
  if (v.contains("sample_rows")) {
    out.sample.rows = static_cast<int>(
        expect_int(v["sample_rows"], at(path, "sample_rows"), 1, INT_MAX, "a positive integer"));
  }
}

void parse_timing(const json& v, const std::string& path, TimingSettings& out) {
  expect_object(v, path);
  check_keys(v, path, {"hot", "flush", "min_time_s", "repetitions", "warmup_s"});
  if (v.contains("hot")) out.hot = expect_bool(v["hot"], at(path, "hot"));
  if (v.contains("flush")) {
    const auto m = parse_flush_mode(expect_string(v["flush"], at(path, "flush")));
    if (!m) fail(at(path, "flush"), &v["flush"], "must be \"write\" or \"read\"");
    out.flush = *m;
  }
  if (v.contains("min_time_s")) {
    const double t = expect_number(v["min_time_s"], at(path, "min_time_s"));
    if (!(t > 0 && t <= 3600))
      fail(at(path, "min_time_s"), &v["min_time_s"], "must be in (0, 3600] seconds");
    out.min_time_s = t;
  }
  if (v.contains("repetitions")) {
    out.repetitions = static_cast<int>(expect_int(v["repetitions"], at(path, "repetitions"), 1,
                                                  10000, "an integer in [1, 10000]"));
  }
  if (v.contains("warmup_s")) {
    const double t = expect_number(v["warmup_s"], at(path, "warmup_s"));
    if (!(t >= 0 && t <= 3600))
      fail(at(path, "warmup_s"), &v["warmup_s"], "must be in [0, 3600] seconds");
    out.warmup_s = t;
  }
}

// ---- "problem" and "sweep": the problem defaults and the sweep's dimensions -------------------

// A "problem" object over the defaults so far; src records where each field came from.
void apply_problem(const json& pj, const std::string& ppath, Problem& defaults, Sources& src) {
  expect_object(pj, ppath);
  check_keys(pj, ppath, problem_keys());
  for (auto it = pj.begin(); it != pj.end(); ++it) {
    const std::string fp = at(ppath, it.key());
    for (Field f : targets(it.key())) {
      set_field(defaults, f, it.value(), fp);
      src[static_cast<std::size_t>(f)] = {fp, compact(it.value())};
    }
  }
}

// The columns of one "sweep": each problem field swept by one axis at most.
class SweepColumns {
 public:
  Column column(const std::string& key, const json& arr, const std::string& kpath) {
    Column col{claim(key, kpath), kpath, &expect_array(arr, kpath)};
    // Check every value where it stands, so the error points at it.
    Problem scratch;
    for (std::size_t i = 0; i < arr.size(); ++i) {
      for (Field f : col.fields) set_field(scratch, f, arr[i], at(kpath, i));
    }
    return col;
  }

 private:
  std::map<Field, std::string> claimed_;  // field -> path of the axis that sets it

  std::vector<Field> claim(const std::string& key, const std::string& kpath) {
    const auto fs = targets(key);
    if (fs.empty()) {
      fail_text(kpath, "",
                "unknown problem field \"" + key + "\" (fields: " + join(problem_keys()) + ")");
    }
    for (Field f : fs) {
      if (auto it = claimed_.find(f); it != claimed_.end()) {
        fail_text(kpath, "",
                  std::string(kFieldNames[static_cast<std::size_t>(f)]) + " is already swept by " +
                      it->second);
      }
      claimed_[f] = kpath;
    }
    return fs;
  }
};

std::vector<Dimension> parse_sweep(const json& s, const std::string& path) {
  expect_object(s, path);
  check_keys(s, path, {"product", "zip"});
  std::vector<Dimension> dims;
  SweepColumns columns;
  if (s.contains("product")) {
    const std::string pp = at(path, "product");
    const json& prod = expect_object(s["product"], pp);
    for (auto it = prod.begin(); it != prod.end(); ++it) {
      dims.push_back(Dimension{{columns.column(it.key(), it.value(), at(pp, it.key()))}});
    }
  }
  if (s.contains("zip")) {
    const std::string zp = at(path, "zip");
    const json& zips = expect_array(s["zip"], zp);
    for (std::size_t z = 0; z < zips.size(); ++z) {
      const std::string gp = at(zp, z);
      const json& grp = expect_object(zips[z], gp);
      if (grp.empty()) fail(gp, &grp, "a zip group needs at least one field");
      Dimension d;
      for (auto it = grp.begin(); it != grp.end(); ++it) {
        d.columns.push_back(columns.column(it.key(), it.value(), at(gp, it.key())));
        const std::size_t n0 = d.columns.front().values->size(), n = it.value().size();
        if (n != n0) {
          fail(at(gp, it.key()), &it.value(),
               "zipped arrays must have equal lengths: " + std::to_string(n) + " here, " +
                   std::to_string(n0) + " for \"" + grp.begin().key() + "\"");
        }
      }
      dims.push_back(std::move(d));
    }
  }
  return dims;
}

// ---- Cases: the sweep expanded over the defaults, each case checked -----------------------------

class CaseExpander {
 public:
  explicit CaseExpander(const ParseOptions& o) : opts_(o) {}

  void expand(const Problem& defaults, const Sources& src0, const std::vector<Dimension>& dims,
              const std::string& sweep_path, std::vector<Problem>& out) {
    std::size_t total = 1;
    for (const Dimension& d : dims) {
      total = d.size() > kMaxCases ? kMaxCases + 1 : total * d.size();
      if (total > kMaxCases || total_cases_ + total > kMaxCases) {
        fail_text(sweep_path, "", "the sweep expands to more than " + std::to_string(kMaxCases) +
                                      " cases (the limit of one config)");
      }
    }
    total_cases_ += total;
    std::vector<std::size_t> idx(dims.size(), 0);
    while (true) {
      Problem p = defaults;
      Sources src = src0;
      for (std::size_t d = 0; d < dims.size(); ++d) {
        for (const Column& col : dims[d].columns) {
          const json& v = (*col.values)[idx[d]];
          const std::string vp = at(col.path, idx[d]);
          for (Field f : col.fields) {
            set_field(p, f, v, vp);
            src[static_cast<std::size_t>(f)] = {vp, compact(v)};
          }
        }
      }
      // heads_kv left unset means MHA (heads_kv = heads_q), as in FlashAttention and PyTorch: a
      // config or a --heads-q alone must not silently mean MQA.
      if (src[static_cast<std::size_t>(Field::heads_kv)].path.empty()) p.heads_kv = p.heads_q;
      if (p.varlen()) derive_varlen(p, src);
      derive_paged(p, src);
      check_case(p, src, sweep_path);
      out.push_back(p);
      // Odometer: the last dimension varies fastest.
      std::size_t d = dims.size();
      while (d > 0) {
        --d;
        if (++idx[d] < dims[d].size()) break;
        idx[d] = 0;
        if (d == 0) return;
      }
      if (dims.empty()) return;
    }
  }

 private:
  const ParseOptions& opts_;
  std::size_t total_cases_ = 0;  // over all groups, against kMaxCases

  // A varlen case takes batch, seq_q and seq_kv from its lengths (their count and maxima): set
  // by hand as well, they could only repeat or contradict them.
  static void derive_varlen(Problem& p, const Sources& src) {
    auto source_of = [&](Field f) -> const Source& { return src[static_cast<std::size_t>(f)]; };
    for (Field d : {Field::varlen, Field::ragged}) {
      const Source& dist = source_of(d);
      if (dist.path.empty()) continue;
      for (Field f : {Field::seqlens_q, Field::seqlens_kv, Field::varlen}) {
        if (f != d && !source_of(f).path.empty()) {
          fail_text(source_of(f).path, source_of(f).value,
                    std::string(kFieldNames[static_cast<std::size_t>(f)]) + " and " +
                        kFieldNames[static_cast<std::size_t>(d)] + " (at " + dist.path +
                        ") both set the lengths: give one of them");
        }
      }
    }
    for (Field f : {Field::batch, Field::seq_q, Field::seq_kv}) {
      if (!source_of(f).path.empty()) {
        fail_text(source_of(f).path, source_of(f).value,
                  std::string("a varlen case takes batch, seq_q and seq_kv from its lengths (their "
                              "count and maxima): leave ") +
                      kFieldNames[static_cast<std::size_t>(f)] + " out");
      }
    }
    if (!p.seqlens_q.empty() && !p.seqlens_kv.empty()) p.set_seqlens(p.seqlens_q, p.seqlens_kv);
  }

  // A paged case's block table, built from page_order (or given by block_table, not both) once
  // every field is set: it follows the case's lengths and page size.
  static void derive_paged(Problem& p, const Sources& src) {
    const Source& order = src[static_cast<std::size_t>(Field::page_order)];
    const Source& table = src[static_cast<std::size_t>(Field::block_table)];
    if (!order.path.empty() && !table.path.empty()) {
      fail_text(table.path, table.value,
                "block_table and page_order (at " + order.path +
                    ") both say where the pages are: give one of them");
    }
    p.make_block_table();
  }

  void check_case(const Problem& p, const Sources& src, const std::string& sweep_path) {
    auto source_of = [&](Field f) -> const Source& { return src[static_cast<std::size_t>(f)]; };
    if (p.heads_q % p.heads_kv != 0) {
      const Source& s = source_of(Field::heads_kv);
      fail_text(s.path.empty() ? sweep_path : s.path, s.value,
                "heads_q = " + std::to_string(p.heads_q) + " is not a multiple of heads_kv = " +
                    std::to_string(p.heads_kv) + " (case " + p.label() + ")");
    }
    const std::string why = validate(p, opts_.max_bytes);
    if (why.empty()) return;
    // validate() starts its message with the field at fault, when there is one.
    std::string lead = why.substr(0, why.find_first_of(" :"));
    if (lead.rfind("block_table[", 0) == 0) lead = "block_table";  // one entry of the table
    for (std::size_t i = 0; i < kFields; ++i) {
      if (lead == kFieldNames[i] && !src[i].path.empty()) {
        fail_text(src[i].path, src[i].value, why + " (case " + p.label() + ")");
      }
    }
    // Lengths drawn by "varlen" or "ragged" (a list's own messages name seqlens_q or seqlens_kv).
    for (Field f : {Field::varlen, Field::ragged}) {
      if (const Source& d = src[static_cast<std::size_t>(f)];
          !d.path.empty() && lead.rfind("seqlens_", 0) == 0) {
        fail_text(d.path, d.value, why + " (case " + p.label() + ")");
      }
    }
    fail_text(sweep_path, quoted(p.label()), why);
  }
};

// Two identical cases would give rows that compare and table cannot tell apart.
void check_duplicate_cases(const Config& c) {
  std::set<std::string> seen;
  for (std::size_t g = 0; g < c.groups.size(); ++g) {
    for (const Problem& p : c.groups[g].cases) {
      if (!seen.insert(p.label()).second) {
        const std::string where = c.groups.size() > 1 ? at("/groups", g) : std::string("/sweep");
        fail_text(where, quoted(p.label()),
                  "this case appears twice (a sweep repeats a value, or two groups overlap)");
      }
    }
  }
}

// ---- "implementations" and "options": names and globs matched in the registry ----------------

std::int64_t option_value(const json& x, const std::string& xp) {
  return expect_int(x, xp, INT64_MIN, INT64_MAX, "an integer");
}

// Every implementation an "options" key matched must have the option.
void check_option(const std::vector<const Implementation*>& matched, const std::string& opt,
                  const std::string& op) {
  for (const auto* m : matched) {
    const auto known = m->capabilities().options;
    if (std::find(known.begin(), known.end(), opt) == known.end()) {
      fail_text(op, "",
                m->name() + " has no option \"" + opt + "\" (its options: " +
                    (known.empty() ? std::string("none") : join(known)) + ")");
    }
  }
}

// An "options" value that is an array: an explicit list of option sets, for combinations a product
// would over-generate.
std::vector<Options> parse_option_list(const json& v, const std::string& kp,
                                       const std::vector<const Implementation*>& matched) {
  std::vector<Options> sets;
  expect_array(v, kp);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string sp = at(kp, i);
    const json& set = expect_object(v[i], sp);
    Options o;
    for (auto ot = set.begin(); ot != set.end(); ++ot) {
      const std::string op = at(sp, ot.key());
      check_option(matched, ot.key(), op);
      o[ot.key()] = option_value(ot.value(), op);
    }
    sets.push_back(std::move(o));
  }
  return sets;
}

// An "options" value that is an object: each option is a value or an axis; the axes are crossed.
std::vector<Options> parse_option_axes(const json& v, const std::string& kp,
                                       const std::vector<const Implementation*>& matched) {
  const json& obj = expect_object(v, kp);
  std::vector<Options> sets = {Options{}};
  for (auto ot = obj.begin(); ot != obj.end(); ++ot) {
    const std::string op = at(kp, ot.key());
    check_option(matched, ot.key(), op);
    std::vector<std::int64_t> values;
    if (ot.value().is_array()) {
      expect_array(ot.value(), op);
      for (std::size_t i = 0; i < ot.value().size(); ++i) {
        values.push_back(option_value(ot.value()[i], at(op, i)));
      }
    } else {
      values.push_back(option_value(ot.value(), op));
    }
    if (sets.size() * values.size() > kMaxOptionSets) {
      fail_text(
          op, "",
          "the options axes expand to more than " + std::to_string(kMaxOptionSets) + " option sets");
    }
    std::vector<Options> next;
    for (const auto& s : sets) {
      for (auto x : values) {
        Options o = s;
        o[ot.key()] = x;
        next.push_back(std::move(o));
      }
    }
    sets = std::move(next);
  }
  return sets;
}

class ImplMatcher {
 public:
  explicit ImplMatcher(const Registry& reg) : reg_(reg) {}

  std::vector<const Implementation*> all() const { return reg_.all(); }

  // The notes for the user that matching gave (a former name resolved), each once, in order.
  const std::vector<std::string>& notes() const { return notes_; }
  void note(const std::string& text) const {
    if (std::find(notes_.begin(), notes_.end(), text) == notes_.end()) notes_.push_back(text);
  }

  // The implementations a name or glob names. A former name (ATTNBENCH_FORMER_NAME), written out
  // exactly, names the implementation it became, with a note; globs match current names only.
  std::vector<const Implementation*> resolve(const std::string& glob) const {
    std::vector<const Implementation*> matched = reg_.match(glob);
    if (matched.empty() && reg_.is_former_name(glob)) {
      const std::string now = reg_.canonical(glob);
      if (const Implementation* i = reg_.find(now)) {
        matched.push_back(i);
        note("note: " + glob + " is the former name of " + now + ", which runs instead (rows say " +
             now + ")");
      }
    }
    return matched;
  }

  std::vector<const Implementation*> parse_impls(const json& v, const std::string& path) const {
    std::vector<std::pair<const json*, std::string>> globs;
    if (v.is_string()) {
      globs.push_back({&v, path});
    } else {
      expect_array(v, path);
      for (std::size_t i = 0; i < v.size(); ++i) globs.push_back({&v[i], at(path, i)});
    }
    std::vector<const Implementation*> out;
    for (const auto& [g, gp] : globs) {
      const std::string glob = expect_string(*g, gp);
      const auto matched = resolve(glob);
      if (matched.empty() && !device_not_built(glob)) {
        fail(gp, g, "matches no registered implementation (registered: " + registered_names() + ")");
      }
      for (const auto* m : matched) {
        if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
      }
    }
    std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
    return out;
  }

  std::map<std::string, std::vector<Options>> parse_options(const json& v,
                                                            const std::string& path) const {
    expect_object(v, path);
    std::map<std::string, std::vector<Options>> out;
    std::map<std::string, std::string> owner;  // impl name -> "options" key path
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string kp = at(path, it.key());
      const auto matched = resolve(it.key());
      if (matched.empty() && !device_not_built(it.key())) {
        fail_text(kp, "", "\"" + it.key() + "\" matches no registered implementation (registered: " +
                              registered_names() + ")");
      }
      for (const auto* m : matched) {
        if (auto o = owner.find(m->name()); o != owner.end()) {
          fail_text(kp, "", m->name() + " is already given options by " + o->second);
        }
        owner[m->name()] = kp;
      }
      const std::vector<Options> sets = it.value().is_array()
                                            ? parse_option_list(it.value(), kp, matched)
                                            : parse_option_axes(it.value(), kp, matched);
      for (const auto* m : matched) out[m->name()] = sets;
    }
    return out;
  }

 private:
  const Registry& reg_;
  mutable std::vector<std::string> notes_;

  // "cuda.*" in a build without CUDA: the config stays valid on every machine, the rows just
  // do not exist there. Only a device prefix whose device has no implementation in this build
  // qualifies; any other glob that matches nothing is a typo.
  bool device_not_built(const std::string& glob) const {
    const std::string prefix = glob.substr(0, glob.find('.'));
    if (prefix != to_string(Device::cuda) && prefix != to_string(Device::cpu)) return false;
    for (const auto* i : reg_.all()) {
      if (to_string(i->device()) == prefix) return false;
    }
    return true;
  }

  std::string registered_names() const {
    std::vector<std::string> names;
    for (const auto* i : reg_.all()) names.push_back(i->name());
    return names.empty() ? std::string("none") : join(names);
  }
};

// ---- The document: its top level, then each group over it ---------------------------------------

// The value of key for a group: the group's own, else the top level's (when not grouped the
// group is the top level itself).
struct Found {
  const json* value = nullptr;
  std::string path;
};
Found lookup(const json& top, const json* group, const std::string& gpath, const char* key) {
  if (group && group->contains(key)) return {&(*group)[key], at(gpath, key)};
  if (!group && top.contains(key)) return {&top[key], at("", key)};
  return {};
}

// The top level's "name" and "description", and the check that the config says what to run.
void parse_top_level(const json& doc, bool grouped, Config& c) {
  if (doc.contains("name")) {
    c.name = expect_string(doc["name"], "/name");
    if (c.name.empty() ||
        c.name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
            std::string::npos) {
      fail("/name", &doc["name"],
           "must be non-empty and use only letters, digits, '.', '_' and '-' (it names the results "
           "file)");
    }
  }
  if (doc.contains("description"))
    c.description = expect_string(doc["description"], "/description");
  // A config says what to run: an empty one ({}) would run every implementation on a default
  // one-token problem, which nobody means.
  auto says_what = [](const json& o) {
    return o.is_object() &&
           (o.contains("implementations") || o.contains("problem") || o.contains("sweep"));
  };
  bool named = says_what(doc);
  if (grouped && doc["groups"].is_array())
    for (const json& g : doc["groups"]) named = named || says_what(g);
  if (!named) {
    fail_text("", "",
              "names no \"implementations\", \"problem\" or \"sweep\": say what to run "
              "(configs/smoke.json is a small example)");
  }
}

class Parser {
 public:
  explicit Parser(const ParseOptions& o)
      : opts_(o), impls_(o.registry ? *o.registry : Registry::instance()), cases_(o) {}

  Config parse(const json& doc) {
    Config c;
    expect_object(doc, "");
    const bool grouped = doc.contains("groups");
    if (grouped) {
      check_keys(doc, "",
                 {"name", "description", "problem", "inputs", "verify", "timing", "groups"});
    } else {
      check_keys(doc, "",
                 {"name", "description", "problem", "sweep", "implementations", "passes", "inputs",
                  "verify", "timing", "options", "devices", "groups"},
                 {kFormerOptionsKey});
    }
    parse_top_level(doc, grouped, c);
    if (doc.contains("inputs")) parse_inputs(doc["inputs"], c);

    if (grouped) {
      const std::string groups_path = "/groups";  // a named string: no reference to a temporary
      const json& groups = expect_array(doc["groups"], groups_path);
      for (std::size_t i = 0; i < groups.size(); ++i) {
        const std::string gp = at("/groups", i);
        expect_object(groups[i], gp);
        check_keys(groups[i], gp,
                   {"description", "problem", "sweep", "implementations", "passes", "options",
                    "devices", "verify", "timing"},
                   {kFormerOptionsKey});
        c.groups.push_back(parse_group(doc, &groups[i], gp));
      }
    } else {
      c.groups.push_back(parse_group(doc, nullptr, ""));
    }
    check_duplicate_cases(c);
    if (c.row_count() > kMaxRows) {
      fail_text(grouped ? "/groups" : "", "",
                "expands to " + std::to_string(c.row_count()) + " rows, more than the limit of " +
                    std::to_string(kMaxRows));
    }
    if (c.row_count() == 0 && !opts_.allow_no_rows) {
      fail_text(grouped ? "/groups" : "", "",
                "nothing to run: no implementation is left (a \"devices\" filter, or a build "
                "without the implementations' device)");
    }
    // Copied only now: the document is known to be shallow (copying recurses per level).
    c.json = doc;
    c.notes = impls_.notes();
    return c;
  }

 private:
  const ParseOptions& opts_;
  const ImplMatcher impls_;
  CaseExpander cases_;

  ConfigGroup parse_group(const json& top, const json* group, const std::string& gpath) {
    ConfigGroup g;
    if (group && group->contains("description")) {
      g.description = expect_string((*group)["description"], at(gpath, "description"));
    }
    parse_cases(top, group, gpath, g);
    parse_impl_runs(top, group, gpath, g);

    g.passes = {Pass::fwd};
    if (Found ps = lookup(top, group, gpath, "passes"); ps.value)
      g.passes = parse_passes(*ps.value, ps.path);

    // verify and timing: per-field defaults from the top level, then the group's own.
    if (top.contains("verify")) parse_verify(top["verify"], "/verify", g.verify);
    if (group && group->contains("verify"))
      parse_verify((*group)["verify"], at(gpath, "verify"), g.verify);
    if (top.contains("timing")) parse_timing(top["timing"], "/timing", g.timing);
    if (group && group->contains("timing"))
      parse_timing((*group)["timing"], at(gpath, "timing"), g.timing);
    return g;
  }

  // The group's cases: the problem defaults (the top level's fields, then the group's) swept.
  void parse_cases(const json& top, const json* group, const std::string& gpath, ConfigGroup& g) {
    Problem defaults;
    Sources src;
    for (std::size_t i = 0; i < kFields; ++i) src[i] = {"", "(default)"};
    if (top.contains("problem")) apply_problem(top["problem"], "/problem", defaults, src);
    if (group && group->contains("problem")) {
      apply_problem((*group)["problem"], at(gpath, "problem"), defaults, src);
    }

    std::vector<Dimension> dims;
    std::string sweep_path = group ? at(gpath, "problem") : "/problem";
    if (Found s = lookup(top, group, gpath, "sweep"); s.value) {
      sweep_path = s.path;
      dims = parse_sweep(*s.value, s.path);
    }
    cases_.expand(defaults, src, dims, sweep_path, g.cases);
  }

  // The group's "options", or "params", its former name (read as it, with a note); both in one
  // object is an error naming the field.
  Found lookup_options(const json& top, const json* group, const std::string& gpath) const {
    const json& obj = group ? *group : top;
    const std::string base = group ? gpath : std::string();
    if (!obj.contains(kFormerOptionsKey)) return lookup(top, group, gpath, "options");
    if (obj.contains("options")) {
      fail_text(at(base, kFormerOptionsKey), "",
                "both \"options\" and \"params\" (its former name) are given: keep \"options\" "
                "alone");
    }
    impls_.note("note: the config key \"params\" is the former name of \"options\"");
    return lookup(top, group, gpath, kFormerOptionsKey);
  }

  // The group's implementations on its devices, each with its option sets.
  void parse_impl_runs(const json& top, const json* group, const std::string& gpath,
                       ConfigGroup& g) {
    std::vector<Device> devices{Device::cpu, Device::cuda};
    if (Found d = lookup(top, group, gpath, "devices"); d.value)
      devices = parse_devices(*d.value, d.path);

    std::vector<const Implementation*> impls = impls_.all();
    if (Found im = lookup(top, group, gpath, "implementations"); im.value) {
      impls = impls_.parse_impls(*im.value, im.path);
    }
    std::map<std::string, std::vector<Options>> options;
    if (Found op = lookup_options(top, group, gpath); op.value)
      options = impls_.parse_options(*op.value, op.path);
    for (const Implementation* impl : impls) {
      if (std::find(devices.begin(), devices.end(), impl->device()) == devices.end()) continue;
      ImplRun run;
      run.impl = impl;
      if (auto it = options.find(impl->name()); it != options.end()) run.option_sets = it->second;
      g.impls.push_back(std::move(run));
    }
  }
};

// "line 3, column 14" for a byte offset (1-based, as nlohmann reports it).
std::string line_col(std::string_view text, std::size_t byte) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(col);
}

}  // namespace

std::optional<ConfigError> check_depth(const nlohmann::ordered_json& doc, int max_depth) {
  std::vector<std::pair<const json*, int>> stack{{&doc, 1}};
  while (!stack.empty()) {
    const auto [v, d] = stack.back();
    stack.pop_back();
    if (!v->is_structured()) continue;
    if (d > max_depth) {
      return ConfigError{"", "", "nested deeper than " + std::to_string(max_depth) + " levels"};
    }
    for (const auto& child : *v) stack.emplace_back(&child, d + 1);
  }
  return std::nullopt;
}

ConfigResult parse_config_doc(const nlohmann::ordered_json& doc, const ParseOptions& opts) {
  if (auto e = check_depth(doc)) return *e;
  try {
    return Parser(opts).parse(doc);
  } catch (const Failure& f) {
    return f.error;
  } catch (const nlohmann::json::exception& e) {
    // Every value is type-checked before it is read, so this is a bug; still an error, not a crash.
    return ConfigError{"", "", std::string("internal error reading the config: ") + e.what()};
  }
}

ConfigResult parse_config(std::string_view text, const ParseOptions& opts) {
  nlohmann::ordered_json doc;
  try {
    // Comments are allowed: configs explain their choices.
    doc = nlohmann::ordered_json::parse(text.begin(), text.end(), nullptr, true, true);
  } catch (const nlohmann::json::parse_error& e) {
    std::string msg = e.what();
    // Keep nlohmann's reason, drop its "[json.exception.parse_error.101] parse error at ..." prefix.
    if (const auto p = msg.find(": syntax error"); p != std::string::npos) msg = msg.substr(p + 2);
    return ConfigError{"", "", "not valid JSON at " + line_col(text, e.byte) + ": " + msg};
  } catch (const nlohmann::json::exception& e) {
    // Not a parse_error: e.g. out_of_range 406 for a number beyond double ("1e999"). Found by
    // fuzzing (tests/fuzz/regressions/error-number-overflow.json).
    std::string msg = e.what();
    if (const auto p = msg.find("] "); p != std::string::npos) msg = msg.substr(p + 2);
    return ConfigError{"", "", "not valid JSON: " + msg};
  }
  return parse_config_doc(doc, opts);
}

}  // namespace attnbench
