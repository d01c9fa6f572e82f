// The read ceiling's kernel (read_ceiling.cu), for ceilings.cpp: CUDA builds only.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace attnbench {

// Reads `bytes` (a multiple of 16) at `buf` once on `stream`: every SM full of threads, each with
// four 16-byte streaming loads in flight; `sink` (4 bytes of device memory) is written only when
// the XOR of everything read equals a constant, so that no load is optimised away. Checks the
// launch; throws std::runtime_error on an error.
void launch_read_all(const void* buf, std::size_t bytes, unsigned* sink, int sms, cudaStream_t stream);

// The read flush of timed calls (FlushMode::read): reads `bytes` (a multiple of 16) at `buf` with
// ordinary L2-allocating loads, so that the L2 ends up holding `buf`'s clean lines and nothing
// of the previous call; writes `buf`'s first word only if the XOR of everything read equals a
// constant (a buffer of zeros never does). Checks the launch.
void launch_read_flush(void* buf, std::size_t bytes, int sms, cudaStream_t stream);

}  // namespace attnbench
