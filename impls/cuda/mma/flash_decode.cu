// cuda.flash_decode — decode attention with split-KV (flash-decoding) over a contiguous or paged
// KV cache, on tensor cores (mma.sync m16n8k16, f32 accumulation). Issue 29.
//
// Decode is bound by memory: each new token reads its sequence's whole K and V once, and a
// prefill kernel, which parallelises over query rows, leaves the GPU idle with one row. Here:
// - GQA packed into the rows: a block owns one (sequence, kv head, split) and up to 16 packed
//   query rows, row r = query i * group + head-in-group g, so the group's heads (and the new
//   tokens of speculative decoding) share each K/V load; more rows take more row tiles (grid z).
// - Split-KV: the keys of a sequence are cut into `splits` ranges of `chunk` keys, one block
//   each; splits is chosen on the host from batch x kv heads x row tiles against the SM count
//   and the memory's bandwidth (plan_splits: small batches half or all of a wave, larger ones
//   the fullest last wave, one block per SM), or forced by the option.
//   With more than one split, each block writes its normalised O and LSE (float32) to the
//   workspace and a combine kernel merges them: O = sum_s e^(lse_s - lse) O_s,
//   lse = log sum_s e^(lse_s). With one split the block writes O and LSE itself. The combine is
//   a programmatic dependent launch on sm_90 (mma/host.cuh launch_dependent): its launch
//   overlaps the split kernel's end instead of following it. Option pdl=0 launches it plainly
//   (the A/B of that choice in one run). Option fused_combine=1 has no second kernel: each split
//   block counts itself in on a counter per (sequence, row tile, kv head) in the workspace's
//   zeroed prefix, and the block that arrives last merges the partials (fused_combine below).
//   It is the default at head_dim 72-128, where it was timed faster (FlashDecode::fused).
// - Inside a block the 4 warps take interleaved K/V tiles of the block's range, each through
//   its own 3-stage cp.async ring (no block barrier in the loop), and merge their (max, sum, O)
//   through shared memory at the end.
// - Paged K/V: each key's pool row is found through the block table (page = table[key /
//   page_size], row key % page_size), so a tile may span pages, pages may come in any order and
//   repeat, and a context need not fill its last page. A warp looks up one key per lane, a tile
//   ahead of the copies that use the rows (which reach them by shuffles), so the table's loads
//   are off the copies' path: looked up per 16-byte chunk at issue (16 dependent loads and
//   divisions per lane and tile at d128), the paged cache ran at 0.41-0.55 of the read ceiling
//   where the contiguous one ran at 0.93-0.97 (the first GPU job, results/h200/issue29/job1).
// Causal is bottom-right per sequence: query i (of seq_q new tokens) sees keys j <= i + context -
// seq_q; rows that see nothing, and a sequence of context 0, get O = 0 and LSE = -inf.
// Sliding windows and soft caps (Mistral's and Gemma 2's decode) are runtime values here, not
// template parameters: one kernel per (dtype, tile, padding, paging) serves dense, causal,
// windowed and capped problems alike (the window bounds are the variant's, causal folded into
// the right one; the cap one uniform branch per tile), which costs nothing a memory-bound kernel
// would notice and keeps the instantiations at 24.
// Layouts (core/problem.hpp): Q, O dense BSHD or packed THD (cu_seqlens_q); K, V dense, packed
// (cu_seqlens_kv) or a pool of pages; LSE [B, Hq, Sq] or [Hq, total_q].
// Limits: f16/bf16; head_dim a multiple of 8 up to 256 (tiles 64, 128, 256); seq_q at most
// kMaxDecodeQueries (16) per sequence: longer prefills over a cache SKIP (cuda.naive_3pass runs
// them paged, the prefill kernels contiguous).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/implementation.hpp"
#include "common/capabilities.hpp"
#include "common/shape.hpp"
#include "common/workspace.hpp"
// Angle brackets: the CPU emulation build (impls/cuda/mma/emulation) puts its own first.
#include <mma/host.cuh>
#include <mma/tile.cuh>

namespace attn_mma {
namespace {

constexpr float kNegInf = -__builtin_huge_valf();
// Key ranges per sequence at most (the combine holds their LSEs in registers).
constexpr int kMaxSplits = 128;
// The automatic plan's least K/V tiles a range for a whole wave of splits (plan_splits).
constexpr int kFullWaveTiles = 16;
// ... and the least peak DRAM bandwidth per SM (GB/s) for which half a wave is not enough.
constexpr double kFullWaveGBpsPerSM = 30.0;

using DecodeHeadDims = attnbench::cuda::HeadDims<64, 128, 256>;

// Per head_dim tile: 4 warps, 16 packed rows, K/V tiles of 4096 / D keys (8 KiB per tensor per
// stage), 3 stages per warp: 192 KiB of rings, one block per SM, up to 8 tiles (128 KiB) in
// flight per SM.
template <int D>
struct DecodeTraits {
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRows = 16;
  static constexpr int kBlockN = 4096 / D;
  static constexpr int kStages = 3;
  using QTile = SmemTile<kRows, D>;
  using KVTile = SmemTile<kBlockN, D>;
  static constexpr int kStageBytes = 2 * KVTile::kBytes;  // K, then V
  static constexpr int kWarpBytes = kStages * kStageBytes;
  // The warps' merge: max and sum per row, then O (float) per row, per warp.
  static constexpr int kMergeBytes = 2 * kWarps * kRows * 4 + kWarps * kRows * D * 4;
  static constexpr int kRingBytes = kWarps * kWarpBytes;
  static constexpr int kSmemBytes =
      QTile::kBytes + (kRingBytes > kMergeBytes ? kRingBytes : kMergeBytes);
  static_assert(kBlockN % 16 == 0 && (kBlockN * (D / 8)) % 32 == 0, "whole fragments per lane");
  // The fused combine reuses the merge area: a flag, then [kRows][kMaxSplits] split weights.
  static_assert(kMergeBytes >= 128 + kRows * kMaxSplits * 4, "fused combine's weights");
};

struct DecodeParams : attnbench::cuda::AttnShape {
  const void* q;  // [B, Sq, Hq, d] or [total_q, Hq, d]
  const void* k;  // [B, Skv, Hkv, d], [total_kv, Hkv, d] or [num_pages, page_size, Hkv, d]
  const void* v;
  void* o;
  float* lse;
  const int* cu_seqlens_q;   // varlen: [B + 1]; null: dense queries
  const int* cu_seqlens_kv;  // varlen, contiguous: [B + 1]; null otherwise
  const int* seqlens_kv;     // paged or varlen: [B] context lengths; null: seq_kv each
  const int* block_table;    // paged: [B, pages_per_seq]
  float* part_o;             // splits > 1: [splits, total_q * Hq, d]
  float* part_lse;           // splits > 1: [splits, total_q * Hq], natural log
  int* counters;             // fused combine: [B * row_tiles, Hkv] arrivals, zero between calls
  int fused;                 // splits > 1: 1 = the last split block merges (no combine kernel)
  int page_size, pages_per_seq;
  int page_shift;  // log2(page_size) when a power of two, else -1
  int splits, chunk;  // key ranges per sequence and their length (a multiple of kBlockN)
  int row_tiles;      // ceil(group * seq_q / 16)
  int total_q;        // query tokens over the batch
  int batch;
  attnbench::cuda::AttnVariant var;  // window (causal folded in), soft cap
};

// Sequence b as the kernels see it.
struct DecodeSeq {
  int seq_q, ctx;
  long long q_start, kv_start;  // first query token; first key row (contiguous K/V)
  long long lse_start, lse_head_stride;
};
__device__ __forceinline__ DecodeSeq decode_seq(const DecodeParams p, int b) {
  DecodeSeq s{};
  if (p.cu_seqlens_q != nullptr) {
    s.q_start = p.cu_seqlens_q[b];
    s.seq_q = p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
    s.lse_start = s.q_start;
    s.lse_head_stride = p.total_q;
  } else {
    s.q_start = static_cast<long long>(b) * p.seq_q;
    s.seq_q = p.seq_q;
    s.lse_start = static_cast<long long>(b) * p.heads_q * p.seq_q;
    s.lse_head_stride = p.seq_q;
  }
  s.ctx = p.seqlens_kv != nullptr ? p.seqlens_kv[b] : p.seq_kv;
  s.kv_start = p.cu_seqlens_kv != nullptr ? p.cu_seqlens_kv[b] : static_cast<long long>(b) * p.seq_kv;
  return s;
}

// The splits that hold keys of sequence sq (split 0 alone for a context of 0): the split kernel's
// blocks past them return at once, and the combine (kernel or fused) merges exactly these.
__device__ __forceinline__ int splits_used(const DecodeParams& p, const DecodeSeq& sq) {
  return sq.ctx > 0 ? min(p.splits, (sq.ctx + p.chunk - 1) / p.chunk) : 1;
}

// Paged: the pool rows of a tile's keys n0 + lane + 32 j (register j of each lane; 0 past the
// tile or past k_end), looked up by the warp a tile before its copies need them.
template <class Tr>
struct TileRows {
  static constexpr int kRegs = (Tr::kBlockN + 31) / 32;
  int r[kRegs];
};
template <class Tr, bool kPaged>
__device__ __forceinline__ TileRows<Tr> tile_rows(const DecodeParams p, int b, int n0, int k_end,
                                                  int lane) {
  TileRows<Tr> t{};
  if constexpr (kPaged) {
    const int* table = p.block_table + static_cast<int64_t>(b) * p.pages_per_seq;
#pragma unroll
    for (int j = 0; j < TileRows<Tr>::kRegs; ++j) {
      const int key = n0 + lane + 32 * j;
      if (lane + 32 * j < Tr::kBlockN && key < k_end) {
        const int page = p.page_shift >= 0 ? key >> p.page_shift : key / p.page_size;
        t.r[j] = table[page] * p.page_size + (key - page * p.page_size);
      }
    }
  }
  return t;
}

// Starts one warp's copy of keys [n0, n0 + kBlockN) of K and V into a ring stage; keys >= k_end
// (and, padded, columns >= dh) are zero-filled, so a masked key's V row adds exact zeros. Paged:
// the keys' pool rows are `rows` (tile_rows of the same n0).
template <class T, class Tr, bool kPadded, bool kPaged>
__device__ __forceinline__ void load_kv_tile(const DecodeParams p, const DecodeSeq sq,
                                             const TileRows<Tr>& rows, int kvh, int dh, int n0,
                                             int k_end, uint32_t k_tile, int lane) {
  using KVTile = typename Tr::KVTile;
  constexpr int kCpr = KVTile::kChunksPerRow;
  constexpr int kPerLane = Tr::kBlockN * kCpr / 32;
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);
  const int64_t stride = static_cast<int64_t>(p.heads_kv) * dh;
  const KVTile kt{k_tile}, vt{k_tile + KVTile::kBytes};
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int c = lane + 32 * i;
    const int r = c / kCpr, col = (c % kCpr) * 8;
    const int key = n0 + r;
    const bool ok = key < k_end && (!kPadded || col < dh);
    int64_t row = 0;
    if constexpr (kPaged) {
      int pool_row = 0;  // key r of the tile: register r / 32 of lane r % 32 (every lane shuffles)
#pragma unroll
      for (int j = 0; j < TileRows<Tr>::kRegs; ++j) {
        const int x = shfl_idx(rows.r[j], r & 31);
        if ((r >> 5) == j) pool_row = x;
      }
      row = pool_row;
    } else {
      row = sq.kv_start + key;
    }
    const int64_t off = row * stride + static_cast<int64_t>(kvh) * dh + col;
    cp_async_16(kt.addr(r, col), ok ? k + off : k, ok);
    cp_async_16(vt.addr(r, col), ok ? v + off : v, ok);
  }
}

// The warps' merged rows of one block (thread: packed row pr, columns 2 sub + 16 k): O and LSE
// themselves with one split (direct), else the split's partial O (normalised) and LSE.
template <class T, class Tr>
__device__ __forceinline__ void write_block_rows(const DecodeParams& p, const DecodeSeq& sq,
                                                 uint32_t mg, int kvh, int split, int pr, int sub,
                                                 int dh, bool direct) {
  constexpr int NW = Tr::kWarps, D = Tr::kHeadDim, kPerRow = Tr::kThreads / Tr::kRows;
  const uint32_t mg_max = mg, mg_sum = mg + 4 * NW * Tr::kRows;
  const uint32_t mg_o = mg + 8 * NW * Tr::kRows;
  const int r = pr % Tr::kRows;
  float m = kNegInf;
#pragma unroll
  for (int w = 0; w < NW; ++w) m = fmaxf(m, ld_shared_f32(mg_max + 4 * (w * Tr::kRows + r)));
  float wgt[NW], l = 0.f;
#pragma unroll
  for (int w = 0; w < NW; ++w) {
    const float mw = ld_shared_f32(mg_max + 4 * (w * Tr::kRows + r));
    wgt[w] = mw == kNegInf ? 0.f : exp2_approx(mw - m);
    l += wgt[w] * ld_shared_f32(mg_sum + 4 * (w * Tr::kRows + r));
  }
  const float inv = l > 0.f ? 1.f / l : 0.f;
  using attnbench::cuda::kLn2;
  const float lse = l > 0.f ? (m + log2f(l)) * kLn2 : kNegInf;
  const int qi = pr / p.group, h = kvh * p.group + pr % p.group;
  const int64_t row_id = (sq.q_start + qi) * p.heads_q + h;
  T* o = static_cast<T*>(p.o) + row_id * dh;
  float* po = direct ? nullptr
                     : p.part_o + (static_cast<int64_t>(split) * p.total_q * p.heads_q + row_id) * dh;
  for (int col = 2 * sub; col < dh; col += 2 * kPerRow) {
    float o0 = 0.f, o1 = 0.f;
#pragma unroll
    for (int w = 0; w < NW; ++w) {
      const uint32_t a = mg_o + 4 * ((w * Tr::kRows + r) * D + col);
      o0 += wgt[w] * ld_shared_f32(a);
      o1 += wgt[w] * ld_shared_f32(a + 4);
    }
    if (direct) {
      *reinterpret_cast<uint32_t*>(o + col) = Elem<T>::pack2(o0 * inv, o1 * inv);
    } else {
      po[col] = o0 * inv;
      po[col + 1] = o1 * inv;
    }
  }
  if (sub == 0) {
    if (direct)
      p.lse[sq.lse_start + h * sq.lse_head_stride + qi] = lse;
    else
      p.part_lse[static_cast<int64_t>(split) * p.total_q * p.heads_q + row_id] = lse;
  }
}

// The fused combine (option fused_combine): each split block, its partial rows written, counts
// itself in on its (sequence, row tile, kv head)'s counter; the block that arrives last merges the
// splits' partials (in L2, written moments ago) into O and LSE, as the combine kernel would, and
// leaves the counter at zero for the next call. No block waits for another, so nothing assumes
// the grid is resident at once. pr: this thread's packed row, -1 past the sequence's rows.
template <class T, class Tr>
__device__ __forceinline__ void fused_combine(const DecodeParams& p, const DecodeSeq& sq,
                                              uint32_t mg, int kvh, int pr, int sub, int dh) {
  constexpr int kPerRow = Tr::kThreads / Tr::kRows;
  constexpr int kPairs = Tr::kHeadDim / (2 * kPerRow);  // column pairs per thread
  const int tid = threadIdx.x;
  thread_fence();   // this thread's partial rows are visible to the device ...
  __syncthreads();  // ... for every thread of the block, before it is counted in
  const uint32_t flag = mg, wts = mg + 128;  // the warps' merge area is free again
  const int used = splits_used(p, sq);
  if (tid == 0) {
    int* counter = p.counters + static_cast<int64_t>(blockIdx.z) * p.heads_kv + kvh;
    const bool last = atomic_add_i32(counter, 1) == used - 1;
    if (last) atomic_store_i32(counter, 0);
    st_shared_f32(flag, last ? 1.f : 0.f);
  }
  __syncthreads();
  if (ld_shared_f32(flag) == 0.f) return;  // uniform over the block
  thread_fence();  // the other blocks' partials, counted in before the last arrival, are visible
  const int r = tid / kPerRow;
  const int64_t split_stride = static_cast<int64_t>(p.total_q) * p.heads_q;
  int64_t row_id = 0;
  int qi = 0, h = 0;
  if (pr >= 0) {
    qi = pr / p.group;
    h = kvh * p.group + pr % p.group;
    row_id = (sq.q_start + qi) * p.heads_q + h;
  }
  // The row's splits' weights (each thread of the row takes splits sub, sub + 8, ...), by the
  // row's 8 lanes together, kept in shared memory for every column. The LSEs are loaded once, all
  // at the same time (one round of L2 latency; they are in L2, written moments ago).
  constexpr int kLseRegs = (kMaxSplits + kPerRow - 1) / kPerRow;
  float lse_s[kLseRegs];
  float m = kNegInf;
#pragma unroll
  for (int j = 0; j < kLseRegs; ++j) {
    const int s = sub + kPerRow * j;
    lse_s[j] = pr >= 0 && s < used ? ld_cg_f32(p.part_lse + s * split_stride + row_id) : kNegInf;
    m = fmaxf(m, lse_s[j]);
  }
  m = group_max<kPerRow>(m);
  float l = 0.f;
#pragma unroll
  for (int j = 0; j < kLseRegs; ++j) {
    const int s = sub + kPerRow * j;
    const float w = lse_s[j] == kNegInf ? 0.f : expf(lse_s[j] - m);
    if (pr >= 0 && s < used) st_shared_f32(wts + 4 * (r * kMaxSplits + s), w);
    l += w;
  }
  l = group_sum<kPerRow>(l);
  __syncthreads();
  if (pr < 0) return;
  T* o = static_cast<T*>(p.o) + row_id * dh;
  if (m == kNegInf) {  // no split saw a key: O = 0, LSE = -inf
    for (int col = 2 * sub; col < dh; col += 2 * kPerRow)
      *reinterpret_cast<uint32_t*>(o + col) = Elem<T>::pack2(0.f, 0.f);
    if (sub == 0) p.lse[sq.lse_start + h * sq.lse_head_stride + qi] = kNegInf;
    return;
  }
  // The partial rows, kBatch splits at once (32 float2 a thread in flight): at batch 1 with 16
  // splits, d64, two rounds of L2 latency where there were eight (two splits a round).
  constexpr int kBatch = kPairs >= 32 ? 1 : 32 / kPairs;
  float acc[kPairs][2] = {};
  const float* po = p.part_o + row_id * dh + 2 * sub;
  for (int s0 = 0; s0 < used; s0 += kBatch) {
    float2 v[kBatch][kPairs];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int j = 0; j < kPairs; ++j)
        v[u][j] = s0 + u < used && 2 * sub + 2 * kPerRow * j < dh
                      ? ld_cg_f32x2(po + (s0 + u) * split_stride * dh + 2 * kPerRow * j)
                      : make_float2(0.f, 0.f);
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float w = s0 + u < used ? ld_shared_f32(wts + 4 * (r * kMaxSplits + s0 + u)) : 0.f;
#pragma unroll
      for (int j = 0; j < kPairs; ++j) {
        acc[j][0] += w * v[u][j].x;
        acc[j][1] += w * v[u][j].y;
      }
    }
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int j = 0; j < kPairs; ++j) {
    const int col = 2 * sub + 2 * kPerRow * j;
    if (col < dh)
      *reinterpret_cast<uint32_t*>(o + col) = Elem<T>::pack2(acc[j][0] * inv, acc[j][1] * inv);
  }
  if (sub == 0) p.lse[sq.lse_start + h * sq.lse_head_stride + qi] = m + logf(l);
}

// grid (splits, Hkv, B * row_tiles), Tr::kThreads threads, Tr::kSmemBytes of dynamic smem.
template <class T, class Tr, bool kPadded, bool kPaged>
__global__ void __launch_bounds__(Tr::kThreads, 1) flash_decode_kernel(const DecodeParams p) {
  constexpr int D = Tr::kHeadDim, BN = Tr::kBlockN, NW = Tr::kWarps, S = Tr::kStages;
  constexpr int kThreads = Tr::kThreads;
  constexpr int kSN = BN / 8, kON = D / 8;
  using QTile = typename Tr::QTile;
  using KVTile = typename Tr::KVTile;
  const int dh = kPadded ? p.head_dim : D;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int split = blockIdx.x, kvh = blockIdx.y;
  const int b = static_cast<int>(blockIdx.z) / p.row_tiles;
  const int rt = static_cast<int>(blockIdx.z) % p.row_tiles;
  const DecodeSeq sq = decode_seq(p, b);
  const int rows_b = p.group * sq.seq_q;  // packed rows of this (sequence, kv head)
  const int r0 = rt * Tr::kRows;
  if (r0 >= rows_b) return;
  // The split's keys; splits past the context write nothing (the combine reads only the
  // ceil(ctx / chunk) that have keys, and split 0 always, for a context of 0).
  const int split_begin = split * p.chunk;
  if (split > 0 && split_begin >= sq.ctx) return;
  // Within the split, the keys some row of the block sees: row i's diagonal is i + coff
  // (bottom-right), its window [diag - window_left, diag + window_right] (causal: right 0;
  // unbounded sides wider than any sequence).
  const int coff = sq.ctx - sq.seq_q;
  const int first_q = r0 / p.group, last_q = (min(rows_b, r0 + Tr::kRows) - 1) / p.group;
  const int k_end = min(min(sq.ctx, split_begin + p.chunk),
                        max(0, last_q + coff + p.var.window_right + 1));
  const int k_lo = max(split_begin, first_q + coff - p.var.window_left);
  // Tiles from the split's grid (so a key's tile is the same whichever block reads it).
  const int k_begin = k_lo > split_begin ? split_begin + (k_lo - split_begin) / BN * BN : split_begin;
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;
  // This warp's tiles: warp, warp + NW, ...
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + NW - 1) / NW : 0;

  const uint32_t smem = smem_u32(dynamic_smem());
  const QTile sQ{smem};
  const uint32_t ring = smem + QTile::kBytes + static_cast<uint32_t>(warp * Tr::kWarpBytes);

  // Q: the block's 16 packed rows (zero past the sequence's rows and past head_dim).
  {
    const T* q = static_cast<const T*>(p.q);
    constexpr int kCpr = QTile::kChunksPerRow;
#pragma unroll
    for (int c = tid; c < Tr::kRows * kCpr; c += kThreads) {
      const int r = c / kCpr, col = (c % kCpr) * 8;
      const int pr = r0 + r;
      const bool ok = pr < rows_b && (!kPadded || col < dh);
      const int qi = pr / p.group, h = kvh * p.group + pr % p.group;
      const int64_t off = ((sq.q_start + qi) * p.heads_q + h) * static_cast<int64_t>(dh) + col;
      cp_async_16(sQ.addr(r, col), ok ? q + off : q, ok);
    }
    cp_async_commit();
  }
  // The ring's first S - 1 tiles (empty groups past this warp's tiles keep the count uniform);
  // paged, the rows of the tile after them are looked up now, for the loop's first prefetch.
  auto tile_n0 = [&](int i) { return k_begin + (warp + i * NW) * BN; };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < my_tiles)
      load_kv_tile<T, Tr, kPadded, kPaged>(p, sq,
                                           tile_rows<Tr, kPaged>(p, b, tile_n0(i), k_end, lane),
                                           kvh, dh, tile_n0(i), k_end, ring + i * Tr::kStageBytes,
                                           lane);
    cp_async_commit();
  }
  TileRows<Tr> next_rows{};
  if (S - 1 < my_tiles) next_rows = tile_rows<Tr, kPaged>(p, b, tile_n0(S - 1), k_end, lane);
  cp_async_wait<S - 1>();  // Q landed (for this thread)
  __syncthreads();         // ... and for every thread
  // The combine (launched dependent on this grid) may start its blocks once every block here
  // has come this far: they wait in grid_dependency_wait() for this grid's end, so what they
  // save is the launch between the two kernels (a cost per call, seen at batch 1).
  grid_launch_dependents();

  const LdsmPtr pq = ldsm_p1(sQ, 0, 0, lane);
  const LdsmPtr pk0 = ldsm_p2(KVTile{ring}, 0, 0, lane);
  const LdsmPtr pv0 = ldsm_p1(KVTile{ring + KVTile::kBytes}, 0, 0, lane);

  // This lane's two rows (g and g + 8 of the tile): the first and last key each sees.
  int row_first[2], row_last[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const int diag = (r0 + (lane >> 2) + 8 * hf) / p.group + coff;
    row_first[hf] = diag - p.var.window_left;
    row_last[hf] = diag + p.var.window_right;
  }
  const bool capped = p.var.softcap_in != 0.f;

  float acc_o[1][kON][4];
  zero(acc_o);
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};
  const float sl2 = capped ? p.var.softcap_log2 : p.scale_log2;

  for (int i = 0; i < my_tiles; ++i) {
    cp_async_wait<S - 2>();  // tile i landed (this lane's copies)
    // Every lane's copies of tile i are visible, and every lane is done with tile i - 1, whose
    // stage the prefetch below overwrites.
    __syncwarp();
    {
      const int ip = i + S - 1;
      if (ip < my_tiles) {
        load_kv_tile<T, Tr, kPadded, kPaged>(p, sq, next_rows, kvh, dh, tile_n0(ip), k_end,
                                             ring + (ip % S) * Tr::kStageBytes, lane);
        if (ip + 1 < my_tiles)
          next_rows = tile_rows<Tr, kPaged>(p, b, tile_n0(ip + 1), k_end, lane);
      }
      cp_async_commit();
    }
    const uint32_t st = static_cast<uint32_t>((i % S) * Tr::kStageBytes);
    const int n0 = k_begin + (warp + i * NW) * BN;
    float s[1][kSN][4];
    zero(s);
    gemm_ss_nt<T, QTile, KVTile, D / 16>(s, pq, LdsmPtr(pk0, st));
    if (capped) {  // the soft cap: t = tanh(q.k * scale / softcap), the logit softcap * t
#pragma unroll
      for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][nt][e] = tanh_approx(s[0][nt][e] * p.var.softcap_in);
    }
    // Keys past the split's end, past a row's diagonal or outside its window.
#pragma unroll
    for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + nt * 8 + 2 * (lane & 3) + (e & 1);
        if (col >= k_end || col > row_last[e >> 1] || col < row_first[e >> 1]) s[0][nt][e] = kNegInf;
      }
    // Online softmax in the log2 domain, as flash_fwd_mma.cu (differences of rounded products).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float mx = kNegInf;
#pragma unroll
      for (int nt = 0; nt < kSN; ++nt) mx = fmaxf(mx, fmaxf(s[0][nt][2 * hf], s[0][nt][2 * hf + 1]));
      mx = fmaxf(row_max[hf], mul_rn(quad_max(mx), sl2));
      const float alpha = row_max[hf] == kNegInf ? 0.f : exp2_approx(row_max[hf] - mx);
      row_max[hf] = mx;
      const float base = mx == kNegInf ? 0.f : mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < kSN; ++nt)
#pragma unroll
        for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
          s[0][nt][e] = exp2_approx(mul_rn(s[0][nt][e], sl2) - base);
          sum += s[0][nt][e];
        }
      row_sum[hf] = row_sum[hf] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < kON; ++dt) {
        acc_o[0][dt][2 * hf] *= alpha;
        acc_o[0][dt][2 * hf + 1] *= alpha;
      }
    }
    uint32_t pa[1][kSN / 2][4];
    c_to_a<T>(s, pa);
    gemm_rs_nn<T, KVTile>(acc_o, pa, LdsmPtr(pv0, st));
  }
  cp_async_wait<0>();

  // The warps' merge: each writes its rows' max (log2 domain), sum and unnormalised O.
  __syncthreads();  // every warp is done with its ring, which the merge area overlays
  const uint32_t mg = smem + QTile::kBytes;
  const uint32_t mg_max = mg, mg_sum = mg + 4 * NW * Tr::kRows;
  const uint32_t mg_o = mg + 8 * NW * Tr::kRows;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    const float l = quad_sum(row_sum[hf]);
    const int r = (lane >> 2) + 8 * hf;
    if ((lane & 3) == 0) {
      st_shared_f32(mg_max + 4 * (warp * Tr::kRows + r), row_max[hf]);
      st_shared_f32(mg_sum + 4 * (warp * Tr::kRows + r), l);
    }
#pragma unroll
    for (int dt = 0; dt < kON; ++dt) {
      const int col = dt * 8 + 2 * (lane & 3);
      const uint32_t a = mg_o + 4 * ((warp * Tr::kRows + r) * D + col);
      st_shared_f32(a, acc_o[0][dt][2 * hf]);
      st_shared_f32(a + 4, acc_o[0][dt][2 * hf + 1]);
    }
  }
  __syncthreads();
  // Thread t merges row t / 8, columns 2 (t % 8) + 16 k.
  constexpr int kPerRow = kThreads / Tr::kRows;
  const int r = tid / kPerRow, sub = tid % kPerRow;
  const int pr = r0 + r;
  const bool direct = p.splits == 1;
  if (pr < rows_b) write_block_rows<T, Tr>(p, sq, mg, kvh, split, pr, sub, dh, direct);
  if (direct || p.fused == 0) return;
  fused_combine<T, Tr>(p, sq, mg, kvh, pr < rows_b ? pr : -1, sub, dh);
}

// Merges the splits: one warp per (query token, head) row; grid ceil(rows / 4), 128 threads.
// The lanes take the splits' LSEs (split s in lane s % 32, register s / 32) for the max and the
// sum by warp reductions, then the columns, with each split's weight from its lane by a shuffle
// and the splits' partial rows loaded 4 at a time: no pass over the splits waits on the one before
// (a loop over up to 128 splits per pass, three passes, each load waited for in turn, before).
template <class T, int BN>
__global__ void __launch_bounds__(128) flash_decode_combine_kernel(const DecodeParams p) {
  constexpr int kLseRegs = (kMaxSplits + 31) / 32;
  grid_dependency_wait();  // launched dependent on the split kernel: its partials are complete
  const int lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(p.total_q) * p.heads_q;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (row_id >= rows) return;  // whole warps: rows are per warp
  const int token = static_cast<int>(row_id / p.heads_q), h = static_cast<int>(row_id % p.heads_q);
  // The token's sequence: dense b = token / seq_q; varlen by bisection of cu_seqlens_q.
  int b;
  if (p.cu_seqlens_q != nullptr) {
    int lo = 0, hi = p.batch;  // cu[lo] <= token < cu[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (p.cu_seqlens_q[mid] <= token) lo = mid; else hi = mid;
    }
    b = lo;
  } else {
    b = token / p.seq_q;
  }
  const DecodeSeq sq = decode_seq(p, b);
  const int qi = static_cast<int>(token - sq.q_start);
  const int used = splits_used(p, sq);
  const int64_t split_stride = rows;
  float lse_s[kLseRegs];
  float m = kNegInf;
#pragma unroll
  for (int j = 0; j < kLseRegs; ++j) {
    const int s = lane + 32 * j;
    lse_s[j] = s < used ? p.part_lse[s * split_stride + row_id] : kNegInf;
    m = fmaxf(m, lse_s[j]);
  }
  m = group_max<32>(m);
  const int dh = p.head_dim;
  T* o = static_cast<T*>(p.o) + row_id * dh;
  float lse = kNegInf;
  if (m == kNegInf) {
    for (int col = 2 * lane; col < dh; col += 64)
      *reinterpret_cast<uint32_t*>(o + col) = Elem<T>::pack2(0.f, 0.f);
  } else {
    float l = 0.f;
#pragma unroll
    for (int j = 0; j < kLseRegs; ++j) {
      lse_s[j] = lse_s[j] == kNegInf ? 0.f : expf(lse_s[j] - m);  // now the split's weight
      l += lse_s[j];
    }
    l = group_sum<32>(l);
    const float inv = 1.f / l;
    // Every lane takes every pass (the shuffles need the whole warp), past dh with nothing to do.
    for (int c0 = 0; c0 < dh; c0 += 64) {
      const int col = c0 + 2 * lane;
      const bool on = col < dh;
      float o0 = 0.f, o1 = 0.f;
      const float* po = p.part_o + row_id * dh + col;
      for (int s0 = 0; s0 < used; s0 += 4) {
        float2 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
          v[u] = on && s0 + u < used
                     ? *reinterpret_cast<const float2*>(po + (s0 + u) * split_stride * dh)
                     : make_float2(0.f, 0.f);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int s = s0 + u;  // weight of split s: register s / 32 of lane s % 32
          float w = 0.f;
#pragma unroll
          for (int j = 0; j < kLseRegs; ++j) {
            const float x = shfl_idx(lse_s[j], s & 31);
            if ((s >> 5) == j) w = x;
          }
          o0 += w * v[u].x;
          o1 += w * v[u].y;
        }
      }
      if (on) *reinterpret_cast<uint32_t*>(o + col) = Elem<T>::pack2(o0 * inv, o1 * inv);
    }
    lse = m + logf(l);
  }
  if (lane == 0) p.lse[sq.lse_start + h * sq.lse_head_stride + qi] = lse;
}

using attnbench::Capabilities;
using attnbench::Device;
using attnbench::Options;
using attnbench::Pass;
using attnbench::Problem;
using attnbench::Support;

// The split plan of a problem: the number of key ranges per (sequence, kv head, row tile), forced
// or chosen, and the keys per range. Chosen: one block per SM fits (192 KiB of rings).
//  - Fewer blocks than half the SMs without splits (batch x kv heads x row tiles < SMs / 2: small
//    batches): a whole wave, floor(SMs / blocks) splits, when each range would still hold at
//    least kFullWaveTiles K/V tiles (256 KiB of K and V) and the memory is fast for the SM count
//    (peak DRAM bandwidth of at least kFullWaveGBpsPerSM an SM, or unknown: gbps 0); otherwise
//    the count nearest half a wave, round(SMs / 2 / blocks); never more than one K/V tile per
//    warp. The split-count A/Bs of 2026-12-06 and 2026-12-07 (batch 1, GQA 64:8, d64 and d128, 8
//    blocks; results/h200/issue29/README.md): at 32k keys 16 splits (64 and 32 tiles a range)
//    were 11-12% faster than 8 on an H200 (4916 GB/s, 37 an SM), but 1.5-5.1% slower than 8 at
//    8k-32k on an H100 (3352 GB/s, 25 an SM): half the SMs keep pace with the slower memory, and
//    twice the splits cost their pipeline fills and merge; at 4k keys 16 splits (8 and 4 tiles a
//    range) were 0-9% slower than 8 on both cards; at 1k keys one tile per warp (4 at d64, 8 at
//    d128) was the fastest. 9 splits (session 60's rule, ceil(SMs / 2 / blocks)) were 2.3% slower
//    than 8 at 4k keys d128 on the H200.
//  - Otherwise what matters is how evenly the blocks fill whole waves of SMs: of the counts that
//    leave each warp at least two K/V tiles (and at most kMaxSplits), the one whose last wave is
//    fullest, the smallest within 5% of it (fewer partial results to merge). Batch x heads that
//    fill the waves alone get 1.
struct SplitPlan {
  int splits, chunk, row_tiles;
};
SplitPlan plan_splits(const Problem& pr, int forced, int sms, double gbps) {
  return DecodeHeadDims::dispatch(pr.head_dim, [&](auto d) {
    using Tr = DecodeTraits<decltype(d)::value>;
    SplitPlan s{};
    s.row_tiles = (pr.group() * pr.seq_q + Tr::kRows - 1) / Tr::kRows;
    const int ctx = std::max(1, pr.seq_kv);  // the longest context
    const int tiles = (ctx + Tr::kBlockN - 1) / Tr::kBlockN;
    int want = 1;
    if (forced > 0) {
      want = forced;
    } else {
      const long long blocks = static_cast<long long>(pr.batch) * pr.heads_kv * s.row_tiles;
      const long long half = (sms + 1) / 2;
      if (blocks < half) {
        const long long wave = std::max(1LL, sms / blocks);
        const long long half_wave = std::max(1LL, (2 * half + blocks) / (2 * blocks));  // rounded
        const bool fast_memory = gbps <= 0 || gbps / sms >= kFullWaveGBpsPerSM;
        const long long cover = tiles / wave >= kFullWaveTiles && fast_memory ? wave : half_wave;
        want = static_cast<int>(std::min<long long>(cover, std::max(1, tiles / Tr::kWarps)));
      } else {
        const int cap = std::min(kMaxSplits, std::max(1, tiles / (2 * Tr::kWarps)));
        auto fill = [&](int n) {  // blocks / (waves * SMs)
          const long long b = blocks * n, waves = (b + sms - 1) / sms;
          return static_cast<double>(b) / static_cast<double>(waves * sms);
        };
        double best = 0;
        for (int n = 1; n <= cap; ++n) best = std::max(best, fill(n));
        for (int n = 1; n <= cap; ++n) {
          if (fill(n) >= best - 0.05) {
            want = n;
            break;
          }
        }
      }
    }
    want = std::max(1, std::min({want, kMaxSplits, tiles}));
    const int tiles_per = (tiles + want - 1) / want;
    s.chunk = tiles_per * Tr::kBlockN;
    s.splits = (ctx + s.chunk - 1) / s.chunk;  // no split past the longest context
    return s;
  });
}

class FlashDecode final : public attnbench::Implementation {
 public:
  std::string name() const override { return "cuda.flash_decode"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "decode (up to 16 new tokens): split-KV over a contiguous or paged cache, GQA packed "
           "into mma.sync rows, splits merged by a combine kernel or by the last split block";
  }
  Capabilities capabilities() const override {
    Capabilities c = attnbench::cuda::tensor_core_capabilities<DecodeHeadDims>(true, false);
    c.varlen = true;
    c.paged = true;
    c.window = true;
    c.softcap = true;
    c.options = {"splits", "pdl", "fused_combine"};
    return c;
  }

  Support supports_extra(const Problem& p, Pass) const override {
    if (p.paged() && static_cast<int64_t>(p.num_pages) * p.page_size > INT32_MAX) {
      return Support::no("a pool of more than 2^31 - 1 rows (num_pages x page_size): the "
                         "kernel's pool rows are int");
    }
    if (p.seq_q > attnbench::kMaxDecodeQueries) {
      return Support::no("decode runs up to " + std::to_string(attnbench::kMaxDecodeQueries) +
                         " new tokens per sequence, not seq_q " + std::to_string(p.seq_q) +
                         " (prefill: the flash_fwd kernels, or cuda.naive_3pass over pages)");
    }
    const SplitPlan s = plan_splits(p, 0, 132, 0);  // the grid's rows and heads: any plan
    if (p.heads_kv > 65535 || static_cast<long long>(p.batch) * s.row_tiles > 65535) {
      return Support::no("heads_kv and batch * ceil(group * seq_q / 16) must be <= 65535 (grid)");
    }
    std::string why;
    const int smem = max_smem_per_block(why);
    if (smem < 0) return Support::no(why);
    const int need = DecodeHeadDims::dispatch(
        p.head_dim, [](auto d) { return DecodeTraits<decltype(d)::value>::kSmemBytes; });
    if (smem < need) {
      return Support::no("needs " + std::to_string(need) + " bytes of shared memory per block, the "
                         "device allows " + std::to_string(smem));
    }
    return Support::yes();
  }

  Support supports_options(const Problem&, Pass, const Options& o) const override {
    const auto it = o.find("splits");
    if (it != o.end() && (it->second < 0 || it->second > kMaxSplits)) {
      return Support::no("splits must be 0 (automatic) to " + std::to_string(kMaxSplits) +
                         ", not " + std::to_string(it->second));
    }
    if (Support f = attnbench::cuda::check_flag_option(o, "fused_combine"); !f) return f;
    return attnbench::cuda::check_flag_option(o, "pdl");
  }

  static SplitPlan plan(const Problem& p, const Options* o) {
    return plan_splits(p, static_cast<int>(attnbench::option_or(o, "splits", 0)), multiprocessors(),
                       memory_peak_gbps());
  }

  // fused_combine's default: on for the 128-wide tile (head_dim 72 to 128), off for the others.
  // The merge A/B of 2026-12-06 (results/h200/ab/2026-12-06-decode-combine-batch/run-1f65ac1, an
  // H100, batch 1, GQA 32:8 and 64:8, 4k-128k keys) timed the fused merge at 0.95-0.99 of the
  // combine kernel's time at d128 in every cell up to 32k (1.00 at 128k), but 1.03 at d64 4k; d256
  // was not timed.
  static bool fused(const Problem& p, const Options* o) {
    const bool by_default = DecodeHeadDims::tile(p.head_dim) == 128;
    return attnbench::option_or(o, "fused_combine", by_default ? 1 : 0) != 0;
  }
  // The fused combine's arrival counters, one per split kernel block of split 0's.
  static std::size_t counter_bytes(const Problem& p, const SplitPlan& s) {
    return static_cast<std::size_t>(p.batch) * s.row_tiles * p.heads_kv * sizeof(int);
  }

  // With splits: [the fused combine's counters,] partial O, partial LSE.
  std::size_t workspace_bytes(const Problem& p, Pass, const Options& o) const override {
    const SplitPlan s = plan(p, &o);
    if (s.splits == 1) return 0;
    const std::size_t rows = static_cast<std::size_t>(p.total_q()) * p.heads_q * s.splits;
    return attnbench::cuda::carve_bytes(
        {fused(p, &o) ? counter_bytes(p, s) : 0, rows * p.head_dim * 4, rows * 4});
  }
  // The counters: zero before the first call, and each call's merging blocks leave them at zero.
  std::size_t workspace_zeroed_bytes(const Problem& p, Pass, const Options& o) const override {
    const SplitPlan s = plan(p, &o);
    if (s.splits == 1 || !fused(p, &o)) return 0;
    return attnbench::cuda::carve_bytes({counter_bytes(p, s)});
  }

  template <class F>
  static void dispatch(const Problem& pr, F&& f) {
    // Causal is a runtime bound here (the variant's window_right): dispatch_mma's causal flag
    // selects the same kernel both ways.
    dispatch_mma<DecodeHeadDims>(pr, [&](auto e, auto d, auto padded, auto) {
      using Tr = DecodeTraits<decltype(d)::value>;
      using T = typename decltype(e)::type;
      attnbench::cuda::dispatch_bool(pr.paged(), [&](auto pg) {
        f(flash_decode_kernel<T, Tr, decltype(padded)::value, decltype(pg)::value>,
          flash_decode_combine_kernel<T, Tr::kBlockN>, Tr{});
      });
    });
  }

  void prepare(const Problem& p, Pass, const Options&) const override {
    dispatch(p, [&](auto kernel, auto, auto tr) {
      set_dynamic_smem(kernel, decltype(tr)::kSmemBytes);
    });
  }

  void forward(const attnbench::FwdArgs& a) const override {
    const Problem& pr = a.p;
    for (const void* ptr : {a.q, a.k, a.v, static_cast<const void*>(a.o)}) {
      if (reinterpret_cast<std::uintptr_t>(ptr) % 16 != 0)
        throw std::invalid_argument("cuda.flash_decode: q, k, v, o must be 16-byte aligned");
    }
    if (pr.paged() && (!a.block_table || !a.seqlens_kv))
      throw std::invalid_argument("cuda.flash_decode: a paged problem needs block_table and seqlens_kv (FwdArgs)");
    if (pr.varlen() && !a.cu_seqlens_q)
      throw std::invalid_argument("cuda.flash_decode: a varlen problem needs cu_seqlens_q (FwdArgs)");
    const SplitPlan s = plan(pr, a.options);
    DecodeParams p = attnbench::cuda::with_shape<DecodeParams>(pr);
    p.q = a.q;
    p.k = a.k;
    p.v = a.v;
    p.o = a.o;
    p.lse = a.lse;
    if (pr.varlen()) {
      p.cu_seqlens_q = a.cu_seqlens_q;
      p.seqlens_kv = a.seqlens_kv;
      if (!pr.paged()) p.cu_seqlens_kv = a.cu_seqlens_kv;
      if (!p.seqlens_kv && !p.cu_seqlens_kv)
        throw std::invalid_argument("cuda.flash_decode: a varlen problem needs seqlens_kv or cu_seqlens_kv");
    }
    if (pr.paged()) {
      p.seqlens_kv = a.seqlens_kv;
      p.block_table = a.block_table;
      p.page_size = pr.page_size;
      p.pages_per_seq = pr.pages_per_seq;
      p.page_shift = (pr.page_size & (pr.page_size - 1)) == 0
                         ? __builtin_ctz(static_cast<unsigned>(pr.page_size))
                         : -1;
    }
    p.splits = s.splits;
    p.chunk = s.chunk;
    p.row_tiles = s.row_tiles;
    p.total_q = static_cast<int>(pr.total_q());
    p.batch = pr.batch;
    p.var = attnbench::cuda::make_variant(pr);
    if (s.splits > 1) {
      const std::size_t rows = static_cast<std::size_t>(p.total_q) * pr.heads_q * s.splits;
      attnbench::cuda::WorkspaceCarver ws(a.workspace, a.workspace_bytes);
      p.fused = fused(pr, a.options) ? 1 : 0;
      if (p.fused) p.counters = ws.take<int>(counter_bytes(pr, s) / sizeof(int));
      p.part_o = ws.take<float>(rows * pr.head_dim);
      p.part_lse = ws.take<float>(rows);
    }
    dispatch(pr, [&](auto kernel, auto combine, auto tr) {
      using Tr = decltype(tr);
      const dim3 grid(s.splits, pr.heads_kv, pr.batch * s.row_tiles);
      launch(kernel, grid, dim3(Tr::kThreads), Tr::kSmemBytes, a.stream, p);
      if (s.splits > 1 && !p.fused) {
        const long long rows = static_cast<long long>(p.total_q) * pr.heads_q;
        const dim3 cgrid(static_cast<unsigned>((rows + 3) / 4));
        if (attnbench::option_or(a.options, "pdl", 1) != 0)
          launch_dependent(combine, cgrid, dim3(128), 0, a.stream, p);
        else
          launch(combine, cgrid, dim3(128), 0, a.stream, p);
      }
    });
  }
};

}  // namespace
}  // namespace attn_mma

ATTNBENCH_REGISTER(attn_mma::FlashDecode)
