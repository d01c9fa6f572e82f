// Device buffers for one case and the calls that use them. The harness owns all memory: the
// implementation gets pointers and a workspace of the size it asked for.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"

namespace attnbench {

// Thrown when a buffer cannot be allocated: the case becomes a SKIP row, not a FAIL.
struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How a timed call's caches are emptied before it (unless hot). write: zeros written over twice
// the L2 (the L2 is left full of dirty lines, whose write-back the next call pays while it runs:
// the flush of nvbench and Triton's do_bench); read: twice the L2 read (left full of clean lines;
// the call pays only its own misses). CPU rows are timed hot either way (docs/cli.md).
enum class FlushMode { write, read };
const char* to_string(FlushMode m);
std::optional<FlushMode> parse_flush_mode(std::string_view s);

// Device-memory primitives for a Device (host memory for the CPU, cudaMalloc'd for CUDA).
struct DeviceOps {
  virtual ~DeviceOps() = default;
  virtual void* alloc(std::size_t bytes) = 0;  // throws OutOfMemory
  virtual void free(void* p) = 0;
  virtual void to_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill_nan(void* p, std::size_t numel, DType t) = 0;  // poison
  virtual void zero(void* p, std::size_t bytes) = 0;  // then synchronises
  virtual void synchronize() = 0;
  virtual void* stream() = 0;  // cudaStream_t, or null
  virtual void flush_cache(FlushMode mode) = 0;  // evict caches between timed calls (L2 on CUDA)
};
// One per device, created on first use. Throws std::runtime_error if the device is absent.
DeviceOps& device_ops(Device d);
// True if a device of this kind is present (and, for CUDA, usable).
bool device_present(Device d);
// Number of CUDA devices (0 without CUDA).
int cuda_device_count();
// After a CUDA call failed: whether the context is poisoned by a sticky error (an illegal address,
// ...), which every later CUDA call would also report; why says which. Non-sticky errors are
// cleared. False without CUDA.
bool cuda_context_broken(std::string& why);

// The bytes a pass reads and writes (Q, K, V, O, LSE; plus dO, dQ, dK, dV with a backward): the
// results' memory.io_bytes, also printed by `attnbench expand`.
std::int64_t pass_io_bytes(const Problem& p, Pass pass);

// The memory one call of impl needs on its device: the buffers CaseBuffers allocates (inputs,
// outputs, LSE, and the larger workspace of the forward, its partner's for a backward-only
// implementation, and the backward). Asked before a case's inputs and reference are made, so a
// row that cannot fit is a SKIP at once instead of after minutes of reference.
std::int64_t call_memory_bytes(const Implementation& impl, const Problem& p, Pass pass,
                               const Options& opts);
// The memory of a device: the CPU's physical memory, a CUDA device's total memory; 0 if unknown.
std::int64_t device_memory_bytes(Device d);

class CaseBuffers {
 public:
  CaseBuffers(const Implementation& impl, const Problem& p, Pass pass, const Options& opts);
  ~CaseBuffers();
  CaseBuffers(const CaseBuffers&) = delete;
  CaseBuffers& operator=(const CaseBuffers&) = delete;

  void upload_inputs(const CaseInputs& in);
  // O and LSE that the backward reads (when the backward runs without a forward before it).
  void upload_fwd_outputs(const HostTensor& o, const std::vector<float>& lse);
  // O and LSE from the forward implementation (the impl or its fwd_partner), when no reference
  // values are available (sampled verification). Synchronises.
  void produce_fwd_outputs();
  void poison_outputs();   // NaN in every output this pass writes
  void call_forward();     // asynchronous on CUDA
  void call_backward();
  void call(Pass pass);    // fwd, bwd, or forward then backward
  void synchronize();
  Outputs download() const;  // the outputs this pass writes

  std::int64_t io_bytes() const;         // inputs + outputs of this pass
  std::int64_t workspace_bytes() const;  // the larger of the fwd and bwd requests
  DeviceOps& ops() const { return *ops_; }

 private:
  const Implementation& impl_;
  const Implementation* fwd_impl_;  // impl_, or its fwd_partner (null if neither exists)
  Problem p_;
  Pass pass_;
  const Options& opts_;
  DeviceOps* ops_;
  std::size_t ws_fwd_ = 0, ws_bwd_ = 0;
  void *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *o_ = nullptr, *dout_ = nullptr;
  void *dq_ = nullptr, *dk_ = nullptr, *dv_ = nullptr, *ws_ = nullptr;
  float* lse_ = nullptr;
  // Varlen and paged problems: the int32 sequence metadata on the device (FwdArgs).
  SequenceMetadata meta_;
  std::int32_t* meta_dev_ = nullptr;
  const std::int32_t* meta_at(std::int64_t offset) const {
    return offset < 0 ? nullptr : meta_dev_ + offset;
  }

  // Every buffer above (for freeing them).
  std::array<void*, 11> buffers() const {
    return {q_, k_, v_, o_, lse_, dout_, dq_, dk_, dv_, ws_, meta_dev_};
  }
};

}  // namespace attnbench
