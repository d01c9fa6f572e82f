// cuda.naive_3pass — textbook three-pass attention on CUDA cores; the CUDA verification baseline.
//
// Forward, three kernels (the "standard attention" of the seed articles):
//   1. S = scale · Q Kᵀ written to HBM in the problem's dtype (masked entries = −inf);
//   2. safe softmax in place over each row of S (max, sum of exp, normalise): S becomes P, still
//      in the dtype; LSE = max + log(sum) in float32;
//   3. O = P V, reading P back from HBM, float32 accumulation.
// Backward, all materialised in the dtype: recompute S and P (kernels 1 and 2; the LSE of the
// recomputation goes to scratch), dP = dO Vᵀ, D = rowsum(dO ∘ O) (float32), dS = P ∘ (dP − D) in
// place of dP, then dV = Pᵀ dO, dQ = scale · dS K, dK = scale · dSᵀ Q. GQA: dK and dV are one
// product each whose reduction runs over (query head of the group, query row), so the group sum
// is in float32 and deterministic (no atomics).
// The products are one plain kernel: 16x16 output tiles, A and B tiles staged in shared memory
// (loaded along their contiguous dimension), one output per thread, float32 accumulation.
// Passes over HBM: S/P written and read N² each pass (forward: write S, read+write P, read P);
// backward: two N² buffers, each written and read several times.
// Window and soft cap (common/shape.hpp's AttnVariant): invisible scores −inf in kernel 1; the
// soft cap softcap · tanh(S / softcap) there too, and the backward keeps tanh(S / softcap) in the
// dtype for dS's factor 1 − tanh² (as cpu.naive_3pass).
// Varlen (packed THD): each sequence runs as its own dense problem of batch 1 (a host loop: the
// baseline's speed does not matter), its LSE through scratch into the packed [Hq, total_q]; a
// sequence without keys gets O = 0, LSE = −inf, dQ = 0, one without queries dK = dV = 0.
// Paged KV caches (forward only): the same loop, each sequence's keys first gathered through the
// block table into contiguous scratch (one small kernel per tensor and sequence).
// Extra memory: forward B·Hq·Sq·Skv elements of the dtype; backward twice that (three times with a
// soft cap) plus two floats per query row. Limits: any head_dim (1..256), seq_kv <= 1,048,560 (grid
// y).
#include <algorithm>
#include <limits>
#include <string>
#include <type_traits>

#include "common/device.cuh"
#include "common/shape.hpp"

namespace attnbench::cuda {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kTile = 16;

// The shape (common/shape.hpp), the window (causal folded into it) and the soft cap, carried by
// every operand.
struct Dims : AttnShape {
  AttnVariant var;
  float softcap;  // 0: off
  // Row m sees key n (n < seq_kv): the window's two comparisons (common/shape.hpp).
  __device__ bool visible(int m, int n) const {
    return n <= m + causal_offset + var.window_right && n >= m + causal_offset - var.window_left;
  }
};

// ---- operands: A(z, m, k) and B(z, k, n) of a product, z the batched (batch, head) index ------
// kMContiguous / kNContiguous say which index walks consecutive memory, so that the tile loads
// are coalesced.

// A = a query-side tensor [B, Sq, Hq, D] (Q or dO) of head z = b*Hq + h: A(z, m, k) = X[b, m, h,
// k].
template <class T>
struct AQuery {
  static constexpr bool kMContiguous = false;
  const T* x;
  Dims dm;
  __device__ float operator()(int z, int m, int k) const {
    const int b = z / dm.heads_q, h = z % dm.heads_q;
    return to_float(
        x[((static_cast<std::int64_t>(b) * dm.seq_q + m) * dm.heads_q + h) * dm.head_dim + k]);
  }
};

// B = a kv-side tensor [B, Skv, Hkv, D] (K or V) seen by query head z = b*Hq + h.
// kTransposed: B(z, k, n) = X[b, n, hk, k] (for Q Kᵀ, dO Vᵀ); else X[b, k, hk, n] (P V, dS K).
template <class T, bool kTransposed>
struct BKv {
  static constexpr bool kNContiguous = !kTransposed;
  const T* x;
  Dims dm;
  __device__ float operator()(int z, int k, int n) const {
    const int b = z / dm.heads_q, hk = (z % dm.heads_q) / dm.group;
    const int row = kTransposed ? n : k, col = kTransposed ? k : n;
    return to_float(
        x[((static_cast<std::int64_t>(b) * dm.seq_kv + row) * dm.heads_kv + hk) * dm.head_dim +
          col]);
  }
};

// A = a score buffer [B, Hq, Sq, Skv] (P or dS): A(z, m, k) = S[z][m][k].
template <class T>
struct AScores {
  static constexpr bool kMContiguous = false;
  const T* s;
  Dims dm;
  __device__ float operator()(int z, int m, int k) const {
    return to_float(s[(static_cast<std::int64_t>(z) * dm.seq_q + m) * dm.seq_kv + k]);
  }
};

// For dV and dK, z = b*Hkv + hk and the reduction index k = g*Sq + i runs over the group's query
// heads h = hk*G + g and their rows i.
// A(z, m, k) = S[b, h][i][m] (P or dS transposed).
template <class T>
struct AScoresGroupT {
  static constexpr bool kMContiguous = true;
  const T* s;
  Dims dm;
  __device__ float operator()(int z, int m, int k) const {
    const int b = z / dm.heads_kv, h = (z % dm.heads_kv) * dm.group + k / dm.seq_q,
              i = k % dm.seq_q;
    return to_float(
        s[((static_cast<std::int64_t>(b) * dm.heads_q + h) * dm.seq_q + i) * dm.seq_kv + m]);
  }
};
// B(z, k, n) = X[b, i, h, n], X a query-side tensor (dO or Q).
template <class T>
struct BQueryGroup {
  static constexpr bool kNContiguous = true;
  const T* x;
  Dims dm;
  __device__ float operator()(int z, int k, int n) const {
    const int b = z / dm.heads_kv, h = (z % dm.heads_kv) * dm.group + k / dm.seq_q,
              i = k % dm.seq_q;
    return to_float(
        x[((static_cast<std::int64_t>(b) * dm.seq_q + i) * dm.heads_q + h) * dm.head_dim + n]);
  }
};

// ---- epilogues: where C(z, m, n) goes
// -------------------------------------------------------------

// Into a score buffer [B, Hq, Sq, Skv] in the dtype; with kMask, the scores (soft-capped,
// softcap * tanh(mul * acc / softcap)) with −inf for invisible keys; without, mul * acc.
template <class T, bool kMask>
struct EpiScores {
  T* s;
  Dims dm;
  float mul;
  __device__ void operator()(int z, int m, int n, float acc) const {
    float x = mul * acc;
    if (kMask) {
      if (dm.softcap > 0) x = dm.softcap * tanhf(x / dm.softcap);
      if (!dm.visible(m, n)) x = kNegInf;
    }
    s[(static_cast<std::int64_t>(z) * dm.seq_q + m) * dm.seq_kv + n] = from_float<T>(x);
  }
};
// The soft cap's tanh(mul * acc / softcap) into a score buffer in the dtype, for the backward.
template <class T>
struct EpiTanh {
  T* s;
  Dims dm;
  float mul;
  __device__ void operator()(int z, int m, int n, float acc) const {
    s[(static_cast<std::int64_t>(z) * dm.seq_q + m) * dm.seq_kv + n] =
        from_float<T>(tanhf(mul * acc / dm.softcap));
  }
};
// Into a query-side tensor [B, Sq, Hq, D], z = b*Hq + h.
template <class T>
struct EpiQuery {
  T* x;
  Dims dm;
  float mul;
  __device__ void operator()(int z, int m, int n, float acc) const {
    const int b = z / dm.heads_q, h = z % dm.heads_q;
    x[((static_cast<std::int64_t>(b) * dm.seq_q + m) * dm.heads_q + h) * dm.head_dim + n] =
        from_float<T>(mul * acc);
  }
};
// Into a kv-side tensor [B, Skv, Hkv, D], z = b*Hkv + hk.
template <class T>
struct EpiKv {
  T* x;
  Dims dm;
  float mul;
  __device__ void operator()(int z, int m, int n, float acc) const {
    const int b = z / dm.heads_kv, hk = z % dm.heads_kv;
    x[((static_cast<std::int64_t>(b) * dm.seq_kv + m) * dm.heads_kv + hk) * dm.head_dim + n] =
        from_float<T>(mul * acc);
  }
};

// C(z, m, n) = epi(sum_k A(z, m, k) B(z, k, n)) for m < M, n < N; block (16, 16), grid
// (ceil(M/16), ceil(N/16), batches), batch index z = z0 + blockIdx.z.
template <class A, class B, class Epi>
__global__ void __launch_bounds__(kTile* kTile)
    naive_gemm_kernel(int M, int N, int K, int z0, A a, B bop, Epi epi) {
  __shared__ float as[kTile][kTile + 1];  // [m][k]
  __shared__ float bs[kTile][kTile + 1];  // [k][n]
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int z = z0 + static_cast<int>(blockIdx.z);
  const int m0 = static_cast<int>(blockIdx.x) * kTile, n0 = static_cast<int>(blockIdx.y) * kTile;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += kTile) {
    {  // consecutive threads (tx) walk the operand's contiguous index
      const int mm = A::kMContiguous ? tx : ty, kk = A::kMContiguous ? ty : tx;
      as[mm][kk] = (m0 + mm < M && k0 + kk < K) ? a(z, m0 + mm, k0 + kk) : 0.f;
    }
    {
      const int nn = B::kNContiguous ? tx : ty, kk = B::kNContiguous ? ty : tx;
      bs[kk][nn] = (k0 + kk < K && n0 + nn < N) ? bop(z, k0 + kk, n0 + nn) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc = fmaf(as[ty][kk], bs[kk][tx], acc);
    __syncthreads();
  }
  if (m0 + ty < M && n0 + tx < N) epi(z, m0 + ty, n0 + tx, acc);
}

template <class A, class B, class Epi>
void gemm(int batches, int M, int N, int K, const A& a, const B& b, const Epi& epi,
          cudaStream_t st) {
  const dim3 block(kTile, kTile);
  for (int z0 = 0; z0 < batches; z0 += 65535) {
    const dim3 grid(static_cast<unsigned>((M + kTile - 1) / kTile),
                    static_cast<unsigned>((N + kTile - 1) / kTile),
                    static_cast<unsigned>(std::min(65535, batches - z0)));
    naive_gemm_kernel<<<grid, block, 0, st>>>(M, N, K, z0, a, b, epi);
    ATTN_CHECK(cudaGetLastError());
  }
}

// Safe softmax in place over each row of s ([rows, Skv], the dtype), one warp per row: max, sum
// of exp, normalise. lse[row] = max + log(sum); a row with nothing visible gets P = 0, −inf.
template <class T>
__global__ void softmax_rows_kernel(T* __restrict__ s, float* __restrict__ lse, std::int64_t rows,
                                    int skv) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  T* x = s + row * skv;
  float m = kNegInf;
  for (int j = lane; j < skv; j += 32) m = fmaxf(m, to_float(x[j]));
  m = warp_max(m);
  if (m == kNegInf) {
    for (int j = lane; j < skv; j += 32) x[j] = from_float<T>(0.f);
    if (lane == 0) lse[row] = kNegInf;
    return;
  }
  float l = 0.f;
  for (int j = lane; j < skv; j += 32) l += expf(to_float(x[j]) - m);
  l = warp_sum(l);
  const float inv = 1.f / l;
  for (int j = lane; j < skv; j += 32) x[j] = from_float<T>(expf(to_float(x[j]) - m) * inv);
  if (lane == 0) lse[row] = m + logf(l);
}

// ds[i] = p[i] * (ds[i] - delta[row of i]) in place of dP; all [B, Hq, Sq, Skv], delta [B, Hq, Sq].
// With a soft cap, times the capped logit's derivative 1 - t^2 (t: tanh(S / softcap) in the dtype).
template <class T>
__global__ void ds_kernel(const T* __restrict__ p, T* __restrict__ ds,
                          const float* __restrict__ delta, const T* __restrict__ tanh_s,
                          std::int64_t n, int skv) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float d = to_float(p[i]) * (to_float(ds[i]) - delta[i / skv]);
    if (tanh_s != nullptr) {
      const float t = to_float(tanh_s[i]);
      d *= 1.f - t * t;
    }
    ds[i] = from_float<T>(d);
  }
}

Dims dims_of(const Problem& p) {
  Dims d = with_shape<Dims>(p);
  d.var = make_variant(p);
  d.softcap = static_cast<float>(p.softcap);
  return d;
}
std::size_t score_elems(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q * p.seq_kv;
}

// Kernels 1 and 2: s = softmax(scale · q kᵀ + mask) in the dtype, lse [B, Hq, Sq].
template <class T>
void scores_softmax(const Problem& p, const T* q, const T* k, T* s, float* lse, cudaStream_t st) {
  const Dims dm = dims_of(p);
  const int zq = p.batch * p.heads_q;
  gemm(zq, p.seq_q, p.seq_kv, p.head_dim, AQuery<T>{q, dm}, BKv<T, true>{k, dm},
       EpiScores<T, true>{s, dm, static_cast<float>(p.effective_scale())}, st);
  const std::int64_t rows = static_cast<std::int64_t>(zq) * p.seq_q;
  constexpr int kWarps = 8;
  softmax_rows_kernel<T>
      <<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kWarps * 32, 0, st>>>(s, lse, rows,
                                                                                    p.seq_kv);
  ATTN_CHECK(cudaGetLastError());
}

template <class T>
void run_forward(const FwdArgs& a) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  const Dims dm = dims_of(p);
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  T* s = ws.take<T>(score_elems(p));
  scores_softmax<T>(p, static_cast<const T*>(a.q), static_cast<const T*>(a.k), s, a.lse, st);
  gemm(p.batch * p.heads_q, p.seq_q, p.head_dim, p.seq_kv, AScores<T>{s, dm},
       BKv<T, false>{static_cast<const T*>(a.v), dm}, EpiQuery<T>{static_cast<T*>(a.o), dm, 1.f},
       st);
}

template <class T>
void run_backward(const BwdArgs& a) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  const Dims dm = dims_of(p);
  const float scale = static_cast<float>(p.effective_scale());
  const auto* q = static_cast<const T*>(a.q);
  const auto* k = static_cast<const T*>(a.k);
  const auto* v = static_cast<const T*>(a.v);
  const auto* dout = static_cast<const T*>(a.dout);
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  T* prob = ws.take<T>(score_elems(p));
  T* dsc = ws.take<T>(score_elems(p));
  float* delta = ws.take<float>(static_cast<std::size_t>(p.lse_elems()));
  float* lse_scratch = ws.take<float>(static_cast<std::size_t>(p.lse_elems()));
  T* tanh_s = p.softcap > 0 ? ws.take<T>(score_elems(p)) : nullptr;
  const int zq = p.batch * p.heads_q, zkv = p.batch * p.heads_kv;

  if (tanh_s != nullptr) {  // tanh(S / softcap), for dS's factor 1 - tanh^2
    gemm(zq, p.seq_q, p.seq_kv, p.head_dim, AQuery<T>{q, dm}, BKv<T, true>{k, dm},
         EpiTanh<T>{tanh_s, dm, scale}, st);
  }
  scores_softmax<T>(p, q, k, prob, lse_scratch, st);
  gemm(zq, p.seq_q, p.seq_kv, p.head_dim, AQuery<T>{dout, dm}, BKv<T, true>{v, dm},
       EpiScores<T, false>{dsc, dm, 1.f}, st);  // dP
  launch_row_dot<T>(static_cast<const T*>(a.o), dout, delta, p, st);
  const std::int64_t n = static_cast<std::int64_t>(score_elems(p));
  ds_kernel<T><<<elementwise_blocks(n, 256), 256, 0, st>>>(prob, dsc, delta, tanh_s, n, p.seq_kv);
  ATTN_CHECK(cudaGetLastError());
  const int group_rows = p.group() * p.seq_q;
  gemm(zkv, p.seq_kv, p.head_dim, group_rows, AScoresGroupT<T>{prob, dm}, BQueryGroup<T>{dout, dm},
       EpiKv<T>{static_cast<T*>(a.dv), dm, 1.f}, st);
  gemm(zq, p.seq_q, p.head_dim, p.seq_kv, AScores<T>{dsc, dm}, BKv<T, false>{k, dm},
       EpiQuery<T>{static_cast<T*>(a.dq), dm, scale}, st);
  gemm(zkv, p.seq_kv, p.head_dim, group_rows, AScoresGroupT<T>{dsc, dm}, BQueryGroup<T>{q, dm},
       EpiKv<T>{static_cast<T*>(a.dk), dm, scale}, st);
}

// One sequence's LSE rows: lse[h * head_stride + i] = x for i < n (head h = blockIdx.y).
__global__ void fill_lse_kernel(float* lse, std::int64_t head_stride, int n, float x) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) lse[blockIdx.y * head_stride + i] = x;
}

// Paged: sequence b's keys gathered in order, out[j] = pool row table_row[j / P] * P + j % P
// (rows of row_elems elements; table_row: the sequence's row of the device block table).
template <class T>
__global__ void gather_pages_kernel(const T* __restrict__ pool,
                                    const std::int32_t* __restrict__ table_row, int page_size,
                                    int rows, int row_elems, T* __restrict__ out) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * row_elems;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int j = static_cast<int>(i / row_elems), e = static_cast<int>(i % row_elems);
    const std::int64_t src = std::int64_t{table_row[j / page_size]} * page_size + j % page_size;
    out[i] = pool[src * row_elems + e];
  }
}

// The dense workspace of the longest-lived sequence of a varlen problem (each runs alone).
template <class F>
std::size_t max_over_sequences(const Problem& p, F&& dense_bytes) {
  std::size_t n = 0;
  for (int b = 0; b < p.batch; ++b) {
    const Problem s = p.sequence(b);
    if (s.seq_q > 0 && s.seq_kv > 0) n = std::max(n, dense_bytes(s));
  }
  return n;
}

// Sequence b's rows of a packed tensor (rows of heads x head_dim elements of T).
template <class T, class P>
P* rows_at(P* base, std::int64_t row, int heads, int head_dim) {
  using Byte = std::conditional_t<std::is_const_v<P>, const char, char>;
  return reinterpret_cast<P*>(reinterpret_cast<Byte*>(base) +
                              row * heads * head_dim * static_cast<std::int64_t>(sizeof(T)));
}

// The gathered K and V of a paged problem's longest context (elements of each).
std::size_t gathered_kv_elems(const Problem& p) {
  return p.paged() ? static_cast<std::size_t>(p.seq_kv) * p.heads_kv * p.head_dim : 0;
}

// Varlen and paged forwards: sequence by sequence (see the top of this file).
template <class T>
void run_forward_per_sequence(const FwdArgs& a, std::size_t dense_ws) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  if (p.paged() && a.block_table == nullptr) {
    throw std::invalid_argument("cuda.naive_3pass: a paged problem needs its block table (FwdArgs)");
  }
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  float* lse_s = ws.take<float>(static_cast<std::size_t>(p.heads_q) * p.seq_q);
  T* k_s = p.paged() ? ws.take<T>(gathered_kv_elems(p)) : nullptr;
  T* v_s = p.paged() ? ws.take<T>(gathered_kv_elems(p)) : nullptr;
  char* sub_ws = ws.take<char>(dense_ws);
  // LSE rows of a sequence: [Hq, total_q] packed (varlen queries), [B, Hq, Sq] otherwise.
  const std::int64_t head_stride = p.varlen() ? p.total_q() : p.seq_q;
  const int row_elems = p.heads_kv * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    const Problem s = p.sequence(b);
    if (s.seq_q == 0) continue;
    const std::int64_t q0 = p.q_start(b);
    void* o = rows_at<T>(a.o, q0, p.heads_q, p.head_dim);
    float* lse = a.lse + p.lse_start(b, 0);
    if (s.seq_kv == 0) {
      ATTN_CHECK(cudaMemsetAsync(o, 0, static_cast<std::size_t>(s.q_bytes()), st));
      fill_lse_kernel<<<dim3((s.seq_q + 127) / 128, p.heads_q), 128, 0, st>>>(lse, head_stride,
                                                                             s.seq_q, kNegInf);
      ATTN_CHECK(cudaGetLastError());
      continue;
    }
    FwdArgs sa = a;
    sa.p = s;
    sa.q = rows_at<T>(a.q, q0, p.heads_q, p.head_dim);
    if (p.paged()) {
      const std::int32_t* row = a.block_table + std::int64_t{b} * p.pages_per_seq;
      const std::int64_t n = std::int64_t{s.seq_kv} * row_elems;
      gather_pages_kernel<T><<<elementwise_blocks(n, 256), 256, 0, st>>>(
          static_cast<const T*>(a.k), row, p.page_size, s.seq_kv, row_elems, k_s);
      gather_pages_kernel<T><<<elementwise_blocks(n, 256), 256, 0, st>>>(
          static_cast<const T*>(a.v), row, p.page_size, s.seq_kv, row_elems, v_s);
      ATTN_CHECK(cudaGetLastError());
      sa.k = k_s;
      sa.v = v_s;
    } else {
      sa.k = rows_at<T>(a.k, p.kv_start(b), p.heads_kv, p.head_dim);
      sa.v = rows_at<T>(a.v, p.kv_start(b), p.heads_kv, p.head_dim);
    }
    sa.o = o;
    sa.lse = lse_s;
    sa.workspace = sub_ws;
    sa.workspace_bytes = dense_ws;
    sa.cu_seqlens_q = sa.cu_seqlens_kv = sa.seqlens_kv = sa.block_table = nullptr;
    run_forward<T>(sa);
    // [Hq, seq_q] scratch -> the sequence's LSE rows.
    ATTN_CHECK(cudaMemcpy2DAsync(lse, head_stride * sizeof(float), lse_s, s.seq_q * sizeof(float),
                                 s.seq_q * sizeof(float), p.heads_q, cudaMemcpyDeviceToDevice,
                                 st));
  }
}

template <class T>
void run_backward_varlen(const BwdArgs& a, std::size_t dense_ws) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  for (int b = 0; b < p.batch; ++b) {
    const Problem s = p.sequence(b);
    const std::int64_t q0 = p.q_start(b), kv0 = p.kv_start(b);
    void* dq = rows_at<T>(a.dq, q0, p.heads_q, p.head_dim);
    void* dk = rows_at<T>(a.dk, kv0, p.heads_kv, p.head_dim);
    void* dv = rows_at<T>(a.dv, kv0, p.heads_kv, p.head_dim);
    if (s.seq_q == 0 || s.seq_kv == 0) {  // no score: the gradients that exist are 0
      ATTN_CHECK(cudaMemsetAsync(dq, 0, static_cast<std::size_t>(s.q_bytes()), st));
      ATTN_CHECK(cudaMemsetAsync(dk, 0, static_cast<std::size_t>(s.kv_bytes()), st));
      ATTN_CHECK(cudaMemsetAsync(dv, 0, static_cast<std::size_t>(s.kv_bytes()), st));
      continue;
    }
    BwdArgs sa = a;  // the backward recomputes LSE and reads no lse
    sa.p = s;
    sa.q = rows_at<T>(a.q, q0, p.heads_q, p.head_dim);
    sa.k = rows_at<T>(a.k, kv0, p.heads_kv, p.head_dim);
    sa.v = rows_at<T>(a.v, kv0, p.heads_kv, p.head_dim);
    sa.o = rows_at<T>(a.o, q0, p.heads_q, p.head_dim);
    sa.dout = rows_at<T>(a.dout, q0, p.heads_q, p.head_dim);
    sa.dq = dq;
    sa.dk = dk;
    sa.dv = dv;
    sa.lse = nullptr;
    sa.workspace_bytes = dense_ws;
    sa.cu_seqlens_q = sa.cu_seqlens_kv = nullptr;
    run_backward<T>(sa);
  }
}

class CudaNaive3Pass final : public Implementation {
 public:
  std::string name() const override { return "cuda.naive_3pass"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "textbook 3-kernel attention on CUDA cores, S and P materialised in HBM in the dtype "
           "(verification baseline)";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = true;
    c.scores_in_dtype = true;  // S and P in the dtype
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    c.paged = true;  // forward only (paged problems have no backward)
    return c;
  }
  Support supports_extra(const Problem& p, Pass) const override {
    if (p.seq_kv > 65535 * kTile)
      return Support::no("seq_kv > 1048560 (grid y of the score product)");
    if (static_cast<std::int64_t>(p.batch) * p.heads_q > std::numeric_limits<int>::max() / 2)
      return Support::no("batch * heads_q too large");
    if (static_cast<std::int64_t>(p.group()) * p.seq_q > std::numeric_limits<int>::max())
      return Support::no("group * seq_q too large");
    return Support::yes();
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options& o) const override {
    if (p.varlen() || p.paged()) {
      const std::size_t dense = varlen_dense_bytes(p, pass, o);
      if (pass != Pass::fwd) return dense;
      const std::size_t kv = gathered_kv_elems(p) * dtype_size(p.dtype);
      return carve_bytes({static_cast<std::size_t>(p.heads_q) * p.seq_q * sizeof(float), kv, kv,
                          dense});
    }
    const std::size_t s = score_elems(p) * dtype_size(p.dtype);
    const std::size_t rows = static_cast<std::size_t>(p.lse_elems()) * sizeof(float);
    if (pass == Pass::fwd) return carve_bytes({s});
    // The larger request covers fwd_bwd; a soft cap keeps the capped scores for dS.
    if (p.softcap > 0) return carve_bytes({s, s, rows, rows, s});
    return carve_bytes({s, s, rows, rows});
  }
  void forward(const FwdArgs& a) const override {
    dispatch_dtype(a.p.dtype, [&](auto tt) {
      using T = typename decltype(tt)::type;
      if (a.p.varlen() || a.p.paged()) {
        run_forward_per_sequence<T>(a, varlen_dense_bytes(a.p, Pass::fwd, {}));
      } else {
        run_forward<T>(a);
      }
    });
  }
  void backward(const BwdArgs& a) const override {
    dispatch_dtype(a.p.dtype, [&](auto tt) {
      using T = typename decltype(tt)::type;
      if (a.p.varlen()) {
        run_backward_varlen<T>(a, varlen_dense_bytes(a.p, Pass::bwd, {}));
      } else {
        run_backward<T>(a);
      }
    });
  }

 private:
  // The largest dense workspace of a varlen problem's sequences (each runs alone in it).
  std::size_t varlen_dense_bytes(const Problem& p, Pass pass, const Options& o) const {
    return max_over_sequences(p, [&](const Problem& s) { return workspace_bytes(s, pass, o); });
  }
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::CudaNaive3Pass)
