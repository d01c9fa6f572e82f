#include "attnbench/tensors.hpp"

#include <cmath>
#include <numbers>

#include "attnbench/splitmix64.hpp"

namespace attnbench {

std::vector<double> HostTensor::to_double() const {
  std::vector<double> out(static_cast<std::size_t>(numel));
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < numel; ++i) out[static_cast<std::size_t>(i)] = get(i);
  return out;
}

namespace {

// Uniform in (0, 1]: 53 random bits, never 0 (log(0) in Box-Muller).
double uniform(std::uint64_t key) {
  return (static_cast<double>(splitmix64(key) >> 11) + 1.0) * 0x1p-53;
}

double normal(std::uint64_t key) {
  const double u1 = uniform(key * 2);
  const double u2 = uniform(key * 2 + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

void fill(HostTensor& t, std::uint64_t seed, std::uint64_t stream, Distribution dist) {
  const std::uint64_t base = splitmix64(seed ^ splitmix64(stream + 1));
  const std::int64_t n = t.numel;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t key = base + static_cast<std::uint64_t>(i) * 4;
    double x = normal(key);
    if (dist == Distribution::outlier && uniform(key + 2) < 0.001) {
      x += 10.0 * normal(key + 3);  // N(0, 100): standard deviation 10
    }
    t.set(i, static_cast<float>(x));
  }
}

}  // namespace

CaseInputs make_inputs(const Problem& p, std::uint64_t seed, Distribution dist) {
  CaseInputs in;
  in.p = p;
  in.q = HostTensor(p.dtype, p.q_elems());
  in.k = HostTensor(p.dtype, p.kv_elems());
  in.v = HostTensor(p.dtype, p.kv_elems());
  in.dout = HostTensor(p.dtype, p.q_elems());
  fill(in.q, seed, 0, dist);
  fill(in.k, seed, 1, dist);
  fill(in.v, seed, 2, dist);
  fill(in.dout, seed, 3, Distribution::normal);
  return in;
}

}  // namespace attnbench
