// cuda.standard_cublas — "standard attention" of the FlashAttention papers: cuBLAS tensor-core
// GEMMs with S and P materialised in HBM; the baseline the speedup tables divide by.
//
// Forward:
//   1. S = scale · Q Kᵀ: cublasGemmStridedBatchedEx (inputs in the dtype, CUBLAS_COMPUTE_32F,
//      output S in the dtype; the scale is the GEMM's alpha, free in its epilogue);
//   2. one fused kernel per row: mask + safe softmax + LSE, S overwritten by P in the dtype. One
//      block per row, 16-byte vector loads; pass 1 computes max and sum online (one read), pass
//      2 re-reads the row (an L2 hit: the rows in flight are a few MB) and writes P; keys past a
//      causal row's limit are neither read nor exp'd, only written as 0;
//   3. O = P V: one more strided-batched GEMM.
// Backward: recompute S (GEMM) and P from it with the forward's softmax kernel (S overwritten by
// P in the dtype, the LSE to scratch), dP = dO Vᵀ (GEMM), D = rowsum(dO ∘ O), then one
// elementwise kernel dS = P ∘ (dP − D) over dP; then dV = Pᵀ dO, dQ = scale · dS K,
// dK = scale · dSᵀ Q (GEMMs). Why not P = exp(S − LSE) with the forward's LSE (this file until
// 2026-12): S is stored rounded to the dtype, and at |S| ~ 30 (outlier inputs) a bf16 rounding
// of up to 0.06 goes straight into the exponent of the dominant P (6%), which the LSE does not
// cancel; renormalising the row, as the forward and the naive baseline do, leaves the dominant
// P exactly 1 / sum (dV was 4-9x the naive error at seq_q 1, seq_kv 4097, bf16, outliers).
// Heads: BSHD tensors are addressed in place through leading dimensions (row stride heads·D);
// cuBLAS batches one stride, so a GEMM is either one call per (batch, group index g) batched over
// the kv heads, or one call per query head batched over the batch — whichever makes fewer calls.
// GQA: dK, dV sum over the group by beta = 1 accumulation in call order (deterministic); in
// f16/bf16 that accumulation goes to a float32 workspace, converted once at the end. K and V are
// never copied.
// Passes over HBM (forward): S written (N²), read twice and P written (N²), P read (N²).
// Extra memory: forward B·Hq·Sq·Skv elements of the dtype; backward twice that, two floats per
// query row, and for GQA in f16/bf16 two float32 copies of dK/dV; plus cuBLAS's 32 MiB workspace,
// handed to it from ours (cublasSetWorkspace) so no call allocates and the memory is counted.
// The cuBLAS handle is created in prepare(). f32 inputs use CUBLAS_COMPUTE_32F (no TF32).
// Limits: any head_dim; batch·heads_q·seq_q < 2^31 (one softmax block per row).
#include <limits>
#include <string>

#include "common/device.cuh"

namespace attnbench::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// cuBLAS's recommended workspace on Hopper (more than enough on Ampere).
constexpr std::size_t kCublasWorkspace = std::size_t{32} << 20;

template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// Running (max, sum of exp(x - max)) of a set of scores; merge combines two sets.
struct MaxSum {
  float m, l;
};
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float mn = fmaxf(a.m, b.m);
  if (mn == kNegInf) return {kNegInf, 0.f};
  return {mn, a.l * expf(a.m - mn) + b.l * expf(b.m - mn)};
}
__device__ MaxSum block_merge(MaxSum v) {
  __shared__ MaxSum red[32];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int nwarps = static_cast<int>(blockDim.x / 32);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.l, o)});
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? red[lane] : MaxSum{kNegInf, 0.f};
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      v = merge(v, {__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.l, o)});
    if (lane == 0) red[0] = v;
  }
  __syncthreads();
  return red[0];
}

// s: [rows, Skv] in the dtype, rows = (b, h, i) of [B, Hq, Sq]; lse: [B, Hq, Sq]. One block per
// row; Skv % VEC == 0.
template <class T, int VEC>
__global__ void mask_softmax_kernel(T* __restrict__ s, float* __restrict__ lse, int sq, int skv,
                                    bool causal) {
  const std::int64_t row = blockIdx.x;
  const int lim = causal_limit(static_cast<int>(row % sq), sq, skv, causal);
  T* x = s + row * skv;
  const int nvec = skv / VEC, vis = (lim + VEC - 1) / VEC;  // vectors holding a visible key
  MaxSum ms{kNegInf, 0.f};
  for (int v = static_cast<int>(threadIdx.x); v < vis; v += static_cast<int>(blockDim.x)) {
    const Pack<T, VEC> pk =
        *reinterpret_cast<const Pack<T, VEC>*>(x + static_cast<std::int64_t>(v) * VEC);
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      if (v * VEC + e >= lim) break;
      const float f = to_float(pk.v[e]);
      if (f > ms.m) {
        ms.l = ms.l * expf(ms.m - f) + 1.f;
        ms.m = f;
      } else {
        ms.l += expf(f - ms.m);
      }
    }
  }
  ms = block_merge(ms);
  const float m_use = ms.m == kNegInf ? 0.f : ms.m;
  const float inv = ms.l > 0.f ? 1.f / ms.l : 0.f;
  for (int v = static_cast<int>(threadIdx.x); v < nvec; v += static_cast<int>(blockDim.x)) {
    auto* ptr = reinterpret_cast<Pack<T, VEC>*>(x + static_cast<std::int64_t>(v) * VEC);
    Pack<T, VEC> pk;
    if (v < vis) pk = *ptr;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      const bool visible = v * VEC + e < lim;
      pk.v[e] = from_float<T>(visible ? expf(to_float(pk.v[e]) - m_use) * inv : 0.f);
    }
    *ptr = pk;
  }
  if (threadIdx.x == 0) lse[row] = ms.l > 0.f ? ms.m + logf(ms.l) : kNegInf;
}

// prob: P (masked entries 0); dp_ds: dP in, dS = P (dP - D) out; both [rows, Skv] in the dtype.
// delta: [rows] float32. One block per row; vectors past the row's visible keys are written as 0.
template <class T, int VEC>
__global__ void softmax_grad_kernel(const T* __restrict__ prob, T* __restrict__ dp_ds,
                                    const float* __restrict__ delta, int sq, int skv, bool causal) {
  const std::int64_t row = blockIdx.x;
  const int lim = causal_limit(static_cast<int>(row % sq), sq, skv, causal);
  const float dr = delta[row];
  const int nvec = skv / VEC;
  for (int v = static_cast<int>(threadIdx.x); v < nvec; v += static_cast<int>(blockDim.x)) {
    const std::int64_t off = row * skv + static_cast<std::int64_t>(v) * VEC;
    auto* gp = reinterpret_cast<Pack<T, VEC>*>(dp_ds + off);
    Pack<T, VEC> sv, gv;
    const bool any = v * VEC < lim;
    if (any) sv = *reinterpret_cast<const Pack<T, VEC>*>(prob + off), gv = *gp;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      gv.v[e] = from_float<T>(any ? to_float(sv.v[e]) * (to_float(gv.v[e]) - dr) : 0.f);
    *gp = gv;
  }
}

// Threads per row block: about two vectors per thread, 32..1024.
int row_threads(int nvec) {
  int t = 32;
  while (t < 1024 && 2 * t < nvec) t *= 2;
  return t;
}

// One strided-batched product of the loop below: element offsets of the first matrix and the
// strides between consecutive ones, for query-side tensors (q), kv-side tensors (kv) and score
// buffers (s).
struct HeadBatch {
  std::int64_t q, kv, s;
  long long q_stride, kv_stride, s_stride;
  int count;
  bool first_of_group;  // false: accumulate into dK/dV (beta = 1)
};

// Visits all (batch, query head) pairs as strided batches: per (b, g) over the kv heads, or per
// query head over the batch, whichever needs fewer cuBLAS calls. The query heads of one kv
// head come in order g = 0..G-1, so dK/dV accumulate in a fixed order.
template <class F>
void for_each_head_batch(const Problem& p, F&& f) {
  const std::int64_t d = p.head_dim, g_count = p.group();
  const std::int64_t ss = static_cast<std::int64_t>(p.seq_q) * p.seq_kv;
  const std::int64_t q_batch = static_cast<std::int64_t>(p.seq_q) * p.heads_q * d;
  const std::int64_t kv_batch = static_cast<std::int64_t>(p.seq_kv) * p.heads_kv * d;
  if (static_cast<std::int64_t>(p.batch) * g_count <= p.heads_q) {
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t g = 0; g < g_count; ++g)
        f(HeadBatch{b * q_batch + g * d, b * kv_batch, (b * p.heads_q + g) * ss, g_count * d, d,
                    g_count * ss, p.heads_kv, g == 0});
  } else {
    for (std::int64_t h = 0; h < p.heads_q; ++h)
      f(HeadBatch{h * d, (h / g_count) * d, h * ss, q_batch, kv_batch, p.heads_q * ss, p.batch,
                  h % g_count == 0});
  }
}

const void* at(const void* base, std::int64_t elems, std::size_t esize) {
  return static_cast<const char*>(base) + elems * static_cast<std::int64_t>(esize);
}
void* at(void* base, std::int64_t elems, std::size_t esize) {
  return static_cast<char*>(base) + elems * static_cast<std::int64_t>(esize);
}

// Column-major C = alpha op(A) op(B) + beta C, batched with strides; A and B in type ab, C in c.
struct Gemm {
  cublasHandle_t h;
  cudaDataType_t ab;
  void operator()(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                  const void* A, int lda, long long sa, const void* B, int ldb, long long sb,
                  float beta, void* C, cudaDataType_t c, int ldc, long long sc, int batch) const {
    ATTN_CHECK(cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &alpha, A, ab, lda, sa, B, ab,
                                               ldb, sb, &beta, C, c, ldc, sc, batch,
                                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
};

std::size_t score_elems(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.seq_kv;
}
bool gqa_float_accum(const Problem& p) {
  return p.group() > 1 && p.dtype != DType::f32;
}

// Row-major S_bh [Sq, Skv] (ld Skv) = alpha · X_bh [Sq, D] (ld Hq·D) · Y_bh [Skv, D]ᵀ (ld Hkv·D),
// i.e. column-major Sᵀ = Y Xᵀ: used for S = scale·Q Kᵀ and dP = dO Vᵀ.
void scores_gemm(const Gemm& gemm, const Problem& p, const void* x, const void* y, void* s,
                 float alpha) {
  const std::size_t es = dtype_size(p.dtype);
  const int ldq = p.heads_q * p.head_dim, ldkv = p.heads_kv * p.head_dim;
  for_each_head_batch(p, [&](const HeadBatch& hb) {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, p.seq_kv, p.seq_q, p.head_dim, alpha, at(y, hb.kv, es), ldkv,
         hb.kv_stride, at(x, hb.q, es), ldq, hb.q_stride, 0.f, at(s, hb.s, es), gemm.ab, p.seq_kv,
         hb.s_stride, hb.count);
  });
}

template <class T>
void launch_softmax(const Problem& p, T* s, float* lse, cudaStream_t st) {
  constexpr int kVec = 16 / sizeof(T);
  const auto rows = static_cast<unsigned>(p.lse_elems());
  if (p.seq_kv % kVec == 0) {
    mask_softmax_kernel<T, kVec>
        <<<rows, row_threads(p.seq_kv / kVec), 0, st>>>(s, lse, p.seq_q, p.seq_kv, p.causal);
  } else {
    mask_softmax_kernel<T, 1>
        <<<rows, row_threads(p.seq_kv), 0, st>>>(s, lse, p.seq_q, p.seq_kv, p.causal);
  }
  ATTN_CHECK(cudaGetLastError());
}

template <class T>
void launch_softmax_grad(const Problem& p, const T* prob, T* dp_ds, const float* delta,
                         cudaStream_t st) {
  constexpr int kVec = 16 / sizeof(T);
  const auto rows = static_cast<unsigned>(p.lse_elems());
  if (p.seq_kv % kVec == 0) {
    softmax_grad_kernel<T, kVec><<<rows, row_threads(p.seq_kv / kVec), 0, st>>>(
        prob, dp_ds, delta, p.seq_q, p.seq_kv, p.causal);
  } else {
    softmax_grad_kernel<T, 1>
        <<<rows, row_threads(p.seq_kv), 0, st>>>(prob, dp_ds, delta, p.seq_q, p.seq_kv, p.causal);
  }
  ATTN_CHECK(cudaGetLastError());
}

// Binds the handle to the call's stream and to the cuBLAS piece of our workspace (cublasSetStream
// resets the workspace, so the order matters).
void bind(cublasHandle_t handle, cudaStream_t st, WorkspaceCarver& ws) {
  ATTN_CHECK(cublasSetStream(handle, st));
  ATTN_CHECK(cublasSetWorkspace(handle, ws.take<char>(kCublasWorkspace), kCublasWorkspace));
}

template <class T>
void run_forward(cublasHandle_t handle, const FwdArgs& a) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  const Gemm gemm{handle, cuda_data_type(p.dtype)};
  const std::size_t es = sizeof(T);
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  bind(handle, st, ws);
  T* s = ws.take<T>(score_elems(p));
  scores_gemm(gemm, p, a.q, a.k, s, static_cast<float>(p.effective_scale()));
  launch_softmax<T>(p, s, a.lse, st);
  // Row-major O_bh [Sq, D] = P_bh [Sq, Skv] V_bh [Skv, D]: column-major Oᵀ = Vᵀ Pᵀ.
  const int ldq = p.heads_q * p.head_dim, ldkv = p.heads_kv * p.head_dim;
  for_each_head_batch(p, [&](const HeadBatch& hb) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, p.head_dim, p.seq_q, p.seq_kv, 1.f, at(a.v, hb.kv, es), ldkv,
         hb.kv_stride, at(s, hb.s, es), p.seq_kv, hb.s_stride, 0.f, at(a.o, hb.q, es), gemm.ab, ldq,
         hb.q_stride, hb.count);
  });
}

template <class T>
void run_backward(cublasHandle_t handle, const BwdArgs& a) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  const Gemm gemm{handle, cuda_data_type(p.dtype)};
  const std::size_t es = sizeof(T);
  const float scale = static_cast<float>(p.effective_scale());
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  bind(handle, st, ws);
  T* s = ws.take<T>(score_elems(p));
  T* g = ws.take<T>(score_elems(p));
  float* delta = ws.take<float>(static_cast<std::size_t>(p.lse_elems()));
  float* lse_scratch = ws.take<float>(static_cast<std::size_t>(p.lse_elems()));
  const bool f32acc = gqa_float_accum(p);
  float* dk_acc = f32acc ? ws.take<float>(static_cast<std::size_t>(p.kv_elems())) : nullptr;
  float* dv_acc = f32acc ? ws.take<float>(static_cast<std::size_t>(p.kv_elems())) : nullptr;
  void* dk_out = f32acc ? static_cast<void*>(dk_acc) : a.dk;
  void* dv_out = f32acc ? static_cast<void*>(dv_acc) : a.dv;
  const cudaDataType_t acc_type = f32acc ? CUDA_R_32F : gemm.ab;
  const std::size_t acc_es = f32acc ? sizeof(float) : es;

  scores_gemm(gemm, p, a.q, a.k, s, scale);
  launch_softmax<T>(p, s, lse_scratch, st);  // s: P, exactly the forward's (a.lse is not read)
  scores_gemm(gemm, p, a.dout, a.v, g, 1.f);
  launch_row_dot<T>(static_cast<const T*>(a.o), static_cast<const T*>(a.dout), delta, p, st);
  launch_softmax_grad<T>(p, s, g, delta, st);

  const int ldq = p.heads_q * p.head_dim, ldkv = p.heads_kv * p.head_dim;
  for_each_head_batch(p, [&](const HeadBatch& hb) {
    const float beta = hb.first_of_group ? 0.f : 1.f;
    // dV_bh [Skv, D] (+)= P_bhᵀ dO_bh: column-major dVᵀ = dOᵀ P.
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, p.head_dim, p.seq_kv, p.seq_q, 1.f, at(a.dout, hb.q, es), ldq,
         hb.q_stride, at(s, hb.s, es), p.seq_kv, hb.s_stride, beta, at(dv_out, hb.kv, acc_es),
         acc_type, ldkv, hb.kv_stride, hb.count);
    // dQ_bh [Sq, D] = scale · dS_bh K_bh: column-major dQᵀ = Kᵀ dSᵀ.
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, p.head_dim, p.seq_q, p.seq_kv, scale, at(a.k, hb.kv, es), ldkv,
         hb.kv_stride, at(g, hb.s, es), p.seq_kv, hb.s_stride, 0.f, at(a.dq, hb.q, es), gemm.ab,
         ldq, hb.q_stride, hb.count);
    // dK_bh [Skv, D] (+)= scale · dS_bhᵀ Q_bh: column-major dKᵀ = Qᵀ dS.
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, p.head_dim, p.seq_kv, p.seq_q, scale, at(a.q, hb.q, es), ldq,
         hb.q_stride, at(g, hb.s, es), p.seq_kv, hb.s_stride, beta, at(dk_out, hb.kv, acc_es),
         acc_type, ldkv, hb.kv_stride, hb.count);
  });
  if (f32acc) {
    launch_scale_convert<T>(dk_acc, static_cast<T*>(a.dk), p.kv_elems(), 1.f, st);
    launch_scale_convert<T>(dv_acc, static_cast<T*>(a.dv), p.kv_elems(), 1.f, st);
  }
}

class CudaStandardCublas final : public Implementation {
 public:
  std::string name() const override { return "cuda.standard_cublas"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "standard attention: cuBLAS tensor-core GEMMs + fused mask/softmax kernel, S and P in "
           "HBM "
           "(the speedup baseline)";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = true;
    c.scores_in_dtype = true;  // S and P in the dtype
    return c;
  }
  Support supports_extra(const Problem& p, Pass) const override {
    if (p.lse_elems() > std::numeric_limits<int>::max())
      return Support::no("batch * heads_q * seq_q >= 2^31 (one softmax block per row)");
    return Support::yes();
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    const std::size_t s = score_elems(p) * dtype_size(p.dtype);
    if (pass == Pass::fwd) return carve_bytes({kCublasWorkspace, s});
    const std::size_t rows = static_cast<std::size_t>(p.lse_elems()) * sizeof(float);
    const std::size_t acc =
        gqa_float_accum(p) ? static_cast<std::size_t>(p.kv_elems()) * sizeof(float) : 0;
    return carve_bytes({kCublasWorkspace, s, s, rows, rows, acc, acc});
  }
  void prepare(const Problem&, Pass, const Options&) const override { handle(); }
  void forward(const FwdArgs& a) const override {
    cublasHandle_t h = handle();
    dispatch_dtype(a.p.dtype, [&](auto tt) { run_forward<typename decltype(tt)::type>(h, a); });
  }
  void backward(const BwdArgs& a) const override {
    cublasHandle_t h = handle();
    dispatch_dtype(a.p.dtype, [&](auto tt) { run_backward<typename decltype(tt)::type>(h, a); });
  }

 private:
  // Created on first use (prepare() runs before any timed call). Never destroyed: the registry
  // outlives main(), and destroying a handle after the CUDA runtime has shut down is an error.
  cublasHandle_t handle() const {
    if (!handle_) ATTN_CHECK(cublasCreate(&handle_));
    return handle_;
  }
  mutable cublasHandle_t handle_ = nullptr;
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::CudaStandardCublas)
