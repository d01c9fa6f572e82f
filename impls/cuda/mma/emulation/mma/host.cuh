// CPU emulation of mma/host.cuh (see emulation/mma/ptx.cuh): launches run every block of the grid
// in turn on the emulator; the dynamic shared-memory attribute is enforced as on the device.
#pragma once
#include <map>
#include <stdexcept>
#include <string>

#include "attnbench/dtype.hpp"
#include "mma/dispatch.cuh"
#include "mma/ptx.cuh"
namespace attn_mma {
inline std::map<const void*, int>& smem_attr() {
  static std::map<const void*, int> m;
  return m;
}
template <class... KArgs>
void set_dynamic_smem(void (*kernel)(KArgs...), int bytes) {
  if (bytes > 232448) throw std::runtime_error("smem attribute too large");
  smem_attr()[reinterpret_cast<const void*>(kernel)] = bytes;
}
template <class... KArgs>
void prefer_max_shared(void (*)(KArgs...)) {}
inline int max_smem_per_block(std::string&) {
  return 232448;
}
// The H200's 132: the split-KV heuristic sees the device the kernels are tuned for.
inline int multiprocessors() {
  return 132;
}
// The H200's peak DRAM bandwidth, as its SM count above, for the split-KV plan (mma/host.cuh);
// test_decode_emulation checks the plan for an H100 by calling plan_splits with its 3352 GB/s.
inline double memory_peak_gbps() {
  return 4916.0;
}

template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, void*,
            const Args&... args) {
  const int limit = smem_attr().count(reinterpret_cast<const void*>(kernel))
                        ? smem_attr()[reinterpret_cast<const void*>(kernel)]
                        : 48 * 1024;
  if (static_cast<int>(smem) > limit)
    throw std::runtime_error("launch: dynamic smem " + std::to_string(smem) +
                             " above the attribute " + std::to_string(limit));
  if (block.x % 32 || block.y != 1 || block.z != 1) throw std::runtime_error("launch: block shape");
  emu::grid_dim = grid;
  emu::block_dim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        emu::block_idx = {x, y, z};
        emu::smem.assign(smem, 0xFF);  // NaN poison
        emu::body = [&] { kernel(args...); };
        emu::run_block(static_cast<int>(block.x));
      }
}
// launch_dependent (host.cuh): grids run in order here, which is what the dependent grid's
// grid_dependency_wait() guarantees on the device.
template <class... KArgs, class... Args>
void launch_dependent(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
                      void* stream, const Args&... args) {
  launch(kernel, grid, block, smem, stream, args...);
}
}  // namespace attn_mma
