// 2^x without the SFU: the exponentials of a softmax split between MUFU.EX2 (16 a clock per SM
// on sm_80/sm_90) and the FMA and integer pipes, where the SFU limits a kernel's softmax (the
// Hopper forward at d128 issues 88 MUFU.EX2 a thread per 128 x 176 tile, 8 cycles of the SFU
// each per warp, against about 5 other instructions per score; with a soft cap, tanh doubles
// the SFU's share). FlashAttention-4 does the same on Blackwell; this is attnbench's own
// version: round to nearest, a degree-4 polynomial on [-1/2, 1/2], and the integer part as a
// float scale, so that 2^-127 and below (a masked score's -inf) is exactly 0, as ex2 gives.
// Plain C++ for the device and the CPU emulation of the kernels alike (tests/hopper_emulation
// runs the same arithmetic; fmaf and float rounding are IEEE's on both).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ATTN_EXP2_HD __host__ __device__ __forceinline__
#else
#define ATTN_EXP2_HD inline
#endif

namespace attnbench::cuda {

// Minimax (relative error) coefficients of 2^f on [-1/2, 1/2], degree 4, fitted and checked in
// float32 Horner evaluation with fused multiply-adds: relative error at most 2.7e-6 (2^-18.5),
// against ex2.approx's 2^-22; a P rounded to bf16 (2^-9) or f16 (2^-11) does not see it.
// (Scalars, not an array: device code may not odr-use a host constexpr array.)
inline constexpr float kExp2P0 = 0.999999285f, kExp2P1 = 0.693121791f, kExp2P2 = 0.240247443f,
                       kExp2P3 = 0.0559178591f, kExp2P4 = 0.00957010128f;

// 2^x for x <= 127 (the softmax's exponents are <= 0 up to rounding); -inf, NaN and x < -126.5
// give 0. Ten instructions: FMNMX, 3 FADD, 4 FFMA, one shift-add, FMUL.
ATTN_EXP2_HD float exp2_poly(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: x + kRound holds rint(x) in its low bits
  x = fmaxf(x, -127.f);
  const float t = x + kRound;
  const float f = x - (t - kRound);  // in [-1/2, 1/2]
  float p = fmaf(kExp2P4, f, kExp2P3);
  p = fmaf(p, f, kExp2P2);
  p = fmaf(p, f, kExp2P1);
  p = fmaf(p, f, kExp2P0);
  // t's bits are 0x4B400000 + j for j = rint(x) (|j| < 2^22), and 0x4B400000 << 23 is 0 modulo
  // 2^32: (bits(t) << 23) + (127 << 23) = (j + 127) << 23, the float 2^j for j >= -126 and +0 for
  // j = -127.
  uint32_t tb;
  std::memcpy(&tb, &t, 4);
  const uint32_t sb = (tb << 23) + 0x3F800000u;
  float s;
  std::memcpy(&s, &sb, 4);
  return p * s;
}

}  // namespace attnbench::cuda

#undef ATTN_EXP2_HD
