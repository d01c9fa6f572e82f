// cuda.cudnn_sdpa — cuDNN's fused flash attention (SDPA), forward and backward, as an in-harness
// peer of attnbench's own kernels.
//
// Algorithm: cuDNN's fused flash-attention engines (FlashAttention-2 style on sm80, Hopper
// kernels on sm90), reached through the cuDNN *backend* graph API. The forward graph is
// matmul(Q, Kᵀ) → ×scale → [causal / window mask] → softmax with statistics → matmul(P, V); the
// backward graph recomputes P from the LSE and produces dQ, dK, dV (graphs in
// cudnn/sdpa_graph.cpp). Varlen (packed THD) batches add cuDNN's padding mask (per-sequence
// lengths) and ragged offsets, the pattern cudnn-frontend lowers padding_mask + ragged offsets to.
// Passes over HBM (as cuDNN's engines do them): forward reads Q, K, V once per query tile and
// writes O and LSE; backward reads Q, K, V, O, dO, LSE, writes a float32 D = rowsum(dO ∘ O) and a
// float32 dQ accumulator, then dQ, dK, dV.
// Writes: o, lse (forward); dq, dk, dv (backward). LSE is cuDNN's "Stats" tensor, which is
// max + log Σ exp(S − max) of the *scaled* scores, i.e. exactly attnbench's natural-log LSE, so
// cuDNN writes it directly into the harness's [b, hq, sq] buffer: no conversion pass. Varlen: the
// [hq, total_q] LSE is a ragged Stats tensor (head stride total_q, sequence b at cu_seqlens_q[b]),
// which cuDNN 9.19 accepts for the H200, forward and backward (docs/peers.md, the offline check),
// so again no copy and no scratch LSE (the frontend refuses a ragged LSE in the backward on sm8x
// and sm12x only: SKIP there).
// Extra memory: the plan's own workspace (often 0 for the forward) plus, for the backward,
// b·hq·sq floats (D) and b·hq·sq·d floats (dQ accumulator) — O(seq), as for FlashAttention
// (varlen: padded to the longest sequence, b·hq·max_seq, as cudnn-frontend does by default);
// varlen also 5 int32 arrays of b + 1 (lengths and offsets, written by cudnn/ragged.cu's one small
// kernel on the call's stream from the harness's cu_seqlens before each call).
// Limits: f16/bf16 only; head_dim a multiple of 8 up to 256 (Hopper; 128 on other GPUs for the
// backward and on Ampere for cuDNN ≤ 9.9); sm80+. Causal with seq_q > seq_kv is a SKIP (cuDNN's
// bottom-right mask needs seq_q ≤ seq_kv), and with seq_q < seq_kv it needs cuDNN ≥ 9.6 unless
// both lengths are multiples of 64. Sliding windows (window_left / window_right, with or without
// causal) need seq_q <= seq_kv (else a SKIP, as in cudnn-frontend); before cuDNN 9.10.2 a
// window_left needs a right bound (causal or window_right), before 9.6 a window_left with a right
// bound needs seq_q == seq_kv, and 9.14.0 refuses a window_left without a right bound past 1024
// keys (a known cuDNN bug). Soft-capping is not in these graphs: SKIP. Varlen needs cuDNN >= 9.6
// and sm90+ (sm80 with >= 9.18.1, forward only); with causal or a window every sequence needs
// seq_q <= seq_kv (rows without a key are a SKIP, as for dense problems); a zero-length sequence
// is a SKIP before cuDNN 9.25 (NaN rows: cudnn-frontend's own gate); offsets past 2^31 elements
// are a SKIP (int32 offsets).
// Anything else cuDNN rejects becomes a SKIP row carrying cuDNN's own message (no engine
// configuration finalized).
//
// Why the backend API and not cudnn-frontend: PyPI's nvidia-cudnn-frontend wheel does ship the
// header-only C++ API (include/cudnn_frontend*.h, with a dlopen mode,
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING), but using it would add a third-party header tree that
// the build must find (a CMake change), that the offline GPU machine must receive, and that does
// not compile under this project's -Werror flags (wheel 1.32.0: -Wunused-function in
// cudnn_frontend_utils.h) unless marked as system headers. The backend API needs only
// cudnn.h, which every cuDNN 9 install ships, and ~12 dlsym'd functions; its graphs mirror the
// pattern the frontend lowers SDPA to, and every attribute name/type was compiled and finalized
// against cuDNN 9.19 (see docs/peers.md for the offline plan-building check).
//
// Layouts: BSHD tensors are described to cuDNN as [b, h, s, d] with strides (s·h·d, d, h·d, 1),
// and Kᵀ as [b, h, d, s] with strides (s·h·d, d, 1, h·d): no copies. GQA/MQA: K/V carry hkv heads
// and cuDNN broadcasts them over each group of hq / hkv query heads (dK/dV summed by a reduction
// node). Causal and windows: bottom-right aligned as attnbench defines it, as cuDNN's diagonal
// band (right bound R = 0 under causal, else window_right; left bound L = window_left + 1, the keys
// up to and including the diagonal) — with seq_q == seq_kv the plain top-left pattern; otherwise
// the indices are shifted by seq_kv − seq_q inside the graph (varlen: always, per sequence, by the
// length tensors). Varlen tensors are the same [b, h, s, d] views with s the longest sequence, b
// the sequence count and each sequence starting at a ragged offset (cu_seqlens · h · d elements).
// Plans: built once per (problem, pass, device) — in workspace_bytes(), supports_extra() or
// prepare(), whichever comes first — and cached for the process; forward()/backward() only bind
// pointers (a cached variant pack) and call cudnnBackendExecute on the harness's stream.
// cuDNN is loaded with dlopen at first use (ATTNBENCH_CUDNN_LIB, then libcudnn.so.9, then
// libcudnn.so); without it every case is a SKIP row that says why.
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "attnbench/implementation.hpp"

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS
#include <cuda_runtime_api.h>

#include "library/cudnn/graph.hpp"
#include "library/cudnn/loader.hpp"
#include "library/cudnn/ragged.hpp"
#include "library/cudnn/sdpa_graph.hpp"
#include "common/workspace.hpp"
#endif

namespace attnbench {
namespace {

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

using cuda::align_up;

int current_device() {
  int dev = 0;
  ATTN_CHECK(cudaGetDevice(&dev));
  return dev;
}

// The problem as the graph is built for it: with one query row (decode), a right bound (causal, or
// window_right) excludes no key, because that row's diagonal is the last key; without a left bound
// the graph then has no mask at all. Exact; and the masked decode graph ran at a fifth of
// PyTorch's cuDNN backend on the same cuDNN 9.19 (the first H200 decode job, 2026-12-03: 226
// against 2354 GB/s at batch 1, 32:8 heads, 32k; results/h200/issue29/README.md). Whether the
// mask was the cause is not measured yet.
Problem as_graphed(Problem p) {
  if (p.seq_q == 1 && p.window_left < 0) {
    p.causal = false;
    p.window_right = -1;
  }
  return p;
}

cudnn::SdpaShape shape_of(const Problem& p) {
  cudnn::SdpaShape s{p.batch,
                     p.heads_q,
                     p.heads_kv,
                     p.seq_q,
                     p.seq_kv,
                     p.head_dim,
                     p.causal,
                     static_cast<float>(p.effective_scale()),
                     p.dtype == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF,
                     p.window_left,
                     p.window_right};
  s.varlen = p.varlen();  // then batch is the sequence count, seq_q/seq_kv the longest
  s.total_q = p.total_q();
  s.total_kv = p.total_kv();
  return s;
}

// One built (or failed) plan. Device-side per-batch sequence lengths exist only for the backward
// padding-mask workaround of older cuDNN versions.
struct Entry {
  cudnn::SdpaShape shape{};
  cudnn::SdpaFlags flags{};
  std::unique_ptr<cudnn::Plan> plan;
  std::string error;
  std::int32_t* seq_lens = nullptr;  // [2 * b]: seq_q for each batch, then seq_kv
};

// (The varlen lengths are part of the key: the LSE's head stride is total_q.)
using Key = std::tuple<int, bool, int, int, int, int, int, int, bool, double, int, int, int,
                       std::vector<int>, std::vector<int>>;

// Process-wide cuDNN state: handles per device and plans per problem. Never destroyed, because
// cuDNN and the CUDA runtime may already be torn down when static destructors run.
class State {
 public:
  std::mutex mu;

  cudnnHandle_t handle(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t h = nullptr;
    ATTN_CHECK(cudnn::api().Create(&h));
    handles_.emplace(device, h);
    return h;
  }

  // The plan for (p, backward?) on the current device, built on first use. Caller holds mu.
  Entry& entry(const Problem& problem, bool bwd) {
    const Problem p = as_graphed(problem);
    const int dev = current_device();
    const Key key{dev,
                  bwd,
                  p.batch,
                  p.heads_q,
                  p.heads_kv,
                  p.seq_q,
                  p.seq_kv,
                  p.head_dim,
                  p.causal,
                  p.effective_scale(),
                  static_cast<int>(p.dtype),
                  p.window_left,
                  p.window_right,
                  p.seqlens_q,
                  p.seqlens_kv};
    auto it = entries_.find(key);
    if (it != entries_.end()) return it->second;
    Entry& e = entries_[key];
    try {
      const cudnn::Api& api = cudnn::api();
      e.shape = shape_of(p);
      e.flags = cudnn::sdpa_flags(api.version, e.shape);
      cudnn::Graph g =
          bwd ? cudnn::build_sdpa_bwd(e.shape, e.flags) : cudnn::build_sdpa_fwd(e.shape, e.flags);
      e.plan = std::make_unique<cudnn::Plan>(std::move(g), cudnn::Target{handle(dev), nullptr});
      if (bwd && e.flags.bwd_padding_mask) {
        std::vector<std::int32_t> lens(2 * static_cast<std::size_t>(p.batch), p.seq_q);
        std::fill(lens.begin() + p.batch, lens.end(), p.seq_kv);
        void* buf = nullptr;  // lives as long as the plan: the process
        ATTN_CHECK(cudaMalloc(&buf, lens.size() * sizeof(std::int32_t)));
        e.seq_lens = static_cast<std::int32_t*>(buf);
        ATTN_CHECK(cudaMemcpy(e.seq_lens, lens.data(), lens.size() * sizeof(std::int32_t),
                                   cudaMemcpyHostToDevice));
      }
    } catch (const std::exception& ex) {
      e.plan.reset();
      e.error = ex.what();
    }
    return e;
  }

 private:
  std::map<int, cudnnHandle_t> handles_;
  std::map<Key, Entry> entries_;
};

State& state() {
  static State* s = new State;
  return *s;
}

// Workspace of one pass: the plan's, then (backward) D and the dQ accumulator, then (varlen) the
// per-sequence lengths and ragged offsets (cudnn/ragged.hpp), each 256-byte aligned.
std::int64_t ragged_metadata_offset(const Entry& e, bool bwd) {
  const std::int64_t plan = align_up(e.plan->workspace_bytes());
  return bwd ? plan + cudnn::sdpa_bwd_extra_bytes(e.shape) : plan;
}

std::int64_t pass_workspace(const Entry& e, bool bwd) {
  if (!e.plan) return 0;
  if (!e.shape.varlen) {
    return bwd ? ragged_metadata_offset(e, bwd) : e.plan->workspace_bytes();
  }
  return ragged_metadata_offset(e, bwd) + cudnn::ragged_metadata_bytes(e.shape.b);
}

// Varlen: builds the lengths and offsets the graph reads (in the workspace, on the call's stream)
// from the harness's device cu_seqlens, and returns them.
cudnn::RaggedMetadata ragged_metadata(const Entry& e, bool bwd, const Problem& p, void* workspace,
                                      const std::int32_t* cu_q, const std::int32_t* cu_kv,
                                      cudaStream_t stream) {
  if (!cu_q || !cu_kv) {
    throw std::runtime_error("cuda.cudnn_sdpa: varlen problem " + p.label() +
                             " called without cu_seqlens_q / cu_seqlens_kv");
  }
  const cudnn::RaggedMetadata m = cudnn::ragged_metadata_at(
      static_cast<char*>(workspace) + ragged_metadata_offset(e, bwd), e.shape.b);
  cudnn::build_ragged_metadata(m, cu_q, cu_kv, e.shape.b,
                               static_cast<std::int32_t>(e.shape.hq * e.shape.d),
                               static_cast<std::int32_t>(e.shape.hkv * e.shape.d), stream);
  return m;
}

// Varlen (packed THD) checks: what cuDNN documents or is known to get wrong, per sequence.
Support varlen_support(const Problem& p, bool bwd, int major, std::size_t v) {
  if (v < 90600) {
    return Support::no(
        "cuDNN < 9.6 supports ragged (THD) batches without GQA only, and bottom-right masks only "
        "for lengths that are multiples of 64");
  }
  if (major < 9 && v < 91801) {
    return Support::no("cuDNN < 9.18.1 supports ragged (THD) batches only on sm90 and newer");
  }
  if (bwd && (major == 8 || major == 12)) {
    return Support::no("cuDNN's SDPA backward does not read a ragged (packed) LSE on sm" +
                       std::to_string(major) + "x");
  }
  // Offsets are int32 element counts (cudnn/ragged.hpp).
  constexpr std::int64_t kMax = std::int64_t{1} << 31;
  if (p.total_q() * p.heads_q * p.head_dim >= kMax ||
      p.total_kv() * p.heads_kv * p.head_dim >= kMax) {
    return Support::no("ragged offsets past 2^31 elements (total tokens x heads x head_dim)");
  }
  for (int b = 0; b < p.batch; ++b) {
    const int sq = p.seq_q_of(b), skv = p.seq_kv_of(b);
    const std::string which = "sequence " + std::to_string(b) + " has seq_q " + std::to_string(sq) +
                              ", seq_kv " + std::to_string(skv);
    if ((sq == 0 || skv == 0) && v < 92500) {
      return Support::no(
          "cuDNN < 9.25 does not support zero-length sequences in a ragged batch (NaN rows; "
          "cudnn-frontend gates them at 9.25.0): " +
          which);
    }
    // As for dense problems: with queries past the keys, rows that see no key (O = 0, LSE = -inf)
    // are outside what cuDNN's bottom-right band documents.
    if ((p.causal || p.has_window()) && sq > skv) {
      return Support::no(std::string("cuDNN's bottom-right ") +
                         (p.causal ? "causal mask" : "sliding window") +
                         " needs seq_q <= seq_kv in every sequence: " + which);
    }
  }
  return Support::yes();
}

// Checks that cuDNN's fused SDPA documents as unsupported, so the SKIP reason is specific
// (the frontend's support-surface rules for cuDNN 9, reduced to what attnbench can express).
Support static_support(const Problem& problem, Pass pass, std::size_t v) {
  const Problem p = as_graphed(problem);
  const bool bwd = pass != Pass::fwd;  // every pass needs the forward (see supports_extra)
  if (v == 91000 || v == 91001) {
    return Support::no("cuDNN " + cudnn::version_text(v) + " has known SDPA bugs (use >= 9.10.2)");
  }
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
    return Support::no("no usable CUDA device");
  }
  if (major < 8) return Support::no("cuDNN fused SDPA needs sm80 or newer");
  if (p.varlen()) {
    if (Support s = varlen_support(p, bwd, major, v); !s) return s;
  }
  if (major == 8 && p.head_dim > 128 && v <= 90900) {
    return Support::no("cuDNN <= 9.9 supports head_dim <= 128 on Ampere");
  }
  if (bwd && major != 9 && p.head_dim > 128) {
    return Support::no("cuDNN's SDPA backward supports head_dim <= 128 on sm" +
                       std::to_string(major) + "x (256 only on Hopper)");
  }
  if (p.causal && p.seq_q > p.seq_kv) {
    return Support::no("cuDNN's bottom-right causal mask needs seq_q <= seq_kv");
  }
  if (p.causal && p.seq_q != p.seq_kv && v < 90600 && (p.seq_q % 64 || p.seq_kv % 64)) {
    return Support::no(
        "cuDNN < 9.6 supports bottom-right causal only for seq lengths that are "
        "multiples of 64");
  }
  // Sliding windows: the frontend's refusals for its diagonal band (left and right bounds, bottom-
  // right aligned), in attnbench's terms. `right`: the band has a right bound (causal, or
  // window_right); `left`: it has a left one (window_left).
  const bool left = p.window_left >= 0;
  const bool right = p.causal || p.window_right >= 0;
  if (p.has_window() && p.seq_q > p.seq_kv) {
    return Support::no("cuDNN's sliding window (bottom-right aligned) needs seq_q <= seq_kv");
  }
  if (right && !p.causal && p.seq_q != p.seq_kv && v < 90600 && (p.seq_q % 64 || p.seq_kv % 64)) {
    return Support::no(
        "cuDNN < 9.6 supports a bottom-right window_right only for seq lengths that are "
        "multiples of 64");
  }
  if (left && right && p.seq_q != p.seq_kv && v < 90600) {
    return Support::no(
        "cuDNN < 9.6 supports window_left with a bottom-right right bound (causal or "
        "window_right) only for seq_q == seq_kv");
  }
  if (left && !right && v < 91002) {
    return Support::no(
        "cuDNN < 9.10.2 supports window_left only with a right bound (causal or window_right)");
  }
  if (left && !right && v == 91400 && p.seq_kv > 1024) {
    return Support::no(
        "cuDNN 9.14.0 has a known bug with window_left, no right bound and seq_kv > 1024 "
        "(use >= 9.14.1)");
  }
  if (right && p.seq_q == 1 && v <= 90900) {
    return Support::no(
        "cuDNN <= 9.9 does not support seq_q = 1 with a right bound (causal or window_right)");
  }
  if (bwd && p.seq_q == 1 && p.seq_kv == 1)
    return Support::no("cuDNN's SDPA backward rejects s_q = s_kv = 1");
  return Support::yes();
}

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS

class CudnnSdpa final : public Implementation {
 public:
  std::string name() const override { return "cuda.cudnn_sdpa"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "cuDNN fused flash attention (backend graph API, dlopen'd), forward and backward";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.dtypes = {DType::f16, DType::bf16};
    c.min_head_dim = 8;
    c.max_head_dim = 256;
    c.head_dim_multiple = 8;
    c.causal = true;
    c.gqa = true;
    c.window = true;  // seq_q <= seq_kv (static_support); soft cap: not in these graphs
    c.varlen = true;  // cuDNN >= 9.6, sm90+ (static_support); no zero-length sequence before 9.25
    c.forward = true;
    c.backward = true;
    // cuDNN's own bug, reported by `check` and asserted to still fail (conformance.hpp): the
    // seven cases of the suite where it shows (the gate of bf30a93 on the H200; the other bf16
    // large-scale backward cases pass, or cuDNN does not run them).
    const char* inf_grads =
        "cuDNN 9.19's backward returns inf (or ~1e29) in dQ/dK/dV at logits near 1e9 (bf16, scale "
        "1e8) where the float64 reference is finite; seen on the H200, 2026-12-01";
    for (const char* pass : {"bwd", "fwd_bwd"}) {
      for (const char* label : {"b1_hq2_hkv1_sq64_skv64_d64_bf16_scale1e+08",
                                "b1_hq4_hkv2_sq33_skv100_d40_causal_bf16_scale1e+08",
                                "b2_hq4_hkv2_sq33_skv100_d40_causal_bf16_scale1e+08"})
        c.known_failures.push_back({std::string(pass) + " " + label, inf_grads});
    }
    c.known_failures.push_back({"fwd_bwd b1_hq2_hkv2_sq70_skv90_d256_bf16_scale1e+08", inf_grads});
    return c;
  }

#ifndef ATTNBENCH_HAVE_CUDNN_HEADERS
  Support supports_extra(const Problem&, Pass) const override {
    return Support::no("built without cuDNN headers (cudnn.h not found at configure time)");
  }
  void forward(const FwdArgs&) const override {
    throw std::runtime_error("cuda.cudnn_sdpa: built without cuDNN headers");
  }
  void backward(const BwdArgs&) const override {
    throw std::runtime_error("cuda.cudnn_sdpa: built without cuDNN headers");
  }
#else
  Support supports_extra(const Problem& p, Pass pass) const override {
    std::string why;
    const cudnn::Api* api = cudnn::load(&why);
    if (!api) return Support::no(why);
    if (Support s = static_support(p, pass, api->version); !s) return s;
    // A case is supported iff cuDNN finalizes its plans; cuDNN's message is the SKIP reason. The
    // forward plan is needed by every pass: the harness produces a standalone backward's O and
    // LSE with this implementation's own forward.
    std::lock_guard lock(state().mu);
    for (const bool bwd : {false, true}) {
      if (bwd && pass == Pass::fwd) continue;
      const Entry& e = state().entry(p, bwd);
      if (!e.plan) {
        return Support::no(std::string(bwd ? "backward" : "forward") + ": " + e.error);
      }
    }
    return Support::yes();
  }

  // Builds the plans if needed (the harness asks before prepare()). A case whose plan cannot be
  // built needs nothing here: supports_extra() and prepare() report why.
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    if (!cudnn::load(nullptr)) return 0;
    std::lock_guard lock(state().mu);
    std::int64_t bytes = 0;
    try {
      if (pass != Pass::bwd)
        bytes = std::max(bytes, pass_workspace(state().entry(p, false), false));
      if (pass != Pass::fwd) bytes = std::max(bytes, pass_workspace(state().entry(p, true), true));
    } catch (const std::exception&) {
      return 0;  // no usable device: nothing to build for
    }
    return static_cast<std::size_t>(bytes);
  }

  void prepare(const Problem& p, Pass pass, const Options&) const override {
    std::lock_guard lock(state().mu);
    for (const bool bwd : {false, true}) {
      if ((bwd && pass == Pass::fwd) || (!bwd && pass == Pass::bwd)) continue;
      const Entry& e = state().entry(p, bwd);
      if (!e.plan) throw std::runtime_error("cuda.cudnn_sdpa: " + e.error);
    }
  }

  // q: [B, Sq, Hq, D], k/v: [B, Skv, Hkv, D] -> o: [B, Sq, Hq, D], lse: [B, Hq, Sq]
  // varlen: q [total_q, Hq, D], k/v [total_kv, Hkv, D] -> o like q, lse [Hq, total_q]
  void forward(const FwdArgs& a) const override {
    std::lock_guard lock(state().mu);
    Entry& e = ready(a.p, false, a.workspace_bytes);
    cudnnHandle_t h = state().handle(current_device());
    const auto stream = static_cast<cudaStream_t>(a.stream);
    ATTN_CHECK(cudnn::api().SetStream(h, stream));
    std::array<cudnn::Plan::Binding, 10> buffers{{
        {cudnn::kQ, const_cast<void*>(a.q)},
        {cudnn::kK, const_cast<void*>(a.k)},
        {cudnn::kV, const_cast<void*>(a.v)},
        {cudnn::kO, a.o},
        {cudnn::kStats, a.lse},
    }};
    std::size_t n = 5;
    if (e.shape.varlen) {
      const cudnn::RaggedMetadata m =
          ragged_metadata(e, false, a.p, a.workspace, a.cu_seqlens_q, a.cu_seqlens_kv, stream);
      n = bind_ragged(buffers, n, m);
    }
    e.plan->execute(h, std::span<const cudnn::Plan::Binding>(buffers.data(), n), a.workspace);
  }

  // q, o, dout: [B, Sq, Hq, D], k/v: [B, Skv, Hkv, D], lse: [B, Hq, Sq] -> dq, dk, dv like q, k, v
  // (varlen: THD tensors and lse [Hq, total_q], as forward)
  void backward(const BwdArgs& a) const override {
    std::lock_guard lock(state().mu);
    Entry& e = ready(a.p, true, a.workspace_bytes);
    cudnnHandle_t h = state().handle(current_device());
    const auto stream = static_cast<cudaStream_t>(a.stream);
    ATTN_CHECK(cudnn::api().SetStream(h, stream));
    // Workspace: [plan workspace | D (softmax sum) | dQ accumulator], each 256-byte aligned.
    auto* extra = static_cast<char*>(a.workspace) + align_up(e.plan->workspace_bytes());
    void* dq_accum = extra + cudnn::sdpa_bwd_dq_accum_offset(e.shape);
    if (e.flags.zero_dq_accum) {
      const auto bytes =
          static_cast<std::size_t>(e.shape.b * e.shape.hq * e.shape.sq * e.shape.d) * 4;
      ATTN_CHECK(cudaMemsetAsync(dq_accum, 0, bytes, stream));
    }
    std::array<cudnn::Plan::Binding, 16> buffers{{
        {cudnn::kQ, const_cast<void*>(a.q)},
        {cudnn::kK, const_cast<void*>(a.k)},
        {cudnn::kV, const_cast<void*>(a.v)},
        {cudnn::kO, const_cast<void*>(a.o)},
        {cudnn::kStats, const_cast<float*>(a.lse)},
        {cudnn::kdO, const_cast<void*>(a.dout)},
        {cudnn::kdQ, a.dq},
        {cudnn::kdK, a.dk},
        {cudnn::kdV, a.dv},
        {cudnn::kSoftmaxSum, extra},
        {cudnn::kdQAccum, dq_accum},
    }};
    std::size_t n = 11;
    if (e.seq_lens) {  // the dense padding workaround
      buffers[n++] = {cudnn::kSeqLenQ, e.seq_lens};
      buffers[n++] = {cudnn::kSeqLenKV, e.seq_lens + a.p.batch};
    } else if (e.shape.varlen) {
      const cudnn::RaggedMetadata m =
          ragged_metadata(e, true, a.p, a.workspace, a.cu_seqlens_q, a.cu_seqlens_kv, stream);
      n = bind_ragged(buffers, n, m);
    }
    e.plan->execute(h, std::span<const cudnn::Plan::Binding>(buffers.data(), n), a.workspace);
  }

 private:
  // Appends the varlen graph's five metadata tensors to buffers[n...]; returns the new count.
  template <std::size_t N>
  static std::size_t bind_ragged(std::array<cudnn::Plan::Binding, N>& buffers, std::size_t n,
                                 const cudnn::RaggedMetadata& m) {
    for (const cudnn::Plan::Binding& b : {cudnn::Plan::Binding{cudnn::kSeqLenQ, m.seq_q},
                                          cudnn::Plan::Binding{cudnn::kSeqLenKV, m.seq_kv},
                                          cudnn::Plan::Binding{cudnn::kRaggedQ, m.off_q},
                                          cudnn::Plan::Binding{cudnn::kRaggedKV, m.off_kv},
                                          cudnn::Plan::Binding{cudnn::kRaggedStats, m.off_stats}})
      buffers.at(n++) = b;
    return n;
  }

  // The cached plan for this call; throws if it could not be built or the workspace is short.
  static Entry& ready(const Problem& p, bool bwd, std::size_t workspace_bytes) {
    Entry& e = state().entry(p, bwd);
    if (!e.plan) throw std::runtime_error("cuda.cudnn_sdpa: " + e.error);
    const auto need = static_cast<std::size_t>(pass_workspace(e, bwd));
    if (workspace_bytes < need) {
      throw std::runtime_error("cuda.cudnn_sdpa: workspace of " + std::to_string(workspace_bytes) +
                               " bytes, plan needs " + std::to_string(need));
    }
    return e;
  }
#endif
};

}  // namespace
}  // namespace attnbench

ATTNBENCH_REGISTER(attnbench::CudnnSdpa)
