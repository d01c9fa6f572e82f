// Verification can fail: planted wrong implementations (tests/planted/) and proof that the
// harness catches each one, through check_impl and through the run loop (a FAIL row whose reason
// names the wrong output). The same shapes pass with the correct CPU implementations and with
// cpu.planted_control (the planted algorithm with no bug), so no check here is vacuous.
//
// Planted bugs: causal mask off by one, wrong GQA head mapping, LSE unwritten, LSE garbage,
// unscaled dQ/dK, one unwritten 16x16 tile of O, one wrong row far from the sampled rows
// (caught in sampled mode), a lost-update race that corrupts one row only sometimes, a sliding
// window one key too wide, and an ignored soft cap.
// A broken baseline cannot loosen the rule: where the naive baseline fails its absolute bound
// (issue 17's example: bf16 at scale 1e4, where S stored in bf16 cannot resolve the logits; in
// f16 the scores overflow to NaN), the others are held to that bound, and an error the broken
// baseline would have let through is caught.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnbench/check.hpp"
#include "attnbench/config.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/results.hpp"
#include "attnbench/runner.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/validation.hpp"
#include "attnbench/verify.hpp"
#include "check_impl.hpp"
#include "planted/planted.hpp"
#include "test_util.hpp"

namespace {

using namespace attnbench;
namespace fs = std::filesystem;
using Names = std::set<std::string>;
using test::make_problem;

constexpr std::uint64_t kSeed = 424242;

// Causal GQA shapes on which every planted bug shows: seq_q > seq_kv (early rows see no key) and
// seq_q < seq_kv, rows and head_dim past one 16x16 tile, odd sizes (tails), f32 and bf16.
std::vector<Problem> shapes() {
  return {make_problem(1, 4, 2, 40, 33, 32, true, DType::f32), make_problem(2, 8, 2, 37, 64, 64, true, DType::bf16),
          make_problem(1, 4, 2, 33, 33, 40, true, DType::f16)};
}

const Implementation& impl(const char* name) {
  const Implementation* i = Registry::instance().find(name);
  if (!i) throw std::runtime_error(std::string(name) + " is not registered in this test binary");
  return *i;
}

Names failed(const Verdict& v) {
  Names s;
  for (const auto& o : v.outputs) {
    if (!o.ok) s.insert(o.name);
  }
  return s;
}

std::string describe(const Verdict& v) {
  std::ostringstream s;
  for (const auto& o : v.outputs) {
    s << "  " << o.name << (o.ok ? " ok" : " FAIL") << " max_abs " << o.max_abs << " bound " << o.bound
      << " nonfinite " << o.nonfinite << (o.why.empty() ? "" : " (" + o.why + ")") << "\n";
  }
  return s.str();
}

// The verdict is not ok, exactly `wrong` failed, and failure() names each of them.
void expect_caught(const char* name, const Problem& p, Pass pass, const Names& wrong,
                   VerifyMode mode = VerifyMode::full, const Options& opts = {}) {
  const Verdict v = test::check_impl(impl(name), p, pass, kSeed, mode, opts);
  EXPECT_FALSE(v.ok) << name << " passed " << p.label() << " " << to_string(pass) << "\n" << describe(v);
  EXPECT_EQ(failed(v), wrong) << name << " " << p.label() << " " << to_string(pass) << "\n" << describe(v);
  const std::string f = v.failure();
  for (const auto& w : wrong) {
    EXPECT_NE(f.find(w + ": "), std::string::npos) << "failure() does not name " << w << ": " << f;
  }
}

void expect_ok(const char* name, const Problem& p, Pass pass, VerifyMode mode = VerifyMode::full) {
  const Verdict v = test::check_impl(impl(name), p, pass, kSeed, mode);
  EXPECT_TRUE(v.ok) << name << " " << p.label() << " " << to_string(pass) << "\n" << describe(v);
}

// ---- Not vacuous: the correct implementations pass the shapes the planted ones fail ----------

TEST(Planted, CorrectImplementationsPassTheSameShapes) {
  int checked = 0;
  for (const Problem& p : shapes()) {
    for (Pass pass : {Pass::fwd, Pass::bwd}) {
      for (const char* name : {"cpu.planted_control", "cpu.naive_3pass", "cpu.online_2pass", "cpu.flash_fwd",
                               "cpu.flash_bwd"}) {
        const Implementation* i = Registry::instance().find(name);
        if (!i || !i->supports(p, pass) || (pass == Pass::fwd && !i->capabilities().forward)) continue;
        expect_ok(name, p, pass);
        ++checked;
      }
    }
  }
  // Control and naive in both passes on every shape, at least.
  EXPECT_GE(checked, 4 * static_cast<int>(shapes().size()));
}

// ---- Each planted bug is caught, naming the wrong output --------------------------------------

TEST(Planted, CausalMaskOffByOne) {
  for (const Problem& p : shapes()) {
    expect_caught("cpu.planted_causal_off_by_one", p, Pass::fwd, {"O", "LSE"});
    expect_caught("cpu.planted_causal_off_by_one", p, Pass::bwd, {"dQ", "dK", "dV"});
  }
  // Without a causal mask the bug has nothing to act on: the same code passes.
  Problem open = shapes()[0];
  open.causal = false;
  expect_ok("cpu.planted_causal_off_by_one", open, Pass::fwd);
}

TEST(Planted, WrongGqaHeadMapping) {
  for (const Problem& p : shapes()) {
    expect_caught("cpu.planted_gqa_mapping", p, Pass::fwd, {"O", "LSE"});
    expect_caught("cpu.planted_gqa_mapping", p, Pass::bwd, {"dQ", "dK", "dV"});
  }
  // MHA and MQA: both maps agree, so these pass (why the shapes above are GQA).
  expect_ok("cpu.planted_gqa_mapping", make_problem(1, 4, 4, 17, 17, 32, true, DType::f32), Pass::fwd);
  expect_ok("cpu.planted_gqa_mapping", make_problem(1, 4, 1, 17, 17, 32, true, DType::f32), Pass::fwd);
}

TEST(Planted, MissingLse) {
  for (const Problem& p : shapes()) {
    expect_caught("cpu.planted_lse_unwritten", p, Pass::fwd, {"LSE"});
    expect_caught("cpu.planted_lse_garbage", p, Pass::fwd, {"LSE"});
  }
  // An unwritten LSE is reported as unwritten (NaN poison), not as a large error.
  const Verdict v = test::check_impl(impl("cpu.planted_lse_unwritten"), shapes()[0], Pass::fwd, kSeed);
  const auto lse = std::find_if(v.outputs.begin(), v.outputs.end(), [](const auto& o) { return o.name == "LSE"; });
  ASSERT_NE(lse, v.outputs.end());
  EXPECT_EQ(lse->nonfinite, shapes()[0].lse_elems());
}

TEST(Planted, UnscaledGradients) {
  for (const Problem& p : shapes()) {
    expect_caught("cpu.planted_unscaled_grads", p, Pass::bwd, {"dQ", "dK"});  // dV has no scale
    expect_ok("cpu.planted_unscaled_grads", p, Pass::fwd);
  }
}

TEST(Planted, OneUnwrittenTile) {
  for (const Problem& p : shapes()) {
    const Verdict v = test::check_impl(impl("cpu.planted_unwritten_tile"), p, Pass::fwd, kSeed);
    EXPECT_FALSE(v.ok) << p.label();
    EXPECT_EQ(failed(v), Names{"O"}) << describe(v);
    // Exactly the 16x16 tile is reported as unwritten.
    EXPECT_EQ(v.outputs.at(0).name, "O");
    EXPECT_EQ(v.outputs.at(0).nonfinite, 16 * 16) << describe(v);
  }
}

// A row the sampled reference does not look at is still caught: sampled mode compares every
// element with the same-device naive baseline ("O~naive").
TEST(Planted, WrongRowFarFromTheSampledRowsIsCaughtInSampledMode) {
  const Problem p = make_problem(1, 8, 2, 256, 256, 32, false, DType::f32);
  const planted::FarRow far = planted::far_row_of(p);
  const std::int64_t first = ((static_cast<std::int64_t>(far.batch) * p.seq_q + far.row) * p.heads_q + far.head) * p.head_dim;
  const CaseInputs in = make_inputs(p, kSeed);
  const Reference ref = compute_reference(in, VerifyMode::sampled, true, false, kSeed);
  ASSERT_EQ(ref.mode, VerifyMode::sampled);
  for (std::int64_t i : ref.o.idx) {
    ASSERT_FALSE(i >= first && i < first + p.head_dim) << "the seed samples the planted row; pick another seed";
  }
  const Verdict v = test::check_impl(impl("cpu.planted_far_row"), p, Pass::fwd, kSeed, VerifyMode::sampled);
  EXPECT_FALSE(v.ok) << describe(v);
  EXPECT_EQ(failed(v), Names{"O~naive"}) << describe(v);  // the sampled "O" itself looks fine
  EXPECT_NE(v.failure().find("O~naive: "), std::string::npos);
  expect_ok("cpu.planted_control", p, Pass::fwd, VerifyMode::sampled);
  expect_caught("cpu.planted_far_row", p, Pass::fwd, {"O"}, VerifyMode::full);
}

// ---- The race: caught whenever it corrupts, whatever the schedule ----------------------------

TEST(Planted, RaceThatCorruptsOneRowSometimes) {
  const Problem p = make_problem(1, 2, 1, 16, 256, 32, false, DType::f32);
  constexpr int kRuns = 20;
  int corrupted = 0;
  for (int run = 0; run < kRuns; ++run) {
    const Verdict v = test::check_impl(impl("cpu.planted_race"), p, Pass::fwd, kSeed);
    const int lost = planted::race_last_lost();
    // The assertion does not depend on the schedule: a corrupted run fails, a clean one passes.
    if (lost > 0) {
      ++corrupted;
      EXPECT_FALSE(v.ok) << "run " << run << " lost " << lost << " chunk(s) and passed\n" << describe(v);
      EXPECT_EQ(failed(v), (Names{"O", "LSE"})) << describe(v);
    } else {
      EXPECT_TRUE(v.ok) << "run " << run << " lost nothing and failed\n" << describe(v);
    }
  }
  std::cout << "[ race     ] " << corrupted << " of " << kRuns << " runs corrupted a row; each one caught\n";
  RecordProperty("corrupted_runs", corrupted);
  // Forced interleaving: a lost update every time, caught every time.
  Options force{{"force", 1}};
  for (int run = 0; run < 5; ++run) {
    const Verdict v = test::check_impl(impl("cpu.planted_race"), p, Pass::fwd, kSeed, VerifyMode::full, force);
    ASSERT_GT(planted::race_last_lost(), 0);
    EXPECT_FALSE(v.ok);
    EXPECT_EQ(failed(v), (Names{"O", "LSE"})) << describe(v);
  }
}

// ---- attnbench check: the conformance suite fails every planted bug ---------------------------
// run_check (check.hpp) as `attnbench check --impl NAME --case ...` runs it, on one shape of the
// suite (GQA 8:2, causal, 65 rows, head_dim 64) in f32 and bf16: exit code 1, a FAIL line that
// names the implementation, a FAIL summary line. The control passes them with exit code 0. (The
// race is left out: check has no options, so it would corrupt a row only sometimes.)

struct CheckRun {
  int rc;
  std::string out, err;
};

CheckRun check(std::vector<std::string> impls, std::vector<std::string> cases = {}, std::string device = {}) {
  CheckOptions o;
  o.impls = std::move(impls);
  o.cases = std::move(cases);
  o.device = std::move(device);
  o.quiet = true;
  std::ostringstream out, err;
  const int rc = run_check(o, out, err);
  return {rc, out.str(), err.str()};
}

// Whether a line of out starts with prefix ("FAIL " must not match an "XFAIL " line).
bool has_line(const std::string& out, const std::string& prefix) {
  return out.rfind(prefix, 0) == 0 || out.find("\n" + prefix) != std::string::npos;
}

const std::vector<std::string> kCheckCases = {"b1_hq8_hkv2_sq65_skv65_d64_causal_f32",
                                              "b1_hq8_hkv2_sq65_skv65_d64_causal_bf16"};

TEST(PlantedCheck, CheckFailsEveryPlantedBug) {
  for (const char* name : {"cpu.planted_causal_off_by_one", "cpu.planted_gqa_mapping", "cpu.planted_lse_unwritten",
                           "cpu.planted_lse_garbage", "cpu.planted_unscaled_grads", "cpu.planted_unwritten_tile",
                           "cpu.planted_far_row"}) {
    const CheckRun r = check({name}, kCheckCases);
    EXPECT_EQ(r.rc, 1) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("FAIL ") + name + " "), std::string::npos) << name << "\n" << r.out;
    EXPECT_NE(r.out.find("attnbench check: FAIL: 1 implementation, "), std::string::npos) << r.out;
  }
}

// The conformance suite's sliding-window and soft-capping cases (group window_softcap): the window
// one key too wide and the ignored soft cap each fail them, and the control passes them (its
// window and cap are the reference's).
const std::vector<std::string> kWindowCases = {"*_f32_wl*", "*_bf16_wl*"};
const std::vector<std::string> kSoftcapCases = {"*_f32*_softcap*", "*_bf16*_softcap*"};

TEST(PlantedCheck, CheckFailsTheWindowAndSoftcapBugs) {
  for (const auto& [name, cases] : {std::pair{"cpu.planted_window_off_by_one", kWindowCases},
                                    std::pair{"cpu.planted_softcap_ignored", kSoftcapCases}}) {
    const CheckRun r = check({name}, cases);
    EXPECT_EQ(r.rc, 1) << name << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find(std::string("FAIL ") + name + " "), std::string::npos) << name << "\n"
                                                                                << r.out;
  }
  // The soft cap's derivative forgotten in the backward: its backward rows (bwd, fwd_bwd) fail,
  // its forward rows pass (the forward is right).
  const CheckRun nd = check({"cpu.planted_softcap_no_derivative"}, kSoftcapCases);
  EXPECT_EQ(nd.rc, 1) << nd.out << nd.err;
  EXPECT_TRUE(has_line(nd.out, "FAIL cpu.planted_softcap_no_derivative bwd ")) << nd.out;
  EXPECT_TRUE(has_line(nd.out, "FAIL cpu.planted_softcap_no_derivative fwd_bwd ")) << nd.out;
  EXPECT_FALSE(has_line(nd.out, "FAIL cpu.planted_softcap_no_derivative fwd ")) << nd.out;
  // Every case of the group (93 with the passes), each dtype, right-only windows too: all run
  // and pass; only the backward of the paged group's windowed cache SKIPs (forward-only: 2
  // passes x 3 dtypes).
  const CheckRun control = check({"cpu.planted_control"}, {"*_wl*", "*_wr*", "*_softcap*"});
  EXPECT_EQ(control.rc, 0) << control.out << control.err;
  EXPECT_EQ(control.out.find("FAIL"), std::string::npos) << control.out;
  EXPECT_EQ(control.out.find(" 0 passed"), std::string::npos) << control.out;
  EXPECT_NE(control.out.find(" 0 failed, 6 skipped"), std::string::npos) << control.out;
}

TEST(PlantedCheck, ControlPassesTheSameCases) {
  const CheckRun r = check({"cpu.planted_control"}, kCheckCases);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attnbench check: PASS: 1 implementation, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" 0 failed, 0 skipped; planted faults caught "), std::string::npos) << r.out;
}

// The conformance suite's variable-length batches (group varlen): a wrong sequence offset (sequence
// b reads its keys at sequence b - 1's offset) fails them, in every dtype and pass, and the control
// (the same algorithm with the right offsets) passes every one of them.
// The varlen group's labels end in the lengths' hash (8 hex digits); the paged group's ragged
// batches, which also carry "_varlen_", end in their page suffix.
const std::string kVarlenGroup = "*_varlen_*_[0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]";

TEST(PlantedCheck, CheckFailsTheWrongSequenceOffset) {
  const CheckRun r = check({"cpu.planted_varlen_wrong_offset"}, {kVarlenGroup});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  // Every case fails: 5 batches x 3 dtypes x 3 passes.
  EXPECT_NE(r.out.find(" 0 passed, 45 failed, 0 skipped"), std::string::npos) << r.out;
  for (const char* pass : {"fwd", "bwd", "fwd_bwd"}) {
    EXPECT_TRUE(has_line(r.out, std::string("FAIL cpu.planted_varlen_wrong_offset ") + pass + " "))
        << pass << "\n"
        << r.out;
  }
  const CheckRun control = check({"cpu.planted_control"}, {kVarlenGroup});
  EXPECT_EQ(control.rc, 0) << control.out << control.err;
  EXPECT_EQ(control.out.find("FAIL"), std::string::npos) << control.out;
  EXPECT_NE(control.out.find(" 45 passed, 0 failed, 0 skipped"), std::string::npos) << control.out;
}

// The conformance suite's paged KV caches (group paged, forward only): a kernel that ignores the
// block table (cpu.planted_paged_wrong_page) fails every forward case in every dtype; the backward
// passes SKIP (paged problems are forward-only); the control passes every forward case.
TEST(PlantedCheck, CheckFailsTheWrongPage) {
  const CheckRun r = check({"cpu.planted_paged_wrong_page"}, {"*_page*"});
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  // 5 caches x 3 dtypes: fwd fails; bwd and fwd_bwd SKIP.
  EXPECT_NE(r.out.find(" 0 passed, 15 failed, 30 skipped"), std::string::npos) << r.out;
  EXPECT_TRUE(has_line(r.out, "FAIL cpu.planted_paged_wrong_page fwd ")) << r.out;
  const CheckRun control = check({"cpu.planted_control"}, {"*_page*"});
  EXPECT_EQ(control.rc, 0) << control.out << control.err;
  EXPECT_EQ(control.out.find("FAIL"), std::string::npos) << control.out;
  EXPECT_NE(control.out.find(" 15 passed, 0 failed, 30 skipped"), std::string::npos) << control.out;
}

// Known failures (Capabilities::known_failures, tests/planted/known_failure.cpp): a listed case
// that fails is an expected failure (XFAIL line, exit 0); a listed case that passes fails the
// check, naming the stale entry.
TEST(PlantedCheck, ListedKnownFailureIsExpectedWhileItFails) {
  const CheckRun r = check({"cpu.planted_known_failure"}, kCheckCases);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_FALSE(has_line(r.out, "FAIL ")) << r.out;
  EXPECT_NE(r.out.find("XFAIL cpu.planted_known_failure fwd b1_hq8_hkv2_sq65_skv65_d64_causal_bf16"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("known failure (planted: the causal mask is off by one on these cases): "),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attnbench check: PASS: 1 implementation, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" expected failures; "), std::string::npos) << r.out;
}

TEST(PlantedCheck, ListedKnownFailureThatPassesFails) {
  const CheckRun r = check({"cpu.planted_stale_known_failure"}, kCheckCases);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_TRUE(has_line(r.out, "FAIL cpu.planted_stale_known_failure fwd b1_hq8_hkv2_sq65_skv65_d64_causal_f32")) << r.out;
  EXPECT_NE(r.out.find("but passed: an upstream fix?"), std::string::npos) << r.out;
}

// An implementation that stores S and P in the dtype (Capabilities::scores_in_dtype: the naive
// baseline here) beyond that dtype (bf16 at scale 1e8) fails its absolute bound by construction:
// an expected failure with the reason, not a silent pass and not a failure. In f32 the same shape
// passes.
TEST(PlantedCheck, ScoresInTheDtypeBeyondItIsAnExpectedFailure) {
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  ASSERT_NE(naive, nullptr);
  EXPECT_TRUE(naive->capabilities().scores_in_dtype);
  const CheckRun r = check({"cpu.naive_3pass"}, {"b1_hq2_hkv1_sq64_skv64_d64_bf16_scale1e+08",
                                                 "b1_hq2_hkv1_sq64_skv64_d64_f32_scale1e+08"});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("XFAIL cpu.naive_3pass fwd b1_hq2_hkv1_sq64_skv64_d64_bf16_scale1e+08 [large_scale]: "
                       "S and P stored in bf16, which cannot resolve these logits"),
            std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("_f32_scale1e+08 [large_scale]"), std::string::npos) << "f32 passes: " << r.out;
  EXPECT_FALSE(has_line(r.out, "FAIL ")) << r.out;
}

// Bad selections: exit code 2, nothing checked, a line naming the option and the value.
TEST(PlantedCheck, BadSelectionsExit2NamingTheValue) {
  struct Bad {
    CheckRun r;
    std::string says;
  };
  const Bad bad[] = {
      {check({"cpu.planted_control"}, kCheckCases, "gpu"), "--device gpu: unknown device"},
      {check({"cpu.planted_control", "cpu.plantd_*"}, kCheckCases), "--impl 'cpu.plantd_*': matches no"},
      {check({"cpu.planted_control"}, kCheckCases, "cuda"), "--impl 'cpu.planted_control' on --device cuda"},
      {check({"cpu.planted_control"}, {"b9_*"}), "--case 'b9_*': matches none"},
  };
  for (const Bad& b : bad) {
    EXPECT_EQ(b.r.rc, 2) << b.says << "\n" << b.r.out << b.r.err;
    EXPECT_EQ(b.r.out, "") << b.says;
    EXPECT_NE(b.r.err.find("attnbench check: " + b.says), std::string::npos) << b.r.err;
  }
}

// ---- The run loop: FAIL rows that name the output ---------------------------------------------

class PlantedRun : public ::testing::Test {
 protected:
  fs::path dir_;
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnbench_planted_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the config through run_config (profile: one call per row, no timing) and returns the
  // results file's rows. rc: the exit code.
  nlohmann::json run(const std::string& text, int& rc) {
    const ConfigResult parsed = parse_config(text);
    if (const auto* e = std::get_if<ConfigError>(&parsed)) {
      ADD_FAILURE() << e->text();
      return {};
    }
    RunOptions ro;
    ro.out_path = (dir_ / "results.json").string();
    ro.profile = true;
    ro.quiet = true;
    std::ostringstream out, err;
    rc = run_config(std::get<Config>(parsed), ro, out, err);
    const nlohmann::json j = read_results_json(ro.out_path);
    EXPECT_TRUE(j["complete"].get<bool>());
    return j["rows"];
  }
};

TEST_F(PlantedRun, EveryPlantedBugIsAFailRowNamingTheOutput) {
  // impl -> pass -> outputs the reason must name ("" = must pass; absent pass = not run).
  const std::map<std::string, std::map<std::string, std::vector<std::string>>> expect = {
      {"cpu.planted_control", {{"fwd", {}}, {"bwd", {}}}},
      {"cpu.naive_3pass", {{"fwd", {}}, {"bwd", {}}}},
      {"cpu.planted_causal_off_by_one", {{"fwd", {"O", "LSE"}}, {"bwd", {"dQ", "dK", "dV"}}}},
      {"cpu.planted_gqa_mapping", {{"fwd", {"O", "LSE"}}, {"bwd", {"dQ", "dK", "dV"}}}},
      {"cpu.planted_lse_unwritten", {{"fwd", {"LSE"}}, {"bwd", {}}}},
      {"cpu.planted_lse_garbage", {{"fwd", {"LSE"}}, {"bwd", {}}}},
      {"cpu.planted_unscaled_grads", {{"fwd", {}}, {"bwd", {"dQ", "dK"}}}},
      {"cpu.planted_unwritten_tile", {{"fwd", {"O"}}, {"bwd", {}}}},
      {"cpu.planted_far_row", {{"fwd", {"O"}}, {"bwd", {}}}},
      {"cpu.planted_race", {{"fwd", {"O", "LSE"}}}},  // forced lost update; no backward (SKIP)
  };
  std::string impls;
  for (const auto& [name, _] : expect) impls += (impls.empty() ? "\"" : ", \"") + name + "\"";
  int rc = -1;
  const nlohmann::json rows = run(R"({"name": "planted", "implementations": [)" + impls + R"(],
      "passes": ["fwd", "bwd"], "verify": {"mode": "full"}, "options": {"cpu.planted_race": {"force": 1}},
      "sweep": {"zip": [{"batch": [1, 2], "heads_q": [4, 8], "heads_kv": [2, 2], "seq_q": [40, 37],
                         "seq_kv": [33, 64], "head_dim": [32, 64], "causal": [true, true], "dtype": ["f32", "bf16"]}]}})",
                                  rc);
  EXPECT_EQ(rc, 1) << "a failed row must give exit code 1";
  int fails = 0, passes = 0;
  for (const auto& row : rows) {
    const std::string name = row["impl"], pass = row["pass"], status = row["status"], reason = row["reason"];
    const auto& per_pass = expect.at(name);
    const auto it = per_pass.find(pass);
    if (it == per_pass.end()) {
      EXPECT_EQ(status, "skip") << name << " " << pass;
      continue;
    }
    if (it->second.empty()) {
      EXPECT_EQ(status, "pass") << name << " " << pass << " " << row["case"] << ": " << reason;
      ++passes;
      continue;
    }
    EXPECT_EQ(status, "fail") << name << " " << pass << " " << row["case"];
    ++fails;
    for (const auto& out : it->second) {
      EXPECT_NE(reason.find(out + ": "), std::string::npos) << name << " " << pass << ": reason does not name " << out << ": " << reason;
    }
    // The row carries the per-output report that says which output failed.
    bool some_output_failed = false;
    for (const auto& o : row["verify"]["outputs"]) some_output_failed = some_output_failed || !o["ok"].get<bool>();
    EXPECT_TRUE(some_output_failed) << name << " " << pass;
  }
  EXPECT_EQ(fails, 2 * 10);  // 10 (impl, pass) pairs with a bug, 2 cases
  EXPECT_EQ(passes, 2 * 9);  // 9 correct (impl, pass) pairs, 2 cases
}

TEST_F(PlantedRun, SampledRunCatchesTheFarRow) {
  int rc = -1;
  const nlohmann::json rows = run(R"({"name": "far", "implementations": ["cpu.planted_far_row", "cpu.planted_control"],
      "passes": ["fwd"], "verify": {"mode": "sampled"}, "inputs": {"seed": 424242},
      "problem": {"batch": 1, "heads_q": 8, "heads_kv": 2, "seq": 256, "head_dim": 32, "dtype": "f32"}})",
                                  rc);
  EXPECT_EQ(rc, 1);
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["verify"]["mode"], "sampled");
    if (row["impl"] == "cpu.planted_far_row") {
      EXPECT_EQ(row["status"], "fail");
      EXPECT_NE(row["reason"].get<std::string>().find("O~naive: "), std::string::npos) << row["reason"];
    } else {
      EXPECT_EQ(row["status"], "pass") << row["reason"];
    }
  }
}

// ---- A broken baseline cannot loosen the rule ---------------------------------------------------

// Issue 17's example: --seq-q 70 --seq-kv 90 --heads-q 4 --heads-kv 2 --scale 10000 (head_dim 64).
struct BaselineCase {
  Problem p;
  CaseInputs in;
  Reference ref;
  Outputs naive, flash;
  explicit BaselineCase(DType t)
      : p(make_problem(1, 4, 2, 70, 90, 64, false, t, 10000)),
        in(make_inputs(p, 1234)),
        ref(compute_reference(in, VerifyMode::full, true, false, 1234)),
        naive(validation_call(impl("cpu.naive_3pass"), p, Pass::fwd, {}, in, ref, "naive").outputs),
        flash(
            validation_call(impl("cpu.flash_fwd"), p, Pass::fwd, {}, in, ref, "flash").outputs) {}
};

// A string_view, not a const std::string&: with a temporary string for the name, g++ 13 warns
// that the returned reference may dangle (-Wdangling-reference).
const OutputReport& output(const Verdict& v, std::string_view name) {
  for (const auto& o : v.outputs) {
    if (o.name == name) return o;
  }
  throw std::runtime_error("no output " + std::string(name));
}

// bf16: the naive's O error (1.93, about half of max|O|) used to set a bound of 3.9 for every
// implementation. Now the naive's own row fails its absolute bound, the others are held to that
// bound, and an O off by 1.0 at one element (inside the old bound) fails.
TEST(BrokenBaseline, NaiveOutsideItsAbsoluteBoundFailsAndCannotLoosenTheRule) {
  const BaselineCase c(DType::bf16);
  const Verdict naive = verify(c.p, Pass::fwd, c.naive, &c.naive, c.ref);
  const OutputReport& no = output(naive, "O");
  EXPECT_FALSE(naive.ok) << describe(naive);
  EXPECT_FALSE(no.ok);
  EXPECT_FALSE(no.naive_ok);
  EXPECT_GT(no.max_abs, 1.0) << "the example's naive O error is about 1.93";
  EXPECT_LT(no.abs_bound, 0.6);
  EXPECT_EQ(no.bound, no.abs_bound);
  EXPECT_NE(no.why.find("absolute bound"), std::string::npos) << no.why;
  EXPECT_TRUE(output(naive, "LSE").ok)
      << "its LSE is within u(bf16) of the reference: " << describe(naive);

  const Verdict flash = verify(c.p, Pass::fwd, c.flash, &c.naive, c.ref);
  EXPECT_TRUE(flash.ok) << describe(flash);
  EXPECT_EQ(output(flash, "O").bound, output(flash, "O").abs_bound) << "held to the absolute bound";
  EXPECT_LT(output(flash, "O").bound, 0.6);

  Outputs wrong = c.flash;
  wrong.o.set(17, static_cast<float>(wrong.o.get(17) + 1.0));
  const Verdict w = verify(c.p, Pass::fwd, wrong, &c.naive, c.ref);
  EXPECT_FALSE(w.ok) << "an O error of 1.0 passed: the broken baseline loosened the rule\n"
                     << describe(w);
  EXPECT_EQ(failed(w), (Names{"O"})) << describe(w);
  EXPECT_NE(w.failure().find("the naive baseline fails it: naive 1.9"), std::string::npos)
      << w.failure();
}

// f16: the scores overflow f16 and the naive writes NaN. It is reported as NaN (never as a naive
// error of 0, which shrank the bound to atol: "bound 3e-48"), and the others are held to the
// absolute bound.
TEST(BrokenBaseline, NonFiniteNaiveIsReportedAndTheAbsoluteBoundHolds) {
  const BaselineCase c(DType::f16);
  const Verdict naive = verify(c.p, Pass::fwd, c.naive, &c.naive, c.ref);
  EXPECT_FALSE(naive.ok);
  for (const char* name : {"O", "LSE"}) {
    const OutputReport& o = output(naive, name);
    EXPECT_GT(o.naive_nonfinite, 0) << name;
    EXPECT_FALSE(o.naive_ok) << name;
    EXPECT_TRUE(std::isinf(o.naive_max_abs)) << name << ": " << o.naive_max_abs;
  }
  const Verdict flash = verify(c.p, Pass::fwd, c.flash, &c.naive, c.ref);
  EXPECT_TRUE(flash.ok) << describe(flash);
  for (const auto& o : flash.outputs) {
    EXPECT_EQ(o.bound, o.abs_bound) << o.name;
    EXPECT_GT(o.bound, o.atol) << o.name << ": the bound shrank to atol";
  }
  Outputs wrong = c.flash;
  wrong.o.set(3, static_cast<float>(wrong.o.get(3) + 1.0));
  const Verdict w = verify(c.p, Pass::fwd, wrong, &c.naive, c.ref);
  EXPECT_FALSE(w.ok);
  const std::string f = w.failure();
  EXPECT_NE(f.find("element(s) NaN/Inf"), std::string::npos) << f;
  EXPECT_EQ(f.find("naive 0"), std::string::npos) << f;
}

// The bound is loose enough for the honest naive in the regime it is derived for: the planted
// shapes (normal inputs, default scale) in every dtype and pass, and outlier inputs.
TEST(BrokenBaseline, HonestNaiveMeetsItsAbsoluteBound) {
  for (const Problem& p : shapes()) {
    for (Pass pass : {Pass::fwd, Pass::bwd, Pass::fwd_bwd}) {
      for (Distribution dist : {Distribution::normal, Distribution::outlier}) {
        const Verdict v =
            test::check_impl(impl("cpu.naive_3pass"), p, pass, kSeed, VerifyMode::full, {}, dist);
        EXPECT_TRUE(v.ok) << p.label() << " " << to_string(pass) << "\n" << describe(v);
        for (const auto& o : v.outputs) EXPECT_TRUE(o.naive_ok) << p.label() << " " << o.name;
      }
    }
  }
}

}  // namespace

// Not a planted bug, but the same module's other promise: a long reference says what it is doing
// (issue 17: minutes of sampled backward reference with nothing printed). min_work 0 makes this
// small one "long".
TEST(ReferenceProgress, LongReferenceSaysEachStepAndItsTime) {
  const Problem p = make_problem(2, 4, 2, 40, 50, 16, false, DType::f32);
  const CaseInputs in = make_inputs(p, kSeed);
  std::vector<std::string> lines;
  ReferenceProgress told;
  told.line = [&](const std::string& l) { lines.push_back(l); };
  told.min_work = 0;
  const SampleSpec spec{2, 8};
  const Reference ref = compute_reference(in, VerifyMode::sampled, true, true, kSeed, spec, told);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  // Two sampled query heads, two kv heads' backward, each followed by its time.
  ASSERT_EQ(lines.size(), 8u) << all;
  EXPECT_NE(lines[0].find("reference: sampled rows of (batch "), std::string::npos) << all;
  EXPECT_NE(lines[0].find(", 1/2 ("), std::string::npos) << all;
  EXPECT_NE(lines[4].find("reference: backward of (batch "), std::string::npos) << all;
  EXPECT_NE(lines[6].find("and its 2 query head(s), 2/2"), std::string::npos) << all;
  for (std::size_t i = 1; i < lines.size(); i += 2)
    EXPECT_EQ(lines[i].rfind("reference: done in ", 0), 0u) << all;
  // The same reference as without progress, and nothing said for a short one by default.
  const Reference quiet = compute_reference(in, VerifyMode::sampled, true, true, kSeed, spec);
  EXPECT_EQ(quiet.dk.val, ref.dk.val);
  lines.clear();
  told.min_work = ReferenceProgress{}.min_work;
  compute_reference(in, VerifyMode::full, true, true, kSeed, spec, told);
  EXPECT_TRUE(lines.empty()) << lines.front();
  told.min_work = 0;
  compute_reference(in, VerifyMode::full, true, true, kSeed, spec, told);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find("reference: full forward"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("reference: full backward"), std::string::npos) << lines[2];
}

// Sampled mode copies to float64 only what its (sequence, kv head) pairs read (verify.cpp,
// SampledInputs): with the rest of the copies NaN, each sampled value is bitwise the full
// reference's at its index, for dense, GQA and MQA problems (forward and backward) and paged ones
// (forward: decode, and speculative decoding against a cache). A read of an element it did not
// copy gives NaN there.
TEST(ReferenceProgress, SampledReadsOnlyWhatItCopiesAndMatchesFull) {
  struct Poison {
    Poison() { detail::poison_float64_copies = true; }
    ~Poison() { detail::poison_float64_copies = false; }
  } poison;
  auto paged = [](Problem p, int page_size) {
    p.page_size = page_size;
    p.page_order = PageOrder::shuffled;
    p.make_block_table();
    return p;
  };
  const std::vector<std::pair<Problem, bool>> cases = {
      {make_problem(3, 4, 4, 40, 50, 16, false, DType::bf16), true},
      {make_problem(2, 8, 2, 33, 17, 40, true, DType::f16), true},  // GQA 8:2, seq_q > seq_kv
      {make_problem(2, 6, 1, 17, 70, 32, true, DType::f32), true},  // MQA, seq_q < seq_kv
      {paged(make_problem(3, 8, 2, 1, 300, 64, true, DType::bf16), 16), false},
      {paged(make_problem(2, 4, 1, 4, 129, 32, true, DType::bf16), 64), false},
  };
  const SampleSpec spec{2, 8};
  for (const auto& [p, bwd] : cases) {
    SCOPED_TRACE(p.label());
    const CaseInputs in = make_inputs(p, kSeed);
    const Reference s = compute_reference(in, VerifyMode::sampled, true, bwd, kSeed, spec);
    const Reference f = compute_reference(in, VerifyMode::full, true, bwd, kSeed, spec);
    ASSERT_EQ(s.mode, VerifyMode::sampled);
    ASSERT_EQ(f.mode, VerifyMode::full);
    std::vector<std::pair<const RefOutput*, const RefOutput*>> outs = {{&s.o, &f.o},
                                                                        {&s.lse, &f.lse}};
    if (bwd) outs.insert(outs.end(), {{&s.dq, &f.dq}, {&s.dk, &f.dk}, {&s.dv, &f.dv}});
    for (const auto& [so, fo] : outs) {
      ASSERT_FALSE(so->idx.empty());
      ASSERT_EQ(so->idx.size(), so->val.size());
      int bad = 0;
      for (std::size_t i = 0; i < so->idx.size(); ++i) {
        const double want = fo->val.at(static_cast<std::size_t>(so->idx[i]));
        if (!(so->val[i] == want) && ++bad <= 3)
          ADD_FAILURE() << "element " << so->idx[i] << ": sampled " << so->val[i] << ", full "
                        << want;
      }
      EXPECT_EQ(bad, 0);
    }
    EXPECT_EQ(s.floor_dq, f.floor_dq);
    EXPECT_EQ(s.floor_dk, f.floor_dk);
    EXPECT_GT(s.lse_abs_max, 0.0);
  }
}

// The host memory a case's inputs and reference need, asked before they are made, is at least
// what they hold: the inputs, the float64 copies, and the reference's values.
TEST(ReferenceProgress, HostMemoryEstimateCoversWhatTheReferenceHolds) {
  const Problem p = make_problem(1, 8, 2, 300, 200, 64, false, DType::bf16);
  const CaseInputs in = make_inputs(p, kSeed);
  for (const VerifyMode mode : {VerifyMode::full, VerifyMode::sampled}) {
    const Reference ref = compute_reference(in, mode, true, true, kSeed);
    std::int64_t held = 2 * (p.q_bytes() + p.kv_bytes()) + 8 * (2 * p.q_elems() + 2 * p.kv_elems());
    for (const RefOutput* r : {&ref.o, &ref.lse, &ref.dq, &ref.dk, &ref.dv}) {
      held += static_cast<std::int64_t>(r->val.size() * sizeof(double) +
                                        r->idx.size() * sizeof(std::int64_t));
    }
    EXPECT_GE(reference_host_bytes(p, mode, true, true), held)
        << (mode == VerifyMode::full ? "full" : "sampled");
  }
  // Off: the inputs only.
  EXPECT_EQ(reference_host_bytes(p, VerifyMode::off, true, true), 2 * (p.q_bytes() + p.kv_bytes()));
}
