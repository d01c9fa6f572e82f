// cuDNN backend-API graph helpers; see graph.hpp.
#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include "library/cudnn/graph.hpp"

#include <stdexcept>
#include <utility>

#include "library/cudnn/loader.hpp"

namespace attnbench::cudnn {

// ---- Desc -------------------------------------------------------------------------------------

Desc::Desc(cudnnBackendDescriptorType_t type, const char* what) {
  const cudnnStatus_t s = api().BackendCreateDescriptor(type, &d_);
  if (s != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cudnnBackendCreateDescriptor(") + what +
                             ") failed: " + status_text(s));
  }
}

Desc::~Desc() {
  if (d_) api().BackendDestroyDescriptor(d_);  // a destructor cannot report; nothing to recover
}

Desc& Desc::operator=(Desc&& o) noexcept {
  if (this != &o) {
    if (d_) api().BackendDestroyDescriptor(d_);
    d_ = o.d_;
    o.d_ = nullptr;
  }
  return *this;
}

void Desc::set(const char* name, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
               std::int64_t count, const void* values) {
  const cudnnStatus_t s = api().BackendSetAttribute(d_, attr, type, count, values);
  if (s != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cudnnBackendSetAttribute(") + name +
                             ") failed: " + status_text(s));
  }
}

void Desc::finalize(const char* what) {
  const cudnnStatus_t s = api().BackendFinalize(d_);
  if (s != CUDNN_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cudnnBackendFinalize(") + what +
                             ") failed: " + status_text(s));
  }
}

cudnnStatus_t Desc::try_finalize() {
  return api().BackendFinalize(d_);
}

// ---- Graph ------------------------------------------------------------------------------------

namespace {
constexpr std::int64_t kAlignment = 16;  // bytes; cudaMalloc'd buffers and our workspace split
}

const Graph::Tensor& Graph::find(Id id) const {
  for (const auto& t : tensors_) {
    if (t.uid == id) return t;
  }
  throw std::logic_error("cudnn graph: no tensor with uid " + std::to_string(id));
}

Graph::Id Graph::tensor(const char* name, std::vector<std::int64_t> dims,
                        std::vector<std::int64_t> strides, cudnnDataType_t type, Storage storage,
                        Id uid, Id ragged) {
  if (dims.size() != strides.size()) throw std::logic_error("cudnn graph: dims/strides rank");
  if (uid < 0) uid = next_uid_++;
  tensors_.emplace_back(Tensor{uid, name, std::move(dims), std::move(strides), type, storage,
                               Desc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, name)});
  Tensor& t = tensors_.back();
  const auto rank = static_cast<std::int64_t>(t.dims.size());
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &t.type);
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, t.dims.data());
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, t.strides.data());
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t.uid);
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &kAlignment);
  const bool is_virtual = storage == Storage::virt;
  const bool by_value = storage == Storage::by_value;
  ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value)
    ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  if (ragged >= 0) {
    cudnnBackendDescriptor_t r = raw(ragged);
    ATTN_CUDNN_SET(t.desc, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &r);
  }
  t.desc.finalize(name);
  return uid;
}

Graph::Id Graph::virt(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
                      cudnnDataType_t type, Id ragged) {
  return tensor("virtual", std::move(dims), std::move(strides), type, Storage::virt, -1, ragged);
}

Graph::Id Graph::virt_like(Id like, cudnnDataType_t type) {
  const Tensor& t = find(like);
  return virt(t.dims, t.strides, type);
}

Graph::Id Graph::scalar_f32(float v) {
  const Id id =
      tensor("scalar_f32", {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, Storage::by_value);
  by_value_.emplace_back(id, &f32_values_.emplace_back(v));
  return id;
}

Graph::Id Graph::scalar_i32(std::int32_t v) {
  const Id id =
      tensor("scalar_i32", {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, Storage::by_value);
  by_value_.emplace_back(id, &i32_values_.emplace_back(v));
  return id;
}

void Graph::pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t compute, Id x,
                      Id b, Id t, Id y, std::int64_t axis) {
  op_parts_.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
  Desc& pw = op_parts_.back();
  ATTN_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  ATTN_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  if (mode == CUDNN_POINTWISE_GEN_INDEX) {
    ATTN_CUDNN_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  }
  pw.finalize(name);

  ops_.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);

  Desc& op = ops_.back();
  cudnnBackendDescriptor_t pw_raw = pw.get();
  cudnnBackendDescriptor_t x_raw = raw(x), y_raw = raw(y);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &pw_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &x_raw);
  if (b >= 0) {
    cudnnBackendDescriptor_t b_raw = raw(b);
    ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &b_raw);
  }
  if (t >= 0) {
    cudnnBackendDescriptor_t t_raw = raw(t);
    ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &t_raw);
  }
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &y_raw);
  const float one = 1.0f;  // alpha1/alpha2 are float unless the math precision is double
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
  op.finalize(name);
}

void Graph::matmul(const char* name, Id a, Id b, Id c, Id m_override, Id n_override,
                   Id k_override) {
  op_parts_.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
  Desc& mm = op_parts_.back();
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  ATTN_CUDNN_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  mm.finalize(name);

  ops_.emplace_back(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);

  Desc& op = ops_.back();
  cudnnBackendDescriptor_t a_raw = raw(a), b_raw = raw(b), c_raw = raw(c), mm_raw = mm.get();
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm_raw);
  if (m_override >= 0) {
    cudnnBackendDescriptor_t r = raw(m_override);
    ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
  }
  if (n_override >= 0) {
    cudnnBackendDescriptor_t r = raw(n_override);
    ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
  }
  if (k_override >= 0) {
    cudnnBackendDescriptor_t r = raw(k_override);
    ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
  }
  op.finalize(name);
}

void Graph::reduction(const char* name, cudnnReduceTensorOp_t mode, Id x, Id y) {
  op_parts_.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
  Desc& red = op_parts_.back();
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  ATTN_CUDNN_SET(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  ATTN_CUDNN_SET(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  red.finalize(name);

  ops_.emplace_back(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);

  Desc& op = ops_.back();
  cudnnBackendDescriptor_t red_raw = red.get(), x_raw = raw(x), y_raw = raw(y);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &red_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &x_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                 &y_raw);
  op.finalize(name);
}

void Graph::reshape(const char* name, Id x, Id y) {
  ops_.emplace_back(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
  Desc& op = ops_.back();
  cudnnBackendDescriptor_t x_raw = raw(x), y_raw = raw(y);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x_raw);
  ATTN_CUDNN_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y_raw);
  op.finalize(name);
}

// ---- Plan -------------------------------------------------------------------------------------

namespace {

// The handle attributes are marked deprecated in cuDNN >= 9.8 headers (device descriptors replace
// them), but they are the only way to target a GPU on every cuDNN 9 runtime.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
constexpr cudnnBackendAttributeName_t kOpGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

// Points a plan-building descriptor at the GPU: its handle, or (cuDNN 9.8+ headers) a device
// description. Plan's constructor has already rejected a target with neither.
void set_target(Desc& d, const Target& target, cudnnBackendAttributeName_t handle_attr,
                [[maybe_unused]] const char* prop_name, [[maybe_unused]] int prop_attr) {
  if (target.handle) {
    d.set("HANDLE", handle_attr, CUDNN_TYPE_HANDLE, 1, &target.handle);
    return;
  }
#if CUDNN_VERSION >= 90800
  cudnnBackendDescriptor_t p = target.device_prop;
  d.set(prop_name, static_cast<cudnnBackendAttributeName_t>(prop_attr),
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
#endif
}

#if CUDNN_VERSION >= 90800
constexpr int kHeurDeviceProp = CUDNN_ATTR_ENGINEHEUR_DEVICEPROP;
constexpr int kPlanDeviceProp = CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP;
#else
constexpr int kHeurDeviceProp = -1;  // attributes introduced in cuDNN 9.8
constexpr int kPlanDeviceProp = -1;
#endif

}  // namespace

Plan::Plan(Graph graph, const Target& target) : graph_(std::move(graph)) {
  if (!target.handle && (!target.device_prop || CUDNN_VERSION < 90800)) {
    throw std::logic_error("cudnn plan: no handle and no device description to build for");
  }
  op_graph_ = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const auto& op : graph_.ops_) ops.push_back(op.get());
  ATTN_CUDNN_SET(op_graph_, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<std::int64_t>(ops.size()), ops.data());
  if (target.handle) {
    op_graph_.set("CUDNN_ATTR_OPERATIONGRAPH_HANDLE", kOpGraphHandle, CUDNN_TYPE_HANDLE, 1,
                  &target.handle);
  }
  op_graph_.finalize("operation graph");

  // Heuristics mode A first (what cuDNN recommends), then the fallback list. The first
  // configuration whose plan finalizes wins, as in cudnn-frontend's default policy.
  std::string errors;
  std::vector<cudnnStatus_t> statuses;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    cudnnBackendDescriptor_t g = op_graph_.get();
    ATTN_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                   &g);
    ATTN_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (!target.handle) {
      set_target(heur, target, kOpGraphHandle, "CUDNN_ATTR_ENGINEHEUR_DEVICEPROP", kHeurDeviceProp);
    }
    if (const cudnnStatus_t s = heur.try_finalize(); s != CUDNN_STATUS_SUCCESS) {
      errors += std::string(errors.empty() ? "" : "; ") + "heuristics " +
                (mode == CUDNN_HEUR_MODE_A ? "A" : "fallback") + ": " + status_text(s);
      continue;
    }
    std::int64_t count = 0;
    ATTN_CHECK(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    if (count <= 0) continue;
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw_configs;
    for (std::int64_t i = 0; i < count; ++i) {
      raw_configs.push_back(
          configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config").get());
    }
    std::int64_t returned = 0;
    ATTN_CHECK(api().BackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                               raw_configs.data()));
    for (std::int64_t i = 0; i < returned; ++i) {
      ++tried_;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
      set_target(plan, target, kPlanHandle, "CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP",
                 kPlanDeviceProp);
      cudnnBackendDescriptor_t cfg = raw_configs[static_cast<std::size_t>(i)];
      ATTN_CUDNN_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     1, &cfg);
      const cudnnStatus_t s = plan.try_finalize();
      if (s != CUDNN_STATUS_SUCCESS) {
        statuses.push_back(s);
        if (errors.size() < 600) errors += std::string(errors.empty() ? "" : "; ") + status_text(s);
        continue;
      }
      ATTN_CHECK(api().BackendGetAttribute(plan.get(),
                                                 CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                 CUDNN_TYPE_INT64, 1, nullptr, &workspace_));
      plan_ = std::move(plan);
      configs_ = std::move(configs);
      return;
    }
  }
  throw NoEngine("no cuDNN engine supports this graph (" + std::to_string(tried_) +
                     " configurations tried)" + (errors.empty() ? "" : ": " + errors),
                 std::move(statuses));
}

bool Plan::pack_matches(std::span<const Binding> buffers, void* workspace) const {
  if (!pack_.get() || workspace != pack_workspace_ ||
      buffers.size() + graph_.by_value_.size() != pack_uids_.size()) {
    return false;
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i].first != pack_uids_[i] || buffers[i].second != pack_ptrs_[i]) return false;
  }
  return true;
}

void Plan::execute(cudnnHandle_t handle, std::span<const Binding> buffers, void* workspace) {
  if (!pack_matches(buffers, workspace)) {
    // Device buffers first, then the pass-by-value scalars (host addresses cuDNN only reads).
    std::vector<std::int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [uid, p] : buffers) {
      uids.push_back(uid);
      ptrs.push_back(p);
    }
    for (const auto& [uid, p] : graph_.by_value_) {
      uids.push_back(uid);
      ptrs.push_back(const_cast<void*>(p));
    }
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    ATTN_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                   static_cast<std::int64_t>(uids.size()), uids.data());
    ATTN_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                   static_cast<std::int64_t>(ptrs.size()), ptrs.data());
    ATTN_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
    pack.finalize("variant pack");
    pack_ = std::move(pack);
    pack_uids_ = std::move(uids);
    pack_ptrs_ = std::move(ptrs);
    pack_workspace_ = workspace;
  }
  ATTN_CHECK(api().BackendExecute(handle, plan_.get(), pack_.get()));
}

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
