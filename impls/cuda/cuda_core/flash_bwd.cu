// cuda.flash_bwd — FlashAttention-1 backward on CUDA cores (no tensor cores); forward partner
// cuda.flash_fwd (O and LSE).
//
// Algorithm (FlashAttention's Algorithm 4, key tiles outermost):
//   0. preprocessing kernel: D = rowsum(dO ∘ O) in float32; the dQ accumulator is zeroed;
//   1. main kernel, one block per (key tile of Bc rows, query head, batch): K_j, V_j stay in
//      shared memory and dK_j, dV_j accumulate in registers while the block walks the query
//      tiles of Br rows (causal: from the first tile that sees key j0). Per query tile: Q_i and
//      dO_i in shared memory; S = Q_i K_jᵀ and dP = dO_i V_jᵀ as register micro-tiles;
//      P = exp2(S·scale·log2 e − LSE·log2 e) recomputed from the forward's LSE, masked;
//      dS = P ∘ (dP − D); P and dS through shared memory; dV_j += Pᵀ dO_i; dK_j += dSᵀ Q_i;
//      dQ_i += dS K_j with float32 atomicAdd into a float32 workspace (the dQ choice: atomics
//      into float32, then a conversion kernel; dQ is therefore not bitwise deterministic);
//   2. conversion kernel: dQ = scale · dQ_acc in the dtype.
// GQA: a block serves one query head. With a group of 1 it writes dK, dV (× scale) in the dtype;
// otherwise it writes float32 per-query-head partials [B, Skv, Hq, D] and a reduction kernel
// sums each group in a fixed order (deterministic dK/dV, full parallelism over query heads).
// Passes over HBM: K, V read once; Q, dO, LSE, D read once per key tile (Skv/Bc times); dQ
// accumulated Skv/Bc times (atomics, L2); dK, dV written once. Nothing of size seq² is stored.
// Extra memory: B·Sq·Hq·D floats (dQ accumulator) + B·Hq·Sq floats (D); GQA adds 2·B·Skv·Hq·D
// floats of partials. Tiles per head_dim bucket: CcBwdTile in tiles.cuh (Bc 64/64/64/32, Br
// 64/64/32/32 for D 32/64/128/256); shared memory 72–143 KB per block.
// Limits: head_dim 1..256 (padded to the bucket), batch and heads_q <= 65535.
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "cuda_core/tiles.cuh"

namespace attnbench::cuda {
namespace {

template <int DB>
constexpr std::size_t bwd_smem_bytes() {
  using Tile = CcBwdTile<DB>;
  return sizeof(float) * static_cast<std::size_t>(
                             2 * Tile::kBlockC * kStrideQK<DB> + 2 * Tile::kBlockR * kStrideQK<DB> +
                             2 * Tile::kBlockR * (Tile::kBlockC + 4) + 2 * Tile::kBlockR);
}

// q, dout, dq: [B, Sq, Hq, D]; k, v, dk, dv: [B, Skv, Hkv, D]. Grid (ceil(Skv/Bc), Hq, B).
template <class T, int DB>
__global__ void __launch_bounds__(CcBwdTile<DB>::kThreads, 1) flash_bwd_cc_kernel(CcParams p) {
  using Tile = CcBwdTile<DB>;
  constexpr int NT = Tile::kThreads, BC = Tile::kBlockC, BR = Tile::kBlockR;
  constexpr int NE = DB / kGroup, SQK = kStrideQK<DB>, SP = BC + 4;
  constexpr int ROW_GROUPS = NT / kGroup;
  constexpr int RA = BR / ROW_GROUPS;  // query rows of a thread in S, dP and dQ
  constexpr int NCA = BC / kGroup;     // key columns of a thread in S and dP
  constexpr int RJ = BC / ROW_GROUPS;  // key rows of a thread in dK and dV
  static_assert(RA >= 1 && RJ >= 1 && BR % ROW_GROUPS == 0 && BC % ROW_GROUPS == 0,
                "tile/thread mismatch");

  extern __shared__ float4 smem4[];
  float* k_s = reinterpret_cast<float*>(smem4);  // [BC][SQK]
  float* v_s = k_s + BC * SQK;                   // [BC][SQK]
  float* q_s = v_s + BC * SQK;                   // [BR][SQK]
  float* do_s = q_s + BR * SQK;                  // [BR][SQK]
  float* p_s = do_s + BR * SQK;                  // [BR][SP]
  float* ds_s = p_s + BR * SP;                   // [BR][SP]
  float* lse_s = ds_s + BR * SP;                 // [BR], log2 domain
  float* delta_s = lse_s + BR;                   // [BR]

  const int j0 = static_cast<int>(blockIdx.x) * BC, h = static_cast<int>(blockIdx.y),
            b = static_cast<int>(blockIdx.z);
  const int hk = h / p.group;
  const int tid = static_cast<int>(threadIdx.x), t = tid % kGroup, rg = tid / kGroup;
  const std::int64_t q_row = static_cast<std::int64_t>(p.heads_q) * p.head_dim;
  const std::int64_t kv_row = static_cast<std::int64_t>(p.heads_kv) * p.head_dim;
  const std::int64_t q_head =
      static_cast<std::int64_t>(b) * p.seq_q * p.heads_q + h;  // (b, row 0, h) / D
  const std::int64_t kv_head = static_cast<std::int64_t>(b) * p.seq_kv * p.heads_kv + hk;
  const std::int64_t stat0 = (static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q;

  const int kv_rows = min(BC, p.seq_kv - j0);
  load_tile<BC, DB, SQK, NT>(k_s, static_cast<const T*>(p.k) + kv_head * p.head_dim, j0, kv_rows,
                             kv_row, p.head_dim, 1.f);
  load_tile<BC, DB, SQK, NT>(v_s, static_cast<const T*>(p.v) + kv_head * p.head_dim, j0, kv_rows,
                             kv_row, p.head_dim, 1.f);

  float dk[RJ][NE], dv[RJ][NE];
#pragma unroll
  for (int r = 0; r < RJ; ++r)
#pragma unroll
    for (int e = 0; e < NE; ++e) dk[r][e] = dv[r][e] = 0.f;

  const int kmax = (p.head_dim + 3) & ~3;
  // The first query row that sees key j0 (bottom-right causal); earlier query tiles are skipped.
  const int i_first = p.causal ? max(0, j0 - (p.seq_kv - p.seq_q)) : 0;
  for (int i0 = (i_first / BR) * BR; i0 < p.seq_q; i0 += BR) {
    __syncthreads();  // the previous tile's reads of q_s, do_s, p_s, ds_s are done
    const int q_rows = min(BR, p.seq_q - i0);
    load_tile<BR, DB, SQK, NT>(q_s, static_cast<const T*>(p.q) + q_head * p.head_dim, i0, q_rows,
                               q_row, p.head_dim, 1.f);
    load_tile<BR, DB, SQK, NT>(do_s, static_cast<const T*>(p.dout) + q_head * p.head_dim, i0,
                               q_rows, q_row, p.head_dim, 1.f);
    for (int r = tid; r < BR; r += NT) {
      lse_s[r] = r < q_rows ? p.lse[stat0 + i0 + r] * kLog2e : 0.f;
      delta_s[r] = r < q_rows ? p.delta[stat0 + i0 + r] : 0.f;
    }
    __syncthreads();

    // S and dP micro-tiles: rows rg*RA + r, key columns t + 16c.
    float s[RA][NCA], dp[RA][NCA];
#pragma unroll
    for (int r = 0; r < RA; ++r)
#pragma unroll
      for (int c = 0; c < NCA; ++c) s[r][c] = dp[r][c] = 0.f;
    tile_dot<RA, NCA, DB, SQK, SQK>(s, q_s, k_s, rg * RA, t, kmax);
    tile_dot<RA, NCA, DB, SQK, SQK>(dp, do_s, v_s, rg * RA, t, kmax);
#pragma unroll
    for (int r = 0; r < RA; ++r) {
      const int ri = rg * RA + r, row = i0 + ri;
      const int lim = row < p.seq_q ? causal_limit(row, p.seq_q, p.seq_kv, p.causal) : 0;
      const float l2 = lse_s[ri], dr = delta_s[ri];
#pragma unroll
      for (int c = 0; c < NCA; ++c) {
        const int jj = t + kGroup * c;
        // P <= 1: the exponent is clamped at 0, as an FMA or the float32 LSE can put it above 0
        // by an ulp of LSE, which past |LSE| ~ 2^24 (--scale 1e8) overflowed exp2.
        const float pr = j0 + jj < lim ? exp2f(fminf(s[r][c] * p.scale_log2 - l2, 0.f)) : 0.f;
        p_s[ri * SP + jj] = pr;
        ds_s[ri * SP + jj] = pr * (dp[r][c] - dr);
      }
    }
    __syncthreads();

    // dV += Pᵀ dO and dK += dSᵀ Q: key rows rg*RJ + r, output columns out_col(t, e).
#pragma unroll 2
    for (int i = 0; i < BR; ++i) {
      float dov[NE], qv[NE];
      load_out_cols<DB, SQK>(dov, do_s, i, t);
      load_out_cols<DB, SQK>(qv, q_s, i, t);
#pragma unroll
      for (int r = 0; r < RJ; ++r) {
        const float pr = p_s[i * SP + rg * RJ + r], dsr = ds_s[i * SP + rg * RJ + r];
#pragma unroll
        for (int e = 0; e < NE; ++e) {
          dv[r][e] = fmaf(pr, dov[e], dv[r][e]);
          dk[r][e] = fmaf(dsr, qv[e], dk[r][e]);
        }
      }
    }

    // dQ_i += dS K_j (unscaled), rows rg*RA + r.
    float dq[RA][NE];
#pragma unroll
    for (int r = 0; r < RA; ++r)
#pragma unroll
      for (int e = 0; e < NE; ++e) dq[r][e] = 0.f;
    tile_pv<RA, DB, BC, SP, SQK>(dq, ds_s, k_s, rg * RA, t);
#pragma unroll
    for (int r = 0; r < RA; ++r) {
      const int row = i0 + rg * RA + r;
      if (row >= p.seq_q) continue;
      float* dst = p.dq_accum + (q_head + static_cast<std::int64_t>(row) * p.heads_q) * p.head_dim;
#pragma unroll
      for (int e = 0; e < NE; ++e) {
        const int c = out_col<DB>(t, e);
        if (c < p.head_dim) atomicAdd(dst + c, dq[r][e]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < RJ; ++r) {
    const int j = j0 + rg * RJ + r;
    if (j >= p.seq_kv) continue;
#pragma unroll
    for (int e = 0; e < NE; ++e) {
      const int c = out_col<DB>(t, e);
      if (c >= p.head_dim) continue;
      if (p.partial) {
        const std::int64_t idx =
            ((static_cast<std::int64_t>(b) * p.seq_kv + j) * p.heads_q + h) * p.head_dim + c;
        static_cast<float*>(p.dk)[idx] = p.scale * dk[r][e];
        static_cast<float*>(p.dv)[idx] = dv[r][e];
      } else {
        const std::int64_t idx =
            (kv_head + static_cast<std::int64_t>(j) * p.heads_kv) * p.head_dim + c;
        static_cast<T*>(p.dk)[idx] = from_float<T>(p.scale * dk[r][e]);
        static_cast<T*>(p.dv)[idx] = from_float<T>(dv[r][e]);
      }
    }
  }
}

// dk[b, j, hk, c] = sum_g part_k[b, j, hk*G + g, c] (same for v), g in order: the GQA group sum.
// part_*: [B, Skv, Hq, D] float; dk, dv: [B, Skv, Hkv, D].
template <class T>
__global__ void group_sum_kernel(const float* __restrict__ part_k, const float* __restrict__ part_v,
                                 T* __restrict__ dk, T* __restrict__ dv, std::int64_t n, int hkv,
                                 int group, int d) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const std::int64_t c = i % d, rest = i / d, hk = rest % hkv, bj = rest / hkv;
    const std::int64_t src =
        ((bj * hkv + hk) * group) * d + c;  // (b, j, h = hk*G, c) of [B, Skv, Hq, D]
    float sk = 0.f, sv = 0.f;
    for (int g = 0; g < group; ++g) {
      sk += part_k[src + static_cast<std::int64_t>(g) * d];
      sv += part_v[src + static_cast<std::int64_t>(g) * d];
    }
    dk[i] = from_float<T>(sk);
    dv[i] = from_float<T>(sv);
  }
}

struct KernelInfo {
  void (*fn)(CcParams) = nullptr;
  std::size_t smem = 0;
  int block_c = 0, threads = 0;
};

KernelInfo pick(const Problem& p) {
  return dispatch_dtype(p.dtype, [&](auto tt) {
    using T = typename decltype(tt)::type;
    return dispatch_head_dim(p.head_dim, [&](auto db) {
      constexpr int DB = decltype(db)::value;
      return KernelInfo{&flash_bwd_cc_kernel<T, DB>, bwd_smem_bytes<DB>(), CcBwdTile<DB>::kBlockC,
                        CcBwdTile<DB>::kThreads};
    });
  });
}

void configure(const KernelInfo& k) {
  static std::mutex mu;
  static std::set<const void*> done;
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count(reinterpret_cast<const void*>(k.fn))) return;
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.fn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(k.smem)));
  done.insert(reinterpret_cast<const void*>(k.fn));
}

std::size_t partial_elems(const Problem& p) {
  return p.group() > 1 ? static_cast<std::size_t>(p.batch) * p.seq_kv * p.heads_q * p.head_dim : 0;
}

template <class T>
void run_backward(const BwdArgs& a, const KernelInfo& k) {
  const Problem& p = a.p;
  const cudaStream_t st = stream_of(a.stream);
  WorkspaceCarver ws(a.workspace, a.workspace_bytes);
  float* dq_accum = ws.take<float>(static_cast<std::size_t>(p.q_elems()));
  float* delta = ws.take<float>(static_cast<std::size_t>(p.lse_elems()));
  const bool partial = p.group() > 1;
  float* part_k = partial ? ws.take<float>(partial_elems(p)) : nullptr;
  float* part_v = partial ? ws.take<float>(partial_elems(p)) : nullptr;

  ATTN_CHECK(
      cudaMemsetAsync(dq_accum, 0, static_cast<std::size_t>(p.q_elems()) * sizeof(float), st));
  launch_row_dot<T>(static_cast<const T*>(a.o), static_cast<const T*>(a.dout), delta, p, st);

  CcParams bp = make_cc_params(p);
  const float scale = bp.scale;
  bp.q = a.q;
  bp.k = a.k;
  bp.v = a.v;
  bp.dout = a.dout;
  bp.lse = const_cast<float*>(a.lse);  // read only here
  bp.delta = delta;
  bp.dq_accum = dq_accum;
  bp.dk = partial ? static_cast<void*>(part_k) : a.dk;
  bp.dv = partial ? static_cast<void*>(part_v) : a.dv;
  bp.partial = partial;
  const dim3 grid(static_cast<unsigned>((p.seq_kv + k.block_c - 1) / k.block_c),
                  static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch));
  k.fn<<<grid, k.threads, k.smem, st>>>(bp);
  ATTN_CHECK(cudaGetLastError());

  launch_scale_convert<T>(dq_accum, static_cast<T*>(a.dq), p.q_elems(), scale, st);
  if (partial) {
    const std::int64_t n = p.kv_elems();
    group_sum_kernel<T><<<elementwise_blocks(n, 256), 256, 0, st>>>(
        part_k, part_v, static_cast<T*>(a.dk), static_cast<T*>(a.dv), n, p.heads_kv, p.group(),
        p.head_dim);
    ATTN_CHECK(cudaGetLastError());
  }
}

class CudaFlashBwd final : public Implementation {
 public:
  std::string name() const override { return "cuda.flash_bwd"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-1 backward on CUDA cores: recomputes P from LSE per tile, dK/dV in "
           "registers, dQ by float32 atomics";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.forward = false;
    c.backward = true;
    c.fwd_partner = "cuda.flash_fwd";
    return c;
  }
  Support supports_extra(const Problem& p, Pass) const override {
    if (Support s = check_grid_yz(p); !s) return s;
    const std::size_t limit = max_smem_optin();
    if (limit == 0) return Support::no("no CUDA device");
    if (pick(p).smem > limit)
      return Support::no("tile needs more shared memory than the device has");
    return Support::yes();
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    if (pass == Pass::fwd) return 0;
    const std::size_t f = sizeof(float);
    return carve_bytes({static_cast<std::size_t>(p.q_elems()) * f,
                        static_cast<std::size_t>(p.lse_elems()) * f, partial_elems(p) * f,
                        partial_elems(p) * f});
  }
  void prepare(const Problem& p, Pass, const Options&) const override { configure(pick(p)); }
  void backward(const BwdArgs& a) const override {
    const KernelInfo k = pick(a.p);
    configure(k);  // a no-op after prepare()
    dispatch_dtype(a.p.dtype, [&](auto tt) { run_backward<typename decltype(tt)::type>(a, k); });
  }
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::CudaFlashBwd)
