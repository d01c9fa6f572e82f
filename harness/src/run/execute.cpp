// Device memory (DeviceOps: host memory for the CPU, cudaMalloc for CUDA), the buffers of one case
// and the calls of an implementation on them.
#include "attnbench/execute.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <vector>

#include "attnbench/context.hpp"

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>

#include "read_ceiling.hpp"
#endif

namespace attnbench {

const char* to_string(FlushMode m) {
  return m == FlushMode::read ? "read" : "write";
}

std::optional<FlushMode> parse_flush_mode(std::string_view s) {
  if (s == "write") return FlushMode::write;
  if (s == "read") return FlushMode::read;
  return std::nullopt;
}

namespace {

// Host memory: 64-byte aligned so vectorised CPU kernels can use aligned loads.
struct CpuOps final : DeviceOps {
  void* alloc(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) {
      std::ostringstream s;
      s << "host allocation of " << bytes << " bytes failed";
      throw OutOfMemory(s.str());
    }
    return p;
  }
  void free(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  void to_host(void* dst, const void* src, std::size_t n) override { std::memcpy(dst, src, n); }
  // All-ones bytes are a NaN in f32, f16 and bf16 alike.
  void fill_nan(void* p, std::size_t numel, DType t) override {
    std::memset(p, 0xff, numel * dtype_size(t));
  }
  void zero(void* p, std::size_t n) override {
    if (n) std::memset(p, 0, n);
  }
  void synchronize() override {}
  void* stream() override { return nullptr; }
  void flush_cache(FlushMode) override {}  // CPU timings are hot-cache; documented in docs/cli.md
};

#ifdef ATTNBENCH_WITH_CUDA
void cuda_check(cudaError_t e, const char* what, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::ostringstream s;
  s << what << " failed at " << file << ":" << line << ": " << cudaGetErrorName(e) << " ("
    << cudaGetErrorString(e) << ")";
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the non-sticky error so the run can go on
    throw OutOfMemory(s.str());
  }
  throw std::runtime_error(s.str());
}
#define HARNESS_CUDA(call) cuda_check((call), #call, __FILE__, __LINE__)

struct CudaOps final : DeviceOps {
  cudaStream_t stream_ = nullptr;
  void* flush_buf_ = nullptr;
  std::size_t flush_bytes_ = 0;
  int sms_ = 0;

  CudaOps() {
    HARNESS_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int dev = 0, l2 = 0;
    HARNESS_CUDA(cudaGetDevice(&dev));
    HARNESS_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    flush_bytes_ = 2 * static_cast<std::size_t>(l2 > 0 ? l2 : (64 << 20));
    HARNESS_CUDA(cudaMalloc(&flush_buf_, flush_bytes_));
    // Written once, so that the read flush reads initialised memory (compute-sanitizer initcheck).
    HARNESS_CUDA(cudaMemset(flush_buf_, 0, flush_bytes_));
    HARNESS_CUDA(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, dev));
  }
  // Deliberately not freeing at exit: the CUDA context may already be torn down then.
  void* alloc(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    HARNESS_CUDA(cudaMalloc(&p, bytes));
    return p;
  }
  void free(void* p) override {
    if (p) cudaFree(p);  // errors here are ignored: freeing must not throw from destructors
  }
  void to_device(void* dst, const void* src, std::size_t n) override {
    HARNESS_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    HARNESS_CUDA(cudaStreamSynchronize(stream_));
  }
  void to_host(void* dst, const void* src, std::size_t n) override {
    HARNESS_CUDA(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
    HARNESS_CUDA(cudaStreamSynchronize(stream_));
  }
  void fill_nan(void* p, std::size_t numel, DType t) override {
    HARNESS_CUDA(cudaMemsetAsync(p, 0xff, numel * dtype_size(t), stream_));
  }
  void zero(void* p, std::size_t n) override {
    if (n == 0) return;
    HARNESS_CUDA(cudaMemsetAsync(p, 0, n, stream_));
    HARNESS_CUDA(cudaStreamSynchronize(stream_));
  }
  void synchronize() override {
    HARNESS_CUDA(cudaStreamSynchronize(stream_));
    HARNESS_CUDA(cudaGetLastError());
  }
  void* stream() override { return stream_; }
  // Twice the L2 size written (a memset) or read evicts the previous call's data (PERF.md, How
  // to measure; FlushMode).
  void flush_cache(FlushMode mode) override {
    if (mode == FlushMode::read) {
      launch_read_flush(flush_buf_, flush_bytes_, sms_, stream_);
    } else {
      HARNESS_CUDA(cudaMemsetAsync(flush_buf_, 0, flush_bytes_, stream_));
    }
  }
};
#endif

}  // namespace

int cuda_device_count() {
#ifdef ATTNBENCH_WITH_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

bool cuda_context_broken(std::string& why) {
#ifdef ATTNBENCH_WITH_CUDA
  // A sticky error survives a second synchronize.
  if (cudaDeviceSynchronize() == cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaGetLastError();
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) return false;
  why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  return true;
#else
  (void)why;
  return false;
#endif
}

bool device_present(Device d) { return d == Device::cpu || cuda_device_count() > 0; }

DeviceOps& device_ops(Device d) {
  static CpuOps cpu;
  if (d == Device::cpu) return cpu;
#ifdef ATTNBENCH_WITH_CUDA
  if (cuda_device_count() == 0) throw std::runtime_error("no CUDA device present");
  int dev = 0;
  HARNESS_CUDA(cudaGetDevice(&dev));
  static std::vector<CudaOps*> per_device(static_cast<std::size_t>(cuda_device_count()), nullptr);
  auto& slot = per_device.at(static_cast<std::size_t>(dev));
  if (!slot) slot = new CudaOps();  // lives for the process (see the note in CudaOps)
  return *slot;
#else
  throw std::runtime_error("attnbench was built without CUDA");
#endif
}

CaseBuffers::CaseBuffers(const Implementation& impl, const Problem& p, Pass pass,
                         const Options& opts)
    : impl_(impl), fwd_impl_(&impl), p_(p), pass_(pass), opts_(opts), ops_(&device_ops(impl.device())) {
  const Capabilities caps = impl.capabilities();
  if (!caps.forward) {
    fwd_impl_ = caps.fwd_partner.empty() ? nullptr : Registry::instance().find(caps.fwd_partner);
    if (!fwd_impl_ && pass == Pass::fwd_bwd) {
      throw std::runtime_error(impl.name() + ": forward partner '" + caps.fwd_partner + "' not registered");
    }
  }
  if (pass != Pass::bwd) ws_fwd_ = fwd_impl_->workspace_bytes(p, Pass::fwd, opts);
  if (pass != Pass::fwd) ws_bwd_ = impl.workspace_bytes(p, Pass::bwd, opts);
  const auto elt = dtype_size(p.dtype);
  const auto qb = static_cast<std::size_t>(p.q_elems()) * elt;
  const auto kvb = static_cast<std::size_t>(p.kv_elems()) * elt;
  try {
    q_ = ops_->alloc(qb);
    k_ = ops_->alloc(kvb);
    v_ = ops_->alloc(kvb);
    o_ = ops_->alloc(qb);
    lse_ = static_cast<float*>(ops_->alloc(static_cast<std::size_t>(p.lse_bytes())));
    if (pass != Pass::fwd) {
      dout_ = ops_->alloc(qb);
      dq_ = ops_->alloc(qb);
      dk_ = ops_->alloc(kvb);
      dv_ = ops_->alloc(kvb);
    }
    ws_ = ops_->alloc(std::max(ws_fwd_, ws_bwd_));
    // The zeroed prefix each pass asks for (Implementation::workspace_zeroed_bytes), once. Both
    // passes of a fwd_bwd timing share the workspace, so another implementation's backward could
    // leave a forward partner's prefix dirty: refused (no such partner asks for one today).
    std::size_t zeroed = 0;
    if (pass != Pass::bwd) zeroed = std::min(ws_fwd_, fwd_impl_->workspace_zeroed_bytes(p, Pass::fwd, opts));
    if (pass == Pass::fwd_bwd && zeroed > 0 && fwd_impl_ != &impl)
      throw std::runtime_error(fwd_impl_->name() + " asks for a zeroed workspace prefix, which " +
                               impl.name() + "'s backward shares in a fwd_bwd timing");
    if (pass != Pass::fwd) zeroed = std::max(zeroed, std::min(ws_bwd_, impl.workspace_zeroed_bytes(p, Pass::bwd, opts)));
    ops_->zero(ws_, zeroed);
    meta_ = sequence_metadata(p);  // uploaded once here, never inside a timed call
    if (!meta_.data.empty()) {
      meta_dev_ = static_cast<std::int32_t*>(ops_->alloc(meta_.data.size() * sizeof(std::int32_t)));
      ops_->to_device(meta_dev_, meta_.data.data(), meta_.data.size() * sizeof(std::int32_t));
    }
  } catch (...) {
    for (void* b : buffers()) ops_->free(b);
    throw;
  }
  if (pass != Pass::bwd) fwd_impl_->prepare(p, Pass::fwd, opts);
  if (pass != Pass::fwd) impl.prepare(p, Pass::bwd, opts);
}

CaseBuffers::~CaseBuffers() {
  for (void* b : buffers()) ops_->free(b);
}

void CaseBuffers::upload_inputs(const CaseInputs& in) {
  ops_->to_device(q_, in.q.data(), in.q.nbytes());
  ops_->to_device(k_, in.k.data(), in.k.nbytes());
  ops_->to_device(v_, in.v.data(), in.v.nbytes());
  if (dout_) ops_->to_device(dout_, in.dout.data(), in.dout.nbytes());
}

void CaseBuffers::upload_fwd_outputs(const HostTensor& o, const std::vector<float>& lse) {
  ops_->to_device(o_, o.data(), o.nbytes());
  ops_->to_device(lse_, lse.data(), lse.size() * sizeof(float));
}

void CaseBuffers::poison_outputs() {
  const auto nq = static_cast<std::size_t>(p_.q_elems());
  const auto nkv = static_cast<std::size_t>(p_.kv_elems());
  if (pass_ != Pass::bwd) {
    ops_->fill_nan(o_, nq, p_.dtype);
    ops_->fill_nan(lse_, static_cast<std::size_t>(p_.lse_elems()), DType::f32);
  }
  if (pass_ != Pass::fwd) {
    ops_->fill_nan(dq_, nq, p_.dtype);
    ops_->fill_nan(dk_, nkv, p_.dtype);
    ops_->fill_nan(dv_, nkv, p_.dtype);
  }
}

// The arguments by name, every field given (designated initializers, in FwdArgs' order).
void CaseBuffers::call_forward() {
  fwd_impl_->forward({.p = p_, .q = q_, .k = k_, .v = v_, .o = o_, .lse = lse_, .workspace = ws_,
                      .workspace_bytes = ws_fwd_, .stream = ops_->stream(), .options = &opts_,
                      .cu_seqlens_q = meta_at(meta_.cu_seqlens_q),
                      .cu_seqlens_kv = meta_at(meta_.cu_seqlens_kv),
                      .seqlens_kv = meta_at(meta_.seqlens_kv),
                      .block_table = meta_at(meta_.block_table)});
}

void CaseBuffers::call_backward() {
  impl_.backward({.p = p_, .q = q_, .k = k_, .v = v_, .o = o_, .lse = lse_, .dout = dout_,
                  .dq = dq_, .dk = dk_, .dv = dv_, .workspace = ws_, .workspace_bytes = ws_bwd_,
                  .stream = ops_->stream(), .options = &opts_,
                  .cu_seqlens_q = meta_at(meta_.cu_seqlens_q),
                  .cu_seqlens_kv = meta_at(meta_.cu_seqlens_kv)});
}

void CaseBuffers::produce_fwd_outputs() {
  if (!fwd_impl_) throw std::runtime_error(impl_.name() + " has no forward to produce O and LSE");
  if (pass_ != Pass::bwd) {
    call_forward();
    ops_->synchronize();
    return;
  }
  // A standalone backward: run the forward once with its own workspace (never timed).
  const std::size_t ws = fwd_impl_->workspace_bytes(p_, Pass::fwd, opts_);
  void* tmp = ops_->alloc(ws);
  void* saved_ws = ws_;
  const std::size_t saved_bytes = ws_fwd_;
  ws_ = tmp;
  ws_fwd_ = ws;
  try {
    ops_->zero(tmp, std::min(ws, fwd_impl_->workspace_zeroed_bytes(p_, Pass::fwd, opts_)));
    fwd_impl_->prepare(p_, Pass::fwd, opts_);
    call_forward();
    ops_->synchronize();
  } catch (...) {
    ws_ = saved_ws;
    ws_fwd_ = saved_bytes;
    ops_->free(tmp);
    throw;
  }
  ws_ = saved_ws;
  ws_fwd_ = saved_bytes;
  ops_->free(tmp);
}

void CaseBuffers::call(Pass pass) {
  if (pass != Pass::bwd) call_forward();
  if (pass != Pass::fwd) call_backward();
}

void CaseBuffers::synchronize() { ops_->synchronize(); }

Outputs CaseBuffers::download() const {
  Outputs out;
  if (pass_ != Pass::bwd) {
    out.o = HostTensor(p_.dtype, p_.q_elems());
    out.lse.resize(static_cast<std::size_t>(p_.lse_elems()));
    ops_->to_host(out.o.data(), o_, out.o.nbytes());
    ops_->to_host(out.lse.data(), lse_, out.lse.size() * sizeof(float));
  }
  if (pass_ != Pass::fwd) {
    out.dq = HostTensor(p_.dtype, p_.q_elems());
    out.dk = HostTensor(p_.dtype, p_.kv_elems());
    out.dv = HostTensor(p_.dtype, p_.kv_elems());
    ops_->to_host(out.dq.data(), dq_, out.dq.nbytes());
    ops_->to_host(out.dk.data(), dk_, out.dk.nbytes());
    ops_->to_host(out.dv.data(), dv_, out.dv.nbytes());
  }
  return out;
}

std::int64_t pass_io_bytes(const Problem& p, Pass pass) {
  const std::int64_t qkv = p.q_bytes() + 2 * p.kv_bytes();
  switch (pass) {
    case Pass::fwd: return qkv + p.q_bytes() + p.lse_bytes();
    case Pass::bwd: return qkv + 2 * p.q_bytes() + p.lse_bytes() + p.q_bytes() + 2 * p.kv_bytes();
    case Pass::fwd_bwd: return qkv + 2 * p.q_bytes() + p.lse_bytes() + p.q_bytes() + 2 * p.kv_bytes();
  }
  return 0;
}

std::int64_t call_memory_bytes(const Implementation& impl, const Problem& p, Pass pass,
                               const Options& opts) {
  const Capabilities caps = impl.capabilities();
  const Implementation* fwd = caps.forward ? &impl : Registry::instance().find(caps.fwd_partner);
  std::size_t ws = 0;
  if (pass != Pass::bwd && fwd) ws = std::max(ws, fwd->workspace_bytes(p, Pass::fwd, opts));
  if (pass != Pass::fwd) ws = std::max(ws, impl.workspace_bytes(p, Pass::bwd, opts));
  // A workspace beyond int64 (a planted 1 PiB one is not; an overflowing formula might be).
  const auto w =
      ws > static_cast<std::size_t>(INT64_MAX / 2) ? INT64_MAX / 2 : static_cast<std::int64_t>(ws);
  return pass_io_bytes(p, pass) + w;
}

std::int64_t device_memory_bytes(Device d) {
  if (d == Device::cpu) return host_memory_bytes();
#ifdef ATTNBENCH_WITH_CUDA
  std::size_t free = 0, total = 0;
  if (cuda_device_count() > 0 && cudaMemGetInfo(&free, &total) == cudaSuccess)
    return static_cast<std::int64_t>(total);
  cudaGetLastError();
#endif
  return 0;
}

std::int64_t CaseBuffers::io_bytes() const { return pass_io_bytes(p_, pass_); }

std::int64_t CaseBuffers::workspace_bytes() const {
  return static_cast<std::int64_t>(std::max(ws_fwd_, ws_bwd_));
}

}  // namespace attnbench
