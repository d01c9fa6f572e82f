// attnbench compare: the regression rules of compare.hpp on small planted results files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/compare.hpp"
#include "attnbench/results.hpp"

namespace attnbench {
namespace {

using nlohmann::json;

json context(const std::string& device = "NVIDIA H200") {
  return {{"date", "2026-11-29T10:42:13Z"},
          {"cpu", "Test CPU"},
          {"compiler", "GNU 12.2.0"},
          {"build_type", "Release"},
          {"git_revision", "abc123def4567890"},
          {"git_dirty", false},
          {"devices", json::array({{{"name", device},
                                    {"index", 0},
                                    {"sms", 132},
                                    {"sm_clock_mhz", 1980},
                                    {"mem_clock_mhz", 3201}}})},
          {"config_name", "smoke"},
          {"config_hash", "0123456789abcdef"},
          {"seed", 1234}};
}

json row(int seq, const std::string& impl, double median_ms, double cv = 0.01,
         const std::string& status = "pass", double o_err = 1e-3) {
  const std::string label =
      "b1_hq8_hkv8_sq" + std::to_string(seq) + "_skv" + std::to_string(seq) + "_d64_bf16";
  json r = {
      {"case", label},
      {"case_index", 0},
      {"problem",
       {{"batch", 1},
        {"heads_q", 8},
        {"heads_kv", 8},
        {"seq_q", seq},
        {"seq_kv", seq},
        {"head_dim", 64},
        {"causal", false},
        {"scale", 0.125},
        {"dtype", "bf16"}}},
      {"options", json::object()},
      {"impl", impl},
      {"device", "cuda:0"},
      {"pass", "fwd"},
      {"status", status},
      {"reason", status == "pass" ? "" : "planted"},
      {"verify",
       {{"mode", "full"},
        {"outputs",
         json::array({{{"name", "O"},
                       {"max_abs", o_err},
                       {"rel_l2", o_err / 4},
                       {"atol", 4e-3},
                       {"ok", status != "fail"}},
                      {{"name", "LSE"}, {"max_abs", 2e-6}, {"atol", 1e-6}, {"ok", true}}})}}}};
  if (status != "skip") {
    r["time"] = {{"median_ms", median_ms},
                 {"min_ms", median_ms * (1 - cv)},
                 {"mean_ms", median_ms},
                 {"cv", cv},
                 {"repetitions", 5},
                 {"iterations", 20},
                 {"hot", false}};
  }
  return r;
}

json results(json rows, json ctx = context()) {
  return {{"schema", kResultsSchema},
          {"complete", true},
          {"stop_reason", ""},
          {"context", std::move(ctx)},
          {"rows", std::move(rows)}};
}

json two_impls() {
  json rows = json::array();
  for (int seq : {512, 1024, 2048}) {
    rows.push_back(row(seq, "cuda.standard_cublas", seq / 256.0));
    rows.push_back(row(seq, "cuda.flash_fwd", seq / 1024.0));
  }
  return results(rows);
}

struct Outcome {
  int code;
  std::string out, err;
};

class Compare : public ::testing::Test {
 protected:
  std::filesystem::path dir;
  void SetUp() override {
    dir = std::filesystem::path(::testing::TempDir()) /
          ("attnbench_compare_" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  std::string write(const std::string& name, const std::string& text) {
    const auto p = dir / name;
    std::ofstream(p) << text;
    return p.string();
  }
  Outcome run(const json& base, const json& next, CompareOptions o = {}) {
    o.base = write("base.json", base.dump(2));
    o.next = write("new.json", next.dump(2));
    return run_files(o);
  }
  Outcome run_files(const CompareOptions& o) {
    std::ostringstream out, err;
    const int code = run_compare(o, out, err);
    return {code, out.str(), err.str()};
  }
};

TEST_F(Compare, IdenticalFilesPass) {
  const Outcome r = run(two_impls(), two_impls());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("6 matched, 0 regressed"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("WARNING"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("REGRESSED"), std::string::npos) << r.out;
}

TEST_F(Compare, PlantedTwentyPercentSlowdownFails) {
  json next = two_impls();
  for (const char* k : {"median_ms", "min_ms", "mean_ms"})
    next["rows"][3]["time"][k] = next["rows"][3]["time"][k].get<double>() * 1.2;
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("REGRESSED: slower"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.200"), std::string::npos) << r.out;  // new/base column
  EXPECT_NE(r.out.find("1 regressed"), std::string::npos) << r.out;
}

TEST_F(Compare, SmallNoiseWithinThresholdPasses) {
  json next = two_impls();
  for (auto& r : next["rows"])
    for (const char* k : {"median_ms", "min_ms", "mean_ms"})
      r["time"][k] = r["time"][k].get<double>() * 1.03;
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST_F(Compare, SlowdownWithinTheRunsSpreadPasses) {
  // 10% slower, but each run has cv 8%: the difference is inside the combined spread.
  json base = results(json::array({row(1024, "cuda.flash_fwd", 1.0, 0.08)}));
  json next = results(json::array({row(1024, "cuda.flash_fwd", 1.10, 0.08)}));
  const Outcome r = run(base, next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("within noise"), std::string::npos) << r.out;
  // A tighter threshold does not change that: the noise rule still holds it back.
  CompareOptions o;
  o.threshold = 0.01;
  EXPECT_EQ(run(base, next, o).code, 0);
}

TEST_F(Compare, ThresholdFlagIsHonoured) {
  json base = results(json::array({row(1024, "cuda.flash_fwd", 1.0, 0.001)}));
  json next = results(json::array({row(1024, "cuda.flash_fwd", 1.04, 0.001)}));
  EXPECT_EQ(run(base, next).code, 0);  // 4% < default 5%
  CompareOptions o;
  o.threshold = 0.02;
  EXPECT_EQ(run(base, next, o).code, 1);
}

TEST_F(Compare, FasterIsReportedNotFailed) {
  json next = two_impls();
  for (const char* k : {"median_ms", "min_ms", "mean_ms"})
    next["rows"][1]["time"][k] = next["rows"][1]["time"][k].get<double>() * 0.5;
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("faster"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 improved"), std::string::npos) << r.out;
}

TEST_F(Compare, PassToFailOrSkipFails) {
  json next = two_impls();
  next["rows"][1]["status"] = "fail";
  Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("pass->fail"), std::string::npos) << r.out;

  next = two_impls();
  next["rows"][2] = row(1024, "cuda.standard_cublas", 0, 0.01, "skip");
  r = run(two_impls(), next);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("pass->skip"), std::string::npos) << r.out;
}

TEST_F(Compare, FailToPassIsAnImprovement) {
  json base = two_impls();
  base["rows"][1]["status"] = "fail";
  const Outcome r = run(base, two_impls());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("fixed"), std::string::npos) << r.out;
}

TEST_F(Compare, ThreefoldErrorGrowthFails) {
  json next = two_impls();
  next["rows"][5]["verify"]["outputs"][0]["max_abs"] = 3e-3;  // base 1e-3
  Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("O error x3.000"), std::string::npos) << r.out;

  next["rows"][5]["verify"]["outputs"][0]["max_abs"] = 1.5e-3;  // within 2x
  r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;

  CompareOptions o;
  o.error_factor = 1.2;
  EXPECT_EQ(run(two_impls(), next, o).code, 1);
}

TEST_F(Compare, ErrorGrowthFromZeroUsesTheToleranceFloor) {
  // BASE is exact (0 error): growth is measured against atol/4 = 1e-3, so 5e-4 is fine and 3e-3 is
  // not.
  json base = results(json::array({row(512, "cpu.naive_3pass", 1.0, 0.01, "pass", 0.0)}));
  json small = results(json::array({row(512, "cpu.naive_3pass", 1.0, 0.01, "pass", 5e-4)}));
  json large = results(json::array({row(512, "cpu.naive_3pass", 1.0, 0.01, "pass", 3e-3)}));
  EXPECT_EQ(run(base, small).code, 0);
  EXPECT_EQ(run(base, large).code, 1);
}

TEST_F(Compare, NonFiniteErrorInNewFails) {
  json next = two_impls();
  next["rows"][0]["verify"]["outputs"][0]["max_abs"] = nullptr;  // how a NaN error is written
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("O error xinf"), std::string::npos) << r.out;
}

TEST_F(Compare, MissingRowFailsUnlessAllowed) {
  json next = two_impls();
  next["rows"].erase(4);  // cuda.standard_cublas at seq 2048
  Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 4) << r.out;  // its own verdict, not a regression
  EXPECT_NE(
      r.out.find("MISSING in NEW: b1_hq8_hkv8_sq2048_skv2048_d64_bf16 cuda.standard_cublas fwd"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("1 row of BASE not in NEW (another config, or --case/--impl?): "
                       "--allow-missing accepts that"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("0 regressed, 0 suspect, 0 improved, 1 missing, 0 new -> MISSING (exit 4)"),
            std::string::npos)
      << r.out;

  CompareOptions o;
  o.allow_missing = true;
  r = run(two_impls(), next, o);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("missing (allowed)"), std::string::npos) << r.out;
}

TEST_F(Compare, NewRowsAreInformation) {
  json next = two_impls();
  next["rows"].push_back(row(4096, "cuda.flash_fwd", 4.0));
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("new row (not in BASE): b1_hq8_hkv8_sq4096"), std::string::npos) << r.out;
}

TEST_F(Compare, RowsMatchOnOptionsToo) {
  json base =
      results(json::array({row(1024, "cuda.flash_fwd", 1.0), row(1024, "cuda.flash_fwd", 2.0)}));
  base["rows"][0]["options"] = {{"block_c", 64}};
  base["rows"][1]["options"] = {{"block_c", 128}};
  json next = base;
  std::swap(next["rows"][0], next["rows"][1]);  // order does not matter
  Outcome r = run(base, next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cuda.flash_fwd [block_c=128]"), std::string::npos) << r.out;

  next["rows"][0]["options"]["block_c"] = 32;  // the block_c=128 row is now missing
  r = run(base, next);
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("MISSING in NEW"), std::string::npos) << r.out;
}

// A file written before the names lined up (schema 1: the rows' "params", the former name
// cpu.flash_1pass) is the same file as far as the rows go: the reader maps both, so its rows match
// today's.
json cpu_flash(json j) {
  for (auto& r : j["rows"])
    if (r["impl"] == "cuda.flash_fwd") r["impl"] = "cpu.flash_fwd";
  return j;
}
json written_before_the_rename(json j) {
  j["schema"] = "attnbench.results/1";
  for (auto& r : j["rows"]) {
    r["params"] = r["options"];
    r.erase("options");
    if (r["impl"] == "cpu.flash_fwd") r["impl"] = "cpu.flash_1pass";
  }
  return j;
}

TEST_F(Compare, AnOldFileMatchesAcrossTheRename) {
  json next = cpu_flash(two_impls());
  for (auto& r : next["rows"]) r["options"] = {{"block_c", 64}};
  const json base = written_before_the_rename(next);
  ASSERT_EQ(base["rows"][1]["impl"], "cpu.flash_1pass");
  ASSERT_EQ(base["rows"][1]["params"]["block_c"], 64);
  Outcome r = run(base, next);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("6 matched, 0 regressed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu.flash_fwd [block_c=64]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("cpu.flash_1pass"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("MISSING"), std::string::npos) << r.out;
  r = run(next, base);  // either way round
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("6 matched, 0 regressed"), std::string::npos) << r.out;
}

TEST_F(Compare, ContextDifferencesWarn) {
  json next = two_impls();
  next["context"]["devices"][0]["name"] = "NVIDIA A100-SXM4-80GB";
  next["context"]["devices"][0]["sm_clock_mhz"] = 1410;
  next["context"]["build_type"] = "Debug";
  next["context"]["git_dirty"] = true;
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;  // a warning, not a failure
  EXPECT_NE(
      r.out.find("WARNING: device differs: BASE \"NVIDIA H200\" vs NEW \"NVIDIA A100-SXM4-80GB\""),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("WARNING: SM clock (MHz) differs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WARNING: build type differs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("WARNING: NEW was built from a dirty tree"), std::string::npos) << r.out;
}

TEST_F(Compare, HotAgainstColdTimingWarns) {
  json next = two_impls();
  for (auto& r : next["rows"]) r["time"]["hot"] = true;
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(
      r.out.find("WARNING: 6 rows were timed with hot caches in one run and flushed in the other"),
      std::string::npos)
      << r.out;
}

// A write flush against a read flush (timing.flush): the times do not compare either. A file
// without the field was timed after a write flush.
TEST_F(Compare, WriteAgainstReadFlushWarns) {
  json next = two_impls();
  for (auto& r : next["rows"]) r["time"]["flush"] = "read";
  const Outcome r = run(two_impls(), next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("WARNING: 6 rows were timed after a write flush of L2 in one run and a read "
                       "flush in the other"),
            std::string::npos)
      << r.out;
  json same = two_impls();
  for (auto& row : same["rows"]) row["time"]["flush"] = "write";
  const Outcome s = run(two_impls(), same);
  EXPECT_EQ(s.out.find("read flush"), std::string::npos) << s.out;
}

TEST_F(Compare, IncompleteRunWarns) {
  json next = two_impls();
  next["complete"] = false;
  next["stop_reason"] = "SIGINT";
  const Outcome r = run(two_impls(), next);
  EXPECT_NE(r.out.find("WARNING: NEW is an incomplete run (SIGINT)"), std::string::npos) << r.out;
}

TEST_F(Compare, BadInputExitsTwo) {
  CompareOptions o;
  o.base = (dir / "does_not_exist.json").string();
  o.next = write("new.json", two_impls().dump());
  Outcome r = run_files(o);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;

  o.base = write("garbage.json", "{\"schema\": \"attnbench.results/1\", rows: [");
  r = run_files(o);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("not valid JSON"), std::string::npos) << r.err;

  json wrong = two_impls();
  wrong["schema"] = "attnbench.results/9";
  o.base = write("schema.json", wrong.dump());
  r = run_files(o);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("$.schema"), std::string::npos) << r.err;

  wrong = two_impls();
  wrong["rows"][2]["status"] = "passed";
  o.base = write("status.json", wrong.dump());
  r = run_files(o);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("$.rows[2].status: \"passed\" is not one of pass, fail, skip"),
            std::string::npos)
      << r.err;

  wrong = two_impls();
  wrong["rows"][1]["time"]["median_ms"] = "fast";
  o.base = write("time.json", wrong.dump());
  r = run_files(o);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("$.rows[1].time.median_ms: expected a number, got \"fast\""),
            std::string::npos)
      << r.err;
}

// ---- The test over many rows (rows with time.samples_ms) --------------------------------------

// n samples around median_ms: median * (1 + spread * k / n) for k = -n/2 .. n/2, shuffled by a
// fixed stride so that they are not sorted.
json with_samples(json r, int n, double spread, double scale = 1.0) {
  const double m = r["time"]["median_ms"].get<double>() * scale;
  json s = json::array();
  for (int i = 0; i < n; ++i) {
    const int k = (i * 7) % n - n / 2;
    s.push_back(m * (1 + spread * k / n));
  }
  r["time"]["samples_ms"] = s;
  r["time"]["median_ms"] = m;
  r["time"]["min_ms"] = m * (1 - spread / 2);
  r["time"]["mean_ms"] = m;
  r["time"]["repetitions"] = n;
  return r;
}

json sampled(double scale_of_row3 = 1.0, int n = 10, double spread = 0.02) {
  json j = two_impls();
  for (std::size_t i = 0; i < j["rows"].size(); ++i)
    j["rows"][i] = with_samples(j["rows"][i], n, spread, i == 3 ? scale_of_row3 : 1.0);
  return j;
}

TEST_F(Compare, SamplesAreTestedAndTheMethodIsPrinted) {
  const Outcome same = run(sampled(), sampled());
  EXPECT_EQ(same.code, 0) << same.out;
  EXPECT_NE(
      same.out.find("method: one-sided Mann-Whitney U on each row's repetitions (time.samples_ms), "
                    "Holm-Bonferroni (family-wise error rate) at alpha 0.050 over 6 rows, and "
                    "new/base above 1.050"),
      std::string::npos)
      << same.out;
  EXPECT_EQ(same.out.find("spread rule"), std::string::npos) << same.out;

  // 10% slower, every sample: significant after Holm over 6 rows (p = 6 / C(20, 10)).
  const Outcome slow = run(sampled(), sampled(1.10));
  EXPECT_EQ(slow.code, 1) << slow.out;
  EXPECT_NE(slow.out.find("REGRESSED: slower x1.100"), std::string::npos) << slow.out;
  EXPECT_NE(slow.out.find("| 3e-05 |"), std::string::npos) << slow.out;   // the adjusted p
  EXPECT_NE(slow.out.find(" 1.0/1.0 |"), std::string::npos) << slow.out;  // the noise column (cv %)
}

TEST_F(Compare, ASlowdownInsideTheSamplesSpreadIsNotSignificant) {
  // 10% slower medians, but each run's samples spread over +-40%: the U test cannot tell.
  const Outcome r = run(sampled(1.0, 10, 0.8), sampled(1.10, 10, 0.8));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ok (slower, within noise)"), std::string::npos) << r.out;
}

TEST_F(Compare, TheCorrectionHoldsOverManyRowsAndAUniformSlowdownIsAShift) {
  // 40 rows, each new run's samples a little above the base's: p = 0.0074 per row, significant
  // alone, not after Holm over 40 rows (0.30). Benjamini-Hochberg, which bounds the share of false
  // discoveries rather than the chance of any, finds all 40 slower by their repetitions: forty
  // such rows together are strong evidence. But every row moved by the same x1.19: that is a
  // shift of the whole file (the machine or the code), not 40 rows each beyond the noise between
  // the runs. So: SHIFTED (exit 3) whatever the correction, never OK; each row SUSPECT where its
  // own repetitions say slower.
  json base = results(json::array()), next = results(json::array());
  for (int i = 0; i < 40; ++i) {
    json b = row(64 * (i + 1), "cpu.naive_3pass", 1.0);
    json n = b;
    b["time"]["samples_ms"] = {1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 1.02};
    n["time"]["samples_ms"] = {1.11, 1.25, 1.4, 1.22, 1.15, 1.5, 1.06, 1.33};
    b["time"]["median_ms"] = 1.035;
    n["time"]["median_ms"] = 1.235;
    base["rows"].push_back(b);
    next["rows"].push_back(n);
  }
  const Outcome holm = run(base, next);
  EXPECT_EQ(holm.code, 3) << holm.out;
  EXPECT_NE(holm.out.find("| 0.295 |"), std::string::npos) << holm.out;  // 40 x 0.0074
  EXPECT_NE(holm.out.find("SHIFTED: NEW is slower across the whole file, x1.193 (40 of 40 rows "
                          "slower, sign test p 9e-13): the machine or the code; decide with:"),
            std::string::npos)
      << holm.out;
  EXPECT_NE(holm.out.find("--rerun-rows all"), std::string::npos) << holm.out;
  EXPECT_NE(holm.out.find("0 regressed, 0 suspect"), std::string::npos) << holm.out;
  CompareOptions o;
  o.correction = Correction::bh;
  const Outcome bh = run(base, next, o);
  EXPECT_EQ(bh.code, 3) << bh.out;
  EXPECT_NE(bh.out.find("0 regressed, 40 suspect"), std::string::npos) << bh.out;
  o.correction = Correction::none;
  const Outcome r = run(base, next, o);
  EXPECT_EQ(r.code, 3);
  EXPECT_NE(r.out.find("0 regressed, 40 suspect"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("none (per-row level)"), std::string::npos) << r.out;
}

// ---- The noise between the runs (many rows) ----------------------------------------------------

// n rows of one implementation at seq 64..64n, each with 10 tight samples (spread 1%) around
// 1 ms in BASE and ratio(i) ms in NEW: every row's own repetitions tell its change apart.
std::pair<json, json> many(int n, const std::function<double(int)>& ratio) {
  json base = results(json::array()), next = results(json::array());
  for (int i = 0; i < n; ++i) {
    const json r = row(64 * (i + 1), "cpu.flash_fwd", 1.0);
    base["rows"].push_back(with_samples(r, 10, 0.01));
    next["rows"].push_back(with_samples(r, 10, 0.01, ratio(i)));
  }
  return {base, next};
}

TEST_F(Compare, RowsWithinTheNoiseBetweenTheRunsAreSuspectNotRegressed) {
  // Two runs of the same code on a noisy machine: each row's repetitions agree with each other,
  // but the rows moved by -12%..+12% between the runs, some of them significantly by their own
  // repetitions. None is beyond the spread of the rows: SUSPECT, with the command that decides,
  // and exit 0.
  const auto [base, next] = many(24, [](int i) { return 0.88 + 0.01 * i; });
  const Outcome r = run(base, next);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("REGRESSED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SUSPECT: slower x1.110, within the noise between the runs"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("decide the SUSPECT rows with:\n  attnbench compare "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" --rerun <NEW's attnbench> --rerun-base <BASE's attnbench>"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("between runs: over 24 timed rows NEW/BASE is x0.995"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("-> OK (exit 0)"), std::string::npos) << r.out;
}

TEST_F(Compare, ARowBeyondTheNoiseBetweenTheRunsRegresses) {
  // The rows agree within +-2% between the runs; one is x1.30: beyond that noise, REGRESSED.
  const auto [base, next] = many(24, [](int i) { return i == 7 ? 1.30 : 0.98 + 0.04 * (i % 5) / 4; });
  CompareOptions o;
  o.format = "json";
  const Outcome r = run(base, next, o);
  EXPECT_EQ(r.code, 1) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["summary"]["regressed"], 1);
  EXPECT_EQ(j["summary"]["suspect"], 0);
  EXPECT_EQ(j["rows"][7]["verdict"], "regressed");
  EXPECT_TRUE(j["between_runs"]["estimated"].get<bool>());
  EXPECT_EQ(j["between_runs"]["shifted"], "no");
  EXPECT_EQ(j["between_runs"]["rows"], 24);
}

TEST_F(Compare, AUniformSlowdownOfEveryRowIsNeverOk) {
  // Every row x1.15 (a planted uniform slowdown): the whole file is shifted, exit 3 (not OK, not
  // a row regression: the machine or the code).
  const auto [base, next] = many(24, [](int) { return 1.15; });
  const Outcome r = run(base, next);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("SHIFTED: NEW is slower across the whole file, x1.150 (24 of 24 rows"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("-> SHIFTED (exit 3)"), std::string::npos) << r.out;
  // Faster across the file is said, and is no failure.
  const auto [fb, fn] = many(24, [](int) { return 0.8; });
  const Outcome f = run(fb, fn);
  EXPECT_EQ(f.code, 0) << f.out;
  EXPECT_NE(f.out.find("note: NEW is faster across the whole file, x0.800"), std::string::npos)
      << f.out;
}

TEST_F(Compare, TooFewSamplesFallBackToTheSpreadRule) {
  // 3 against 3 repetitions cannot reach 0.05 / 6: the spread rule decides, and says so.
  const Outcome r = run(sampled(1.0, 3), sampled(1.2, 3));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("6 rows by the spread rule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("REGRESSED: slower x1.200"), std::string::npos) << r.out;
}

TEST_F(Compare, OnlyChangedAndJson) {
  CompareOptions o;
  o.only_changed = true;
  Outcome r = run(sampled(), sampled(1.10), o);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cuda.flash_fwd"), std::string::npos) << r.out;  // row 3, the slower one
  EXPECT_EQ(r.out.find("cuda.standard_cublas"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("5 rows with verdict ok not shown"), std::string::npos) << r.out;

  o = {};
  o.format = "json";
  r = run(sampled(), sampled(1.10), o);
  EXPECT_EQ(r.code, 1);
  const json j = json::parse(r.out);  // nothing but the JSON object
  EXPECT_EQ(j["schema"], "attnbench.compare/1");
  EXPECT_EQ(j["method"]["correction"], "holm");
  EXPECT_EQ(j["method"]["tested"], 6);
  EXPECT_EQ(j["rows"].size(), 6u);
  EXPECT_EQ(j["rows"][3]["verdict"], "regressed");
  EXPECT_EQ(j["rows"][3]["rule"], "u-test");
  EXPECT_NEAR(j["rows"][3]["ratio"].get<double>(), 1.1, 1e-9);
  EXPECT_EQ(j["rows"][0]["verdict"], "ok");
  EXPECT_EQ(j["summary"]["regressed"], 1);
  EXPECT_EQ(j["summary"]["exit_code"], 1);
}

TEST_F(Compare, TimingContextDifferencesWarn) {
  json base = two_impls(), next = two_impls();
  base["context"]["host"] = "a";
  next["context"]["host"] = "b";
  base["context"]["cpu_cores"] = 2;
  next["context"]["cpu_cores"] = 2;
  base["context"]["load_average"] = {0.2, 0.3, 0.4};
  next["context"]["load_average"] = {3.5, 2.0, 1.0};
  base["context"]["benchmark_library"] = {{"version", "1.7.1"}, {"build_type", "debug"}};
  next["context"]["benchmark_library"] = {{"version", "1.8.3"}, {"build_type", "release"}};
  next["context"]["test_slowdown"] = "*=1.15";
  const Outcome r = run(base, next);
  EXPECT_NE(r.out.find("WARNING: host differs: BASE \"a\" vs NEW \"b\""), std::string::npos)
      << r.out;
  EXPECT_NE(
      r.out.find("WARNING: load average differs: BASE 0.20 at the start, NEW 3.50 at the start"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("WARNING: NEW ran on a busy machine: load average 3.50"), std::string::npos)
      << r.out;
  // Busy at the start only (the minute after a build): not a busy run.
  next["context"]["load_average_end"] = {0.5, 1.0, 1.0};
  const Outcome after_build = run(base, next);
  EXPECT_EQ(after_build.out.find("ran on a busy machine"), std::string::npos) << after_build.out;
  EXPECT_NE(
      r.out.find(
          "WARNING: Google Benchmark library build differs: BASE \"debug\" vs NEW \"release\""),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("WARNING: test slowdown (ATTNBENCH_TEST_SLOWDOWN) differs"),
            std::string::npos)
      << r.out;
}

TEST_F(Compare, BadOptionsExitTwo) {
  CompareOptions o;
  o.threshold = -0.1;
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.error_factor = 0.5;
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.alpha = 1.5;
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.format = "yaml";
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.rerun_rows = "some";
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.rerun_base = "/bin/true";  // without --rerun
  EXPECT_EQ(run(two_impls(), two_impls(), o).code, 2);
  o = {};
  o.rerun = "/does/not/exist";
  json slower = sampled(1.10);
  slower["context"]["config"] = {{"name", "x"}};
  const Outcome r = run(sampled(), slower, o);  // a row to rerun, and no binary
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is not an executable file"), std::string::npos) << r.err;
}

// ---- --rerun with stand-in binaries ------------------------------------------------------------

// Every row's times scaled by f.
json scaled(json j, double f) {
  for (auto& r : j["rows"]) {
    if (!r.contains("time")) continue;
    for (const char* k : {"median_ms", "min_ms", "mean_ms"})
      r["time"][k] = r["time"][k].get<double>() * f;
    for (auto& x : r["time"]["samples_ms"]) x = x.get<double>() * f;
  }
  return j;
}

class Rerun : public Compare {
 protected:
  // A stand-in for an attnbench binary: each invocation copies the next of `files` (in turn) to
  // the path after --out, and counts its invocations in NAME.count.
  std::string fake(const std::string& name, const std::vector<json>& files) {
    std::string cases;
    for (std::size_t i = 0; i < files.size(); ++i) {
      const std::string f = write(name + "." + std::to_string(i) + ".json", files[i].dump());
      cases += "  " + std::to_string(i) + ") cp '" + f + "' \"$out\" ;;\n";
    }
    const std::string count = (dir / (name + ".count")).string();
    const std::string args = (dir / (name + ".args")).string();
    const std::string script =
        write(name,
              "#!/bin/sh\necho \"$*\" >> '" + args + "'\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = --out ] && out=$2; shift; done\n"
              "n=$(cat '" +
                  count + "' 2>/dev/null || echo 0)\necho $((n + 1)) > '" + count +
                  "'\ncase $((n % " + std::to_string(files.size()) + ")) in\n" + cases + "esac\n");
    std::filesystem::permissions(script, std::filesystem::perms::owner_all,
                                 std::filesystem::perm_options::add);
    return script;
  }
  std::string arguments(const std::string& name) {  // every invocation's, one line each
    std::ifstream f(dir / (name + ".args"));
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  int invocations(const std::string& name) {
    std::ifstream f(dir / (name + ".count"));
    int n = 0;
    f >> n;
    return n;
  }
  json with_config(json j) {
    j["context"]["config"] = {{"name", "x"}};
    return j;
  }
};

TEST(RerunRounds, EnoughForTheFamily) {
  CompareOptions o;
  o.rerun_more_rounds = 0;                   // one stage, at alpha
  EXPECT_EQ(rerun_rounds_for(1, o), 7);      // 2^-5 <= 0.05, and 2 more
  EXPECT_EQ(rerun_rounds_for(7, o), 10);     // 2^-8 <= 0.05 / 7
  EXPECT_EQ(rerun_rounds_for(1000, o), 17);  // 2^-15 <= 0.05 / 1000
  o.correction = Correction::none;
  EXPECT_EQ(rerun_rounds_for(1000, o), 7);
  o.rerun_rounds = 3;
  EXPECT_EQ(rerun_rounds_for(7, o), 3);
  o = {};
  o.alpha = 0.5;
  EXPECT_EQ(rerun_rounds_for(1, o), 6);  // at least 6
}

TEST(RerunRounds, TwoStagesEachAtHalfTheLevel) {
  CompareOptions o;  // the default: two stages
  EXPECT_TRUE(rerun_two_stages(o));
  EXPECT_EQ(rerun_rounds_for(1, o), 8);      // 2^-6 <= 0.025, and 2 more
  EXPECT_EQ(rerun_rounds_for(7, o), 11);     // 2^-9 <= 0.025 / 7
  EXPECT_EQ(rerun_rounds_for(1000, o), 18);  // 2^-16 <= 0.025 / 1000
  o.rerun_more_rounds = 0;
  EXPECT_FALSE(rerun_two_stages(o));
}

TEST_F(Rerun, ASlowdownInEveryRoundIsFoundThoughTheFilesHideIt) {
  // The files are identical; every NEW invocation is 1.3x BASE's: all 6 rows, each round.
  const json base = with_config(sampled());
  CompareOptions o;
  o.rerun = fake("new", {scaled(sampled(), 1.3)});
  o.rerun_base = fake("base", {sampled()});
  o.rerun_rows = "all";
  o.rerun_more_rounds = 0;  // one stage (the two-stage default: the tests below)
  const Outcome r = run(base, base, o);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  // 6 rows of 2 implementations: 9 rounds (2^-7 <= 0.05 / 6, and 2 more), each implementation in
  // an invocation of its own, a side a round.
  EXPECT_EQ(invocations("new"), 18);
  EXPECT_EQ(invocations("base"), 18);
  EXPECT_NE(r.out.find("6 regressed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("slower x1.300 (found by the rerun; first x1.000)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| 0.012 |"), std::string::npos) << r.out;  // Holm: 6 x 2^-9
  EXPECT_NE(r.out.find("rerun: 6 timed rows (all) were measured again (9 rounds of one invocation "
                       "a side per implementation, BASE and NEW alternating, the implementations "
                       "in a shuffled order, 5 repetitions each"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("rerun round 2/9: 6 rows, NEW then BASE"), std::string::npos) << r.err;
}

TEST_F(Rerun, RoundsThatDisagreeConfirmNothing) {
  // The files say 1.3x slower (row 3); the rerun's NEW invocations are 1.3x and 1/1.3x of BASE's
  // in turn, a machine's noise: not significant, whatever the median.
  CompareOptions o;
  o.rerun = fake("new", {scaled(sampled(), 1.3), scaled(sampled(), 1 / 1.3)});
  o.rerun_base = fake("base", {sampled()});
  o.rerun_more_rounds = 0;
  const Outcome r = run(with_config(sampled()), with_config(sampled(1.3)), o);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(invocations("new"), 7);  // one row measured again: 7 rounds
  EXPECT_NE(r.out.find("ok (not confirmed by the rerun: x1.300; first x1.300)"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("0 confirmed"), std::string::npos) << r.out;
}

// The second stage: rounds that leave a row beyond the threshold but not significant measure it
// again, three times as many rounds, and decide it on all of them at alpha / 2.
TEST_F(Rerun, AnAmbiguousRowGetsASecondStage) {
  // The first 8 rounds (one row: 2^-6 <= 0.025, and 2 more): 5 of NEW's invocations 1.3x BASE's,
  // 3 of them 1/1.3x, so the rounds' median is x1.3 and the signed-rank test is far from 0.025.
  // The 24 rounds after: 1.3x every time.
  std::vector<json> news;
  for (int i = 0; i < 8; ++i) news.push_back(scaled(sampled(), i % 3 == 1 ? 1 / 1.3 : 1.3));
  for (int i = 0; i < 24; ++i) news.push_back(scaled(sampled(), 1.3));
  CompareOptions o;
  o.rerun = fake("new", news);
  o.rerun_base = fake("base", {sampled()});
  const Outcome r = run(with_config(sampled()), with_config(sampled(1.3)), o);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_EQ(invocations("new"), 32);
  EXPECT_EQ(invocations("base"), 32);
  EXPECT_NE(r.err.find("rerun stage 2: 1 row beyond the threshold but not significant, 24 more "
                       "rounds"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("rerun stage 2 round 24/24: 1 row,"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("slower x1.300 (confirmed by the rerun"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("then 1 row beyond the threshold but not significant 24 rounds more"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("two stages at alpha 0.025 each"), std::string::npos) << r.out;
}

// Rounds that disagree stay unconfirmed through both stages; --rerun-more-rounds sets the second
// stage's length.
TEST_F(Rerun, NoiseStaysUnconfirmedThroughBothStages) {
  // NEW's invocations 1.3x, 1.3x, 1/1.3x of BASE's in turn: the first 8 rounds 6 up and 2 down
  // (median x1.3, p far above 0.025), all 13 rounds 9 up and 4 down (still far).
  CompareOptions o;
  o.rerun =
      fake("new", {scaled(sampled(), 1.3), scaled(sampled(), 1.3), scaled(sampled(), 1 / 1.3)});
  o.rerun_base = fake("base", {sampled()});
  o.rerun_more_rounds = 5;
  o.format = "json";
  const Outcome r = run(with_config(sampled()), with_config(sampled(1.3)), o);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(invocations("new"), 13);  // 8 + 5
  const json j = json::parse(r.out);
  EXPECT_EQ(j["method"]["rerun_stage2_rows"], 1);
  EXPECT_EQ(j["method"]["rerun_stage2_rounds"], 5);
  EXPECT_EQ(j["rows"][3]["rerun"]["pairs"], 13);
  EXPECT_EQ(j["rows"][3]["verdict"], "ok");
}

TEST_F(Rerun, TooFewRoundsWarnAndFallBackToTheSpreadRule) {
  CompareOptions o;
  o.rerun = fake("new", {scaled(sampled(), 1.3)});
  o.rerun_base = fake("base", {sampled()});
  o.rerun_rounds = 3;  // 2^-3 > 0.05: the test cannot decide
  o.format = "json";
  const Outcome r = run(with_config(sampled()), with_config(sampled(1.3)), o);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["method"]["rerun_rounds"], 3);
  bool warned = false;
  for (const auto& w : j["warnings"])
    warned = warned || w.get<std::string>().find(
                           "1 rerun row had too few rounds for the signed-rank "
                           "test (3 rounds give p >= 0.125") != std::string::npos;
  EXPECT_TRUE(warned) << j["warnings"].dump();
  const json& row3 = j["rows"][3];
  EXPECT_EQ(row3["rule"], "spread");
  EXPECT_EQ(row3["rerun"]["pairs"], 3);
  EXPECT_EQ(row3["rerun"]["round_ratios"].size(), 3u);
  EXPECT_EQ(row3["verdict"], "regressed");
}

// Each implementation's rows are timed in invocations of their own, the implementations in an order
// that changes from round to round (what one leaves behind must not fall on another's rows the
// same way every round), and BASE's and NEW's invocations of an implementation side by side.
TEST_F(Rerun, EachImplementationRunsAloneInAShuffledOrder) {
  CompareOptions o;
  o.rerun = fake("new", {sampled()});
  o.rerun_base = fake("base", {sampled()});
  o.rerun_rows = "all";
  o.rerun_rounds = 6;
  const Outcome r = run(with_config(sampled()), with_config(sampled()), o);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(invocations("new"), 12);
  std::istringstream lines(arguments("new"));
  std::string line, firsts;
  int n = 0;
  for (; std::getline(lines, line); ++n) {
    const bool cublas = line.find("--impl cuda.standard_cublas") != std::string::npos;
    const bool flash = line.find("--impl cuda.flash_fwd") != std::string::npos;
    EXPECT_NE(cublas, flash) << "one implementation an invocation: " << line;
    EXPECT_NE(line.find("--case"), std::string::npos) << line;
    if (n % 2 == 0) firsts += cublas ? 'c' : 'f';  // the first implementation of each round
  }
  EXPECT_EQ(n, 12);
  EXPECT_NE(firsts.find('c'), std::string::npos) << firsts;  // each one first in some round
  EXPECT_NE(firsts.find('f'), std::string::npos) << firsts;
  EXPECT_NE(r.err.find("for each of 2 implementations"), std::string::npos) << r.err;
}

// BASE written before the rename by a binary that knows only cpu.flash_1pass, NEW after it: each
// binary is asked for the rows under the name its own file wrote.
TEST_F(Rerun, EachBinaryIsAskedForTheNameItsFileWrote) {
  const json next = cpu_flash(sampled());
  const json base = written_before_the_rename(next);
  CompareOptions o;
  o.rerun = fake("new", {next});
  o.rerun_base = fake("base", {base});
  o.rerun_rows = "all";
  o.rerun_rounds = 1;
  const Outcome r = run(with_config(base), with_config(next), o);
  EXPECT_EQ(invocations("base"), 2) << r.out << r.err;  // one round, one per implementation
  EXPECT_NE(arguments("base").find("--impl cpu.flash_1pass"), std::string::npos) << arguments("base");
  EXPECT_EQ(arguments("base").find("cpu.flash_fwd"), std::string::npos) << arguments("base");
  EXPECT_NE(arguments("new").find("--impl cpu.flash_fwd"), std::string::npos) << arguments("new");
  EXPECT_EQ(arguments("new").find("cpu.flash_1pass"), std::string::npos) << arguments("new");
  EXPECT_EQ(r.out.find("MISSING"), std::string::npos) << r.out;
}

TEST_F(Rerun, WithoutABaseBinaryNewIsPairedWithTheRecordedMedian) {
  CompareOptions o;
  o.rerun = fake("new", {scaled(sampled(), 1.3)});
  o.format = "json";
  const Outcome r = run(with_config(sampled()), with_config(sampled(1.3)), o);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(invocations("new"), 8);  // one row, two stages: 2^-6 <= 0.025, and 2 more
  EXPECT_EQ(j["rows"][3]["rule"], "signed-rank");
  EXPECT_NE(j["method"]["rerun_test"].get<std::string>().find("against BASE's recorded median"),
            std::string::npos);
}

}  // namespace
}  // namespace attnbench
