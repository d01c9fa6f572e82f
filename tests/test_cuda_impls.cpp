// Every registered CUDA implementation against the float64 reference through check_impl (the
// verification rule: error <= k * naive error + atol, no NaN/Inf, no unwritten element), on
// the shapes that break index math: sequence tails (1, 17, 129), head_dims that are not a tile
// multiple, GQA 8:2 and MQA, causal with seq_q < seq_kv and seq_q > seq_kv (rows that see no
// key), a custom scale, large scales (logits near 1e9), FlashAttention-3's outlier inputs,
// flash_fwd's block_c set, and random shapes from a fixed seed.
// Because the rule measures every implementation against cuda.naive_3pass, a wrong baseline
// would loosen every bound; so every output is also held to a dtype-based relative L2 bound,
// which checks the baseline itself.
// Without a CUDA device every test is skipped with the reason.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/execute.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/validation.hpp"
#include "attnbench/verify.hpp"
#include "check_impl.hpp"

namespace attnbench {
namespace {

using test::make_problem;
constexpr std::uint64_t kSeed = 20240611;
const DType kDtypes[] = {DType::f32, DType::f16, DType::bf16};

// The implementations of impls/cuda this test was written with; each must support every shape
// below (a SKIP would hide a bug). Implementations registered later are checked wherever they
// claim support.
const std::set<std::string> kFirstGeneration = {"cuda.naive_3pass", "cuda.standard_cublas",
                                                "cuda.online_2pass", "cuda.flash_fwd",
                                                "cuda.flash_bwd"};

#define SKIP_WITHOUT_CUDA()                                                                        \
  do {                                                                                             \
    if (!device_present(Device::cuda))                                                             \
      GTEST_SKIP() << "no CUDA device: attnbench::device_present(Device::cuda) is false (no GPU, " \
                      "no driver, or CUDA_VISIBLE_DEVICES hides it)";                              \
  } while (0)

std::vector<const Implementation*> cuda_impls() {
  std::vector<const Implementation*> v;
  for (const Implementation* i : Registry::instance().all())
    if (i->device() == Device::cuda) v.push_back(i);
  return v;
}

// Relative L2 error every output must meet, whatever the baseline says: loose enough for S and
// P rounded to the dtype (the naive baseline), tight enough that a wrong index (error ~1) fails.
double rel_l2_bound(DType t) {
  switch (t) {
    case DType::f32:
      return 1e-4;
    case DType::f16:
      return 2e-2;
    case DType::bf16:
      return 1e-1;
  }
  return 0;
}

std::string describe(const Implementation& impl, const Problem& p, Pass pass, const Options& opts) {
  std::ostringstream s;
  s << impl.name() << " " << to_string(pass) << " " << p.label();
  for (const auto& [k, v] : opts) s << " " << k << "=" << v;
  return s.str();
}

// Checks one (implementation, problem, pass); returns false if it was not run (unsupported).
// rel_l2: also hold every output to rel_l2_bound (off only where the gradients themselves are
// ill-conditioned, see LargeScale).
bool check_one(const Implementation& impl, const Problem& p, Pass pass, const Options& opts = {},
               Distribution dist = Distribution::normal, bool rel_l2 = true) {
  const Capabilities caps = impl.capabilities();
  if (pass == Pass::fwd && !caps.forward) return false;
  if (pass == Pass::bwd && !caps.backward) return false;
  const std::string what =
      describe(impl, p, pass, opts) + (dist == Distribution::outlier ? " outlier" : "");
  if (const Support s = impl.supports(p, pass); !s) {
    EXPECT_FALSE(kFirstGeneration.count(impl.name())) << what << ": unexpected SKIP: " << s.reason;
    return false;
  }
  try {
    const Verdict v = test::check_impl(impl, p, pass, kSeed, VerifyMode::full, opts, dist);
    EXPECT_TRUE(v.ok) << what << ": " << v.failure();
    EXPECT_FALSE(v.outputs.empty()) << what << ": no output was verified";
    for (const OutputReport& r : v.outputs) {
      if (r.checked == 0 || !rel_l2) continue;
      EXPECT_LE(r.rel_l2, rel_l2_bound(p.dtype)) << what << ": " << r.name << " relative L2 error "
                                                 << r.rel_l2 << " (max abs " << r.max_abs << ")";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw: " << e.what();
  }
  return true;
}

// Runs every CUDA implementation over the problems, forward and backward where supported.
int check_all(const std::vector<Problem>& problems, Distribution dist = Distribution::normal) {
  int ran = 0;
  for (const Implementation* impl : cuda_impls())
    for (const Problem& p : problems)
      for (Pass pass : {Pass::fwd, Pass::bwd}) ran += check_one(*impl, p, pass, {}, dist) ? 1 : 0;
  return ran;
}

TEST(CudaImpls, FirstGenerationRegistered) {
  std::set<std::string> names;
  for (const Implementation* i : cuda_impls()) names.insert(i->name());
  for (const std::string& n : kFirstGeneration)
    EXPECT_TRUE(names.count(n)) << n << " is not registered";
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd");
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->capabilities().fwd_partner, "cuda.flash_fwd");
  EXPECT_NE(Registry::instance().find("cuda.flash_fwd"), nullptr);
}

// Sequence tails x head_dims, MHA, batch 2 (batch strides), causal and not, every dtype.
TEST(CudaImpls, OddShapes) {
  SKIP_WITHOUT_CUDA();
  std::vector<Problem> ps;
  for (DType t : kDtypes)
    for (int s : {1, 17, 129})
      for (int d : {16, 40, 64, 80, 96, 128, 256})
        for (bool causal : {false, true}) ps.push_back(make_problem(2, 2, 2, s, s, d, causal, t));
  EXPECT_GT(check_all(ps), 0);
}

// GQA 8:2 and MQA 8:1, square and rectangular, causal and not.
TEST(CudaImpls, GroupedAndMultiQuery) {
  SKIP_WITHOUT_CUDA();
  std::vector<Problem> ps;
  for (DType t : kDtypes)
    for (int hkv : {2, 1})
      for (auto [sq, skv] : {std::pair{33, 33}, std::pair{65, 40}, std::pair{17, 130}})
        for (int d : {40, 64})
          for (bool causal : {false, true}) ps.push_back(make_problem(2, 8, hkv, sq, skv, d, causal, t));
  EXPECT_GT(check_all(ps), 0);
}

// Bottom-right causal with seq_q != seq_kv: seq_q > seq_kv leaves the first seq_q - seq_kv rows
// with no visible key (O = 0, LSE = -inf); seq_q < seq_kv shifts the diagonal right.
TEST(CudaImpls, CausalRectangles) {
  SKIP_WITHOUT_CUDA();
  std::vector<Problem> ps;
  for (DType t : kDtypes)
    for (auto [sq, skv] :
         {std::pair{17, 129}, std::pair{1, 64}, std::pair{129, 17}, std::pair{64, 1},
          std::pair{100, 37}, std::pair{37, 100}, std::pair{200, 199}})
      for (int d : {64, 128}) ps.push_back(make_problem(1, 2, 1, sq, skv, d, true, t));
  EXPECT_GT(check_all(ps), 0);
}

TEST(CudaImpls, CustomScale) {
  SKIP_WITHOUT_CUDA();
  std::vector<Problem> ps;
  for (DType t : kDtypes) ps.push_back(make_problem(1, 4, 2, 70, 90, 48, true, t, 0.3));
  EXPECT_GT(check_all(ps), 0);
}

// Large logits: scaled scores near 1e9 (f16: 500, scores near 2e4, as its naive baseline stores
// S in f16), where the running max and the exponents must stay exact. The gradients there are
// ill-conditioned in any float format (dS = P (dP - D) cancels to ~0 with P one-hot, then is
// multiplied by the scale), so the backward is held to the rule and to finite outputs, not to
// rel_l2_bound.
TEST(CudaImpls, LargeScale) {
  SKIP_WITHOUT_CUDA();
  int ran = 0;
  for (DType t : kDtypes) {
    const double big = t == DType::f16 ? 500.0 : 1e8;
    for (const Problem& p : {make_problem(1, 2, 1, 64, 64, 64, false, t, big),
                             make_problem(2, 4, 2, 33, 100, 40, true, t, big),
                             make_problem(1, 2, 2, 100, 33, 128, true, t, big),
                             make_problem(1, 2, 2, 70, 90, 256, false, t, big)})
      for (const Implementation* impl : cuda_impls()) {
        ran += check_one(*impl, p, Pass::fwd) ? 1 : 0;
        ran += check_one(*impl, p, Pass::bwd, {}, Distribution::normal, false) ? 1 : 0;
      }
  }
  EXPECT_GT(ran, 0);
}

// FlashAttention-3's outlier inputs (N(0,1) + N(0,100) * Bernoulli(0.001)): P nearly one-hot, so
// any rounding of S before the exp shows in the gradients (cuda.standard_cublas's dV was 4-9x the
// naive error on the first shape before its backward renormalised P).
TEST(CudaImpls, OutlierInputs) {
  SKIP_WITHOUT_CUDA();
  std::vector<Problem> ps;
  for (DType t : kDtypes) {
    ps.push_back(make_problem(4, 32, 8, 1, 4097, 128, false, t));
    ps.push_back(make_problem(2, 8, 2, 129, 300, 64, true, t));
    ps.push_back(make_problem(1, 4, 4, 77, 77, 80, false, t));
    ps.push_back(make_problem(1, 2, 1, 200, 150, 256, true, t));
  }
  EXPECT_GT(check_all(ps, Distribution::outlier), 0);
}

// flash_fwd's key tile: every block_c that fits must be right. Tiles up to 64 at head_dim <= 128
// fit every supported GPU; larger ones may be refused with std::invalid_argument (shared memory)
// and 128 at head_dim 256 never fits.
TEST(CudaImpls, FlashFwdBlockC) {
  SKIP_WITHOUT_CUDA();
  const Implementation* impl = Registry::instance().find("cuda.flash_fwd");
  ASSERT_NE(impl, nullptr);
  int ran = 0;
  for (DType t : kDtypes)
    for (int d : {24, 64, 128, 256})
      for (bool causal : {false, true})
        for (std::int64_t bc : {16, 32, 64, 128}) {
          const Problem p = make_problem(1, 2, 1, 77, 150, d, causal, t);
          const Options opts{{"block_c", bc}};
          const bool must_fit = d <= 128 && bc <= 64;
          if (d > 128 && bc == 128) {
            EXPECT_THROW(impl->prepare(p, Pass::fwd, opts), std::invalid_argument)
                << describe(*impl, p, Pass::fwd, opts);
            continue;
          }
          if (!must_fit) {
            try {
              impl->prepare(p, Pass::fwd, opts);
            } catch (const std::invalid_argument& e) {
              std::printf("note: %s refused: %s\n", describe(*impl, p, Pass::fwd, opts).c_str(),
                          e.what());
              continue;
            }
          }
          ran += check_one(*impl, p, Pass::fwd, opts) ? 1 : 0;
        }
  EXPECT_GT(ran, 0);
  const Problem p = make_problem(1, 1, 1, 8, 8, 64, false, DType::f32);
  EXPECT_THROW(impl->prepare(p, Pass::fwd, Options{{"block_c", 48}}), std::invalid_argument);
}

// Random shapes from a fixed seed: any head_dim 1..256, group 1..4, seq 1..300.
TEST(CudaImpls, RandomShapes) {
  SKIP_WITHOUT_CUDA();
  std::mt19937 rng(kSeed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Problem> ps;
  for (int n = 0; n < 24; ++n) {
    // One draw per statement: argument evaluation order is unspecified, the shapes must not be.
    const int hkv = uniform(1, 3);
    const int group = uniform(1, 4);
    const int batch = uniform(1, 3);
    const int sq = uniform(1, 300);
    const int skv = uniform(1, 300);
    const int d = uniform(1, 256);
    const bool causal = uniform(0, 1) == 1;
    const DType t = kDtypes[uniform(0, 2)];
    ps.push_back(make_problem(batch, hkv * group, hkv, sq, skv, d, causal, t));
  }
  EXPECT_GT(check_all(ps), 0);
}

// The Hopper forward's persistent schedule (a block per SM taking tiles from a counter) on the odd
// shapes, against the same rule as its default schedule.
TEST(CudaImpls, WgmmaPersistent) {
  SKIP_WITHOUT_CUDA();
  const Implementation* impl = Registry::instance().find("cuda.flash_fwd_wgmma");
  ASSERT_NE(impl, nullptr);
  int ran = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (int s : {1, 17, 129, 1000})
      for (bool causal : {false, true})
        for (int d : {40, 64, 128, 256}) {
          ran += check_one(*impl, make_problem(2, 8, 2, s, s + 31, d, causal, t), Pass::fwd,
                           {{"persistent", 1}})
                     ? 1
                     : 0;
          ran += check_one(*impl, make_problem(1, 4, 1, s + 64, s, d, causal, t), Pass::fwd,
                           {{"persistent", 1}})
                     ? 1
                     : 0;
        }
  if (ran == 0) GTEST_SKIP() << "cuda.flash_fwd_wgmma runs on sm_90a only";
}

// deterministic=1 backward: dQ, dK and dV bit for bit the same over 100 calls (causal GQA, a few
// key blocks per query tile, so the dQ additions of different blocks meet).
TEST(CudaImpls, DeterministicBackwardIsBitIdentical) {
  SKIP_WITHOUT_CUDA();
  const Problem p = make_problem(2, 8, 2, 1000, 1100, 128, true, DType::bf16);
  const CaseInputs in = make_inputs(p, kSeed);
  const Reference ref = compute_reference(in, VerifyMode::full, true, true, kSeed);
  int ran = 0;
  for (const Implementation* impl : cuda_impls()) {
    const Capabilities caps = impl->capabilities();
    const bool has = std::find(caps.options.begin(), caps.options.end(), "deterministic") != caps.options.end();
    const Options opts{{"deterministic", 1}};
    if (!has || !caps.backward || !impl->supports(p, Pass::bwd) || !impl->supports_options(p, Pass::bwd, opts))
      continue;
    ++ran;
    const Outputs first = validation_call(*impl, p, Pass::bwd, opts, in, ref, "determinism").outputs;
    for (int i = 1; i < 100; ++i) {
      const Outputs again = validation_call(*impl, p, Pass::bwd, opts, in, ref, "determinism").outputs;
      ASSERT_EQ(again.dq.bytes, first.dq.bytes) << impl->name() << ": dQ differs on call " << i;
      ASSERT_EQ(again.dk.bytes, first.dk.bytes) << impl->name() << ": dK differs on call " << i;
      ASSERT_EQ(again.dv.bytes, first.dv.bytes) << impl->name() << ": dV differs on call " << i;
    }
  }
  if (ran == 0) GTEST_SKIP() << "no CUDA implementation with a deterministic backward runs here";
}

}  // namespace
}  // namespace attnbench
