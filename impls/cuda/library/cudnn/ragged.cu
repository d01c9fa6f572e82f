// The varlen metadata kernel of cuda.cudnn_sdpa; see ragged.hpp.
#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include "common/check.hpp"
#include "common/workspace.hpp"
#include "library/cudnn/ragged.hpp"

namespace attnbench::cudnn {
namespace {

// One thread per sequence boundary i in [0, b]: the offsets at i, and (i < b) sequence i's lengths.
__global__ void ragged_metadata_kernel(RaggedMetadata m, const std::int32_t* cu_q,
                                       const std::int32_t* cu_kv, int b, std::int32_t q_token,
                                       std::int32_t kv_token) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= b; i += gridDim.x * blockDim.x) {
    const std::int32_t q = cu_q[i], kv = cu_kv[i];
    m.off_q[i] = q * q_token;
    m.off_kv[i] = kv * kv_token;
    m.off_stats[i] = q;
    if (i < b) {
      m.seq_q[i] = cu_q[i + 1] - q;
      m.seq_kv[i] = cu_kv[i + 1] - kv;
    }
  }
}

std::int64_t array_bytes(std::int64_t b) {
  return cuda::align_up((b + 1) * std::int64_t{4});
}

}  // namespace

std::int64_t ragged_metadata_bytes(std::int64_t b) {
  return 5 * array_bytes(b);
}

RaggedMetadata ragged_metadata_at(void* base, std::int64_t b) {
  auto* p = static_cast<char*>(base);
  const std::int64_t n = array_bytes(b);
  const auto at = [&](int k) { return reinterpret_cast<std::int32_t*>(p + k * n); };
  return {at(0), at(1), at(2), at(3), at(4)};
}

void build_ragged_metadata(const RaggedMetadata& m, const std::int32_t* cu_q,
                           const std::int32_t* cu_kv, std::int64_t b, std::int32_t q_token,
                           std::int32_t kv_token, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((b + kThreads) / kThreads);  // b + 1 boundaries
  ragged_metadata_kernel<<<blocks, kThreads, 0, stream>>>(m, cu_q, cu_kv, static_cast<int>(b),
                                                          q_token, kv_token);
  ATTN_CHECK(cudaGetLastError());
}

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
