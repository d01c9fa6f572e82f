// attnbench table: the paper-style tables (TFLOP/s, speedup, memory) on a planted results file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "attnbench/table.hpp"

namespace attnbench {
namespace {

using nlohmann::json;

constexpr int kBatch = 4, kHeads = 16, kDim = 64;

// One row at sequence length seq with median time ms; tflops and memory follow from the shape
// (bf16 q, k, v, o and float32 LSE; a standard implementation's workspace holds S and P).
json row(int seq, const std::string& impl, double ms, const std::string& status = "pass",
         const std::string& pass = "fwd", bool causal = false, int batch = kBatch) {
  const double flops = 4.0 * batch * kHeads * double(seq) * seq * kDim * (causal ? 0.5 : 1.0);
  const std::int64_t io = 4LL * batch * seq * kHeads * kDim * 2 + 4LL * batch * kHeads * seq;
  const std::int64_t ws =
      impl.find("standard") != std::string::npos ? 2LL * batch * kHeads * seq * seq * 2 : 0;
  const std::string label = "b" + std::to_string(batch) + "_hq16_hkv16_sq" + std::to_string(seq) +
                            "_skv" + std::to_string(seq) + "_d64" + (causal ? "_causal" : "") +
                            "_bf16";
  json r = {{"case", label},
            {"problem",
             {{"batch", batch},
              {"heads_q", kHeads},
              {"heads_kv", kHeads},
              {"seq_q", seq},
              {"seq_kv", seq},
              {"head_dim", kDim},
              {"causal", causal},
              {"scale", 0.125},
              {"dtype", "bf16"}}},
            {"impl", impl},
            {"device", "cuda:0"},
            {"pass", pass},
            {"status", status},
            {"reason", status == "pass" ? "" : "planted"},
            {"flops", flops},
            {"memory", {{"io_bytes", io}, {"workspace_bytes", ws}, {"peak_bytes", io + ws}}}};
  if (status != "skip") {
    r["time"] = {
        {"median_ms", ms}, {"min_ms", ms}, {"mean_ms", ms}, {"cv", 0.0}, {"repetitions", 3}};
    r["tflops"] = flops / (ms * 1e-3) / 1e12;
  }
  return r;
}

json results(json rows) {
  return {{"schema", "attnbench.results/2"},
          {"complete", true},
          {"context",
           {{"cpu", "Test CPU"},
            {"build_type", "Release"},
            {"git_revision", "abc123"},
            {"git_dirty", false},
            {"config_name", "fixture"},
            {"devices", json::array({{{"name", "NVIDIA H200"}}})}}},
          {"rows", std::move(rows)}};
}

// Two implementations x three sequence lengths. Speedups 2, 2.5, 4.
json two_impls() {
  json rows = json::array();
  const double std_ms[] = {1.0, 3.0, 10.0}, flash_ms[] = {0.5, 1.2, 2.5};
  const int seqs[] = {512, 1024, 2048};
  for (int i = 0; i < 3; ++i) {
    rows.push_back(row(seqs[i], "cuda.standard_cublas", std_ms[i]));
    rows.push_back(row(seqs[i], "cuda.flash_fwd", flash_ms[i]));
  }
  return results(rows);
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> v;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

// The trimmed cells of a markdown row.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> v;
  std::string cur;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '|') {
      const auto b = cur.find_first_not_of(' '), e = cur.find_last_not_of(' ');
      v.push_back(b == std::string::npos ? "" : cur.substr(b, e - b + 1));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return v;
}

// The rows of the markdown table whose title contains `title`: label -> cells after it.
std::map<std::string, std::vector<std::string>> md_table(const std::string& out,
                                                         const std::string& title) {
  std::map<std::string, std::vector<std::string>> t;
  const auto ls = lines(out);
  std::size_t i = 0;
  while (i < ls.size() && !(ls[i].rfind("### ", 0) == 0 && ls[i].find(title) != std::string::npos))
    ++i;
  for (i += 2; i < ls.size() && !ls[i].empty() && ls[i][0] == '|'; ++i) {
    auto c = cells(ls[i]);
    if (c[0].rfind(":-", 0) == 0) continue;  // the alignment row
    t[c[0]] = std::vector<std::string>(c.begin() + 1, c.end());
  }
  return t;
}

class Table : public ::testing::Test {
 protected:
  std::filesystem::path dir;
  void SetUp() override {
    dir = std::filesystem::path(::testing::TempDir()) /
          ("attnbench_table_" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  int run(const json& j, TableOptions o, std::string& out, std::string& err) {
    o.results = (dir / "results.json").string();
    std::ofstream(o.results) << j.dump(1);
    std::ostringstream os, es;
    const int code = run_table(o, os, es);
    out = os.str();
    err = es.str();
    return code;
  }
  std::string render(const json& j, TableOptions o = {}) {
    std::string out, err;
    EXPECT_EQ(run(j, o, out, err), 0) << err;
    return out;
  }
};

using Cells = std::vector<std::string>;

TEST_F(Table, MarkdownHasTflopsSpeedupsAndMemory) {
  const std::string out = render(two_impls());
  EXPECT_NE(out.find("NVIDIA H200"), std::string::npos) << out;

  const auto tf = md_table(out, "fwd · d 64 · non-causal · bf16 · b 4, hq 16, hkv 16 — TFLOP/s");
  ASSERT_EQ(tf.size(), 3u) << out;  // header + 2 impls
  EXPECT_EQ(tf.at("impl"), (Cells{"seq 512", "seq 1024", "seq 2048"})) << out;
  // 4*4*16*512^2*64 = 4.29e9 FLOP in 1 ms -> 4.29 TFLOP/s; x4 FLOP per doubling of seq.
  EXPECT_EQ(tf.at("cuda.standard_cublas"), (Cells{"4.29", "5.73", "6.87"})) << out;
  EXPECT_EQ(tf.at("cuda.flash_fwd"), (Cells{"8.59", "14.3", "27.5"})) << out;

  const auto sp = md_table(out, "speedup over cuda.standard_cublas");
  ASSERT_EQ(sp.size(), 2u) << out;  // the baseline is not its own row
  EXPECT_EQ(sp.at("cuda.flash_fwd"), (Cells{"2.00", "2.50", "4.00"})) << out;

  // io at seq 512: 4 bf16 tensors of 4*512*16*64 + LSE 4*16*512 floats = 16.125 MiB; the standard
  // workspace (S and P in bf16) is 64 MiB and grows with seq^2.
  const auto mem = md_table(out, "memory (MiB)");
  EXPECT_EQ(mem.at("(inputs + outputs)"), (Cells{"16.1", "32.2", "64.5"})) << out;
  EXPECT_EQ(mem.at("cuda.standard_cublas"), (Cells{"64.0 / 80.1", "256 / 288", "1024 / 1088"}))
      << out;
  EXPECT_EQ(mem.at("cuda.flash_fwd"), (Cells{"0 / 16.1", "0 / 32.2", "0 / 64.5"})) << out;
  // (16.125 + 64) / 16.125 = 4.97; (32.25 + 256) / 32.25 = 8.94; (64.5 + 1024) / 64.5 = 16.88
  const auto red = md_table(out, "memory reduction");
  EXPECT_EQ(red.at("cuda.flash_fwd"), (Cells{"4.97 / 4.97", "8.94 / 8.94", "16.88 / 16.88"}))
      << out;
}

TEST_F(Table, WideCsvHasTheSameTables) {
  TableOptions o;
  o.format = "wide-csv";
  const std::string out = render(two_impls(), o);
  EXPECT_NE(out.find("impl,seq 512,seq 1024,seq 2048\n"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda.standard_cublas,4.29,5.73,6.87\n"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda.flash_fwd,8.59,14.3,27.5\n"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda.flash_fwd,2.00,2.50,4.00\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('|'), std::string::npos) << out;
}

TEST_F(Table, LongCsvHasOneLinePerRow) {
  TableOptions o;
  o.format = "long";
  EXPECT_EQ(render(two_impls(), o), [&] {
    TableOptions c;
    c.format = "csv";  // csv is the tidy format; "long" its earlier name
    return render(two_impls(), c);
  }());
  const auto ls = lines(render(two_impls(), o));
  ASSERT_EQ(ls.size(), 7u);  // header + 6 rows
  const auto header = ls[0];
  EXPECT_EQ(header.rfind("pass,head_dim,causal,dtype,", 0), 0u) << header;
  EXPECT_NE(header.find(",impl,options,device,"), std::string::npos) << header;
  // The flash row at seq 2048: speedup 4 and footprint reduction 16.88 against standard_cublas.
  bool found = false;
  for (const auto& l : ls) {
    if (l.find("sq2048") == std::string::npos || l.find("cuda.flash_fwd") == std::string::npos)
      continue;
    found = true;
    EXPECT_NE(l.find(",cuda.standard_cublas,4,"), std::string::npos) << l;
    EXPECT_NE(l.find(",16.876,"), std::string::npos) << l;
  }
  EXPECT_TRUE(found);
}

TEST_F(Table, SkipAndFailCells) {
  json j = two_impls();
  j["rows"][2] = row(1024, "cuda.standard_cublas", 3.0, "fail");
  j["rows"][5] = row(2048, "cuda.flash_fwd", 0, "skip");
  const std::string out = render(j);
  EXPECT_EQ(md_table(out, "TFLOP/s").at("cuda.standard_cublas"), (Cells{"4.29", "FAIL", "6.87"}))
      << out;
  EXPECT_EQ(md_table(out, "TFLOP/s").at("cuda.flash_fwd"), (Cells{"8.59", "14.3", "skip"})) << out;
  // No speedup against a failed baseline; a skipped row stays "skip".
  EXPECT_EQ(md_table(out, "speedup").at("cuda.flash_fwd"), (Cells{"2.00", "-", "skip"})) << out;
}

TEST_F(Table, ImplSkippedEverywhereBecomesANote) {
  json j = two_impls();
  for (int seq : {512, 1024, 2048}) {
    json r = row(seq, "cuda.flash_bwd", 0, "skip");
    r["reason"] = "backward-only";
    j["rows"].push_back(r);
  }
  const std::string out = render(j);
  EXPECT_EQ(md_table(out, "TFLOP/s").count("cuda.flash_bwd"), 0u) << out;
  EXPECT_NE(out.find("Skipped in every case: cuda.flash_bwd (backward-only)."), std::string::npos)
      << out;
}

TEST_F(Table, SmallRatesArePrintedInGflops) {
  json rows = json::array();
  for (int seq : {64, 128}) {
    json r = row(seq, "cpu.naive_3pass", 1.0);
    r["tflops"] = 0.00125 * seq / 64;
    rows.push_back(r);
  }
  const std::string out = render(results(rows));
  EXPECT_EQ(md_table(out, "GFLOP/s").at("cpu.naive_3pass"), (Cells{"1.25", "2.50"})) << out;
}

TEST_F(Table, OneTablePerPassHeadDimCausalDtype) {
  json j = two_impls();
  j["rows"].push_back(row(512, "cuda.flash_fwd", 0.3, "pass", "fwd", true));
  j["rows"].push_back(row(512, "cuda.flash_bwd", 1.0, "pass", "bwd"));
  const std::string out = render(j);
  const auto a = out.find("### fwd · d 64 · non-causal · bf16");
  const auto b = out.find("### fwd · d 64 · causal · bf16");
  const auto c = out.find("### bwd · d 64 · non-causal · bf16");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_LT(a, c);
  EXPECT_LT(b, c);  // passes in order fwd, bwd, fwd_bwd
  // A one-case group is labelled by its sequence length.
  EXPECT_EQ(md_table(out, "fwd · d 64 · causal").at("impl"), (Cells{"seq 512"})) << out;
}

TEST_F(Table, ZippedSweepLabelsEveryVaryingField) {
  // batch * seq = 16k tokens, as in the FlashAttention-2 grid.
  json rows = json::array();
  for (int seq : {512, 1024, 2048})
    rows.push_back(row(seq, "cuda.flash_fwd", 1.0, "pass", "fwd", false, 16384 / seq));
  const std::string out = render(results(rows));
  EXPECT_EQ(md_table(out, "TFLOP/s").at("impl"),
            (Cells{"seq 512, b 32", "seq 1024, b 16", "seq 2048, b 8"}))
      << out;
  EXPECT_NE(out.find("### fwd · d 64 · non-causal · bf16 · hq 16, hkv 16 — TFLOP/s"),
            std::string::npos)
      << out;
}

TEST_F(Table, BaselineAndMetricOptions) {
  TableOptions o;
  o.baseline = "cuda.flash_fwd";
  o.metric = "ms";
  const std::string out = render(two_impls(), o);
  EXPECT_EQ(md_table(out, "median ms").at("cuda.flash_fwd"), (Cells{"0.5", "1.20", "2.50"})) << out;
  EXPECT_EQ(md_table(out, "speedup over cuda.flash_fwd").at("cuda.standard_cublas"),
            (Cells{"0.50", "0.40", "0.25"}))
      << out;
}

TEST_F(Table, DefaultBaselineFallsBackToCpuNaive) {
  json rows = json::array();
  for (int seq : {128, 256}) {
    rows.push_back(row(seq, "cpu.naive_3pass", 4.0));
    rows.push_back(row(seq, "cpu.flash_fwd", 2.0));
  }
  const std::string out = render(results(rows));
  EXPECT_EQ(md_table(out, "speedup over cpu.naive_3pass").at("cpu.flash_fwd"),
            (Cells{"2.00", "2.00"}))
      << out;
}

TEST_F(Table, OptionsVariantsAreSeparateRows) {
  json rows = json::array();
  for (int bc : {32, 64}) {
    json r = row(1024, "cuda.flash_fwd", bc == 32 ? 2.0 : 1.0);
    r["options"] = {{"block_c", bc}};
    rows.push_back(r);
  }
  rows.push_back(row(1024, "cuda.standard_cublas", 4.0));
  const std::string out = render(results(rows));
  const auto sp = md_table(out, "speedup");
  EXPECT_EQ(sp.at("cuda.flash_fwd [block_c=32]"), (Cells{"2.00"})) << out;
  EXPECT_EQ(sp.at("cuda.flash_fwd [block_c=64]"), (Cells{"4.00"})) << out;
}

// A file written before the names lined up (schema 1, "params", cpu.flash_1pass) shows today's
// names, and --baseline takes the former one too.
TEST_F(Table, AnOldFileShowsTodaysNames) {
  json rows = json::array();
  for (int seq : {128, 256}) {
    rows.push_back(row(seq, "cpu.naive_3pass", 4.0));
    json r = row(seq, "cpu.flash_1pass", 2.0);
    r["params"] = {{"block_c", 64}};
    rows.push_back(r);
  }
  json old = results(rows);
  old["schema"] = "attnbench.results/1";
  std::string out = render(old);
  EXPECT_EQ(md_table(out, "speedup over cpu.naive_3pass").at("cpu.flash_fwd [block_c=64]"),
            (Cells{"2.00", "2.00"}))
      << out;
  EXPECT_EQ(out.find("cpu.flash_1pass"), std::string::npos) << out;
  TableOptions o;
  o.baseline = "cpu.flash_1pass [block_c=64]";
  std::string err;
  ASSERT_EQ(run(old, o, out, err), 0) << err;
  EXPECT_EQ(md_table(out, "speedup over cpu.flash_fwd [block_c=64]").at("cpu.naive_3pass"),
            (Cells{"0.50", "0.50"}))
      << out;
  EXPECT_NE(err.find("note: cpu.flash_1pass is the former name of cpu.flash_fwd"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), std::string::npos) << err;
}

TEST_F(Table, HbmTrafficWhenMerged) {
  json j = two_impls();
  j["rows"][0]["extra"] = {{"hbm_read_bytes", 30e9}, {"hbm_write_bytes", 10.3e9}};
  const std::string out = render(j);
  EXPECT_EQ(md_table(out, "HBM traffic").at("cuda.standard_cublas"), (Cells{"40.3", "-", "-"}))
      << out;
}

TEST_F(Table, BadInputsExitTwo) {
  std::string out, err;
  TableOptions o;
  o.format = "html";
  EXPECT_EQ(run(two_impls(), o, out, err), 2);
  EXPECT_NE(err.find("--format"), std::string::npos) << err;
  o = {};
  o.metric = "watts";
  EXPECT_EQ(run(two_impls(), o, out, err), 2);
  json bad = two_impls();
  bad["rows"][0].erase("problem");
  EXPECT_EQ(run(bad, {}, out, err), 2);
  EXPECT_NE(err.find("$.rows[0].problem: missing"), std::string::npos) << err;
}

}  // namespace
}  // namespace attnbench
