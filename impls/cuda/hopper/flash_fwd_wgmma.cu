// cuda.flash_fwd_wgmma — FlashAttention-3-class forward for Hopper (sm_90a): TMA loads, wgmma,
// warp specialization.
//
// Algorithm: a block owns kConsumers * 64 query rows of one (batch, head). Warpgroup 0 is the
// producer: one thread issues TMA copies of the block's Q tile (each consumer's 64 rows on their
// own mbarrier, K_0 right after the first consumer's: option q_split, forward step 22) and of each
// visible K and V tile (kBlockN keys; K one tile ahead of V, the order the consumers use them:
// option k_ahead, forward step 18) into a kStages-deep ring of 128B-swizzled shared-memory
// stages, each completing on a "full" mbarrier; it drops to 24 registers (setmaxnreg). Each
// consumer warpgroup (up to 240 registers) owns 64 query rows and runs, per K/V tile j:
//   S_j = Q K_j^T      SS-wgmma (Q and K K-major in shared memory), float32 accumulators;
//   O  += P_{j-1} V_{j-1}  RS-wgmma (P from registers, V MN-major), issued right behind S_j;
//   the online softmax of S_j (log2 domain, scale * log2(e) folded into one FFMA before ex2)
//   runs while that P V product is still on the tensor cores; O is rescaled once it lands (d256:
//   under the next S GEMM instead). At d <= 128 the consumers take turns issuing their GEMMs
//   (pingpong, named barriers), so one warpgroup's softmax overlaps the others' GEMMs.
// A consumer frees a stage by arriving on its "empty" mbarrier once its wgmma reading it has
// completed; the producer waits on it before reusing the stage. The epilogue divides O by the row
// sums, writes it through the warpgroup's own (now idle) Q stage in shared memory with one TMA
// store per 64-column panel (the persistent kernel at d64 and d128: a region of its own, so that
// the Q stage takes the next tile's rows at once; WithOBuf, option o_buf), and stores LSE
// (natural log, float32).
// Causal (bottom-right, query i sees key j iff j <= i + seq_kv - seq_q): tiles no row of the block
// sees are never loaded; only tiles crossing the diagonal or seq_kv are masked; a consumer skips
// the block's tiles that none of its own rows sees (d64's 192-row and d256's blocks on the
// diagonal; option skip_hidden, forward step 17: 1.02-1.12x at d64 causal); blocks are
// launched longest first within groups of about a wave of (head, sequence) pairs (decode in the
// kernel). GQA/MQA: head h reads K/V head h / (heads_q / heads_kv) through the TMA coordinates;
// heads of a group are adjacent in the grid, so their K/V stay in L2.
// Sliding window and soft cap (issue 30; separate instantiations, the dense and causal kernels
// are unchanged, SASS-identical): a block loads only the tiles between its first row's first
// visible key and its last row's last one, and masks only those that cross an edge; the soft cap
// is tanh (the SFU's) of the raw score before the mask, with softcap * log2(e) as the exponent's
// scale. Both schedules. Measured on the H200 against the dense kernel: window 4096 0.88-1.02x,
// 512 0.49-0.70x, 128 0.17-0.33x (the short blocks: see docs/tuning_flash_wgmma.md, step 7).
// So a window spanning at most 640 keys runs on 64 x 64 tiles, one consumer, two blocks per SM
// (FwdNarrow; option wide_tiles=1 keeps the wide ones; step 8: 1.21x the wide tiles at (128,
// 128), 1.29x at (128, 0), 1.02-1.03x at (512, 0), measured on the H200 in one run).
// Varlen (packed THD, cu_seqlens; in the window instantiations, unbounded without a window): the
// grid spans the longest sequence; a block reads its sequence's lengths and first rows, loads
// through TMA maps over all the packed rows, masks the keys past its sequence (the next one's)
// and stores O by TMA where a warpgroup's 64 rows all lie in its sequence, else from registers,
// only its sequence's rows (forward step 24); blocks past their sequence exit.
// Shapes: any seq >= 1 (TMA zero-fills rows past seq_q / seq_kv and clips the O store); head_dim
// any multiple of 8 up to 256, run on the tile of the next width in {64, 128, 256} (TMA zero-fills
// the columns past head_dim; the store drops them). Rows that see no key give O = 0 and LSE = -inf.
// Passes over HBM: Q and O once; K and V once per query block (mostly L2 hits for the other blocks
// of the same kv head). Extra memory: none. Limits: f16/bf16; sm_90a only (other GPUs: SKIP).
// Option fused_tail=1 (dense, causal, soft cap; the default where fused_auto() says, with the
// measurements): each tile's P V wait, O's rescale (d <= 128) and P's conversion inside the
// exponent loop's branch, so that ptxas schedules them in the SFU's shadow (WithFusedTail).
// (Forward step 14's option exp2_poly, part of the exponentials on the FMA pipes, lost 1-9% in
// every cell on an H100 and was removed: docs/tuning_flash_wgmma.md.)
// Tiles per head_dim and what was tried: FwdTile below and docs/tuning_flash_wgmma.md.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/implementation.hpp"
#include "common/capabilities.hpp"
#include "common/shape.hpp"
// Angle brackets: the CPU emulation build (tests/hopper_emulation) puts its own versions of these
// headers first on the include path.
#include <hopper/host.cuh>
#include <hopper/pipeline.cuh>
#include <hopper/ptx.cuh>
#include <hopper/wgmma_ops.cuh>

namespace attn_hopper {
// Named (not anonymous) so that the host and sm_80 passes, which see no kernel body, do not warn
// about unreferenced constants.
namespace fwd_wgmma {

// Whether `smem` bytes of dynamic shared memory a block fit sm_90: 227 KiB a block, and with
// `blocks` blocks per SM (1 KiB each reserved) 228 KiB an SM.
constexpr bool fits_sm90(int smem, int blocks) {
  return smem <= 232448 && (smem + 1024) * blocks <= 233472;
}

// One kernel configuration: padded head_dim D, keys per K/V tile, consumer warpgroups (64 query
// rows each), ring depth, and two scheduling switches:
//   kPingpong:     the consumers take turns issuing their GEMMs (named barriers), so that one
//                  warpgroup's softmax runs while the others' GEMMs occupy the tensor cores;
//   kRescaleEarly: O is rescaled right after S_j is issued (under that GEMM) instead of after
//                  P_{j-1} V_{j-1} has landed.
template <int D_, int kBlockN_, int kConsumers_, int kStages_, bool kPingpong_, bool kRescaleEarly_>
struct FwdCfg {
  static constexpr int D = D_, kBlockN = kBlockN_, kConsumers = kConsumers_, kStages = kStages_;
  static constexpr bool kPingpong = kPingpong_, kRescaleEarly = kRescaleEarly_;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // Blocks per SM the launch bounds ask for: one consumer's tiles (the narrow-window ones) leave
  // room for a second block, whose GEMMs cover this one's prologue and epilogue.
  static constexpr int kMinBlocks = kConsumers == 1 ? 2 : 1;
  static constexpr int kPanels = D / 64;        // 64-column panels of a tile
  static constexpr int kQWgBytes = 64 * D * 2;  // one consumer's 64 Q rows
  static constexpr int kQBytes = kConsumers * kQWgBytes;
  static constexpr int kKVBytes = kBlockN * D * 2;  // one K or V stage
  static constexpr int kKVPanelBytes = kBlockN * 128;
  static constexpr int kBarOffset = kQBytes + 2 * kStages * kKVBytes;
  // q_full, k_full[S], k_empty[S], v_full[S], v_empty[S], q_empty, tile_full[2], tile_empty[2],
  // then (option q_split) q_full and q_empty of consumers 1.. ; 1 KiB of slack to align the base.
  static constexpr int kBarCount = 1 + 4 * kStages + 1 + 4 + 2 * (kConsumers - 1);
  static constexpr int kSmemBytes = kBarOffset + 8 * kBarCount + 1024;
  static_assert(kKVBytes % 1024 == 0 && kQWgBytes % 1024 == 0, "panels must stay 1 KiB aligned");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "P V k-steps are 16 keys");
  static_assert(fits_sm90(kSmemBytes, kMinBlocks), "shared memory per block and per SM on sm_90");
  // Registers per thread after setmaxnreg: the producer's drop pays for the consumers' rise.
  static constexpr int kProducerRegs = kConsumers == 2 ? 24 : 32;
  static constexpr int kConsumerRegs = kConsumers == 2 ? 240 : 160;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) * kMinBlocks <= 65536,
                "register file");
  // Named barriers: 1..kConsumers for each consumer's epilogue, then one per consumer's turn.
  static constexpr int kTurnBar0 = 1 + kConsumers;
  static_assert(kTurnBar0 + kConsumers <= 16, "16 named barriers");
  // The P V wait, O's rescale and P's conversion inside the exponent loop's branches
  // (WithFusedTail).
  static constexpr bool kFusedTail = false;
  // O staged in a region of its own (WithOBuf), not in the Q stage.
  static constexpr bool kOBuf = false;
};

// Cfg with each tile's tail in the exponent loop's branches (option fused_tail=1; forward step
// 15). The loop branches once per tile on the large-logit guard (step 6), and ptxas schedules
// each basic block alone: with the tail after the join, the P V wait, O's rescale (D / 2 FMUL,
// skipped by a second branch when no maximum moved: step 12) and P's conversion (BN / 4 F2FP)
// start only once the last exponential has been issued, although the SFU, not the issue slots,
// bounds that loop. FlashAttention-4's SM90 forward (no guard, no skip) is one block from the row
// maxima to P: its SASS at d128 interleaves them (docs/tuning_flash_wgmma.md, "FlashAttention-4's
// SM90 forward, read from its wheel"). With an early rescale (d256: under the next S GEMM), the
// tail is the P V wait and P's conversion.
template <class Cfg>
struct WithFusedTail : Cfg {
  static constexpr bool kFusedTail = true;
};

// Cfg with O staged in a region of its own (kQBytes, after the K/V stages; the barriers move up),
// for the persistent kernel (option o_buf=1; forward step 26): a warpgroup's O store no longer
// holds its Q stage (step 24), so the next tile's Q is loaded as soon as the last S GEMM is done,
// and nothing waits for the store's read but the next tile's epilogue, a whole tile later. Only
// where it fits: d64 (176 KiB) and the 128-key d128 tiles (192 KiB); d256 and the 176-key d128
// tiles keep step 24's held Q stage.
template <class Cfg>
struct WithOBuf : Cfg {
  static constexpr bool kOBuf = true;
  static constexpr int kOOffset = Cfg::kBarOffset;
  static constexpr int kBarOffset = Cfg::kBarOffset + Cfg::kQBytes;
  static constexpr int kSmemBytes = kBarOffset + 8 * Cfg::kBarCount + 1024;
};
// The persistent kernel's tiles with o_buf=1: WithOBuf<Cfg> where its shared memory fits, else
// Cfg.
template <class Cfg>
using PersistentCfg = std::conditional_t<fits_sm90(WithOBuf<Cfg>::kSmemBytes, Cfg::kMinBlocks),
                                         WithOBuf<Cfg>, Cfg>;

// The tiles, per padded head_dim and causal: docs/tuning_flash_wgmma.md has the measurements.
//   d64:  192 x 128, 3 consumers at 160 registers (S 64 + O 32 + P 32), 4 stages, pingpong
//         (+6% over no pingpong at 8k-16k); dense and causal with fused_tail=1 since step 29.
//   d128: 128 x 176 non-causal (S 88 + O 64 + P 44 of 240 registers; +3% over 128 x 128 in
//         step 2), 128 x 128 causal (the diagonal tile wastes less); 2 stages (4 do not fit
//         beside Q); pingpong (+1%). Since step 23 (option keys128=1, the default) dense
//         non-causal runs on 128 x 128 too (1.016-1.042x at 512-4k on an H100), and since
//         step 25 the persistent kernel as well, since step 28 fused_tail=1; soft caps keep
//         128 x 176.
//   d256: 128 x 80 (O alone is 128 registers; 224 KiB of smem), early rescale (+3%); pingpong
//         measured +0.3%, within noise: left off.
template <int D, bool kCausal>
struct FwdTile;
template <bool C>
struct FwdTile<64, C> {
  using type = FwdCfg<64, 128, 3, 4, true, false>;
};
template <bool C>
struct FwdTile<128, C> {
  using type = FwdCfg<128, C ? 128 : 176, 2, 2, true, false>;
};
template <bool C>
struct FwdTile<256, C> {
  using type = FwdCfg<256, 80, 2, 2, false, true>;
};

// Narrow windows (d64, d128; a window spanning at most kNarrowSpan keys, non-persistent): 64 x 64
// tiles, one consumer, two blocks per SM (80 KiB of shared memory and 24.5 K registers each). A
// 128-row block of a (128, 128) window computes 3 tiles of 128 keys for 257 useful ones (0.67),
// and with 2-3 tiles a block its prologue and epilogue are not amortised (step 7: 0.30-0.33x of
// dense); 64 rows waste less at the edges (320 keys: 0.80) and the second block's GEMMs run
// under this one's prologue and epilogue. Option wide_tiles=1 keeps FwdTile's (the A/B).
// (d256 names its wide window tiles here, never used: dispatch takes this only at d <= 128.)
template <int D>
struct FwdNarrow {
  using type = std::conditional_t<(D <= 128), FwdCfg<D, 64, 1, 2, false, false>,
                                  typename FwdTile<D, true>::type>;
};
constexpr long long kNarrowSpan = 640;

}  // namespace fwd_wgmma

namespace {

using attn_mma::Elem;

// Consumer 0's first turn: an arrival on its own turn barrier (completed by its first sync).
template <bool kPingpong>
__device__ __forceinline__ void pass_turn_to_self(int bar) {
  if constexpr (kPingpong) named_bar_arrive(bar, 256);
}

// The shape (common/shape.hpp) at the head, then this kernel's tensors and tile counts.
struct FwdParams : attnbench::cuda::AttnShape {
  float* lse;                   // [B, Hq, Sq] (varlen: [Hq, total_q])
  void* o;                      // [B, Sq, Hq, head_dim]: the persistent kernel stores O directly
  int* tile_counter;            // persistent: the next tile to take (zeroed before the launch)
  int* tile_slots;              // persistent: [gridDim.x][2], the tile numbers a producer publishes
  int num_m_blocks, num_tiles;  // num_tiles = num_m_blocks * Hq * B
  int pairs, head_group;        // Hq * B (head, sequence) pairs; pairs per group (grouped_order)
  attnbench::cuda::AttnVariant var;  // window and soft cap (kLocal, kSoftcap): common/shape.hpp
  int cap_max;                  // option cap_max (default 1): the soft cap's bound as the maximum
  int skip_hidden;              // option skip_hidden (default 1): a warpgroup skips hidden tiles
  int k_ahead;                  // option k_ahead (default 1): K loaded one tile ahead of V
  int o_tma;                    // option o_tma (default 1): O stored by TMA (0: from registers)
  int q_split;                  // option q_split (default 1): a Q barrier per consumer
};

// Non-persistent: grid (num_m_blocks, Hq, B), one tile per block. Persistent: one block per SM
// (at most num_tiles), each taking tiles from p.tile_counter until they run out; the producer
// loads the next tile's Q and K/V while the consumers finish the current one.
// Tiles are numbered as the non-persistent grid launches them, and decode() maps a number to its
// tile: (head, sequence) pairs in groups, query block by query block within a group, causal
// longest first, heads of a GQA group adjacent. Cfg::kThreads threads, Cfg::kSmemBytes of smem.
// tq/to: [B, Sq, Hq, head_dim], boxes of 64 rows; tk/tv: [B, Skv, Hkv, head_dim], kBlockN rows.
// kLocal: a sliding window (p.var; causal folded into its right side, kCausal false): the block
// loads only the tiles between its first row's first key and its last row's last one, and masks
// the tiles that cross either edge. kSoftcap: scores become tanh(q.k * softcap_in) before the
// mask, and softcap * log2(e) replaces scale * log2(e) in the exponent and the LSE.
template <class T, class Cfg, bool kCausal, bool kLocal, bool kSoftcap, bool kPersistent>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    flash_fwd_wgmma_kernel(const __grid_constant__ TensorMap tq,
                           const __grid_constant__ TensorMap tk,
                           const __grid_constant__ TensorMap tv,
                           const __grid_constant__ TensorMap to, const FwdParams p) {
#if ATTN_HOPPER_DEVICE
  using Sh = Cfg;
  constexpr float kNegInf = -__builtin_huge_valf();
  constexpr int D = Cfg::D, BN = Sh::kBlockN, S = Sh::kStages, NC = Sh::kConsumers;
  const int first_tile =
      (static_cast<int>(blockIdx.z) * p.heads_q + static_cast<int>(blockIdx.y)) * p.num_m_blocks +
      static_cast<int>(blockIdx.x);
  // The tile's query block and (batch, head), and its visible K/V tiles j_first ..
  // j_first + n_tiles - 1.
  int m0 = 0, h = 0, b = 0, j_first = 0, n_tiles = 0;
  // The tile's sequence: the shape's lengths, except in a varlen batch (kLocal instantiations
  // only, p.var.cu_seqlens_q set): then its own, and its first rows in the packed tensors, which
  // the TMA maps see as one sequence of total rows (batch coordinate tb = 0).
  const bool varlen = kLocal && p.var.cu_seqlens_q != nullptr;
  int seq_q = p.seq_q, seq_kv = p.seq_kv, causal_offset = p.causal_offset;
  int q_row0 = 0, kv_row0 = 0, tb = 0;
  // Causal: keys [0, causal_end(r)) are visible to at least one of the rows before r.
  auto causal_end = [&](int r) { return max(0, min(seq_kv, r + causal_offset)); };
  auto decode = [&](int t) {
    // common/shape.hpp's grouped_order: pairs in groups of about a wave, query block by query
    // block within a group (causal: longest first over the group), heads of a GQA group adjacent.
    const attnbench::cuda::GroupedIndex gi =
        attnbench::cuda::grouped_order(t, p.num_m_blocks, p.head_group, p.pairs);
    const int mi = gi.block, hb = gi.pair;
    m0 = (kCausal ? p.num_m_blocks - 1 - mi : mi) * Sh::kBlockM;
    h = hb % p.heads_q;
    b = hb / p.heads_q;
    tb = b;
    if constexpr (kLocal) {
      if (varlen) {
        const attnbench::cuda::SeqView sv = attnbench::cuda::seq_of(p, p.var, b);
        seq_q = sv.seq_q;
        seq_kv = sv.seq_kv;
        causal_offset = sv.causal_offset;
        q_row0 = static_cast<int>(sv.q_start);
        kv_row0 = static_cast<int>(sv.kv_start);
        tb = 0;
      }
      const attnbench::cuda::TileSpan tiles =
          attnbench::cuda::window_key_tiles<BN>(seq_kv, causal_offset, p.var, m0, Sh::kBlockM);
      j_first = tiles.first;
      n_tiles = m0 < seq_q ? tiles.count : 0;  // varlen: a block past its sequence's rows
    } else {
      int n_end = p.seq_kv;  // keys [0, n_end) are visible to at least one row of the block
      if (kCausal) n_end = causal_end(m0 + Sh::kBlockM);
      n_tiles = (n_end + BN - 1) / BN;
    }
  };

  const uint32_t base = (attn_mma::smem_u32(attn_mma::dynamic_smem()) + 1023u) & ~1023u;
  const uint32_t sq = base;
  auto sk = [&](int s) { return base + Sh::kQBytes + s * Sh::kKVBytes; };
  auto sv = [&](int s) { return base + Sh::kQBytes + (S + s) * Sh::kKVBytes; };
  // The pipelines (hopper/pipeline.cuh), their mbarriers at kBarOffset: q_full, k_full[S],
  // k_empty[S], v_full[S], v_empty[S], q_empty, tile_full[2], tile_empty[2], then consumer w's
  // (w >= 1) own q_full and q_empty. Q holds one tile (iterations: Q tiles loaded), K and V S
  // stages each (iterations: K/V tiles loaded), the persistent tile numbers two slots
  // (iterations: tiles taken). Q's ring: one for the whole tile (q_pipe_of(0), its empty barrier
  // counting every consumer), or with option q_split=1 (forward step 22) one per consumer's 64
  // rows, so that the first consumer's S_0 waits for its own rows and K_0, not for every Q row.
  const uint32_t bars = base + Sh::kBarOffset;
  auto q_pipe_of = [&](int w) {
    const uint32_t own = bars + 8 * (6 + 4 * S) + 16 * (w - 1);
    return w == 0 ? Pipeline<1>{bars, bars + 8 * (1 + 4 * S)} : Pipeline<1>{own, own + 8};
  };
  const Pipeline<S> k_pipe{bars + 8, bars + 8 * (1 + S)};
  const Pipeline<S> v_pipe{bars + 8 * (1 + 2 * S), bars + 8 * (1 + 3 * S)};
  [[maybe_unused]] const Pipeline<2> tile_pipe{bars + 8 * (2 + 4 * S), bars + 8 * (4 + 4 * S)};
  // The persistent producer publishes each tile number in a 2-slot ring of this block's own in
  // global memory, ordered by the tile_full / tile_empty mbarriers (arrive: release, wait:
  // acquire, CTA scope). Not in shared memory: compute-sanitizer's racecheck does not model
  // mbarrier phase waits, so it reported this correctly ordered reuse of a shared slot as a WAR
  // hazard, and racecheck must stay at 0 hazards to guard the kernels that have real ones.
  [[maybe_unused]] int* const tile_slot = kPersistent ? p.tile_slots + 2 * blockIdx.x : nullptr;

  const int wg = warp_uniform(threadIdx.x / 128);
  if (threadIdx.x == 0) {
    for (int w = 0; w < (p.q_split != 0 ? NC : 1); ++w) {
      mbar_init(q_pipe_of(w).full_of(0), 1);
      mbar_init(q_pipe_of(w).empty_of(0), p.q_split != 0 ? 1 : NC);
    }
    for (int s = 0; s < S; ++s) {
      mbar_init(k_pipe.full_of(s), 1);
      mbar_init(v_pipe.full_of(s), 1);
      mbar_init(k_pipe.empty_of(s), NC);
      mbar_init(v_pipe.empty_of(s), NC);
    }
    for (int i = 0; i < 2; ++i) {
      mbar_init(tile_pipe.full_of(i), 1);
      mbar_init(tile_pipe.empty_of(i), NC);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    // ---- producer -------------------------------------------------------------------------------
    setmaxnreg_dec<Sh::kProducerRegs>();
    if (threadIdx.x == 0) {
      int kv_it = 0, q_it = 0;  // K/V stages and Q tiles loaded so far (the rings' positions)
      for (int i = 0;; ++i) {
        int t;
        if constexpr (kPersistent) {
          // Take a tile and publish it to the consumers through a 2-slot ring.
          tile_pipe.producer_wait(i);
          t = atomic_add_i32(p.tile_counter, 1);
          tile_slot[tile_pipe.stage(i)] = t;
          tile_pipe.producer_commit(i);
        } else {
          t = i == 0 ? first_tile : p.num_tiles;
        }
        if (t >= p.num_tiles) break;
        decode(t);
        if (n_tiles == 0) continue;
        const int kvh = h / p.group;
        // K/V tile j of this query tile is the pipelines' iteration kv_it + j.
        auto load_k = [&](int j) {
          const uint32_t k_full = k_pipe.producer_acquire(kv_it + j, Sh::kKVBytes);
          for (int pn = 0; pn < Sh::kPanels; ++pn)
            tma_load_4d(sk(k_pipe.stage(kv_it + j)) + pn * Sh::kKVPanelBytes, &tk, k_full,
                        64 * pn, kvh, kv_row0 + (j_first + j) * BN, tb);
        };
        auto load_v = [&](int j) {
          const uint32_t v_full = v_pipe.producer_acquire(kv_it + j, Sh::kKVBytes);
          for (int pn = 0; pn < Sh::kPanels; ++pn)
            tma_load_4d(sv(v_pipe.stage(kv_it + j)) + pn * Sh::kKVPanelBytes, &tv, v_full,
                        64 * pn, kvh, kv_row0 + (j_first + j) * BN, tb);
        };
        // Consumer w's 64 Q rows on the barrier of its ring (q_split=1; the consumers are done
        // with the last tile's Q: each with its own rows, or all of them with q_split=0).
        auto load_q = [&](int w, uint32_t q_full) {
          for (int pn = 0; pn < Sh::kPanels; ++pn)
            tma_load_4d(sq + w * Sh::kQWgBytes + pn * 64 * 128, &tq, q_full, 64 * pn, h,
                        q_row0 + m0 + 64 * w, tb);
        };
        // q_split=1 with k_ahead=1: K_0 right after the first consumer's rows (Q_0, K_0, Q_1,
        // ..., K_1, V_0, ...), the order of the consumers' first waits (consumer 0 takes the
        // first pingpong turn).
        // Persistent with O stored through the Q stage (o_tma=1, no O region of its own): a
        // consumer frees its Q rows only once the previous tile's O has left them, so K_0 goes
        // first and is on the wire while the producer waits for that.
        bool k0_loaded = false;
        if (kPersistent && !Sh::kOBuf && p.k_ahead != 0 && p.o_tma != 0) {
          load_k(0);
          k0_loaded = true;
        }
        if (p.q_split != 0) {
          for (int w = 0; w < NC; ++w) {
            load_q(w, q_pipe_of(w).producer_acquire(q_it, Sh::kQWgBytes));
            if (w == 0 && p.k_ahead != 0 && !k0_loaded) {
              load_k(0);
              k0_loaded = true;
            }
          }
        } else {
          const uint32_t q_full = q_pipe_of(0).producer_acquire(q_it, Sh::kQBytes);
          for (int w = 0; w < NC; ++w) load_q(w, q_full);
        }
        ++q_it;
        // The consumers use K_j (S_j) before V_{j-1} (P_{j-1} V_{j-1}): K one tile ahead of V
        // (option k_ahead=1, forward step 18) puts K_1 on the wire right after K_0, so that a
        // block's second S GEMM does not wait behind V_0's bytes; k_ahead=0 loads K_j, V_j
        // together (the A/B). Either order is the order of the consumers' waits, so neither
        // ring can stall the other.
        if (p.k_ahead != 0) {
          if (!k0_loaded) load_k(0);
          for (int j = 0; j < n_tiles; ++j) {
            if (j + 1 < n_tiles) load_k(j + 1);
            load_v(j);
          }
        } else {
          for (int j = 0; j < n_tiles; ++j) {
            load_k(j);
            load_v(j);
          }
        }
        kv_it += n_tiles;
      }
    }
    return;
  }

  // ---- consumers --------------------------------------------------------------------------------
  setmaxnreg_inc<Sh::kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const bool signals = tid == 0;  // the thread that arrives on empty barriers for the warpgroup
  int row0 = 0;                   // first query row of this warpgroup in the tile
  int trow = 0;                   // this thread's rows: trow and trow + 8
  const uint32_t sq_c = sq + c * Sh::kQWgBytes;
  const Pipeline<1> q_pipe = q_pipe_of(p.q_split != 0 ? c : 0);  // this consumer's Q ring
  const float sl2 = kSoftcap ? p.var.softcap_log2 : p.scale_log2;
  // A soft cap bounds every score: t = tanh(.) <= 1, so 1 can stand for each row's running
  // maximum and P = exp2(sl2 * (t - 1)) needs no row maxima, no rescale of O and no wait for the
  // maximum before the exponentials (the soft-cap loop is SFU-bound at d128: tanh and ex2 per
  // score). Exact in exact arithmetic (the maximum cancels in O / l and in the LSE). In floating
  // point a visible key's P would be as small as 2^(-2 sl2), which flushes to 0 (ex2.approx.ftz)
  // once 2 sl2 passes 126; so the exponent is shifted up by cap_shift = max(0, 2 sl2 - 120):
  // P = exp2(sl2 (t - 1) + cap_shift), between 2^-120 and 2^cap_shift, every P, the sums and the
  // P V products normal in float32 and in bfloat16 (the same exponent range), and l > 0 still
  // tells a row with a visible key. The shift is at most 30 (softcap <= 51.9, Gemma 2's 50
  // included: 24.3), so l <= N 2^30 and O's accumulators stay finite unless N max|V| passes 2^98.
  // Not f16: its P would flush to 0 below 2^-24. Masked scores (-inf) give 0 as before; the LSE
  // is (sl2 - cap_shift + log2 l) * ln 2. Option cap_max=0 keeps the running maxima (the A/B;
  // forward step 16).
  const bool cap_max =
      kSoftcap && std::is_same_v<T, attn_mma::bfloat_t> && p.cap_max != 0 && 2.f * sl2 <= 150.f;
  const float cap_shift = cap_max ? fmaxf(0.f, 2.f * sl2 - 120.f) : 0.f;

  float o[D / 2];
  float row_max[2], row_sum[2];  // row sums: this thread's columns only; the quad's at the end
  float s[BN / 2];
  uint32_t pa[BN / 16][4];

  // S = Q K_stage^T: D/16 k-steps of 16 columns; a 64-column panel holds 4 of them. The
  // descriptors: one per operand and stage, the k-steps by desc_add (ptx.cuh).
  const uint64_t d_q = desc_k_major(sq_c);
  auto gemm_qk = [&](int stage) {
    const uint64_t d_k = desc_k_major(sk(stage));
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t koff = (kk % 4) * 32;
      const uint64_t da = desc_add(d_q, (kk / 4) * 64 * 128 + koff);
      const uint64_t db = desc_add(d_k, (kk / 4) * Sh::kKVPanelBytes + koff);
      Wgmma<T, BN>::template ss<0, 0>(s, da, db, kk > 0 ? 1 : 0);
    }
  };
  // O += P V_stage: BN/16 k-steps of 16 keys (2 KiB of a V panel each); V is MN-major.
  auto gemm_pv = [&](int stage) {
    const uint64_t d_v = desc_mn_major(sv(stage), Sh::kKVPanelBytes);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      Wgmma<T, D>::template rs<1>(o, pa[kk], desc_add(d_v, kk * 2048), 1);
    }
  };
  // The soft cap: t = tanh(q.k * softcap_in), before the mask. tanh.approx.f32, one SFU op: the
  // SFU is this loop's bottleneck (ex2 per score already), and tanh_fast's ex2 + rcp took the d128
  // soft cap to 0.66-0.69x of the dense TFLOP/s, tanh.approx to 0.82-0.86x (d256: 0.80-0.85x ->
  // 0.90-0.95x; results/h200/issue30/job2). Its error, about 2^-11 relative, moves a capped logit
  // by at most softcap * 2^-11: below what storing S in bf16 moves it (the naive baseline) and
  // within the rule in f16 on the conformance suite's soft-cap cases (H200, 6 of 6 pass).
  auto cap = [&]() {
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = attn_mma::tanh_approx(s[i] * p.var.softcap_in);
    }
  };
  // Masks the keys of the block's tile j that row r may not see (past seq_kv, past the diagonal,
  // outside the window). Only tiles that cross an edge for some row of the warpgroup do work.
  // (Varlen: the keys past seq_kv are the next sequence's, or TMA's zero fill past the last.)
  auto mask = [&](int j) {
    const int n0 = (j_first + j) * BN;
    const int diag = row0 + causal_offset;  // the warpgroup's first row's diagonal
    bool need = n0 + BN > seq_kv || (kCausal && n0 + BN - 1 > diag);
    if constexpr (kLocal)
      need = need || attnbench::cuda::window_crosses(p.var, diag, diag + 63, n0, BN);
    if (!need) return;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      const int row = trow + ((i & 2) ? 8 : 0);
      const int col = n0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
      bool hidden = col >= seq_kv || (kCausal && col > row + causal_offset);
      if constexpr (kLocal)
        hidden = hidden || attnbench::cuda::window_hides(p.var, row + causal_offset, col);
      if (hidden) s[i] = kNegInf;
    }
  };
  // Online softmax of s in place (s becomes exp2(scale_log2 * (s - max))); returns in alpha the
  // factor by which the rows' earlier O and sums shrink. tail() runs at the end of either branch
  // of the exponent loop (Sh::kFusedTail: the P V wait, O's rescale, P's conversion), so that in
  // the common branch ptxas sees it and the exponentials as one block to schedule together.
  auto softmax = [&](float(&alpha)[2], auto&& tail) {
    float base_l2[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      if (cap_max) {  // the soft cap's bound as every row's maximum (cap_max, above)
        alpha[hf] = 1.f;
        row_max[hf] = 1.f;
        base_l2[hf] = sl2 - cap_shift;
        continue;
      }
      // Four partial maxima, combined at the end: the same maximum in any order, but chains of
      // ⌈BN / 32⌉ + 3 dependent FMNMX instead of BN / 8 + 1 (d128: 9 against 23).
      static_assert(BN / 8 >= 4, "four partial maxima");
      float m4[4];
#pragma unroll
      for (int g = 0; g < 4; ++g) m4[g] = fmaxf(s[4 * g + 2 * hf], s[4 * g + 2 * hf + 1]);
#pragma unroll
      for (int g = 4; g < BN / 8; ++g)
        m4[g % 4] = fmaxf(m4[g % 4], fmaxf(s[4 * g + 2 * hf], s[4 * g + 2 * hf + 1]));
      float mx = fmaxf(fmaxf(fmaxf(m4[0], m4[1]), fmaxf(m4[2], m4[3])), row_max[hf]);
      mx = attn_mma::quad_max(mx);
      // A row that has seen no visible key keeps max -inf: alpha 0 and exponent base 0, so masked
      // scores give exp2(-inf) = 0, never (-inf) - (-inf) = NaN.
      alpha[hf] = row_max[hf] == kNegInf ? 0.f : attn_mma::exp2_approx((row_max[hf] - mx) * sl2);
      row_max[hf] = mx;
      base_l2[hf] = mx == kNegInf ? 0.f : attn_mma::mul_rn(mx, sl2);
    }
    // One FFMA per score: its exponent for the max score is the rounding residual of
    // mx * scale_log2 (half an ulp), which cancels in O / l and LSE and is harmless below 2^30.
    // Past that (huge scales) it could overflow ex2: then, for the whole warp at once (one uniform
    // branch per tile, so the common path is straight-line code), the scores are scaled with the
    // same rounding as the max (rounding is monotonic), so the max's exponent is exactly 0.
    const bool huge = fabsf(base_l2[0]) >= 0x1p30f || fabsf(base_l2[1]) >= 0x1p30f;
    float sum[2] = {0.f, 0.f};
    if (!attn_mma::warp_any(huge)) {
#pragma unroll
      for (int g = 0; g < BN / 8; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float& x = s[4 * g + i];
          x = attn_mma::exp2_approx(fmaf(x, sl2, -base_l2[i / 2]));
          sum[i / 2] += x;
        }
      tail();
    } else {
#pragma unroll
      for (int g = 0; g < BN / 8; ++g)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float& x = s[4 * g + i];
          x = attn_mma::exp2_approx(attn_mma::mul_rn(x, sl2) - base_l2[i / 2]);
          sum[i / 2] += x;
        }
      tail();
    }
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) row_sum[hf] = row_sum[hf] * alpha[hf] + sum[hf];
  };
  // P (dtype) as A fragments: keys 16kk..16kk+15 are accumulator groups 2kk and 2kk+1.
  auto to_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      pa[kk][0] = Elem<T>::pack2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = Elem<T>::pack2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = Elem<T>::pack2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = Elem<T>::pack2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };
  // O *= alpha per row, skipped by the whole warp when every alpha of its 16 rows is exactly 1
  // (no row max moved: o * 1 = o, so the result is the same bit for bit). Past the first few
  // hundred keys a tile seldom moves a warp's maxima, and the multiplies are D / 2 a thread a
  // tile: 128 at d256, a fifth of the loop's instructions (forward step 12).
  auto scale_o = [&](const float(&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i & 2) ? 1 : 0];
  };
  auto rescale = [&](const float(&alpha)[2]) {
    if (attn_mma::warp_any(alpha[0] != 1.f || alpha[1] != 1.f)) scale_o(alpha);
  };

  // Pingpong: consumer c issues its GEMMs only on its turn and then passes the turn to the next
  // (named barrier kTurnBar0 + c: 128 threads sync on it, the previous consumer's 128 arrive).
  // Consumer 0 gives itself the first turn and takes the last one back after its loop, so every
  // barrier completes as often as it is waited for.
  auto take_turn = [&]() {
    if constexpr (Sh::kPingpong) named_bar_sync(Sh::kTurnBar0 + c, 256);
  };
  auto pass_turn = [&]() {
    if constexpr (Sh::kPingpong) named_bar_arrive(Sh::kTurnBar0 + (c + 1) % NC, 256);
  };
  if (c == 0) pass_turn_to_self<Sh::kPingpong>(Sh::kTurnBar0);

  int kv_it = 0, q_it = 0;  // as the producer's
  for (int i = 0;; ++i) {
    int t;
    if constexpr (kPersistent) {
      tile_pipe.consumer_wait(i);
      t = tile_slot[tile_pipe.stage(i)];
      named_bar_sync(1 + c, 128);  // the whole warpgroup has read the slot before it is freed
      if (signals) tile_pipe.consumer_release(i);
    } else {
      t = i == 0 ? first_tile : p.num_tiles;
    }
    if (t >= p.num_tiles) break;
    decode(t);
    row0 = m0 + 64 * c;
    trow = row0 + 16 * warp + lane / 4;
#pragma unroll
    for (int k = 0; k < D / 2; ++k) o[k] = 0.f;
    row_max[0] = row_max[1] = kNegInf;
    row_sum[0] = row_sum[1] = 0.f;

    // This warpgroup's own tiles: the block's first n_mine. The rest are hidden from every one of
    // its 64 rows (past the causal diagonal or the window's right edge of its last row, or all its
    // rows past seq_q): a 192-row d64 block over 128-key tiles, or a d256 block over 80-key ones,
    // has such tiles for its first warpgroups on the diagonal (forward step 17). The warpgroup
    // computes nothing there; it still takes and passes its pingpong turns and releases the
    // stages (after their loads: an early arrival would count toward the stage's previous use).
    // Option skip_hidden=0 computes every tile of the block (masked), as before (the A/B).
    int n_mine = n_tiles;
    if (p.skip_hidden != 0) {
      const int rows = min(64, seq_q - row0);
      if (rows <= 0) {
        n_mine = 0;
      } else if constexpr (kLocal) {
        const attnbench::cuda::TileSpan mine =
            attnbench::cuda::window_key_tiles<BN>(seq_kv, causal_offset, p.var, row0, rows);
        n_mine = mine.count > 0 ? min(n_tiles, mine.first + mine.count - j_first) : 0;
      } else if constexpr (kCausal) {
        n_mine = min(n_tiles, (causal_end(row0 + rows) + BN - 1) / BN);
      }
    }

    // O leaves through this warpgroup's Q stage (WithOBuf: its own O region) and a TMA store
    // (option o_tma=1), except where the store could write what is not this warpgroup's: in a
    // varlen batch, rows past its sequence (the next sequence's; so only a warpgroup whose 64 rows
    // all lie in it), and in the persistent kernel a Q stage it does not hold (a tile without
    // loads: the producer may be filling it with the next tile's Q). Those store from registers.
    // The persistent kernel without an O region holds its Q stage (hold_q) until the store has
    // read it, and frees it only then.
    const bool o_smem = p.o_tma != 0 && (!varlen || row0 + 64 <= seq_q) &&
                        (!kPersistent || Sh::kOBuf || n_tiles > 0);
    const bool hold_q = kPersistent && !Sh::kOBuf && o_smem;
    if (n_tiles > 0) q_pipe.consumer_wait(q_it);
    if (n_mine > 0) {
      // K/V tile j of this query tile is the pipelines' iteration kv_it + j.
      auto stage = [&](int j) { return k_pipe.stage(kv_it + j); };
      k_pipe.consumer_wait(kv_it);
      // S_0 outside the pingpong turns (forward step 21 issued it on a turn: no gain in two runs
      // on an H100, removed).
      wgmma_fence();
      gemm_qk(stage(0));
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(s);
      if (signals) k_pipe.consumer_release(kv_it);
      if (signals && !hold_q && n_mine == 1) q_pipe.consumer_release(q_it);  // last Q K^T done
      cap();
      mask(0);
      float alpha[2];
      softmax(alpha, [] {});
      to_p();
      for (int j = 1; j < n_mine; ++j) {
        const int st = stage(j), sp = stage(j - 1);
        k_pipe.consumer_wait(kv_it + j);
        fence_regs(s);
        fence_regs(o);
        fence_regs(pa);
        take_turn();
        wgmma_fence();
        gemm_qk(st);
        wgmma_commit();
        if constexpr (Sh::kRescaleEarly) rescale(alpha);  // alpha of tile j-1, under S_j
        v_pipe.consumer_wait(kv_it + (j - 1));
        wgmma_fence();
        gemm_pv(sp);
        wgmma_commit();
        pass_turn();
        wgmma_wait<1>();  // S_j has landed; P_{j-1} V_{j-1} may still run
        fence_regs(s);
        if (signals) k_pipe.consumer_release(kv_it + j);
        if (signals && !hold_q && j == n_mine - 1) q_pipe.consumer_release(q_it);
        cap();
        mask(j);
        // P_{j-1} V_{j-1} has landed: O may be read, V's stage goes back to the producer.
        auto pv_landed = [&] {
          wgmma_wait<0>();
          fence_regs(o);
          if (signals) v_pipe.consumer_release(kv_it + (j - 1));
        };
        if constexpr (Sh::kFusedTail) {
          // Option fused_tail=1 (forward step 15): O's rescale (not kRescaleEarly: d256 rescales
          // under the next S GEMM) unconditional, since a branch would split the block again, in
          // the shadow of the SFU's exponentials.
          softmax(alpha, [&] {
            pv_landed();
            if constexpr (!Sh::kRescaleEarly) {
              scale_o(alpha);
              // Keeps the multiplies in this branch: without it the compiler sank the two
              // branches' identical copies into the block after them (SASS of 2026-12-05).
              fence_regs(o);
            }
            to_p();
          });
        } else {
          softmax(alpha, [] {});
          pv_landed();
          if constexpr (!Sh::kRescaleEarly) rescale(alpha);
          to_p();
        }
      }
      if constexpr (Sh::kRescaleEarly) rescale(alpha);
      const int sl = stage(n_mine - 1);
      v_pipe.consumer_wait(kv_it + (n_mine - 1));
      fence_regs(o);
      fence_regs(pa);
      wgmma_fence();
      gemm_pv(sl);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(o);
      if (signals) v_pipe.consumer_release(kv_it + (n_mine - 1));
    }
    if (n_tiles > 0) {
      if (n_mine == 0 && !hold_q) {
        // No Q K^T at all: the whole warpgroup has seen Q land (its epilogue may write O into the
        // Q stage) before the one thread releases it. Elsewhere a wgmma, which every thread of
        // the warpgroup issues, orders the waits before a release.
        named_bar_sync(1 + c, 128);
        if (signals) q_pipe.consumer_release(q_it);
      }
      // The hidden tiles: the turns of iterations 1 .. n_tiles - 1 this warpgroup
      // has not taken, and each stage released by the one thread that waits for its load (the
      // others never read it; the persistent loop's next named barrier keeps them from waiting on
      // a later pass of the ring before this thread is through).
      for (int j = n_mine; j < n_tiles; ++j) {
        if (j > 0) {
          take_turn();
          pass_turn();
        }
        if (signals) {
          k_pipe.consumer_wait(kv_it + j);
          k_pipe.consumer_release(kv_it + j);
          v_pipe.consumer_wait(kv_it + j);
          v_pipe.consumer_release(kv_it + j);
        }
      }
      kv_it += n_tiles;
      ++q_it;
    }

    // ---- epilogue: O /= l, LSE = (max * scale_log2 + log2 l) * ln 2
    // ------------------------------
    using attnbench::cuda::kLn2;
    float inv[2];
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const float l = attn_mma::quad_sum(row_sum[hf]);
      inv[hf] = l > 0.f ? 1.f / l : 0.f;
      const int row = trow + 8 * hf;
      if (lane % 4 == 0 && row < seq_q) {
        // Varlen: LSE [Hq, total_q] (problem.hpp).
        const int64_t at = varlen ? static_cast<int64_t>(h) * p.var.total_q + q_row0 + row
                                  : (static_cast<int64_t>(b) * p.heads_q + h) * p.seq_q + row;
        p.lse[at] =
            l > 0.f ? (attn_mma::mul_rn(row_max[hf], sl2) - cap_shift + log2f(l)) * kLn2 : kNegInf;
      }
    }
    if (!o_smem) {
      // Straight from registers (o_smem above; option o_tma=0, forward step 20: no wait for a TMA
      // store's read of shared memory before the block ends).
      T* out = static_cast<T*>(p.o);
      const int64_t orow0 = varlen ? q_row0 : static_cast<int64_t>(b) * p.seq_q;
#pragma unroll
      for (int g = 0; g < D / 8; ++g)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int row = trow + 8 * hf, col = 8 * g + 2 * (lane % 4);
          if (row < seq_q && col < p.head_dim) {
            const int64_t off = ((orow0 + row) * p.heads_q + h) * p.head_dim + col;
            *reinterpret_cast<uint32_t*>(out + off) =
                Elem<T>::pack2(o[4 * g + 2 * hf] * inv[hf], o[4 * g + 2 * hf + 1] * inv[hf]);
          }
        }
    } else {
      // This warpgroup's Q stage is idle now (its last Q K^T has completed): O goes there in the
      // same swizzled panel layout, then one TMA store per panel (rows past seq_q, columns past
      // head_dim are dropped by the store; varlen: the packed rows, tb = 0). hold_q: the stage
      // goes back to the producer once the store has read it (the Q tile is q_it - 1 by now).
      // WithOBuf: the warpgroup's own O region instead, free once the previous tile's store has
      // read it (waited for here, a tile after it was issued); this store is not waited for
      // until the next tile's epilogue or the end of the kernel.
      uint32_t o_stage = sq_c;
      if constexpr (Sh::kOBuf) {
        o_stage = base + Sh::kOOffset + c * Sh::kQWgBytes;
        if (signals) tma_store_wait_read();
        named_bar_sync(1 + c, 128);
      }
#pragma unroll
      for (int g = 0; g < D / 8; ++g)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          const int r = 16 * warp + lane / 4 + 8 * hf;
          const uint32_t chunk = static_cast<uint32_t>((g % 8) ^ (r % 8));
          const uint32_t addr =
              o_stage + (g / 8) * 64 * 128 + r * 128 + chunk * 16 + (lane % 4) * 4;
          attn_mma::st_shared_b32(
              addr, Elem<T>::pack2(o[4 * g + 2 * hf] * inv[hf], o[4 * g + 2 * hf + 1] * inv[hf]));
        }
      fence_proxy_async();
      named_bar_sync(1 + c, 128);
      if (signals) {
        for (int pn = 0; pn < Sh::kPanels; ++pn)
          tma_store_4d(&to, o_stage + pn * 64 * 128, 64 * pn, h, q_row0 + row0, tb);
        tma_store_commit();
        if constexpr (!Sh::kOBuf) tma_store_wait_read();
        if (hold_q) q_pipe.consumer_release(q_it - 1);
      }
    }
  }
  // WithOBuf: the last tile's store has read the O region before the block ends.
  if constexpr (Sh::kOBuf) {
    if (signals) tma_store_wait_read();
  }
  if (c == 0) take_turn();
#else
  __trap();
#endif
}

using attnbench::Capabilities;
using attnbench::Device;
using attnbench::DType;
using attnbench::Options;
using attnbench::Pass;
using attnbench::Problem;
using attnbench::Support;

// The head_dim tiles (a head_dim runs in the smallest that holds it, zero-padded).
using FwdHeadDims = attnbench::cuda::HeadDims<64, 128, 256>;

// A window narrow enough for FwdNarrow's tiles: at most kNarrowSpan keys from a row's first
// visible key to its last (causal: the left side and the diagonal).
bool narrow_window(const Problem& pr) {
  return attnbench::cuda::window_spans_at_most(pr, fwd_wgmma::kNarrowSpan);
}

// The kernel choices the options make (choice_of below). All false (Choice{}): each problem's
// widest tiles (keys128's 128 x 128 need less shared memory); supports_extra checks those and the
// persistent kernel's own O region (o_buf), the two largest.
struct Choice {
  bool persistent = false, wide = false, fused = false, keys128 = false, obuf = false;
};

// f(kernel, Cfg{}) for the problem's (dtype, head_dim tile, causal, window, soft cap) and the
// options' Choice (persistent, wide_tiles, fused_tail, keys128): the one static switch
// (common/dispatch.hpp). A window (on causal's tiles, or FwdNarrow's when it is narrow) or a soft
// cap selects a variant kernel; dense and causal problems keep theirs.
// fused (option fused_tail=1): problems without a window or varlen (dense, causal, soft cap), not
// persistent, on WithFusedTail's tiles; the other kernels stay as they are (SASS-identical: 100
// of 100 kernels, 2026-12-05).
// keys128 (option keys128=1): dense d128 non-causal without a soft cap on 128 x 128 tiles (causal
// d128's FwdCfg) instead of 128 x 176 (forward step 23; persistent too since step 25; fused too
// since step 28, before which fused_tail=1 took the 176-key tiles).
template <class F>
void dispatch(const Problem& pr, const Choice& k, F&& f) {
  attnbench::cuda::dispatch_problem<FwdHeadDims>(pr, [&](auto tag, auto d, auto causal) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(d)::value;
    attnbench::cuda::dispatch_variant<decltype(causal)::value>(pr, [&](auto c, auto l, auto sc) {
      constexpr bool C = decltype(c)::value, L = decltype(l)::value, SC = decltype(sc)::value;
      // f for the tiles `cfg` under the options' schedule: a block per tile (with fused_tail=1
      // and no window or varlen batch, on WithFusedTail<cfg>), or the persistent kernel (with
      // o_buf=1 on PersistentCfg: its own O region where it fits).
      auto with_schedule = [&](auto cfg) {
        using Cfg = decltype(cfg);
        if (!k.persistent) {
          if constexpr (!L) {
            if (k.fused) {
              using FT = fwd_wgmma::WithFusedTail<Cfg>;
              f(flash_fwd_wgmma_kernel<T, FT, C, L, SC, false>, FT{});
              return;
            }
          }
          f(flash_fwd_wgmma_kernel<T, Cfg, C, L, SC, false>, Cfg{});
        } else if (k.obuf) {
          using PC = fwd_wgmma::PersistentCfg<Cfg>;
          f(flash_fwd_wgmma_kernel<T, PC, C, L, SC, true>, PC{});
        } else {
          f(flash_fwd_wgmma_kernel<T, Cfg, C, L, SC, true>, Cfg{});
        }
      };
      if constexpr (L) {
        if (D <= 128 && !k.persistent && !k.wide && narrow_window(pr)) {
          using N = typename fwd_wgmma::FwdNarrow<D>::type;
          f(flash_fwd_wgmma_kernel<T, N, C, L, SC, false>, N{});
          return;
        }
      } else if constexpr (D == 128 && !C && !SC) {
        if (k.keys128) {
          with_schedule(typename fwd_wgmma::FwdTile<128, true>::type{});
          return;
        }
      }
      with_schedule(typename fwd_wgmma::FwdTile<D, C || L>::type{});
    });
  });
}

// The options, each 0 or 1, and their defaults (the A/Bs behind them: docs/tuning_flash_wgmma.md):
//   persistent  0: a block per tile; 1 a block per SM taking tiles from a counter in the
//               workspace. Not given: persistent_auto(), 1 for dense and causal problems of at
//               most kPersistentMaxSeq queries and keys (step 27: persistent=1 / 0 1.00-1.28x at
//               512-1k, 0.93-1.02x at 2k-16k, H100), 0 for the rest.
//   wide_tiles  0: narrow windows on FwdNarrow's tiles; 1 on FwdTile's.
//   fused_tail  1 schedules each tile's tail with its exponentials (WithFusedTail), 0 after
//               them. Not given: fused_auto() (dense and causal d64 and d128 without a soft
//               cap; steps 15, 28 and 29).
//   cap_max     1: a bf16 soft cap's bound (softcap <= 51.9) as every row's maximum; 0 the
//               running maxima (steps 16 and 16b: 1.03-1.18x on an H100).
//   skip_hidden 1: a warpgroup skips the block's tiles none of its rows sees (causal d64 and
//               d256, windows; step 17: 1.00-1.12x at causal d64, 0.96-1.05x at d256, H100);
//               0 computes them masked.
//   k_ahead     1: the producer loads K one tile ahead of V (K_0, K_1, V_0, K_2, V_1, ...: the
//               order of the consumers' waits, as FlashAttention-3's intra-warpgroup overlap);
//               0 each tile's K and V together (step 18: within one run's noise, H100).
//   o_tma       1: O stored through the warpgroup's Q stage by TMA, whose last thread waits for
//               the copy's read of shared memory before the block can end (persistent: before
//               the stage takes the next tile's Q; varlen: warpgroups whose rows all lie in
//               their sequence; step 24); 0 from registers (step 20: the registers' 4-byte
//               stores lose 1-28% on dense and causal problems, most at 512-1k; step 24:
//               persistent 1.01-1.09x by class median, varlen 1.01-1.12x, H100).
//   q_split     1: one mbarrier per consumer's 64 Q rows, and (with k_ahead=1) K_0 loaded right
//               after the first consumer's rows; 0 one for the block's whole Q tile (step 22:
//               1.015-1.062x at 512-1k, 0.98-1.02x at 4k-16k, H100).
//   keys128     1: dense d128 non-causal on 128 x 128 tiles, as causal d128 and FA4's SM90
//               forward; 0 on 128 x 176 (step 23: 1.016-1.042x at 512-4k, 0.99-1.01x at 8k-16k,
//               H100; persistent=1 too since step 25, fused_tail=1 since step 28). Soft caps
//               keep 128 x 176.
//   o_buf       1: the persistent kernel stages O in a region of its own where it fits (d64, the
//               128-key d128 tiles: WithOBuf), so its Q stage is free for the next tile at once
//               and the store's read is waited for a tile later; 0 through the held Q stage
//               (step 24). Step 26: 1.02-1.15x at 512-1k, 0.98-1.03x at 2k-16k (d64, d128,
//               under persistent=1; H100).
// (Step 19's option prefetch, the tensor maps prefetched at a block's start, was 0.98-1.02x,
// median 0.99 at d256 and d64, H100: removed. Step 21's turn0, each consumer's first S GEMM on
// its pingpong turn, class medians 0.995-1.012 in the second of two runs, H100: removed.)
struct FwdFlag {
  const char* name;
  int fallback;
};
// persistent's and fused_tail's fallback -1: persistent_auto() and fused_auto() decide (flag() is
// not asked for them).
constexpr FwdFlag kFwdFlags[] = {{"persistent", -1}, {"wide_tiles", 0}, {"fused_tail", -1},
                                 {"cap_max", 1},    {"skip_hidden", 1}, {"k_ahead", 1},
                                 {"o_tma", 1},      {"q_split", 1},     {"keys128", 1},
                                 {"o_buf", 1}};
// The option `name` (one of kFwdFlags) as given, else its default (no string built to find it:
// forward() reads these inside the timed call).
bool flag(const Options* o, const char* name) {
  for (const FwdFlag& f : kFwdFlags)
    if (std::strcmp(f.name, name) == 0 && f.fallback >= 0)
      return attnbench::option_or(o, name, f.fallback) != 0;
  throw std::logic_error(std::string("cuda.flash_fwd_wgmma: no option ") + name);
}
// The persistent schedule where the option does not say: on for dense and causal problems (no
// window, soft cap or varlen batch) whose queries and keys are at most kPersistentMaxSeq, where a
// block's few tiles make the fixed cost per block count (forward step 27, H100: persistent=1 / 0
// at 512 1.11-1.28x for d64/d128 and 1.00-1.03x for d256, at 1k 1.03-1.10x and 1.00-1.01x; at
// 2k-16k 0.93-1.02x, where a block per tile stays). Only what was measured: the FA3 grid's
// seq_q = seq_kv rows.
constexpr int kPersistentMaxSeq = 1024;
bool persistent_auto(const Problem& p) {
  return !p.has_window() && !(p.softcap > 0) && !p.varlen() && p.seq_q <= kPersistentMaxSeq &&
         p.seq_kv <= kPersistentMaxSeq;
}
// An option whose fallback in kFwdFlags is -1: as given, else `automatic`.
bool flag_or_auto(const Options* o, const char* name, bool automatic) {
  const long long v = attnbench::option_or(o, name, -1);
  return v < 0 ? automatic : v != 0;
}
bool persistent_of(const Problem& p, const Options* o) {
  return flag_or_auto(o, "persistent", persistent_auto(p));
}
// Each tile's tail scheduled with its exponentials where the option does not say: on for dense
// and causal problems on the d64 and d128 tiles without a soft cap (H100, fused_tail=1 / 0 at
// 2k-16k: d128 1.011-1.042x, forward step 28; d64 1.007-1.041x in two runs, step 29); off for
// d256 (step 29: 0.970-1.028x, medians 1.00-1.01) and soft caps (step 15 on the tiles of the
// day: within noise, 0.96-1.03x; not timed again). Windows and varlen batches ignore the option;
// so does the persistent schedule.
bool fused_auto(const Problem& p) {
  const int tile = FwdHeadDims::tile(p.head_dim);
  return !p.has_window() && !p.varlen() && !(p.softcap > 0) && (tile == 64 || tile == 128);
}
Choice choice_of(const Problem& p, const Options* o) {
  Choice k;
  k.persistent = persistent_of(p, o);
  k.wide = flag(o, "wide_tiles");
  k.fused = flag_or_auto(o, "fused_tail", fused_auto(p));
  k.keys128 = flag(o, "keys128");
  k.obuf = flag(o, "o_buf");
  return k;
}

class FlashFwdWgmma final : public attnbench::Implementation {
 public:
  std::string name() const override { return "cuda.flash_fwd_wgmma"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-3-class forward (sm_90a): TMA, wgmma, producer/consumer warpgroups";
  }
  Capabilities capabilities() const override {
    Capabilities c = attnbench::cuda::tensor_core_capabilities<FwdHeadDims>(true, false);
    for (const FwdFlag& f : kFwdFlags) c.options.push_back(f.name);
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    return c;
  }

  Support supports_options(const Problem&, Pass, const Options& o) const override {
    for (const FwdFlag& f : kFwdFlags) {
      const Support s = attnbench::cuda::check_flag_option(o, f.name);
      if (!s.ok) return s;
    }
    return Support::yes();
  }

  // Persistent: the tile counter, then two tile slots per block (kMaxPersistentBlocks at most).
  static constexpr int kMaxPersistentBlocks = 1024;
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options& o) const override {
    return pass != Pass::bwd && persistent_of(p, &o) ? 256 + 8 * kMaxPersistentBlocks : 0;
  }

  Support supports_extra(const Problem& p, Pass) const override {
    if (p.heads_q > 65535 || p.batch > 65535) {
      return Support::no("heads_q and batch must be <= 65535 (grid y/z)");
    }
    if (static_cast<int64_t>(p.batch) * p.heads_q * ((p.seq_q + 63) / 64) >
        (int64_t{1} << 31) - 1) {
      return Support::no("more than 2^31 query tiles");
    }
    std::string why;
    dispatch(p, Choice{}, [&](auto kernel, auto) { why = sm90a_missing(kernel); });
    if (!why.empty()) return Support::no(why);
    const int smem = attn_mma::max_smem_per_block(why);
    if (smem < 0) return Support::no(why);
    int need = 0;
    Choice own_o;
    own_o.persistent = own_o.keys128 = own_o.obuf = true;
    for (const Choice& k : {Choice{}, own_o})
      dispatch(p, k, [&](auto, auto cfg) { need = std::max(need, decltype(cfg)::kSmemBytes); });
    if (smem < need) {
      return Support::no("needs " + std::to_string(need) +
                         " bytes of shared memory per block, the device allows " +
                         std::to_string(smem));
    }
    return Support::yes();
  }

  void prepare(const Problem& p, Pass, const Options& o) const override {
    dispatch(p, choice_of(p, &o), [&](auto kernel, auto cfg) {
      attn_mma::set_dynamic_smem(kernel, decltype(cfg)::kSmemBytes);
      if constexpr (decltype(cfg)::kMinBlocks > 1) attn_mma::prefer_max_shared(kernel);
    });
  }

  void forward(const attnbench::FwdArgs& a) const override {
    const Problem& pr = a.p;
    const bool bf16 = pr.dtype == DType::bf16;
    const Choice choice = choice_of(pr, a.options);
    const bool persistent = choice.persistent;
    if (persistent && (a.workspace == nullptr || a.workspace_bytes < 256 + 8 * kMaxPersistentBlocks)) {
      throw std::invalid_argument("cuda.flash_fwd_wgmma: persistent=1 needs its workspace");
    }
    if (pr.varlen() && pr.total_q() == 0) return;  // no query: nothing to write
    dispatch(pr, choice, [&](auto kernel, auto cfg) {
      using Sh = decltype(cfg);
      // Varlen: the packed tensors as one sequence of all their rows (at least one, for a batch
      // without keys, whose blocks load none); each block offsets its rows by its sequence's.
      const int bt = pr.varlen() ? 1 : pr.batch;
      const int sq = pr.varlen() ? static_cast<int>(pr.total_q()) : pr.seq_q;
      const int skv = pr.varlen() ? std::max<int>(1, static_cast<int>(pr.total_kv())) : pr.seq_kv;
      const TensorMap tq = make_bshd_map(a.q, bf16, bt, sq, pr.heads_q, pr.head_dim, 64);
      const TensorMap tk =
          make_bshd_map(a.k, bf16, bt, skv, pr.heads_kv, pr.head_dim, Sh::kBlockN);
      const TensorMap tv =
          make_bshd_map(a.v, bf16, bt, skv, pr.heads_kv, pr.head_dim, Sh::kBlockN);
      const TensorMap to = make_bshd_map(a.o, bf16, bt, sq, pr.heads_q, pr.head_dim, 64);
      FwdParams p = attnbench::cuda::with_shape<FwdParams>(pr);
      p.var = attnbench::cuda::make_variant(a);
      p.cap_max = flag(a.options, "cap_max") ? 1 : 0;
      p.skip_hidden = flag(a.options, "skip_hidden") ? 1 : 0;
      p.k_ahead = flag(a.options, "k_ahead") ? 1 : 0;
      p.o_tma = flag(a.options, "o_tma") ? 1 : 0;
      p.q_split = flag(a.options, "q_split") ? 1 : 0;
      p.lse = a.lse;
      p.o = a.o;
      p.tile_counter = persistent ? static_cast<int*>(a.workspace) : nullptr;
      p.tile_slots =
          persistent ? reinterpret_cast<int*>(static_cast<char*>(a.workspace) + 256) : nullptr;
      p.num_m_blocks = (pr.seq_q + Sh::kBlockM - 1) / Sh::kBlockM;
      p.num_tiles = p.num_m_blocks * pr.heads_q * pr.batch;
      p.pairs = pr.heads_q * pr.batch;
      // The launch order (grouped_order): grouped where it was measured to win, causal d128 and
      // d256 without a window (0.92-0.98 of the time at 2k-8k; forward step 10 of
      // docs/tuning_flash_wgmma.md); elsewhere groups of one pair, each pair's query blocks
      // together, the order before it (non-causal took 1.01-1.03 of the time grouped, causal
      // d64 1.00-1.01).
      const bool grouped = pr.causal && pr.head_dim > 64 && !pr.has_window() && !pr.varlen();
      p.head_group =
          grouped ? attnbench::cuda::launch_group(multiprocessors(), p.num_m_blocks, p.pairs) : 1;
      dim3 grid(p.num_m_blocks, pr.heads_q, pr.batch);
      if (persistent) {
        launch_memset_zero(p.tile_counter, 4, a.stream);
        grid = dim3(std::min({p.num_tiles, multiprocessors(), kMaxPersistentBlocks}));
      }
      launch(kernel, grid, dim3(Sh::kThreads), Sh::kSmemBytes, a.stream, tq, tk, tv, to, p);
    });
  }
};

}  // namespace
}  // namespace attn_hopper

ATTNBENCH_REGISTER(attn_hopper::FlashFwdWgmma)
