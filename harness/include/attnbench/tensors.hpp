// Host tensors in storage dtype, seeded input generation, and the outputs of one call.
#pragma once

#include <cstdint>
#include <vector>

#include "attnbench/problem.hpp"

namespace attnbench {

struct HostTensor {
  DType dtype = DType::f32;
  std::int64_t numel = 0;
  std::vector<std::uint8_t> bytes;

  HostTensor() = default;
  HostTensor(DType t, std::int64_t n) : dtype(t), numel(n), bytes(static_cast<std::size_t>(n) * dtype_size(t)) {}
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  std::size_t nbytes() const { return bytes.size(); }
  float get(std::int64_t i) const { return load_as_float(bytes.data(), static_cast<std::size_t>(i), dtype); }
  void set(std::int64_t i, float v) { store_from_float(bytes.data(), static_cast<std::size_t>(i), v, dtype); }
  std::vector<double> to_double() const;
};

// normal: N(0,1). outlier: FlashAttention-3's mix N(0,1) + N(0,100) * Bernoulli(0.001).
enum class Distribution { normal, outlier };

struct CaseInputs {
  Problem p;
  HostTensor q, k, v, dout;  // in p.dtype
};

// Deterministic in (problem shape, seed, distribution): every implementation of a case sees the
// same inputs. Counter-based (splitmix64 + Box-Muller), so generation is parallel and portable.
CaseInputs make_inputs(const Problem& p, std::uint64_t seed, Distribution dist = Distribution::normal);

// What one call produced, copied back to the host. Forward fills o and lse, backward dq, dk, dv.
struct Outputs {
  HostTensor o;
  std::vector<float> lse;
  HostTensor dq, dk, dv;
};

}  // namespace attnbench
