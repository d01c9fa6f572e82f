// The tensor-core kernels' logic on a machine without a GPU: cuda.flash_fwd_mma and
// cuda.flash_bwd_mma, compiled as C++ against the CPU emulator of their PTX
// (impls/cuda/mma/emulation/, fwd_wrap.cpp and bwd_wrap.cpp) and run warp by warp on odd shapes:
// sequence tails, GQA/MQA, causal with seq_q < and > seq_kv (empty rows and blocks), every
// head_dim tile and head_dims padded into one (40, 80, 96, 200), f16 and bf16, both backward
// modes, large logits and FlashAttention-3's outlier inputs; sliding windows, soft caps and
// variable-length batches (packed THD, cu_seqlens; sequences without queries or without keys).
//
// Checked as every implementation is: the harness's seeded inputs, the float64 reference
// (reference/, through compute_reference), and the project's verification rule (verify(): error
// <= k * naive error + atol, no NaN/Inf, no unwritten element) against cpu.naive_3pass, the
// naive baseline that stores S and P in the dtype as cuda.naive_3pass does. The emulated
// implementations register under their CUDA names but are called directly on host buffers, so
// this test links attn_harness and attn_impls_cpu, never attn_impls_cuda (the names would be
// registered twice).
// Exit code: the number of failed cases (0 = pass). Arguments N (case N) or N-M (cases N to M)
// run those cases only.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/make_problem.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"
#include "emulated_call.hpp"

namespace {

using namespace attnbench;
using attnbench::test::check_on_host;

constexpr std::uint64_t kSeed = 1234;

struct Case {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  DType t;
  bool bwd;
  double scale = 0;
  Distribution dist = Distribution::normal;
  int wl = -1, wr = -1;  // window_left, window_right (-1: unbounded)
  double softcap = 0;
  // Varlen: per-sequence lengths (b, sq, skv are then their count and maxima); empty: dense.
  std::vector<int> lq = {}, lkv = {};
};

}  // namespace

int main(int argc, char** argv) {
  // The cases the arguments name (none: all).
  const attnbench::test::CaseSelection selected(argc, argv);
  using V = std::vector<int>;
  constexpr Distribution kN = Distribution::normal, kOut = Distribution::outlier;
  const std::vector<Case> cases = {
      {1, 2, 1, 70, 90, 64, true, DType::bf16, true},
      {1, 2, 2, 130, 40, 128, true, DType::f16, true},
      {2, 1, 1, 33, 200, 64, false, DType::f16, true},
      {1, 1, 1, 20, 150, 256, true, DType::bf16, true},
      {1, 4, 1, 65, 129, 128, false, DType::bf16, true},
      {1, 1, 1, 256, 256, 128, true, DType::bf16, true},
      {1, 2, 1, 1, 1, 64, true, DType::bf16, true},
      {1, 1, 1, 300, 17, 256, false, DType::f16, true},
      {1, 1, 1, 300, 10, 64, true, DType::bf16, true},
      {1, 2, 2, 100, 300, 64, true, DType::f16, true},
      {2, 3, 1, 200, 333, 128, true, DType::bf16, true},
      {1, 2, 1, 129, 257, 256, true, DType::f16, true},
      // head_dims padded into a tile: the columns past head_dim are zero-filled and never stored.
      {1, 2, 1, 70, 90, 40, true, DType::bf16, true},
      {1, 1, 1, 129, 65, 80, false, DType::f16, true},
      {2, 2, 1, 33, 130, 96, true, DType::bf16, true},
      {1, 1, 1, 65, 70, 200, true, DType::bf16, true},
      {1, 2, 2, 17, 33, 8, false, DType::f16, true},
      // Large logits (scaled scores near 1e9) and outlier inputs.
      {1, 2, 1, 64, 100, 64, true, DType::bf16, true, 1e8},
      {1, 1, 1, 40, 70, 96, false, DType::bf16, true, 1e8},
      {2, 4, 2, 1, 300, 128, false, DType::bf16, true, 0, Distribution::outlier},
      {1, 2, 2, 77, 100, 80, true, DType::f16, true, 0, Distribution::outlier},
      // Windows (issue 30): tiles skipped on both sides, edges crossing tiles, rows that see
      // nothing, causal folded in, seq_q != seq_kv both ways, GQA and MQA, window 0 and wider
      // than the sequence.
      {1, 2, 2, 300, 300, 128, false, DType::bf16, true, 0, Distribution::normal, 70, 40},
      {2, 4, 2, 150, 400, 64, true, DType::f16, true, 0, Distribution::normal, 100, -1},
      {1, 3, 1, 260, 90, 128, true, DType::bf16, true, 0, Distribution::outlier, 0, -1},
      {1, 2, 2, 90, 260, 256, false, DType::bf16, true, 0, Distribution::normal, -1, 1},
      {1, 2, 2, 200, 120, 64, false, DType::f16, true, 0, Distribution::outlier, 5, 3},
      {1, 1, 1, 70, 70, 96, false, DType::bf16, true, 0, Distribution::normal, 500, 500},
      // Soft cap, alone and with a window; outliers and a large scale push tanh to +-1.
      {1, 2, 2, 130, 200, 128, false, DType::bf16, true, 0, Distribution::outlier, -1, -1, 30},
      {2, 4, 2, 70, 300, 64, true, DType::f16, true, 0, Distribution::normal, -1, -1, 50},
      {1, 2, 1, 65, 170, 256, true, DType::bf16, true, 1e4, Distribution::outlier, -1, -1, 30},
      {1, 2, 2, 150, 150, 80, true, DType::f16, true, 0, Distribution::normal, 64, -1, 20},
      // Varlen (issue 30): packed THD batches with sequences of no keys (O = 0, LSE = -inf,
      // dQ = 0) and of no queries (dK = dV = 0), sequences longer than a block on either side,
      // GQA 8:2 and MQA, causal and not, with a window and with a soft cap; padded head_dims.
      // (b, sq, skv: the count and maxima of the lengths, which set_seqlens recomputes.)
      {4, 8, 2, 50, 40, 64, true, DType::bf16, true, 0, kN, -1, -1, 0, V{50, 25, 0, 33},
       V{20, 0, 17, 40}},
      {4, 4, 1, 50, 40, 80, false, DType::f16, true, 0, kN, -1, -1, 0, V{50, 25, 0, 33},
       V{20, 0, 17, 40}},
      {4, 2, 1, 130, 200, 128, true, DType::f16, true, 0, kOut, -1, -1, 0, V{130, 1, 0, 70},
       V{200, 65, 9, 0}},
      {4, 2, 2, 150, 160, 40, false, DType::bf16, true, 0, kN, 30, 10, 0, V{150, 7, 0, 90},
       V{100, 160, 20, 140}},
      {3, 4, 2, 90, 200, 64, true, DType::bf16, true, 0, kN, -1, -1, 30, V{90, 1, 40},
       V{200, 65, 0}},
      {3, 2, 1, 140, 129, 256, false, DType::bf16, true, 0, kN, -1, -1, 0, V{3, 140, 0},
       V{129, 5, 64}},
  };
  const Implementation* fwd = Registry::instance().find("cuda.flash_fwd_mma");
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd_mma");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  if (!fwd || !bwd || !naive) {
    std::printf("implementations not registered\n");
    return 1;
  }
  int failures = 0, ran = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (!selected(static_cast<int>(ci))) continue;
    const Case& c = cases[ci];
    Problem p = make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal, c.t, c.scale);
    p.window_left = c.wl;
    p.window_right = c.wr;
    p.softcap = c.softcap;
    if (!c.lq.empty()) p.set_seqlens(c.lq, c.lkv);
    std::printf("case %zu: %s%s\n", ci, p.label().c_str(),
                c.dist == Distribution::outlier ? " outlier" : "");
    const CaseInputs in = make_inputs(p, kSeed + ci, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, c.bwd, kSeed + ci);
    bool ok = check_on_host(*fwd, *naive, p, Pass::fwd, in, ref, {});
    ++ran;
    if (c.bwd) {
      for (int det = 0; det < 2; ++det) {
        ok = check_on_host(*bwd, *naive, p, Pass::bwd, in, ref, {{"deterministic", det}}) && ok;
      }
    }
    failures += ok ? 0 : 1;
  }
  std::printf("%d passed, %d failed\n", ran - failures, failures);
  return failures;
}
