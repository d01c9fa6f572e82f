// CPU emulation of mma/ptx.cuh: the same primitives, executed by one fiber per CUDA thread, so
// that the mma kernels' index math (fragment layouts, swizzle, cp.async ring, masks, tails) can
// be tested without a GPU. Build: compile a kernel .cu as C++ with this directory
// (impls/cuda/mma/emulation) ahead of impls/cuda on the include path; see tests/mma_emulation/.
//
// Semantics kept: warp collectives (ldmatrix, mma.m16n8k16, shuffles) exchange data between the
// 32 lanes exactly as the PTX ISA fragment tables say; cp.async copies land in shared memory only
// at cp.async.wait_group (so a read before the wait sees stale data); shared memory starts as NaN
// bytes (0xFF); shared accesses are bounds- and alignment-checked; a deadlocked barrier, a
// misaligned ldmatrix row or a thread exiting with copies in flight abort with a message.
// Not kept: timing, bank conflicts, memory ordering between blocks (blocks run one after the
// other), ex2.approx rounding (exact exp2 here; its flush-to-zero of results below 2^-126 is
// kept, so a kernel that relies on a P staying normal is tested as the hardware runs it).
#pragma once
#if !(defined(__x86_64__) && defined(__GNUC__))
#include <ucontext.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "attnbench/dtype.hpp"
#include "common/element_types.cuh"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(x)
using std::fminf;
using std::max;
using std::min;

struct uint3e {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
  uint32_t x, y, z, w;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline float2 make_float2(float a, float b) {
  return {a, b};
}
inline float4 make_float4(float a, float b, float c, float d) {
  return {a, b, c, d};
}

#define EMU_FAIL(...)                                             \
  do {                                                            \
    std::fprintf(stderr, "EMU FAIL %s:%d: ", __FILE__, __LINE__); \
    std::fprintf(stderr, __VA_ARGS__);                            \
    std::fprintf(stderr, "\n");                                   \
    std::abort();                                                 \
  } while (0)

namespace emu {
// The fibers' switch. On x86-64 (GCC, Clang) a few instructions in user space: the callee-saved
// registers pushed on the running fiber's stack, its stack pointer saved, the other's loaded,
// its registers popped (the System V ABI leaves everything else to the caller). glibc's
// swapcontext, used elsewhere, also saves and restores the signal mask, a system call each way:
// 70% of test_mma_emulation's time went there (perf, 2026-12-07). The emulated code keeps the
// default floating-point environment, so MXCSR and the x87 control word are not switched. A
// return into another stack is what a CET shadow stack forbids: the emulation tests are built
// with -fcf-protection=none (tests/CMakeLists.txt), so the kernel never enables one for them.
#if defined(__x86_64__) && defined(__GNUC__)
#define EMU_FAST_FIBERS 1
// switch_stack(&save, to): saves this fiber's stack pointer in *save and resumes the fiber whose
// stack pointer is `to` (saved by an earlier switch_stack, or made by fiber_stack).
extern "C" void emu_switch_stack(void** save, void* to);
asm(R"(
  .pushsection .text.emu_switch_stack,"axG",@progbits,emu_switch_stack,comdat
  .weak emu_switch_stack
  .type emu_switch_stack, @function
emu_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch_stack, .-emu_switch_stack
  .popsection
)");
#endif
struct Copy {
  uint32_t dst;
  int n;
  unsigned char data[16];
};
struct Thread {
#ifdef EMU_FAST_FIBERS
  void* sp = nullptr;  // the stack pointer emu_switch_stack saved when it last left the fiber
#else
  ucontext_t ctx;
#endif
  uint3e tid;
  int lin = 0;
  bool done = false;
  std::vector<Copy> open;
  std::vector<std::vector<Copy>> groups;
};
inline std::vector<unsigned char> smem;
inline std::vector<Thread> threads;
inline Thread* cur = nullptr;
#ifdef EMU_FAST_FIBERS
inline void* sched_sp = nullptr;
#else
inline ucontext_t sched_ctx;
#endif
constexpr size_t kStackBytes = 256 * 1024;
// One stack per thread index, allocated once (uninitialised: a stack needs no zeros) and reused by
// every block after.
inline std::vector<std::unique_ptr<char[]>> fiber_stacks;
inline uint3e block_idx;
inline dim3 grid_dim, block_dim;
inline int nthreads = 0;
inline uint64_t progress = 0;
inline uint64_t block_gen = 0;
inline int block_count = 0;
inline std::vector<uint64_t> warp_gen;
inline std::vector<int> warp_count;
inline std::vector<std::array<unsigned char, 64>> slots;
inline std::function<void()> body;
inline uint64_t warp_ops = 0;

inline void yield() {
#ifdef EMU_FAST_FIBERS
  emu_switch_stack(&cur->sp, sched_sp);
#else
  swapcontext(&cur->ctx, &sched_ctx);
#endif
}
inline void syncthreads() {
  const uint64_t g = block_gen;
  ++progress;
  if (++block_count == nthreads) {
    block_count = 0;
    ++block_gen;
  } else
    while (block_gen == g) yield();
}
inline int lane() {
  return cur->lin & 31;
}
inline void warp_barrier() {
  const int w = cur->lin >> 5;
  const uint64_t g = warp_gen[w];
  ++progress;
  if (++warp_count[w] == 32) {
    warp_count[w] = 0;
    ++warp_gen[w];
  } else
    while (warp_gen[w] == g) yield();
}
// Every lane deposits `in`; after the call returns, slot(l) holds lane l's data until the next
// exchange.
inline void exchange_in(const void* in, size_t n) {
  ++warp_ops;
  std::memcpy(slots[cur->lin].data(), in, n);
  warp_barrier();
}
inline void exchange_out() {
  warp_barrier();
}
inline const unsigned char* slot(int l) {
  return slots[(cur->lin & ~31) + l].data();
}

inline void check_smem(uint32_t addr, uint32_t n, uint32_t align) {
  if (addr % align) EMU_FAIL("misaligned shared access addr=%u align=%u", addr, align);
  if (static_cast<size_t>(addr) + n > smem.size())
    EMU_FAIL("shared access out of bounds addr=%u n=%u size=%zu", addr, n, smem.size());
}

inline void entry() {
  body();
  cur->done = true;
  ++progress;
  if (!cur->open.empty() || !cur->groups.empty()) {
    // Real hardware lets a thread exit with copies in flight; here it means a wait is missing.
    EMU_FAIL("thread %d exits with pending cp.async copies", cur->lin);
  }
}
#ifdef EMU_FAST_FIBERS
// A fiber's first frame: entered by emu_switch_stack's ret, it runs the thread and goes back to
// the scheduler for good (a finished thread is never resumed, so this never returns).
[[noreturn]] inline void fiber_main() {
  entry();
  emu_switch_stack(&cur->sp, sched_sp);
  std::abort();
}
// A fresh fiber's stack pointer on `stack`: what emu_switch_stack pops (six zeroed registers),
// then fiber_main as the address its ret jumps to, then a null return address for fiber_main,
// placed so that fiber_main starts with the stack aligned as after a call (rsp = 8 mod 16).
inline void* fiber_stack(char* stack, size_t bytes) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                   // fiber_main's return address (never used)
  *--sp = reinterpret_cast<void*>(&fiber_main);      // popped by ret
  for (int i = 0; i < 6; ++i) *--sp = nullptr;       // rbp, rbx, r12-r15
  return sp;
}
#endif

// 0: every round runs the threads in index order. Otherwise each round runs them in a fresh
// random order drawn from this seed: another legal interleaving, which shows races that the
// fixed order happens to hide (a stage reused too early, a missing wait).
inline uint64_t sched_seed = 0;

inline void run_block(int n) {
  nthreads = n;
  threads.assign(n, Thread{});
  slots.assign(n, {});
  warp_gen.assign(n / 32, 0);
  warp_count.assign(n / 32, 0);
  block_gen = 0;
  block_count = 0;
  while (fiber_stacks.size() < static_cast<size_t>(n))
    fiber_stacks.emplace_back(new char[kStackBytes]);
  for (int i = 0; i < n; ++i) {
    Thread& t = threads[i];
    t.lin = i;
    t.tid.x = i;
    char* const stack = fiber_stacks[i].get();
#ifdef EMU_FAST_FIBERS
    t.sp = fiber_stack(stack, kStackBytes);
#else
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stack;
    t.ctx.uc_stack.ss_size = kStackBytes;
    t.ctx.uc_link = &sched_ctx;
    makecontext(&t.ctx, entry, 0);
#endif
  }
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(sched_seed);
  for (;;) {
    bool any = false;
    const uint64_t before = progress;
    if (sched_seed != 0) std::shuffle(order.begin(), order.end(), rng);
    for (const int i : order) {
      Thread& t = threads[i];
      if (t.done) continue;
      any = true;
      cur = &t;
#ifdef EMU_FAST_FIBERS
      emu_switch_stack(&sched_sp, t.sp);
#else
      swapcontext(&sched_ctx, &t.ctx);
#endif
    }
    if (!any) break;
    if (progress == before) EMU_FAIL("deadlock: no thread made progress");
  }
  cur = nullptr;
}
}  // namespace emu

#define threadIdx (::emu::cur->tid)
#define blockIdx (::emu::block_idx)
#define gridDim (::emu::grid_dim)
#define blockDim (::emu::block_dim)
inline void __syncthreads() {
  emu::syncthreads();
}
inline void __syncwarp() {
  emu::warp_barrier();
}

namespace attn_mma {
// The element types every family shares: the emulator's stand-ins
// (mma/emulation/common/element_types.cuh).
using attnbench::cuda::bfloat_t;
using attnbench::cuda::half_t;

template <class T>
struct Elem;
template <>
struct Elem<half_t> {
  static uint32_t pack2(float lo, float hi) {
    return attnbench::float_to_f16(lo) | (uint32_t(attnbench::float_to_f16(hi)) << 16);
  }
  static float to_f(uint16_t h) { return attnbench::f16_to_float(h); }
  static float2 unpack2(uint32_t v) { return {to_f(v & 0xffff), to_f(v >> 16)}; }
};
template <>
struct Elem<bfloat_t> {
  static uint32_t pack2(float lo, float hi) {
    return attnbench::float_to_bf16(lo) | (uint32_t(attnbench::float_to_bf16(hi)) << 16);
  }
  static float to_f(uint16_t h) { return attnbench::bf16_to_float(h); }
  static float2 unpack2(uint32_t v) { return {to_f(v & 0xffff), to_f(v >> 16)}; }
};

inline unsigned char* dynamic_smem() {
  return emu::smem.data();
}
inline uint32_t smem_u32(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < emu::smem.data() || c > emu::smem.data() + emu::smem.size())
    EMU_FAIL("not a shared pointer");
  return static_cast<uint32_t>(c - emu::smem.data());
}
inline void st_shared_b32(uint32_t addr, uint32_t v) {
  emu::check_smem(addr, 4, 4);
  std::memcpy(&emu::smem[addr], &v, 4);
}
inline void st_shared_f32(uint32_t addr, float v) {
  emu::check_smem(addr, 4, 4);
  std::memcpy(&emu::smem[addr], &v, 4);
}
inline void st_shared_f32x2(uint32_t addr, float lo, float hi) {
  emu::check_smem(addr, 8, 8);
  const float v[2] = {lo, hi};
  std::memcpy(&emu::smem[addr], v, 8);
}
inline float ld_shared_f32(uint32_t addr) {
  emu::check_smem(addr, 4, 4);
  float v;
  std::memcpy(&v, &emu::smem[addr], 4);
  return v;
}
inline uint4 ld_shared_b128(uint32_t addr) {
  emu::check_smem(addr, 16, 16);
  uint4 v;
  std::memcpy(&v, &emu::smem[addr], 16);
  return v;
}
inline float2 ld_shared_f32x2(uint32_t addr) {
  emu::check_smem(addr, 8, 8);
  float2 v;
  std::memcpy(&v, &emu::smem[addr], 8);
  return v;
}

inline void cp_async_n(uint32_t dst, const void* src, bool valid, int n) {
  emu::check_smem(dst, n, n);
  if (reinterpret_cast<uintptr_t>(src) % n) EMU_FAIL("misaligned cp.async source");
  emu::Copy c{dst, n, {}};
  if (valid)
    std::memcpy(c.data, src, n);
  else
    std::memset(c.data, 0, n);
  emu::cur->open.push_back(c);
}
inline void cp_async_16(uint32_t dst, const void* src, bool valid) {
  cp_async_n(dst, src, valid, 16);
}
inline void cp_async_4(uint32_t dst, const void* src, bool valid) {
  cp_async_n(dst, src, valid, 4);
}
// Programmatic dependent launch: the emulator runs grids one after the other, so a dependent
// grid always finds the grid ahead of it finished.
inline void grid_dependency_wait() {}
inline void grid_launch_dependents() {}
inline void cp_async_commit() {
  emu::cur->groups.push_back(std::move(emu::cur->open));
  emu::cur->open.clear();
}
template <int kPending>
inline void cp_async_wait() {
  auto& g = emu::cur->groups;
  while (static_cast<int>(g.size()) > kPending) {
    for (auto& c : g.front()) std::memcpy(&emu::smem[c.dst], c.data, c.n);
    g.erase(g.begin());
  }
}

inline uint16_t smem_h(uint32_t addr) {
  emu::check_smem(addr, 2, 2);
  uint16_t v;
  std::memcpy(&v, &emu::smem[addr], 2);
  return v;
}

// ldmatrix / stmatrix (non-transposed), after every lane's row address went through
// exchange_in: where this lane's pair of 8x8 block i is, in the row lane 8 i + l / 4 named.
inline uint32_t matrix_pair_addr(int i, const char* op) {
  const int l = emu::lane();
  uint32_t row;
  std::memcpy(&row, emu::slot(8 * i + (l >> 2)), 4);
  if (row % 16) EMU_FAIL("%s row address not 16-byte aligned", op);
  emu::check_smem(row, 16, 16);
  return row + 4 * (l & 3);
}

inline void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  emu::exchange_in(&addr, 4);
  for (int i = 0; i < 4; ++i) std::memcpy(&r[i], &emu::smem[matrix_pair_addr(i, "ldmatrix")], 4);
  emu::exchange_out();
}
inline void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  emu::exchange_in(&addr, 4);
  const int l = emu::lane(), g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; ++i) {
    uint32_t r0, r1;
    std::memcpy(&r0, emu::slot(8 * i + 2 * t), 4);
    std::memcpy(&r1, emu::slot(8 * i + 2 * t + 1), 4);
    if (r0 % 16 || r1 % 16) EMU_FAIL("ldmatrix row address not 16-byte aligned");
    r[i] = smem_h(r0 + 2 * g) | (uint32_t(smem_h(r1 + 2 * g)) << 16);
  }
  emu::exchange_out();
}

template <class T>
inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  uint32_t in[6] = {a[0], a[1], a[2], a[3], b0, b1};
  emu::exchange_in(in, sizeof in);
  auto reg = [](int lane, int idx) {
    uint32_t v;
    std::memcpy(&v, emu::slot(lane) + 4 * idx, 4);
    return v;
  };
  auto half = [](uint32_t v, int hi) {
    return Elem<T>::to_f(static_cast<uint16_t>(hi ? v >> 16 : v & 0xffff));
  };
  auto A = [&](int r, int k) {
    return half(reg((r % 8) * 4 + (k % 8) / 2, (r / 8) + 2 * (k / 8)), k & 1);
  };
  auto B = [&](int k, int n) { return half(reg(n * 4 + (k % 8) / 2, 4 + k / 8), k & 1); };
  const int l = emu::lane(), g = l >> 2, t = l & 3;
  for (int e = 0; e < 4; ++e) {
    const int r = g + (e >= 2 ? 8 : 0), c = 2 * t + (e & 1);
    float s = 0.f;
    for (int k = 0; k < 16; ++k) s += A(r, k) * B(k, c);
    d[e] += s;
  }
  emu::exchange_out();
}

inline int tid_x_unhoisted() {
  return static_cast<int>(emu::cur->tid.x);
}
inline float exp2_approx(float x) {
  const float y = std::exp2(x);
  return y < std::numeric_limits<float>::min() ? 0.f : y;  // .ftz: a subnormal result is +0
}
inline float log2_approx(float x) {
  return std::log2(x);
}
inline float tanh_fast(float x) {
  return 1.f - 2.f / (std::exp2(x * 2.885390081777927f) + 1.f);
}
inline float tanh_approx(float x) {
  return std::tanh(x);
}
inline float mul_rn(float a, float b) {
  volatile float r = a * b;  // a store: not contracted with the caller's subtraction
  return r;
}
inline float shfl_xor(float x, int m) {
  emu::exchange_in(&x, 4);
  float y;
  std::memcpy(&y, emu::slot(emu::lane() ^ m), 4);
  emu::exchange_out();
  return y;
}
template <class V>
inline V shfl_idx(V x, int src) {
  static_assert(sizeof(V) == 4, "a 4-byte lane value");
  emu::exchange_in(&x, 4);
  V y;
  std::memcpy(&y, emu::slot(src & 31), 4);
  emu::exchange_out();
  return y;
}
template <int kLanes>
inline float group_max(float x) {
  for (int off = kLanes / 2; off > 0; off /= 2) x = std::fmax(x, shfl_xor(x, off));
  return x;
}
inline bool warp_any(bool p) {
  const int v = p ? 1 : 0;
  emu::exchange_in(&v, 4);
  bool any = false;
  for (int l = 0; l < 32; ++l) {
    int w;
    std::memcpy(&w, emu::slot(l), 4);
    any = any || w != 0;
  }
  emu::exchange_out();
  return any;
}
inline float quad_max(float x) {
  x = std::fmax(x, shfl_xor(x, 1));
  return std::fmax(x, shfl_xor(x, 2));
}
inline float quad_sum(float x) {
  x += shfl_xor(x, 1);
  return x + shfl_xor(x, 2);
}
template <int kLanes>
inline float group_sum(float x) {
  for (int off = kLanes / 2; off > 0; off /= 2) x += shfl_xor(x, off);
  return x;
}
inline void atomic_add_f32x2(float* p, float a, float b) {
  if (reinterpret_cast<uintptr_t>(p) % 8) EMU_FAIL("misaligned float2 atomic");
  p[0] += a;
  p[1] += b;
}
// Blocks run one after another here: the fence orders nothing, the atomics are plain accesses.
inline void thread_fence() {}
inline int atomic_add_i32(int* p, int v) {
  const int old = *p;
  *p += v;
  return old;
}
inline void atomic_store_i32(int* p, int v) {
  *p = v;
}
inline float ld_cg_f32(const float* p) {
  return *p;
}
inline float2 ld_cg_f32x2(const float* p) {
  if (reinterpret_cast<uintptr_t>(p) % 8) EMU_FAIL("misaligned float2 load");
  return {p[0], p[1]};
}
}  // namespace attn_mma
