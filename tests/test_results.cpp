// The results module: a row written and read back is the same row (the writer and the strict
// reader agree on every field), the strict reader names the JSON path of what is wrong, and the
// --resume checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attnbench/context.hpp"
#include "attnbench/results.hpp"
#include "test_util.hpp"

namespace attnbench {
namespace {

using ojson = nlohmann::ordered_json;

// A row with every field the writer knows, including the awkward ones: a NaN error (written as
// null), no peak, options.
ResultRow full_row() {
  ResultRow r;
  r.problem = test::make_problem(2, 8, 2, 17, 33, 64, true, DType::bf16, 0.125);
  r.case_label = r.problem.label();
  r.case_index = 3;
  r.options = {{"block_c", 64}, {"stages", 2}};
  r.impl = "cpu.flash_fwd";
  r.device = "cpu";
  r.pass = Pass::fwd_bwd;
  r.flops = pass_flops(r.problem, r.pass);
  r.nvtx = "cpu.flash_fwd+block_c=64+stages=2:" + r.case_label + ":fwd_bwd";
  r.status = Status::fail;
  r.reason = "dQ: max_abs nan > bound 0.1";
  r.verified = true;
  r.verify_mode = VerifyMode::sampled;
  r.baseline = "cpu.naive_3pass";
  OutputReport o;
  o.name = "dQ";
  o.checked = 1234;
  o.nonfinite = 5;
  o.max_abs = std::numeric_limits<double>::quiet_NaN();
  o.rel_l2 = 0.25;
  o.naive_max_abs = 1e-3;
  o.atol = 2e-4;
  o.bound = 3.2e-3;
  o.ratio = 7.5;
  o.abs_bound = 0.125;
  o.naive_ok = false;
  o.naive_nonfinite = 3;
  o.ok = false;
  o.why = "5 element(s) NaN";
  r.outputs = {o};
  r.time =
      TimeStats{1.5, 1.25, 1.625, 0.0625, 5, 20, true, {1.5, 1.25, 1.75, 1.5, 1.625}, 0.5, "read"};
  r.memory = MemoryStats{1 << 20, 4096, std::nullopt, "VmHWM-reset"};
  return r;
}

ResultsFile file_of(std::vector<ResultRow> rows) {
  ResultsFile f;
  f.complete = false;
  f.stop_reason = "run in progress";
  f.context["config_hash"] = "0123456789abcdef";
  f.context["profile"] = false;
  f.context["git_revision"] = "abc";
  f.rows = std::move(rows);
  return f;
}

TEST(Results, WrittenAndReadBackIsTheSameFile) {
  ResultRow skipped;
  skipped.problem = test::make_problem(1, 1, 1, 5, 7, 8, false);
  skipped.case_label = skipped.problem.label();
  skipped.impl = "cuda.flash_fwd";
  skipped.device = "cuda:0";
  skipped.status = Status::skip;
  skipped.reason = "no CUDA device";
  const ojson written = results_to_json(file_of({full_row(), skipped}));
  const ResultsFile back = parse_results(ojson::parse(written.dump()), "<written>");
  EXPECT_EQ(results_to_json(back), written) << written.dump(1);

  const ResultRow& r = back.rows[0];
  EXPECT_EQ(r.pass, Pass::fwd_bwd);
  EXPECT_EQ(r.problem.dtype, DType::bf16);
  EXPECT_EQ(r.options.at("block_c"), 64);
  EXPECT_EQ(r.impl_in_file, "");
  EXPECT_TRUE(std::isnan(r.outputs[0].max_abs));
  EXPECT_EQ(r.outputs[0].abs_bound, 0.125);
  EXPECT_FALSE(r.outputs[0].naive_ok);
  EXPECT_EQ(r.outputs[0].naive_nonfinite, 3);
  EXPECT_FALSE(r.memory->peak_bytes.has_value());
  EXPECT_DOUBLE_EQ(*r.tflops(), r.flops / 1.5e-3 / 1e12);
  EXPECT_EQ(r.time->samples_ms, (std::vector<double>{1.5, 1.25, 1.75, 1.5, 1.625}));
  EXPECT_EQ(r.time->others_cores, 0.5);
  EXPECT_EQ(r.time->flush, "read");
  EXPECT_FALSE(back.rows[1].verified);
  EXPECT_FALSE(back.rows[1].time.has_value());
}

// The message names the file, the JSON path and the value.
TEST(Results, StrictReaderNamesThePath) {
  const ojson good = results_to_json(file_of({full_row()}));
  auto message = [&](const char* pointer, const ojson& value) {
    ojson j = good;
    j[ojson::json_pointer(pointer)] = value;
    try {
      parse_results(j, "f.json");
    } catch (const ResultsError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("/rows/0/problem/dtype", "fp8"),
            "f.json: $.rows[0].problem.dtype: \"fp8\" is not one of f32, f16, bf16");
  EXPECT_EQ(message("/rows/0/options/block_c", 1.5),
            "f.json: $.rows[0].options.block_c: expected an integer, got 1.5");
  EXPECT_EQ(message("/rows/0/pass", "both"),
            "f.json: $.rows[0].pass: \"both\" is not one of fwd, bwd, fwd_bwd");
  EXPECT_EQ(message("/rows/0/time/median_ms", -1),
            "f.json: $.rows[0].time.median_ms: expected a time >= 0, got -1");
  EXPECT_EQ(message("/rows/0/time/samples_ms/2", "slow"),
            "f.json: $.rows[0].time.samples_ms[2]: expected a time >= 0, got \"slow\"");
  EXPECT_EQ(message("/rows/0/time/samples_ms", 3),
            "f.json: $.rows[0].time.samples_ms: expected an array, got 3");
  EXPECT_EQ(message("/schema", "attnbench.results/0"),
            "f.json: $.schema: \"attnbench.results/0\" is not supported (expected "
            "\"attnbench.results/2\" or \"attnbench.results/1\")");
}

// What this version writes: schema 2, the option set under "options", never "params".
TEST(Results, TheWriterWritesOptions) {
  const ojson j = results_to_json(file_of({full_row()}));
  EXPECT_EQ(j["schema"], "attnbench.results/2");
  EXPECT_EQ(j["rows"][0]["options"]["block_c"], 64);
  EXPECT_FALSE(j["rows"][0].contains("params"));
}

// A row of a file written before the names lined up (schema 1, "params", the former name
// cpu.flash_1pass) reads as today's row: the same key, so table and compare match it.
TEST(Results, AnOldRowReadsAsTodays) {
  const ojson today = results_to_json(file_of({full_row()}));
  ojson old = today;
  old["schema"] = "attnbench.results/1";
  ojson& row = old["rows"][0];
  row["params"] = row["options"];
  row.erase("options");
  row["impl"] = "cpu.flash_1pass";
  row["verify"]["baseline"] = "cpu.naive_3pass";
  const ResultsFile back = parse_results(old, "old.json");
  const ResultRow& r = back.rows.at(0);
  EXPECT_EQ(r.impl, "cpu.flash_fwd");
  EXPECT_EQ(r.impl_in_file, "cpu.flash_1pass");
  EXPECT_EQ(r.options, (Options{{"block_c", 64}, {"stages", 2}}));
  EXPECT_EQ(r.key(), parse_results(today, "new.json").rows.at(0).key());
  // The other former name, and a row of the old schema without options.
  row["impl"] = "cpu.flash_backward";
  row.erase("params");
  EXPECT_EQ(parse_results(old, "old.json").rows.at(0).impl, "cpu.flash_bwd");
  EXPECT_TRUE(parse_results(old, "old.json").rows.at(0).options.empty());

  // Both keys in one row: which one counts is not for the reader to guess.
  ojson both = today;
  both["rows"][0]["params"] = {{"block_c", 128}};
  try {
    parse_results(both, "both.json");
    ADD_FAILURE() << "a row with both \"options\" and \"params\" was accepted";
  } catch (const ResultsError& e) {
    EXPECT_EQ(std::string(e.what()),
              "both.json: $.rows[0]: both \"options\" and \"params\" (its former name): a row has "
              "one");
  }
  EXPECT_TRUE(results_schema_supported("attnbench.results/1"));
  EXPECT_FALSE(results_schema_supported("attnbench.results/3"));
}

// A committed record written before the rename (results/h200/default.json: schema 1, "params",
// cpu.flash_1pass and cpu.flash_backward) loads under today's names.
TEST(Results, TheCommittedH200DefaultLoadsUnderTodaysNames) {
  const ResultsFile f = load_results(source_dir() + "/results/h200/default.json");
  int fwd = 0, bwd = 0;
  for (const ResultRow& r : f.rows) {
    EXPECT_NE(r.impl, "cpu.flash_1pass");
    EXPECT_NE(r.impl, "cpu.flash_backward");
    fwd += r.impl == "cpu.flash_fwd";
    bwd += r.impl == "cpu.flash_bwd";
  }
  EXPECT_GT(fwd, 0);
  EXPECT_GT(bwd, 0);
}

TEST(Results, ResumeRefusesAnotherConfigModeOrBuild) {
  const ResultsFile f = file_of({});
  EXPECT_EQ(resume_refusal(f, "x.json", "0123456789abcdef", false, "abc"), "");
  EXPECT_EQ(
      resume_refusal(f, "x.json", "fedcba9876543210", false, "abc"),
      "--resume = x.json: written by another config (config_hash '0123456789abcdef', this run's "
      "'fedcba9876543210'): resume with the same config and overrides");
  EXPECT_EQ(resume_refusal(f, "x.json", "0123456789abcdef", true, "abc"),
            "--resume = x.json: written without --profile, this run is with it");
  EXPECT_EQ(resume_refusal(f, "x.json", "0123456789abcdef", false, "def"),
            "--resume = x.json: written by git revision 'abc', this build is 'def': rerun instead "
            "of mixing two "
            "builds' rows");
}

TEST(Results, ResumeKeepsVerdictsWithATime) {
  ResultRow r = full_row();
  EXPECT_TRUE(kept_on_resume(r, false));  // a FAIL
  r.status = Status::pass;
  EXPECT_TRUE(kept_on_resume(r, false));
  r.time.reset();
  EXPECT_FALSE(kept_on_resume(r, false));  // not timed yet
  EXPECT_TRUE(kept_on_resume(r, true));    // profiling times nothing
  EXPECT_TRUE(verdict_kept_on_resume(r, false));   // verified: only its timing runs again
  EXPECT_FALSE(verdict_kept_on_resume(r, true));   // (kept as it is when profiling)
  r.status = Status::skip;
  EXPECT_FALSE(kept_on_resume(r, true));
  EXPECT_FALSE(verdict_kept_on_resume(r, false));
  r.status = Status::fail;
  EXPECT_FALSE(verdict_kept_on_resume(r, false));  // a FAIL is kept as it is
  r = full_row();
  r.status = Status::pass;
  EXPECT_FALSE(verdict_kept_on_resume(r, false));  // timed: kept as it is

  // The measurements move; the identity is the plan's.
  const ResultRow earlier = full_row();
  ResultRow planned;
  planned.impl = "cpu.flash_fwd";
  planned.nvtx = "planned";
  copy_measurements(earlier, planned);
  EXPECT_EQ(planned.nvtx, "planned");
  EXPECT_EQ(planned.status, Status::fail);
  EXPECT_EQ(planned.outputs.size(), 1u);
  EXPECT_EQ(planned.time->iterations, 20);
  EXPECT_EQ(planned.memory->peak_method, "VmHWM-reset");
}

// The statistics of a row's repetitions (timing's fallback without Google Benchmark's aggregates,
// and compare's rerun invocations): by hand, sd = sqrt(5 / 3) over mean 2.5.
TEST(Results, SummarizeSamples) {
  const TimeStats t = summarize_samples({3, 1, 2, 4});
  EXPECT_EQ(t.median_ms, 2.5);
  EXPECT_EQ(t.min_ms, 1);
  EXPECT_EQ(t.mean_ms, 2.5);
  EXPECT_NEAR(t.cv, std::sqrt(5.0 / 3.0) / 2.5, 1e-15);
  EXPECT_EQ(t.repetitions, 4);
  EXPECT_EQ(t.samples_ms, (std::vector<double>{3, 1, 2, 4}));  // in the order measured
  EXPECT_EQ(summarize_samples({7}).cv, 0);
  EXPECT_EQ(summarize_samples({}).median_ms, 0);
}

}  // namespace
}  // namespace attnbench
