// CPU emulation of hopper/host.cuh: tensor maps record what the driver would be given, every
// device counts as sm_90a, and launches run the grid block by block on the emulator, with the
// Hopper state (mbarriers, TMA loads and wgmma operations in flight) fresh for every block and
// checked empty at its end.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "attnbench/problem.hpp"
#include "hopper/ptx.cuh"
#include "mma/host.cuh"

namespace attn_hopper {

inline TensorMap make_bshd_map(const void* base, bool, int batch, int seq, int heads, int head_dim,
                               int box_rows) {
  if ((head_dim * 2) % 16 != 0)
    throw std::runtime_error("TMA: row stride not a multiple of 16 bytes");
  // As cuTensorMapEncodeTiled: the global address 16-byte aligned.
  if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0)
    throw std::runtime_error("TMA: global address not 16-byte aligned");
  if (box_rows < 1 || box_rows > 256) throw std::runtime_error("TMA: box rows out of range");
  TensorMap m;
  m.base = static_cast<unsigned char*>(const_cast<void*>(base));
  m.rank = 4;
  const uint64_t row = static_cast<uint64_t>(head_dim) * 2;
  m.dims[0] = head_dim;
  m.dims[1] = heads;
  m.dims[2] = seq;
  m.dims[3] = batch;
  m.strides[0] = 2;
  m.strides[1] = row;
  m.strides[2] = row * heads;
  m.strides[3] = row * heads * seq;
  m.box[0] = 64;
  m.box[1] = 1;
  m.box[2] = static_cast<uint32_t>(box_rows);
  m.box[3] = 1;
  m.swizzle_bytes = 128;
  return m;
}

// A small "device": a persistent grid of 3 blocks (the first takes every tile, see atomic_add_i32).
// A test can set another count (emulated_multiprocessors() = 10): the backward's launch order
// groups its blocks by it.
inline int& emulated_multiprocessors() {
  static int sms = 3;
  return sms;
}
inline int multiprocessors() {
  return emulated_multiprocessors();
}

inline void launch_memset_zero(void* dst, std::size_t bytes, void*) {
  std::memset(dst, 0, bytes);
}

template <class... KArgs>
std::string sm90a_missing(void (*)(KArgs...)) {
  return {};
}

template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, void*,
            const Args&... args) {
  const auto& attrs = attn_mma::smem_attr();
  const auto it = attrs.find(reinterpret_cast<const void*>(kernel));
  const int limit = it != attrs.end() ? it->second : 48 * 1024;
  if (static_cast<int>(smem) > limit)
    throw std::runtime_error("launch: dynamic smem " + std::to_string(smem) +
                             " above the attribute " + std::to_string(limit));
  if (block.x % 128 || block.y != 1 || block.z != 1)
    throw std::runtime_error("launch: block shape");
  emu::grid_dim = grid;
  emu::block_dim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        emu::block_idx = {x, y, z};
        emu::smem.assign(smem, 0xFF);  // NaN poison
        emu_h::reset_block(static_cast<int>(block.x));
        emu::body = [&] { kernel(args...); };
        emu::run_block(static_cast<int>(block.x));
        emu_h::check_block_end();
      }
}

}  // namespace attn_hopper
