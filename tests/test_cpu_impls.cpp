// Tests of the CPU implementations: every registered CPU implementation through the conformance
// suite (conformance.hpp: the float64 reference, the verification rule, the planted faults), and
// odd tile sizes of those with tile options; plus the properties the rule does not cover:
// naive_3pass's own accuracy, O(N) workspace of the streaming kernels, bitwise determinism of
// cpu.flash_bwd, and no heap allocation inside forward/backward.
#include <gtest/gtest.h>

#include "test_util.hpp"
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../impls/cpu/cpu_common.hpp"
#include "attnbench/conformance.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"
#include "check_impl.hpp"

// Heap allocations are counted by interposing malloc (glibc only; sanitizers own malloc).
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
#if defined(__has_feature)
#if !__has_feature(address_sanitizer)
#define ATTN_COUNT_MALLOC 1
#endif
#else
#define ATTN_COUNT_MALLOC 1
#endif
#endif

#ifdef ATTN_COUNT_MALLOC
namespace {
std::atomic<bool> g_count_mallocs{false};
std::atomic<long> g_mallocs{0};
}  // namespace
extern "C" void* __libc_malloc(std::size_t);
extern "C" void* malloc(std::size_t n) {
  if (g_count_mallocs.load(std::memory_order_relaxed)) g_mallocs.fetch_add(1, std::memory_order_relaxed);
  return __libc_malloc(n);
}
#endif

namespace {

using namespace attnbench;
using attnbench::test::make_problem;

constexpr std::uint64_t kSeed = 20240607;
constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

std::vector<const Implementation*> cpu_impls() {
  std::vector<const Implementation*> v;
  for (const auto* i : Registry::instance().all()) {
    if (i->device() == Device::cpu) v.push_back(i);
  }
  return v;
}

// The conformance suite (harness/src/verify/conformance.cpp, the list `attnbench check` runs): odd
// shapes, GQA and MQA, causal rectangles, custom and large scales, outlier inputs and seeded
// random shapes, in every dtype and pass each implementation declares, with the planted faults.
//
// Under AddressSanitizer (scripts/sanitize.sh, ten times slower) the two costliest groups, outlier
// and random, run each shape in one dtype instead of three: shape n of a group's list in a dtype
// runs where n % 3 is that dtype's place in f32, f16, bf16 (so every dtype and every outlier
// shape still runs once), plus each group's first case in each dtype and pass, which carries the
// planted faults. The sanitizers look for memory and UB errors, which depend on the shape and the
// element size, not on the values; the plain build runs the whole list. Measured on the 2-core
// development machine at 0a54df9: these groups took 159 of test_cpu_impls's 223 s under ASan.
std::vector<conformance::Case> suite() {
  std::vector<conformance::Case> all = conformance::cases(cpu_impls());
#if defined(__SANITIZE_ADDRESS__)
  using conformance::Group;
  auto thinned = [](Group g) { return g == Group::outlier || g == Group::random; };
  auto dtype_place = [](DType t) {
    return static_cast<int>(std::find(std::begin(kDTypes), std::end(kDTypes), t) - std::begin(kDTypes));
  };
  std::map<std::pair<Group, DType>, int> seen;        // shapes of a group so far, per dtype
  std::map<std::pair<Group, std::string>, int> place;  // a shape's n within its group and dtype
  for (const conformance::Shape& s : conformance::shapes()) {
    if (!thinned(s.group)) continue;
    place.emplace(std::make_pair(s.group, s.p.label()), seen[{s.group, s.p.dtype}]++);
  }
  std::erase_if(all, [&](const conformance::Case& c) {
    if (!thinned(c.shape.group) || c.plant) return false;
    const auto it = place.find({c.shape.group, c.shape.p.label()});
    return it != place.end() && it->second % 3 != dtype_place(c.shape.p.dtype);
  });
#endif
  return all;
}

std::string test_name(std::string s) {
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}

class CpuConformance : public ::testing::TestWithParam<conformance::Case> {};

TEST_P(CpuConformance, MatchesReference) {
  const conformance::Case& c = GetParam();
  const conformance::Result r = conformance::check_case(c);
  if (r.status == conformance::Result::Status::skip) GTEST_SKIP() << r.reason;
  // An expected failure is declared by the implementation (conformance.hpp): only there.
  if (r.status == conformance::Result::Status::xfail) {
    EXPECT_TRUE(c.beyond_its_dtype || !c.known_failure.empty()) << c.name() << ": " << r.reason;
    return;
  }
  EXPECT_EQ(r.status, conformance::Result::Status::pass) << c.name() << ": " << r.reason;
}

INSTANTIATE_TEST_SUITE_P(All, CpuConformance, ::testing::ValuesIn(suite()),
                         [](const ::testing::TestParamInfo<conformance::Case>& i) {
                           return test_name(std::string(conformance::to_string(i.param.shape.group)) + "_" +
                                            i.param.name());
                         });

// Odd tile sizes, so that tiles end inside rows, heads and causal diagonals: the options of the
// implementations that have block_r / block_c (options are an implementation's own, so they are
// not part of the conformance suite).
struct TileCase {
  const Implementation* impl;
  Problem p;
  Pass pass;
  Options opts;
};

std::vector<TileCase> tile_cases() {
  std::vector<TileCase> v;
  for (const auto* impl : cpu_impls()) {
    const Capabilities c = impl->capabilities();
    if (std::find(c.options.begin(), c.options.end(), "block_c") == c.options.end()) continue;
    for (DType t : kDTypes) {
      for (Pass pass : conformance::declared_passes(*impl)) {
        v.push_back({impl, make_problem(1, 4, 2, 77, 91, 40, true, t), pass, {{"block_r", 7}, {"block_c", 13}}});
        v.push_back({impl, make_problem(1, 2, 2, 91, 77, 64, true, t), pass, {{"block_r", 32}, {"block_c", 5}}});
        v.push_back({impl, make_problem(1, 2, 2, 60, 60, 96, false, t), pass, {{"block_r", 1}, {"block_c", 1}}});
      }
    }
  }
  return v;
}

class CpuTiles : public ::testing::TestWithParam<TileCase> {};

TEST_P(CpuTiles, MatchesReference) {
  const TileCase& c = GetParam();
  const Support s = c.impl->supports(c.p, c.pass);
  if (!s) GTEST_SKIP() << s.reason;
  const Verdict v = test::check_impl(*c.impl, c.p, c.pass, kSeed, VerifyMode::full, c.opts);
  EXPECT_TRUE(v.ok) << c.impl->name() << " " << c.p.label() << " " << to_string(c.pass) << ": "
                    << v.failure();
}

INSTANTIATE_TEST_SUITE_P(All, CpuTiles, ::testing::ValuesIn(tile_cases()),
                         [](const ::testing::TestParamInfo<TileCase>& i) {
                           std::string s = i.param.impl->name() + "_" + std::string(to_string(i.param.pass)) + "_" +
                                           i.param.p.label();
                           for (const auto& [k, v] : i.param.opts) s += "_" + k + std::to_string(v);
                           return test_name(s);
                         });

TEST(CpuImpls, AllExpectedAreRegistered) {
  for (const char* n : {"cpu.naive_3pass", "cpu.online_2pass", "cpu.flash_fwd", "cpu.flash_bwd"}) {
    const Implementation* i = Registry::instance().find(n);
    ASSERT_NE(i, nullptr) << n;
    EXPECT_EQ(i->device(), Device::cpu);
  }
  EXPECT_EQ(Registry::instance().find("cpu.flash_bwd")->capabilities().fwd_partner, "cpu.flash_fwd");
}

// The names before the naming scheme (docs/architecture.md, "Names"), declared by the renamed
// files themselves: each resolves to the implementation it became; find() and globs see current
// names only.
TEST(CpuImpls, FormerNamesResolveToCurrentOnes) {
  const Registry& reg = Registry::instance();
  EXPECT_EQ(reg.canonical("cpu.flash_1pass"), "cpu.flash_fwd");
  EXPECT_EQ(reg.canonical("cpu.flash_backward"), "cpu.flash_bwd");
  EXPECT_EQ(reg.canonical("cpu.flash_fwd"), "cpu.flash_fwd");
  EXPECT_EQ(reg.canonical("cpu.nothing"), "cpu.nothing");
  EXPECT_TRUE(reg.is_former_name("cpu.flash_1pass"));
  EXPECT_FALSE(reg.is_former_name("cpu.flash_fwd"));
  EXPECT_EQ(reg.find("cpu.flash_1pass"), nullptr);
  EXPECT_TRUE(reg.match("cpu.flash_1*").empty());
  EXPECT_TRUE(reg.match("cpu.flash_back*").empty());
  for (const auto& [former, now] : reg.former_names())
    EXPECT_NE(reg.find(now), nullptr) << former << " -> " << now << ": not registered";
}

class Named final : public Implementation {
 public:
  explicit Named(std::string n) : n_(std::move(n)) {}
  std::string name() const override { return n_; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override { return "a name"; }
  Capabilities capabilities() const override { return {}; }

 private:
  std::string n_;
};

// The registry's rules for former names, on a registry of its own: a rename of a rename resolves
// to the last name; a former name that is a current name, or that two implementations claim, is
// a build defect (abort), in either order of registration.
TEST(Registry, FormerNames) {
  Registry r;
  r.add(std::make_unique<Named>("x.c"));
  r.add_former_name("x.b", "x.c");
  r.add_former_name("x.a", "x.b");  // x.a became x.b, which became x.c
  r.add_former_name("x.a", "x.b");  // declared twice: the same fact
  EXPECT_EQ(r.canonical("x.a"), "x.c");
  EXPECT_EQ(r.canonical("x.b"), "x.c");
  EXPECT_EQ(r.canonical("x.c"), "x.c");
  EXPECT_EQ(r.former_names(),
            (std::vector<std::pair<std::string, std::string>>{{"x.a", "x.c"}, {"x.b", "x.c"}}));
  EXPECT_EQ(r.find("x.a"), nullptr);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(r.add_former_name("x.c", "x.d"), "is the name of a registered implementation");
  EXPECT_DEATH(r.add_former_name("x.a", "x.z"), "already the former name of another");
  EXPECT_DEATH(r.add_former_name("x.e", "x.e"), "is its own former name");
  EXPECT_DEATH(r.add(std::make_unique<Named>("x.b")), "also the former name of 'x.c'");
  // A cycle (two files contradicting each other) cannot hang a lookup.
  Registry cyc;
  cyc.add_former_name("y.a", "y.b");
  cyc.add_former_name("y.b", "y.a");
  const std::string end = cyc.canonical("y.a");
  EXPECT_TRUE(end == "y.a" || end == "y.b") << end;
}

// The baseline itself must be accurate in absolute terms: the rule only bounds others by it.
TEST(NaiveThreePass, RelativeErrorWithinDtypeBound) {
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  ASSERT_NE(naive, nullptr);
  for (DType t : kDTypes) {
    const double bound = t == DType::f32 ? 1e-5 : t == DType::f16 ? 5e-3 : 4e-2;
    for (const Problem& p : {make_problem(1, 4, 2, 129, 129, 64, false, t), make_problem(2, 2, 1, 100, 160, 128, true, t)}) {
      for (Pass pass : {Pass::fwd, Pass::bwd}) {
        const Verdict v = test::check_impl(*naive, p, pass, kSeed);
        EXPECT_TRUE(v.ok) << v.failure();
        for (const OutputReport& o : v.outputs) {
          EXPECT_LT(o.rel_l2, bound) << p.label() << " " << to_string(pass) << " " << o.name;
        }
      }
    }
  }
}

// Sliding window and soft-capping (issue 30): the naive baseline against the float64 reference,
// held to the same dtype bounds as above. Windows: both sides, one side, 0 and 1 wide, with causal
// at seq_q != seq_kv both ways; soft-capping alone and with a window.
TEST(NaiveThreePass, WindowAndSoftcap) {
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  ASSERT_NE(naive, nullptr);
  struct W {
    int sq, skv, hq, hkv, d;
    bool causal;
    int left, right;
    double softcap;
  };
  const W cases[] = {{70, 90, 4, 2, 40, false, 16, 8, 0},   {90, 70, 2, 1, 64, true, 10, -1, 0},
                     {64, 64, 2, 2, 80, false, -1, -1, 30}, {129, 129, 8, 2, 64, true, 32, -1, 50},
                     {17, 17, 1, 1, 96, false, 0, 0, 0},    {33, 40, 2, 1, 64, false, 1, 1, 5}};
  for (DType t : kDTypes) {
    const double bound = t == DType::f32 ? 1e-5 : t == DType::f16 ? 5e-3 : 4e-2;
    for (const W& w : cases) {
      Problem p = make_problem(1, w.hq, w.hkv, w.sq, w.skv, w.d, w.causal, t);
      p.window_left = w.left;
      p.window_right = w.right;
      p.softcap = w.softcap;
      ASSERT_TRUE(naive->supports(p, Pass::fwd_bwd)) << p.label();
      for (Pass pass : {Pass::fwd, Pass::bwd}) {
        const Verdict v = test::check_impl(*naive, p, pass, kSeed);
        EXPECT_TRUE(v.ok) << p.label() << " " << to_string(pass) << ": " << v.failure();
        // A window of 0 on both sides leaves each row one key: P = 1, and dQ = dK = 0 exactly
        // (dP - D cancels), so only the rule's absolute bound applies to them (v.ok above).
        const bool one_key = w.left == 0 && w.right == 0;
        for (const OutputReport& o : v.outputs) {
          if (one_key && (o.name == "dQ" || o.name == "dK")) continue;
          EXPECT_LT(o.rel_l2, bound) << p.label() << " " << to_string(pass) << " " << o.name;
        }
      }
    }
  }
  // Every other CPU implementation says it cannot, until it can.
  Problem p = make_problem(1, 2, 2, 64, 64, 64, false, DType::f32);
  p.window_left = 8;
  EXPECT_FALSE(Registry::instance().find("cpu.online_2pass")->supports(p, Pass::fwd));
  p.window_left = -1;
  p.softcap = 30;
  EXPECT_EQ(Registry::instance().find("cpu.online_2pass")->supports(p, Pass::fwd).reason,
            "softcap not supported");
}

// cpu.flash_fwd's forward and cpu.flash_bwd's backward under windows and soft-capping,
// with small tiles too, so that a window starts and ends inside tiles and whole tiles are skipped.
TEST(FlashFwd, WindowAndSoftcap) {
  const Implementation* flash = Registry::instance().find("cpu.flash_fwd");
  const Implementation* flash_bwd = Registry::instance().find("cpu.flash_bwd");
  ASSERT_NE(flash, nullptr);
  ASSERT_NE(flash_bwd, nullptr);
  const Options small{{"block_r", 16}, {"block_c", 24}};
  struct W {
    int sq, skv;
    bool causal;
    int left, right;
    double softcap;
  };
  const W cases[] = {{70, 90, false, 16, 8, 0}, {90, 70, true, 10, -1, 0}, {129, 129, true, 32, -1, 50},
                     {17, 17, false, 0, 0, 0},  {33, 40, false, 1, 1, 5},  {64, 200, false, -1, 30, 30}};
  for (DType t : kDTypes) {
    for (const W& w : cases) {
      Problem p = make_problem(1, 4, 2, w.sq, w.skv, 64, w.causal, t);
      p.window_left = w.left;
      p.window_right = w.right;
      p.softcap = w.softcap;
      for (const Options* o : {static_cast<const Options*>(nullptr), &small}) {
        const Options opts = o ? *o : Options{};
        const Verdict v = test::check_impl(*flash, p, Pass::fwd, kSeed, VerifyMode::full, opts);
        EXPECT_TRUE(v.ok) << p.label() << (o ? " (small tiles)" : "") << ": " << v.failure();
        const Verdict g = test::check_impl(*flash_bwd, p, Pass::bwd, kSeed, VerifyMode::full, opts);
        EXPECT_TRUE(g.ok) << p.label() << " bwd" << (o ? " (small tiles)" : "") << ": " << g.failure();
      }
    }
  }
}

// The streaming kernels need O(seq) memory: 4x the sequence may cost at most ~4x the workspace,
// while the naive one pays 16x for its seq x seq matrices.
TEST(CpuImpls, WorkspaceIsLinearInSequence) {
  auto ws = [](const char* name, int seq, Pass pass) {
    const Implementation* i = Registry::instance().find(name);
    EXPECT_NE(i, nullptr) << name;
    return i ? static_cast<double>(i->workspace_bytes(make_problem(1, 8, 8, seq, seq, 64, false, DType::f32), pass, {})) : 0.0;
  };
  const struct {
    const char* name;
    Pass pass;
  } linear[] = {{"cpu.flash_fwd", Pass::fwd}, {"cpu.online_2pass", Pass::fwd}, {"cpu.flash_bwd", Pass::bwd}};
  for (const auto& l : linear) {
    const double small = ws(l.name, 1024, l.pass), large = ws(l.name, 4096, l.pass);
    ASSERT_GT(small, 0) << l.name;
    EXPECT_LE(large / small, 4.5) << l.name << ": " << small << " -> " << large << " bytes";
  }
  for (Pass pass : {Pass::fwd, Pass::bwd}) {
    const double ratio = ws("cpu.naive_3pass", 4096, pass) / ws("cpu.naive_3pass", 1024, pass);
    EXPECT_GT(ratio, 12.0) << "naive_3pass should hold seq x seq matrices";
  }
}

// Host buffers for direct calls (CPU device pointers are host pointers).
struct DirectRun {
  Problem p;
  CaseInputs in;
  HostTensor o;
  std::vector<float> lse;
  std::vector<std::uint8_t> ws;

  DirectRun(const Problem& prob, std::uint64_t seed)
      : p(prob), in(make_inputs(prob, seed)), o(prob.dtype, prob.q_elems()),
        lse(static_cast<std::size_t>(prob.lse_elems())) {}

  void forward(const Implementation& impl, const Options& opts = {}) {
    ws.assign(impl.workspace_bytes(p, Pass::fwd, opts), 0);
    FwdArgs a;
    a.p = p;
    a.q = in.q.data();
    a.k = in.k.data();
    a.v = in.v.data();
    a.o = o.data();
    a.lse = lse.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.size();
    a.options = &opts;
    impl.forward(a);
  }
  // Returns dq, dk, dv concatenated as bytes.
  std::vector<std::uint8_t> backward(const Implementation& impl, const Options& opts = {}) {
    HostTensor dq(p.dtype, p.q_elems()), dk(p.dtype, p.kv_elems()), dv(p.dtype, p.kv_elems());
    ws.assign(impl.workspace_bytes(p, Pass::bwd, opts), 0);
    BwdArgs a;
    a.p = p;
    a.q = in.q.data();
    a.k = in.k.data();
    a.v = in.v.data();
    a.o = o.data();
    a.lse = lse.data();
    a.dout = in.dout.data();
    a.dq = dq.data();
    a.dk = dk.data();
    a.dv = dv.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.size();
    a.options = &opts;
    impl.backward(a);
    std::vector<std::uint8_t> out(dq.bytes);
    out.insert(out.end(), dk.bytes.begin(), dk.bytes.end());
    out.insert(out.end(), dv.bytes.begin(), dv.bytes.end());
    return out;
  }
};

// Same bits on every run and for any thread count: each gradient element is summed by one task
// in a fixed order.
TEST(FlashBwd, Deterministic) {
  const Implementation* fwd = Registry::instance().find("cpu.flash_fwd");
  const Implementation* bwd = Registry::instance().find("cpu.flash_bwd");
  ASSERT_TRUE(fwd && bwd);
  for (DType t : {DType::f32, DType::bf16}) {
    DirectRun r(make_problem(2, 4, 2, 200, 300, 64, true, t), kSeed);
    r.forward(*fwd);
    const std::vector<std::uint8_t> first = r.backward(*bwd);
    EXPECT_EQ(first, r.backward(*bwd)) << "second run differs, " << to_string(t);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<std::uint8_t> single = r.backward(*bwd);
    omp_set_num_threads(threads);
    EXPECT_EQ(first, single) << "one thread differs from " << threads << ", " << to_string(t);
  }
}

// The interface forbids allocating inside forward/backward (the harness owns all memory and
// the calls are timed).
TEST(CpuImpls, NoHeapAllocationInCalls) {
#ifndef ATTN_COUNT_MALLOC
  GTEST_SKIP() << "malloc counting needs glibc without sanitizers";
#else
  for (const auto* impl : cpu_impls()) {
    // Edge tiles of one row or one key take Eigen's matrix-vector path.
    for (const Problem& p : {make_problem(1, 4, 2, 300, 257, 128, true, DType::bf16), make_problem(1, 2, 2, 64, 1000, 256, false, DType::f32),
                             make_problem(1, 2, 1, 1, 65, 64, false, DType::f16)}) {
      const Capabilities c = impl->capabilities();
      DirectRun r(p, kSeed);
      const Implementation* f = c.forward ? impl : Registry::instance().find(c.fwd_partner);
      ASSERT_NE(f, nullptr);
      r.forward(*f);  // also the warm-up: thread pool and Eigen's cache-size query
      if (c.forward) {
        std::vector<std::uint8_t> ws(impl->workspace_bytes(p, Pass::fwd, {}));
        FwdArgs a;
        a.p = p;
        a.q = r.in.q.data();
        a.k = r.in.k.data();
        a.v = r.in.v.data();
        a.o = r.o.data();
        a.lse = r.lse.data();
        a.workspace = ws.data();
        a.workspace_bytes = ws.size();
        g_mallocs = 0;
        g_count_mallocs = true;
        impl->forward(a);
        g_count_mallocs = false;
        EXPECT_EQ(g_mallocs.load(), 0) << impl->name() << " forward allocated, " << p.label();
      }
      if (c.backward) {
        HostTensor dq(p.dtype, p.q_elems()), dk(p.dtype, p.kv_elems()), dv(p.dtype, p.kv_elems());
        std::vector<std::uint8_t> ws(impl->workspace_bytes(p, Pass::bwd, {}));
        BwdArgs a;
        a.p = p;
        a.q = r.in.q.data();
        a.k = r.in.k.data();
        a.v = r.in.v.data();
        a.o = r.o.data();
        a.lse = r.lse.data();
        a.dout = r.in.dout.data();
        a.dq = dq.data();
        a.dk = dk.data();
        a.dv = dv.data();
        a.workspace = ws.data();
        a.workspace_bytes = ws.size();
        impl->backward(a);  // warm-up
        g_mallocs = 0;
        g_count_mallocs = true;
        impl->backward(a);
        g_count_mallocs = false;
        EXPECT_EQ(g_mallocs.load(), 0) << impl->name() << " backward allocated, " << p.label();
      }
    }
  }
#endif
}

// The kernels' vectorised row conversions (F16C, branch-free bf16) must give the same bits as
// dtype.hpp's scalar converters, which the harness and the reference use.
TEST(CpuCommon, ConversionsMatchDtypeHpp) {
  constexpr std::size_t kPatterns = 65536;
  // Sized as if f32 (2x): g++ cannot see that the f32 branch of the converters is not taken.
  std::vector<std::uint16_t> half(2 * kPatterns);
  for (std::size_t i = 0; i < kPatterns; ++i) half[i] = static_cast<std::uint16_t>(i);
  std::vector<float> wide(kPatterns);
  std::vector<float> vals = {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f,
                             0x3p-26f, 0x1p-14f, 0x1.ffcp-15f, 1e-45f, 1.17549435e-38f, 3.3895314e38f,
                             std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(kSeed);
  for (int i = 0; i < 300001; ++i) vals.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  std::vector<std::uint16_t> narrow(2 * vals.size());
  for (DType t : {DType::f16, DType::bf16}) {
    cpu::to_float(half.data(), static_cast<cpu::Index>(kPatterns), t, wide.data());
    for (std::size_t i = 0; i < kPatterns; ++i) {
      const float want = t == DType::f16 ? f16_to_float(half[i]) : bf16_to_float(half[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(wide[i])) << to_string(t) << " pattern " << i;
      } else {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(wide[i]), std::bit_cast<std::uint32_t>(want)) << to_string(t) << " pattern " << i;
      }
    }
    cpu::from_float(vals.data(), static_cast<cpu::Index>(vals.size()), t, narrow.data());
    for (std::size_t i = 0; i < vals.size(); ++i) {
      const std::uint16_t want = t == DType::f16 ? float_to_f16(vals[i]) : float_to_bf16(vals[i]);
      if (std::isnan(vals[i])) {
        const float back = t == DType::f16 ? f16_to_float(narrow[i]) : bf16_to_float(narrow[i]);
        EXPECT_TRUE(std::isnan(back)) << to_string(t) << " value " << vals[i];
      } else {
        EXPECT_EQ(narrow[i], want) << to_string(t) << " value " << vals[i];
      }
    }
  }
}

// A workspace smaller than asked for is an error, not an overrun.
TEST(CpuImpls, RejectsTooSmallWorkspace) {
  for (const auto* impl : cpu_impls()) {
    if (!impl->capabilities().forward) continue;
    const Problem p = make_problem(1, 2, 2, 64, 64, 64, false, DType::f32);
    DirectRun r(p, kSeed);
    FwdArgs a;
    a.p = p;
    a.q = r.in.q.data();
    a.k = r.in.k.data();
    a.v = r.in.v.data();
    a.o = r.o.data();
    a.lse = r.lse.data();
    std::vector<std::uint8_t> ws(16);
    a.workspace = ws.data();
    a.workspace_bytes = ws.size();
    EXPECT_THROW(impl->forward(a), std::runtime_error) << impl->name();
  }
}

}  // namespace
