// cuda.cudnn_fe_sdpa — PROTOTYPE, not built by default: cuDNN's fused flash attention through the
// cudnn-frontend Graph API (`Graph::sdpa`, `Graph::sdpa_backward`), as a candidate replacement for
// the backend-descriptor code of cuda.cudnn_sdpa (impls/cuda/library/cudnn_sdpa.cpp, impls/cuda/library/cudnn/).
// docs/peers.md, "cuDNN through the frontend: the prototype", says what a GPU job must measure
// before it may replace that code; until then cuda.cudnn_sdpa stays the implementation.
//
// Built only with -DATTNBENCH_CUDNN_FRONTEND_INCLUDE=DIR (the include/ folder of PyPI's
// nvidia-cudnn-frontend wheel, 1.32.0 tried) in a CUDA build with cudnn.h: CMake then adds this
// file to attn_impls_cuda with the frontend's headers as system headers (they do not compile under
// -Werror otherwise) and NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING, so libcudnn is still dlopen'd:
// by cudnn/loader.cpp (ATTNBENCH_CUDNN_LIB, libcudnn.so.9, libcudnn.so), whose handle the frontend
// is given. Without cuDNN every case is a SKIP saying why, as for cuda.cudnn_sdpa.
//
// Algorithm, passes, outputs, extra memory: cuDNN's, as cuda.cudnn_sdpa's header describes them;
// the graphs are the frontend's own lowering of SDPA (with its version workarounds) instead of
// ours. Layouts: BSHD tensors as [b, h, s, d] with strides (s·h·d, d, h·d, 1); Stats (attnbench's
// LSE) as [b, hq, sq, 1] float32. Causal: bottom-right (the frontend's
// DiagonalAlignment_t::BOTTOM_RIGHT); seq_q > seq_kv is a SKIP as for cuda.cudnn_sdpa (rows that
// see no key must be O = 0, LSE = -inf). Plans: built once per (problem, pass, device) and cached;
// a call sets the stream, binds the pointers into the plan's cached variant map and executes.
// Limits: f16 and bf16; head_dim a multiple of 8 up to 256; what cuDNN rejects is a SKIP with its
// message.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

#include "attnbench/implementation.hpp"

#if defined(ATTNBENCH_HAVE_CUDNN_HEADERS) && defined(NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING)
#include <cuda_runtime_api.h>
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include "library/cudnn/loader.hpp"

// The frontend resolves every cuDNN symbol from this handle (dynamic loading mode).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace attnbench {
namespace {

namespace fe = cudnn_frontend;

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::int64_t workspace = 0;
  std::unordered_map<std::int64_t, void*> pack;  // the pointers of the last call, rebound each call
  std::string error;                             // set when cuDNN cannot run the case
};

// q: [b, sq, hq, d] seen as [b, hq, sq, d]; k, v: [b, skv, hkv, d] seen as [b, hkv, skv, d].
std::shared_ptr<fe::graph::Tensor_attributes> bshd(fe::graph::Graph& g, const char* name, Uid uid,
                                                   int b, int h, int s, int d) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({b, h, s, d})
                      .set_stride({std::int64_t{s} * h * d, d, std::int64_t{h} * d, 1}));
}

void output_bshd(const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid, int b, int h,
                 int s, int d) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({b, h, s, d})
      .set_stride({std::int64_t{s} * h * d, d, std::int64_t{h} * d, 1});
}

cudnnHandle_t handle_for_device() {
  static std::mutex m;
  static std::map<int, cudnnHandle_t> handles;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    throw std::runtime_error("cuda.cudnn_fe_sdpa: no CUDA device");
  std::lock_guard<std::mutex> lock(m);
  auto it = handles.find(dev);
  if (it != handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  ATTN_CHECK(cudnn::api().Create(&h));
  return handles[dev] = h;
}

std::string check(fe::error_t e, const char* step) {  // by value: get_message() is not const
  return e.is_good() ? std::string() : std::string(step) + ": " + e.get_message();
}

Plan build(const Problem& p, bool bwd) {
  Plan plan;
  const cudnnHandle_t handle = handle_for_device();
  const auto io = p.dtype == DType::f16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const int b = p.batch, hq = p.heads_q, hkv = p.heads_kv, sq = p.seq_q, skv = p.seq_kv,
            d = p.head_dim;
  auto q = bshd(*g, "Q", kQ, b, hq, sq, d), k = bshd(*g, "K", kK, b, hkv, skv, d),
       v = bshd(*g, "V", kV, b, hkv, skv, d);
  const auto scale = static_cast<float>(p.effective_scale());
  if (!bwd) {
    auto opts =
        fe::graph::SDPA_attributes().set_name("sdpa").set_generate_stats(true).set_attn_scale(
            scale);
    if (p.causal) opts.set_causal_mask_bottom_right(true);
    auto [o, stats] = g->sdpa(q, k, v, opts);
    output_bshd(o, kO, b, hq, sq, d);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto o = bshd(*g, "O", kO, b, hq, sq, d), dout = bshd(*g, "dO", kDO, b, hq, sq, d);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim({b, hq, sq, 1})
                               .set_stride({std::int64_t{hq} * sq, sq, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opts =
        fe::graph::SDPA_backward_attributes().set_name("sdpa_backward").set_attn_scale(scale);
    if (p.causal) opts.set_causal_mask_bottom_right(true);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
    output_bshd(dq, kDQ, b, hq, sq, d);
    output_bshd(dk, kDK, b, hkv, skv, d);
    output_bshd(dv, kDV, b, hkv, skv, d);
  }
  plan.error = check(g->validate(), "validate");
  if (plan.error.empty())
    plan.error = check(g->build_operation_graph(handle), "build_operation_graph");
  if (plan.error.empty())
    plan.error = check(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  if (plan.error.empty()) plan.error = check(g->check_support(handle), "check_support");
  if (plan.error.empty()) plan.error = check(g->build_plans(handle), "build_plans");
  if (plan.error.empty())
    plan.error = check(g->get_workspace_size(plan.workspace), "get_workspace_size");
  if (plan.error.empty()) plan.graph = std::move(g);
  return plan;
}

// The cached plan of (problem, pass, device), built on first use.
Plan& plan_for(const Problem& p, bool bwd) {
  static std::mutex m;
  static std::map<std::tuple<std::string, bool, int>, Plan> plans;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    throw std::runtime_error("cuda.cudnn_fe_sdpa: no CUDA device");
  std::lock_guard<std::mutex> lock(m);
  const auto key = std::tuple{p.label(), bwd, dev};
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, build(p, bwd)).first;
  return it->second;
}

// Loads cuDNN through the project's loader and hands its library to the frontend.
const cudnn::Api* load(std::string* why) {
  const cudnn::Api* api = cudnn::load(why);
  if (api && !fe::cudnn_dlhandle) {
    fe::cudnn_dlhandle =
        ::dlopen(api->path.c_str(), RTLD_NOW | RTLD_NOLOAD);  // the loader's, not a new one
    if (!fe::cudnn_dlhandle) {
      *why = "cuDNN loaded but not found again by dlopen: " + api->path;
      return nullptr;
    }
  }
  return api;
}

class CudnnFeSdpa final : public Implementation {
 public:
  std::string name() const override { return "cuda.cudnn_fe_sdpa"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "PROTOTYPE: cuDNN fused flash attention through cudnn-frontend's Graph API (dlopen'd)";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.dtypes = {DType::f16, DType::bf16};
    c.min_head_dim = 8;
    c.max_head_dim = 256;
    c.head_dim_multiple = 8;
    c.backward = true;
    return c;
  }

  Support supports_extra(const Problem& p, Pass pass) const override {
    std::string why;
    if (!load(&why)) return Support::no(why);
    if (p.causal && p.seq_q > p.seq_kv)
      return Support::no("cuDNN's bottom-right causal mask needs seq_q <= seq_kv");
    for (bool bwd : {false, true}) {
      if (bwd && pass == Pass::fwd) continue;
      if (!bwd && pass == Pass::bwd) continue;
      try {
        const Plan& plan = plan_for(p, bwd);
        if (!plan.error.empty())
          return Support::no(std::string(bwd ? "backward: " : "forward: ") + plan.error);
      } catch (const std::exception& e) {
        return Support::no(e.what());
      }
    }
    return Support::yes();
  }

  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    std::string why;
    if (!load(&why)) return 0;
    return static_cast<std::size_t>(plan_for(p, pass != Pass::fwd).workspace);
  }

  void forward(const FwdArgs& a) const override {
    Plan& plan = ready(a.p, false, a.workspace_bytes);
    plan.pack[kQ] = const_cast<void*>(a.q);
    plan.pack[kK] = const_cast<void*>(a.k);
    plan.pack[kV] = const_cast<void*>(a.v);
    plan.pack[kO] = a.o;
    plan.pack[kStats] = a.lse;
    execute(plan, a.stream, a.workspace);
  }

  void backward(const BwdArgs& a) const override {
    Plan& plan = ready(a.p, true, a.workspace_bytes);
    plan.pack[kQ] = const_cast<void*>(a.q);
    plan.pack[kK] = const_cast<void*>(a.k);
    plan.pack[kV] = const_cast<void*>(a.v);
    plan.pack[kO] = const_cast<void*>(a.o);
    plan.pack[kStats] = const_cast<float*>(a.lse);
    plan.pack[kDO] = const_cast<void*>(a.dout);
    plan.pack[kDQ] = a.dq;
    plan.pack[kDK] = a.dk;
    plan.pack[kDV] = a.dv;
    execute(plan, a.stream, a.workspace);
  }

 private:
  static Plan& ready(const Problem& p, bool bwd, std::size_t workspace_bytes) {
    Plan& plan = plan_for(p, bwd);
    if (!plan.graph) throw std::runtime_error("cuda.cudnn_fe_sdpa: " + plan.error);
    if (workspace_bytes < static_cast<std::size_t>(plan.workspace))
      throw std::runtime_error("cuda.cudnn_fe_sdpa: workspace of " +
                               std::to_string(workspace_bytes) + " bytes, " +
                               std::to_string(plan.workspace) + " needed");
    return plan;
  }

  static void execute(Plan& plan, void* stream, void* workspace) {
    const cudnnHandle_t handle = handle_for_device();
    cudnn::check(cudnn::api().SetStream(handle, static_cast<cudaStream_t>(stream)),
                 "cudnnSetStream", __FILE__, __LINE__);
    const std::string e = check(plan.graph->execute(handle, plan.pack, workspace), "execute");
    if (!e.empty()) throw std::runtime_error("cuda.cudnn_fe_sdpa: " + e);
  }
};

}  // namespace
}  // namespace attnbench

ATTNBENCH_REGISTER(attnbench::CudnnFeSdpa)

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS && NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
