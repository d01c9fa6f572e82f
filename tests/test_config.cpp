// Config parsing: every class of bad config is refused through the CLI with its JSON path, its
// value, exit code 2 and no results file; product and zip sweeps expand to the exact cases.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

#include "attnbench/config.hpp"
#include "attnbench/context.hpp"

#ifndef ATTNBENCH_EXE
#error "ATTNBENCH_EXE (the attnbench binary) must be defined by the build"
#endif

namespace {

using namespace attnbench;
namespace fs = std::filesystem;
using attnbench::test::CliResult;
using attnbench::test::run_cli;

class BadConfig : public ::testing::Test {
 protected:
  fs::path dir_;
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnbench_test_config_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the config, runs it, and checks: exit code 2, the message holds each expected piece,
  // and no results file appeared.
  void expect_refused(const std::string& json, const std::vector<std::string>& pieces) {
    const fs::path cfg = dir_ / "bad.json";
    const fs::path out = dir_ / "results.json";
    std::ofstream(cfg) << json;
    const CliResult r = run_cli("run " + cfg.string() + " --out " + out.string() + " --quiet");
    EXPECT_EQ(r.code, 2) << r.output;
    for (const auto& p : pieces) EXPECT_NE(r.output.find(p), std::string::npos) << "missing '" << p << "' in:\n" << r.output;
    EXPECT_FALSE(fs::exists(out)) << "a results file was written for a bad config";
  }
};

constexpr const char* kImpl = R"("implementations": ["cpu.naive_3pass"])";

TEST_F(BadConfig, NotJson) { expect_refused("{\"name\": \"x\",\n  \"problem\": {", {"not valid JSON", "line 2"}); }

TEST_F(BadConfig, UnknownTopLevelKey) {
  expect_refused(std::string("{") + kImpl + R"(, "bogus": 1})", {"/bogus", "unknown key \"bogus\""});
  // The keys it offers are today's: "options", not its former name "params" (still read).
  const fs::path cfg = dir_ / "bad.json";
  std::ofstream(cfg) << std::string("{") + kImpl + R"(, "bogus": 1})";
  const CliResult r = run_cli("run " + cfg.string() + " --quiet");
  EXPECT_NE(r.output.find("timing, options, devices"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("params"), std::string::npos) << r.output;
}

TEST_F(BadConfig, UnknownNestedKey) {
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"seq_len": 64}})", {"/problem/seq_len", "unknown key"});
  expect_refused(std::string("{") + kImpl + R"(, "timing": {"repeats": 3}})", {"/timing/repeats", "unknown key"});
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"sequence": [1]}}})",
                 {"/sweep/product/sequence", "unknown problem field"});
}

TEST_F(BadConfig, WrongType) {
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"batch": "two"}})",
                 {"/problem/batch = \"two\"", "positive integer"});
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"causal": 1}})", {"/problem/causal = 1", "true or false"});
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"seq": 64.5}})", {"/problem/seq = 64.5"});
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"seq": 64}}})", {"/sweep/product/seq = 64", "array"});
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"dtype": "fp8"}})", {"/problem/dtype = \"fp8\"", "unknown dtype"});
  expect_refused(std::string("{") + kImpl + R"(, "passes": ["fwd", "bwdd"]})", {"/passes/1 = \"bwdd\""});
  expect_refused(std::string("{") + kImpl + R"(, "verify": {"mode": "fast"}})", {"/verify/mode = \"fast\""});
  expect_refused(std::string("{") + kImpl + R"(, "inputs": {"seed": -1}})", {"/inputs/seed = -1"});
}

TEST_F(BadConfig, EmptyAxis) {
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"seq": []}}})",
                 {"/sweep/product/seq = []", "must not be empty"});
  expect_refused(std::string("{") + kImpl + R"(, "implementations": []})", {"/implementations = []", "must not be empty"});
}

TEST_F(BadConfig, NegativeAxisValue) {
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"seq_q": [16, 32, -5]}}})",
                 {"/sweep/product/seq_q/2 = -5", "positive integer"});
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"zip": [{"seq": [16, 0], "batch": [2, 1]}]}})",
                 {"/sweep/zip/0/seq/1 = 0", "positive integer"});
}

// Varlen (issue 30): each bad length, list or distribution, named by its JSON path and value.
TEST_F(BadConfig, VarlenFields) {
  const std::string head = std::string("{") + kImpl + R"(, "problem": {)";
  expect_refused(head + R"("seqlens_q": [4, -1], "seqlens_kv": [4, 4]}})",
                 {"/problem/seqlens_q/1 = -1", "a length >= 0"});
  expect_refused(head + R"("seqlens_q": 4, "seqlens_kv": [4]}})",
                 {"/problem/seqlens_q = 4", "must be an array"});
  expect_refused(head + R"("seqlens_q": [4, 5], "seqlens_kv": [4]}})",
                 {"/problem/seqlens_kv = [4]", "seqlens_kv has 1 lengths, seqlens_q 2"});
  expect_refused(head + R"("seqlens_q": [4, 5]}})", {"seqlens_kv = []: a varlen batch needs both"});
  expect_refused(head + R"("seqlens_q": [0, 0], "seqlens_kv": [4, 1]}})",
                 {"/problem/seqlens_q = [0,0]", "every length is 0"});
  expect_refused(
      head + R"("seq": 16, "seqlens_q": [4], "seqlens_kv": [4]}})",
      {"/problem/seq = 16", "takes batch, seq_q and seq_kv from its lengths", "leave seq_q out"});
  expect_refused(head + R"("varlen": {"total_tokens": 100, "min": 8, "max": 4}}})",
                 {"/problem/varlen/max = 4", "a length >= 1 and >= min"});
  expect_refused(head + R"("varlen": {"total_tokens": 0, "min": 1, "max": 4}}})",
                 {"/problem/varlen/total_tokens = 0", "[1, 2^31 - 1]"});
  expect_refused(head + R"("varlen": {"total_tokens": 100, "max": 4}}})",
                 {"/problem/varlen", "needs \"min\""});
  expect_refused(head + R"("varlen": {"total_tokens": 100, "min": 1, "max": 4, "mean": 2}}})",
                 {"/problem/varlen/mean", "mean"});
  expect_refused(head + R"("varlen": {"total_tokens": 2000000000, "min": 0, "max": 1}}})",
                 {"/problem/varlen", "draws more than 1048576 sequences"});
  expect_refused(
      head + R"("varlen": {"total_tokens": 100, "min": 1, "max": 4}, "seqlens_q": [4]}})",
      {"/problem/seqlens_q = [4]",
       "seqlens_q and varlen (at /problem/varlen) both set the lengths"});
  expect_refused(
      std::string("{") + kImpl + R"(, "sweep": {"product": {"seqlens_q": [[3, 4], [5, -2]]}}})",
      {"/sweep/product/seqlens_q/1/1 = -2", "a length >= 0"});
}

TEST_F(BadConfig, HeadsNotMultiple) {
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"heads_q": 8}, "sweep": {"product": {"heads_kv": [2, 3]}}})",
                 {"/sweep/product/heads_kv/1 = 3", "heads_q = 8 is not a multiple of heads_kv = 3"});
}

TEST_F(BadConfig, ImpossibleSize) {
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"head_dim": 512}})",
                 {"/problem/head_dim = 512", "at most 256"});
  // Petabytes of tensors: refused before anything is allocated.
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"batch": 100000, "seq": 1000000, "heads": 64, "head_dim": 128}})",
                 {"/problem", "b100000_hq64_hkv64_sq1000000", "MiB"});
  // Beyond int: too large, with the limit (not "must be a positive integer").
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"seq": 3000000000}})",
                 {"/problem/seq = 3000000000", "too large: at most 2147483647"});
  expect_refused(
      std::string("{") + kImpl + R"(, "sweep": {"product": {"batch": [1, 18446744073709551615]}}})",
      {"/sweep/product/batch/1 = 18446744073709551615", "too large: at most 2147483647"});
}

// A scale the implementations cannot take: beyond float32 (they all take it as a float), or not
// a number at all.
TEST_F(BadConfig, ScaleBeyondFloat32) {
  expect_refused(std::string("{") + kImpl + R"(, "problem": {"scale": 1e300}})",
                 {"/problem/scale = 1e+300", "overflows float32", "2.36e38"});
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"scale": [0.5, 3e38]}}})",
                 {"/sweep/product/scale/1 = 3e+38", "overflows float32"});
}

TEST_F(BadConfig, UnknownImplementation) {
  expect_refused(R"({"implementations": ["cpu.naive_3pass", "cpu.nope*"]})",
                 {"/implementations/1 = \"cpu.nope*\"", "matches no registered implementation", "cpu.naive_3pass"});
}

TEST_F(BadConfig, UnknownOption) {
  expect_refused(std::string("{") + kImpl + R"(, "options": {"cpu.naive_3pass": {"block_c": [16, 32]}}})",
                 {"/options/cpu.naive_3pass/block_c", "has no option \"block_c\""});
  expect_refused(std::string("{") + kImpl + R"(, "options": {"cpu.nothing": {"block_c": 16}}})",
                 {"/options/cpu.nothing", "matches no registered implementation"});
  // Under the former key the errors name the key the file used.
  expect_refused(std::string("{") + kImpl + R"(, "params": {"cpu.naive_3pass": {"block_c": [16, 32]}}})",
                 {"/params/cpu.naive_3pass/block_c", "has no option \"block_c\""});
}

// "params" is the former name of "options": one of them, not both.
TEST_F(BadConfig, OptionsAndParamsTogether) {
  expect_refused(std::string("{") + kImpl +
                     R"(, "options": {"cpu.flash_fwd": {"block_c": 16}}, "params": {"cpu.flash_fwd": {"block_c": 32}}})",
                 {"/params", "both \"options\" and \"params\" (its former name) are given"});
  expect_refused(R"({"groups": [{"implementations": ["cpu.*"]},
                                {"implementations": ["cpu.*"], "params": {}, "options": {}}]})",
                 {"/groups/1/params", "both \"options\" and \"params\""});
}

// A former name is accepted written out; a glob matches current names only.
TEST_F(BadConfig, GlobsMatchCurrentNamesOnly) {
  expect_refused(R"({"implementations": ["cpu.flash_1*"]})",
                 {"/implementations/0 = \"cpu.flash_1*\"", "matches no registered implementation"});
}

TEST_F(BadConfig, UnequalZipLengths) {
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"zip": [{"seq": [512, 1024, 2048], "batch": [32, 16]}]}})",
                 {"/sweep/zip/0/batch = [32,16]", "equal lengths", "2 here, 3"});
}

TEST_F(BadConfig, FieldSweptTwice) {
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"seq_q": [16]}, "zip": [{"seq": [8, 9]}]}})",
                 {"/sweep/zip/0/seq", "already swept by /sweep/product/seq_q"});
}

TEST_F(BadConfig, DuplicateCase) {
  expect_refused(std::string("{") + kImpl + R"(, "sweep": {"product": {"seq": [16, 16]}}})",
                 {"/sweep", "appears twice"});
}

TEST_F(BadConfig, LimitsThatKeepTheParserSafe) {
  // Deep nesting would overflow the stack in recursive JSON copies; huge sweeps would exhaust memory.
  std::string deep = std::string("{") + kImpl + R"(, "problem": {"batch": )";
  deep += std::string(100000, '[') + std::string(100000, ']') + "}}";
  expect_refused(deep, {"nested deeper than 64 levels"});
  std::string values;  // 1,2,...,400 (append, not '+': GCC 12 false -Wrestrict)
  for (int i = 1; i <= 400; ++i) values.append(i > 1 ? "," : "").append(std::to_string(i));
  std::string big = std::string("{") + kImpl + R"(, "sweep": {"product": {"seq": [)";
  big.append(values).append(R"(], "batch": [)").append(values).append("]}}}");
  expect_refused(big, {"/sweep", "more than 100000 cases"});
}

// A config must say what to run: {} (or only a name and timing) would run every implementation
// on a default one-token problem.
TEST_F(BadConfig, AnEmptyConfigIsRefused) {
  expect_refused("{}", {"names no \"implementations\", \"problem\" or \"sweep\""});
  expect_refused(R"({"name": "x", "timing": {"repetitions": 3}})", {"names no \"implementations\""});
  expect_refused(R"({"groups": [{"description": "nothing"}]})", {"names no \"implementations\""});
}

TEST_F(BadConfig, GroupsKeepSweepsInGroups) {
  expect_refused(R"({"groups": [{"implementations": ["cpu.*"]}], "sweep": {"product": {"seq": [8]}}})",
                 {"/sweep", "unknown key"});
  expect_refused(R"({"groups": [{"implementations": ["cpu.*"], "sweep": {"product": {"seq": [8, -1]}}}]})",
                 {"/groups/0/sweep/product/seq/1 = -1"});
}

// timing.flush: how L2 is emptied before each timed call (execute.hpp FlushMode).
TEST_F(BadConfig, FlushIsWriteOrRead) {
  expect_refused(R"({"implementations": ["cpu.*"], "timing": {"flush": "evict"}})",
                 {"/timing/flush", "\"evict\"", "must be \"write\" or \"read\""});
  expect_refused(R"({"implementations": ["cpu.*"], "timing": {"flush": true}})", {"/timing/flush"});
}

// ---- The parser as a function ----------------------------------------------------------------

Config parse_ok(const std::string& text) {
  const ConfigResult r = parse_config(text);
  if (const auto* e = std::get_if<ConfigError>(&r)) {
    ADD_FAILURE() << e->text();
    return {};
  }
  return std::get<Config>(r);
}

TEST(ConfigParse, DefaultsOnly) {
  const Config c = parse_ok(R"({"name": "one", "implementations": "cpu.naive_3pass"})");
  ASSERT_EQ(c.groups.size(), 1u);
  ASSERT_EQ(c.groups[0].cases.size(), 1u);
  const Problem& p = c.groups[0].cases[0];
  EXPECT_EQ(p.label(), Problem{}.label());
  ASSERT_EQ(c.groups[0].impls.size(), 1u);
  EXPECT_EQ(c.groups[0].impls[0].impl->name(), "cpu.naive_3pass");
  EXPECT_EQ(c.groups[0].passes, std::vector<Pass>{Pass::fwd});
  EXPECT_EQ(c.row_count(), 1u);
  EXPECT_EQ(c.seed, 1234u);
}

// Varlen (issue 30): lengths from lists (and swept as values), or drawn by a fixed seed; batch,
// seq_q and seq_kv are the count and the maxima.
TEST(ConfigParse, VarlenListsAndDistribution) {
  const Config c = parse_ok(R"({"implementations": ["cpu.naive_3pass"],
    "problem": {"heads": 2, "head_dim": 32},
    "sweep": {"zip": [{"seqlens_q": [[5, 0, 17], [3]], "seqlens_kv": [[9, 3, 17], [40]]}]}})");
  const auto& cases = c.groups.at(0).cases;
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0].seqlens_q, (std::vector<int>{5, 0, 17}));
  EXPECT_EQ(cases[0].seqlens_kv, (std::vector<int>{9, 3, 17}));
  EXPECT_EQ(cases[0].batch, 3);
  EXPECT_EQ(cases[0].seq_q, 17);
  EXPECT_EQ(cases[1].batch, 1);
  EXPECT_EQ(cases[1].seq_kv, 40);

  const char* drawn = R"({"implementations": ["cpu.naive_3pass"], "problem": {"head_dim": 32,
    "varlen": {"total_tokens": 1000, "min": 0, "max": 300, "seed": 7}}})";
  const Problem a = parse_ok(drawn).groups.at(0).cases.at(0);
  const Problem b = parse_ok(drawn).groups.at(0).cases.at(0);
  EXPECT_EQ(a.seqlens_q, b.seqlens_q);  // fixed seed: the same lengths every time
  EXPECT_EQ(a.seqlens_q, a.seqlens_kv);
  EXPECT_EQ(a.total_q(), 1000);
  EXPECT_GE(a.batch, 4);
  for (std::size_t i = 0; i < a.seqlens_q.size(); ++i) {
    EXPECT_LE(a.seqlens_q[i], 300);
  }
  EXPECT_EQ(validate(a), "");
  const Problem other =
      parse_ok(R"({"implementations": ["cpu.naive_3pass"], "problem": {"head_dim": 32,
    "varlen": {"total_tokens": 1000, "min": 0, "max": 300, "seed": 8}}})")
          .groups.at(0)
          .cases.at(0);
  EXPECT_NE(other.seqlens_q, a.seqlens_q);
  EXPECT_NE(other.label(), a.label());
}

TEST(ConfigParse, ProductSweepOrderAndValues) {
  const Config c = parse_ok(R"({"implementations": ["cpu.naive_3pass"],
    "problem": {"heads_q": 4, "heads_kv": 2, "head_dim": 32},
    "sweep": {"product": {"seq": [16, 32, 48], "dtype": ["f32", "bf16"]}}})");
  const auto& cases = c.groups.at(0).cases;
  ASSERT_EQ(cases.size(), 6u);
  const int seqs[] = {16, 16, 32, 32, 48, 48};
  const DType dts[] = {DType::f32, DType::bf16, DType::f32, DType::bf16, DType::f32, DType::bf16};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(cases[i].seq_q, seqs[i]) << i;
    EXPECT_EQ(cases[i].seq_kv, seqs[i]) << i;  // "seq" sets both
    EXPECT_EQ(cases[i].dtype, dts[i]) << i;
    EXPECT_EQ(cases[i].heads_q, 4);
    EXPECT_EQ(cases[i].heads_kv, 2);
    EXPECT_EQ(cases[i].head_dim, 32);
  }
}

TEST(ConfigParse, ZipSweepsAdvanceTogetherAndCrossTheRest) {
  // The FlashAttention-2 grid, shortened: 16k tokens and hidden 2048.
  const Config c = parse_ok(R"({"implementations": ["cpu.naive_3pass"], "problem": {"dtype": "bf16"},
    "sweep": {"product": {"causal": [false, true]},
              "zip": [{"head_dim": [64, 128], "heads": [32, 16]},
                      {"seq": [512, 1024, 2048], "batch": [32, 16, 8]}]}})");
  const auto& cases = c.groups.at(0).cases;
  ASSERT_EQ(cases.size(), 2u * 2u * 3u);
  std::size_t i = 0;
  for (bool causal : {false, true}) {
    for (int hd : {64, 128}) {
      for (int seq : {512, 1024, 2048}) {
        const Problem& p = cases[i++];
        EXPECT_EQ(p.causal, causal);
        EXPECT_EQ(p.head_dim, hd);
        EXPECT_EQ(p.heads_q * p.head_dim, 2048);
        EXPECT_EQ(p.heads_kv, p.heads_q);
        EXPECT_EQ(p.seq_q, seq);
        EXPECT_EQ(p.seq_kv, seq);
        EXPECT_EQ(p.batch * p.seq_q, 16384);
        EXPECT_EQ(p.dtype, DType::bf16);
      }
    }
  }
}

TEST(ConfigParse, OptionsAxesMakeOneRowEach) {
  const Config c = parse_ok(R"({"implementations": ["cpu.flash_fwd", "cpu.naive_3pass"],
    "passes": ["fwd"], "options": {"cpu.flash_fwd": {"block_c": [16, 32, 64], "block_r": 32}}})");
  const auto& impls = c.groups.at(0).impls;
  ASSERT_EQ(impls.size(), 2u);
  EXPECT_EQ(impls[0].impl->name(), "cpu.flash_fwd");
  ASSERT_EQ(impls[0].option_sets.size(), 3u);
  EXPECT_EQ(impls[0].option_sets[1].at("block_c"), 32);
  EXPECT_EQ(impls[0].option_sets[1].at("block_r"), 32);
  EXPECT_EQ(impls[1].option_sets.size(), 1u);
  EXPECT_TRUE(impls[1].option_sets[0].empty());
  EXPECT_EQ(c.row_count(), 4u);
  // The explicit-list form.
  const Config l = parse_ok(R"({"implementations": ["cpu.flash_fwd"],
    "options": {"cpu.flash_fwd": [{"block_r": 16, "block_c": 64}, {"block_r": 64, "block_c": 16}]}})");
  ASSERT_EQ(l.groups.at(0).impls.at(0).option_sets.size(), 2u);
  EXPECT_EQ(l.groups[0].impls[0].option_sets[1].at("block_r"), 64);
}

// What a config runs, as text: per group its cases, implementations with their option sets, and
// passes.
// (append, not "literal" + temporary: GCC 12's false -Wrestrict.)
std::string plan(const Config& c) {
  std::string s;
  for (const ConfigGroup& g : c.groups) {
    s.append("group:");
    for (const Problem& p : g.cases) s.append(" ").append(p.label());
    for (const ImplRun& ir : g.impls) {
      s.append("\n  ").append(ir.impl->name());
      for (const Options& o : ir.option_sets) {
        s.append(" {");
        for (const auto& [k, v] : o) s.append(k).append("=").append(std::to_string(v)).append(";");
        s.append("}");
      }
    }
    s.append("\n  passes:");
    for (Pass p : g.passes) s.append(" ").append(to_string(p));
    s.append("\n");
  }
  return s;
}

// "params", the key's former name, gives the plan "options" gives, with a note; so do the former
// implementation names, in "implementations" and as keys of "options".
TEST(ConfigParse, FormerNamesGiveTheSamePlan) {
  const Config now = parse_ok(R"({"implementations": ["cpu.flash_fwd", "cpu.flash_bwd"],
    "passes": ["fwd", "bwd"], "problem": {"seq": 8},
    "options": {"cpu.flash_fwd": {"block_c": [16, 32]}, "cpu.flash_bwd": {"block_r": 16}}})");
  const Config key = parse_ok(R"({"implementations": ["cpu.flash_fwd", "cpu.flash_bwd"],
    "passes": ["fwd", "bwd"], "problem": {"seq": 8},
    "params": {"cpu.flash_fwd": {"block_c": [16, 32]}, "cpu.flash_bwd": {"block_r": 16}}})");
  const Config names = parse_ok(R"({"implementations": ["cpu.flash_1pass", "cpu.flash_backward"],
    "passes": ["fwd", "bwd"], "problem": {"seq": 8},
    "options": {"cpu.flash_1pass": {"block_c": [16, 32]}, "cpu.flash_backward": {"block_r": 16}}})");
  ASSERT_EQ(now.row_count(), 6u);  // flash_fwd: 2 option sets, flash_bwd: 1; 2 passes
  EXPECT_EQ(plan(key), plan(now));
  EXPECT_EQ(plan(names), plan(now));
  EXPECT_TRUE(now.notes.empty());
  EXPECT_EQ(key.notes, std::vector<std::string>{"note: the config key \"params\" is the former name of \"options\""});
  ASSERT_EQ(names.notes.size(), 2u);  // one line a name, however often it is written
  EXPECT_EQ(names.notes[0],
            "note: cpu.flash_1pass is the former name of cpu.flash_fwd, which runs instead (rows say "
            "cpu.flash_fwd)");
  EXPECT_NE(names.notes[1].find("cpu.flash_backward is the former name of cpu.flash_bwd"), std::string::npos);
  // A group's "params" too; the former and the current name of one implementation are one.
  const Config grouped = parse_ok(R"({"problem": {"seq": 8}, "groups": [{"implementations":
    ["cpu.flash_1pass", "cpu.flash_fwd", "cpu.flash_bwd"], "passes": ["fwd", "bwd"],
    "params": {"cpu.flash_fwd": {"block_c": [16, 32]}, "cpu.flash_bwd": {"block_r": 16}}}]})");
  EXPECT_EQ(plan(grouped), plan(now));
  // Given options under both names: refused like any implementation given options twice.
  const ConfigResult twice = parse_config(R"({"implementations": ["cpu.flash_fwd"],
    "options": {"cpu.flash_1pass": {"block_c": 16}, "cpu.flash_fwd": {"block_c": 32}}})");
  ASSERT_TRUE(std::holds_alternative<ConfigError>(twice));
  EXPECT_EQ(std::get<ConfigError>(twice).text(),
            "/options/cpu.flash_fwd: cpu.flash_fwd is already given options by /options/cpu.flash_1pass");
}

// --impl with a former name runs the implementation it became, says so in one line, and the
// results say the current name and "options".
using FormerNames = BadConfig;  // its temporary folder

TEST_F(FormerNames, ImplFlagRunsTheCurrentOne) {
  const fs::path out = dir_ / "former.json";
  const CliResult r = run_cli("run --seq 8 --impl cpu.flash_1pass --pass fwd --profile --quiet --out " +
                              out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string note = "attnbench run: note: cpu.flash_1pass is the former name of cpu.flash_fwd";
  EXPECT_NE(r.output.find(note), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(note), r.output.rfind(note)) << r.output;
  std::ifstream f(out);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema"], "attnbench.results/2");
  ASSERT_EQ(j["rows"].size(), 1u);
  EXPECT_EQ(j["rows"][0]["impl"], "cpu.flash_fwd");
  EXPECT_EQ(j["rows"][0]["status"], "pass");
  EXPECT_TRUE(j["rows"][0]["options"].is_object());
  EXPECT_FALSE(j["rows"][0].contains("params"));
}

TEST(ConfigParse, GroupsInheritDefaultsAndFilterDevices) {
  const Config c = parse_ok(R"({"problem": {"head_dim": 32, "dtype": "f16"}, "timing": {"repetitions": 7},
    "groups": [
      {"devices": ["cpu"], "implementations": ["*"], "problem": {"seq": 8}, "passes": ["fwd", "bwd"]},
      {"implementations": ["cpu.naive_3pass"], "sweep": {"product": {"seq": [4, 5]}}, "timing": {"hot": true}}]})");
  ASSERT_EQ(c.groups.size(), 2u);
  for (const auto& ir : c.groups[0].impls) EXPECT_EQ(ir.impl->device(), Device::cpu);
  EXPECT_EQ(c.groups[0].cases.at(0).head_dim, 32);
  EXPECT_EQ(c.groups[0].cases.at(0).dtype, DType::f16);
  EXPECT_EQ(c.groups[0].cases.at(0).seq_q, 8);
  EXPECT_EQ(c.groups[1].cases.size(), 2u);
  EXPECT_EQ(c.groups[1].timing.repetitions, 7);  // from the top level
  EXPECT_TRUE(c.groups[1].timing.hot);           // the group's own field
  EXPECT_FALSE(c.groups[0].timing.hot);
  EXPECT_EQ(c.groups[0].timing.flush, FlushMode::write);  // the default
  const Config r =
      parse_ok(R"({"implementations": ["cpu.naive_3pass"], "timing": {"flush": "read"}})");
  EXPECT_EQ(r.groups.at(0).timing.flush, FlushMode::read);
  EXPECT_EQ(c.case_count(), 3u);
}

// heads_kv set nowhere is heads_q (MHA), as in FlashAttention and PyTorch; it was 1 (MQA). Set
// anywhere (problem, group, sweep, the "heads" shorthand) it is what was set.
TEST(ConfigParse, HeadsKvDefaultsToHeadsQ) {
  const Config c = parse_ok(R"({"implementations": ["cpu.naive_3pass"], "problem": {"heads_q": 8},
    "sweep": {"product": {"seq": [4, 5]}}})");
  for (const Problem& p : c.groups[0].cases) EXPECT_EQ(p.heads_kv, 8) << p.label();
  const Config swept = parse_ok(
      R"({"implementations": ["cpu.naive_3pass"], "sweep": {"product": {"heads_q": [2, 6]}}})");
  EXPECT_EQ(swept.groups[0].cases.at(0).heads_kv, 2);
  EXPECT_EQ(swept.groups[0].cases.at(1).heads_kv, 6);
  const Config given = parse_ok(R"({"problem": {"heads_q": 8},
    "groups": [{"implementations": ["cpu.naive_3pass"], "problem": {"heads_kv": 2}},
               {"implementations": ["cpu.naive_3pass"], "sweep": {"product": {"heads_kv": [1, 4]}}},
               {"implementations": ["cpu.naive_3pass"], "problem": {"heads": 3, "seq": 7}}]})");
  EXPECT_EQ(given.groups[0].cases.at(0).heads_kv, 2);
  EXPECT_EQ(given.groups[1].cases.at(0).heads_kv, 1);
  EXPECT_EQ(given.groups[1].cases.at(1).heads_kv, 4);
  EXPECT_EQ(given.groups[2].cases.at(0).heads_q, 3);
  EXPECT_EQ(given.groups[2].cases.at(0).heads_kv, 3);
}

TEST(ConfigParse, HashIgnoresKeyOrderButNotValues) {
  const Config a = parse_ok(R"({"name": "h", "implementations": ["cpu.*"], "problem": {"seq": 8, "head_dim": 16}})");
  const Config b = parse_ok(R"({"problem": {"head_dim": 16, "seq": 8}, "implementations": ["cpu.*"], "name": "h"})");
  const Config c = parse_ok(R"({"name": "h", "implementations": ["cpu.*"], "problem": {"seq": 9, "head_dim": 16}})");
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_NE(a.hash(), c.hash());
  EXPECT_EQ(a.hash().size(), 16u);
  EXPECT_EQ(hex64(fnv1a64("")), "cbf29ce484222325");  // the FNV-1a 64 offset basis
  EXPECT_EQ(hex64(fnv1a64("a")), "af63dc4c8601ec8c");
}

TEST(ConfigParse, ErrorsCarryPathAndValue) {
  const ConfigResult r = parse_config(R"({"implementations": ["cpu.*"], "sweep": {"product": {"seq_q": [16, 32, -5]}}})");
  const auto* e = std::get_if<ConfigError>(&r);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->path, "/sweep/product/seq_q/2");
  EXPECT_EQ(e->value, "-5");
  EXPECT_EQ(e->text(), "/sweep/product/seq_q/2 = -5: must be a positive integer");
}

std::string read_config(const char* name) {
  std::ifstream f(fs::path(source_dir()) / "configs" / name);
  EXPECT_TRUE(f) << name;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool cuda_built() {
  for (const auto* i : Registry::instance().all()) {
    if (i->device() == Device::cuda) return true;
  }
  return false;
}

TEST(ConfigParse, ShippedConfigsParse) {
  for (const char* name : {"smoke.json", "default.json"}) {
    const ConfigResult r = parse_config(read_config(name));
    const auto* e = std::get_if<ConfigError>(&r);
    EXPECT_EQ(e, nullptr) << name << ": " << (e ? e->text() : "");
  }
  // Only CUDA implementations: valid, but nothing to run in a CPU-only build.
  const std::pair<const char*, std::size_t> gpu_configs[] = {
      {"fa2_grid.json", 24},  // 6 seq x 2 head_dim x 2 causal
      {"window.json", 18},    // 3 windows x 2 (symmetric, causal) x 3 seq
      {"softcap.json", 24},   // 2 softcaps x 2 causal x 2 head_dims x 3 seq
      {"fp16_parity.json", 36},     // 2 causal x 2 dtypes x 3 head_dims x 3 seq
      {"tune_bwd_wgmma.json", 18},  // 2 causal x 3 head_dims x 3 seq
  };
  {
    // CPU and CUDA implementations: its lengths are fixed by the seed, 16384 tokens in all.
    const ConfigResult r = parse_config(read_config("varlen.json"));
    ASSERT_TRUE(std::holds_alternative<Config>(r)) << std::get<ConfigError>(r).text();
    const Config& c = std::get<Config>(r);
    ASSERT_EQ(c.case_count(), 2u);  // causal and not
    for (const Problem& p : c.groups.at(0).cases) {
      EXPECT_TRUE(p.varlen());
      EXPECT_EQ(p.total_q(), 16384);
      EXPECT_EQ(p.head_dim, 128);
      EXPECT_EQ(p.dtype, DType::bf16);
    }
  }
  for (const auto& [name, cases] : gpu_configs) {
    const ConfigResult r = parse_config(read_config(name));
    if (cuda_built()) {
      ASSERT_TRUE(std::holds_alternative<Config>(r))
          << name << ": " << std::get<ConfigError>(r).text();
      EXPECT_EQ(std::get<Config>(r).case_count(), cases) << name;
      // CUDA-only in every group, so the CPU-only build's "nothing to run" holds (checked here
      // too: the CPU-only build runs only under sanitize.sh, in CI).
      for (const ConfigGroup& group : std::get<Config>(r).groups) {
        for (const ImplRun& run : group.impls) {
          EXPECT_EQ(run.impl->device(), Device::cuda) << name << ": " << run.impl->name();
        }
      }
    } else {
      ASSERT_TRUE(std::holds_alternative<ConfigError>(r)) << name;
      EXPECT_NE(std::get<ConfigError>(r).message.find("nothing to run"), std::string::npos) << name;
    }
  }
}

TEST(ConfigParse, DeviceGlobsOfAnAbsentDeviceAreNotErrors) {
  // "cuda.*" must keep default.json valid in a build without CUDA; a typo stays an error.
  const ConfigResult r = parse_config(R"({"implementations": ["cpu.naive_3pass", "cuda.*"]})");
  EXPECT_TRUE(std::holds_alternative<Config>(r));
  const ConfigResult bad = parse_config(R"({"implementations": ["cpu.naive_3pass", "cpux.*"]})");
  ASSERT_TRUE(std::holds_alternative<ConfigError>(bad));
  EXPECT_EQ(std::get<ConfigError>(bad).path, "/implementations/1");
}

}  // namespace
