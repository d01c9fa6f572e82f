// CPU emulation of common/element_types.cuh: the 16-bit element types as their bits, under the
// names the kernels use (attnbench::cuda::half_t, bfloat_t). Found ahead of impls/cuda on the
// include path of the emulation tests; mma/emulation/mma/ptx.cuh converts them (Elem).
#pragma once

#include <cstdint>

namespace attnbench::cuda {

struct half_t {
  std::uint16_t bits;
};
struct bfloat_t {
  std::uint16_t bits;
};

}  // namespace attnbench::cuda
