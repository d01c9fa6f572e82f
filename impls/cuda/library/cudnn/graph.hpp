// A small owner for cuDNN backend-API graphs (cuda.cudnn_sdpa's helpers): descriptors with RAII,
// tensors named by unique id (optionally ragged: per-batch start offsets), the four operation
// kinds the SDPA graphs use (pointwise, matmul, reduction, reshape), plan selection through the
// engine heuristics, and execution with a cached variant pack. Every call goes through the dlsym'd
// table in loader.hpp and every status is checked; a failure throws std::runtime_error naming the
// call and cuDNN's message.
#pragma once

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include <cudnn.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnbench::cudnn {

// Owns one backend descriptor (created on construction, destroyed with the object).
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptorType_t type, const char* what);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  // `name` is the attribute's name, for the error message.
  void set(const char* name, cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
           std::int64_t count, const void* values);
  void finalize(const char* what);
  // Finalize without throwing; returns the status (used to try engine configurations in turn).
  cudnnStatus_t try_finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Sets an attribute with its name in the error message.
#define ATTN_CUDNN_SET(desc, attr, type, count, values) (desc).set(#attr, attr, type, count, values)

enum class Storage {
  device,    // a buffer the caller passes at execution (the variant pack)
  by_value,  // a host scalar stored in the graph (pass-by-value)
  virt,      // an intermediate that never reaches memory
};

// What a plan is built for: a handle (to execute), or a device description (cuDNN 9.8+; builds
// and checks plans on a machine without that GPU, never executes).
struct Target {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device_prop = nullptr;
};

class Graph {
 public:
  using Id = std::int64_t;  // the tensor's cuDNN unique id

  // A tensor with an explicit id (the graph's inputs and outputs) or the next free one (< 0).
  // `ragged`: the id of a [b + 1, 1, 1, 1] int32 tensor of element offsets where each batch entry
  // starts (CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC; a packed varlen batch), or -1.
  Id tensor(const char* name, std::vector<std::int64_t> dims, std::vector<std::int64_t> strides,
            cudnnDataType_t type, Storage storage, Id uid = -1, Id ragged = -1);
  // A virtual tensor shaped like `like`.
  Id virt_like(Id like, cudnnDataType_t type);
  Id virt(std::vector<std::int64_t> dims, std::vector<std::int64_t> strides, cudnnDataType_t type,
          Id ragged = -1);
  // Pass-by-value scalars, broadcast as [1, 1, 1, 1]; the value lives in the graph.
  Id scalar_f32(float v);
  Id scalar_i32(std::int32_t v);

  // y = mode(x [, b [, t]]). `compute` is the pointwise math precision; `axis` is for GEN_INDEX.
  void pointwise(const char* name, cudnnPointwiseMode_t mode, cudnnDataType_t compute, Id x, Id b,
                 Id t, Id y, std::int64_t axis = -1);
  // c = a @ b (batched over the leading dims, broadcasting heads); overrides are [b,1,1,1] int32
  // tensors of per-batch sequence lengths, or -1.
  void matmul(const char* name, Id a, Id b, Id c, Id m_override = -1, Id n_override = -1,
              Id k_override = -1);
  void reduction(const char* name, cudnnReduceTensorOp_t op, Id x, Id y);
  // y is a view of x with permuted dims/strides (a transpose, no data movement).
  void reshape(const char* name, Id x, Id y);

  std::size_t op_count() const { return ops_.size(); }
  const std::vector<std::int64_t>& dims(Id id) const { return find(id).dims; }

 private:
  friend class Plan;
  struct Tensor {
    Id uid;
    std::string name;
    std::vector<std::int64_t> dims, strides;
    cudnnDataType_t type;
    Storage storage;
    Desc desc;
  };
  const Tensor& find(Id id) const;
  cudnnBackendDescriptor_t raw(Id id) const { return find(id).desc.get(); }

  std::deque<Tensor> tensors_;  // deque: stable addresses
  std::deque<float> f32_values_;
  std::deque<std::int32_t> i32_values_;
  std::vector<std::pair<Id, const void*>> by_value_;  // uid -> host address of the value
  std::vector<Desc> ops_;
  std::vector<Desc> op_parts_;  // pointwise/matmul/reduction descriptors the ops refer to
  Id next_uid_ = 1000;
};

// Thrown by Plan when no engine configuration finalizes: cuDNN's messages, and the status of
// every configuration tried (in heuristics order).
struct NoEngine : std::runtime_error {
  NoEngine(const std::string& what, std::vector<cudnnStatus_t> s)
      : std::runtime_error(what), statuses(std::move(s)) {}
  std::vector<cudnnStatus_t> statuses;
};

// A finalized operation graph and the first engine configuration (in heuristics order) whose
// execution plan finalizes. Built once per problem, outside any timed region.
class Plan {
 public:
  // Takes ownership of the graph. Throws NoEngine with cuDNN's reasons if no engine supports it
  // (std::runtime_error for any other failed call).
  Plan(Graph graph, const Target& target);

  std::int64_t workspace_bytes() const { return workspace_; }
  std::size_t engines_tried() const { return tried_; }

  // Runs the plan. `buffers` maps every Storage::device tensor id to its device pointer.
  // The variant pack is rebuilt only when a pointer changes (the harness reuses its buffers), so
  // repeated timed calls make no host allocations.
  using Binding = std::pair<Graph::Id, void*>;
  void execute(cudnnHandle_t handle, std::span<const Binding> buffers, void* workspace);

 private:
  bool pack_matches(std::span<const Binding> buffers, void* workspace) const;

  Graph graph_;
  Desc op_graph_;
  std::vector<Desc> configs_;  // heuristic results; the chosen one must outlive the plan
  Desc plan_;
  std::int64_t workspace_ = 0;
  std::size_t tried_ = 0;

  std::vector<std::int64_t> pack_uids_;
  std::vector<void*> pack_ptrs_;
  void* pack_workspace_ = nullptr;
  Desc pack_;
};

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
