// cuda.flash_decode's logic on a machine without a GPU: the kernel and its split combine compiled
// as C++ against the CPU emulator of their PTX (impls/cuda/mma/emulation/, decode_wrap.cpp), run
// on issue 29's odd cases: context 1, contexts that are not a multiple of the page size, shuffled
// pages, a table with repeated pages shared between sequences, a ragged batch with a context of 0,
// speculative decoding (seq_q 4, causal) and seq_q > context, GQA 16:1 (four row tiles), MQA,
// padded head_dims, outlier inputs and large logits, sliding windows and soft caps; each with one
// split, the automatic plan and forced splits (the combine kernel, and the combine fused into the
// split kernel by arrival counters). Last, the automatic plan's split counts on 132 SMs, pinned
// (check_split_plan: no kernel runs).
//
// Checked as every implementation is: seeded inputs, the float64 reference (through the block
// table), and the project's rule against cpu.naive_3pass on the same paged layout.
// Exit code: the number of failed cases. Arguments N or N-M run those cases only.
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/make_problem.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"
#include "emulated_call.hpp"
// The emulator itself (emu::sched_seed): first on this test's include path.
#include "mma/ptx.cuh"

namespace {

using namespace attnbench;
using attnbench::test::check_on_host;

constexpr std::uint64_t kSeed = 29;

struct Case {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  DType t;
  int page_size = 0;  // 0: contiguous K/V
  PageOrder order = PageOrder::sequential;
  int num_pages = 0;
  std::vector<int> lq = {}, lkv = {};        // ragged (varlen) lengths; empty: dense
  std::vector<std::vector<int>> table = {};  // explicit block table rows
  Distribution dist = Distribution::normal;
  double scale = 0;
  int wl = -1, wr = -1;  // window_left, window_right (-1: unbounded)
  double softcap = 0;
};

}  // namespace

// decode_wrap.cpp: the automatic split count (plan_splits with splits 0) on `sms` SMs with a peak
// DRAM bandwidth of `gbps`.
int decode_auto_splits(const attnbench::Problem& p, int sms, double gbps);

namespace {

// The automatic plan's split counts on 132 SMs (an H200: 4916 GB/s; an H100: 3352), pinned: under
// half the SMs of blocks (batch x kv heads x row tiles < 66), a whole wave of splits when each key
// range keeps at least 16 K/V tiles and the memory gives at least 30 GB/s an SM (the H200, not
// the H100), else the count nearest half a wave, at most one K/V tile per warp (the split-count
// A/Bs of 2026-12-06 and -07, results/h200/issue29/README.md); from 66 blocks on, the fullest
// last wave with at least two tiles per warp. A change of the rule must change these.
int check_split_plan() {
  struct Want {
    int b, hq, hkv, skv, d, splits;
    const char* why;
    double gbps = 4916;
  };
  const Want wants[] = {
      {1, 64, 8, 1024, 128, 8, "8 blocks, 32 tiles of 32 keys: 2 a range at 16 splits: half a wave, 8"},
      {1, 64, 8, 1024, 64, 4, "16 tiles of 64 keys: half a wave (8), one a warp caps it at 4"},
      {1, 64, 8, 4096, 128, 8, "128 tiles: 8 a range at 16 splits: half a wave, round(66 / 8) = 8"},
      {1, 64, 8, 4096, 64, 8, "64 tiles: 4 a range at 16 splits: 8"},
      {1, 64, 8, 8192, 128, 16, "256 tiles: 16 a range at a whole wave, the threshold: 16"},
      {1, 64, 8, 8192, 64, 8, "128 tiles: 8 a range at 16 splits: 8"},
      {1, 64, 8, 32768, 128, 16, "1024 tiles: a whole wave, floor(132 / 8) = 16"},
      {1, 64, 8, 32768, 64, 16, "512 tiles: 32 a range: 16"},
      {1, 32, 32, 32768, 64, 4, "32 blocks: a whole wave, floor(132 / 32) = 4, 128 tiles a range"},
      {5, 64, 8, 1024, 128, 2, "40 blocks, 32 tiles: half a wave, round(66 / 40) = 2"},
      {8, 64, 8, 4096, 128, 2, "64 blocks, under 66: a whole wave is 2 (64 tiles a range)"},
      {64, 64, 8, 1024, 128, 1, "512 blocks fill the waves alone"},
      {4, 32, 32, 8192, 128, 1, "128 blocks: 1 wave of 132 is the fullest within 5%"},
      // The H100's memory (25 GB/s an SM): half a wave where the H200 takes the whole one.
      {1, 64, 8, 8192, 128, 8, "H100: half a wave, 8", 3352},
      {1, 64, 8, 32768, 128, 8, "H100: half a wave, 8", 3352},
      {1, 64, 8, 32768, 64, 8, "H100: half a wave, 8", 3352},
      {1, 32, 32, 32768, 64, 2, "H100, 32 blocks: half a wave, round(66 / 32) = 2", 3352},
      {1, 64, 8, 1024, 64, 4, "H100: as the H200 below the whole wave's 16 tiles a range", 3352},
      {1, 64, 8, 32768, 128, 16, "bandwidth unknown (0): the whole wave", 0},
  };
  int bad = 0;
  for (const Want& w : wants) {
    const Problem p = make_problem(w.b, w.hq, w.hkv, 1, w.skv, w.d, true, DType::bf16, 0);
    const int got = decode_auto_splits(p, 132, w.gbps);
    if (got != w.splits) {
      std::printf("split plan: %s: %d splits, expected %d (%s)\n", p.label().c_str(), got, w.splits, w.why);
      ++bad;
    }
  }
  std::printf("split plan: %d of %zu counts as pinned\n", static_cast<int>(std::size(wants)) - bad,
              std::size(wants));
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const attnbench::test::CaseSelection selected(argc, argv);
  using V = std::vector<int>;
  constexpr auto kSeq = PageOrder::sequential, kShuf = PageOrder::shuffled;
  const std::vector<Case> cases = {
      // Contiguous decode, GQA 4:1, a context past several splits.
      {2, 8, 2, 1, 300, 128, false, DType::bf16},
      // MQA over 40 tiles of 64 keys: forced to 40 splits, more than a warp's lanes (the
      // combine keeps split s's LSE in register s / 32 of lane s % 32).
      {1, 4, 1, 1, 2540, 64, false, DType::bf16},
      // Context 1.
      {1, 2, 2, 1, 1, 64, true, DType::bf16, 16, kSeq},
      // Speculative decoding over shuffled pages of 8 (a pool with unused pages), f16.
      {3, 4, 2, 4, 37, 64, true, DType::f16, 8, kShuf, 20},
      // Repeated pages within a sequence and shared between two; head_dim 40 padded into 64.
      {2, 2, 2, 3, 40, 40, true, DType::bf16, 16, kSeq, 0, {}, {}, {{5, 2, 5}, {2, 0, 3}}},
      // A ragged batch with a context of 0 and one not a multiple of the page size, MHA, d128.
      {4, 4, 4, 1, 1, 128, true, DType::bf16, 16, kShuf, 0, V{1, 1, 1, 1}, V{1, 0, 300, 33}},
      // GQA 16:1 with 4 new tokens: 64 packed rows, four row tiles; pages of 8.
      {2, 16, 1, 4, 77, 64, true, DType::f16, 8, kShuf},
      // seq_q > context: the first rows see nothing (O = 0, LSE = -inf); d256.
      {1, 2, 1, 10, 4, 256, true, DType::bf16, 16, kSeq},
      // Outlier inputs, contiguous, causal, head_dim 80; MQA.
      {2, 4, 1, 2, 129, 80, true, DType::bf16, 0, kSeq, 0, {}, {}, {}, Distribution::outlier},
      // Ragged contiguous (varlen) decode with a sequence without keys; head_dim 96.
      {3, 4, 2, 1, 1, 96, false, DType::f16, 0, kSeq, 0, V{1, 2, 1}, V{100, 0, 65}},
      // Large logits (scaled scores near 1e9), paged.
      {1, 4, 2, 2, 90, 64, true, DType::bf16, 16, kShuf, 0, {}, {}, {}, Distribution::normal, 1e8},
      // A long context in pages of 64, d256 (tiles of 16 keys span quarter pages).
      {1, 4, 1, 1, 700, 256, false, DType::bf16, 64, kShuf},
      // Sliding window and soft cap on a ragged paged batch (speculative rows whose windows
      // start inside the split grid), causal folded in.
      {3, 8, 2, 16, 200, 64, true, DType::bf16, 64, kShuf, 20, V{16, 5, 16}, V{16, 200, 3}, {},
       Distribution::normal, 0, 40, -1, 30},
      // A window on both sides without causal, contiguous, f16; tiles left of every row's window
      // are never loaded.
      {2, 4, 2, 4, 300, 128, false, DType::f16, 0, kSeq, 0, {}, {}, {}, Distribution::normal, 0,
       50, 10},
      // Soft cap alone with outliers (tanh at +-1), d256 over pages of 16.
      {1, 8, 1, 1, 500, 256, false, DType::bf16, 16, kShuf, 0, {}, {}, {},
       Distribution::outlier, 0, -1, -1, 50},
  };
  // The most splits a sequence may have (kMaxSplits, 128: the combine's LSE registers and the
  // fused combine's weights in shared memory), on MQA d64 over 8192 keys (128 tiles of 64: one a split).
  const Case most_splits{1, 8, 1, 1, 8192, 64, false, DType::bf16};
  const Implementation* dec = Registry::instance().find("cuda.flash_decode");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  if (!dec || !naive) {
    std::printf("implementations not registered\n");
    return 1;
  }
  int failures = 0, ran = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (!selected(static_cast<int>(ci))) continue;
    const Case& c = cases[ci];
    Problem p = make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal, c.t, c.scale);
    if (!c.lq.empty()) p.set_seqlens(c.lq, c.lkv);
    p.window_left = c.wl;
    p.window_right = c.wr;
    p.softcap = c.softcap;
    if (c.page_size > 0) {
      p.page_size = c.page_size;
      p.page_order = c.order;
      p.num_pages = c.num_pages;
      if (!c.table.empty()) p.set_block_table(c.table);
      p.make_block_table();
    }
    const std::string bad = validate(p);
    if (!bad.empty()) {
      std::printf("case %zu: invalid problem: %s\n", ci, bad.c_str());
      ++failures;
      continue;
    }
    std::printf("case %zu: %s%s\n", ci, p.label().c_str(),
                c.dist == Distribution::outlier ? " outlier" : "");
    const CaseInputs in = make_inputs(p, kSeed + ci, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, false, kSeed + ci);
    bool ok = true;
    // The combine kernel (fused_combine=0; the default outside head_dim 72-128, the 128-wide tile).
    for (const int splits : {1, 0, 3, 7, 40}) {  // 40: clamped to the tiles where fewer
      ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", splits}, {"fused_combine", 0}}) && ok;
    }
    // Once more with the threads of each block interleaved in a seeded random order (another
    // legal schedule: a missing block barrier before the warps' merge shows here).
    emu::sched_seed = 1 + ci;
    ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", 3}, {"fused_combine", 0}}) && ok;
    emu::sched_seed = 0;
    // The combine launched plainly instead of as a dependent grid (option pdl=0).
    ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", 3}, {"pdl", 0}, {"fused_combine", 0}}) && ok;
    // No options: the defaults, as a plain run gets them.
    ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {}) && ok;
    // The combine fused into the split kernel (the last block of each row tile's splits merges),
    // twice on one workspace: the second call finds the arrival counters the first one left.
    attnbench::test::fwd_calls() = 2;
    for (const int splits : {0, 3, 40})
      ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", splits}, {"fused_combine", 1}}) && ok;
    emu::sched_seed = 1 + ci;
    ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", 7}, {"fused_combine", 1}}) && ok;
    emu::sched_seed = 0;
    attnbench::test::fwd_calls() = 1;
    ++ran;
    failures += ok ? 0 : 1;
  }
  if (selected(static_cast<int>(cases.size()))) {
    const Case& c = most_splits;
    const Problem p = make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal, c.t, c.scale);
    std::printf("case %zu: %s, 128 splits\n", cases.size(), p.label().c_str());
    const CaseInputs in = make_inputs(p, kSeed + cases.size(), c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, false, kSeed + cases.size());
    attnbench::test::fwd_calls() = 2;
    bool ok = true;
    for (const int fused : {0, 1})
      ok = check_on_host(*dec, *naive, p, Pass::fwd, in, ref, {{"splits", 128}, {"fused_combine", fused}}) && ok;
    attnbench::test::fwd_calls() = 1;
    ++ran;
    failures += ok ? 0 : 1;
  }
  if (selected(static_cast<int>(cases.size()) + 1)) {
    std::printf("case %zu: the automatic split plan on 132 SMs\n", cases.size() + 1);
    failures += check_split_plan() != 0 ? 1 : 0;
    ++ran;
  }
  std::printf("%d passed, %d failed\n", ran - failures, failures);
  return failures;
}
