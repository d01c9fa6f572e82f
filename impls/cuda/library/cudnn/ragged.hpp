// The per-sequence tensors of cuda.cudnn_sdpa's varlen (packed THD) graphs, built on the device
// before each call from the harness's cu_seqlens (FwdArgs/BwdArgs, problem.hpp's
// SequenceMetadata) into the implementation's workspace: one tiny kernel, no host copy, so the
// call reads the lengths it is given and stays free of host synchronisation.
//   seq_q, seq_kv   [b]      int32  lengths (the padding mask, the GEMMs' M/N/K overrides)
//   off_q           [b + 1]  int32  cu_seqlens_q * hq * d    (ragged offsets of Q, O, dO, dQ)
//   off_kv          [b + 1]  int32  cu_seqlens_kv * hkv * d  (of K, V, dK, dV)
//   off_stats       [b + 1]  int32  cu_seqlens_q             (of the LSE, [hq, total_q])
// Element offsets in int32: the caller refuses problems whose totals would overflow them.
#pragma once

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnbench::cudnn {

struct RaggedMetadata {
  std::int32_t* seq_q = nullptr;
  std::int32_t* seq_kv = nullptr;
  std::int32_t* off_q = nullptr;
  std::int32_t* off_kv = nullptr;
  std::int32_t* off_stats = nullptr;
};

// Workspace bytes of the five arrays for b sequences, each 256-byte aligned (cuDNN's tensors are
// declared 16-byte aligned).
std::int64_t ragged_metadata_bytes(std::int64_t b);
// The arrays carved from `base` (256-byte aligned), in the order above.
RaggedMetadata ragged_metadata_at(void* base, std::int64_t b);

// cu_q, cu_kv: [b + 1] device prefix sums -> m, on `stream`. q_token / kv_token: elements per token
// (hq * d, hkv * d).
void build_ragged_metadata(const RaggedMetadata& m, const std::int32_t* cu_q,
                           const std::int32_t* cu_kv, std::int64_t b, std::int32_t q_token,
                           std::int32_t kv_token, cudaStream_t stream);

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
