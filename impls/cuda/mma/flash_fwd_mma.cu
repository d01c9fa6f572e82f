// cuda.flash_fwd_mma — FlashAttention-2 forward on tensor cores (mma.sync m16n8k16, f32 accum).
//
// Algorithm: a block owns kBlockM query rows of one (batch, head) and streams the visible K/V tiles
// of kBlockN keys through a 2-stage cp.async ring (tile j+1 loads while tile j computes). Each warp
// owns 16 * kMTiles rows: S = Q K^T (ldmatrix from swizzled shared memory, mma.sync), the online
// softmax in the log2 domain (scale * log2(e) folded into one FFMA before ex2), and O += P V with
// P taken straight from the S accumulators as A fragments (no shared-memory round trip). O is
// rescaled by exp2(m_old - m_new) per tile and divided by the row sum once at the end.
// Causal (bottom-right: query i sees key j iff j <= i + seq_kv - seq_q; a template parameter, so
// the non-causal kernels carry none of it): tiles that no row of the block sees are never
// loaded; only tiles that cross the diagonal or the seq_kv tail are masked.
// GQA/MQA: head h reads K/V head h / (heads_q / heads_kv) in place. Blocks of one (batch, head)
// are adjacent in launch order, and heads of one group are adjacent, so K/V stay in L2.
// Passes over HBM: Q, O once; K, V once per query block (mostly L2 hits for the other blocks of the
// same head). Writes O (dtype) and LSE (float32, natural log). Extra memory: none.
// Large logits: the exponents are differences of rounded products (s * scale_log2 - the row's
// max of them), never an FMA of s * scale_log2 - max, whose residual at the max alone is half an
// ulp of the product: past |s * scale_log2| ~ 2^24 that overflowed ex2 and O became NaN.
// Limits: f16/bf16; head_dim any multiple of 8 up to 256, run in the tile 64, 128 or 256 that
// holds it (FwdHeadDims: the columns past head_dim are zero-filled on load and never stored);
// tile 256 needs 194 KiB of shared memory (sm_90); any seq >= 1; rows that see no key give O = 0
// and LSE = -inf.
// Varlen (cu_seqlens, packed THD; issue 30): runs in the window kernels (kLocal; the window is
// unbounded unless the problem sets one). The grid spans the longest sequence; a block reads its
// sequence's lengths and first rows (common/shape.hpp's seq_of), loads only that sequence's keys,
// and returns at once past its queries. A sequence without keys gets O = 0, LSE = -inf.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/implementation.hpp"
#include "common/capabilities.hpp"
// Angle brackets: found through the include path, so that the CPU emulation build
// (impls/cuda/mma/emulation) can put its own mma/ptx.cuh and mma/host.cuh first.
#include <mma/host.cuh>
#include <mma/params.cuh>
#include <mma/tile.cuh>
#include <mma/traits.cuh>

namespace attn_mma {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();

// grid (ceil(Sq / kBlockM), Hq, B), kThreads threads, Tr::kSmemBytes of dynamic shared memory.
// kPadded: head_dim d < D (the tile width); else d == D and every column test folds away.
// kLocal: a sliding window (var; causal folded into it, kCausal false): only the tiles between the
// block's first row's first key and its last row's last key load, and those crossing an edge are
// masked. kSoftcap: scores become tanh(q.k * softcap_in) before the mask, with softcap * log2(e)
// in place of scale * log2(e). var is a second parameter so that MmaParams stays 128 bytes.
template <class T, class Tr, bool kPadded, bool kCausal, bool kLocal, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocksPerSm)
    flash_fwd_mma_kernel(const MmaParams p, const attnbench::cuda::AttnVariant var) {
  constexpr int D = Tr::kHeadDim, BM = Tr::kBlockM, BN = Tr::kBlockN, MT = Tr::kMTiles;
  const int dh = kPadded ? p.head_dim : D;  // columns of the tensors
  constexpr int kThreads = Tr::kThreads;
  constexpr int kSN = BN / 8;  // n-tiles of a warp's S
  constexpr int kON = D / 8;   // n-tiles of a warp's O
  using QTile = SmemTile<BM, D>;
  using KVTile = SmemTile<BN, D>;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Causal: the last row blocks see the most keys; launch them first so that the short ones fill
  // the tail of the grid.
  const int m_block = kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / p.group;
  const int m0 = m_block * BM;
  // Varlen (kLocal only; common/shape.hpp): the block's sequence b, its lengths, causal offset,
  // first query and key rows in the packed tensors and its LSE rows; a block past its sequence's
  // queries has nothing to do. The dense kernels read the shape's values, each where it read
  // them before varlen (kLocal ? sequence : shape), so that their code is unchanged.
  [[maybe_unused]] attnbench::cuda::SeqView sv{};
  if constexpr (kLocal) {
    sv = attnbench::cuda::seq_of(p, var, b);
    if (m0 >= sv.seq_q) return;
  }
  const int seq_q = kLocal ? sv.seq_q : p.seq_q;
  const int rows_valid = seq_q - m0;
  const int warp_row0 = warp * 16 * MT;

  const int64_t q_stride = static_cast<int64_t>(p.heads_q) * dh;
  const int64_t kv_stride = static_cast<int64_t>(p.heads_kv) * dh;
  const int64_t q_off = ((kLocal ? sv.q_start : static_cast<int64_t>(b) * seq_q) + m0) * q_stride +
                        static_cast<int64_t>(h) * dh;
  const int seq_kv = kLocal ? sv.seq_kv : p.seq_kv;
  const int64_t kv_off =
      (kLocal ? sv.kv_start * kv_stride : static_cast<int64_t>(b) * seq_kv * kv_stride) +
      static_cast<int64_t>(kvh) * dh;
  const T* q = static_cast<const T*>(p.q) + q_off;
  const T* k = static_cast<const T*>(p.k) + kv_off;
  const T* v = static_cast<const T*>(p.v) + kv_off;
  T* o = static_cast<T*>(p.o) + q_off;
  float* lse =
      p.lse + (kLocal ? sv.lse_row(h) : (static_cast<int64_t>(b) * p.heads_q + h) * seq_q) + m0;

  // The K/V tiles j_first .. j_first + n_tiles - 1 are visible to at least one row of the block.
  int j_first = 0, n_tiles;
  if constexpr (kLocal) {
    const attnbench::cuda::TileSpan tiles =
        attnbench::cuda::window_key_tiles<BN>(seq_kv, sv.causal_offset, var, m0, BM);
    j_first = tiles.first;
    n_tiles = tiles.count;
  } else {
    int n_end = seq_kv;  // keys [0, n_end) are visible to at least one row of the block
    if constexpr (kCausal) n_end = max(0, min(seq_kv, m0 + BM + p.causal_offset));
    n_tiles = (n_end + BN - 1) / BN;
  }

  if (n_tiles == 0) {  // no row of the block sees any key: O = 0, LSE = -inf
    for (int c = tid; c < BM * (D / 8); c += kThreads) {
      const int row = c / (D / 8), col = (c % (D / 8)) * 8;
      if (row < rows_valid && (!kPadded || col < dh))
        *reinterpret_cast<uint4*>(o + row * q_stride + col) = uint4{0, 0, 0, 0};
    }
    for (int r = tid; r < BM; r += kThreads) {
      if (r < rows_valid) lse[r] = kNegInf;
    }
    return;
  }

  const uint32_t smem = smem_u32(dynamic_smem());
  const QTile sQ{smem};
  const uint32_t k_base = smem + QTile::kBytes;
  const uint32_t v_base = k_base + 2 * KVTile::kBytes;

  // ldmatrix cursors: this warp's Q rows (A, plain), K (B [n][k], plain), V (B [k][n], .trans).
  const LdsmPtr pq = ldsm_p1(sQ, warp_row0, 0, lane);
  const LdsmPtr pk0 = ldsm_p2(KVTile{k_base}, 0, 0, lane);
  const LdsmPtr pv0 = ldsm_p1(KVTile{v_base}, 0, 0, lane);

  const int nf = j_first * BN;
  load_tile_async<kThreads, kPadded>(sQ, q, q_stride, rows_valid, tid, dh);
  load_tile_async<kThreads, kPadded>(KVTile{k_base}, k + nf * kv_stride, kv_stride, seq_kv - nf,
                                     tid, dh);
  load_tile_async<kThreads, kPadded>(KVTile{v_base}, v + nf * kv_stride, kv_stride, seq_kv - nf,
                                     tid, dh);
  cp_async_commit();

  float acc_o[MT][kON][4];
  zero(acc_o);
  // Per thread, rows g and g + 8 of each m-tile: the row's running max of the log2-domain scores
  // s * scale_log2 (each rounded), the base every exponent of the row is taken from.
  float row_max[MT][2];
  // This lane's partial row sums (its columns only; the quad is summed at the end) live in shared
  // memory, slot (mt, hf) at rs + 4 * ((2 mt + hf) * kThreads + tid): they are touched once per
  // tile, and at 32 rows per warp the 4 registers they would hold are the ones ptxas spills.
  const uint32_t rs = v_base + 2 * KVTile::kBytes + 4 * tid;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    row_max[mt][0] = row_max[mt][1] = kNegInf;
    st_shared_f32(rs + 4 * (2 * mt) * kThreads, 0.f);
    st_shared_f32(rs + 4 * (2 * mt + 1) * kThreads, 0.f);
  }
  const float sl2 = kSoftcap ? var.softcap_log2 : p.scale_log2;

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = (j_first + j) * BN;
    cp_async_wait<0>();
    // Tile j is visible to all threads, and every warp is done with tile j-1, whose stage the
    // prefetch below overwrites.
    __syncthreads();
    if (j + 1 < n_tiles) {
      const int n1 = n0 + BN;
      const uint32_t st = static_cast<uint32_t>((j + 1) & 1) * KVTile::kBytes;
      const int t = tid_x_unhoisted();
      load_tile_async<kThreads, kPadded>(KVTile{k_base + st}, k + n1 * kv_stride, kv_stride,
                                         seq_kv - n1, t, dh);
      load_tile_async<kThreads, kPadded>(KVTile{v_base + st}, v + n1 * kv_stride, kv_stride,
                                         seq_kv - n1, t, dh);
      cp_async_commit();
    }
    const uint32_t st = static_cast<uint32_t>(j & 1) * KVTile::kBytes;
    float s[MT][kSN][4];
    zero(s);
    gemm_ss_nt<T, QTile, KVTile, D / 16>(s, pq, LdsmPtr(pk0, st));
    if constexpr (kSoftcap) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = tanh_fast(s[mt][nt][e] * var.softcap_in);
    }

    // Masks only the tiles that reach past seq_kv or past the diagonal of the block's first row
    // (the window: past its right edge for the first row, before its left edge for the last).
    const int coff = kLocal ? sv.causal_offset : p.causal_offset;
    const int diag = m0 + coff;
    bool need_mask = n0 + BN > seq_kv || (kCausal && n0 + BN - 1 > diag);
    if constexpr (kLocal)
      need_mask = need_mask || attnbench::cuda::window_crosses(var, diag, diag + BM - 1, n0, BN);
    if (need_mask) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m0 + warp_row0 + mt * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
            const int col = n0 + nt * 8 + 2 * (lane & 3) + (e & 1);
            bool hidden = col >= seq_kv || (kCausal && col > row + coff);
            if constexpr (kLocal)
              hidden = hidden || attnbench::cuda::window_hides(var, row + coff, col);
            if (hidden) s[mt][nt][e] = kNegInf;
          }
    }

    // Online softmax. A quad (4 lanes) holds one row; row sums stay per lane until the end.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx = kNegInf;
#pragma unroll
        for (int nt = 0; nt < kSN; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hf], s[mt][nt][2 * hf + 1]));
        // Rounding is monotonic, so the max of the rounded products is the rounded product of
        // the max: the max score's exponent is exactly 0 and every other one <= 0.
        mx = fmaxf(row_max[mt][hf], mul_rn(quad_max(mx), sl2));
        // A row that has seen no visible key yet keeps max -inf: its alpha is 0 and its
        // exponent base 0, so masked scores give exp2(-inf) = 0 rather than NaN. An unchanged
        // max gives alpha = exp2(0) = 1.
        const float alpha = row_max[mt][hf] == kNegInf ? 0.f : exp2_approx(row_max[mt][hf] - mx);
        row_max[mt][hf] = mx;
        const float base = mx == kNegInf ? 0.f : mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
          for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
            s[mt][nt][e] = exp2_approx(mul_rn(s[mt][nt][e], sl2) - base);
            sum += s[mt][nt][e];
          }
        const uint32_t rs_slot = rs + 4 * (2 * mt + hf) * kThreads;
        st_shared_f32(rs_slot, ld_shared_f32(rs_slot) * alpha + sum);
#pragma unroll
        for (int dt = 0; dt < kON; ++dt) {
          acc_o[mt][dt][2 * hf] *= alpha;
          acc_o[mt][dt][2 * hf + 1] *= alpha;
        }
      }

    uint32_t pa[MT][kSN / 2][4];
    c_to_a<T>(s, pa);
    gemm_rs_nn<T, KVTile>(acc_o, pa, LdsmPtr(pv0, st));
  }

  // Epilogue: O /= l, LSE = (max of s * scale_log2 + log2 l) * ln 2; O goes through this warp's own
  // Q rows in shared memory (no other warp reads them) to be stored 16 bytes per lane.
  using attnbench::cuda::kLn2;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float l = quad_sum(ld_shared_f32(rs + 4 * (2 * mt + hf) * kThreads));
      const float inv = l > 0.f ? 1.f / l : 0.f;
#pragma unroll
      for (int dt = 0; dt < kON; ++dt) {
        acc_o[mt][dt][2 * hf] *= inv;
        acc_o[mt][dt][2 * hf + 1] *= inv;
      }
      const int row = warp_row0 + mt * 16 + (lane >> 2) + 8 * hf;
      if ((lane & 3) == 0 && row < rows_valid) {
        lse[row] = l > 0.f ? (row_max[mt][hf] + log2f(l)) * kLn2 : kNegInf;
      }
    }
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) store_c<T, kON>(sQ, warp_row0 + mt * 16, 0, acc_o[mt], lane);
  __syncwarp();
  store_rows_warp<16 * MT, kPadded>(sQ, warp_row0, o + warp_row0 * q_stride, q_stride,
                                    rows_valid - warp_row0, lane, dh);
}

int fwd_smem_bytes(int head_dim) {
  return FwdHeadDims::dispatch(head_dim, [](auto d) { return FwdTraits<d.value>::kSmemBytes; });
}

using attnbench::Capabilities;
using attnbench::Device;
using attnbench::DType;
using attnbench::Options;
using attnbench::Pass;
using attnbench::Problem;
using attnbench::Support;

class FlashFwdMma final : public attnbench::Implementation {
 public:
  std::string name() const override { return "cuda.flash_fwd_mma"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-2 forward: mma.sync m16n8k16, ldmatrix, 2-stage cp.async K/V ring";
  }
  Capabilities capabilities() const override {
    Capabilities c = attnbench::cuda::tensor_core_capabilities<FwdHeadDims>(true, false);
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    return c;
  }

  Support supports_extra(const Problem& p, Pass) const override {
    if (p.heads_q > 65535 || p.batch > 65535) {
      return Support::no("heads_q and batch must be <= 65535 (grid y/z)");
    }
    std::string why;
    const int smem = max_smem_per_block(why);
    if (smem < 0) return Support::no(why);
    if (smem < fwd_smem_bytes(p.head_dim)) {
      return Support::no("needs " + std::to_string(fwd_smem_bytes(p.head_dim)) +
                         " bytes of shared memory per block (head_dim tile " +
                         std::to_string(FwdHeadDims::tile(p.head_dim)) + "), the device allows " +
                         std::to_string(smem));
    }
    return Support::yes();
  }

  // f(kernel, Traits{}) for the problem: dtype, head_dim tile, padding, causal, window, soft cap.
  // The variants (window, soft cap) run the padded kernels for every head_dim (their column tests
  // cost little beside the masks), which halves what they add to this file's compile time.
  template <class F>
  static void dispatch(const Problem& pr, F&& f) {
    dispatch_mma<FwdHeadDims>(pr, [&](auto e, auto d, auto padded, auto causal) {
      using Tr = FwdTraits<d.value>;
      attnbench::cuda::dispatch_variant<decltype(causal)::value>(pr, [&](auto c, auto l, auto sc) {
        constexpr bool kPad = decltype(padded)::value || decltype(l)::value || decltype(sc)::value;
        f(flash_fwd_mma_kernel<typename decltype(e)::type, Tr, kPad, c, l, sc>, Tr{});
      });
    });
  }

  void prepare(const Problem& p, Pass, const Options&) const override {
    dispatch(p, [&](auto kernel, auto tr) { set_dynamic_smem(kernel, decltype(tr)::kSmemBytes); });
  }

  void forward(const attnbench::FwdArgs& a) const override {
    const Problem& pr = a.p;
    MmaParams p = make_params(pr);
    p.q = a.q;
    p.k = a.k;
    p.v = a.v;
    p.o = a.o;
    p.lse = a.lse;
    for (const void* ptr : {a.q, a.k, a.v, static_cast<const void*>(a.o)}) {
      if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
        throw std::invalid_argument("cuda.flash_fwd_mma: q, k, v, o must be 16-byte aligned");
      }
    }
    const attnbench::cuda::AttnVariant var = attnbench::cuda::make_variant(a);
    dispatch(pr, [&](auto kernel, auto tr) {
      using Tr = decltype(tr);
      const dim3 grid((pr.seq_q + Tr::kBlockM - 1) / Tr::kBlockM, pr.heads_q, pr.batch);
      launch(kernel, grid, dim3(Tr::kThreads), Tr::kSmemBytes, a.stream, p, var);
    });
  }
};

}  // namespace
}  // namespace attn_mma

ATTNBENCH_REGISTER(attn_mma::FlashFwdMma)
