// CPU emulation of hopper/ptx.cuh and hopper/wgmma_ops.cuh, on top of the mma emulator
// (impls/cuda/mma/emulation/mma/ptx.cuh: one fiber per CUDA thread, NaN-poisoned shared
// memory). Build: compile a Hopper kernel .cu as C++ with impls/cuda/hopper/emulation and
// impls/cuda/mma/emulation ahead of impls/cuda on the include path (tests/hopper_emulation).
//
// Semantics kept, written from the PTX ISA rather than from the kernels:
// - mbarriers: arrival counts, transaction bytes, phases and parity waits (a wait on a phase that
//   never completes is a deadlock, reported by the scheduler);
// - TMA tensor loads: the box is read from global memory at issue, with zeros outside the tensor,
//   and lands in shared memory (128B-swizzled) only when some thread next waits on an mbarrier or
//   completes a wgmma, completing its barrier's transaction bytes then; stores clip to the tensor;
// - wgmma: operands are decoded from the matrix descriptors (start, LBO, SBO, 128B swizzle,
//   K- or MN-major) and register fragments of the PTX ISA's tables; an operation runs only at
//   the wgmma_wait that retires its group, reading shared memory and the A registers then and
//   writing the accumulators then (so reading them early, or reusing a stage too soon, shows);
//   all 128 threads of a warpgroup must issue the same operations with the same descriptors;
// - bulk reduce-adds (cp.reduce.async.bulk .add.f32) and TMA tensor stores: deferred with their
//   bulk group, and applied (shared memory read, global memory written) only at the latest point
//   the PTX allows: the cp.async.bulk.wait_group(.read) that retires the group (so a region
//   rewritten before that wait shows); a block may not end with one pending;
// - named barriers with thread counts.
// Not kept: timing, register limits (setmaxnreg is a no-op), the async proxy's ordering beyond
// the above, bank conflicts.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <type_traits>
#include <vector>

#include "attnbench/dtype.hpp"
#include "mma/ptx.cuh"

#define __grid_constant__
#define ATTN_HOPPER_DEVICE 1

namespace attn_hopper {

// The emulated tensor map: what cuTensorMapEncodeTiled would have been given.
struct TensorMap {
  unsigned char* base = nullptr;
  int rank = 0;
  uint64_t dims[5] = {};
  uint64_t strides[5] = {};  // bytes; strides[0] is the element size
  uint32_t box[5] = {};
  int swizzle_bytes = 0;  // 128 or 0
};

namespace emu_h {

struct Mbar {
  uint32_t count = 0, pending = 0;
  int64_t tx = 0;
  uint64_t phases = 0;  // completed phases
};
struct Landing {
  uint32_t bar, dst;
  std::vector<unsigned char> bytes;  // already swizzled, dst-relative
};
struct Op {
  bool rs = false;
  int n = 0;
  bool bf16 = true;
  uint64_t da = 0, db = 0;
  int trans_a = 0, trans_b = 0, scale_d = 0;
  const uint32_t* a = nullptr;  // rs: this thread's 4 A registers, read when the op runs
  float* d = nullptr;           // this thread's n/2 accumulators
};
struct ThreadOps {
  std::vector<Op> open;
  std::deque<std::vector<Op>> groups;
};
struct Named {
  int count = 0;
  uint64_t gen = 0;
};
// A bulk operation (reduce-add, TMA store) waiting for the wait_group that retires its group:
// it reads shared memory and writes global memory when applied.
using BulkOp = std::function<void()>;
struct ThreadBulk {
  std::vector<BulkOp> open;
  std::deque<std::vector<BulkOp>> groups;
};

inline std::map<uint32_t, Mbar> bars;
// TMA loads land at the next wait (lazy: a read before the wait sees stale data) or, when
// emu::sched_seed is odd, at once (eager: a stage reused too early is overwritten under its
// reader).
inline bool eager_landing() {
  return (emu::sched_seed & 1) != 0;
}
inline std::vector<Landing> landings;
inline std::vector<ThreadOps> ops;
inline std::vector<ThreadBulk> bulk;
inline std::map<int, Named> named;
inline std::vector<int> wg_count;
inline std::vector<uint64_t> wg_gen;

// Called before every block (hopper/emulation/hopper/host.cuh).
inline void reset_block(int threads) {
  bars.clear();
  landings.clear();
  ops.assign(threads, {});
  bulk.assign(threads, {});
  named.clear();
  wg_count.assign((threads + 127) / 128, 0);
  wg_gen.assign((threads + 127) / 128, 0);
}
// After every block: nothing may be left in flight.
inline void check_block_end() {
  if (!landings.empty())
    EMU_FAIL("block ends with %zu TMA loads never waited for", landings.size());
  for (size_t t = 0; t < ops.size(); ++t)
    if (!ops[t].open.empty() || !ops[t].groups.empty())
      EMU_FAIL("thread %zu ends with wgmma operations never waited for", t);
  for (size_t t = 0; t < bulk.size(); ++t)
    if (!bulk[t].open.empty() || !bulk[t].groups.empty())
      EMU_FAIL("thread %zu ends with bulk operations (reduce-adds, TMA stores) not waited for", t);
}
// Applies the calling thread's committed bulk groups but the newest `pending` (uncommitted ones
// stay: wait_group covers committed groups only).
inline void retire_bulk(int pending) {
  auto& t = bulk[emu::cur->lin];
  while (static_cast<int>(t.groups.size()) > pending) {
    for (const BulkOp& op : t.groups.front()) op();
    t.groups.pop_front();
  }
}

inline Mbar& bar_at(uint32_t addr) {
  emu::check_smem(addr, 8, 8);
  auto it = bars.find(addr);
  if (it == bars.end()) EMU_FAIL("mbarrier at %u used before mbarrier.init", addr);
  return it->second;
}
inline void try_complete(Mbar& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phases;
    b.pending = b.count;
    ++emu::progress;
  }
}
inline void arrive(uint32_t addr) {
  Mbar& b = bar_at(addr);
  if (b.pending == 0) EMU_FAIL("mbarrier at %u: more arrivals than its count", addr);
  --b.pending;
  try_complete(b);
}
inline uint32_t swizzle128(uint32_t byte) {
  return byte ^ (((byte >> 7) & 7u) << 4);
}

inline void land_all() {
  std::vector<Landing> now;
  now.swap(landings);
  for (auto& l : now) {
    emu::check_smem(l.dst, static_cast<uint32_t>(l.bytes.size()), 16);
    std::memcpy(&emu::smem[l.dst], l.bytes.data(), l.bytes.size());
    Mbar& b = bar_at(l.bar);
    b.tx -= static_cast<int64_t>(l.bytes.size());
    if (b.tx < 0) EMU_FAIL("mbarrier at %u: more bytes landed than expected", l.bar);
    try_complete(b);
  }
}

// Bytes of a box element at box-linear byte offset `off` inside smem relative to the box start.
inline uint32_t box_smem_offset(const TensorMap& m, uint32_t off) {
  if (m.swizzle_bytes == 128) return swizzle128(off);
  return off;
}

inline void box_walk(const TensorMap& m, const int (&c)[4],
                     const std::function<void(uint32_t, int64_t, bool)>& f) {
  const uint32_t esz = static_cast<uint32_t>(m.strides[0]);
  uint32_t off = 0;
  for (uint32_t i3 = 0; i3 < m.box[3]; ++i3)
    for (uint32_t i2 = 0; i2 < m.box[2]; ++i2)
      for (uint32_t i1 = 0; i1 < m.box[1]; ++i1)
        for (uint32_t i0 = 0; i0 < m.box[0]; ++i0, off += esz) {
          const int64_t x[4] = {c[0] + int64_t(i0), c[1] + int64_t(i1), c[2] + int64_t(i2),
                                c[3] + int64_t(i3)};
          bool in = true;
          int64_t g = 0;
          for (int d = 0; d < 4; ++d) {
            if (x[d] < 0 || x[d] >= static_cast<int64_t>(m.dims[d])) in = false;
            g += x[d] * static_cast<int64_t>(d == 0 ? esz : m.strides[d]);
          }
          f(box_smem_offset(m, off), g, in);
        }
}

inline float elem_to_float(uint16_t v, bool bf16) {
  return bf16 ? attnbench::bf16_to_float(v) : attnbench::f16_to_float(v);
}
inline uint16_t smem16(uint32_t addr) {
  emu::check_smem(addr, 2, 2);
  uint16_t v;
  std::memcpy(&v, &emu::smem[addr], 2);
  return v;
}

struct Desc {
  uint32_t start, lbo, sbo;
};
inline Desc decode(uint64_t d) {
  if ((d >> 62) != 1) EMU_FAIL("wgmma descriptor: only the 128B swizzle is emulated");
  if (((d >> 49) & 7) != 0) EMU_FAIL("wgmma descriptor: base offset must be 0 here");
  return {static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4};
}
// Element (mn, k) of a 16-bit operand, k in [0, 16), by the PTX ISA's canonical 128B layouts:
//   K-major:  ((8, m), (8, 2)) : ((64, SBO), (1, 8)) elements
//   MN-major: ((8, 8, m), (8, k)) : ((1, 8, LBO), (64, SBO)) elements
inline uint32_t operand_addr(const Desc& ds, bool mn_major, int mn, int k) {
  uint32_t byte;
  if (!mn_major) {
    byte = ds.start + (mn / 8) * ds.sbo + (mn % 8) * 128 + k * 2;
  } else {
    byte = ds.start + (mn % 64) * 2 + (mn / 64) * ds.lbo + (k % 8) * 128 + (k / 8) * ds.sbo;
  }
  return swizzle128(byte);
}

// Runs one operation for the 128 threads of warpgroup `wg` (ops[t] of each thread t).
inline void run_op(int wg, const std::vector<const Op*>& o) {
  const Op& op0 = *o[0];
  for (const Op* x : o)
    if (x->rs != op0.rs || x->n != op0.n || x->da != op0.da || x->db != op0.db ||
        x->trans_a != op0.trans_a || x->trans_b != op0.trans_b || x->scale_d != op0.scale_d ||
        x->bf16 != op0.bf16)
      EMU_FAIL("wgmma: the threads of warpgroup %d issued different operations", wg);
  const int N = op0.n;
  std::vector<float> A(64 * 16), B(16 * N);
  if (op0.rs) {
    for (int t = 0; t < 128; ++t) {
      const int w = t / 32, l = t % 32;
      for (int r = 0; r < 4; ++r) {
        const uint32_t v = o[t]->a[r];
        const int row = 16 * w + l / 4 + (r & 1) * 8, k = 2 * (l % 4) + (r >> 1) * 8;
        A[row * 16 + k] = elem_to_float(static_cast<uint16_t>(v & 0xffff), op0.bf16);
        A[row * 16 + k + 1] = elem_to_float(static_cast<uint16_t>(v >> 16), op0.bf16);
      }
    }
  } else {
    const Desc da = decode(op0.da);
    for (int m = 0; m < 64; ++m)
      for (int k = 0; k < 16; ++k)
        A[m * 16 + k] = elem_to_float(smem16(operand_addr(da, op0.trans_a != 0, m, k)), op0.bf16);
  }
  const Desc db = decode(op0.db);
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < N; ++n)
      B[k * N + n] = elem_to_float(smem16(operand_addr(db, op0.trans_b != 0, n, k)), op0.bf16);
  for (int t = 0; t < 128; ++t) {
    const int w = t / 32, l = t % 32;
    for (int i = 0; i < N / 2; ++i) {
      const int e = i % 4, row = 16 * w + l / 4 + (e >> 1) * 8,
                col = 8 * (i / 4) + 2 * (l % 4) + (e & 1);
      float acc = 0.f;
      for (int k = 0; k < 16; ++k) acc += A[row * 16 + k] * B[k * N + col];
      o[t]->d[i] = (op0.scale_d ? o[t]->d[i] : 0.f) + acc;
    }
  }
}

// wgmma.wait_group kPending, collectively for the calling thread's warpgroup.
inline void wait_groups(int pending) {
  const int t = emu::cur->lin, wg = t / 128;
  if (static_cast<int>(emu::threads.size()) < 128 * (wg + 1))
    EMU_FAIL("wgmma needs whole warpgroups");
  const uint64_t g = wg_gen[wg];
  ++emu::progress;
  if (++wg_count[wg] == 128) {
    land_all();
    for (;;) {
      const size_t left = ops[128 * wg].groups.size();
      for (int i = 1; i < 128; ++i)
        if (ops[128 * wg + i].groups.size() != left)
          EMU_FAIL("wgmma: threads of warpgroup %d committed different numbers of groups", wg);
      if (static_cast<int>(left) <= pending) break;
      const size_t nops = ops[128 * wg].groups.front().size();
      for (int i = 1; i < 128; ++i)
        if (ops[128 * wg + i].groups.front().size() != nops)
          EMU_FAIL("wgmma: threads of warpgroup %d issued different groups", wg);
      for (size_t k = 0; k < nops; ++k) {
        std::vector<const Op*> one(128);
        for (int i = 0; i < 128; ++i) one[i] = &ops[128 * wg + i].groups.front()[k];
        run_op(wg, one);
      }
      for (int i = 0; i < 128; ++i) ops[128 * wg + i].groups.pop_front();
    }
    wg_count[wg] = 0;
    ++wg_gen[wg];
  } else {
    while (wg_gen[wg] == g) emu::yield();
  }
}

}  // namespace emu_h

// ---- the hopper/ptx.cuh interface ---------------------------------------------------------------

inline uint64_t desc_field(uint32_t bytes) {
  return (bytes & 0x3FFFF) >> 4;
}
inline uint64_t make_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  if (addr % 16) EMU_FAIL("wgmma operand not 16-byte aligned");
  return desc_field(addr) | (desc_field(lbo_bytes) << 16) | (desc_field(sbo_bytes) << 32) |
         (uint64_t{1} << 62);
}
inline uint64_t desc_k_major(uint32_t addr) {
  return make_desc(addr, 16, 1024);
}
inline uint64_t desc_mn_major(uint32_t addr, uint32_t panel_bytes) {
  return make_desc(addr, panel_bytes, 1024);
}
inline uint64_t desc_add(uint64_t d, uint32_t bytes) {
  if (bytes % 16) EMU_FAIL("wgmma operand offset not a multiple of 16 bytes");
  const uint32_t lo = static_cast<uint32_t>(d) + (bytes >> 4);
  if ((lo & 0x3FFF) < (static_cast<uint32_t>(d) & 0x3FFF)) {
    EMU_FAIL("wgmma descriptor: the start address field overflows");
  }
  return (d & 0xFFFFFFFF00000000ull) | lo;
}
inline int warp_uniform(int v) {
  return attn_mma::shfl_idx(v, 0);
}

inline void mbar_init(uint32_t bar, uint32_t count) {
  emu::check_smem(bar, 8, 8);
  emu_h::bars[bar] = emu_h::Mbar{count, count, 0, 0};
}
inline void fence_barrier_init() {}
inline void mbar_arrive(uint32_t bar) {
  emu_h::arrive(bar);
}
inline void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  emu_h::bar_at(bar).tx += bytes;
  emu_h::arrive(bar);
}
inline void mbar_wait(uint32_t bar, uint32_t parity) {
  for (;;) {
    emu_h::land_all();
    if ((emu_h::bar_at(bar).phases & 1) != (parity & 1)) return;
    emu::yield();
  }
}

inline void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1, int c2,
                        int c3) {
  const TensorMap& m = *static_cast<const TensorMap*>(tmap);
  if (m.swizzle_bytes == 128 && dst % 1024)
    EMU_FAIL("128B-swizzled TMA destination not 1 KiB aligned");
  if (m.box[0] * m.strides[0] > 128) EMU_FAIL("TMA box inner dimension above the 128B swizzle");
  uint32_t bytes = static_cast<uint32_t>(m.strides[0]);
  for (int d = 0; d < 4; ++d) bytes *= m.box[d];
  emu_h::bar_at(bar);  // must exist
  emu_h::Landing l{bar, dst, std::vector<unsigned char>(bytes, 0)};
  const int c[4] = {c0, c1, c2, c3};
  const uint32_t esz = static_cast<uint32_t>(m.strides[0]);
  emu_h::box_walk(m, c, [&](uint32_t so, int64_t g, bool in) {
    if (in) std::memcpy(&l.bytes[so], m.base + g, esz);
  });
  emu_h::landings.push_back(std::move(l));
  if (emu_h::eager_landing()) emu_h::land_all();
}
inline void tma_store_4d(const void* tmap, uint32_t src, int c0, int c1, int c2, int c3) {
  const TensorMap m = *static_cast<const TensorMap*>(tmap);  // a copy: applied later
  if (m.swizzle_bytes == 128 && src % 1024) EMU_FAIL("128B-swizzled TMA source not 1 KiB aligned");
  emu_h::bulk[emu::cur->lin].open.push_back([m, src, c0, c1, c2, c3] {
    const int c[4] = {c0, c1, c2, c3};
    const uint32_t esz = static_cast<uint32_t>(m.strides[0]);
    emu_h::box_walk(m, c, [&](uint32_t so, int64_t g, bool in) {
      emu::check_smem(src + so, esz, esz);
      if (in) std::memcpy(m.base + g, &emu::smem[src + so], esz);
    });
  });
}
inline void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  if (bytes % 16 || src % 16 || reinterpret_cast<uintptr_t>(dst) % 16)
    EMU_FAIL("bulk reduce: 16-byte alignment and size");
  emu::check_smem(src, bytes, 16);
  emu_h::bulk[emu::cur->lin].open.push_back([dst, src, bytes] {
    emu::check_smem(src, bytes, 16);
    for (uint32_t i = 0; i < bytes / 4; ++i) {
      float v;
      std::memcpy(&v, &emu::smem[src + 4 * i], 4);
      dst[i] += v;
    }
  });
}
inline void tma_store_commit() {
  auto& t = emu_h::bulk[emu::cur->lin];
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}
template <int kPending = 0>
inline void tma_store_wait_read() {
  emu_h::retire_bulk(kPending);
}
inline void fence_proxy_async() {}
inline void prefetch_tmap(const void*) {}

inline void wgmma_fence() {}
inline void wgmma_commit() {
  auto& t = emu_h::ops[emu::cur->lin];
  t.groups.push_back(std::move(t.open));
  t.open.clear();
}
template <int kPending>
inline void wgmma_wait() {
  emu_h::wait_groups(kPending);
}
// stmatrix .x4 (hopper/ptx.cuh): each lane writes its own four pairs to the rows that lanes
// 8 i + l / 4 name.
inline void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  emu::exchange_in(&addr, 4);
  for (int i = 0; i < 4; ++i)
    std::memcpy(&emu::smem[attn_mma::matrix_pair_addr(i, "stmatrix")], &r[i], 4);
  emu::exchange_out();
}
// stmatrix .x4 .trans (hopper/ptx.cuh): block i's element (g, c) (lane 4 g + c / 2, half c % 2 of
// r[i]) goes to element g of the 16-byte row that lane 8 i + c names.
inline void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  emu::exchange_in(&addr, 4);
  const int l = emu::lane(), g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; ++i)
    for (int h = 0; h < 2; ++h) {
      uint32_t row;
      std::memcpy(&row, emu::slot(8 * i + 2 * t + h), 4);
      if (row % 16) EMU_FAIL("stmatrix row address not 16-byte aligned");
      emu::check_smem(row, 16, 16);
      const uint16_t v = static_cast<uint16_t>(h ? r[i] >> 16 : r[i] & 0xffff);
      std::memcpy(&emu::smem[row + 2 * g], &v, 2);
    }
  emu::exchange_out();
}
template <int kRegs>
inline void setmaxnreg_inc() {}
template <int kRegs>
inline void setmaxnreg_dec() {}
template <int N>
inline void fence_regs(float (&)[N]) {}
template <int N>
inline void fence_regs(uint32_t (&)[N][4]) {}

// Blocks run one after the other here, so the first block takes every tile of a persistent grid.
inline int atomic_add_i32(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}

// Blocks run in launch order here, one at a time: a turn that has passed (or that only a later
// block could pass) would deadlock; one that another thread of this block passes (a writer warp
// after another's chunk) is waited for, the scheduler's no-progress check catching the rest.
inline void wait_turn(const int* turn, int mine) {
  while (*turn != mine) {
    if (*turn > mine)
      EMU_FAIL("turn counter at %d, block %d waits for it: would deadlock", *turn, mine);
    emu::yield();
  }
}
inline void pass_turn_on(int* turn) {
  ++*turn;
  ++emu::progress;
}
inline void bulk_wait_complete() {
  emu_h::retire_bulk(0);
}

inline void named_bar_sync(int id, int threads) {
  auto& b = emu_h::named[id];
  const uint64_t g = b.gen;
  ++emu::progress;
  if (++b.count == threads) {
    b.count = 0;
    ++b.gen;
  } else {
    while (b.gen == g) emu::yield();
  }
}
inline void named_bar_arrive(int id, int threads) {
  auto& b = emu_h::named[id];
  ++emu::progress;
  if (++b.count == threads) {
    b.count = 0;
    ++b.gen;
  }
}

// ---- hopper/wgmma_ops.cuh -----------------------------------------------------------------------

using attn_mma::bfloat_t;
using attn_mma::half_t;

template <class T, int N>
struct Wgmma {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma n");
  static constexpr bool kBf16 = std::is_same_v<T, bfloat_t>;
  template <int kTransA, int kTransB>
  static void ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    emu_h::Op op;
    op.n = N;
    op.bf16 = kBf16;
    op.da = desc_a;
    op.db = desc_b;
    op.trans_a = kTransA;
    op.trans_b = kTransB;
    op.scale_d = scale_d != 0;
    op.d = d;
    emu_h::ops[emu::cur->lin].open.push_back(op);
  }
  template <int kTransB>
  static void rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
    emu_h::Op op;
    op.rs = true;
    op.n = N;
    op.bf16 = kBf16;
    op.db = desc_b;
    op.trans_b = kTransB;
    op.scale_d = scale_d != 0;
    op.a = a;
    op.d = d;
    emu_h::ops[emu::cur->lin].open.push_back(op);
  }
};

}  // namespace attn_hopper
