// `attnbench expand CONFIG [--case GLOB ...]`: the expanded cases of a config as JSON lines
// (expand.hpp; docs/cli.md, "attnbench expand"). Everything on a line comes from the harness's own
// functions: Problem::label, pass_flops, pass_io_bytes, Config::hash, nvtx::call_range_name,
// resolve_mode. Nothing here is computed a second way.
#include "attnbench/expand.hpp"

#include <algorithm>
#include <ostream>
#include <string_view>
#include <vector>

#include "attnbench/execute.hpp"
#include "attnbench/nvtx.hpp"
#include "attnbench/results.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

namespace {

using ojson = nlohmann::ordered_json;
constexpr Pass kAllPasses[] = {Pass::fwd, Pass::bwd, Pass::fwd_bwd};
constexpr Device kAllDevices[] = {Device::cpu, Device::cuda};

// Whether a glob ('*', '?') can match some name "<device>.<anything>".
bool may_name_device(std::string_view glob, std::string_view device) {
  const std::string head = std::string(device) + ".";
  for (std::size_t i = 0; i < glob.size(); ++i) {
    if (glob[i] == '*' || i >= head.size()) return true;
    if (glob[i] != '?' && glob[i] != head[i]) return false;
  }
  return false;  // the glob is a prefix of "<device>." at most: it names no implementation
}

// The part of the document that describes group g: groups[g], or the document itself.
const ojson* group_doc(const ojson& doc, std::size_t g) {
  if (doc.contains("groups") && doc["groups"].is_array()) {
    return g < doc["groups"].size() ? &doc["groups"][g] : nullptr;
  }
  return &doc;
}

// The devices group g runs on in a build that has every device: those of its implementations,
// plus, for a device this build lacks (cuda.* without CUDA), the devices its globs name. Exact
// in a build with every device; the globs are the best a build without one can do.
std::vector<std::string> runs_on(const Config& cfg, std::size_t g, std::vector<std::string>& unbuilt) {
  std::vector<std::string> out;
  const ojson* gd = group_doc(cfg.json, g);
  std::vector<std::string> allowed{"cpu", "cuda"};
  if (gd && gd->contains("devices") && (*gd)["devices"].is_array()) {
    allowed.clear();
    for (const auto& d : (*gd)["devices"]) {
      if (d.is_string()) allowed.push_back(d.get<std::string>());
    }
  }
  std::vector<std::string> globs{"*"};
  if (gd && gd->contains("implementations")) {
    const ojson& im = (*gd)["implementations"];
    globs.clear();
    if (im.is_string()) globs.push_back(im.get<std::string>());
    for (const auto& x : im) {
      if (x.is_string()) globs.push_back(x.get<std::string>());
    }
  }
  const auto all = Registry::instance().all();
  for (Device d : kAllDevices) {
    const std::string name(to_string(d));
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) continue;
    const bool built = std::any_of(all.begin(), all.end(), [&](const Implementation* i) { return i->device() == d; });
    bool runs = false;
    if (built) {
      for (const ImplRun& ir : cfg.groups[g].impls) runs = runs || ir.impl->device() == d;
    } else {
      unbuilt.push_back(name);
      for (const auto& gl : globs) runs = runs || may_name_device(gl, name);
    }
    if (runs) out.push_back(name);
  }
  return out;
}

ojson shape(std::initializer_list<std::int64_t> dims) {
  ojson a = ojson::array();
  for (auto d : dims) a.push_back(d);
  return a;
}

}  // namespace

ojson case_to_json(const Config& cfg, std::size_t group, const Problem& p, int case_index) {
  const ConfigGroup& g = cfg.groups.at(group);
  const std::string label = p.label();
  ojson j;
  j["schema"] = kExpandSchema;
  j["config_name"] = cfg.name;
  j["config_hash"] = cfg.hash();
  j["case"] = label;
  j["case_index"] = case_index;
  j["group"] = group;
  j["group_description"] = g.description;
  j["problem"] = problem_to_json(p);  // as in the results rows: scale is the one used
  j["scale_given"] = p.scale;         // 0: the default 1/sqrt(head_dim) (the label says so)
  j["passes"] = ojson::array();
  for (Pass ps : g.passes) j["passes"].push_back(std::string(to_string(ps)));
  // Every pass, not only the group's: a tool may run others (a peer's --pass).
  j["flops"] = ojson::object();
  j["io_bytes"] = ojson::object();
  for (Pass ps : kAllPasses) {
    j["flops"][std::string(to_string(ps))] = pass_flops(p, ps);
    j["io_bytes"][std::string(to_string(ps))] = pass_io_bytes(p, ps);
  }
  // Memory-bound cases (paged, decode): the bytes a forward moves at least (Problem::hbm_bytes_fwd).
  if (p.memory_bound()) j["hbm_bytes"] = p.hbm_bytes_fwd();
  // What a peer needs to reproduce the harness's inputs and reference (or to ask the harness for
  // them: libattnbench_capi's ab_case_open takes this line's problem, inputs and verify).
  ojson in;
  in["seed"] = cfg.seed;
  in["distribution"] = cfg.distribution == Distribution::normal ? "normal" : "outlier";
  in["generator"] = "harness/src/run/tensors.cpp make_inputs: counter-based splitmix64 + Box-Muller, "
                    "one stream per tensor (Q 0, K 1, V 2, dO 3; dO always normal)";
  in["dtype"] = std::string(to_string(p.dtype));
  if (p.varlen()) {  // packed THD (problem.hpp); the lengths are in "problem"
    const std::int64_t tq = p.total_q(), tkv = p.total_kv();
    in["layout"] = {
        {"q", shape({tq, p.heads_q, p.head_dim})},   {"k", shape({tkv, p.heads_kv, p.head_dim})},
        {"v", shape({tkv, p.heads_kv, p.head_dim})}, {"dout", shape({tq, p.heads_q, p.head_dim})},
        {"o", shape({tq, p.heads_q, p.head_dim})},   {"lse", shape({p.heads_q, tq})}};
  } else {
    in["layout"] = {{"q", shape({p.batch, p.seq_q, p.heads_q, p.head_dim})},
                    {"k", shape({p.batch, p.seq_kv, p.heads_kv, p.head_dim})},
                    {"v", shape({p.batch, p.seq_kv, p.heads_kv, p.head_dim})},
                    {"dout", shape({p.batch, p.seq_q, p.heads_q, p.head_dim})},
                    {"o", shape({p.batch, p.seq_q, p.heads_q, p.head_dim})},
                    {"lse", shape({p.batch, p.heads_q, p.seq_q})}};
  }
  if (p.paged()) {  // the pool of pages and the int32 table (problem.hpp); q, o, lse as above
    const ojson pool = shape({p.num_pages, p.page_size, p.heads_kv, p.head_dim});
    in["layout"]["k"] = pool;
    in["layout"]["v"] = pool;
    in["layout"]["block_table"] = shape({p.batch, p.pages_per_seq});
  }
  j["inputs"] = std::move(in);
  j["verify"] = {{"mode", to_string(g.verify.mode)},
                 {"resolved", to_string(resolve_mode(p, g.verify.mode))},
                 {"sample_heads", g.verify.sample.heads},
                 {"sample_rows", g.verify.sample.rows}};
  j["timing"] = {{"hot", g.timing.hot},
                 {"flush", to_string(g.timing.flush)},
                 {"min_time_s", g.timing.min_time_s},
                 {"repetitions", g.timing.repetitions},
                 {"warmup_s", g.timing.warmup_s}};
  std::vector<std::string> unbuilt;
  j["runs_on"] = runs_on(cfg, group, unbuilt);
  j["devices_not_built"] = unbuilt;
  j["implementations"] = ojson::array();
  j["rows"] = ojson::array();
  for (const ImplRun& ir : g.impls) {
    ojson im;
    im["name"] = ir.impl->name();
    im["device"] = std::string(to_string(ir.impl->device()));
    im["option_sets"] = ojson::array();
    for (const Options& o : ir.option_sets) {
      ojson os = ojson::object();
      for (const auto& [k, v] : o) os[k] = v;
      im["option_sets"].push_back(os);
      for (Pass ps : g.passes) {
        j["rows"].push_back({{"impl", ir.impl->name()},
                             {"options", os},
                             {"pass", std::string(to_string(ps))},
                             {"nvtx", nvtx::call_range_name(ir.impl->name(), o, label, ps)}});
      }
    }
    j["implementations"].push_back(std::move(im));
  }
  return j;
}

int print_expanded(const Config& cfg, std::ostream& out) {
  int case_index = 0;
  for (std::size_t g = 0; g < cfg.groups.size(); ++g) {
    for (const Problem& p : cfg.groups[g].cases) {
      out << case_to_json(cfg, g, p, case_index++).dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
    }
  }
  out.flush();
  return 0;
}

}  // namespace attnbench
