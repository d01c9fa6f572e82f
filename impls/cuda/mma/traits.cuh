// Tile sizes of the mma.sync attention kernels, one place per head_dim. docs/tuning_flash_mma.md
// records why each value was chosen and what was measured.
//
// Register budget (255 per thread) is what bounds these choices: per thread a warp tile of
// R rows x C columns of float accumulators costs R*C/32 registers.
//
// The head_dim tiles instantiated for each kernel are declared here once (FwdHeadDims,
// BwdHeadDims); capabilities, supports() and the dispatch of flash_{fwd,bwd}_mma.cu derive from
// them. A head_dim below a tile (any multiple of 8) runs in the next tile up, as FlashAttention-2
// does: the columns past head_dim are zero-filled on load (cp.async with src-size 0) and never
// stored, so the products over them add exact zeros. Tiles are multiples of 64 columns because
// the (row % 8) swizzle needs 8 chunks per row.
#pragma once

#include "common/dispatch.hpp"

namespace attn_mma {

// ---- forward ------------------------------------------------------------------------------------
// A block owns kBlockM = kWarps * 16 * kMTiles query rows; warp w owns rows
// [16 kMTiles w, 16 kMTiles (w+1)) of it, so a row's softmax statistics never leave its warp.
// K/V tiles of kBlockN keys stream through a 2-stage cp.async ring.
template <int kHeadDim_, int kWarps_, int kMTiles_, int kBlockN_, int kMinBlocksPerSm_>
struct FwdConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kMTiles = kMTiles_;  // m16 tiles per warp: 2 halves the K/V shared-memory
                                            // reads per flop (each warp reads all of K and V)
  static constexpr int kBlockM = kWarps * 16 * kMTiles;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStages = 2;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  // Q, the K and V rings, and the per-thread partial row sums (see flash_fwd_mma.cu).
  static constexpr int kRowSumBytes = 2 * kMTiles * kThreads * 4;
  static constexpr int kSmemBytes = (kBlockM + 2 * kStages * kBlockN) * kHeadDim * 2 + kRowSumBytes;
  static_assert(kHeadDim % 64 == 0 && kBlockN % 16 == 0, "whole fragments, swizzle needs 64 cols");
};

template <int kHeadDim>
struct FwdTraits;

// 128 x 128, 4 warps of 32 rows (FlashAttention-2's sm80 choice for d64). Accumulators:
// S 128 + O 64 registers (254 used, no spill). Smem 82 KiB: 2 blocks (8 warps) per SM.
// Rejected: 128 x 64 (no spill either, 238 registers, but twice the per-tile softmax overhead);
// 8 warps x 16 rows (every warp streams all of K and V from shared memory: half the flops per
// byte of ldmatrix traffic); 128 x 256 (S alone would take 256 registers).
template <>
struct FwdTraits<64> : FwdConfig<64, 4, 2, 128, 2> {};

// 128 x 64, 4 warps of 32 rows (FlashAttention-2's sm80/sm90 choice for d128). Accumulators:
// S 64 + O 128 registers (255 used, no spill once the row sums moved to shared memory).
// Smem 98 KiB: 2 blocks per SM.
// Rejected: 128 x 128 (S 128 + O 128 > 255 registers); 8 warps x 16 rows, 128 x 64 (190
// registers, no spill, but 1.8 instead of 3.2 mma per ldmatrix); 4 warps x 32 rows x 32 keys
// (spilled the prefetch addresses before they were recomputed in the prefetch branch).
template <>
struct FwdTraits<128> : FwdConfig<128, 4, 2, 64, 2> {};

// 128 x 64, 8 warps of 16 rows (FlashAttention-2's sm80 choice for d256): O alone is 128
// registers at 16 rows, so 32 rows per warp cannot fit. Smem 194 KiB (Q 64 KiB + 2 stages of K
// and V + row sums): 1 block per SM; needs the 227 KiB opt-in of sm_90 (sm_80's 163 KiB is too
// small: supports_extra skips the case there).
template <>
struct FwdTraits<256> : FwdConfig<256, 8, 1, 64, 1> {};

using FwdHeadDims = attnbench::cuda::HeadDims<64, 128, 256>;

// ---- backward -----------------------------------------------------------------------------------
// Main kernel (FlashAttention-2's warp layout): a block owns kBlockN = 128 keys of one (batch, kv
// head) and streams query tiles of kBlockM rows (Q, dO, LSE, D) through a 2-stage ring. Its 8 warps
// take a different layout for each product group; P and dS go through shared memory in between:
//   S = Q K^T, dP = dO V^T:     kSdpWarpsM (queries) x 8 / kSdpWarpsM (keys) warp tiles;
//   dV += P^T dO, dK += dS^T Q: kDkvWarpsN (keys) x 8 / kDkvWarpsN (head_dim) warp tiles, whose
//                               accumulators stay in registers for the whole block;
//   dQ = dS K:                  kDqWarpsM (queries) x 8 / kDqWarpsM (head_dim) warp tiles.
// Warp tiles of 2 m16 rows reuse every B fragment for 2 mma: fewer ldmatrix per mma, which is what
// bounds this kernel (docs/tuning_flash_mma.md, steps 11-12).
template <int kHeadDim_, int kBlockN_, int kBlockM_, int kSdpWarpsM_, int kDkvWarpsN_,
          int kDqWarpsM_, int kMinBlocksPerSm_>
struct BwdMainConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kEpilogueRows = kBlockN / kWarps;  // dK, dV rows each warp stores
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kSdpWarpsM = kSdpWarpsM_;
  static constexpr int kSdpRows = kBlockM / kSdpWarpsM;
  static constexpr int kSdpCols = kBlockN / (kWarps / kSdpWarpsM);
  static constexpr int kDkvWarpsN = kDkvWarpsN_;
  static constexpr int kDkvRows = kBlockN / kDkvWarpsN;
  static constexpr int kDkvCols = kHeadDim / (kWarps / kDkvWarpsN);
  static constexpr int kDqWarpsM = kDqWarpsM_;
  static constexpr int kDqRows = kBlockM / kDqWarpsM;
  static constexpr int kDqCols = kHeadDim / (kWarps / kDqWarpsM);
  // smem: K, V; 2 stages of Q and dO; P and dS; 2 stages of LSE and D.
  static constexpr int kSmemBytes = 2 * kBlockN * kHeadDim * 2 + 2 * 2 * kBlockM * kHeadDim * 2 +
                                    2 * kBlockM * kBlockN * 2 + 2 * 2 * kBlockM * 4;
  static_assert(kSdpRows % 16 == 0 && kSdpCols % 16 == 0, "S warp tile: whole m16 / n16 pairs");
  static_assert(kDkvRows % 16 == 0 && kDkvCols % 16 == 0, "dK/dV warp tile");
  static_assert(kDqRows % 16 == 0 && kDqCols % 16 == 0, "dQ warp tile");
  static_assert(kBlockM % 64 == 0 && kBlockN % 64 == 0 && kHeadDim % 64 == 0,
                "swizzled tiles need >= 64 columns");
  static_assert(kEpilogueRows % 8 == 0, "whole 8-row groups per warp in the epilogue");
};

// Deterministic dQ kernel: a block owns kDqBlockM = 16 * kDqWarps query rows (16 per warp) and
// streams key tiles of kDqBlockN.
template <int kHeadDim_, int kDqWarps_, int kDqBlockN_, int kDqMinBlocksPerSm_ = 2>
struct BwdDqConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kDqMinBlocksPerSm = kDqMinBlocksPerSm_;
  static constexpr int kDqWarps = kDqWarps_;
  static constexpr int kDqThreads = 32 * kDqWarps;
  static constexpr int kDqBlockM = 16 * kDqWarps;
  static constexpr int kDqBlockN = kDqBlockN_;
  static constexpr int kDqSmemBytes = (2 * kDqBlockM + 2 * 2 * kDqBlockN) * kHeadDim * 2;
};

template <int kHeadDim>
struct BwdTraits;

// Main: 128 keys x 128-query tiles. S, dP: 4 x 2 warps of 32 queries x 64 keys (64 + 64
// registers); dK, dV: 4 x 2 warps of 32 keys x 32 columns (32 + 32); dQ: 8 warps of 16 queries
// x 64. 255 registers, no spill; smem 162 KiB: 1 block (8 warps) per SM. Measured (tune_bwd, H200,
// bwd TFLOP/s at 2k/8k/16k): 232/245/247, against 218/229/230 for the 16-keys-per-warp kernel below
// and 210/220/221 for variant "a2". Rejected:
//  - 16 keys per warp, 64-query tiles, 8 warps (the kernel until 2026-11-29): each warp computes
//    S^T = K_w Q^T and dP^T for its own 16 keys, so P^T and dS^T stay in registers as the A operand
//    of dV and dK; but every warp reads all of Q and dO twice per tile (1.7 mma per ldmatrix):
//    ncu at 16k, L1 wavefronts 65% of peak, tensor pipe 35%.
//  - "a": 64-query tiles, S 2 x 4 warps of 32 x 32 (the d128 layout below at d64): not timed
//    (240 registers; the call that timed it ran out of time);
//  - "a2": "a" with 2 blocks (16 warps) per SM: 128 registers force 312 B of spill; 4-8% slower
//    than the 16-keys-per-warp kernel.
template <>
struct BwdTraits<64> {
  using Main = BwdMainConfig<64, 128, 128, 4, 4, 8, 1>;
  using Dq = BwdDqConfig<64, 4, 64>;
};

// Main: 128 keys x 64-query tiles (FlashAttention-2's d128 block). S, dP: 2 x 4 warps of 32 x 32
// (32 + 32 registers); dK, dV: 4 x 2 warps of 32 keys x 64 columns (64 + 64); dQ: 4 x 2 warps of
// 16 x 64. 255 registers, no spill; smem 161 KiB: 1 block per SM.
// Measured (same binary, same call): bwd 255/269/270 TFLOP/s at 2k/8k/16k against 244/257/259
// for the 16-keys-per-warp kernel (+4%).
// Rejected: 16 keys per warp (above); 32 keys per warp in that layout (dK + dV alone would be
// 256 registers); 128-query tiles (S and dP 64 registers each on top of dK + dV's 128).
template <>
struct BwdTraits<128> {
  using Main = BwdMainConfig<128, 128, 64, 2, 4, 4, 1>;
  using Dq = BwdDqConfig<128, 4, 64>;
};

// Main: 64 keys x 64-query tiles (FlashAttention-2's sm80 d256 block): with 8 warps, dK + dV of
// 128 keys x 256 would be 256 registers per thread before any other value, so the key block is
// halved (half the reuse of Q and dO per block; each warp stores 8 rows of dK and dV). S, dP:
// 2 x 4 warps of 32 queries x 16 keys (16 + 16 registers); dK, dV: 2 x 4 warps of 32 keys x 64
// columns (64 + 64); dQ: 2 x 4 warps of 32 x 64 (64, transient). Smem 209 KiB (K, V 64; Q, dO
// 2 stages 128; P, dS 16): 1 block per SM, sm_90 only (sm_80's 163 KiB is too small:
// supports_extra skips it there). Not timed yet.
// Dq: 8 warps of 16 queries x 256 (128 registers of dQ), 32-key tiles (with 4 warps a 256-column
// tile has 4 rows per cp.async pass, below the swizzle's 8); 192 KiB, 1 block per SM.
template <>
struct BwdTraits<256> {
  using Main = BwdMainConfig<256, 64, 64, 2, 2, 2, 1>;
  using Dq = BwdDqConfig<256, 8, 32, 1>;
};

using BwdHeadDims = attnbench::cuda::HeadDims<64, 128, 256>;

}  // namespace attn_mma
