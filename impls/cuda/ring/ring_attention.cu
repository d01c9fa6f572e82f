// cuda.ring_attention — context-parallel attention over N GPUs of one process, forward and backward
// (ring attention: K/V blocks go round a ring of GPUs while each computes its queries against them).
//
// NOT YET RUN ON A GPU: written and compiled in a session without one. Its arithmetic (the split,
// the schedule, the block masks, the LSE merge, the backward decomposition) is in
// ring/ring_plan.hpp and checked on the CPU against the float64 reference (tests/test_ring_plan.cpp);
// this file, the CUDA side of it, has not executed. docs/multi_gpu.md says what a GPU session runs.
//
// Split: Q, K and V are split along the sequence over the ranks (options "ranks", default 1: the
// GPUs 0 .. ranks-1 of those visible). zigzag=1 (default): 2N near-equal chunks, rank r holds
// chunks r and 2N-1-r, so with causal masking every rank has the same work; zigzag=0: one
// contiguous chunk per rank. Each chunk lives on its rank as its own contiguous [b, len, h, d].
// Forward, step s = 0 .. N-1: rank r holds the K/V of rank (r - s) mod N; for each of its query
// chunks and each held K/V chunk, the block's mask (ring_plan.hpp: none, full, or bottom-right
// causal on the diagonal) picks a call of the local kernel (the fastest one that supports the
// block: cuda.flash_fwd_wgmma, else cuda.flash_fwd_mma, else cuda.flash_fwd) into a partial O and
// LSE, merged into float32 accumulators through the LSE (ring::merge_row). Meanwhile the comm
// stream sends the held K/V to rank r+1 and receives the next from r-1 (ncclSend/ncclRecv in one
// group, double-buffered), so the transfer of step s+1's K/V overlaps step s's kernels.
// Backward, from the full problem's O and LSE: per block the local backward kernel (given the global
// O and LSE it computes the block's exact share of the gradients), dQ summed on the query's rank,
// dK/dV summed into float32 accumulators that travel round the ring with their K/V and are home
// after N exchanges. The K/V transfer overlaps the kernels; the dK/dV accumulators are sent after
// the step's kernels (that transfer is not hidden).
// One rank: no NCCL at all; the local kernel per block plus the merge.
// The harness's buffers are on the calling device (device 0): the call scatters Q/K/V (and O, dO,
// LSE) to the ranks and gathers O/LSE (dQ/dK/dV) back, inside the timed call (docs/multi_gpu.md).
// Buffers per rank and the NCCL communicators are made in prepare() and kept for the problem.
// Limits: causal needs seq_q == seq_kv (every block is then none, full or a square diagonal);
// ranks > 1 needs NCCL at build time (ATTNBENCH_HAVE_NCCL) and ranks visible GPUs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef ATTNBENCH_HAVE_NCCL
#include <nccl.h>
#endif

#include "attnbench/implementation.hpp"
#include "common/device.cuh"
#include "ring/ring_plan.hpp"

namespace attnbench::cuda {

#ifdef ATTNBENCH_HAVE_NCCL
// For ATTN_CHECK on NCCL calls (outside the unnamed namespace: the macro's qualified lookup of
// call_error stops at the overloads declared in attnbench::cuda itself).
inline std::string call_error(ncclResult_t r) {
  return r == ncclSuccess ? std::string() : std::string("NCCL: ") + ncclGetErrorString(r);
}
#endif

namespace {

using ring::BlockMask;
using ring::Span;

// ---- Kernels: the merge, accumulation and conversion -------------------------------------------

// o_acc [b, len, h, d] float32, lse_acc [b, h, len]; one thread per (b, i, h) row.
template <class T>
__global__ void merge_kernel(float* o_acc, float* lse_acc, const T* o_part, const float* lse_part,
                             int batch, int len, int heads, int d) {
  const std::int64_t rows = static_cast<std::int64_t>(batch) * len * heads;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int h = static_cast<int>(r % heads);
    const int i = static_cast<int>((r / heads) % len);
    const int b = static_cast<int>(r / (static_cast<std::int64_t>(heads) * len));
    const std::int64_t l = (static_cast<std::int64_t>(b) * heads + h) * len + i;
    const ring::MergeWeights<float> w = ring::lse_merge(lse_acc[l], lse_part[l]);
    float* o = o_acc + r * d;
    const T* p = o_part + r * d;
    for (int c = 0; c < d; ++c) o[c] = w.a * o[c] + w.b * to_float(p[c]);
    lse_acc[l] = w.lse;
  }
}

template <class T>
__global__ void accumulate_kernel(float* acc, const T* part, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    acc[i] += to_float(part[i]);
}

template <class T>
__global__ void convert_kernel(T* out, const float* in, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<T>(in[i]);
}

__global__ void fill_kernel(float* p, float v, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

dim3 grid_for(std::int64_t n) { return dim3(static_cast<unsigned>(std::clamp<std::int64_t>((n + 255) / 256, 1, 4096))); }

// ---- Per-rank state ------------------------------------------------------------------------------

struct DevBuf {
  void* p = nullptr;
  int dev = 0;
  void alloc(int device, std::size_t bytes) {
    dev = device;
    ATTN_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 16)));
  }
  ~DevBuf() {
    if (p) {
      cudaSetDevice(dev);
      cudaFree(p);
    }
  }
  template <class U>
  U* as(std::size_t elem_offset = 0) const {
    return static_cast<U*>(p) + elem_offset;
  }
};

struct Rank {
  int dev = 0;
  std::vector<Span> q_spans, k_spans;
  cudaStream_t compute = nullptr, comm = nullptr;
  // ev_compute: after the compute stream's latest step; ev_kv / ev_dkv: after the latest exchange
  // of K/V / of the dK/dV accumulators on the comm stream; ev_done: the end of the call.
  cudaEvent_t ev_compute = nullptr, ev_kv = nullptr, ev_dkv = nullptr, ev_done = nullptr;
  // Chunk c of a buffer starts at c * (its max chunk elements); K chunk c at c, V chunk c at n + c.
  DevBuf q, o, dout, lse;                 // query chunks (dtype), backward: O, dO (dtype), LSE (f32)
  DevBuf kv[2];                           // K then V chunks, double-buffered round the ring
  DevBuf dkv[2];                          // backward: dK then dV accumulators (f32), travelling
  DevBuf o_acc, lse_acc, dq_acc;          // f32 accumulators of the query chunks
  DevBuf o_part, lse_part, dq_part, dk_part, dv_part;  // one local call's outputs
  DevBuf out;                             // dtype copy of the accumulators before the gather
  DevBuf workspace;
  ~Rank() {
    cudaSetDevice(dev);
    for (cudaStream_t s : {compute, comm})
      if (s) cudaStreamDestroy(s);
    for (cudaEvent_t e : {ev_compute, ev_kv, ev_dkv, ev_done})
      if (e) cudaEventDestroy(e);
  }
};

struct State {
  Problem p;
  Pass pass = Pass::fwd;
  int ranks = 1;
  bool zigzag = true;
  int chunks = 1;                 // per rank
  int max_q = 0, max_k = 0;       // rows of the largest query / key chunk
  const Implementation* local_fwd = nullptr;
  const Implementation* local_bwd = nullptr;
  std::size_t ws_bytes = 0;
  std::vector<std::unique_ptr<Rank>> rank;
#ifdef ATTNBENCH_HAVE_NCCL
  std::vector<ncclComm_t> comms;
#endif
  ~State() {
#ifdef ATTNBENCH_HAVE_NCCL
    for (ncclComm_t c : comms) ncclCommDestroy(c);
#endif
  }
  std::int64_t q_chunk_elems() const { return static_cast<std::int64_t>(p.batch) * max_q * p.heads_q * p.head_dim; }
  std::int64_t k_chunk_elems() const { return static_cast<std::int64_t>(p.batch) * max_k * p.heads_kv * p.head_dim; }
  std::int64_t lse_chunk_elems() const { return static_cast<std::int64_t>(p.batch) * p.heads_q * max_q; }
};

int option_or(const Options* o, const char* key, int fallback) {
  if (!o) return fallback;
  const auto it = o->find(key);
  return it == o->end() ? fallback : static_cast<int>(it->second);
}

// The local kernel's problem for one block (its mask is none, full or bottom-right causal).
Problem block_problem(const Problem& full, const Span& q, const Span& k, const BlockMask& m) {
  Problem sub = full;
  sub.seq_q = q.size();
  sub.seq_kv = k.size();
  sub.causal = m.kind == BlockMask::causal;
  sub.scale = full.effective_scale();
  return sub;
}

// Every block any rank computes, for the support checks and the workspace size.
template <class F>
void for_each_block(const Problem& p, int ranks, bool zigzag, F&& f) {
  const auto qs = ring::split_sequence(p.seq_q, ranks, zigzag);
  const auto ks = ring::split_sequence(p.seq_kv, ranks, zigzag);
  for (int r = 0; r < ranks; ++r)
    for (const Span& q : qs[r])
      for (int o = 0; o < ranks; ++o)
        for (const Span& k : ks[o]) f(q, k, ring::block_mask(p.causal, p.seq_q, p.seq_kv, q, k));
}

// The first of the candidates that supports every block of the problem in this pass.
const Implementation* pick_local(const std::vector<const char*>& names, const Problem& p, Pass pass,
                                 int ranks, bool zigzag, std::string& why) {
  for (const char* n : names) {
    const Implementation* impl = Registry::instance().find(n);
    if (!impl) continue;
    std::string no;
    for_each_block(p, ranks, zigzag, [&](const Span& q, const Span& k, const BlockMask& m) {
      if (!no.empty() || m.kind == BlockMask::none) return;
      const Support s = impl->supports(block_problem(p, q, k, m), pass);
      if (!s) no = s.reason;
    });
    if (no.empty()) return impl;
    why += std::string(why.empty() ? "" : "; ") + n + ": " + no;
  }
  return nullptr;
}

const std::vector<const char*> kLocalFwd = {"cuda.flash_fwd_wgmma", "cuda.flash_fwd_mma", "cuda.flash_fwd"};
const std::vector<const char*> kLocalBwd = {"cuda.flash_bwd_wgmma", "cuda.flash_bwd_mma", "cuda.flash_bwd"};

// A [b, len, h, d] chunk (rows span of a [b, seq, h, d] tensor) to or from its packed form.
void copy_rows(void* dst, const void* src, const Problem& p, int seq, int heads, const Span& s,
               bool to_chunk, cudaStream_t st) {
  const std::size_t row = static_cast<std::size_t>(heads) * p.head_dim * dtype_size(p.dtype);
  if (s.size() <= 0) return;
  const std::size_t width = row * s.size();
  const std::size_t pitch = row * seq;
  if (to_chunk) {
    const char* from = static_cast<const char*>(src) + row * s.begin;
    ATTN_CHECK(cudaMemcpy2DAsync(dst, width, from, pitch, width, p.batch, cudaMemcpyDefault, st));
  } else {
    char* to = static_cast<char*>(dst) + row * s.begin;
    ATTN_CHECK(cudaMemcpy2DAsync(to, pitch, src, width, width, p.batch, cudaMemcpyDefault, st));
  }
}

// The [b, h, len] rows of a [b, h, seq] LSE.
void copy_lse(float* dst, const float* src, const Problem& p, const Span& s, bool to_chunk, cudaStream_t st) {
  if (s.size() <= 0) return;
  const std::size_t width = sizeof(float) * s.size();
  const std::size_t pitch = sizeof(float) * p.seq_q;
  const std::size_t rows = static_cast<std::size_t>(p.batch) * p.heads_q;
  if (to_chunk) {
    ATTN_CHECK(cudaMemcpy2DAsync(dst, width, src + s.begin, pitch, width, rows, cudaMemcpyDefault, st));
  } else {
    ATTN_CHECK(cudaMemcpy2DAsync(dst + s.begin, pitch, src, width, width, rows, cudaMemcpyDefault, st));
  }
}

class RingAttention final : public Implementation {
 public:
  std::string name() const override { return "cuda.ring_attention"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "context-parallel ring attention over NCCL (options ranks, zigzag); not yet run on a GPU";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.causal = true;
    c.gqa = true;
    c.forward = true;
    c.backward = true;
    c.options = {"ranks", "zigzag"};
    return c;
  }

  Support supports_options(const Problem&, Pass, const Options& o) const override {
    const int ranks = option_or(&o, "ranks", 1);
    const int zz = option_or(&o, "zigzag", 1);
    if (ranks < 1 || ranks > 64) return Support::no("ranks must be 1..64, not " + std::to_string(ranks));
    if (zz != 0 && zz != 1) return Support::no("zigzag must be 0 or 1, not " + std::to_string(zz));
#ifndef ATTNBENCH_HAVE_NCCL
    if (ranks > 1) return Support::no("ranks = " + std::to_string(ranks) + " needs NCCL, and this build has none");
#endif
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    if (ranks > n) {
      return Support::no("ranks = " + std::to_string(ranks) + " needs " + std::to_string(ranks) +
                         " CUDA devices, " + std::to_string(n) + " visible");
    }
    return Support::yes();
  }

  Support supports_extra(const Problem& p, Pass pass) const override {
    if (p.causal && p.seq_q != p.seq_kv) {
      return Support::no("causal needs seq_q == seq_kv (the blocks of a split are then none, full or diagonal)");
    }
    // The options are not known here: the local kernels are checked for one rank (the whole problem
    // as one block) and again per block in supports_options' caller, prepare().
    std::string why;
    if (pass != Pass::bwd && !pick_local(kLocalFwd, p, Pass::fwd, 1, true, why))
      return Support::no("no local forward kernel: " + why);
    if (pass != Pass::fwd && !pick_local(kLocalBwd, p, Pass::bwd, 1, true, why))
      return Support::no("no local backward kernel: " + why);
    return Support::yes();
  }

  void prepare(const Problem& p, Pass pass, const Options& o) const override {
    const int ranks = option_or(&o, "ranks", 1);
    const bool zigzag = option_or(&o, "zigzag", 1) != 0;
    // The harness prepares a problem more than once (fwd then bwd for fwd_bwd; fwd again for the
    // O and LSE of a standalone backward): the state is kept when it covers the pass, and a
    // rebuilt one keeps covering the backward it covered.
    const bool same = state_ && state_->p.label() == p.label() && state_->ranks == ranks &&
                      state_->zigzag == zigzag;
    if (same && (pass == Pass::fwd || state_->local_bwd)) return;
    const bool with_bwd = pass != Pass::fwd || (same && state_->local_bwd);
    state_.reset();
    auto st = std::make_unique<State>();
    st->p = p;
    st->pass = pass;
    st->ranks = ranks;
    st->zigzag = zigzag;
    st->chunks = zigzag ? 2 : 1;
    std::string why;
    // The forward too for a backward: the harness may ask this implementation for O and LSE.
    st->local_fwd = pick_local(kLocalFwd, p, Pass::fwd, ranks, zigzag, why);
    if (!st->local_fwd && pass != Pass::bwd)
      throw std::invalid_argument("cuda.ring_attention: no local forward kernel: " + why);
    if (with_bwd) {
      st->local_bwd = pick_local(kLocalBwd, p, Pass::bwd, ranks, zigzag, why);
      if (!st->local_bwd) throw std::invalid_argument("cuda.ring_attention: no local backward kernel: " + why);
    }
    const Options none;
    for_each_block(p, ranks, zigzag, [&](const Span& q, const Span& k, const BlockMask& m) {
      st->max_q = std::max(st->max_q, q.size());
      st->max_k = std::max(st->max_k, k.size());
      if (m.kind == BlockMask::none) return;
      if (!m.local_kernel_can_run(q, k)) throw std::logic_error("cuda.ring_attention: a block the local kernels cannot mask");
      const Problem sub = block_problem(p, q, k, m);
      if (st->local_fwd) st->ws_bytes = std::max(st->ws_bytes, st->local_fwd->workspace_bytes(sub, Pass::fwd, none));
      if (st->local_bwd) st->ws_bytes = std::max(st->ws_bytes, st->local_bwd->workspace_bytes(sub, Pass::bwd, none));
    });
    int caller = 0;
    ATTN_CHECK(cudaGetDevice(&caller));
    const auto qs = ring::split_sequence(p.seq_q, ranks, zigzag);
    const auto ks = ring::split_sequence(p.seq_kv, ranks, zigzag);
    const std::size_t es = dtype_size(p.dtype);
    const std::size_t nc = static_cast<std::size_t>(st->chunks);
    const bool bwd = with_bwd;
    for (int r = 0; r < ranks; ++r) {
      auto rk = std::make_unique<Rank>();
      rk->dev = r;
      rk->q_spans = qs[r];
      rk->k_spans = ks[r];
      ATTN_CHECK(cudaSetDevice(r));
      for (int peer = 0; peer < ranks; ++peer) {
        int can = 0;
        if (peer != r && cudaDeviceCanAccessPeer(&can, r, peer) == cudaSuccess && can) {
          if (cudaDeviceEnablePeerAccess(peer, 0) != cudaSuccess) cudaGetLastError();  // already on
        }
      }
      ATTN_CHECK(cudaStreamCreateWithFlags(&rk->compute, cudaStreamNonBlocking));
      ATTN_CHECK(cudaStreamCreateWithFlags(&rk->comm, cudaStreamNonBlocking));
      for (cudaEvent_t* e : {&rk->ev_compute, &rk->ev_kv, &rk->ev_dkv, &rk->ev_done})
        ATTN_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
      const std::size_t qe = static_cast<std::size_t>(st->q_chunk_elems());
      const std::size_t ke = static_cast<std::size_t>(st->k_chunk_elems());
      const std::size_t le = static_cast<std::size_t>(st->lse_chunk_elems());
      rk->q.alloc(r, nc * qe * es);
      for (DevBuf& b : rk->kv) b.alloc(r, 2 * nc * ke * es);
      rk->workspace.alloc(r, st->ws_bytes);
      {
        rk->o_acc.alloc(r, nc * qe * sizeof(float));
        rk->lse_acc.alloc(r, nc * le * sizeof(float));
        rk->o_part.alloc(r, qe * es);
        rk->lse_part.alloc(r, le * sizeof(float));
      }
      if (bwd) {
        rk->o.alloc(r, nc * qe * es);
        rk->dout.alloc(r, nc * qe * es);
        rk->lse.alloc(r, nc * le * sizeof(float));
        for (DevBuf& b : rk->dkv) b.alloc(r, 2 * nc * ke * sizeof(float));
        rk->dq_acc.alloc(r, nc * qe * sizeof(float));
        rk->dq_part.alloc(r, qe * es);
        rk->dk_part.alloc(r, ke * es);
        rk->dv_part.alloc(r, ke * es);
      }
      rk->out.alloc(r, std::max(nc * qe, 2 * nc * ke) * es);
      // The local kernels' one-time set-up (shared-memory attributes) is per device.
      for_each_block(p, ranks, zigzag, [&](const Span& q, const Span& k, const BlockMask& m) {
        if (m.kind == BlockMask::none) return;
        const Problem sub = block_problem(p, q, k, m);
        if (st->local_fwd) st->local_fwd->prepare(sub, Pass::fwd, none);
        if (st->local_bwd) st->local_bwd->prepare(sub, Pass::bwd, none);
      });
      st->rank.push_back(std::move(rk));
    }
#ifdef ATTNBENCH_HAVE_NCCL
    if (ranks > 1) {
      std::vector<int> devs(static_cast<std::size_t>(ranks));
      for (int r = 0; r < ranks; ++r) devs[r] = r;
      st->comms.resize(devs.size());
      ATTN_CHECK(ncclCommInitAll(st->comms.data(), ranks, devs.data()));
    }
#endif
    ATTN_CHECK(cudaSetDevice(caller));
    state_ = std::move(st);
  }

  void forward(const FwdArgs& a) const override {
    State& st = checked_state(a.p, true);
    int caller = 0;
    ATTN_CHECK(cudaGetDevice(&caller));
    dispatch_dtype(a.p.dtype, [&](auto e) { run_forward<typename decltype(e)::type>(st, a, caller); });
    ATTN_CHECK(cudaSetDevice(caller));
  }

  void backward(const BwdArgs& a) const override {
    State& st = checked_state(a.p, false);
    int caller = 0;
    ATTN_CHECK(cudaGetDevice(&caller));
    dispatch_dtype(a.p.dtype, [&](auto e) { run_backward<typename decltype(e)::type>(st, a, caller); });
    ATTN_CHECK(cudaSetDevice(caller));
  }

 private:
  mutable std::unique_ptr<State> state_;

  State& checked_state(const Problem& p, bool fwd) const {
    if (!state_ || state_->p.label() != p.label() || (fwd ? !state_->local_fwd : !state_->local_bwd)) {
      throw std::logic_error("cuda.ring_attention: called without prepare() for this problem and pass");
    }
    return *state_;
  }

  // Every rank's streams wait for the caller's stream (the inputs are there).
  static void fork_from(State& st, cudaStream_t caller_stream, int caller) {
    ATTN_CHECK(cudaSetDevice(caller));
    cudaEvent_t start = nullptr;
    ATTN_CHECK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
    ATTN_CHECK(cudaEventRecord(start, caller_stream));
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      ATTN_CHECK(cudaStreamWaitEvent(rk->compute, start, 0));
      ATTN_CHECK(cudaStreamWaitEvent(rk->comm, start, 0));
    }
    ATTN_CHECK(cudaSetDevice(caller));
    ATTN_CHECK(cudaEventDestroy(start));  // released once the waits are done
  }

  // The caller's stream waits for every rank.
  static void join_into(State& st, cudaStream_t caller_stream, int caller) {
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      ATTN_CHECK(cudaEventRecord(rk->ev_done, rk->compute));
    }
    ATTN_CHECK(cudaSetDevice(caller));
    for (auto& rk : st.rank) ATTN_CHECK(cudaStreamWaitEvent(caller_stream, rk->ev_done, 0));
  }

  // One exchange round the ring: every rank sends `bytes` of send_buf(rank) to r+1 and receives
  // as many into recv_buf(rank) from r-1, on its comm stream, once the compute stream's latest
  // recorded work (ev_compute) is done; then records `done` on the comm stream.
  template <class Send, class Recv>
  static void exchange(State& st, std::size_t bytes, Send send_buf, Recv recv_buf, cudaEvent_t Rank::*done) {
#ifdef ATTNBENCH_HAVE_NCCL
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      ATTN_CHECK(cudaStreamWaitEvent(rk->comm, rk->ev_compute, 0));
    }
    ATTN_CHECK(ncclGroupStart());
    for (int r = 0; r < st.ranks; ++r) {
      Rank& rk = *st.rank[r];
      ATTN_CHECK(ncclSend(send_buf(rk), bytes, ncclUint8, ring::send_peer(r, st.ranks), st.comms[r], rk.comm));
      ATTN_CHECK(ncclRecv(recv_buf(rk), bytes, ncclUint8, ring::recv_peer(r, st.ranks), st.comms[r], rk.comm));
    }
    ATTN_CHECK(ncclGroupEnd());
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      ATTN_CHECK(cudaEventRecord((*rk).*done, rk->comm));
    }
#else
    (void)st, (void)bytes, (void)send_buf, (void)recv_buf, (void)done;
    throw std::logic_error("cuda.ring_attention: ranks > 1 in a build without NCCL");
#endif
  }

  template <class T>
  void run_forward(State& st, const FwdArgs& a, int caller) const {
    const Problem& p = a.p;
    const cudaStream_t cs = static_cast<cudaStream_t>(a.stream);
    const std::int64_t qe = st.q_chunk_elems(), ke = st.k_chunk_elems(), le = st.lse_chunk_elems();
    const std::size_t kv_bytes = static_cast<std::size_t>(2 * st.chunks * ke) * sizeof(T);
    fork_from(st, cs, caller);
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      for (int c = 0; c < static_cast<int>(rk->q_spans.size()); ++c)
        copy_rows(rk->q.as<T>(c * qe), a.q, p, p.seq_q, p.heads_q, rk->q_spans[c], true, rk->compute);
      for (int c = 0; c < static_cast<int>(rk->k_spans.size()); ++c) {
        copy_rows(rk->kv[0].as<T>(c * ke), a.k, p, p.seq_kv, p.heads_kv, rk->k_spans[c], true, rk->compute);
        copy_rows(rk->kv[0].as<T>((st.chunks + c) * ke), a.v, p, p.seq_kv, p.heads_kv, rk->k_spans[c], true, rk->compute);
      }
      ATTN_CHECK(cudaMemsetAsync(rk->o_acc.p, 0, static_cast<std::size_t>(st.chunks * qe) * sizeof(float), rk->compute));
      fill_kernel<<<grid_for(st.chunks * le), 256, 0, rk->compute>>>(rk->lse_acc.as<float>(), -INFINITY, st.chunks * le);
      ATTN_CHECK(cudaGetLastError());
      ATTN_CHECK(cudaEventRecord(rk->ev_compute, rk->compute));  // kv[0] is in place
    }
    const auto ks = ring::split_sequence(p.seq_kv, st.ranks, st.zigzag);
    const Options none;
    for (int s = 0; s < st.ranks; ++s) {
      const int cur = s % 2, nxt = 1 - cur;
      // Step s's kernels wait for step s-1's exchange (issued before this step's: a wait takes the
      // event's latest record).
      if (s > 0) {
        for (auto& rk : st.rank) {
          ATTN_CHECK(cudaSetDevice(rk->dev));
          ATTN_CHECK(cudaStreamWaitEvent(rk->compute, rk->ev_kv, 0));
        }
      }
      // Step s+1's K/V travel while step s computes. kv[nxt] was read by step s-1's kernels, which
      // ev_compute (recorded after them) covers.
      if (s + 1 < st.ranks) {
        exchange(st, kv_bytes, [&](Rank& rk) { return rk.kv[cur].p; }, [&](Rank& rk) { return rk.kv[nxt].p; },
                 &Rank::ev_kv);
      }
      for (int r = 0; r < st.ranks; ++r) {
        Rank& rk = *st.rank[r];
        ATTN_CHECK(cudaSetDevice(rk.dev));
        const auto& kspans = ks[ring::kv_owner(r, s, st.ranks)];
        for (int qc = 0; qc < static_cast<int>(rk.q_spans.size()); ++qc) {
          const Span& qspan = rk.q_spans[qc];
          for (int kc = 0; kc < static_cast<int>(kspans.size()); ++kc) {
            const BlockMask m = ring::block_mask(p.causal, p.seq_q, p.seq_kv, qspan, kspans[kc]);
            if (m.kind == BlockMask::none) continue;
            FwdArgs fa;
            fa.p = block_problem(p, qspan, kspans[kc], m);
            fa.q = rk.q.as<T>(qc * qe);
            fa.k = rk.kv[cur].as<T>(kc * ke);
            fa.v = rk.kv[cur].as<T>((st.chunks + kc) * ke);
            fa.o = rk.o_part.p;
            fa.lse = rk.lse_part.as<float>();
            fa.workspace = rk.workspace.p;
            fa.workspace_bytes = st.ws_bytes;
            fa.stream = rk.compute;
            fa.options = &none;
            st.local_fwd->forward(fa);
            merge_kernel<T><<<grid_for(static_cast<std::int64_t>(p.batch) * qspan.size() * p.heads_q), 256, 0, rk.compute>>>(
                rk.o_acc.as<float>(qc * qe), rk.lse_acc.as<float>(qc * le), rk.o_part.as<T>(), rk.lse_part.as<float>(),
                p.batch, qspan.size(), p.heads_q, p.head_dim);
            ATTN_CHECK(cudaGetLastError());
          }
        }
        ATTN_CHECK(cudaEventRecord(rk.ev_compute, rk.compute));
      }
    }
    // Gather: O in the problem's dtype and the LSE into the caller's buffers.
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      for (int c = 0; c < static_cast<int>(rk->q_spans.size()); ++c) {
        const std::int64_t n = static_cast<std::int64_t>(p.batch) * rk->q_spans[c].size() * p.heads_q * p.head_dim;
        convert_kernel<T><<<grid_for(n), 256, 0, rk->compute>>>(rk->out.as<T>(c * qe), rk->o_acc.as<float>(c * qe), n);
        ATTN_CHECK(cudaGetLastError());
        copy_rows(a.o, rk->out.as<T>(c * qe), p, p.seq_q, p.heads_q, rk->q_spans[c], false, rk->compute);
        copy_lse(a.lse, rk->lse_acc.as<float>(c * le), p, rk->q_spans[c], false, rk->compute);
      }
    }
    join_into(st, cs, caller);
  }

  template <class T>
  void run_backward(State& st, const BwdArgs& a, int caller) const {
    const Problem& p = a.p;
    const cudaStream_t cs = static_cast<cudaStream_t>(a.stream);
    const std::int64_t qe = st.q_chunk_elems(), ke = st.k_chunk_elems(), le = st.lse_chunk_elems();
    const std::size_t kv_bytes = static_cast<std::size_t>(2 * st.chunks * ke) * sizeof(T);
    const std::size_t dkv_bytes = static_cast<std::size_t>(2 * st.chunks * ke) * sizeof(float);
    fork_from(st, cs, caller);
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      for (int c = 0; c < static_cast<int>(rk->q_spans.size()); ++c) {
        const Span& s = rk->q_spans[c];
        copy_rows(rk->q.as<T>(c * qe), a.q, p, p.seq_q, p.heads_q, s, true, rk->compute);
        copy_rows(rk->o.as<T>(c * qe), a.o, p, p.seq_q, p.heads_q, s, true, rk->compute);
        copy_rows(rk->dout.as<T>(c * qe), a.dout, p, p.seq_q, p.heads_q, s, true, rk->compute);
        copy_lse(rk->lse.as<float>(c * le), a.lse, p, s, true, rk->compute);
      }
      for (int c = 0; c < static_cast<int>(rk->k_spans.size()); ++c) {
        copy_rows(rk->kv[0].as<T>(c * ke), a.k, p, p.seq_kv, p.heads_kv, rk->k_spans[c], true, rk->compute);
        copy_rows(rk->kv[0].as<T>((st.chunks + c) * ke), a.v, p, p.seq_kv, p.heads_kv, rk->k_spans[c], true, rk->compute);
      }
      ATTN_CHECK(cudaMemsetAsync(rk->dq_acc.p, 0, static_cast<std::size_t>(st.chunks * qe) * sizeof(float), rk->compute));
      ATTN_CHECK(cudaMemsetAsync(rk->dkv[0].p, 0, dkv_bytes, rk->compute));
      ATTN_CHECK(cudaEventRecord(rk->ev_compute, rk->compute));
    }
    const auto ks = ring::split_sequence(p.seq_kv, st.ranks, st.zigzag);
    const Options none;
    for (int s = 0; s < st.ranks; ++s) {
      const int cur = s % 2, nxt = 1 - cur;
      if (s > 0) {  // step s-1's exchanges: the K/V of step s and their dK/dV accumulators
        for (auto& rk : st.rank) {
          ATTN_CHECK(cudaSetDevice(rk->dev));
          ATTN_CHECK(cudaStreamWaitEvent(rk->compute, rk->ev_kv, 0));
          ATTN_CHECK(cudaStreamWaitEvent(rk->compute, rk->ev_dkv, 0));
        }
      }
      if (s + 1 < st.ranks) {
        exchange(st, kv_bytes, [&](Rank& rk) { return rk.kv[cur].p; }, [&](Rank& rk) { return rk.kv[nxt].p; },
                 &Rank::ev_kv);
      }
      for (int r = 0; r < st.ranks; ++r) {
        Rank& rk = *st.rank[r];
        ATTN_CHECK(cudaSetDevice(rk.dev));
        const auto& kspans = ks[ring::kv_owner(r, s, st.ranks)];
        for (int qc = 0; qc < static_cast<int>(rk.q_spans.size()); ++qc) {
          const Span& qspan = rk.q_spans[qc];
          for (int kc = 0; kc < static_cast<int>(kspans.size()); ++kc) {
            const BlockMask m = ring::block_mask(p.causal, p.seq_q, p.seq_kv, qspan, kspans[kc]);
            if (m.kind == BlockMask::none) continue;
            BwdArgs ba;
            ba.p = block_problem(p, qspan, kspans[kc], m);
            ba.q = rk.q.as<T>(qc * qe);
            ba.k = rk.kv[cur].as<T>(kc * ke);
            ba.v = rk.kv[cur].as<T>((st.chunks + kc) * ke);
            ba.o = rk.o.as<T>(qc * qe);
            ba.lse = rk.lse.as<float>(qc * le);
            ba.dout = rk.dout.as<T>(qc * qe);
            ba.dq = rk.dq_part.p;
            ba.dk = rk.dk_part.p;
            ba.dv = rk.dv_part.p;
            ba.workspace = rk.workspace.p;
            ba.workspace_bytes = st.ws_bytes;
            ba.stream = rk.compute;
            ba.options = &none;
            st.local_bwd->backward(ba);
            const std::int64_t nq = static_cast<std::int64_t>(p.batch) * qspan.size() * p.heads_q * p.head_dim;
            const std::int64_t nk = static_cast<std::int64_t>(p.batch) * kspans[kc].size() * p.heads_kv * p.head_dim;
            accumulate_kernel<T><<<grid_for(nq), 256, 0, rk.compute>>>(rk.dq_acc.as<float>(qc * qe), rk.dq_part.as<T>(), nq);
            accumulate_kernel<T><<<grid_for(nk), 256, 0, rk.compute>>>(rk.dkv[cur].as<float>(kc * ke), rk.dk_part.as<T>(), nk);
            accumulate_kernel<T><<<grid_for(nk), 256, 0, rk.compute>>>(rk.dkv[cur].as<float>((st.chunks + kc) * ke),
                                                                     rk.dv_part.as<T>(), nk);
            ATTN_CHECK(cudaGetLastError());
          }
        }
        ATTN_CHECK(cudaEventRecord(rk.ev_compute, rk.compute));
      }
      // The dK/dV accumulators move on after this step's kernels (not hidden); after the N-th
      // exchange each is home.
      if (st.ranks > 1) {
        exchange(st, dkv_bytes, [&](Rank& rk) { return rk.dkv[cur].p; }, [&](Rank& rk) { return rk.dkv[nxt].p; },
                 &Rank::ev_dkv);
      }
    }
    const int home = st.ranks == 1 ? 0 : st.ranks % 2;
    for (auto& rk : st.rank) {
      ATTN_CHECK(cudaSetDevice(rk->dev));
      if (st.ranks > 1) ATTN_CHECK(cudaStreamWaitEvent(rk->compute, rk->ev_dkv, 0));
      for (int c = 0; c < static_cast<int>(rk->q_spans.size()); ++c) {
        const std::int64_t n = static_cast<std::int64_t>(p.batch) * rk->q_spans[c].size() * p.heads_q * p.head_dim;
        convert_kernel<T><<<grid_for(n), 256, 0, rk->compute>>>(rk->out.as<T>(c * qe), rk->dq_acc.as<float>(c * qe), n);
        ATTN_CHECK(cudaGetLastError());
        copy_rows(a.dq, rk->out.as<T>(c * qe), p, p.seq_q, p.heads_q, rk->q_spans[c], false, rk->compute);
      }
      // The out buffer is reused: the dQ copies above are on the same stream, so they finish first.
      for (int c = 0; c < static_cast<int>(rk->k_spans.size()); ++c) {
        const std::int64_t n = static_cast<std::int64_t>(p.batch) * rk->k_spans[c].size() * p.heads_kv * p.head_dim;
        convert_kernel<T><<<grid_for(n), 256, 0, rk->compute>>>(rk->out.as<T>(c * ke), rk->dkv[home].as<float>(c * ke), n);
        convert_kernel<T><<<grid_for(n), 256, 0, rk->compute>>>(rk->out.as<T>((st.chunks + c) * ke),
                                                               rk->dkv[home].as<float>((st.chunks + c) * ke), n);
        ATTN_CHECK(cudaGetLastError());
        copy_rows(a.dk, rk->out.as<T>(c * ke), p, p.seq_kv, p.heads_kv, rk->k_spans[c], false, rk->compute);
        copy_rows(a.dv, rk->out.as<T>((st.chunks + c) * ke), p, p.seq_kv, p.heads_kv, rk->k_spans[c], false, rk->compute);
      }
    }
    join_into(st, cs, caller);
  }
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::RingAttention)
