// libattnbench_capi (attnbench_capi.h): the harness's inputs, verification and implementations
// for programs outside it. Thin: every function forwards to the harness (verify_outputs.hpp,
// the registry, FwdArgs/BwdArgs) and turns exceptions into ab_last_error().
#include "attnbench_capi.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnbench/context.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/verify_outputs.hpp"

using attnbench::Pass;
using json = nlohmann::json;

namespace {

thread_local std::string g_error;

template <class F>
auto guarded(F&& f, decltype(f()) on_error) noexcept -> decltype(f()) {
  try {
    g_error.clear();
    return f();
  } catch (const std::exception& e) {
    g_error = e.what();
  } catch (...) {
    g_error = "unknown exception";
  }
  return on_error;
}

json parse(const char* text, const char* what) {
  if (!text) throw std::invalid_argument(std::string(what) + ": null");
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument(std::string(what) + ": not JSON: " + e.what());
  }
}

Pass parse_pass(const char* s) {
  const std::string p = s ? s : "";
  if (p == "fwd") return Pass::fwd;
  if (p == "bwd") return Pass::bwd;
  if (p == "fwd_bwd") return Pass::fwd_bwd;
  throw std::invalid_argument("pass = \"" + p + "\": must be fwd, bwd or fwd_bwd");
}

attnbench::HostTensor host_copy(const void* src, attnbench::DType t, std::int64_t n) {
  attnbench::HostTensor h(t, n);
  std::memcpy(h.data(), src, h.nbytes());
  return h;
}

// ab_case_metadata / ab_call_metadata: the harness's own arrays (sequence_metadata), copied out.
int64_t copy_metadata(const attnbench::Problem& p, int32_t* out, int64_t* offsets) {
  const attnbench::SequenceMetadata m = attnbench::sequence_metadata(p);
  if (out && !m.data.empty()) std::memcpy(out, m.data.data(), m.data.size() * sizeof(std::int32_t));
  if (offsets) {
    offsets[0] = m.cu_seqlens_q;
    offsets[1] = m.cu_seqlens_kv;
    offsets[2] = m.seqlens_kv;
    offsets[3] = m.block_table;
  }
  return static_cast<int64_t>(m.data.size());
}

}  // namespace

struct ab_case {
  std::unique_ptr<attnbench::PeerCase> c;
  std::string verdict;
};

struct ab_call {
  const attnbench::Implementation* impl = nullptr;
  const attnbench::Implementation* fwd_impl = nullptr;  // impl, or its fwd_partner
  attnbench::Problem p;
  Pass pass = Pass::fwd;
  attnbench::Options options;
  std::string support;
  const std::int32_t* cu_q = nullptr;  // ab_call_set_cu_seqlens
  const std::int32_t* cu_kv = nullptr;
  const std::int32_t* block_table = nullptr;  // ab_call_set_paged
  const std::int32_t* seqlens_kv = nullptr;
};

extern "C" {

int ab_capi_version(void) { return AB_CAPI_VERSION; }

const char* ab_last_error(void) { return g_error.c_str(); }

const char* ab_build_info(void) {
  static std::string info;
  return guarded(
      [&]() -> const char* {
        if (info.empty()) {
          const auto ctx = attnbench::collect_context();
          json j;
          j["capi_version"] = AB_CAPI_VERSION;
          for (const char* k : {"git_revision", "git_dirty", "git_revision_source", "build_type", "compiler",
                                "cuda_runtime", "cuda_driver"}) {
            if (ctx.contains(k)) j[k] = ctx[k];
          }
#ifdef ATTNBENCH_WITH_CUDA
          j["cuda"] = true;
#else
          j["cuda"] = false;
#endif
          j["implementations"] = json::array();
          for (const attnbench::Implementation* i : attnbench::Registry::instance().all()) {
            const attnbench::Capabilities c = i->capabilities();
            j["implementations"].push_back({{"name", i->name()},
                                            {"device", std::string(attnbench::to_string(i->device()))},
                                            {"forward", c.forward},
                                            {"backward", c.backward},
                                            {"fwd_partner", c.fwd_partner},
                                            {"options", c.options}});
          }
          info = j.dump();
        }
        return info.c_str();
      },
      nullptr);
}

ab_case* ab_case_open(const char* spec_json) {
  return guarded(
      [&]() -> ab_case* {
        const auto spec = attnbench::peer_case_spec_from_json(parse(spec_json, "case spec"));
        auto h = std::make_unique<ab_case>();
        h->c = std::make_unique<attnbench::PeerCase>(spec);
        return h.release();
      },
      nullptr);
}

void ab_case_close(ab_case* c) { delete c; }

int ab_case_inputs(ab_case* c, void* q, void* k, void* v, void* dout) {
  return guarded(
      [&]() -> int {
        if (!c) throw std::invalid_argument("null case");
        const auto& in = c->c->inputs();
        if (q) std::memcpy(q, in.q.data(), in.q.nbytes());
        if (k) std::memcpy(k, in.k.data(), in.k.nbytes());
        if (v) std::memcpy(v, in.v.data(), in.v.nbytes());
        if (dout) std::memcpy(dout, in.dout.data(), in.dout.nbytes());
        return 0;
      },
      -1);
}

const char* ab_case_verify(ab_case* c, const char* pass, const void* o, const float* lse, const void* dq,
                           const void* dk, const void* dv, const char* absent) {
  return guarded(
      [&]() -> const char* {
        if (!c) throw std::invalid_argument("null case");
        const Pass ps = parse_pass(pass);
        const attnbench::Problem& p = c->c->spec().problem;
        attnbench::Outputs out;
        if (ps != Pass::bwd) {
          if (o) out.o = host_copy(o, p.dtype, p.q_elems());
          if (lse) out.lse.assign(lse, lse + p.lse_elems());
        }
        if (ps != Pass::fwd) {
          if (dq) out.dq = host_copy(dq, p.dtype, p.q_elems());
          if (dk) out.dk = host_copy(dk, p.dtype, p.kv_elems());
          if (dv) out.dv = host_copy(dv, p.dtype, p.kv_elems());
        }
        std::vector<std::string> names;
        std::stringstream ss(absent ? absent : "");
        for (std::string x; std::getline(ss, x, ',');) {
          if (!x.empty()) names.push_back(x);
        }
        c->verdict = attnbench::peer_verdict_json(c->c->check(ps, out, names)).dump();
        return c->verdict.c_str();
      },
      nullptr);
}

int64_t ab_case_metadata(ab_case* c, int32_t* out, int64_t* offsets) {
  return guarded(
      [&]() -> int64_t {
        if (!c) throw std::invalid_argument("null case");
        return copy_metadata(c->c->spec().problem, out, offsets);
      },
      -1);
}

ab_call* ab_call_open(const char* impl, const char* problem_json, const char* pass, const char* options_json) {
  return guarded(
      [&]() -> ab_call* {
        auto h = std::make_unique<ab_call>();
        const std::string name = impl ? impl : "";
        // A former name (ATTNBENCH_FORMER_NAME) calls the implementation it became.
        h->impl = attnbench::Registry::instance().find(attnbench::Registry::instance().canonical(name));
        if (!h->impl) throw std::invalid_argument("implementation '" + name + "' is not registered in this build");
        h->p = attnbench::problem_from_json(parse(problem_json, "problem"));
        h->pass = parse_pass(pass);
        if (options_json && *options_json) {
          const json o = parse(options_json, "options");
          if (!o.is_object()) throw std::invalid_argument("options: must be an object");
          for (auto it = o.begin(); it != o.end(); ++it) {
            if (!it.value().is_number_integer()) throw std::invalid_argument("options." + it.key() + ": must be an integer");
            h->options[it.key()] = it.value().get<std::int64_t>();
          }
        }
        const attnbench::Capabilities caps = h->impl->capabilities();
        h->fwd_impl = h->impl;
        if (!caps.forward) h->fwd_impl = caps.fwd_partner.empty() ? nullptr : attnbench::Registry::instance().find(caps.fwd_partner);
        return h.release();
      },
      nullptr);
}

void ab_call_close(ab_call* c) { delete c; }

const char* ab_call_supports(ab_call* c) {
  return guarded(
      [&]() -> const char* {
        if (!c) throw std::invalid_argument("null call");
        c->support.clear();
        const attnbench::Capabilities caps = c->impl->capabilities();
        for (const auto& [k, v] : c->options) {
          (void)v;
          if (std::find(caps.options.begin(), caps.options.end(), k) == caps.options.end()) {
            c->support = "option '" + k + "' is not one of " + c->impl->name() + "'s";
          }
        }
        if (c->support.empty() && c->pass == Pass::fwd && !caps.forward) {
          c->support = "backward-only" + (caps.fwd_partner.empty() ? std::string() : " (its forward is " + caps.fwd_partner + ")");
        }
        if (c->support.empty() && !c->fwd_impl && c->pass != Pass::bwd) c->support = "no forward to run";
        if (c->support.empty()) {
          if (attnbench::Support s = c->impl->supports(c->p, c->pass); !s) c->support = s.reason;
        }
        if (c->support.empty()) {
          if (attnbench::Support s = c->impl->supports_options(c->p, c->pass, c->options); !s) c->support = s.reason;
        }
        return c->support.c_str();
      },
      nullptr);
}

int64_t ab_call_workspace_bytes(ab_call* c) {
  return guarded(
      [&]() -> int64_t {
        if (!c) throw std::invalid_argument("null call");
        std::size_t ws = 0;  // as CaseBuffers: the larger of the forward's and the backward's
        if (c->pass != Pass::bwd && c->fwd_impl) ws = c->fwd_impl->workspace_bytes(c->p, Pass::fwd, c->options);
        if (c->pass != Pass::fwd) ws = std::max(ws, c->impl->workspace_bytes(c->p, Pass::bwd, c->options));
        return static_cast<int64_t>(ws);
      },
      -1);
}

int ab_call_prepare(ab_call* c) {
  return guarded(
      [&]() -> int {
        if (!c) throw std::invalid_argument("null call");
        if (c->pass != Pass::bwd && c->fwd_impl) c->fwd_impl->prepare(c->p, Pass::fwd, c->options);
        if (c->pass != Pass::fwd) c->impl->prepare(c->p, Pass::bwd, c->options);
        return 0;
      },
      -1);
}

int ab_call_set_cu_seqlens(ab_call* c, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_kv) {
  return guarded(
      [&]() -> int {
        if (!c) throw std::invalid_argument("null call");
        if (!c->p.varlen()) throw std::invalid_argument("cu_seqlens given for a dense problem");
        c->cu_q = cu_seqlens_q;
        c->cu_kv = cu_seqlens_kv;
        return 0;
      },
      -1);
}

int64_t ab_call_metadata(ab_call* c, int32_t* out, int64_t* offsets) {
  return guarded(
      [&]() -> int64_t {
        if (!c) throw std::invalid_argument("null call");
        return copy_metadata(c->p, out, offsets);
      },
      -1);
}

int ab_call_set_paged(ab_call* c, const int32_t* block_table, const int32_t* seqlens_kv) {
  return guarded(
      [&]() -> int {
        if (!c) throw std::invalid_argument("null call");
        if (!c->p.paged()) throw std::invalid_argument("block table given for a problem that is not paged (page_size 0)");
        if (!block_table || !seqlens_kv) throw std::invalid_argument("ab_call_set_paged: block_table and seqlens_kv are both required");
        c->block_table = block_table;
        c->seqlens_kv = seqlens_kv;
        return 0;
      },
      -1);
}

int ab_call_forward(ab_call* c, const void* q, const void* k, const void* v, void* o, float* lse, void* workspace,
                    size_t workspace_bytes, void* stream) {
  return guarded(
      [&]() -> int {
        if (!c || !c->fwd_impl) throw std::invalid_argument("no forward for this call");
        c->fwd_impl->forward({.p = c->p, .q = q, .k = k, .v = v, .o = o, .lse = lse,
                              .workspace = workspace, .workspace_bytes = workspace_bytes,
                              .stream = stream, .options = &c->options,
                              .cu_seqlens_q = c->cu_q, .cu_seqlens_kv = c->cu_kv,
                              .seqlens_kv = c->seqlens_kv, .block_table = c->block_table});
        return 0;
      },
      -1);
}

int ab_call_backward(ab_call* c, const void* q, const void* k, const void* v, const void* o, const float* lse,
                     const void* dout, void* dq, void* dk, void* dv, void* workspace, size_t workspace_bytes,
                     void* stream) {
  return guarded(
      [&]() -> int {
        if (!c) throw std::invalid_argument("null call");
        c->impl->backward({.p = c->p, .q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout,
                           .dq = dq, .dk = dk, .dv = dv, .workspace = workspace,
                           .workspace_bytes = workspace_bytes, .stream = stream,
                           .options = &c->options, .cu_seqlens_q = c->cu_q,
                           .cu_seqlens_kv = c->cu_kv});
        return 0;
      },
      -1);
}

}  // extern "C"
