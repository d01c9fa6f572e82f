// cuda.flash_fwd — FlashAttention-1 forward on CUDA cores (no tensor cores).
//
// Algorithm: one block per (query tile of Br rows, query head, batch). The block keeps its Q tile
// in shared memory (float, pre-multiplied by scale·log2 e) and walks the key/value tiles of Bc
// rows: S = Q Kᵀ into registers (each thread a 4x(Bc/16) micro-tile), masking, the online
// softmax update (running max m and sum l per row, the O accumulators rescaled by exp2(m_old −
// m_new)), P = exp2(S − m) through shared memory, O += P V. At the end O = acc / l and
// LSE = (m + log2 l)·ln 2. Causal blocks stop at the last key their last row can see (fully
// masked tiles are skipped) and the grid runs the heaviest query tiles first.
// Passes over HBM: Q read once, K and V read once per query tile (seq_q / Br times), O written
// once, LSE written once. Nothing of size seq² is ever stored.
// Extra memory: none (no workspace). Shared memory per block: (Br + Bc)(D+4) + Bc·D + Br(Bc+4)
// floats, D the head_dim bucket (32, 64, 128, 256).
// Options: "block_c" = Bc ∈ {16, 32, 64, 128} (default: CcFwdTile<D>::kDefaultBc, 64; 32 for
// head_dim > 128). A value that is not in the set, or that needs more shared memory than the
// device has (Bc 128 with head_dim > 128 everywhere; Bc 128 with head_dim > 64 beyond 227 KB
// GPUs), throws std::invalid_argument from prepare()/forward().
// Limits: head_dim 1..256 (padded to the bucket: head_dim 80 does the P·V work of 128), batch
// and heads_q <= 65535. float32 accumulation; exp2f for the exponentials.
#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <string>

#include "cuda_core/tiles.cuh"

namespace attnbench::cuda {
namespace {

template <int DB, int BC>
constexpr int block_rows() {
  return (CcFwdTile<DB>::kThreads / kGroup) * CcFwdTile<DB>::kRowsPerThread;
}
template <int DB, int BC>
constexpr std::size_t fwd_smem_bytes() {
  constexpr int BR = block_rows<DB, BC>();
  return sizeof(float) * static_cast<std::size_t>(BR * kStrideQK<DB> + BC * kStrideQK<DB> +
                                                  BC * DB + BR * (BC + 4));
}
// Largest dynamic shared memory of any supported GPU (H100/H200: 227 KB); bigger tiles are not
// compiled at all.
inline constexpr std::size_t kSmemCompileLimit = 227 * 1024;

// q, o: [B, Sq, Hq, D]; k, v: [B, Skv, Hkv, D]; lse: [B, Hq, Sq]. Grid (ceil(Sq/Br), Hq, B).
template <class T, int DB, int BC>
__global__ void __launch_bounds__(CcFwdTile<DB>::kThreads, 1) flash_fwd_cc_kernel(CcParams p) {
  using Tile = CcFwdTile<DB>;
  constexpr int NT = Tile::kThreads, RT = Tile::kRowsPerThread, BR = block_rows<DB, BC>();
  constexpr int NC = BC / kGroup, NE = DB / kGroup, SQK = kStrideQK<DB>, SP = BC + 4;
  static_assert(BC % kGroup == 0 && BC % 4 == 0, "key tile must be a multiple of 16");
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();

  extern __shared__ float4 smem4[];
  float* q_s = reinterpret_cast<float*>(smem4);  // [BR][SQK]
  float* k_s = q_s + BR * SQK;                   // [BC][SQK]
  float* v_s = k_s + BC * SQK;                   // [BC][DB]
  float* p_s = v_s + BC * DB;                    // [BR][SP]

  const int tile = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // heavy causal tiles first
  const int q0 = tile * BR, h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const int hk = h / p.group;
  const int tid = static_cast<int>(threadIdx.x), t = tid % kGroup, row_base = (tid / kGroup) * RT;
  const std::int64_t q_row = static_cast<std::int64_t>(p.heads_q) * p.head_dim;
  const std::int64_t kv_row = static_cast<std::int64_t>(p.heads_kv) * p.head_dim;
  const T* qg = static_cast<const T*>(p.q) +
                (static_cast<std::int64_t>(b) * p.seq_q * p.heads_q + h) * p.head_dim;
  const T* kg = static_cast<const T*>(p.k) +
                (static_cast<std::int64_t>(b) * p.seq_kv * p.heads_kv + hk) * p.head_dim;
  const T* vg = static_cast<const T*>(p.v) +
                (static_cast<std::int64_t>(b) * p.seq_kv * p.heads_kv + hk) * p.head_dim;

  const int q_rows = min(BR, p.seq_q - q0);
  load_tile<BR, DB, SQK, NT>(q_s, qg, q0, q_rows, q_row, p.head_dim, p.scale_log2);

  int lim[RT];
  float m[RT], l[RT], acc[RT][NE];
#pragma unroll
  for (int i = 0; i < RT; ++i) {
    lim[i] = causal_limit(q0 + row_base + i, p.seq_q, p.seq_kv, p.causal);
    m[i] = kNegInf;
    l[i] = 0.f;
#pragma unroll
    for (int e = 0; e < NE; ++e) acc[i][e] = 0.f;
  }
  // The block's last valid row sees the most keys; tiles past its limit are fully masked.
  const int kv_end = causal_limit(q0 + q_rows - 1, p.seq_q, p.seq_kv, p.causal);
  const int kmax = (p.head_dim + 3) & ~3;

  for (int j0 = 0; j0 < kv_end; j0 += BC) {
    __syncthreads();  // the previous tile's K, V and P reads are done
    const int kv_rows = min(BC, p.seq_kv - j0);
    load_tile<BC, DB, SQK, NT>(k_s, kg, j0, kv_rows, kv_row, p.head_dim, 1.f);
    load_tile<BC, DB, DB, NT>(v_s, vg, j0, kv_rows, kv_row, p.head_dim, 1.f);
    __syncthreads();

    float s[RT][NC];
#pragma unroll
    for (int i = 0; i < RT; ++i)
#pragma unroll
      for (int c = 0; c < NC; ++c) s[i][c] = 0.f;
    tile_dot<RT, NC, DB, SQK, SQK>(s, q_s, k_s, row_base, t, kmax);

#pragma unroll
    for (int i = 0; i < RT; ++i) {
      float mx = kNegInf;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        if (j0 + t + kGroup * c >= lim[i]) s[i][c] = kNegInf;
        mx = fmaxf(mx, s[i][c]);
      }
      mx = group_max(mx);
      const float m_new = fmaxf(m[i], mx);
      const float m_use = m_new == kNegInf ? 0.f : m_new;  // a row with nothing visible yet
      const float alpha = exp2f(m[i] - m_use);
      float rs = 0.f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        s[i][c] = exp2f(s[i][c] - m_use);
        rs += s[i][c];
        p_s[(row_base + i) * SP + t + kGroup * c] = s[i][c];
      }
      l[i] = l[i] * alpha + rs;  // per-lane partial sum, reduced over the group at the end
      m[i] = m_new;
#pragma unroll
      for (int e = 0; e < NE; ++e) acc[i][e] *= alpha;
    }
    __syncwarp();  // P rows are written and read by the same 16 lanes
    tile_pv<RT, DB, BC, SP, DB>(acc, p_s, v_s, row_base, t);
  }

#pragma unroll
  for (int i = 0; i < RT; ++i) {
    const float lsum = group_sum(l[i]);
    const int row = q0 + row_base + i;
    if (row < p.seq_q) {
      const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
      T* og = static_cast<T*>(p.o) +
              ((static_cast<std::int64_t>(b) * p.seq_q + row) * p.heads_q + h) * p.head_dim;
#pragma unroll
      for (int e = 0; e < NE; ++e) {
        const int c = out_col<DB>(t, e);
        if (c < p.head_dim) og[c] = from_float<T>(acc[i][e] * inv);
      }
      if (t == 0)
        p.lse[(static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q + row] =
            lsum > 0.f ? (m[i] + log2f(lsum)) * kLn2 : kNegInf;
    }
  }
}

struct KernelInfo {
  void (*fn)(CcParams) = nullptr;
  std::size_t smem = 0;
  int rows = 0;
  int threads = 0;
};

template <class T, int DB, int BC>
KernelInfo info_for() {
  if constexpr (fwd_smem_bytes<DB, BC>() > kSmemCompileLimit) {
    throw std::invalid_argument("cuda.flash_fwd: block_c " + std::to_string(BC) + " needs " +
                                std::to_string(fwd_smem_bytes<DB, BC>()) +
                                " bytes of shared memory at head_dim bucket " + std::to_string(DB));
  } else {
    return {&flash_fwd_cc_kernel<T, DB, BC>, fwd_smem_bytes<DB, BC>(), block_rows<DB, BC>(),
            CcFwdTile<DB>::kThreads};
  }
}

int block_c_of(const Problem& p, const Options* opts) {
  const int fallback = dispatch_head_dim(
      p.head_dim, [](auto db) { return CcFwdTile<decltype(db)::value>::kDefaultBc; });
  return static_cast<int>(option_or(opts, "block_c", fallback));
}

KernelInfo pick_kernel(const Problem& p, int bc) {
  return dispatch_dtype(p.dtype, [&](auto tt) {
    using T = typename decltype(tt)::type;
    return dispatch_head_dim(p.head_dim, [&](auto db) -> KernelInfo {
      constexpr int DB = decltype(db)::value;
      switch (bc) {
        case 16:
          return info_for<T, DB, 16>();
        case 32:
          return info_for<T, DB, 32>();
        case 64:
          return info_for<T, DB, 64>();
        case 128:
          return info_for<T, DB, 128>();
        default:
          throw std::invalid_argument("cuda.flash_fwd: block_c must be 16, 32, 64 or 128, got " +
                                      std::to_string(bc));
      }
    });
  });
}

// Raises the kernel's dynamic shared-memory limit (once per kernel) and checks the device has it.
void configure(const KernelInfo& k) {
  static std::mutex mu;
  static std::set<const void*> done;
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count(reinterpret_cast<const void*>(k.fn))) return;
  const std::size_t limit = max_smem_optin();
  if (k.smem > limit)
    throw std::invalid_argument("cuda.flash_fwd: tile needs " + std::to_string(k.smem) +
                                " bytes of shared memory, the device allows " +
                                std::to_string(limit));
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(k.fn),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(k.smem)));
  done.insert(reinterpret_cast<const void*>(k.fn));
}

// Whether the tiles of the block_c in opts (null: the default) fit the device's shared memory.
Support tile_fits(const Problem& p, const Options* opts) {
  const int bc = block_c_of(p, opts);
  KernelInfo k;
  try {
    k = pick_kernel(p, bc);
  } catch (const std::invalid_argument& e) {
    return Support::no(e.what());
  }
  const std::size_t limit = max_smem_optin();
  if (k.smem > limit)
    return Support::no("block_c " + std::to_string(bc) + " needs " + std::to_string(k.smem) +
                       " bytes of shared memory, the device has " + std::to_string(limit));
  return Support::yes();
}

class CudaFlashFwd final : public Implementation {
 public:
  std::string name() const override { return "cuda.flash_fwd"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-1 forward on CUDA cores: Q/K/V tiles in shared memory, online softmax, "
           "O and LSE only (option block_c)";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = false;
    c.options = {"block_c"};
    return c;
  }
  Support supports_extra(const Problem& p, Pass) const override {
    if (Support s = check_grid_yz(p); !s) return s;
    if (max_smem_optin() == 0) return Support::no("no CUDA device");
    return tile_fits(p, nullptr);  // the default block_c (callers that pass no options)
  }
  // A block_c whose tiles do not fit the shared memory at this head_dim is a SKIP, not a FAIL.
  Support supports_options(const Problem& p, Pass, const Options& opts) const override {
    return tile_fits(p, &opts);
  }
  void prepare(const Problem& p, Pass, const Options& opts) const override {
    configure(pick_kernel(p, block_c_of(p, &opts)));
  }
  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const KernelInfo k = pick_kernel(p, block_c_of(p, a.options));
    configure(k);  // a no-op after prepare()
    CcParams fp = make_cc_params(p);
    fp.q = a.q;
    fp.k = a.k;
    fp.v = a.v;
    fp.o = a.o;
    fp.lse = a.lse;
    const dim3 grid(static_cast<unsigned>((p.seq_q + k.rows - 1) / k.rows),
                    static_cast<unsigned>(p.heads_q), static_cast<unsigned>(p.batch));
    k.fn<<<grid, k.threads, k.smem, stream_of(a.stream)>>>(fp);
    ATTN_CHECK(cudaGetLastError());
  }
};

}  // namespace
}  // namespace attnbench::cuda

ATTNBENCH_REGISTER(attnbench::cuda::CudaFlashFwd)
