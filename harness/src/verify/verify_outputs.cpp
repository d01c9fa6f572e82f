// Verification of a peer's outputs by the harness's own rule (verify_outputs.hpp).
#include "attnbench/verify_outputs.hpp"

#include <algorithm>
#include <stdexcept>

#include "attnbench/results.hpp"
#include "attnbench/validation.hpp"

namespace attnbench {

namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& field, const json& value, const std::string& why) {
  throw std::invalid_argument(field + " = " + value.dump(-1, ' ', false, json::error_handler_t::replace) + ": " + why);
}

int positive_int(const json& p, const char* key) {
  if (!p.contains(key)) throw std::invalid_argument(std::string("problem.") + key + ": missing");
  const json& v = p[key];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > INT32_MAX) {
    bad(std::string("problem.") + key, v, "must be a positive integer");
  }
  return v.get<int>();
}

}  // namespace

Problem problem_from_json(const json& p) {
  if (!p.is_object()) bad("problem", p, "must be an object");
  Problem x;
  x.batch = positive_int(p, "batch");
  x.heads_q = positive_int(p, "heads_q");
  x.heads_kv = positive_int(p, "heads_kv");
  x.seq_q = positive_int(p, "seq_q");
  x.seq_kv = positive_int(p, "seq_kv");
  x.head_dim = positive_int(p, "head_dim");
  if (p.contains("causal")) {
    if (!p["causal"].is_boolean()) bad("problem.causal", p["causal"], "must be true or false");
    x.causal = p["causal"].get<bool>();
  }
  if (p.contains("scale")) {
    if (!p["scale"].is_number() || !(p["scale"].get<double>() >= 0)) bad("problem.scale", p["scale"], "must be a number >= 0");
    x.scale = p["scale"].get<double>();
  }
  if (!p.contains("dtype") || !p["dtype"].is_string() || !parse_dtype(p["dtype"].get<std::string>())) {
    bad("problem.dtype", p.contains("dtype") ? p["dtype"] : json(), "must be f32, f16 or bf16");
  }
  x.dtype = *parse_dtype(p["dtype"].get<std::string>());
  // The window and the soft cap (problem_to_json writes them only when set).
  for (const char* key : {"window_left", "window_right"}) {
    if (!p.contains(key)) continue;
    const json& v = p[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < -1 || v.get<std::int64_t>() > INT32_MAX) {
      bad(std::string("problem.") + key, v, "must be -1 (unbounded) or an integer >= 0");
    }
    (key[7] == 'l' ? x.window_left : x.window_right) = v.get<int>();
  }
  if (p.contains("softcap")) {
    if (!p["softcap"].is_number())
      bad("problem.softcap", p["softcap"], "must be a number >= 0 (0: off)");
    x.softcap = p["softcap"].get<double>();
  }
  // Varlen: the per-sequence lengths (problem_to_json writes them only for a varlen problem;
  // validate() then checks them against batch, seq_q and seq_kv).
  for (const char* key : {"seqlens_q", "seqlens_kv"}) {
    if (!p.contains(key)) continue;
    const json& v = p[key];
    if (!v.is_array()) bad(std::string("problem.") + key, v, "must be an array of lengths >= 0");
    std::vector<int>& out = key[8] == 'q' ? x.seqlens_q : x.seqlens_kv;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const json& n = v[i];
      if (!n.is_number_integer() || n.get<std::int64_t>() < 0 ||
          n.get<std::int64_t>() > INT32_MAX) {
        bad(std::string("problem.") + key + "[" + std::to_string(i) + "]", n,
            "must be a length >= 0");
      }
      out.push_back(n.get<int>());
    }
  }
  // Paged KV cache (problem_to_json writes these only for a paged problem): page_size, num_pages,
  // and page_order (the table rebuilt by make_block_table) or the explicit block_table.
  for (const char* key : {"page_size", "num_pages"}) {
    if (!p.contains(key)) continue;
    const json& v = p[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)
      bad(std::string("problem.") + key, v, "must be an integer >= 0");
    (key[0] == 'p' ? x.page_size : x.num_pages) = v.get<int>();
  }
  if (p.contains("page_order") && p.contains("block_table")) {
    bad("problem.block_table", p["block_table"], "and page_order both given: give one of them");
  }
  if (p.contains("page_order")) {
    const json& v = p["page_order"];
    const auto o = v.is_string() ? parse_page_order(v.get<std::string>()) : std::nullopt;
    if (!o) bad("problem.page_order", v, "must be \"sequential\" or \"shuffled\"");
    x.page_order = *o;
  }
  if (p.contains("block_table")) {
    const json& v = p["block_table"];
    if (!v.is_array()) bad("problem.block_table", v, "must be an array of rows of page indices");
    std::vector<std::vector<int>> rows;
    for (std::size_t b = 0; b < v.size(); ++b) {
      const std::string rp = "problem.block_table[" + std::to_string(b) + "]";
      if (!v[b].is_array()) bad(rp, v[b], "must be an array of page indices");
      std::vector<int> row;
      for (std::size_t i = 0; i < v[b].size(); ++i) {
        const json& n = v[b][i];
        if (!n.is_number_integer() || n.get<std::int64_t>() < 0 || n.get<std::int64_t>() >= INT32_MAX)
          bad(rp + "[" + std::to_string(i) + "]", n, "must be a page index >= 0");
        row.push_back(n.get<int>());
      }
      rows.push_back(std::move(row));
    }
    x.set_block_table(rows);
  }
  x.make_block_table();
  // A key this reader does not know would be dropped silently (a windowed case verified as a
  // dense one): refused instead.
  static const char* const kKeys[] = {
      "batch",      "heads_q",   "heads_kv",    "seq_q",        "seq_kv",    "head_dim",
      "causal",     "scale",     "dtype",       "window_left",  "window_right", "softcap",
      "seqlens_q",  "seqlens_kv", "page_size",  "num_pages",    "page_order", "block_table"};
  for (const auto& item : p.items()) {
    if (std::none_of(std::begin(kKeys), std::end(kKeys),
                     [&](const char* k) { return item.key() == k; })) {
      std::string fields;
      for (const char* k : kKeys) fields += (fields.empty() ? "" : ", ") + std::string(k);
      bad("problem." + item.key(), item.value(),
          "is not a problem field (the fields: " + fields + ")");
    }
  }
  if (const std::string why = validate(x); !why.empty()) throw std::invalid_argument("problem: " + why);
  return x;
}

PeerCaseSpec peer_case_spec_from_json(const json& j) {
  if (!j.is_object()) bad("spec", j, "must be an object");
  PeerCaseSpec s;
  if (!j.contains("problem")) throw std::invalid_argument("problem: missing");
  s.problem = problem_from_json(j["problem"]);
  if (j.contains("inputs")) {
    const json& in = j["inputs"];
    if (!in.is_object()) bad("inputs", in, "must be an object");
    if (in.contains("seed")) {
      if (!in["seed"].is_number_unsigned() && !(in["seed"].is_number_integer() && in["seed"].get<std::int64_t>() >= 0)) {
        bad("inputs.seed", in["seed"], "must be a non-negative integer");
      }
      s.seed = in["seed"].get<std::uint64_t>();
    }
    if (in.contains("distribution")) {
      const std::string d = in["distribution"].is_string() ? in["distribution"].get<std::string>() : "";
      if (d == "normal") s.distribution = Distribution::normal;
      else if (d == "outlier") s.distribution = Distribution::outlier;
      else bad("inputs.distribution", in["distribution"], "must be \"normal\" or \"outlier\"");
    }
  }
  if (j.contains("verify")) {
    const json& v = j["verify"];
    if (!v.is_object()) bad("verify", v, "must be an object");
    if (v.contains("mode")) {
      const std::string m = v["mode"].is_string() ? v["mode"].get<std::string>() : "";
      if (m == "auto") s.verify.mode = VerifyMode::automatic;
      else if (m == "full") s.verify.mode = VerifyMode::full;
      else if (m == "sampled") s.verify.mode = VerifyMode::sampled;
      else if (m == "off") s.verify.mode = VerifyMode::off;
      else bad("verify.mode", v["mode"], "must be auto, full, sampled or off");
    }
    for (const char* k : {"sample_heads", "sample_rows"}) {
      if (!v.contains(k)) continue;
      if (!v[k].is_number_integer() || v[k].get<std::int64_t>() < 1 || v[k].get<std::int64_t>() > 1000000) {
        bad(std::string("verify.") + k, v[k], "must be a positive integer");
      }
      (std::string(k) == "sample_heads" ? s.verify.sample.heads : s.verify.sample.rows) = v[k].get<int>();
    }
  }
  if (j.contains("device")) {
    const std::string d = j["device"].is_string() ? j["device"].get<std::string>() : "";
    if (d == "cuda" || d.rfind("cuda:", 0) == 0) s.device = Device::cuda;
    else if (d == "cpu") s.device = Device::cpu;
    else bad("device", j["device"], "must be \"cuda\" or \"cpu\"");
  }
  if (j.contains("passes")) {
    const json& ps = j["passes"];
    if (!ps.is_array() || ps.empty()) bad("passes", ps, "must be a non-empty array");
    s.need_fwd = s.need_bwd = false;
    for (const json& x : ps) {
      const std::string n = x.is_string() ? x.get<std::string>() : "";
      if (n != "fwd" && n != "bwd" && n != "fwd_bwd") bad("passes", x, "must be fwd, bwd or fwd_bwd");
      s.need_fwd = s.need_fwd || n != "bwd";
      s.need_bwd = s.need_bwd || n != "fwd";
    }
  }
  return s;
}

PeerCase::PeerCase(const PeerCaseSpec& spec)
    : spec_(spec), inputs_(make_inputs(spec.problem, spec.seed, spec.distribution)) {}

PeerCase::~PeerCase() = default;

const Reference& PeerCase::reference() {
  if (!ref_) {
    ref_ = std::make_unique<Reference>(compute_reference(inputs_, spec_.verify.mode, spec_.need_fwd, spec_.need_bwd,
                                                         spec_.seed, spec_.verify.sample));
  }
  return *ref_;
}

const Outputs* PeerCase::naive(Pass pass) {
  if (auto it = naive_.find(pass); it != naive_.end()) return it->second.get();
  std::string note;
  std::shared_ptr<Outputs> out =
      naive_outputs(spec_.device, spec_.problem, pass, inputs_, reference(), note);
  if (!note.empty()) naive_note_[pass] = note;
  naive_[pass] = out;
  return out.get();
}

PeerVerdict PeerCase::check(Pass pass, const Outputs& outputs, const std::vector<std::string>& absent) {
  if ((pass != Pass::bwd && !spec_.need_fwd) || (pass != Pass::fwd && !spec_.need_bwd)) {
    throw std::invalid_argument(std::string("pass ") + std::string(to_string(pass)) +
                                " was not among the passes the case was opened for");
  }
  PeerVerdict pv;
  const Reference& ref = reference();
  pv.mode = ref.mode;
  const Outputs* base = ref.mode == VerifyMode::off ? nullptr : naive(pass);
  if (base) pv.baseline = naive_baseline(spec_.device)->name();
  if (auto it = naive_note_.find(pass); it != naive_note_.end() && ref.mode != VerifyMode::off) {
    pv.note = "baseline: " + it->second;
  }
  Verdict v = verify(spec_.problem, pass, outputs, base, ref);
  // Outputs the peer's API does not give: out of the verdict, named in the note.
  std::vector<std::string> left_out;
  std::erase_if(v.outputs, [&](const OutputReport& r) {
    const std::string name = r.name.substr(0, r.name.find('~'));
    const bool drop = std::find(absent.begin(), absent.end(), name) != absent.end();
    if (drop && std::find(left_out.begin(), left_out.end(), name) == left_out.end()) left_out.push_back(name);
    return drop;
  });
  v.ok = std::all_of(v.outputs.begin(), v.outputs.end(), [](const OutputReport& r) { return r.ok; });
  if (!left_out.empty()) {
    std::string names;
    for (const auto& n : left_out) names += (names.empty() ? "" : ", ") + n;
    pv.note += (pv.note.empty() ? "" : "; ") + names + " not checked: not returned by the peer's API";
  }
  pv.verdict = std::move(v);
  return pv;
}

nlohmann::ordered_json peer_verdict_json(const PeerVerdict& v) {
  ResultRow r;  // row_to_json writes the verify block: one writer of the schema
  r.verified = true;
  r.verify_mode = v.mode;
  r.baseline = v.baseline;
  r.outputs = v.verdict.outputs;
  nlohmann::ordered_json j = row_to_json(r)["verify"];
  j["ok"] = v.verdict.ok;
  j["reason"] = v.verdict.failure();
  if (!v.note.empty()) j["note"] = v.note;
  return j;
}

}  // namespace attnbench
