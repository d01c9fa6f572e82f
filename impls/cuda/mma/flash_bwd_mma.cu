// cuda.flash_bwd_mma — FlashAttention-2 backward on tensor cores (mma.sync m16n8k16, f32 accum).
//
// Kernels, in launch order:
//  1. preprocess: D = rowsum(dO * O) (float32 workspace [B, Hq, Sq]); zeroes the dQ accumulator.
//  2. main, parallel over key tiles: a block owns 128 keys of one (batch, kv head) and keeps
//     their dK, dV in registers. It loops over the query heads of the GQA group and over the query
//     tiles that see its keys (causal: from the diagonal on), streaming Q, dO, LSE, D through a
//     2-stage cp.async ring. Per tile, in FlashAttention-2's warp layout (mma/traits.cuh,
//     BwdMainConfig): S = Q K^T and dP = dO V^T in 32-row warp tiles; P = exp2(S scale log2e -
//     LSE log2e) (recomputed, not stored by the forward) and dS = P (dP - D) go to shared memory;
//     then dQ = dS K, added into a float32 workspace with atomics (red.global.add.v2.f32 on
//     sm_90), and dV += P^T dO, dK += dS^T Q in 32-key warp tiles.
//     Why P and dS through shared memory: the alternative, 16 keys per warp with S^T = K_w Q^T so
//     that P^T and dS^T stay in registers as the A operand of dV and dK (this file until
//     2026-11-29), makes every warp read all of Q and dO twice per tile; its ldmatrix traffic,
//     not the extra 2 x 16 KiB of shared-memory stores, bounded it (docs/tuning_flash_mma.md,
//     steps 11-12: 4-7% slower).
//     Tried and rejected (tuning log, step 14; bwd TFLOP/s against this kernel, same binary):
//     storing P before dP = dO V^T, FlashAttention-2's order (-1.1% at both head_dims, and 8 B
//     of spill at d64 bf16); stmatrix stores of P and dS (-0.3 to -0.5% in that order; +1.0%
//     d64 / +0.3% d128 in this one, within the noise of the 1% bar set before the run).
//  3. convert: dQ = scale * accumulator, rounded to the dtype.
// Why atomics for dQ: the alternative (a separate dQ kernel, parallel over query tiles) recomputes
// S and dP, 7 instead of 5 matrix products (+40% flops); the atomics cost one float32 dQ
// round trip through L2 per key block. That alternative is the deterministic mode (option
// "deterministic": 1): kernel 2 then skips dQ, and kernel 3 is a dQ kernel that loops over key
// tiles, recomputing P and dS, and writes dQ in the dtype directly (H200, bf16: 5-13% lower bwd
// TFLOP/s than the atomics, tuning log step 15). dK/dV are deterministic in
// both modes: the GQA group is summed in registers inside one block, in a fixed order.
// Passes over HBM (main kernel): K, V once; Q, dO, LSE, D once per key block (mostly L2 hits);
// dQ accumulator: one float32 read-modify-write per key block. Writes dQ, dK, dV (dtype).
// Extra memory (workspace): D, 4 B * B * Hq * Sq; plus the dQ accumulator, 4 B * B * Sq * Hq * d,
// unless deterministic.
// Large logits: P = exp2(S scale log2e - LSE log2e) <= 1 is clamped at exponent 0; an FMA there,
// or an LSE rounded to float32, can put the exponent above 0 by an ulp of LSE, which past
// |LSE| ~ 2^24 overflowed ex2.
// Limits: f16/bf16; head_dim any multiple of 8 up to 256, run in the tile 64, 128 or 256 that
// holds it (BwdHeadDims; columns past head_dim zero-filled on load, never stored or added); tile
// 256 takes 64-key blocks (dK + dV of 128 keys x 256 over 8 warps would need 256 registers per
// thread) and 209 KiB of shared memory (sm_90 only); any seq >= 1; rows whose LSE is -inf (no
// visible key) get dQ = 0.
// Varlen (cu_seqlens, packed THD; issue 30): the main and dQ kernels run their window
// instantiations (kLocal), whose blocks read their sequence through seq_of (common/shape.hpp): its
// lengths, first rows and LSE/D rows; a block past its sequence's keys (main) or queries (dQ)
// returns at once. The preprocess and the dQ conversion see the packed rows as one dense sequence
// of total_q queries (run_bwd), so D is [Hq, total_q] like the varlen LSE. A sequence without
// queries gets dK = dV = 0 (its blocks have no query tile); one without keys, dQ = 0 (its rows
// are never added to, or, deterministic, its dQ blocks see no key tile).
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/implementation.hpp"
#include "common/capabilities.hpp"
#include "common/workspace.hpp"
// Angle brackets: found through the include path, so that the CPU emulation build
// (impls/cuda/mma/emulation) can put its own mma/ptx.cuh and mma/host.cuh first.
#include <mma/host.cuh>
#include <mma/params.cuh>
#include <mma/tile.cuh>
#include <mma/traits.cuh>

namespace attn_mma {
namespace {

constexpr float kInf = __builtin_huge_valf();
using attnbench::cuda::kLog2e;  // common/shape.hpp

// The tensors' row length, head_dim (<= 256), read through 16 bits: ptxas then knows it is not
// negative, and the 64-bit index math (row * dh) needs no sign extension, as with MmaParams'
// former 16-bit head_dim field (issue 25: the padded kernels were 1-3 instructions longer). The dQ
// kernel keeps the plain int: through 16 bits it would take 3-4 more registers.
__device__ __forceinline__ int tensor_cols(const MmaParams& p) {
  return static_cast<uint16_t>(p.head_dim);
}

// LSE (natural log) -> the log2-domain offset of P = exp2(S * scale_log2 - offset). A row that
// sees no key has LSE = -inf; +inf makes its P exactly 0 instead of NaN.
__device__ __forceinline__ float lse_to_log2(float lse) {
  return lse == -kInf ? kInf : lse * kLog2e;
}

// P = exp2(s * scale_log2 - lse2), its exponent clamped at 0 (P <= 1; see the header).
__device__ __forceinline__ float prob(float s, float scale_log2, float lse2) {
  return exp2_approx(fminf(fmaf(s, scale_log2, -lse2), 0.f));
}

// ---- 1. preprocess ------------------------------------------------------------------------------
// One row (b, i, h) per D/8 lanes, 8 elements per lane (lanes past head_dim idle).
// grid: ceil(rows * D/8 / 256), 256 threads.
template <class T, int D, bool kPadded>
__global__ void __launch_bounds__(256) bwd_preprocess_mma_kernel(const MmaParams p) {
  constexpr int kLanes = D / 8;
  const int dh = kPadded ? tensor_cols(p) : D;
  static_assert(kLanes <= 32 && (kLanes & (kLanes - 1)) == 0, "a row within one warp");
  const int64_t rows = static_cast<int64_t>(p.batch) * p.seq_q * p.heads_q;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
  const int64_t row = gid / kLanes;  // BSH order: row = (b * Sq + i) * Hq + h
  const int col = static_cast<int>(gid % kLanes) * 8;
  float acc = 0.f;
  if (row < rows && (!kPadded || col < dh)) {
    const uint4 a = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + row * dh + col);
    const uint4 c = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.o) + row * dh + col);
    const uint32_t av[4] = {a.x, a.y, a.z, a.w}, cv[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 x = Elem<T>::unpack2(av[i]), y = Elem<T>::unpack2(cv[i]);
      acc += x.x * y.x + x.y * y.y;
    }
    if (p.dq_accum) {
      float4* z = reinterpret_cast<float4*>(p.dq_accum + row * dh + col);
      z[0] = make_float4(0.f, 0.f, 0.f, 0.f);
      z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  acc = group_sum<kLanes>(acc);  // every lane takes part: rows never straddle a warp
  if (row < rows && col == 0) {
    const int h = static_cast<int>(row % p.heads_q);
    const int64_t bi = row / p.heads_q;
    const int i = static_cast<int>(bi % p.seq_q);
    const int64_t b = bi / p.seq_q;
    p.delta[(b * p.heads_q + h) * p.seq_q + i] = acc;
  }
}

// ---- 2. main kernel ----------------------------------------------------------------------------
// grid (ceil(Skv / kBlockN), Hkv, B), kThreads threads, kSmemBytes of dynamic shared memory. Per
// (query head, query tile) pair: S = Q K^T and dP = dO V^T in kSdpRows x kSdpCols warp tiles,
// P = exp2(S scale log2e - LSE log2e), dS = P (dP - D); P and dS to shared memory ([query][key]);
// then dQ = dS K (float32 atomics), dV += P^T dO, dK += dS^T Q, with dK, dV in registers.
// kLocal: a sliding window (var; causal folded into it, kCausal false): only the query tiles that
// see a key of the block run. kSoftcap: P from t = tanh(q.k * softcap_in) with softcap * log2(e),
// and dS carries the capped logit's factor 1 - t^2 (scale is applied to dQ and dK as always).
template <class T, class Cfg, bool kPadded, bool kCausal, bool kLocal, bool kSoftcap>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    flash_bwd_mma_kernel(const MmaParams p, const attnbench::cuda::AttnVariant var) {
  constexpr int D = Cfg::kHeadDim, BN = Cfg::kBlockN, BM = Cfg::kBlockM;
  const int dh = kPadded ? tensor_cols(p) : D;  // columns of the tensors
  constexpr int kThreads = Cfg::kThreads;
  constexpr int kSM = Cfg::kSdpRows / 16, kSN = Cfg::kSdpCols / 8;  // S, dP warp fragments
  constexpr int kKM = Cfg::kDkvRows / 16, kKN = Cfg::kDkvCols / 8;  // dK, dV warp fragments
  constexpr int kQM = Cfg::kDqRows / 16, kQN = Cfg::kDqCols / 8;    // dQ warp fragments
  using KTile = SmemTile<BN, D>;                                    // K, V: [key][d]
  using QTile = SmemTile<BM, D>;                                    // Q, dO: [query][d]
  using PTile = SmemTile<BM, BN>;                                   // P, dS: [query][key]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_block = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int n0 = n_block * BN;
  // Varlen (kLocal only; common/shape.hpp): the block's sequence b, its lengths, causal offset,
  // first query and key rows in the packed tensors, and its LSE (and D) rows; a block past its
  // sequence's keys has no dK, dV row. The dense kernels read the shape's values, each where it
  // read them before varlen (kLocal ? sequence : shape), so that their code is unchanged. Rows
  // are int (dense: batch * seq < 2^31, supports_extra; varlen: int32 prefix sums).
  [[maybe_unused]] attnbench::cuda::SeqView sv{};
  if constexpr (kLocal) {
    sv = attnbench::cuda::seq_of(p, var, b);
    if (n0 >= sv.seq_kv) return;
  }
  // (Read at each use, as the dense kernels read the shape before: a local copy hoisted out of
  // the loop changes their code.)
  auto seq_q = [&] { return kLocal ? sv.seq_q : p.seq_q; };
  auto seq_kv = [&] { return kLocal ? sv.seq_kv : p.seq_kv; };
  auto causal_offset = [&] { return kLocal ? sv.causal_offset : p.causal_offset; };
  auto q_row0 = [&] { return kLocal ? static_cast<int>(sv.q_start) : b * seq_q(); };
  const int keys_valid = seq_kv() - n0;
  const int64_t q_stride = static_cast<int64_t>(p.heads_q) * dh;
  const int64_t kv_stride = static_cast<int64_t>(p.heads_kv) * dh;
  auto kv_offset = [&] {
    return static_cast<int64_t>((kLocal ? static_cast<int>(sv.kv_start) : b * seq_kv()) + n0) *
               kv_stride +
           kvh * dh;
  };

  // Query rows [first row of tile m_begin, m_stop) see a key of the block: row i sees key j iff
  // j - offset - window_right <= i <= j - offset + window_left.
  int m_begin = kCausal ? max(0, n0 - causal_offset()) / BM : 0;
  int m_stop = seq_q();
  if constexpr (kLocal) {
    m_begin = max(0, n0 - causal_offset() - var.window_right) / BM;
    m_stop = max(0, min(seq_q(), n0 + BN - causal_offset() + var.window_left));
  }
  const int m_tiles = (m_stop + BM - 1) / BM;
  const int tiles_per_head = max(0, m_tiles - m_begin);
  const int total = tiles_per_head * p.group;

  const uint32_t smem = smem_u32(dynamic_smem());
  const KTile sK{smem}, sV{smem + KTile::kBytes};
  const uint32_t q_base = smem + 2 * KTile::kBytes;
  const uint32_t do_base = q_base + 2 * QTile::kBytes;
  const PTile sP{do_base + 2 * QTile::kBytes}, sdS{sP.base + PTile::kBytes};
  const uint32_t lse_base = sdS.base + PTile::kBytes;
  const uint32_t delta_base = lse_base + 2 * BM * 4;

  auto load_q_tile = [&](int h, int m0, int stage) {
    const int64_t q_off = static_cast<int64_t>(q_row0() + m0) * q_stride + h * dh;
    const uint32_t qs = static_cast<uint32_t>(stage) * QTile::kBytes;
    load_tile_async<kThreads, kPadded>(QTile{q_base + qs}, static_cast<const T*>(p.q) + q_off,
                                       q_stride, seq_q() - m0, tid, dh);
    load_tile_async<kThreads, kPadded>(QTile{do_base + qs}, static_cast<const T*>(p.dout) + q_off,
                                       q_stride, seq_q() - m0, tid, dh);
    const int64_t l_off =
        kLocal ? sv.lse_row(h) + m0 : static_cast<int64_t>(b * p.heads_q + h) * seq_q() + m0;
    const uint32_t ls = static_cast<uint32_t>(stage) * BM * 4;
    load_vec_async<kThreads, BM>(lse_base + ls, p.lse + l_off, seq_q() - m0, tid);
    load_vec_async<kThreads, BM>(delta_base + ls, p.delta + l_off, seq_q() - m0, tid);
  };

  load_tile_async<kThreads, kPadded>(sK, static_cast<const T*>(p.k) + kv_offset(), kv_stride,
                                     keys_valid, tid, dh);
  load_tile_async<kThreads, kPadded>(sV, static_cast<const T*>(p.v) + kv_offset(), kv_stride,
                                     keys_valid, tid, dh);
  int h = kvh * p.group, m0 = m_begin * BM;
  if (total > 0) load_q_tile(h, m0, 0);
  cp_async_commit();

  // Warp roles. S, dP: query rows [sm * kSdpRows, ...), keys [sn * kSdpCols, ...).
  const int sm = warp % Cfg::kSdpWarpsM, sn = warp / Cfg::kSdpWarpsM;
  // dK, dV: keys [kn * kDkvRows, ...), d columns [kd * kDkvCols, ...).
  const int kn = warp % Cfg::kDkvWarpsN, kd = warp / Cfg::kDkvWarpsN;
  // dQ: query rows [qm * kDqRows, ...), d columns [qd * kDqCols, ...).
  const int qm = warp % Cfg::kDqWarpsM, qd = warp / Cfg::kDqWarpsM;
  constexpr uint32_t kDoOff = 2 * QTile::kBytes;  // dO ring - Q ring

  // ldmatrix cursors (stage 0 of the Q/dO ring; stage 1 is + QTile::kBytes).
  const LdsmPtr pq_a = ldsm_p1(QTile{q_base}, sm * Cfg::kSdpRows, 0, lane);  // A: Q / dO rows
  const LdsmPtr pk_b = ldsm_p2(sK, sn * Cfg::kSdpCols, 0, lane);  // B[n = key][k = d]; V: + kBytes
  const LdsmPtr ppt_a =
      ldsm_p2(sP, 0, kn * Cfg::kDkvRows, lane);  // A^T: P[query][key]; dS: + kBytes
  const LdsmPtr pq_b = ldsm_p1(QTile{q_base}, 0, kd * Cfg::kDkvCols, lane);  // B[k = query][n = d]
  const LdsmPtr pds_a = ldsm_p1(sdS, qm * Cfg::kDqRows, 0, lane);            // A: dS[query][key]
  const LdsmPtr pk_t = ldsm_p1(sK, 0, qd * Cfg::kDqCols, lane);              // B[k = key][n = d]

  float dk_acc[kKM][kKN][4], dv_acc[kKM][kKN][4];
  zero(dk_acc);
  zero(dv_acc);
  const float sl2 = kSoftcap ? var.softcap_log2 : p.scale_log2;
  const int srow = sm * Cfg::kSdpRows + (lane >> 2);  // local query row of C rows g (+8, +16 mt)
  const int skey = n0 + sn * Cfg::kSdpCols + 2 * (lane & 3);  // key of C column 2t (+1, +8 nt)

  for (int it = 0; it < total; ++it) {
    const int stage = it & 1;
    cp_async_wait<0>();
    // Pair `it` is visible to all threads; every warp is done with pair it-1 (its ring stage,
    // which the prefetch overwrites, and P, dS).
    __syncthreads();
    // Pair it + 1, stepped without divisions.
    int h_next = h, m_next = m0 + BM;
    if (m_next >= m_stop) {
      m_next = m_begin * BM;
      ++h_next;
    }
    if (it + 1 < total) {
      load_q_tile(h_next, m_next, stage ^ 1);
      cp_async_commit();
    }
    const uint32_t qs = static_cast<uint32_t>(stage) * QTile::kBytes;
    const uint32_t ls = lse_base + static_cast<uint32_t>(stage) * BM * 4;
    const uint32_t ds = delta_base + static_cast<uint32_t>(stage) * BM * 4;

    bool need_mask =
        keys_valid < BN || m0 + BM > seq_q() || (kCausal && m0 + causal_offset() < n0 + BN - 1);
    if constexpr (kLocal) {
      need_mask =
          need_mask || attnbench::cuda::window_crosses(var, m0 + causal_offset(),
                                                       m0 + BM - 1 + causal_offset(), n0, BN);
    }
    // S = Q K^T and dP = dO V^T for this warp's tile.
    float s[kSM][kSN][4], dp[kSM][kSN][4];
    zero(s);
    gemm_ss_nt<T, QTile, KTile, D / 16>(s, LdsmPtr(pq_a, qs), pk_b);
    zero(dp);
    gemm_ss_nt<T, QTile, KTile, D / 16>(dp, LdsmPtr(pq_a, qs + kDoOff),
                                        LdsmPtr(pk_b, KTile::kBytes));
#pragma unroll
    for (int mt = 0; mt < kSM; ++mt) {
      const int r0 = srow + 16 * mt;
      const float l0 = lse_to_log2(ld_shared_f32(ls + 4 * r0));
      const float l1 = lse_to_log2(ld_shared_f32(ls + 4 * (r0 + 8)));
      const float d0 = ld_shared_f32(ds + 4 * r0), d1 = ld_shared_f32(ds + 4 * (r0 + 8));
#pragma unroll
      for (int nt = 0; nt < kSN; ++nt) {
        float* c = s[mt][nt];
        float dcap[4];  // soft cap: 1 - t^2, the capped logit's derivative (over scale)
        if constexpr (kSoftcap) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            c[e] = tanh_fast(c[e] * var.softcap_in);
            dcap[e] = 1.f - c[e] * c[e];
          }
        }
        c[0] = prob(c[0], sl2, l0);
        c[1] = prob(c[1], sl2, l0);
        c[2] = prob(c[2], sl2, l1);
        c[3] = prob(c[3], sl2, l1);
        // Zero P where the key is past seq_kv, the query past seq_q, or the pair is causally
        // masked; only tiles that reach a tail or cross the diagonal need it.
        if (need_mask) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = skey + nt * 8 + (e & 1);
            const int query = m0 + r0 + (e >= 2 ? 8 : 0);
            bool hidden =
                key >= seq_kv() || query >= seq_q() || (kCausal && key > query + causal_offset());
            if constexpr (kLocal)
              hidden = hidden || attnbench::cuda::window_hides(var, query + causal_offset(), key);
            if (hidden) c[e] = 0.f;
          }
        }
        // dS = P (dP - D), with P rounded to the dtype as it is stored (and as the same-dtype
        // naive implementation uses it).
        const float2 p01 = Elem<T>::unpack2(Elem<T>::pack2(c[0], c[1]));
        const float2 p23 = Elem<T>::unpack2(Elem<T>::pack2(c[2], c[3]));
        float* g = dp[mt][nt];
        g[0] = p01.x * (g[0] - d0);
        g[1] = p01.y * (g[1] - d0);
        g[2] = p23.x * (g[2] - d1);
        g[3] = p23.y * (g[3] - d1);
        if constexpr (kSoftcap) {
#pragma unroll
          for (int e = 0; e < 4; ++e) g[e] *= dcap[e];
        }
      }
      store_c<T, kSN>(sP, sm * Cfg::kSdpRows + 16 * mt, sn * Cfg::kSdpCols, s[mt], lane);
      store_c<T, kSN>(sdS, sm * Cfg::kSdpRows + 16 * mt, sn * Cfg::kSdpCols, dp[mt], lane);
    }
    __syncthreads();  // P and dS of the whole block are in shared memory

    // dQ += dS K over this block's keys, added into the float32 accumulator. First, so that the
    // reductions drain while the dK/dV products run.
    if (p.dq_accum != nullptr) {
      float dq[kQM][kQN][4];
      zero(dq);
      gemm_ss_nn<T, PTile, KTile, BN / 16>(dq, pds_a, pk_t);
#pragma unroll
      for (int mt = 0; mt < kQM; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int row = m0 + qm * Cfg::kDqRows + 16 * mt + (lane >> 2) + 8 * hf;
          if (row < seq_q()) {
            const int col = qd * Cfg::kDqCols + 2 * (lane & 3);
            float* acc =
                p.dq_accum + static_cast<int64_t>(q_row0() + row) * q_stride + h * dh + col;
#pragma unroll
            for (int nt = 0; nt < kQN; ++nt) {
              if (!kPadded || col + nt * 8 < dh)
                atomic_add_f32x2(acc + nt * 8, dq[mt][nt][2 * hf], dq[mt][nt][2 * hf + 1]);
            }
          }
        }
    }
    // dV += P^T dO, dK += dS^T Q.
    gemm_ss_tn<T, PTile, QTile, BM / 16>(dv_acc, ppt_a, LdsmPtr(pq_b, qs + kDoOff));
    gemm_ss_tn<T, PTile, QTile, BM / 16>(dk_acc, LdsmPtr(ppt_a, PTile::kBytes), LdsmPtr(pq_b, qs));
    h = h_next;
    m0 = m_next;
  }

  // Epilogue: dK (times scale) and dV through shared memory (the K and V tiles), then
  // kEpilogueRows rows per warp with 16-byte stores. Rows past seq_kv are not stored.
  cp_async_wait<0>();  // (total == 0: the K/V loads were never waited for)
  __syncthreads();     // every warp is done reading K and V
#pragma unroll
  for (int mt = 0; mt < kKM; ++mt) {
#pragma unroll
    for (int nt = 0; nt < kKN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk_acc[mt][nt][e] *= p.scale;
    store_c<T, kKN>(sK, kn * Cfg::kDkvRows + 16 * mt, kd * Cfg::kDkvCols, dk_acc[mt], lane);
    store_c<T, kKN>(sV, kn * Cfg::kDkvRows + 16 * mt, kd * Cfg::kDkvCols, dv_acc[mt], lane);
  }
  __syncthreads();
  constexpr int kER = Cfg::kEpilogueRows;
  const int64_t off = kv_offset() + static_cast<int64_t>(warp) * kER * kv_stride;
  store_rows_warp<kER, kPadded>(sK, warp * kER, static_cast<T*>(p.dk) + off, kv_stride,
                                keys_valid - warp * kER, lane, dh);
  store_rows_warp<kER, kPadded>(sV, warp * kER, static_cast<T*>(p.dv) + off, kv_stride,
                                keys_valid - warp * kER, lane, dh);
}

// ---- 3a. dQ accumulator -> dtype ----------------------------------------------------------------
// n8: elements / 8. Grid-stride.
template <class T>
__global__ void __launch_bounds__(256)
    dq_convert_kernel(const float* acc, T* dq, int64_t n8, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n8;
       i += static_cast<int64_t>(gridDim.x) * 256) {
    const float4 a = reinterpret_cast<const float4*>(acc)[2 * i];
    const float4 c = reinterpret_cast<const float4*>(acc)[2 * i + 1];
    uint4 out;
    out.x = Elem<T>::pack2(a.x * scale, a.y * scale);
    out.y = Elem<T>::pack2(a.z * scale, a.w * scale);
    out.z = Elem<T>::pack2(c.x * scale, c.y * scale);
    out.w = Elem<T>::pack2(c.z * scale, c.w * scale);
    reinterpret_cast<uint4*>(dq)[i] = out;
  }
}

// ---- 3b. deterministic dQ kernel ----------------------------------------------------------------
// grid (ceil(Sq / kDqBlockM), Hq, B), kDqThreads threads. Warp w owns query rows [16 w, 16 w + 16)
// of the block and loops over the visible key tiles (2-stage ring): S = Q K^T, P from LSE,
// dP = dO V^T, dS = P (dP - D), dQ += dS K with dS taken from the accumulators.
// kLocal, kSoftcap: as the main kernel's (only the key tiles the block's rows see run).
template <class T, class Tr, bool kPadded, bool kCausal, bool kLocal, bool kSoftcap>
__global__ void __launch_bounds__(Tr::kDqThreads, Tr::kDqMinBlocksPerSm)
    flash_bwd_mma_dq_kernel(const MmaParams p, const attnbench::cuda::AttnVariant var) {
  constexpr int D = Tr::kHeadDim, BM = Tr::kDqBlockM, BN = Tr::kDqBlockN;
  const int dh = kPadded ? p.head_dim : D;
  constexpr int kThreads = Tr::kDqThreads;
  constexpr int kSN = BN / 8, kDN = D / 8;
  using QTile = SmemTile<BM, D>;
  using KTile = SmemTile<BN, D>;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m_block = kCausal ? static_cast<int>(gridDim.x - 1 - blockIdx.x) : blockIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, kvh = h / p.group;
  const int m0 = m_block * BM;
  // The block's sequence, as in the forward kernel.
  [[maybe_unused]] attnbench::cuda::SeqView sv{};
  if constexpr (kLocal) {
    sv = attnbench::cuda::seq_of(p, var, b);
    if (m0 >= sv.seq_q) return;
  }
  const int seq_q = kLocal ? sv.seq_q : p.seq_q;
  const int rows_valid = seq_q - m0;
  const int warp_row0 = warp * 16;
  const int64_t q_stride = static_cast<int64_t>(p.heads_q) * dh;
  const int64_t kv_stride = static_cast<int64_t>(p.heads_kv) * dh;
  const int64_t q_off = ((kLocal ? sv.q_start : static_cast<int64_t>(b) * seq_q) + m0) * q_stride +
                        static_cast<int64_t>(h) * dh;
  const int seq_kv = kLocal ? sv.seq_kv : p.seq_kv;
  const int64_t kv_off =
      (kLocal ? sv.kv_start * kv_stride : static_cast<int64_t>(b) * seq_kv * kv_stride) +
      static_cast<int64_t>(kvh) * dh;
  const T* k = static_cast<const T*>(p.k) + kv_off;
  const T* v = static_cast<const T*>(p.v) + kv_off;
  T* dq_out = static_cast<T*>(p.dq) + q_off;

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
  if (n_tiles == 0) {  // no row sees a key: dQ = 0
    for (int c = tid; c < BM * (D / 8); c += kThreads) {
      const int row = c / (D / 8), col = (c % (D / 8)) * 8;
      if (row < rows_valid && (!kPadded || col < dh))
        *reinterpret_cast<uint4*>(dq_out + row * q_stride + col) = uint4{0, 0, 0, 0};
    }
    return;
  }

  // Per thread: rows g and g + 8 of its warp. Rows past seq_q get P = 0.
  float lse2[2], dlt[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int r = m0 + warp_row0 + (lane >> 2) + 8 * hf;
    const int64_t idx =
        kLocal ? sv.lse_row(h) + r : (static_cast<int64_t>(b) * p.heads_q + h) * seq_q + r;
    lse2[hf] = r < seq_q ? lse_to_log2(p.lse[idx]) : kInf;
    dlt[hf] = r < seq_q ? p.delta[idx] : 0.f;
  }

  const uint32_t smem = smem_u32(dynamic_smem());
  const QTile sQ{smem}, sdO{smem + QTile::kBytes};
  const uint32_t k_base = smem + 2 * QTile::kBytes;
  const uint32_t v_base = k_base + 2 * KTile::kBytes;

  load_tile_async<kThreads, kPadded>(sQ, static_cast<const T*>(p.q) + q_off, q_stride, rows_valid,
                                     tid, dh);
  load_tile_async<kThreads, kPadded>(sdO, static_cast<const T*>(p.dout) + q_off, q_stride,
                                     rows_valid, tid, dh);
  const int nf = j_first * BN;
  load_tile_async<kThreads, kPadded>(KTile{k_base}, k + nf * kv_stride, kv_stride, seq_kv - nf, tid,
                                     dh);
  load_tile_async<kThreads, kPadded>(KTile{v_base}, v + nf * kv_stride, kv_stride, seq_kv - nf, tid,
                                     dh);
  cp_async_commit();

  const LdsmPtr pq = ldsm_p1(sQ, warp_row0, 0, lane);       // A: this warp's Q rows
  const LdsmPtr pdo = ldsm_p1(sdO, warp_row0, 0, lane);     // A: this warp's dO rows
  const LdsmPtr pk_n = ldsm_p2(KTile{k_base}, 0, 0, lane);  // B[n = key][k = d]
  const LdsmPtr pk_t = ldsm_p1(KTile{k_base}, 0, 0, lane);  // B[k = key][n = d]
  constexpr uint32_t kVOff = 2 * KTile::kBytes;             // V ring - K ring

  float dq[1][kDN][4];
  zero(dq);
  const float sl2 = kSoftcap ? var.softcap_log2 : p.scale_log2;

  for (int j = 0; j < n_tiles; ++j) {
    const int n0 = (j_first + j) * BN;
    cp_async_wait<0>();
    __syncthreads();
    if (j + 1 < n_tiles) {
      const int n1 = n0 + BN;
      const uint32_t st = static_cast<uint32_t>((j + 1) & 1) * KTile::kBytes;
      load_tile_async<kThreads, kPadded>(KTile{k_base + st}, k + n1 * kv_stride, kv_stride,
                                         seq_kv - n1, tid, dh);
      load_tile_async<kThreads, kPadded>(KTile{v_base + st}, v + n1 * kv_stride, kv_stride,
                                         seq_kv - n1, tid, dh);
      cp_async_commit();
    }
    const uint32_t st = static_cast<uint32_t>(j & 1) * KTile::kBytes;

    float s[1][kSN][4];
    zero(s);
    gemm_ss_nt<T, QTile, KTile, D / 16>(s, pq, LdsmPtr(pk_n, st));
    [[maybe_unused]] float dcap[kSN][4];  // soft cap: 1 - t^2
#pragma unroll
    for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if constexpr (kSoftcap) {
          s[0][nt][e] = tanh_fast(s[0][nt][e] * var.softcap_in);
          dcap[nt][e] = 1.f - s[0][nt][e] * s[0][nt][e];
        }
        s[0][nt][e] = prob(s[0][nt][e], sl2, lse2[e >> 1]);
      }
    const int coff = kLocal ? sv.causal_offset : p.causal_offset;
    const int diag = m0 + coff;
    bool need_mask = n0 + BN > seq_kv || (kCausal && n0 + BN - 1 > diag);
    if constexpr (kLocal)
      need_mask = need_mask || attnbench::cuda::window_crosses(var, diag, diag + BM - 1, n0, BN);
    if (need_mask) {
#pragma unroll
      for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = m0 + warp_row0 + (lane >> 2) + (e >= 2 ? 8 : 0);
          const int col = n0 + nt * 8 + 2 * (lane & 3) + (e & 1);
          bool hidden = col >= seq_kv || (kCausal && col > row + coff);
          if constexpr (kLocal)
            hidden = hidden || attnbench::cuda::window_hides(var, row + coff, col);
          if (hidden) s[0][nt][e] = 0.f;
        }
    }

    float dp[1][kSN][4];
    zero(dp);
    gemm_ss_nt<T, QTile, KTile, D / 16>(dp, pdo, LdsmPtr(pk_n, st + kVOff));
#pragma unroll
    for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        dp[0][nt][e] = s[0][nt][e] * (dp[0][nt][e] - dlt[e >> 1]);
        if constexpr (kSoftcap) dp[0][nt][e] *= dcap[nt][e];
      }

    uint32_t da[1][kSN / 2][4];
    c_to_a<T>(dp, da);
    gemm_rs_nn<T, KTile>(dq, da, LdsmPtr(pk_t, st));
  }

  // Epilogue: dQ * scale through this warp's own Q rows in shared memory.
#pragma unroll
  for (int nt = 0; nt < kDN; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[0][nt][e] *= p.scale;
  __syncwarp();
  store_c<T, kDN>(sQ, warp_row0, 0, dq[0], lane);
  __syncwarp();
  store_rows_warp<16, kPadded>(sQ, warp_row0, dq_out + warp_row0 * q_stride, q_stride,
                               rows_valid - warp_row0, lane, dh);
}

// ---- host ---------------------------------------------------------------------------------------

using attnbench::Capabilities;
using attnbench::Device;
using attnbench::DType;
using attnbench::Options;
using attnbench::Pass;
using attnbench::Problem;
using attnbench::Support;

std::size_t delta_bytes(const Problem& p) {
  return attnbench::cuda::align_up(static_cast<std::size_t>(p.lse_elems()) * 4);
}
std::size_t dq_accum_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.q_elems()) * 4;
}
bool deterministic(const Options& o) {
  return attnbench::option_or(&o, "deterministic", 0) != 0;
}

template <class T, int D, bool kPadded, bool kCausal, bool kLocal, bool kSoftcap>
void run_bwd(const MmaParams& p, const attnbench::cuda::AttnVariant& var, bool det, void* stream) {
  using Tr = BwdTraits<D>;
  // Varlen: the packed rows [total_q, heads_q] are those of a dense batch of one sequence of
  // total_q queries, whose D = rowsum(dO * O) layout [1, heads_q, total_q] is the varlen LSE's
  // [heads_q, total_q]: the preprocess (D, and the dQ accumulator zeroed) and the dQ conversion
  // run on that view, unchanged.
  MmaParams pre = p;
  if (var.cu_seqlens_q != nullptr) {
    pre.batch = 1;
    pre.seq_q = var.total_q;
  }
  const int64_t rows = static_cast<int64_t>(pre.batch) * pre.seq_q * pre.heads_q;
  const int64_t pre_threads = rows * (D / 8);
  launch(bwd_preprocess_mma_kernel<T, D, kPadded>,
         dim3(static_cast<unsigned>((pre_threads + 255) / 256)), dim3(256), 0, stream, pre);
  using Main = typename Tr::Main;
  const dim3 grid((p.seq_kv + Main::kBlockN - 1) / Main::kBlockN, p.heads_kv, p.batch);
  launch(flash_bwd_mma_kernel<T, Main, kPadded, kCausal, kLocal, kSoftcap>, grid,
         dim3(Main::kThreads), Main::kSmemBytes, stream, p, var);
  if (det) {
    using Dq = typename Tr::Dq;
    const dim3 grid_dq((p.seq_q + Dq::kDqBlockM - 1) / Dq::kDqBlockM, p.heads_q, p.batch);
    launch(flash_bwd_mma_dq_kernel<T, Dq, kPadded, kCausal, kLocal, kSoftcap>, grid_dq,
           dim3(Dq::kDqThreads), Dq::kDqSmemBytes, stream, p, var);
  } else {
    const int64_t n8 = rows * p.head_dim / 8;
    const int64_t blocks = std::min<int64_t>((n8 + 255) / 256, 132 * 16);
    launch(dq_convert_kernel<T>, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream,
           static_cast<const float*>(p.dq_accum), static_cast<T*>(p.dq), n8, p.scale);
  }
}

class FlashBwdMma final : public attnbench::Implementation {
 public:
  std::string name() const override { return "cuda.flash_bwd_mma"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-2 backward: mma.sync, key-parallel dK/dV, dQ by atomics "
           "(or a dQ kernel: deterministic=1)";
  }
  Capabilities capabilities() const override {
    Capabilities c = attnbench::cuda::tensor_core_capabilities<BwdHeadDims>(false, true);
    c.fwd_partner = "cuda.flash_fwd_mma";
    c.options = {"deterministic"};
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    return c;
  }

  // f(T{}, IntTag<D>{}, padded, causal, local, softcap) for the problem: dtype, head_dim tile,
  // padding, causal, window, soft cap. The variants (window, soft cap) run the padded kernels for
  // every head_dim (their column tests cost little beside the masks), which halves what they add
  // to this file's compile time.
  template <class F>
  static void dispatch(const Problem& pr, F&& f) {
    dispatch_mma<BwdHeadDims>(pr, [&](auto e, auto d, auto padded, auto causal) {
      attnbench::cuda::dispatch_variant<decltype(causal)::value>(pr, [&](auto c, auto l, auto sc) {
        constexpr bool kVariant = decltype(l)::value || decltype(sc)::value;
        f(e, d, std::bool_constant < kVariant || decltype(padded)::value > {}, c, l, sc);
      });
    });
  }

  Support supports_options(const Problem&, Pass, const Options& o) const override {
    return attnbench::cuda::check_flag_option(o, "deterministic");
  }

  Support supports_extra(const Problem& p, Pass) const override {
    if (p.heads_q > 65535 || p.batch > 65535) {
      return Support::no("heads_q and batch must be <= 65535 (grid y/z)");
    }
    if (static_cast<int64_t>(p.batch) * std::max(p.seq_q, p.seq_kv) >= (int64_t{1} << 31)) {
      return Support::no("batch * seq must stay below 2^31 (32-bit row indices)");
    }
    std::string why;
    const int smem = max_smem_per_block(why);
    if (smem < 0) return Support::no(why);
    const int need = BwdHeadDims::dispatch(p.head_dim, [](auto d) {
      using Tr = BwdTraits<d.value>;
      return std::max(Tr::Main::kSmemBytes, Tr::Dq::kDqSmemBytes);
    });
    if (smem < need) {
      return Support::no("needs " + std::to_string(need) +
                         " bytes of shared memory per block (head_dim tile " +
                         std::to_string(BwdHeadDims::tile(p.head_dim)) + "), the device allows " +
                         std::to_string(smem));
    }
    return Support::yes();
  }

  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options& o) const override {
    if (pass == Pass::fwd) return 0;
    return delta_bytes(p) + (deterministic(o) ? 0 : dq_accum_bytes(p));
  }

  void prepare(const Problem& p, Pass pass, const Options&) const override {
    if (pass == Pass::fwd) return;
    dispatch(p, [&](auto e, auto d, auto padded, auto c, auto l, auto sc) {
      using T = typename decltype(e)::type;
      using Tr = BwdTraits<d.value>;
      set_dynamic_smem(flash_bwd_mma_kernel<T, typename Tr::Main, padded, c, l, sc>,
                       Tr::Main::kSmemBytes);
      set_dynamic_smem(flash_bwd_mma_dq_kernel<T, typename Tr::Dq, padded, c, l, sc>,
                       Tr::Dq::kDqSmemBytes);
    });
  }

  void backward(const attnbench::BwdArgs& a) const override {
    const Problem& pr = a.p;
    const bool det = a.options != nullptr && deterministic(*a.options);
    const std::size_t need = delta_bytes(pr) + (det ? 0 : dq_accum_bytes(pr));
    if (a.workspace_bytes < need || (need > 0 && a.workspace == nullptr)) {
      throw std::invalid_argument("cuda.flash_bwd_mma: workspace of " +
                                  std::to_string(a.workspace_bytes) + " bytes, needs " +
                                  std::to_string(need));
    }
    for (const void* ptr : {a.q, a.k, a.v, a.o, a.dout, static_cast<const void*>(a.dq),
                            static_cast<const void*>(a.dk), static_cast<const void*>(a.dv),
                            static_cast<const void*>(a.workspace)}) {
      if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0) {
        throw std::invalid_argument("cuda.flash_bwd_mma: tensors must be 16-byte aligned");
      }
    }
    MmaParams p = make_params(pr);
    p.q = a.q;
    p.k = a.k;
    p.v = a.v;
    p.o = const_cast<void*>(a.o);       // read only here
    p.lse = const_cast<float*>(a.lse);  // likewise
    p.dout = a.dout;
    p.dq = a.dq;
    p.dk = a.dk;
    p.dv = a.dv;
    p.delta = static_cast<float*>(a.workspace);
    p.dq_accum =
        det ? nullptr
            : reinterpret_cast<float*>(static_cast<unsigned char*>(a.workspace) + delta_bytes(pr));
    const attnbench::cuda::AttnVariant var = attnbench::cuda::make_variant(a);
    dispatch(pr, [&](auto e, auto d, auto padded, auto c, auto l, auto sc) {
      run_bwd<typename decltype(e)::type, d.value, padded, c, l, sc>(p, var, det, a.stream);
    });
  }
};

}  // namespace
}  // namespace attn_mma

ATTNBENCH_REGISTER(attn_mma::FlashBwdMma)
