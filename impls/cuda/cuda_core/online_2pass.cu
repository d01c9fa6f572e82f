// cuda.online_2pass — attention with the two-pass online softmax, on CUDA cores.
//
// Algorithm: pass 1 (stats kernel) reads Q once and K once per query tile and computes, for each
// query row, the softmax statistics online (Milakov & Gimelshein): running max m and running sum
// l = Σ exp(s − m), rescaled whenever m grows. It writes (m, l) to the workspace and LSE to the
// output. Pass 2 (output kernel) reads Q, K and V, recomputes the scores, forms the final
// P = exp(s − m) / l (no rescaling: m is already the row max) and accumulates O = P V.
// Both passes use the tile layout of cuda.flash_fwd (cuda_core/tiles.cuh: CcFwdTile, tile_dot, tile_pv,
// Bc = CcFwdTile<D>::kDefaultBc) so the two differ only in the algorithm: K is read twice and
// the scores computed twice here, once in the single-pass flash forward.
// Passes over HBM: Q twice, K twice per query tile, V once per query tile, O and LSE once,
// (m, l) written once and read once. Nothing of size seq² is stored.
// Extra memory: workspace of 2 floats per query row (B·Hq·Sq·8 bytes).
// Limits: head_dim 1..256 (padded to the bucket 32/64/128/256), batch and heads_q <= 65535.
// float32 accumulation.
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "cuda_core/tiles.cuh"

namespace attnbench::cuda {
namespace {

template <int DB>
constexpr int kRows = (CcFwdTile<DB>::kThreads / kGroup) * CcFwdTile<DB>::kRowsPerThread;
template <int DB>
constexpr int kBc = CcFwdTile<DB>::kDefaultBc;
template <int DB>
constexpr std::size_t stats_smem() {
  return sizeof(float) * static_cast<std::size_t>((kRows<DB> + kBc<DB>)*kStrideQK<DB>);
}
template <int DB>
constexpr std::size_t out_smem() {
  return sizeof(float) * static_cast<std::size_t>((kRows<DB> + kBc<DB>)*kStrideQK<DB> +
                                                  kBc<DB> * DB + kRows<DB> * (kBc<DB> + 4));
}

// Shared set-up of both passes: thread coordinates, head pointers, the Q tile in shared memory.
template <class T, int DB>
struct Block {
  static constexpr int NT = CcFwdTile<DB>::kThreads, RT = CcFwdTile<DB>::kRowsPerThread,
                       BR = kRows<DB>;
  int q0, h, b, t, row_base, q_rows, kv_end, kmax;
  std::int64_t kv_row;
  const T *kg, *vg;

  __device__ Block(const CcParams& p, float* q_s) {
    q0 = static_cast<int>(gridDim.x - 1 - blockIdx.x) * BR;  // heavy causal tiles first
    h = static_cast<int>(blockIdx.y);
    b = static_cast<int>(blockIdx.z);
    const int tid = static_cast<int>(threadIdx.x);
    t = tid % kGroup;
    row_base = (tid / kGroup) * RT;
    const int hk = h / p.group;
    kv_row = static_cast<std::int64_t>(p.heads_kv) * p.head_dim;
    kg = static_cast<const T*>(p.k) +
         (static_cast<std::int64_t>(b) * p.seq_kv * p.heads_kv + hk) * p.head_dim;
    vg = static_cast<const T*>(p.v) +
         (static_cast<std::int64_t>(b) * p.seq_kv * p.heads_kv + hk) * p.head_dim;
    const T* qg = static_cast<const T*>(p.q) +
                  (static_cast<std::int64_t>(b) * p.seq_q * p.heads_q + h) * p.head_dim;
    q_rows = min(BR, p.seq_q - q0);
    kv_end = causal_limit(q0 + q_rows - 1, p.seq_q, p.seq_kv, p.causal);
    kmax = (p.head_dim + 3) & ~3;
    load_tile<BR, DB, kStrideQK<DB>, NT>(q_s, qg, q0, q_rows,
                                         static_cast<std::int64_t>(p.heads_q) * p.head_dim,
                                         p.head_dim, p.scale_log2);
  }
  __device__ std::int64_t stat_index(const CcParams& p, int row) const {
    return (static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q + row;
  }
};

// Pass 1. q: [B, Sq, Hq, D]; k: [B, Skv, Hkv, D]; ml, lse: [B, Hq, Sq]. Grid (ceil(Sq/Br), Hq, B).
template <class T, int DB>
__global__ void __launch_bounds__(CcFwdTile<DB>::kThreads, 1) online_stats_kernel(CcParams p) {
  using Blk = Block<T, DB>;
  constexpr int RT = Blk::RT, BC = kBc<DB>, NC = BC / kGroup, SQK = kStrideQK<DB>;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);
  float* k_s = q_s + Blk::BR * SQK;
  const Blk blk(p, q_s);

  int lim[RT];
  float m[RT], l[RT];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    lim[i] = causal_limit(blk.q0 + blk.row_base + i, p.seq_q, p.seq_kv, p.causal);
    m[i] = kNegInf;
    l[i] = 0.f;
  }
  for (int j0 = 0; j0 < blk.kv_end; j0 += BC) {
    __syncthreads();
    load_tile<BC, DB, SQK, Blk::NT>(k_s, blk.kg, j0, min(BC, p.seq_kv - j0), blk.kv_row, p.head_dim,
                                    1.f);
    __syncthreads();
    float s[RT][NC];
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c) s[i][c] = 0.f;
    tile_dot<RT, NC, DB, SQK, SQK>(s, q_s, k_s, blk.row_base, blk.t, blk.kmax);
#pragma unroll
    for (int i = 0; i < RT; ++i) {
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        if (j0 + blk.t + kGroup * c >= lim[i]) s[i][c] = kNegInf;
        mx = fmaxf(mx, s[i][c]);
      }
      mx = group_max(mx);
      const float m_new = fmaxf(m[i], mx);
      const float m_use = m_new == kNegInf ? 0.f : m_new;
      float rs = 0.f;
#pragma unroll
      for (int c = 0; c < NC; ++c) rs += exp2f(s[i][c] - m_use);
      l[i] = l[i] * exp2f(m[i] - m_use) + rs;
      m[i] = m_new;
    }
  }
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const float lsum = group_sum(l[i]);
    const int row = blk.q0 + blk.row_base + i;
    if (row < p.seq_q && blk.t == 0) {
      const std::int64_t idx = blk.stat_index(p, row);
      p.ml[idx] = make_float2(m[i], lsum);
      p.lse[idx] = lsum > 0.f ? (m[i] + log2f(lsum)) * kLn2 : kNegInf;
    }
  }
}

// Pass 2. v, o as q/k above. Grid (ceil(Sq/Br), Hq, B).
template <class T, int DB>
__global__ void __launch_bounds__(CcFwdTile<DB>::kThreads, 1) online_out_kernel(CcParams p) {
  using Blk = Block<T, DB>;
  constexpr int RT = Blk::RT, BR = Blk::BR, BC = kBc<DB>, NC = BC / kGroup, NE = DB / kGroup;
  constexpr int SQK = kStrideQK<DB>, SP = BC + 4;
  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);
  float* k_s = q_s + BR * SQK;
  float* v_s = k_s + BC * SQK;
  float* p_s = v_s + BC * DB;
  const Blk blk(p, q_s);

  int lim[RT];
  float m[RT], inv_l[RT], acc[RT][NE];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int row = blk.q0 + blk.row_base + i;
    lim[i] = causal_limit(row, p.seq_q, p.seq_kv, p.causal);
    const float2 ml = row < p.seq_q ? p.ml[blk.stat_index(p, row)] : make_float2(0.f, 0.f);
    m[i] = ml.y > 0.f ? ml.x : 0.f;  // rows that see no key have l = 0: all their P are masked
    inv_l[i] = ml.y > 0.f ? 1.f / ml.y : 0.f;
#pragma unroll
    for (int e = 0; e < NE; ++e) acc[i][e] = 0.f;
  }
  for (int j0 = 0; j0 < blk.kv_end; j0 += BC) {
    __syncthreads();
    const int kv_rows = min(BC, p.seq_kv - j0);
    load_tile<BC, DB, SQK, Blk::NT>(k_s, blk.kg, j0, kv_rows, blk.kv_row, p.head_dim, 1.f);
    load_tile<BC, DB, DB, Blk::NT>(v_s, blk.vg, j0, kv_rows, blk.kv_row, p.head_dim, 1.f);
    __syncthreads();
    float s[RT][NC];
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c) s[i][c] = 0.f;
    tile_dot<RT, NC, DB, SQK, SQK>(s, q_s, k_s, blk.row_base, blk.t, blk.kmax);
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int jj = blk.t + kGroup * c;
        p_s[(blk.row_base + i) * SP + jj] = j0 + jj < lim[i] ? exp2f(s[i][c] - m[i]) : 0.f;
      }
    __syncwarp();
    tile_pv<RT, DB, BC, SP, DB>(acc, p_s, v_s, blk.row_base, blk.t);
  }
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const int row = blk.q0 + blk.row_base + i;
    if (row >= p.seq_q) continue;
    T* og = static_cast<T*>(p.o) +
            ((static_cast<std::int64_t>(blk.b) * p.seq_q + row) * p.heads_q + blk.h) * p.head_dim;
#pragma unroll
    for (int e = 0; e < NE; ++e) {
      const int c = out_col<DB>(blk.t, e);
      if (c < p.head_dim) og[c] = from_float<T>(acc[i][e] * inv_l[i]);
    }
  }
}

struct Kernels {
  void (*stats)(CcParams) = nullptr;
  void (*out)(CcParams) = nullptr;
  std::size_t stats_smem = 0, out_smem = 0;
  int rows = 0, threads = 0;
};

Kernels pick(const Problem& p) {
  return dispatch_dtype(p.dtype, [&](auto tt) {
    using T = typename decltype(tt)::type;
    return dispatch_head_dim(p.head_dim, [&](auto db) {
      constexpr int DB = decltype(db)::value;
      return Kernels{&online_stats_kernel<T, DB>,
                     &online_out_kernel<T, DB>,
                     stats_smem<DB>(),
                     out_smem<DB>(),
                     kRows<DB>,
                     CcFwdTile<DB>::kThreads};
    });
  });
}

void configure(const Kernels& k) {
  static std::mutex mu;
  static std::set<const void*> done;
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count(reinterpret_cast<const void*>(k.out))) return;
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.stats),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(k.stats_smem)));
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.out),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(k.out_smem)));
  done.insert(reinterpret_cast<const void*>(k.out));
}

std::size_t ml_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.lse_elems()) * sizeof(float2);
}

class CudaOnline2Pass final : public Implementation {
 public:
  std::string name() const override { return "cuda.online_2pass"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "two-pass online softmax on CUDA cores: pass 1 row max/sum reading K, pass 2 recomputes "
           "scores and accumulates O";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = false;
    return c;
  }
  Support supports_extra(const Problem& p, Pass) const override {
    if (Support s = check_grid_yz(p); !s) return s;
    const std::size_t limit = max_smem_optin();
    if (limit == 0) return Support::no("no CUDA device");
    if (pick(p).out_smem > limit)
      return Support::no("tile needs more shared memory than the device has");
    return Support::yes();
  }
  std::size_t workspace_bytes(const Problem& p, Pass, const Options&) const override {
    return carve_bytes({ml_bytes(p)});
  }
  void prepare(const Problem& p, Pass, const Options&) const override { configure(pick(p)); }
  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const Kernels k = pick(p);
    configure(k);  // a no-op after prepare()
    WorkspaceCarver ws(a.workspace, a.workspace_bytes);
    CcParams prm = make_cc_params(p);
    prm.q = a.q;
    prm.k = a.k;
    prm.v = a.v;
    prm.o = a.o;
    prm.lse = a.lse;
    prm.ml = ws.take<float2>(static_cast<std::size_t>(p.lse_elems()));
    const dim3 grid(static_cast<unsigned>((p.seq_q + k.rows - 1) / k.rows),
                    static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch));
    const cudaStream_t st = stream_of(a.stream);
    k.stats<<<grid, k.threads, k.stats_smem, st>>>(prm);
    ATTN_CHECK(cudaGetLastError());
    k.out<<<grid, k.threads, k.out_smem, st>>>(prm);
    ATTN_CHECK(cudaGetLastError());
  }
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::CudaOnline2Pass)
