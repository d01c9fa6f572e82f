// Every registered CUDA implementation through the conformance suite (conformance.hpp, the list
// `attnbench check` runs: the verification rule against the float64 reference, no NaN/Inf, no
// unwritten element, a dtype-based relative L2 bound on every output, planted faults caught), on
// the shapes that break index math: sequence tails (1, 17, 129), head_dims that are not a tile
// multiple, GQA 8:2 and MQA, causal with seq_q < seq_kv and seq_q > seq_kv (rows that see no
// key), custom scales, large scales (logits near 1e9), FlashAttention-3's outlier inputs and
// random shapes from a fixed seed, in every dtype and pass each declares; one test per group of
// the list. Plus flash_fwd's block_c set.
// Because the rule measures every implementation against cuda.naive_3pass, a wrong baseline
// would loosen every bound; the relative L2 bound checks the baseline itself.
// Without a CUDA device every test is skipped with the reason.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attnbench/conformance.hpp"
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

std::string describe(const Implementation& impl, const Problem& p, Pass pass, const Options& opts) {
  std::ostringstream s;
  s << impl.name() << " " << to_string(pass) << " " << p.label();
  for (const auto& [k, v] : opts) s << " " << k << "=" << v;
  return s.str();
}

// Checks one (implementation, problem, pass) with options, outside the suite; returns false if it
// was not run (unsupported). Every output is also held to the suite's relative L2 bound.
bool check_one(const Implementation& impl, const Problem& p, Pass pass, const Options& opts) {
  const std::string what = describe(impl, p, pass, opts);
  if (const Support s = impl.supports(p, pass); !s) {
    EXPECT_FALSE(kFirstGeneration.count(impl.name())) << what << ": unexpected SKIP: " << s.reason;
    return false;
  }
  try {
    const Verdict v = test::check_impl(impl, p, pass, kSeed, VerifyMode::full, opts);
    EXPECT_TRUE(v.ok) << what << ": " << v.failure();
    EXPECT_FALSE(v.outputs.empty()) << what << ": no output was verified";
    for (const OutputReport& r : v.outputs) {
      if (r.checked == 0) continue;
      EXPECT_LE(r.rel_l2, conformance::rel_l2_bound(p.dtype))
          << what << ": " << r.name << " relative L2 error " << r.rel_l2 << " (max abs " << r.max_abs << ")";
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw: " << e.what();
  }
  return true;
}

// Runs the suite's cases of one group on every CUDA implementation; returns how many ran.
int check_group(conformance::Group g) {
  int ran = 0;
  for (const conformance::Case& c : conformance::cases(cuda_impls())) {
    if (c.shape.group != g) continue;
    const conformance::Result r = conformance::check_case(c);
    if (r.status == conformance::Result::Status::skip) {
      EXPECT_FALSE(kFirstGeneration.count(c.impl->name())) << c.name() << ": unexpected SKIP: " << r.reason;
      continue;
    }
    ++ran;
    // An expected failure is declared by the implementation (conformance.hpp): only there.
    if (r.status == conformance::Result::Status::xfail) {
      EXPECT_TRUE(c.beyond_its_dtype || !c.known_failure.empty()) << c.name() << ": " << r.reason;
      continue;
    }
    EXPECT_EQ(r.status, conformance::Result::Status::pass) << c.name() << ": " << r.reason;
  }
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
  EXPECT_GT(check_group(conformance::Group::odd_shapes), 0);
}

// GQA 8:2 and MQA 8:1, square and rectangular, causal and not.
TEST(CudaImpls, GroupedAndMultiQuery) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::grouped), 0);
}

// Bottom-right causal with seq_q != seq_kv: seq_q > seq_kv leaves the first seq_q - seq_kv rows
// with no visible key (O = 0, LSE = -inf); seq_q < seq_kv shifts the diagonal right.
TEST(CudaImpls, CausalRectangles) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::causal_rect), 0);
}

TEST(CudaImpls, CustomScale) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::custom_scale), 0);
}

// Large logits: scaled scores near 1e9 (f16: 500), where the running max and the exponents must
// stay exact. The backward there is held to the rule and to finite outputs (conformance.hpp).
TEST(CudaImpls, LargeScale) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::large_scale), 0);
}

// FlashAttention-3's outlier inputs (N(0,1) + N(0,100) * Bernoulli(0.001)): P nearly one-hot, so
// any rounding of S before the exp shows in the gradients (cuda.standard_cublas's dV was 4-9x the
// naive error on the first shape before its backward renormalised P).
TEST(CudaImpls, OutlierInputs) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::outlier), 0);
}

// Random shapes from a fixed seed: any head_dim 1..256, group 1..4, seq 1..300.
TEST(CudaImpls, RandomShapes) {
  SKIP_WITHOUT_CUDA();
  EXPECT_GT(check_group(conformance::Group::random), 0);
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

// The Hopper kernels' odd-shape sweep for an option: f16 and bf16, the seqs given, causal or not,
// each head_dim of `dims`; at each point two problems, GQA 8:2 with seq_kv = seq + 31 and MQA
// with seq_q = seq + 64, each passed to `adjust` (with mqa false, then true: a window, a soft
// cap) and checked with the options `options(mqa)`. Returns how many ran (a SKIP is not run).
template <class Adjust, class Opts>
int sweep_odd_shapes(const Implementation& impl, Pass pass, std::initializer_list<int> seqs,
                     std::initializer_list<int> dims, Adjust adjust, Opts options) {
  int ran = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (int s : seqs)
      for (bool causal : {false, true})
        for (int d : dims)
          for (const bool mqa : {false, true}) {
            Problem p = mqa ? make_problem(1, 4, 1, s + 64, s, d, causal, t)
                            : make_problem(2, 8, 2, s, s + 31, d, causal, t);
            adjust(p, mqa);
            ran += check_one(impl, p, pass, options(mqa)) ? 1 : 0;
          }
  return ran;
}

const Implementation& find_impl(const std::string& name) {
  const Implementation* impl = Registry::instance().find(name);
  if (impl == nullptr) throw std::runtime_error(name + " is not registered");
  return *impl;
}

// A narrow window at both problems of the sweep: (100, 27) (causal: (100, -1)) on the GQA one,
// (0, 300) on the MQA one.
void narrow_window(Problem& p, bool mqa) {
  p.window_left = mqa ? 0 : 100;
  p.window_right = mqa ? 300 : (p.causal ? -1 : 27);
}

// The Hopper forward's persistent schedule (a block per SM taking tiles from a counter) on the odd
// shapes, against the same rule as its default schedule.
TEST(CudaImpls, WgmmaPersistent) {
  SKIP_WITHOUT_CUDA();
  const int ran = sweep_odd_shapes(
      find_impl("cuda.flash_fwd_wgmma"), Pass::fwd, {1, 17, 129, 1000}, {40, 64, 128, 256},
      [](Problem&, bool) {}, [](bool) { return Options{{"persistent", 1}}; });
  if (ran == 0) GTEST_SKIP() << "cuda.flash_fwd_wgmma runs on sm_90a only";
}

// The Hopper forward's window tiles: narrow windows on the 64 x 64 tiles, two blocks per SM (the
// default) and on the wide ones (wide_tiles=1), odd shapes, causal or not, seq_q != seq_kv both
// ways, GQA and MQA.
TEST(CudaImpls, WgmmaWindowTiles) {
  SKIP_WITHOUT_CUDA();
  int ran = 0;
  for (int wide : {0, 1}) {
    ran += sweep_odd_shapes(find_impl("cuda.flash_fwd_wgmma"), Pass::fwd, {17, 129, 1000},
                            {40, 128}, narrow_window,
                            [&](bool) { return Options{{"wide_tiles", wide}}; });
  }
  if (ran == 0) GTEST_SKIP() << "cuda.flash_fwd_wgmma runs on sm_90a only";
}

// The Hopper forward's softmax options: fused_tail=1 (each tile's tail scheduled with its
// exponentials; the default for dense and causal d64 and d128 since forward steps 28-29),
// fused_tail=0 (the tail after them; the default elsewhere) without a soft cap and, under a soft
// cap, cap_max=0 (the running maxima instead of the cap's bound, the default for bf16 up to softcap
// 51.9, with its exponent shifted above 41.5; forward step 16). Every head_dim tile (d40 padded to
// 64), odd shapes, causal both ways, soft cap or not, GQA and MQA.
TEST(CudaImpls, WgmmaSoftmaxOptions) {
  SKIP_WITHOUT_CUDA();
  int ran = 0;
  for (double softcap : {0.0, 30.0, 50.0}) {
    ran += sweep_odd_shapes(
        find_impl("cuda.flash_fwd_wgmma"), Pass::fwd, {17, 129, 1000}, {40, 128, 256},
        [&](Problem& p, bool) { p.softcap = softcap; },
        [&](bool) { return Options{{"fused_tail", 1}}; });
  }
  ran += sweep_odd_shapes(find_impl("cuda.flash_fwd_wgmma"), Pass::fwd, {17, 129, 1000},
                          {40, 128, 256}, [&](Problem&, bool) {},
                          [&](bool) { return Options{{"fused_tail", 0}, {"persistent", 0}}; });
  ran += sweep_odd_shapes(
      find_impl("cuda.flash_fwd_wgmma"), Pass::fwd, {17, 129, 1000}, {40, 128, 256},
      [&](Problem& p, bool) { p.softcap = 30.0; },
      [&](bool) { return Options{{"cap_max", 0}}; });
  if (ran == 0) GTEST_SKIP() << "cuda.flash_fwd_wgmma runs on sm_90a only";
}

// The Hopper backward's window tiles: narrow windows at d128 (and d96, padded) on 128-key blocks
// (the default) and on 64-key ones (wide_tiles=0), deterministic on the MQA problem; odd shapes,
// causal or not, seq_q != seq_kv both ways, GQA and MQA.
TEST(CudaImpls, WgmmaBackwardWindowTiles) {
  SKIP_WITHOUT_CUDA();
  int ran = 0;
  for (int wide : {0, 1}) {
    ran += sweep_odd_shapes(find_impl("cuda.flash_bwd_wgmma"), Pass::bwd, {17, 129, 1000},
                            {96, 128}, narrow_window, [&](bool mqa) {
                              return mqa ? Options{{"wide_tiles", wide}, {"deterministic", 1}}
                                         : Options{{"wide_tiles", wide}};
                            });
  }
  if (ran == 0) GTEST_SKIP() << "cuda.flash_bwd_wgmma runs on sm_90a only";
}

// The Hopper backward's 80-row query tiles (m_tile=80, backward step 27: d128 dense non-causal;
// the causal problems of the sweep must ignore it): odd shapes, seq_q not a multiple of 80 or 128,
// head_dim 80, 96 and 128 (the 128 tile), GQA and MQA, batch 2.
TEST(CudaImpls, WgmmaBackwardM80Tiles) {
  SKIP_WITHOUT_CUDA();
  const int ran = sweep_odd_shapes(find_impl("cuda.flash_bwd_wgmma"), Pass::bwd,
                                   {1, 17, 79, 81, 129, 257, 1000}, {80, 96, 128},
                                   [](Problem&, bool) {},
                                   [](bool) { return Options{{"m_tile", 80}}; });
  if (ran == 0) GTEST_SKIP() << "cuda.flash_bwd_wgmma runs on sm_90a only";
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
