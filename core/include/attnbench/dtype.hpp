// Storage dtypes and host-side conversion helpers.
//
// Tensors are stored as f32, f16 (IEEE binary16) or bf16 (bfloat16). On the host the 16-bit types
// are plain uint16_t bit patterns with the same layout as CUDA's __half and __nv_bfloat16, so a
// buffer can be copied to the device unchanged. Conversions round to nearest even, like the CUDA
// intrinsics, so a value rounded on the host equals the one rounded on the device.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace attnbench {

enum class DType { f32, f16, bf16 };

constexpr std::size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

inline std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "fp32") return DType::f32;
  if (s == "f16" || s == "float16" || s == "fp16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  return std::nullopt;
}

// Unit roundoff of the storage type: half the distance from 1 to the next value.
constexpr double unit_roundoff(DType t) {
  switch (t) {
    case DType::f32: return 0x1p-24;
    case DType::f16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
  }
  return 0;
}

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}
inline float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

inline std::uint16_t float_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in f16: scale into the integer range and round
    const float a = bits_float(abs);
    const float scaled = a * 16777216.0f;  // 2^24: f16 subnormal step is 2^-24
    const auto r = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t m = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  m -= 0x38000000u;                                      // rebias exponent 127 -> 15
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

inline float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// Read element i of a buffer stored in dtype t.
inline float load_as_float(const void* p, std::size_t i, DType t) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f16: return f16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const std::uint16_t*>(p)[i]);
  }
  return NAN;
}

// Write element i of a buffer stored in dtype t (rounding to nearest even).
inline void store_from_float(void* p, std::size_t i, float v, DType t) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = v; break;
    case DType::f16: static_cast<std::uint16_t*>(p)[i] = float_to_f16(v); break;
    case DType::bf16: static_cast<std::uint16_t*>(p)[i] = float_to_bf16(v); break;
  }
}

// Round a float to the nearest value representable in dtype t.
inline float round_to(float v, DType t) {
  switch (t) {
    case DType::f32: return v;
    case DType::f16: return f16_to_float(float_to_f16(v));
    case DType::bf16: return bf16_to_float(float_to_bf16(v));
  }
  return v;
}

// Bit pattern used to poison outputs before a call: a quiet NaN in every dtype.
inline void poison_nan(void* p, std::size_t n, DType t) {
  if (t == DType::f32) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (std::size_t i = 0; i < n; ++i) static_cast<float*>(p)[i] = nan;
  } else {
    const std::uint16_t nan = t == DType::f16 ? 0x7e00u : 0x7fc0u;
    for (std::size_t i = 0; i < n; ++i) static_cast<std::uint16_t*>(p)[i] = nan;
  }
}

}  // namespace attnbench
