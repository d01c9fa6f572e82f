// Tile sizes of the mma.sync attention kernels, one place per head_dim. docs/tuning_flash_mma.md
// records why each value was chosen and what was measured.
//
// Register budget (255 per thread) is what bounds these choices: per thread a warp tile of
// R rows x C columns of float accumulators costs R*C/32 registers.
#pragma once

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

// ---- backward -----------------------------------------------------------------------------------
// Main kernel: a block owns kBlockN = 16 * kWarps keys; warp w owns keys [16 w, 16 w + 16) and
// computes S^T = K Q^T and dP^T = V dO^T for them, so that P^T and dS^T come out of the
// accumulators already in the A-fragment layout of dV += P^T dO and dK += dS^T Q (no shared-memory
// round trip for the two big products). Query tiles of kBlockM rows (Q, dO, LSE, D) stream
// through a 2-stage ring. dQ = dS K needs all keys of the block, so dS^T goes to shared memory and
// the warps split the kBlockM x head_dim product as kBlockM/16 row tiles x kDqColSplit column
// slices.
// Deterministic dQ kernel: a block owns kDqBlockM = 16 * kDqWarps query rows (16 per warp) and
// streams key tiles of kDqBlockN.
template <int kHeadDim_, int kWarps_, int kBlockM_, int kDqWarps_, int kDqBlockN_>
struct BwdConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kDqColSplit = kWarps / (kBlockM / 16);
  static constexpr int kDqCols = kHeadDim / kDqColSplit;
  // smem: K, V, 2 stages of Q and dO, dS^T, 2 stages of LSE and D.
  static constexpr int kSmemBytes = 2 * kBlockN * kHeadDim * 2 + 2 * 2 * kBlockM * kHeadDim * 2 +
                                    kBlockN * kBlockM * 2 + 2 * 2 * kBlockM * 4;
  static constexpr int kDqWarps = kDqWarps_;
  static constexpr int kDqThreads = 32 * kDqWarps;
  static constexpr int kDqBlockM = 16 * kDqWarps;
  static constexpr int kDqBlockN = kDqBlockN_;
  static constexpr int kDqSmemBytes = (2 * kDqBlockM + 2 * 2 * kDqBlockN) * kHeadDim * 2;
  static_assert(kWarps % (kBlockM / 16) == 0 && kDqCols % 16 == 0, "dQ warp split");
  static_assert(kBlockM % 64 == 0, "dS^T rows need >= 64 columns for the swizzle");
};

template <int kHeadDim>
struct BwdTraits;

// Per thread: dK + dV accumulators 2 * 16 * 64 / 32 = 64 registers, S^T and dP^T 32 each.
// Smem 81 KiB.
template <>
struct BwdTraits<64> : BwdConfig<64, 8, 64, 4, 64> {};

// dK + dV 128 registers, S^T and dP^T 32 each (FlashAttention-2 uses the same 128-key x 64-query
// block with 8 warps). Smem 145 KiB: 1 block per SM.
// Rejected: 32 keys per warp (dK + dV alone would be 256 registers); 128-query tiles (S^T and
// dP^T 64 each on top of 128).
template <>
struct BwdTraits<128> : BwdConfig<128, 8, 64, 4, 64> {};

// ---- backward main kernel, FlashAttention-2's warp layout --------------------------------------
// A block owns kBlockN = 128 keys of one (batch, kv head) and streams query tiles of kBlockM rows.
// Its 8 warps take three different layouts, one per product group; P and dS go through shared
// memory between them:
//   S = Q K^T, dP = dO V^T:  kSdpWarpsM (queries) x 8 / kSdpWarpsM (keys) warp tiles;
//   dV += P^T dO, dK += dS^T Q: kDkvWarpsN (keys) x 8 / kDkvWarpsN (head_dim) warp tiles, whose
//                            accumulators stay in registers for the whole block;
//   dQ = dS K:               kDqWarpsM (queries) x 8 / kDqWarpsM (head_dim) warp tiles.
// Wider warp tiles reuse each ldmatrix fragment across more mma (2 m-tiles share every B load).
template <int kHeadDim_, int kBlockM_, int kSdpWarpsM_, int kDkvWarpsN_, int kDqWarpsM_,
          int kMinBlocksPerSm_>
struct BwdMainConfig {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * kWarps;  // the epilogue stores 16 rows per warp
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kMinBlocksPerSm = kMinBlocksPerSm_;
  static constexpr int kSdpRows = kBlockM / kSdpWarpsM_;
  static constexpr int kSdpCols = kBlockN / (kWarps / kSdpWarpsM_);
  static constexpr int kSdpWarpsM = kSdpWarpsM_;
  static constexpr int kDkvRows = kBlockN / kDkvWarpsN_;
  static constexpr int kDkvCols = kHeadDim / (kWarps / kDkvWarpsN_);
  static constexpr int kDkvWarpsN = kDkvWarpsN_;
  static constexpr int kDqRows = kBlockM / kDqWarpsM_;
  static constexpr int kDqCols = kHeadDim / (kWarps / kDqWarpsM_);
  static constexpr int kDqWarpsM = kDqWarpsM_;
  // smem: K, V; 2 stages of Q and dO; P and dS; 2 stages of LSE and D.
  static constexpr int kSmemBytes = 2 * kBlockN * kHeadDim * 2 + 2 * 2 * kBlockM * kHeadDim * 2 +
                                    2 * kBlockM * kBlockN * 2 + 2 * 2 * kBlockM * 4;
  static_assert(kSdpRows % 16 == 0 && kSdpCols % 16 == 0, "S warp tile: whole m16 / n16 pairs");
  static_assert(kDkvRows % 16 == 0 && kDkvCols % 16 == 0, "dK/dV warp tile");
  static_assert(kDqRows % 16 == 0 && kDqCols % 16 == 0, "dQ warp tile");
  static_assert(kBlockM % 64 == 0 && kHeadDim % 64 == 0, "swizzled tiles need >= 64 columns");
};

template <int kHeadDim>
struct BwdMainTraits;

// head_dim 256 has no backward instantiation: dK + dV for 16 keys x 256 would be 256 registers
// per thread before any other value; it would need dK/dV split across warps by head_dim columns
// (and S^T recomputed or shared per column slice).

}  // namespace attn_mma
