// The Hopper kernels' pipelines: a ring of S stages in shared memory, each guarded by a "full"
// mbarrier (completed by the producer: its TMA bytes or a plain arrive) and an "empty" one (the
// consumers arrive on it when they are done with the stage), as FlashAttention-3's
// PipelineTmaAsync and ThunderKittens' rings. The producer and the consumers hold the same
// Pipeline and count iterations from 0 in the same order; iteration `it` uses stage it % S. A
// barrier completes once per pass through the ring, so a wait expects the parity of the pass,
// (it / S) & 1: the consumers wait for this pass's "full", the producer for the consumers'
// release of the previous pass (parity ^ 1, which a fresh barrier reports as complete, so the
// first pass does not wait).
//
// Header-only over hopper/ptx.cuh's mbarrier calls, so that the CPU emulation build
// (hopper/emulation/hopper/ptx.cuh) runs the same code.
#pragma once

#include <cstdint>

// Angle brackets: the emulation build's hopper/ptx.cuh comes first on its include path.
#include <hopper/ptx.cuh>

namespace attn_hopper {

template <int S>
struct Pipeline {
  static_assert(S >= 1, "a ring has at least one stage");
  uint32_t full0, empty0;  // shared-memory addresses of full[0] and empty[0]; stage s at +8 s

  __device__ __forceinline__ static int stage(int it) { return it % S; }
  __device__ __forceinline__ static uint32_t phase(int it) {
    return static_cast<uint32_t>((it / S) & 1);
  }
  // The barriers of stage s (0 <= s < S), e.g. to initialise them.
  __device__ __forceinline__ uint32_t full_of(int s) const { return full0 + 8 * s; }
  __device__ __forceinline__ uint32_t empty_of(int s) const { return empty0 + 8 * s; }
  // The barriers of iteration it.
  __device__ __forceinline__ uint32_t full(int it) const { return full_of(stage(it)); }
  __device__ __forceinline__ uint32_t empty(int it) const { return empty_of(stage(it)); }

  // Producer: wait until the consumers have released iteration it's stage.
  __device__ __forceinline__ void producer_wait(int it) const {
    mbar_wait(empty(it), phase(it) ^ 1);
  }
  // Producer: wait for the stage, then announce `bytes` of TMA loads on its full barrier; returns
  // that barrier, which the loads complete.
  __device__ __forceinline__ uint32_t producer_acquire(int it, uint32_t bytes) const {
    producer_wait(it);
    mbar_arrive_expect_tx(full(it), bytes);
    return full(it);
  }
  // Producer, without TMA: the stage is written (plain stores before this arrive: release).
  __device__ __forceinline__ void producer_commit(int it) const { mbar_arrive(full(it)); }
  // Consumers: wait until iteration it's stage is full (acquire).
  __device__ __forceinline__ void consumer_wait(int it) const { mbar_wait(full(it), phase(it)); }
  // Consumers: done with iteration it's stage (one arrival per consumer warpgroup).
  __device__ __forceinline__ void consumer_release(int it) const { mbar_arrive(empty(it)); }
};

}  // namespace attn_hopper
