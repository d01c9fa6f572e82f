// cuda.flash_bwd_wgmma — FlashAttention-3-class backward for Hopper (sm_90a): TMA loads, wgmma,
// warp specialization, dQ by bulk reduce-add.
//
// Three kernels per call:
//  1. preprocess: D = rowsum(dO ∘ O) into a float32 workspace [B, Hq, Sq_pad] (zero past seq_q),
//     and beside it LSE·log2e, +inf past seq_q and where LSE = -inf (so that P = exp2(s·scale·log2e
//     − LSE·log2e) is exactly 0 there without a test); the float32 dQ accumulator
//     [B, Hq, Sq_pad, d_pad] is zeroed (cudaMemsetAsync) before it;
//  2. main: a block owns kBlockN = 128 keys (d256: 64) of one (batch, kv head) and walks every
//     query head of its GQA group and every query tile of kBlockM rows that sees one of its keys
//     (causal: from the diagonal on). The blocks start in
//     common/shape.hpp's grouped_order: pairs of (kv head, sequence) in groups of about a wave, key
//     block by key block within a group (causal: the longest blocks first). Warpgroup 0 is the
//     producer: one thread loads K and V once and then each query tile's Q and dO into a 2-stage
//     (d256: 1) ring of 128B-swizzled stages (TMA, mbarriers).
//     The tile's LSE·log2e and D rows come one tile ahead into a double buffer in shared memory
//     (cp.async from one consumer warp, landed before the consumers' per-tile barrier), so the
//     consumers read them from shared memory, not from L2 after their GEMMs. Not through the
//     producer's stage (bulk copies, FlashAttention-3's arrangement, af0fca2): that reuse is
//     ordered by the stage's mbarriers, which compute-sanitizer's racecheck does not model (the
//     gate of 6f1c2d3 reported 180392 WAR hazards), and racecheck must stay at 0 hazards.
//     Each of the 2 consumer warpgroups owns 64 of the keys and, per query tile, computes
//       Sᵀ = K Qᵀ, then dPᵀ = V dOᵀ    (SS-wgmma, keys as rows; two groups),
//       Pᵀ = exp2(scale·log2e·Sᵀ − LSE·log2e)   (registers, while the dPᵀ GEMM runs),
//       dSᵀ = Pᵀ ∘ (dPᵀ − D), written to shared memory (two buffers by tile parity),
//       dV += Pᵀ dO                     (RS-wgmma, running through the consumers' barrier),
//     and after that barrier (both dSᵀ halves in shared memory) its part of
//       dQ_tile = dS K                  (SS-wgmma, A = dS from dSᵀ read M-major),
//       dK += dSᵀ Q                     (RS-wgmma, A = dSᵀ from registers, running while dQ is
//                                        stored; soft cap: SS-wgmma, A = its rows of dSᵀ in
//                                        shared memory, in flight into the next tile until that
//                                        tile's Sᵀ has landed, groups retiring in order: kDkSmem),
//     the dQ part going to the consumer's own region of shared memory (two by tile parity where
//     they fit: d128, BwdCfg::kDqBufs), from which a writer warp of the producer warpgroup (one
//     per consumer, synchronised by named barriers) adds it into the dQ accumulator with one bulk
//     reduce-add (cp.reduce.async.bulk .add.f32): the consumers neither wait for each other's dQ
//     nor for L2. dK (times scale) and dV, summed over the group
//     in registers, are written once at the end: no atomics on dK/dV, so GQA/MQA need no second
//     pass. (FlashAttention-3's order and dQ writer, learnt from its hopper/ mainloop.)
//  3. postprocess: dQ = scale · accumulator (tile-blocked: per query tile, the two consumers'
//     chunks), in the dtype and BSHD layout.
//     At d256 (tile 64 x 64, one Q/dO stage), and with option wide_tiles=0 for windows spanning
//     at most 640 keys at d128 (64 x 64, two stages: BwdNarrow), the consumers split
//     the columns of dK/dV instead of the keys: each computes Sᵀ and dPᵀ for half of the tile's
//     queries, writes Pᵀ and dSᵀ to shared memory, and runs dV += Pᵀ dO and dK += dSᵀ Q as
//     SS-wgmma on its half of the columns.
// Shapes: any seq >= 1 (TMA zero-fills tails; masks cover them); head_dim any multiple of 8 up to
// 256, on the 64, 128 or 256 tile (zero-filled columns). Causal is bottom-right aligned.
// Sliding windows, soft caps and varlen batches (issue 30) run in variant instantiations (kLocal,
// kSoftcap; common/dispatch.hpp's dispatch_variant), the dense and causal kernels unchanged: a
// key block visits only the query tiles that see one of its keys and masks the tiles crossing a
// window edge; the soft cap takes t = tanh(q.k · scale / softcap) before the mask and multiplies
// dS by 1 − t²; a varlen batch (packed THD, cu_seqlens) gives each block its sequence's lengths
// and first rows (common/shape.hpp's seq_of), and each sequence its own 128-row-padded rows in
// the workspaces (StatLayout), so a query tile never adds into another sequence's dQ rows. A
// sequence without queries gets dK = dV = 0, one without keys dQ = 0.
// Extra memory: 8 B per StatLayout row (D, LSE·log2e) + 4 B · d_pad per row (the dQ accumulator)
// + 8 B per 64 rows (turn counters); rows: B · Hq · Sq_pad, varlen Hq · 128 · (⌊total_q / 128⌋ +
// B + 1).
// Option deterministic=1: key blocks add into each query tile's dQ in a fixed order (a turn
// counter per query tile and dQ chunk, one step per block), so dQ is the same bit for bit on
// every run; default 0, any order. The order is the one in which the blocks reach the
// tile: with causal or a window, from the tile's last key block down to its first, the blocks
// launched in descending order (as FlashAttention-3 does for causal); otherwise ascending.
// Option m_tile (64 or 80; unset: 80 from 2048 query rows up, backward steps 27 and 28): 80 runs
// the dense (no window, soft cap or varlen) non-causal non-deterministic backward at head_dim
// 72..128 (the 128 tile) on 80 x 128 tiles (BwdM80, FlashAttention-3's tile there), every other
// problem ignoring it. wgmma's M is 64 a warpgroup, so the dQ GEMM runs swapped there: dQᵀ (the
// consumer's 64 columns of d x 80 queries) = Kᵀ dSᵀ, A = K's panel read MN-major, B = dS stored
// as [query][key] (each consumer's 64 keys one 128-byte-swizzled panel, written by stmatrix
// .trans); the dQᵀ fragments go to the consumer's [query][d] region by 4-byte stores
// (dq_swizzle_t), one region (no second fits in the 231,720 bytes). Its workspaces pad each
// (sequence, head) to 320 rows (the lcm of 80 and 64).
// Registers: the producer warpgroup keeps 40 (the TMA thread and the dQ writers' loops), the
// consumers 232 (40 · 128 + 2 · 232 · 128 = 64512 of 65536); m_tile=80's kernel 24 and 240
// (64512 too: BwdCfg::kProducerRegs, kConsumerRegs).
// Limits: f16/bf16; sm_90a only.
// Not yet overlapped: the consumers' barrier keeps their element-wise work in step, and the next
// tile's Sᵀ/dPᵀ GEMMs wait for this tile's dK GEMM (soft cap: its element-wise work does)
// (docs/tuning_flash_wgmma.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <hopper/host.cuh>
#include <hopper/pipeline.cuh>
#include <hopper/ptx.cuh>
#include <hopper/wgmma_ops.cuh>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/implementation.hpp"
#include "common/capabilities.hpp"
#include "common/shape.hpp"

namespace attn_hopper {
namespace bwd_wgmma {

// kBlockM query rows per step, kBlockN keys per block, a kStages-deep Q/dO ring.
// kBlockN = 128: each consumer owns 64 of the keys (all head_dim columns of their dK and dV).
// kBlockN = 64 (kSplitCols, d256): both consumers work on the same 64 keys, consumer c owning
// columns [D/2 c, D/2 (c+1)) of dK and dV (64 keys x 256 columns of both would be 256 registers a
// thread); each computes Sᵀ and dPᵀ for half of the tile's queries, and Pᵀ and dSᵀ meet in
// shared memory for the SS-wgmma dV and dK GEMMs.
// kSplitM: the dQ tile is split between the consumers by rows (kBlockM = 128) instead of columns.
template <int D_, int kBlockM_, int kBlockN_, int kStages_>
struct BwdCfg {
  static constexpr int D = D_, kBlockM = kBlockM_, kBlockN = kBlockN_, kStages = kStages_;
  static constexpr int kConsumers = 2, kThreads = 384;
  static constexpr bool kSplitCols = kBlockN == 64;
  static constexpr bool kSplitM = kBlockM == 128;
  // kSwapDq (kBlockM = 80, option m_tile=80): wgmma's M is 64 a warpgroup, so the dQ GEMM runs
  // swapped, dQᵀ (this consumer's 64 columns of d x the tile's 80 queries) = Kᵀ dSᵀ, with dS
  // stored as [query][key] (each consumer's 64 keys one 128-byte-swizzled panel of 80 rows).
  static constexpr bool kSwapDq = kBlockM == 80;
  static constexpr int kDqN = kSplitM ? D : D / 2;     // dQ columns per consumer
  static constexpr int kDkvN = kSplitCols ? D / 2 : D;  // dK and dV columns per consumer
  static constexpr int kSN = kSplitCols ? kBlockM / 2 : kBlockM;  // Sᵀ columns (queries) per consumer
  static constexpr int kPanels = D / 64;
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kQBytes = kBlockM * D * 2;  // one Q or dO stage
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kDqBytes = kBlockM * D * 4;
  static constexpr int kOffV = kKVBytes, kOffQ = 2 * kKVBytes;
  static constexpr int kOffDs = kOffQ + 2 * kStages * kQBytes;
  // dSᵀ (kSplitCols: and Pᵀ beside it, the dV GEMM's A operand; otherwise Pᵀ stays in
  // registers) in two buffers, by iteration parity: a consumer may write the next tile's while
  // the other's dQ GEMM still reads this tile's (the consumers' barrier 1 keeps them within one
  // iteration of each other).
  static constexpr int kDsBufBytes = (kSplitCols ? 2 : 1) * kDsBytes;
  // The dQ tile in shared memory: one region of kDqBytes / 2 per consumer (its rows, kSplitM, or
  // its columns, row-major within), reduce-added by that consumer's writer warp as one chunk;
  // kDqBufs of them by iteration parity, two where shared memory allows (backward step 17: the
  // consumer then writes the next tile's while the writer's reduce-add still reads this one's).
  static constexpr int kOffDq = kOffDs + 2 * kDsBufBytes;
  // Per stat buffer: kBlockM floats of LSE·log2e, then kBlockM of D.
  static constexpr int kStatBytes = 2 * kBlockM * 4;
  static constexpr int kBarBytes = 8 * (1 + 2 * kStages);
  static constexpr int kDqBufs =
      kOffDq + 2 * kDqBytes + 2 * kStatBytes + kBarBytes + 1024 <= 232448 ? 2 : 1;
  // Two stat buffers: this tile's, the next's.
  static constexpr int kOffStat = kOffDq + kDqBufs * kDqBytes;
  static constexpr int kOffBar = kOffStat + 2 * kStatBytes;
  static constexpr int kSmemBytes = kOffBar + kBarBytes + 1024;
  static_assert(kSmemBytes <= 232448, "shared memory per block on sm_90");
  static_assert(kSplitM || D >= 128, "a column half of dQ must be whole 64-column panels");
  static_assert(!kSplitCols || (kBlockM == 64 && D >= 128), "column halves of whole panels");
  static_assert(kSplitCols || kBlockN == 128, "64 keys per consumer");
  static_assert(kDqN % 64 == 0, "dq_swizzle's 8 groups of 8 floats within a chunk row");
  static_assert(!kSwapDq || (D == 128 && kBlockN == 128 && kStages == 2 && kDqBufs == 1),
                "80-row tiles: d128, 128 keys, two stages, one dQ region (231,720 bytes)");
  // setmaxnreg: the producer warpgroup's registers a thread, and each consumer's. The block holds
  // what it was launched with, 168 a thread (65536 / 384 in steps of 8: 64512), and
  // setmaxnreg.inc takes only from that block's pool: a split above 64512 blocks the consumers'
  // setmaxnreg.inc for ever. kSwapDq: 240 (Sᵀ and dPᵀ 40 each in flight beside dV and dK 64
  // each: at 232 ptxas serialized the wgmma and spilled 480 bytes), the producer 24 (128 · 24 +
  // 256 · 240 = 64512, FlashAttention-3's split for two consumer warpgroups).
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = kSwapDq ? 24 : 40;
  static constexpr int kConsumerRegs = kSwapDq ? 240 : 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kThreads * kLaunchRegs,
                "the block's registers at launch");
};

// d64: 128 x 128 (Sᵀ and dPᵀ 64 registers each, dK/dV 32 each); d128: 64 x 128 (Sᵀ/dPᵀ 32,
// dK/dV 64 each): FlashAttention-3's tiles. d256: 64 x 64 as FlashAttention-3, with the columns
// of dK/dV split between the consumers (Sᵀ/dPᵀ 16 registers each, dK/dV 64 each, dQ 64), and one
// Q/dO stage: K, V 32 KiB each, the stage 64 KiB, Pᵀ and dSᵀ 16 KiB and the float32 dQ tile 64 KiB
// make 208 KiB of 227; a second stage would need 64 KiB more. The stage is released as soon as the
// dV and dK GEMMs have read it, so the next tile's loads overlap the dQ GEMM and its reduce-add.
template <int D>
struct BwdTile;
template <>
struct BwdTile<64> {
  using type = BwdCfg<64, 128, 128, 2>;
};
template <>
struct BwdTile<128> {
  using type = BwdCfg<128, 64, 128, 2>;
};
template <>
struct BwdTile<256> {
  using type = BwdCfg<256, 64, 64, 1>;
};

// Narrow windows at d128 (a window spanning at most kNarrowSpan keys; causal: left side and
// diagonal): 64-key blocks on the d256 path's column split, both consumers on the same 64 keys,
// each owning 64 of the 128 dK/dV columns, two Q/dO stages (194 KiB of shared memory, with two
// dQ regions). A block of BN keys visits the query tiles of rows [k0 − window_right, k0 + BN − 1 +
// window_left], so the rows its tiles compute beyond the window's are about BN + BM per block,
// whatever the window: at (128, 0), 128-key blocks compute 2x the useful scores and 64-key blocks
// 1.5x (tuning log, "Backward: narrow windows"). Measured slower than BwdTile's tiles (backward
// step 15: the wide ones 1.06-1.21x faster on an H100), so they run only with option
// wide_tiles=0; the default (1) keeps BwdTile's.
struct BwdNarrow {
  using type = BwdCfg<128, 64, 64, 2>;
};
// Option m_tile=80 (backward step 27): the d128 dense non-causal non-deterministic kernel on
// 80 x 128 tiles, FlashAttention-3's tile there: 25% more work per tile for the same hand-offs
// (the consumers' barrier, the dQ writer's, the stage releases). Shared memory: K, V 2 x 32768,
// Q/dO two stages of 80 rows 4 x 20480, dS two buffers 2 x 20480, one float32 dQ region 40960
// (a second does not fit), stats 2 x 640, barriers and 1 KiB slack: 231,720 of 232,448 bytes.
// Every other problem (causal, windows, soft caps, varlen, deterministic, d64/d256) keeps its
// tiles. Its StatLayout pads the rows of each (sequence, head) to a multiple of kM80Pad (320,
// the lcm of 80 and 64), so that 80-row tiles stay within their (sequence, head) and the 64-row
// kernel (dK or dV not 16-byte aligned: the kLocal kernel) still finds whole 64-row tiles (and
// its turn counters, two per 64 rows, whole). Until session 67 the lcm of 80 and 128 (640):
// 25% more rows than seq_q at 2k, 9% at 4k; 320 pads 2k by 9%, 4k by 1.6%.
struct BwdM80 {
  using type = BwdCfg<128, 80, 128, 2>;
};
constexpr int kM80Pad = 320;
// m_tile unset: the 80-row tiles from this many query rows up (backward step 28). Timed twice on
// an H100 against the 64-row tiles (m_tile=80 / 64, non-causal d128): 1.011-1.051 at 2k-16k,
// 0.985-0.989 at 1k and 0.909-0.915 at 512 (a 512-row sequence fills 7 tiles of 80 for 6.4).
constexpr int kM80MinSeqQ = 2048;
constexpr long long kNarrowSpan = 640;

// Where column `col` of row `row` of a consumer's dQ chunk lives within that row (and so in the
// accumulator, which holds the chunk as it is in shared memory): the 8-float groups XORed with
// the row's low 3 bits. A warp's 64-bit stores of the wgmma accumulator (8 rows x 4 lanes x 2
// floats, chunk rows 64, 128 or 256 floats apart, so every row starts in bank 0) then hit 32
// different banks per half-warp instead of 4 (backward step 9). Chunk rows are at least 64
// floats (BwdCfg::kDqN), so the XOR stays within the row.
__host__ __device__ constexpr int dq_swizzle(int row, int col) {
  return col ^ ((row & 7) << 3);
}
// The same for the 80-row tiles' chunks (kSwapDq), which the consumers store from the dQᵀ
// accumulator: a warp's 4-byte stores there cover 8 columns (lane / 4) x 4 rows 2 apart
// (2 (lane % 4)), so the groups are XORed with bits 1-3 of the row (row / 2 % 8): the 4 rows then
// fall in 4 different bank quarters (with row % 8, rows 2 apart share two: 2-way conflicts).
__host__ __device__ constexpr int dq_swizzle_t(int row, int col) {
  return col ^ (((row >> 1) & 7) << 3);
}

// Query rows of the D and dQ workspaces per (batch, head): seq_q rounded up to `unit` (128;
// kM80Pad where the 80-row tiles run).
inline int seq_q_pad(int seq_q, int unit = 128) {
  return (seq_q + unit - 1) / unit * unit;
}

}  // namespace bwd_wgmma

namespace {

using attn_mma::Elem;

// Where the rows of (sequence b, query head h) start in the float32 workspaces (D, LSE·log2e, the
// dQ accumulator, the deterministic turn counters), each sequence's rows padded to whole 128-row
// tiles, so that a query tile never reaches another sequence's rows:
//  - dense: [B, Hq, Sq_pad], (b, h) at (b·Hq + h)·Sq_pad;
//  - varlen (cu_q set): [Hq, pad_total], (b, h) at h·pad_total + 128·(⌊cu_q[b] / 128⌋ + b). From
//    one sequence to the next that grows by 128·(⌊cu_q[b+1] / 128⌋ − ⌊cu_q[b] / 128⌋ + 1) ≥
//    128·⌈len_b / 128⌉ rows: room for its padded rows, without a table of offsets.
struct StatLayout {
  const int* cu_q;  // varlen: the query prefix sums; null when dense
  int batch, heads_q;
  int seq_q, seq_q_pad;  // dense
  int total_q;           // varlen: packed query rows
  int64_t pad_total;     // varlen: rows per head
  __device__ int64_t seq_base(int b) const {
    return cu_q ? 128 * (static_cast<int64_t>(cu_q[b] / 128) + b)
                : static_cast<int64_t>(b) * heads_q * seq_q_pad;
  }
  __device__ int64_t head_stride() const { return cu_q ? pad_total : seq_q_pad; }
  __device__ int64_t row(int b, int h) const { return seq_base(b) + h * head_stride(); }
};

// The shape (common/shape.hpp) at the head, then this kernel's tensors and sizes.
struct BwdParams : attnbench::cuda::AttnShape {
  const float* lse2;   // StatLayout rows: LSE·log2e, +inf past seq_q and for LSE = -inf
  const float* delta;  // StatLayout rows
  float* dq_accum;    // StatLayout rows x D
  int* dq_turn;       // deterministic: two per 64 StatLayout rows (a tile's chunk 0 and 1): whose turn
  void* dk;           // [B, Skv, Hkv, head_dim] (varlen: [total_kv, Hkv, head_dim])
  void* dv;
  StatLayout stats;
  float scale;
  attnbench::cuda::AttnVariant var;  // window, soft cap, varlen (kLocal, kSoftcap): common/shape.hpp
  int kv_blocks;   // key blocks per (kv head, sequence): the grid is kv_blocks x pairs
  int head_group;  // pairs per launch group (common/shape.hpp's grouped_order)
  int pairs;       // (kv head, sequence) pairs: heads_kv x batch
  int dkv_tma;     // kLocal kernels at d >= 128: dK/dV by TMA store (not varlen, both aligned)
};

// Σ x·y over the two elements of each packed pair.
template <class T>
__device__ __forceinline__ float dot2(uint32_t x, uint32_t y) {
  const float2 a = Elem<T>::unpack2(x), b = Elem<T>::unpack2(y);
  return a.x * b.x + a.y * b.y;
}

// D = rowsum(dO ∘ O) and LSE·log2e (+inf where P must be 0: past seq_q, LSE = -inf) for every
// StatLayout row. kLanes lanes per row (a power of two, at least head_dim / 8), each reading 8
// elements (16 bytes; kVec16, else 2 elements, when O or dO is not 16-byte aligned) of O and dO
// at a time; 256 / kLanes rows per block. Varlen: the row's sequence by binary search over the
// padded starts (rows between two sequences' padding belong to the first, past its length).
// (Backward step 10: one warp per row with 4-byte loads ran at about a third of HBM bandwidth.)
template <class T, int kLanes, bool kVec16>
__global__ void __launch_bounds__(256)
    bwd_preprocess_wgmma_kernel(const T* o, const T* dout, const float* lse, float* delta,
                                float* lse2, const StatLayout L, int head_dim, int64_t rows) {
  const int sub = threadIdx.x % kLanes;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (256 / kLanes) + threadIdx.x / kLanes;
  int i = 0, h = 0, len = 0;
  int64_t tok0 = 0, lse_at = 0;  // the sequence's first token row; the LSE of its row 0 for head h
  // q, rem = x / d, x % d, in 32 bits where both fit (a 64-bit division is a long subroutine,
  // and every lane of a row does this).
  auto divmod = [](int64_t x, int64_t d, int64_t& q, int64_t& rem) {
    if (x <= 0x7fffffff && d <= 0x7fffffff) {
      const uint32_t q32 = static_cast<uint32_t>(x) / static_cast<uint32_t>(d);
      q = q32;
      rem = x - static_cast<int64_t>(q32) * d;
    } else {
      q = x / d;
      rem = x - q * d;
    }
  };
  if (r < rows) {
    if (L.cu_q != nullptr) {
      int64_t hq, pr;
      divmod(r, L.pad_total, hq, pr);
      h = static_cast<int>(hq);
      int lo = 0, hi = L.batch - 1;  // the last sequence whose padded rows start at or before pr
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (L.seq_base(mid) <= pr) lo = mid; else hi = mid - 1;
      }
      i = static_cast<int>(pr - L.seq_base(lo));
      len = L.cu_q[lo + 1] - L.cu_q[lo];
      tok0 = L.cu_q[lo];
      lse_at = static_cast<int64_t>(h) * L.total_q + tok0;
    } else {
      int64_t bh, i64, b, h64;
      divmod(r, L.seq_q_pad, bh, i64);
      divmod(bh, L.heads_q, b, h64);
      i = static_cast<int>(i64);
      h = static_cast<int>(h64);
      len = L.seq_q;
      tok0 = b * L.seq_q;
      lse_at = bh * L.seq_q;
    }
  }
  float acc = 0.f;
  if (i < len) {  // (false past rows: len 0)
    const int64_t base = ((tok0 + i) * L.heads_q + h) * head_dim;
    if constexpr (kVec16) {
      for (int d = 8 * sub; d < head_dim; d += 8 * kLanes) {
        const uint4 x = *reinterpret_cast<const uint4*>(o + base + d);
        const uint4 y = *reinterpret_cast<const uint4*>(dout + base + d);
        acc += dot2<T>(x.x, y.x) + dot2<T>(x.y, y.y) + dot2<T>(x.z, y.z) + dot2<T>(x.w, y.w);
      }
    } else {
      for (int d = 2 * sub; d < head_dim; d += 2 * kLanes) {
        acc += dot2<T>(*reinterpret_cast<const uint32_t*>(o + base + d),
                       *reinterpret_cast<const uint32_t*>(dout + base + d));
      }
    }
  }
  acc = attn_mma::group_sum<kLanes>(acc);  // every lane takes part (whole groups share r)
  if (sub == 0 && r < rows) {
    delta[r] = acc;
    const float l = i < len ? lse[lse_at + i] : -__builtin_huge_valf();
    lse2[r] = l == -__builtin_huge_valf() ? __builtin_huge_valf() : l * attnbench::cuda::kLog2e;
  }
}

// dQ = scale · accumulator. A block per query token (grid-stride over B · Sq, or total_q): its
// sequence and position found once (varlen: binary search over cu_q), its threads over (head,
// 8-column group), each reading one dq_swizzle group of the accumulator (8 contiguous floats, 32
// bytes) and writing 16 bytes of dQ (kVec16; else four 4-byte stores, when dQ is not 16-byte
// aligned). The accumulator holds each query tile of bm rows as the main kernel's two consumer
// chunks of bm x d_pad / 2 floats: split_m, rows [0, 64) then [64, 128), each row-major over
// d_pad columns; else columns [0, d_pad / 2) then the rest, each row-major over its d_pad / 2;
// within a chunk row, the columns placed by bwd_wgmma::dq_swizzle (swap_dq, the 80-row tiles:
// bwd_wgmma::dq_swizzle_t). (Backward step 10: one thread per element pair, with six 64-bit
// divisions each, ran at about a quarter of HBM bandwidth.)
template <class T, bool kVec16>
__global__ void __launch_bounds__(256)
    bwd_postprocess_wgmma_kernel(const float* dq_accum, T* dq, const StatLayout L, int head_dim,
                                 int d_pad, int bm, bool split_m, bool swap_dq, float scale,
                                 int64_t tokens) {
  const int groups = head_dim / 8, half = d_pad / 2;
  for (int64_t tok = blockIdx.x; tok < tokens; tok += gridDim.x) {
    int b, i;
    if (L.cu_q != nullptr) {
      int lo = 0, hi = L.batch - 1;  // the last sequence starting at or before tok
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (L.cu_q[mid] <= tok) lo = mid; else hi = mid - 1;
      }
      b = lo;
      i = static_cast<int>(tok - L.cu_q[lo]);
    } else {  // 32-bit division where the token fits (a 64-bit one is a long subroutine)
      b = tok <= 0x7fffffff
              ? static_cast<int>(static_cast<uint32_t>(tok) / static_cast<uint32_t>(L.seq_q))
              : static_cast<int>(tok / L.seq_q);
      i = static_cast<int>(tok - static_cast<int64_t>(b) * L.seq_q);
    }
    const int r = i % bm;
    for (int j = threadIdx.x; j < L.heads_q * groups; j += blockDim.x) {
      const int h = j / groups, d = 8 * (j - h * groups);
      const int64_t chunk = split_m ? static_cast<int64_t>(r / 64) * 64 * d_pad +
                                          (r % 64) * d_pad + bwd_wgmma::dq_swizzle(r % 64, d)
                                    : static_cast<int64_t>(d / half) * bm * half + r * half +
                                          (swap_dq ? bwd_wgmma::dq_swizzle_t(r, d % half)
                                                   : bwd_wgmma::dq_swizzle(r, d % half));
      const float* src = dq_accum + (L.row(b, h) + i - r) * d_pad + chunk;
      const float4 lo4 = *reinterpret_cast<const float4*>(src);
      const float4 hi4 = *reinterpret_cast<const float4*>(src + 4);
      const uint32_t w0 = Elem<T>::pack2(lo4.x * scale, lo4.y * scale);
      const uint32_t w1 = Elem<T>::pack2(lo4.z * scale, lo4.w * scale);
      const uint32_t w2 = Elem<T>::pack2(hi4.x * scale, hi4.y * scale);
      const uint32_t w3 = Elem<T>::pack2(hi4.z * scale, hi4.w * scale);
      T* dst = dq + (tok * L.heads_q + h) * head_dim + d;
      if constexpr (kVec16) {
        *reinterpret_cast<uint4*>(dst) = uint4{w0, w1, w2, w3};
      } else {
        uint32_t* dst4 = reinterpret_cast<uint32_t*>(dst);
        dst4[0] = w0;
        dst4[1] = w1;
        dst4[2] = w2;
        dst4[3] = w3;
      }
    }
  }
}

// A 1-D grid of ceil(Skv / kBlockN) x Hkv x B blocks in grouped_order, Cfg::kThreads
// threads, Cfg::kSmemBytes of dynamic smem. tq/tdo: [B, Sq, Hq, head_dim], boxes of kBlockM rows;
// tk/tv: [B, Skv, Hkv, head_dim], kBlockN rows (varlen: the packed tensors as one sequence, a
// block's rows offset by its sequence's); tdk/tdv: dK and dV like tk/tv (for the TMA stores of
// the epilogue).
// kLocal: a sliding window (p.var; causal folded into its right side, kCausal false): a block
// visits only the query tiles that see one of its keys, and the tiles crossing an edge are
// masked. A varlen batch runs here too. kSoftcap: P from t = tanh(q.k · softcap_in) with
// softcap · log2(e), and dS carries the capped logit's derivative factor 1 − t² (scale is applied
// to dQ and dK as always).
template <class T, class Cfg, bool kCausal, bool kLocal, bool kSoftcap, bool kDeterministic>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    flash_bwd_wgmma_kernel(const __grid_constant__ TensorMap tq,
                           const __grid_constant__ TensorMap tk,
                           const __grid_constant__ TensorMap tv,
                           const __grid_constant__ TensorMap tdo,
                           const __grid_constant__ TensorMap tdk,
                           const __grid_constant__ TensorMap tdv, const BwdParams p) {
#if ATTN_HOPPER_DEVICE
  constexpr int D = Cfg::D, BM = Cfg::kBlockM, BN = Cfg::kBlockN, S = Cfg::kStages;
  constexpr bool kSplitCols = Cfg::kSplitCols;
  constexpr int SN = Cfg::kSN, DKV = Cfg::kDkvN;
  // The dK GEMM's A operand (not kSplitCols): dSᵀ from shared memory, the GEMM left in flight
  // into the next tile (backward steps 7 and 8), only in the soft-cap kernels. There it frees the
  // registers whose lack made ptxas serialize the d128 kernels' wgmma, and measured 11-17% faster
  // at d128; in the dense and causal kernels the same steps measured 0.5-6% slower (the 16 KiB of
  // extra shared-memory reads per consumer and tile), so those keep dSᵀ in registers (RS-wgmma)
  // and wait for the GEMM at the end of the tile (results/h200/ab/2026-12-04-bwd-step7-8).
  constexpr bool kDkSmem = kSoftcap && !kSplitCols;
  const attnbench::cuda::GroupedIndex gi = attnbench::cuda::grouped_order(
      static_cast<int>(blockIdx.x), p.kv_blocks, p.head_group, p.pairs);
  // Deterministic with causal or a window: the key blocks in descending order, as turn_of below
  // adds them into dQ, so that a block only ever waits for blocks launched before it.
  constexpr bool kLastFirst = kDeterministic && (kCausal || kLocal);
  const int n_block = kLastFirst ? p.kv_blocks - 1 - gi.block : gi.block;
  const int kvh = gi.pair % p.heads_kv, b = gi.pair / p.heads_kv;
  const int n0 = n_block * BN;
  // The block's sequence: the shape's, or (varlen, kLocal only) its own lengths and first rows in
  // the packed tensors, which the TMA maps see as one sequence (batch coordinate 0).
  int seq_q = p.seq_q, seq_kv = p.seq_kv, coff = p.causal_offset;
  int q_tma0 = 0, kv_tma0 = 0, tma_b = b;  // TMA row offsets and batch coordinate
  int64_t kv_row0 = static_cast<int64_t>(b) * p.seq_kv;  // dK/dV rows
  if constexpr (kLocal) {
    if (p.var.cu_seqlens_q != nullptr) {
      const attnbench::cuda::SeqView seq = attnbench::cuda::seq_of(p, p.var, b);
      seq_q = seq.seq_q;
      seq_kv = seq.seq_kv;
      coff = seq.causal_offset;
      q_tma0 = static_cast<int>(seq.q_start);
      kv_tma0 = static_cast<int>(seq.kv_start);
      kv_row0 = seq.kv_start;
      tma_b = 0;
      if (n0 >= seq_kv) return;  // past the sequence's keys: no dK/dV row (the whole block)
    }
  }
  // Query tiles that see a key of this block: causal starts at the first one reaching key n0; a
  // window (rows i with j − coff − window_right ≤ i ≤ j − coff + window_left for a key j of the
  // block) ends too.
  int m_start = 0, m_end = (seq_q + BM - 1) / BM;
  if (kCausal) m_start = max(0, (n0 - coff) / BM);
  if constexpr (kLocal) {
    m_start = max(0, n0 - coff - p.var.window_right) / BM;
    m_end = (max(0, min(seq_q, n0 + BN - coff + p.var.window_left)) + BM - 1) / BM;
  }
  const int m_count = max(0, m_end - m_start);
  const int n_iters = p.group * m_count;

  const uint32_t base = (attn_mma::smem_u32(attn_mma::dynamic_smem()) + 1023u) & ~1023u;
  const uint32_t sk = base, sv = base + Cfg::kOffV;
  auto sq = [&](int s) { return base + Cfg::kOffQ + 2 * s * Cfg::kQBytes; };
  auto sdo = [&](int s) { return base + Cfg::kOffQ + (2 * s + 1) * Cfg::kQBytes; };
  auto sds = [&](int buf) { return base + Cfg::kOffDs + buf * Cfg::kDsBufBytes; };
  auto spt = [&](int buf) { return sds(buf) + Cfg::kDsBytes; };  // kSplitCols: Pᵀ, like dSᵀ
  auto sdq = [&](int cons, int dbuf) {
    return base + Cfg::kOffDq + dbuf * Cfg::kDqBytes + cons * (Cfg::kDqBytes / 2);
  };
  auto slse = [&](int buf) { return base + Cfg::kOffStat + buf * Cfg::kStatBytes; };
  auto sdelta = [&](int buf) { return slse(buf) + 4 * BM; };
  const uint32_t bars = base + Cfg::kOffBar;
  // kv_full (K and V, loaded once), then the Q/dO ring's pipeline (hopper/pipeline.cuh):
  // qdo_full[S], qdo_empty[S]; its iterations are the block's query tiles.
  const uint32_t kv_full = bars;
  const Pipeline<S> qdo_pipe{bars + 8, bars + 8 * (1 + S)};

  const int wg = warp_uniform(threadIdx.x / 128);
  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    for (int s = 0; s < S; ++s) {
      mbar_init(qdo_pipe.full_of(s), 1);
      mbar_init(qdo_pipe.empty_of(s), Cfg::kConsumers);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // Named barriers: 1, the two consumers (both dSᵀ halves in shared memory before the dQ GEMM);
  // per consumer c and dQ buffer d, dq_full(c, d) (its region written: 128 consumer threads
  // arrive, its writer warp waits), and per consumer kDqEmpty + c (a region's reduce-add has read
  // it: the writer arrives, the consumer waits before writing it again). Barriers with bar.sync /
  // bar.arrive, not mbarriers, so that compute-sanitizer's racecheck sees the ordering of the
  // regions' reuse.
  // Order (NB = kDqBufs): iteration `it` writes region it % NB after waiting on kDqEmpty + c for
  // the reduce-add of iteration it - NB (none for it < NB); the writer arrives for iteration j
  // once j's reads are done, while handling iteration j + NB - 1 (NB = 2: after issuing that
  // one's, wait_group.read 1), and only for the j that a consumer will wait for (j + NB <
  // n_iters). So between two of the writer's arrivals on kDqEmpty + c its consumer waits once,
  // and between two of the consumer's arrivals on one dq_full the writer waits once: bar.arrive
  // never runs ahead of a barrier's previous completion. One dq_full per buffer: with one, the
  // consumer's first two arrivals (no wait before either) could come before the writer's first.
  constexpr int kDqEmpty = 5, kDqBarThreads = 128 + 32;
  auto dq_full = [](int cons, int dbuf) { return (dbuf == 0 ? 3 : 7) + cons; };
  constexpr int NB = Cfg::kDqBufs;
  // The dQ accumulator's chunk of consumer c for the tile at StatLayout row `row`: the tile's
  // BM x D floats are two chunks of BM x D / 2, each the consumer's region as it is in shared
  // memory (kSplitM: its 64 rows, row-major; else its D / 2 columns, row-major over them); the
  // postprocess reads it back in that order.
  // Deterministic: each of the tile's two dQ chunks (disjoint rows or columns, one writer warp
  // each) has its own turn counter, which goes up once per key block, in the order in which the
  // blocks reach the tile when they all start together. (Until backward step 20 one counter took
  // chunk 0, then 1, so each block's two adds waited for each other.) With causal or a
  // window (kLastFirst), block n's query tiles start at m_start(n), which grows with n, so block n
  // reaches tile m after m - m_start(n) tiles and the higher block is always ahead: the tile's
  // last block goes first, then down to the first. In ascending order (the deterministic backward
  // of 2026-12-06, an H100) block n waited at its first tile until block 0 had done n tiles, a
  // wavefront: 0.44-0.64 of the non-deterministic time, causal. Without either, every block
  // starts at tile 0: ascending. Either way a block waits only for blocks launched before it
  // (grouped_order; n_block above), so the turns cannot deadlock on blocks not yet resident.
  auto turn_of = [&](int m0) {
    if constexpr (kLastFirst) {
      // The tile's last block: the highest whose first key n0 some row of the tile (its last,
      // m0 + BM - 1, unclipped, as m_start counts) sees: n0 <= m0 + BM - 1 + coff + window_right.
      int right = coff;
      if constexpr (kLocal) right += p.var.window_right;
      const int last = min((seq_kv + BN - 1) / BN - 1, (m0 + BM - 1 + right) / BN);
      return last - n_block;
    } else {
      return n_block;
    }
  };

  if (wg == 0) {
    // ---- producer -------------------------------------------------------------------------------
    setmaxnreg_dec<Cfg::kProducerRegs>();
    const int pwarp = threadIdx.x / 32;
    if (threadIdx.x == 0 && n_iters > 0) {
      mbar_arrive_expect_tx(kv_full, 2 * Cfg::kKVBytes);
      for (int pn = 0; pn < Cfg::kPanels; ++pn) {
        tma_load_4d(sk + pn * BN * 128, &tk, kv_full, 64 * pn, kvh, kv_tma0 + n0, tma_b);
        tma_load_4d(sv + pn * BN * 128, &tv, kv_full, 64 * pn, kvh, kv_tma0 + n0, tma_b);
      }
      // The tile's head and first row kept as counters, not divided out of `it`, and the loop not
      // unrolled: at the 80-row kernel's 24 registers (BwdCfg::kProducerRegs) the unrolled loop's
      // divisions spilled its counters.
      int h = kvh * p.group, mi = 0;
#pragma unroll 1
      for (int it = 0; it < n_iters; ++it) {
        const int s = qdo_pipe.stage(it);
        const int m0 = (m_start + mi) * BM;
        const uint32_t full = qdo_pipe.producer_acquire(it, 2 * Cfg::kQBytes);
        for (int pn = 0; pn < Cfg::kPanels; ++pn) {
          tma_load_4d(sq(s) + pn * BM * 128, &tq, full, 64 * pn, h, q_tma0 + m0, tma_b);
          tma_load_4d(sdo(s) + pn * BM * 128, &tdo, full, 64 * pn, h, q_tma0 + m0, tma_b);
        }
        if (++mi == m_count) {
          mi = 0;
          ++h;
        }
      }
    } else if (pwarp == 1 || pwarp == 2) {
      // The dQ writers: warp 1 + c adds consumer c's dQ chunk of each tile into the accumulator
      // (one bulk reduce-add), so the consumers never wait for L2.
      const int cw = pwarp - 1;
      const int64_t row_b = p.stats.seq_base(b), head_stride = p.stats.head_stride();
      for (int it = 0; it < n_iters; ++it) {
        const int h = kvh * p.group + it / m_count, m0 = (m_start + it % m_count) * BM;
        named_bar_sync(dq_full(cw, it % NB), kDqBarThreads);
        if (threadIdx.x % 32 == 0) {
          const int64_t row = row_b + h * head_stride + m0;
          float* dst = p.dq_accum + row * D + cw * (BM * D / 2);
          if constexpr (kDeterministic) {
            int* turn = p.dq_turn + 2 * (row / 64) + cw;
            wait_turn(turn, turn_of(m0));
            bulk_reduce_add_f32(dst, sdq(cw, it % NB), Cfg::kDqBytes / 2);
            tma_store_commit();
            bulk_wait_complete();  // the sums are in global memory, not only read from shared
            pass_turn_on(turn);
          } else {
            bulk_reduce_add_f32(dst, sdq(cw, it % NB), Cfg::kDqBytes / 2);
            tma_store_commit();
            tma_store_wait_read<NB - 1>();  // iteration it - (NB - 1)'s region has been read
          }
        }
        __syncwarp();
        if (it >= NB - 1 && it + 1 < n_iters) named_bar_arrive(kDqEmpty + cw, kDqBarThreads);
      }
      if (threadIdx.x % 32 == 0) tma_store_wait_read();  // the last region read before exit
    }
    return;
  }

  // ---- consumers --------------------------------------------------------------------------------
  setmaxnreg_inc<Cfg::kConsumerRegs>();
  const int c = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
  const bool signals = tid == 0;
  // This thread's keys: +0 and +8 (kSplitCols: both consumers hold the same 64 keys).
  const int krow_local = (kSplitCols ? 0 : 64 * c) + 16 * warp + lane / 4;
  const int krow = n0 + krow_local;
  // kSplitCols: this consumer's queries of the tile (Sᵀ columns) and dK/dV columns start here.
  const int q_local0 = kSplitCols ? SN * c : 0;
  const int col0 = kSplitCols ? DKV * c : 0;
  // The descriptors of this consumer's K and V operands, built once (desc_add steps through them):
  // its 64 keys, K-major, in the Sᵀ and dPᵀ GEMMs (kSplitCols: the same 64 keys in both); K
  // MN-major in the dQ GEMM, its column panels (kSplitM: every column).
  const uint64_t d_k = desc_k_major(sk + (kSplitCols ? 0 : 64 * c * 128));
  const uint64_t d_v = desc_k_major(sv + (kSplitCols ? 0 : 64 * c * 128));
  const uint64_t d_k_mn =
      desc_mn_major(sk + (Cfg::kSplitM ? 0 : c * (Cfg::kDqN / 64) * BN * 128), BN * 128);

  float dv[DKV / 2], dk[DKV / 2];
#pragma unroll
  for (int i = 0; i < DKV / 2; ++i) dv[i] = dk[i] = 0.f;

  // The rows of LSE·log2e and D of iteration `it`'s tile (padded: whole tiles, 16-byte aligned)
  // into stat buffer it % 2, by cp.async from warp 0 of consumer 0 (BM / 2 chunks of 16 bytes).
  // That warp waits for them before the consumers' barrier 1 of the iteration that issued them,
  // and every consumer reads them after it: the next iteration's. Buffer it % 2 is written again
  // two iterations on, after the barrier 1 that follows its reads.
  const bool stat_loader = c == 0 && warp == 0;
  auto load_stats = [&](int it) {
    const int h = kvh * p.group + it / m_count, m0 = (m_start + it % m_count) * BM;
    const int64_t row0 = p.stats.row(b, h) + m0;
#pragma unroll
    for (int j = lane; j < BM / 2; j += 32) {
      const bool is_lse = j < BM / 4;
      const int q4 = 4 * (is_lse ? j : j - BM / 4);
      attn_mma::cp_async_16((is_lse ? slse(it % 2) : sdelta(it % 2)) + 4 * q4,
                            (is_lse ? p.lse2 : p.delta) + row0 + q4, true);
    }
    attn_mma::cp_async_commit();
  };
  if (n_iters > 0 && stat_loader) {
    load_stats(0);
    attn_mma::cp_async_wait<0>();
  }
  named_bar_sync(1, 256);

  if (n_iters > 0) mbar_wait(kv_full, 0);
  for (int it = 0; it < n_iters; ++it) {
    const int s = qdo_pipe.stage(it), buf = it % 2;
    const int m0 = (m_start + it % m_count) * BM;
    if (stat_loader && it + 1 < n_iters) load_stats(it + 1);
    qdo_pipe.consumer_wait(it);

    // Sᵀ = K Qᵀ, then dPᵀ = V dOᵀ, in two groups: this consumer's 64 keys x SN queries
    // (kSplitCols: the same 64 keys, queries q_local0 ...; else its own keys, every query), D/16
    // k-steps each. P is computed while the dPᵀ GEMM runs.
    float st[SN / 2], dpt[SN / 2];
    // The stage's Q and dO descriptors, K-major (this consumer's queries) in the Sᵀ and dPᵀ GEMMs;
    // the dV and dK GEMMs build their MN-major ones (k = queries) where they start.
    const uint64_t d_q = desc_k_major(sq(s) + q_local0 * 128);
    const uint64_t d_do = desc_k_major(sdo(s) + q_local0 * 128);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk / 4) * BN * 128 + (kk % 4) * 32;
      const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
      Wgmma<T, SN>::template ss<0, 0>(st, desc_add(d_k, off), desc_add(d_q, qoff), kk > 0);
    }
    wgmma_commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t off = (kk / 4) * BN * 128 + (kk % 4) * 32;
      const uint32_t qoff = (kk / 4) * BM * 128 + (kk % 4) * 32;
      Wgmma<T, SN>::template ss<0, 0>(dpt, desc_add(d_v, off), desc_add(d_do, qoff), kk > 0);
    }
    wgmma_commit();
    // Sᵀ has landed; dPᵀ may still run. Groups retire in order: kDkSmem, the last tile's dK GEMM,
    // left in flight at its end, is done too, so its Q/dO stage goes back to the producer here.
    wgmma_wait<1>();
    fence_regs(st);
    if constexpr (kDkSmem) {
      fence_regs(dk);
      if (signals && it > 0) qdo_pipe.consumer_release(it - 1);
    }

    // Pᵀ in place; masked (or past seq_q / seq_kv) entries are 0. Rows past seq_q and rows whose
    // LSE is -inf have LSE·log2e = +inf in the stage: their P is exp2(-inf) = 0. Soft cap: P from
    // t = tanh(q.k · softcap_in).
    bool need_mask = n0 + BN > seq_kv || (kCausal && n0 + BN - 1 > m0 + coff);
    if constexpr (kLocal) {
      need_mask = need_mask ||
                  attnbench::cuda::window_crosses(p.var, m0 + coff, m0 + BM - 1 + coff, n0, BN);
    }
    // Two copies of the loop (backward step 14): the tiles that need no mask, most of them, run
    // without the per-score predicates, the zeroing of masked scores and the scale reloaded per
    // score, which ptxas otherwise applied to every tile. One copy, the form before step 14, in
    // the d64 soft-cap kernels, where two made ptxas spill 19 values.
    constexpr bool kTwoCopies = !(kSoftcap && D < 128);
    const float sl2 = kSoftcap ? p.var.softcap_log2 : p.scale_log2;
    auto scores_to_p = [&](auto masked) {
#pragma unroll
      for (int g = 0; g < SN / 8; ++g) {
        // The group's two rows of LSE·log2e are adjacent (8-byte aligned): one 64-bit load.
        const float2 lse_pair =
            attn_mma::ld_shared_f32x2(slse(buf) + 4 * (q_local0 + 8 * g + 2 * (lane % 4)));
#pragma unroll
        for (int e1 = 0; e1 < 2; ++e1) {
          const int ql = q_local0 + 8 * g + 2 * (lane % 4) + e1, q = m0 + ql;
          const float lse2 = e1 == 0 ? lse_pair.x : lse_pair.y;
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const int i = 4 * g + 2 * e2 + e1;
            const int key = krow + 8 * e2;
            float x = st[i];  // soft cap: t = tanh(q.k softcap_in)
            if constexpr (kSoftcap) x = attn_mma::tanh_approx(x * p.var.softcap_in);
            auto visible = [&] {
              const bool ok = key < seq_kv && (!kCausal || key <= q + coff);
              if constexpr (kLocal) {
                return ok && !attnbench::cuda::window_hides(p.var, q + coff, key);
              } else {
                return ok;
              }
            };
            // The exponent is <= 0 in exact arithmetic; clamped so that rounding at huge scales
            // cannot push P past 1 (or to inf).
            if constexpr (!kTwoCopies) {
              const bool ok = !need_mask || visible();
              st[i] = ok ? attn_mma::exp2_approx(fminf(fmaf(x, sl2, -lse2), 0.f)) : 0.f;
            } else {
              const float pv = attn_mma::exp2_approx(fminf(fmaf(x, sl2, -lse2), 0.f));
              if constexpr (decltype(masked)::value) {
                st[i] = visible() ? pv : 0.f;
              } else {
                st[i] = pv;
              }
            }
          }
        }
      }
    };
    if (kTwoCopies && !need_mask) {
      scores_to_p(std::false_type{});
    } else {
      scores_to_p(std::true_type{});
    }
    // Pᵀ as A fragments (k = queries): query groups 2kk and 2kk+1 of the accumulator.
    uint32_t pa[SN / 16][4], dsa[SN / 16][4];
#pragma unroll
    for (int kk = 0; kk < SN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = Elem<T>::pack2(st[8 * kk + 2 * r], st[8 * kk + 2 * r + 1]);

    wgmma_wait<0>();  // dPᵀ has landed
    fence_regs(dpt);
    // dSᵀ = Pᵀ ∘ (dPᵀ − D); soft cap: ∘ (1 − t²), with t taken back from P's exponent,
    // t · softcap · log2(e) = log2(P) + LSE·log2e, clamped to [-1, 1] (P = 0 gives -inf, or NaN
    // where LSE·log2e = +inf, and fmaxf returns -1 for both: dS = 0 as it must). Keeping t (or
    // 1 − t²) from the loop above until dPᵀ lands made ptxas serialize these kernels' wgmma
    // (C7512) for want of registers; one lg2 per score is cheaper. Still serialized: d128 soft
    // cap without a window (docs/tuning_flash_wgmma.md, backward step 6).
#pragma unroll
    for (int g = 0; g < SN / 8; ++g) {
      // D (zero past seq_q) and, soft cap, LSE·log2e of the group's two rows: 64-bit loads.
      const int ql0 = q_local0 + 8 * g + 2 * (lane % 4);
      const float2 delta_pair = attn_mma::ld_shared_f32x2(sdelta(buf) + 4 * ql0);
      [[maybe_unused]] float2 lse_pair{0.f, 0.f};
      if constexpr (kSoftcap) lse_pair = attn_mma::ld_shared_f32x2(slse(buf) + 4 * ql0);
#pragma unroll
      for (int e1 = 0; e1 < 2; ++e1) {
        const float delta = e1 == 0 ? delta_pair.x : delta_pair.y;
        [[maybe_unused]] const float lse2 = e1 == 0 ? lse_pair.x : lse_pair.y;
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int i = 4 * g + 2 * e2 + e1;
          float ds = st[i] * (dpt[i] - delta);
          if constexpr (kSoftcap) {
            const float y = attn_mma::log2_approx(st[i]) + lse2;
            const float t = fminf(fmaxf(y * p.var.softcap_log2_inv, -1.f), 1.f);
            ds *= 1.f - t * t;
          }
          dpt[i] = ds;
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < SN / 16; ++kk)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        dsa[kk][r] = Elem<T>::pack2(dpt[8 * kk + 2 * r], dpt[8 * kk + 2 * r + 1]);
    // dSᵀ (kSplitCols: and Pᵀ) to shared memory buffer `buf`, [key][query] in 64-query panels
    // (128-byte swizzle), for this tile's dQ (and the dV and dK GEMMs). By stmatrix (backward step
    // 18): dsa[kk] holds the four 8 x 8 blocks (keys +0 / +8 of the warp's 16, queries 16 kk + 0 /
    // + 8) in exactly its fragment layout, so one .x4 per 16 queries replaces four 4-byte stores;
    // lane l names row l % 8 of block l / 8 (block m: keys + 8 (m % 2), query group + m / 2).
    // Not in the d64 window soft-cap kernels, where ptxas spilled 18 instructions with it: they
    // keep the 4-byte stores.
    if constexpr (Cfg::kSwapDq) {
      // kSwapDq: dS as [query][key], this consumer's 64 keys one panel of BM query rows (keys
      // contiguous, 128-byte swizzle), the K-major B operand of the dQᵀ GEMM and the MN-major A
      // of none (dK's A stays in registers). stmatrix .trans: block m of dsa[kk] (keys 8 (m % 2)
      // of the warp's 16, queries of group 2 kk + m / 2) goes in transposed, lane l naming the
      // row of query 8 (2 kk + m / 2) + l % 8 (m = l / 8), whose 16 bytes are the block's 8 keys.
      const int blk = lane / 8;
      const int kg = 2 * warp + blk % 2;  // the block's 8-key group within the panel
#pragma unroll
      for (int kk = 0; kk < SN / 16; ++kk) {
        const int q = 8 * (2 * kk + blk / 2) + lane % 8;
        const uint32_t addr =
            static_cast<uint32_t>(c * BM * 128 + q * 128 + ((kg ^ (q % 8)) * 16));
        stsm_x4_trans(sds(buf) + addr, dsa[kk]);
      }
    } else if constexpr (!(kLocal && kSoftcap && D < 128)) {
      const int blk = lane / 8;
      const int r = (krow_local - lane / 4) + 8 * (blk % 2) + lane % 8;  // the row's key (local)
#pragma unroll
      for (int kk = 0; kk < SN / 16; ++kk) {
        const int gq = q_local0 / 8 + 2 * kk + blk / 2;  // gq: 8-query group of the tile
        const uint32_t chunk = static_cast<uint32_t>((gq % 8) ^ (r % 8));
        const uint32_t addr = static_cast<uint32_t>((gq / 8) * BN * 128 + r * 128) + chunk * 16;
        stsm_x4(sds(buf) + addr, dsa[kk]);
        if constexpr (kSplitCols) stsm_x4(spt(buf) + addr, pa[kk]);
      }
    } else {
#pragma unroll
      for (int g = 0; g < SN / 8; ++g)
#pragma unroll
        for (int e2 = 0; e2 < 2; ++e2) {
          const int r = krow_local + 8 * e2, gq = q_local0 / 8 + g;
          const uint32_t chunk = static_cast<uint32_t>((gq % 8) ^ (r % 8));
          const uint32_t addr = (gq / 8) * BN * 128 + r * 128 + chunk * 16 + (lane % 4) * 4;
          attn_mma::st_shared_b32(sds(buf) + addr, dsa[g / 2][(g % 2) * 2 + e2]);
          if constexpr (kSplitCols) {
            attn_mma::st_shared_b32(spt(buf) + addr, pa[g / 2][(g % 2) * 2 + e2]);
          }
        }
    }
    fence_proxy_async();

    // dV += Pᵀ dO (not kSplitCols), one commit group running through the barrier below: A = Pᵀ
    // from registers (k = queries, 16 per step, 2 KiB of a panel), B = dO of the stage, MN-major.
    if constexpr (!kSplitCols) {
      fence_regs(dv);
      fence_regs(pa);
      wgmma_fence();
      const uint64_t d_do_mn = desc_mn_major(sdo(s), BM * 128);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        Wgmma<T, D>::template rs<1>(dv, pa[kk], desc_add(d_do_mn, kk * 2048), 1);
      wgmma_commit();
    }

    // Both consumers' dSᵀ (and Pᵀ) of this tile are in shared memory; the next tile's LSE·log2e
    // and D rows have landed in their buffer, and this tile's were read.
    if (stat_loader) attn_mma::cp_async_wait<0>();
    named_bar_sync(1, 256);

    if constexpr (kSplitCols) {
      // dV[:, col0 ...] += Pᵀ dO[:, col0 ...], dK likewise with dSᵀ and Q: A = Pᵀ / dSᵀ (64 keys x
      // BM queries, K-major), B = dO / Q MN-major, this consumer's DKV / 64 column panels.
      fence_regs(dv);
      fence_regs(dk);
      wgmma_fence();
      const uint32_t panel0 = (col0 / 64) * BM * 128;
      const uint64_t d_pt = desc_k_major(spt(buf)), d_dst = desc_k_major(sds(buf));
      const uint64_t d_dop = desc_mn_major(sdo(s) + panel0, BM * 128);
      const uint64_t d_qp = desc_mn_major(sq(s) + panel0, BM * 128);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        Wgmma<T, DKV>::template ss<0, 1>(dv, desc_add(d_pt, kk * 32), desc_add(d_dop, kk * 2048),
                                         1);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        Wgmma<T, DKV>::template ss<0, 1>(dk, desc_add(d_dst, kk * 32), desc_add(d_qp, kk * 2048),
                                         1);
      wgmma_commit();
    }

    // dQ_tile (BM x D) = dS K: A = dS, read M-major from dSᵀ; B = K, MN-major (k = keys).
    // kSwapDq: dQᵀ (this consumer's kDqN columns of d x BM queries) = Kᵀ dSᵀ: A = Kᵀ, K's panel
    // read MN-major (m = d, k = keys); B = dSᵀ from dS, K-major (n = queries, k = keys: 16 keys a
    // k-step, 32 bytes into a panel, the next panel every 4).
    constexpr int kDqRegs = Cfg::kSwapDq ? BM / 2 : Cfg::kDqN / 2;
    float dq[kDqRegs];
    wgmma_fence();
    if constexpr (Cfg::kSwapDq) {
      const uint64_t d_ds = desc_k_major(sds(buf));
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        Wgmma<T, BM>::template ss<1, 0>(dq, desc_add(d_k_mn, kk * 2048),
                                        desc_add(d_ds, (kk / 4) * BM * 128 + (kk % 4) * 32),
                                        kk > 0);
      }
    } else {
      const uint64_t d_ds_mn =
          desc_mn_major(sds(buf) + (Cfg::kSplitM ? c * BN * 128 : 0), BN * 128);
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        Wgmma<T, Cfg::kDqN>::template ss<1, 1>(dq, desc_add(d_ds_mn, kk * 2048),
                                               desc_add(d_k_mn, kk * 2048), kk > 0);
      }
    }
    wgmma_commit();
    if constexpr (kSplitCols) {
      // The dV and dK GEMMs have read the Q/dO stage: the producer may load the next tile's
      // while the dQ GEMM runs.
      wgmma_wait<1>();
      fence_regs(dv);
      fence_regs(dk);
      if (signals) qdo_pipe.consumer_release(it);
      wgmma_wait<0>();
    } else {
      // dK += dSᵀ Q behind the dQ GEMM; wait for dV and dQ only, dK runs while dQ is stored.
      // B = Q of the stage, MN-major. A: kDkSmem, this consumer's 64 rows of dSᵀ from shared
      // memory (K-major, the layout the dQ GEMM reads M-major): dsa is dead once stored, 16
      // registers (d128) fewer across the dV, dQ and dK GEMMs (backward step 7); else dSᵀ from
      // registers (k = queries, 16 per step).
      fence_regs(dk);
      if constexpr (!kDkSmem) fence_regs(dsa);
      wgmma_fence();
      const uint64_t d_q_mn = desc_mn_major(sq(s), BM * 128);
      [[maybe_unused]] const uint64_t d_dst_c = desc_k_major(sds(buf) + 64 * c * 128);  // kDkSmem
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        const uint64_t b = desc_add(d_q_mn, kk * 2048);
        if constexpr (kDkSmem) {
          const uint64_t a = desc_add(d_dst_c, (kk / 4) * BN * 128 + (kk % 4) * 32);
          Wgmma<T, D>::template ss<0, 1>(dk, a, b, 1);
        } else {
          Wgmma<T, D>::template rs<1>(dk, dsa[kk], b, 1);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
      fence_regs(dv);
    }
    fence_regs(dq);

    // The dQ tile to this consumer's region (float32; kSplitM: its 64 rows x D, else BM rows x its
    // kDqN columns, row-major, each row's columns placed by dq_swizzle), once its writer has read
    // the last one; the writer adds it.
    if (it >= NB) named_bar_sync(kDqEmpty + c, kDqBarThreads);
    // Element (row, col) is at float row * kDqN + dq_swizzle(row, col): this thread's rows are
    // r0 = 16 warp + lane / 4 and r0 + 8 (r % 8 = lane / 4 for both), its columns 8 j + 2 (lane %
    // 4). The swizzle XORs j's low 3 bits with lane / 4: bits 5-7 of the byte address, which are 0
    // in the rest of it (rows of kDqN * 4 >= 256 bytes, a 256-byte aligned region). So the address
    // is one per-thread value XOR a constant, plus a constant: 1 LOP3 a store. (16 addresses kept
    // live across the iteration made ptxas spill them once the descriptors went to desc_add.)
    static_assert(Cfg::kOffDq % 256 == 0 && (Cfg::kDqBytes / 2) % 256 == 0 && Cfg::kDqN * 4 >= 256,
                  "the dQ region's rows and halves 256-byte aligned");
    if constexpr (Cfg::kSwapDq) {
      // dQᵀ's dq[i] is element (row q = 8 (i / 4) + 2 (lane % 4) + i % 2, column d = 16 warp +
      // lane / 4 + 8 ((i % 4) / 2)) of the region (BM rows of kDqN = 64 floats, 256 bytes), at
      // float q * 64 + dq_swizzle_t(q, d): the byte address's bits 5-7 are the 8-float group,
      // (2 warp + (i % 4) / 2) XOR (4 ((i / 4) % 2) + lane % 4); the rest a per-thread base plus
      // a constant. Neighbours are 256 bytes apart, so 4-byte stores (conflict-free: see
      // bwd_wgmma::dq_swizzle_t).
      static_assert(Cfg::kDqN == 64, "one 64-float row of the region per query");
      const uint32_t dq_at =
          (sdq(c, it % NB) + static_cast<uint32_t>(2 * (lane % 4) * 256 + (lane / 4) * 4)) |
          static_cast<uint32_t>(((2 * warp) ^ (lane % 4)) << 5);
#pragma unroll
      for (int i = 0; i < kDqRegs; ++i) {
        const uint32_t g = static_cast<uint32_t>(((i % 4) / 2) ^ (4 * ((i / 4) % 2)));
        const uint32_t at =
            (dq_at ^ (g << 5)) + static_cast<uint32_t>((8 * (i / 4) + (i % 2)) * 256);
        attn_mma::st_shared_f32(at, dq[i]);
      }
    } else {
      const uint32_t dq_at =
          (sdq(c, it % NB) +
           static_cast<uint32_t>((16 * warp + lane / 4) * Cfg::kDqN + 2 * (lane % 4)) * 4) |
          static_cast<uint32_t>((lane / 4) << 5);
#pragma unroll
      for (int i = 0; i < Cfg::kDqN / 2; i += 2) {
        const int j = i / 4;
        const uint32_t at =
            (dq_at ^ static_cast<uint32_t>((j & 7) << 5)) +
            static_cast<uint32_t>((j >> 3) * 256 + ((i & 2) ? 8 * Cfg::kDqN * 4 : 0));
        attn_mma::st_shared_f32x2(at, dq[i], dq[i + 1]);
      }
    }
    fence_proxy_async();
    named_bar_arrive(dq_full(c, it % NB), kDqBarThreads);
    if constexpr (!kSplitCols && !kDkSmem) {
      wgmma_wait<0>();  // dK has read the stage
      fence_regs(dk);
      if (signals) qdo_pipe.consumer_release(it);
    }
    // kDkSmem: the dK GEMM stays in flight into the next tile (backward step 8).
  }
  if constexpr (kDkSmem) {
    wgmma_wait<0>();  // the last tile's dK
    fence_regs(dk);
    if (signals && n_iters > 0) qdo_pipe.consumer_release(n_iters - 1);
  }

  // dK = scale · dSᵀ Q, dV: this consumer's keys and DKV columns.
  // By TMA (backward step 12): always in the kernels that are not kLocal; in the kLocal ones at
  // d >= 128 where p.dkv_tma says so (not varlen: a varlen block's rows run into the next
  // sequence's; dK and dV 16-byte aligned: the host sends a dense problem whose dK or dV is not
  // to the kLocal kernel); never in the kLocal ones at d64, which spilled 24-32 instructions with
  // both paths in them.
  bool dkv_tma = false;
  if constexpr (!kLocal) {
    dkv_tma = true;
  } else if constexpr (D >= 128) {
    dkv_tma = p.dkv_tma != 0;
  }
  if (dkv_tma) {
    // Through the K and V stages, in their swizzled panel layout, then one TMA store per panel
    // (rows past seq_kv and columns past head_dim are dropped by the store): 16 KiB per panel in
    // bulk instead of 4-byte stores, 4 lanes to a 16-byte row piece. First, every GEMM that
    // reads K or V must be done in both consumers (the dQ GEMM reads both halves of K).
    named_bar_sync(1, 256);
#pragma unroll
    for (int i = 0; i < DKV / 2; i += 2) {
      const int r = krow_local + ((i & 2) ? 8 : 0), g = (col0 + 8 * (i / 4)) / 8;
      const uint32_t addr = static_cast<uint32_t>((g / 8) * BN * 128 + r * 128) +
                            static_cast<uint32_t>((g % 8) ^ (r % 8)) * 16 + (lane % 4) * 4;
      attn_mma::st_shared_b32(sk + addr, Elem<T>::pack2(dk[i] * p.scale, dk[i + 1] * p.scale));
      attn_mma::st_shared_b32(sv + addr, Elem<T>::pack2(dv[i], dv[i + 1]));
    }
    fence_proxy_async();
    named_bar_sync(1, 256);
    if (c == 0 && signals) {
      for (int pn = 0; pn < Cfg::kPanels; ++pn) {
        tma_store_4d(&tdk, sk + pn * BN * 128, 64 * pn, kvh, n0, b);
        tma_store_4d(&tdv, sv + pn * BN * 128, 64 * pn, kvh, n0, b);
      }
      tma_store_commit();
      tma_store_wait_read();
    }
  } else {
    // From registers: those below head_dim and seq_kv.
    T* dk_out = static_cast<T*>(p.dk);
    T* dv_out = static_cast<T*>(p.dv);
#pragma unroll
    for (int i = 0; i < DKV / 2; i += 2) {
      const int key = krow + ((i & 2) ? 8 : 0);
      const int col = col0 + 8 * (i / 4) + 2 * (lane % 4);
      if (key < seq_kv && col < p.head_dim) {
        const int64_t off = ((kv_row0 + key) * p.heads_kv + kvh) * p.head_dim + col;
        *reinterpret_cast<uint32_t*>(dk_out + off) =
            Elem<T>::pack2(dk[i] * p.scale, dk[i + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_out + off) = Elem<T>::pack2(dv[i], dv[i + 1]);
      }
    }
  }
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
using BwdHeadDims = attnbench::cuda::HeadDims<64, 128, 256>;

// f(main kernel, Cfg{}, TypeTag) for the problem's (dtype, head_dim tile, causal, window or
// varlen, soft cap) and mode: the one static switch (common/dispatch.hpp). A window, a varlen
// batch or a soft cap selects a variant kernel; dense and causal problems keep theirs.
// local: the kLocal kernel even where the problem has no window and is not varlen (its window
// unbounded, causal folded into its right side: make_variant), for dK or dV not 16-byte aligned,
// which the other kernels store by TMA.
// wide: BwdTile's tiles for a narrow window too (option wide_tiles=1, the default); else a window
// at d128 spanning at most bwd_wgmma::kNarrowSpan keys runs on BwdNarrow's.
// m80: the dense non-causal d128 kernel on BwdM80's 80-row tiles (m80_tiles below: option
// m_tile, or 2048 query rows and more, where it applies); only the non-deterministic one is
// instantiated, and the kLocal kernel (local) keeps its tiles.
template <class F>
void dispatch(const Problem& pr, bool deterministic, bool local, bool wide, bool m80, F&& f) {
  using attnbench::cuda::dispatch_bool;
  attnbench::cuda::dispatch_problem<BwdHeadDims>(pr, [&](auto tag, auto d, auto causal) {
    using T = typename decltype(tag)::type;
    constexpr int D = decltype(d)::value;
    auto variant = [&](auto c, auto l, auto sc) {
      constexpr bool C = decltype(c)::value, L = decltype(l)::value, SC = decltype(sc)::value;
      auto run = [&](auto cfg) {
        using Cfg = decltype(cfg);
        dispatch_bool(deterministic, [&](auto det) {
          f(flash_bwd_wgmma_kernel<T, Cfg, C, L, SC, decltype(det)::value>, Cfg{}, tag);
        });
      };
      if constexpr (L && D == 128) {
        if (!wide && attnbench::cuda::window_spans_at_most(pr, bwd_wgmma::kNarrowSpan)) {
          run(bwd_wgmma::BwdNarrow::type{});
          return;
        }
      }
      if constexpr (!C && !L && !SC && D == 128) {
        if (m80 && !deterministic) {
          // (Through a generic lambda, as run: nvcc's host stubs name the kernel's template
          // arguments, and a non-dependent local alias there does not compile.)
          auto run_m80 = [&](auto cfg) {
            using Cfg = decltype(cfg);
            f(flash_bwd_wgmma_kernel<T, Cfg, false, false, false, false>, Cfg{}, tag);
          };
          run_m80(bwd_wgmma::BwdM80::type{});
          return;
        }
      }
      run(typename bwd_wgmma::BwdTile<D>::type{});
    };
    if (local) {
      dispatch_bool(pr.softcap > 0,
                    [&](auto sc) { variant(std::false_type{}, std::true_type{}, sc); });
    } else {
      attnbench::cuda::dispatch_variant<decltype(causal)::value>(pr, variant);
    }
  });
}

bool deterministic_option(const Options* o) {
  return attnbench::option_or(o, "deterministic", 0) != 0;
}
// The "wide_tiles" option: 1 (default) runs narrow windows at d128 on BwdTile's tiles, 0 on
// BwdNarrow's (backward step 15: slower, kept for the A/B on other cards). The default differs
// from cuda.flash_fwd_wgmma's option of the same name, whose narrow tiles win (its step 8).
bool wide_option(const Options* o) {
  return attnbench::option_or(o, "wide_tiles", 1) != 0;
}
// The "m_tile" option: 64 or 80; unset, 80 from kM80MinSeqQ query rows up and 64 below
// (backward step 28). 80 runs the dense (no window, soft cap or varlen) non-causal
// non-deterministic problems at head_dim 72..128 (the 128 tile) on BwdM80's 80-row query tiles
// (backward step 27); every other problem ignores it. This says whether they run; the
// StatLayout's padding (stat_pad_unit) follows it, so that the workspace, the preprocess, the
// main kernel and the postprocess agree.
bool m80_tiles(const Problem& p, const Options* o) {
  const std::int64_t m = attnbench::option_or(o, "m_tile", 0);
  const bool want = m == 80 || (m == 0 && p.seq_q >= bwd_wgmma::kM80MinSeqQ);
  return want && !deterministic_option(o) && !p.causal && !p.has_window() && !(p.softcap > 0) &&
         !p.varlen() && BwdHeadDims::tile(p.head_dim) == 128;
}
int stat_pad_unit(bool m80) {
  return m80 ? bwd_wgmma::kM80Pad : 128;
}

// Varlen: the StatLayout's rows per head (its sequences' padded rows, with the slack of its
// offset formula) and the layout the kernels read; dense: [B, Hq, Sq_pad].
int64_t pad_total(const Problem& p) {
  return 128 * (p.total_q() / 128 + p.batch + 1);
}
// Dense: rows padded to `unit` per (sequence, head) (stat_pad_unit: 128, or 320 for m_tile=80).
StatLayout stat_layout(const Problem& p, const int* cu_q, int unit) {
  StatLayout L{};
  L.cu_q = p.varlen() ? cu_q : nullptr;
  L.batch = p.batch;
  L.heads_q = p.heads_q;
  L.seq_q = p.seq_q;
  L.seq_q_pad = bwd_wgmma::seq_q_pad(p.seq_q, unit);
  L.total_q = static_cast<int>(p.total_q());
  L.pad_total = pad_total(p);
  return L;
}
int64_t stat_rows(const Problem& p, int unit) {
  return p.varlen()
             ? p.heads_q * pad_total(p)
             : static_cast<int64_t>(p.batch) * p.heads_q * bwd_wgmma::seq_q_pad(p.seq_q, unit);
}
std::size_t dsum_bytes(const Problem& p, int unit) {
  return static_cast<std::size_t>(stat_rows(p, unit)) * 4;
}
std::size_t dq_accum_bytes(const Problem& p, int unit) {
  return dsum_bytes(p, unit) * BwdHeadDims::tile(p.head_dim);
}
// LSE·log2e starts 256-byte aligned after D, the dQ accumulator after it; the deterministic
// mode's turn counters (two per 64 query rows, zeroed with the accumulator) follow it.
std::size_t lse2_offset(const Problem& p, int unit) {
  return (dsum_bytes(p, unit) + 255) / 256 * 256;
}
std::size_t dq_accum_offset(const Problem& p, int unit) {
  return 2 * lse2_offset(p, unit);
}
std::size_t dq_turn_bytes(const Problem& p, int unit) {
  return dsum_bytes(p, unit) / 32;
}
std::size_t zeroed_bytes(const Problem& p, int unit) {
  return dq_accum_bytes(p, unit) + dq_turn_bytes(p, unit);
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// The preprocess with kLanes lanes per row (head_dim / 8 rounded up to a power of two, 4 to 32)
// and 16-byte loads where O and dO allow them.
template <class T>
void launch_preprocess(const T* o, const T* dout, const float* lse, float* delta, float* lse2,
                       const StatLayout& L, int head_dim, int64_t rows, void* stream) {
  const bool vec = aligned16(o) && aligned16(dout);
  auto go = [&](auto lanes) {
    constexpr int kLanes = decltype(lanes)::value;
    const int64_t blocks = (rows + 256 / kLanes - 1) / (256 / kLanes);
    if (blocks == 0) return;
    if (blocks > 0x7fffffff) {
      throw std::invalid_argument("cuda.flash_bwd_wgmma: " + std::to_string(rows) +
                                  " statistics rows are more than one preprocess launch covers");
    }
    auto kernel = vec ? bwd_preprocess_wgmma_kernel<T, kLanes, true>
                      : bwd_preprocess_wgmma_kernel<T, kLanes, false>;
    attn_hopper::launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3(256), 0, stream, o, dout,
                        lse, delta, lse2, L, head_dim, rows);
  };
  if (head_dim <= 32) go(std::integral_constant<int, 4>{});
  else if (head_dim <= 64) go(std::integral_constant<int, 8>{});
  else if (head_dim <= 128) go(std::integral_constant<int, 16>{});
  else go(std::integral_constant<int, 32>{});
}

class FlashBwdWgmma final : public attnbench::Implementation {
 public:
  std::string name() const override { return "cuda.flash_bwd_wgmma"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "FlashAttention-3-class backward (sm_90a): TMA, wgmma, dQ by bulk reduce-add";
  }
  Capabilities capabilities() const override {
    Capabilities c = attnbench::cuda::tensor_core_capabilities<BwdHeadDims>(false, true);
    c.fwd_partner = "cuda.flash_fwd_wgmma";
    c.options = {"deterministic", "wide_tiles", "m_tile"};
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    return c;
  }

  Support supports_options(const Problem&, Pass, const Options& o) const override {
    for (const char* flag : {"deterministic", "wide_tiles"}) {
      const Support s = attnbench::cuda::check_flag_option(o, flag);
      if (!s) return s;
    }
    // m_tile: the query rows of the backward's d128 dense non-causal tiles (64 or 80; the other
    // problems ignore it, as they ignore wide_tiles).
    const auto m = o.find("m_tile");
    if (m != o.end() && m->second != 64 && m->second != 80) {
      return Support::no("m_tile must be 64 or 80, not " + std::to_string(m->second));
    }
    return Support::yes();
  }

  Support supports_extra(const Problem& p, Pass) const override {
    // The 1-D grid (grouped_order): key blocks (64 keys or more each) x heads_kv x batch.
    if ((int64_t{p.seq_kv} + 63) / 64 * p.heads_kv * p.batch >= (int64_t{1} << 31)) {
      return Support::no("seq_kv / 64 x heads_kv x batch must be below 2^31 (the grid's blocks)");
    }
    if (p.varlen() && (p.total_q() >= (int64_t{1} << 31) - 128 * (p.batch + 2) ||
                       p.total_kv() >= (int64_t{1} << 31))) {
      return Support::no("varlen: more than 2^31 packed rows");
    }
    std::string why;
    dispatch(p, false, false, true, false,
             [&](auto kernel, auto, auto) { why = sm90a_missing(kernel); });
    if (!why.empty()) return Support::no(why);
    const int smem = attn_mma::max_smem_per_block(why);
    if (smem < 0) return Support::no(why);
    // The wide tiles' (the most either takes), or m_tile=80's where the problem could take them
    // (this check sees no options): 231,720 bytes, within sm_90's 232,448 as the others.
    int need = 0;
    for (const bool m80 : {false, true}) {
      dispatch(p, false, false, true, m80,
               [&](auto, auto cfg, auto) { need = std::max(need, decltype(cfg)::kSmemBytes); });
    }
    if (smem < need) {
      return Support::no("needs " + std::to_string(need) +
                         " bytes of shared memory per block, the device allows " +
                         std::to_string(smem));
    }
    return Support::yes();
  }

  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options& o) const override {
    const int unit = stat_pad_unit(m80_tiles(p, &o));
    return pass == Pass::fwd ? 0 : dq_accum_offset(p, unit) + zeroed_bytes(p, unit);
  }

  void prepare(const Problem& p, Pass, const Options& o) const override {
    // Both kernels a call may take: the problem's, and the kLocal one (dK or dV not aligned).
    for (const bool local : {false, true}) {
      dispatch(p, deterministic_option(&o), local, wide_option(&o), m80_tiles(p, &o),
               [&](auto kernel, auto cfg, auto) {
                 attn_mma::set_dynamic_smem(kernel, decltype(cfg)::kSmemBytes);
               });
    }
  }

  void backward(const attnbench::BwdArgs& a) const override {
    const Problem& pr = a.p;
    const bool m80 = m80_tiles(pr, a.options);
    const int unit = stat_pad_unit(m80);
    const std::size_t need = dq_accum_offset(pr, unit) + zeroed_bytes(pr, unit);
    if (a.workspace_bytes < need || a.workspace == nullptr) {
      throw std::invalid_argument("cuda.flash_bwd_wgmma: workspace of " +
                                  std::to_string(a.workspace_bytes) + " bytes, needs " +
                                  std::to_string(need));
    }
    const bool bf16 = pr.dtype == DType::bf16;
    const int d_pad = BwdHeadDims::tile(pr.head_dim);
    auto* ws = static_cast<unsigned char*>(a.workspace);
    float* delta = reinterpret_cast<float*>(ws);
    float* lse2 = reinterpret_cast<float*>(ws + lse2_offset(pr, unit));
    float* dq_accum = reinterpret_cast<float*>(ws + dq_accum_offset(pr, unit));
    int* dq_turn =
        reinterpret_cast<int*>(ws + dq_accum_offset(pr, unit) + dq_accum_bytes(pr, unit));
    const bool dkv_aligned = aligned16(a.dk) && aligned16(a.dv);
    dispatch(pr, deterministic_option(a.options), !dkv_aligned, wide_option(a.options), m80,
             [&](auto kernel, auto cfg, auto tag) {
      using Cfg = decltype(cfg);
      using T = typename decltype(tag)::type;
      BwdParams p = attnbench::cuda::with_shape<BwdParams>(pr);
      p.var = attnbench::cuda::make_variant(a);
      p.stats = stat_layout(pr, p.var.cu_seqlens_q, unit);
      launch_memset_zero(dq_accum, zeroed_bytes(pr, unit), a.stream);
      const int64_t rows = stat_rows(pr, unit);
      launch_preprocess<T>(static_cast<const T*>(a.o), static_cast<const T*>(a.dout), a.lse, delta,
                           lse2, p.stats, pr.head_dim, rows, a.stream);
      // Varlen: the packed tensors as one sequence of all their rows (at least one, for a batch
      // without queries or keys, whose blocks load none); each block offsets its rows by its
      // sequence's.
      const int bt = pr.varlen() ? 1 : pr.batch;
      const int sq = pr.varlen() ? std::max<int>(1, static_cast<int>(pr.total_q())) : pr.seq_q;
      const int skv = pr.varlen() ? std::max<int>(1, static_cast<int>(pr.total_kv())) : pr.seq_kv;
      const TensorMap tq = make_bshd_map(a.q, bf16, bt, sq, pr.heads_q, pr.head_dim, Cfg::kBlockM);
      const TensorMap tdo =
          make_bshd_map(a.dout, bf16, bt, sq, pr.heads_q, pr.head_dim, Cfg::kBlockM);
      const TensorMap tk =
          make_bshd_map(a.k, bf16, bt, skv, pr.heads_kv, pr.head_dim, Cfg::kBlockN);
      const TensorMap tv =
          make_bshd_map(a.v, bf16, bt, skv, pr.heads_kv, pr.head_dim, Cfg::kBlockN);
      // dK and dV, stored by TMA in the kernels that are not kLocal and, where p.dkv_tma, in the
      // kLocal ones at d >= 128 (backward step 12); K's and V's maps stand in where dK or dV is
      // not 16-byte aligned (no kernel stores through them then).
      const TensorMap tdk = make_bshd_map(dkv_aligned ? a.dk : a.k, bf16, bt, skv, pr.heads_kv,
                                          pr.head_dim, Cfg::kBlockN);
      const TensorMap tdv = make_bshd_map(dkv_aligned ? a.dv : a.v, bf16, bt, skv, pr.heads_kv,
                                          pr.head_dim, Cfg::kBlockN);
      p.dkv_tma = !pr.varlen() && dkv_aligned;
      p.lse2 = lse2;
      p.delta = delta;
      p.dq_accum = dq_accum;
      p.dq_turn = dq_turn;
      p.dk = a.dk;
      p.dv = a.dv;
      p.scale = static_cast<float>(pr.effective_scale());
      // Varlen: as many key blocks as the longest sequence has (blocks past their own sequence's
      // keys return at once). The order of the blocks: grouped_order.
      p.kv_blocks = (pr.seq_kv + Cfg::kBlockN - 1) / Cfg::kBlockN;
      p.pairs = pr.heads_kv * pr.batch;
      p.head_group = attnbench::cuda::launch_group(multiprocessors(), p.kv_blocks, p.pairs);
      const dim3 grid(static_cast<unsigned>(int64_t{p.kv_blocks} * p.pairs));
      if (grid.x > 0) {
        attn_hopper::launch(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmemBytes, a.stream, tq, tk,
                            tv, tdo, tdk, tdv, p);
      }
      const int64_t tokens = pr.total_q();
      if (tokens > 0 && pr.heads_q > 0) {
        auto post = aligned16(a.dq) ? bwd_postprocess_wgmma_kernel<T, true>
                                    : bwd_postprocess_wgmma_kernel<T, false>;
        const int post_blocks = static_cast<int>(std::min<int64_t>(tokens, 1 << 30));
        // A thread per (head, 8-column group) of a token: 128 threads where that is enough (few
        // heads), else 256.
        const int post_threads = pr.heads_q * (pr.head_dim / 8) <= 128 ? 128 : 256;
        attn_hopper::launch(post, dim3(post_blocks), dim3(post_threads), 0, a.stream, dq_accum,
                            static_cast<T*>(a.dq), p.stats, pr.head_dim, d_pad, Cfg::kBlockM,
                            Cfg::kSplitM, Cfg::kSwapDq, p.scale, tokens);
      }
    });
  }
};

}  // namespace
}  // namespace attn_hopper

ATTNBENCH_REGISTER(attn_hopper::FlashBwdWgmma)
