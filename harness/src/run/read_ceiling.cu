// The read ceiling of memory-bound rows (ceilings.cpp): a kernel that only reads. Decode reads K
// and V once and writes little, so neither a copy (its writes share the bus) nor a library GEMV
// (3.2 TB/s on the H200 on 2026-12-02, below cuDNN's decode in issue 29) bounds it.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "read_ceiling.hpp"

namespace attnbench {
namespace {

__device__ __forceinline__ unsigned fold(uint4 v) {
  return v.x ^ v.y ^ v.z ^ v.w;
}

// One 16-byte word: a streaming load (marked evict-first: the read ceiling, which should not
// care what L2 keeps) or one that allocates in L2 with the normal policy (__ldcg: L2, not L1; the
// read flush, which must leave L2 holding its own lines and nothing of the previous call's).
template <bool kStreaming>
__device__ __forceinline__ uint4 load(const uint4* p) {
  if constexpr (kStreaming) return __ldcs(p);
  else return __ldcg(p);
}

// Grid-stride over n 16-byte words, four independent loads per thread and step.
template <bool kStreaming>
__global__ void __launch_bounds__(512) read_words(const uint4* __restrict__ p, std::size_t n,
                                                  unsigned* sink) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  unsigned acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = load<kStreaming>(p + i), b = load<kStreaming>(p + i + stride),
                c = load<kStreaming>(p + i + 2 * stride), d = load<kStreaming>(p + i + 3 * stride);
    acc ^= fold(a) ^ fold(b) ^ fold(c) ^ fold(d);
  }
  for (; i < n; i += stride) acc ^= fold(load<kStreaming>(p + i));
  if (acc == 0x9e3779b9u) *sink = acc;
}

}  // namespace

void launch_read_flush(void* buf, std::size_t bytes, int sms, cudaStream_t stream) {
  read_words<false><<<4 * sms, 512, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16,
                                                 static_cast<unsigned*>(buf));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("read flush: ") + cudaGetErrorString(e));
}

void launch_read_all(const void* buf, std::size_t bytes, unsigned* sink, int sms,
                     cudaStream_t stream) {
  read_words<true><<<4 * sms, 512, 0, stream>>>(static_cast<const uint4*>(buf), bytes / 16, sink);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("read kernel: ") + cudaGetErrorString(e));
}

}  // namespace attnbench
