// The two 16-bit element types of every CUDA family, under one pair of names: CUDA's own on the
// device. The CPU emulation of the mma and Hopper kernels (tests/mma_emulation,
// tests/hopper_emulation) puts mma/emulation/ ahead of impls/cuda on the include path, and its
// common/element_types.cuh declares bit-level stand-ins under the same names.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace attnbench::cuda {

using half_t = __half;
using bfloat_t = __nv_bfloat16;

}  // namespace attnbench::cuda
