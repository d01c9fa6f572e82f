// `run --devices` (devices.hpp) without a GPU: the device list, the FLOP-balanced partition of the
// cases, the merge of the parts (results.hpp, merge_parts), and, end to end through the attnbench
// binary with the test hook ATTNBENCH_TEST_DEVICE_COUNT (docs/multi_gpu.md): real worker
// processes on CPU rows, their parts, the merged file that table and compare read, a dead worker
// (ATTNBENCH_TEST_KILL_WORKER) and the --resume that finishes its part.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attnbench/config.hpp"
#include "attnbench/context.hpp"
#include "attnbench/devices.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/results.hpp"
#include "test_util.hpp"

#ifndef ATTNBENCH_EXE
#error "ATTNBENCH_EXE (the attnbench binary) must be defined by the build"
#endif

namespace {

using namespace attnbench;
namespace fs = std::filesystem;
using attnbench::test::CliResult;
using attnbench::test::run_cli;

// ---- The device list ------------------------------------------------------------------------------

TEST(Devices, ParsesAllAndLists) {
  std::string why;
  EXPECT_EQ(parse_devices("all", 3, why), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(parse_devices("2,0", 3, why), (std::vector<int>{2, 0}));
  EXPECT_EQ(parse_devices("1", 2, why), (std::vector<int>{1}));
}

TEST(Devices, RefusesBadListsNamingTheValue) {
  struct Bad {
    const char* text;
    int count;
    const char* says;
  };
  for (const Bad& b : {Bad{"all", 0, "no CUDA device"}, Bad{"0", 0, "device 0 does not exist (this machine has 0 CUDA devices)"},
                       Bad{"0,0", 2, "listed twice"}, Bad{"0,x", 2, "\"x\" is not a device index"},
                       Bad{"-1", 2, "\"-1\" is not a device index"}, Bad{"", 2, "expected all"},
                       Bad{"0,", 2, "expected all"}, Bad{"3", 2, "device 3 does not exist"}}) {
    std::string why;
    EXPECT_FALSE(parse_devices(b.text, b.count, why)) << b.text;
    EXPECT_EQ(why.rfind(std::string("--devices = ") + b.text + ": ", 0), 0u) << why;
    EXPECT_NE(why.find(b.says), std::string::npos) << why;
  }
}

// ---- The partition --------------------------------------------------------------------------------

TEST(Devices, PartitionCoversEveryCaseOnceAndBalances) {
  // fa2_grid-like weights: seq 512 .. 16k, quadratic in seq.
  std::vector<double> w;
  for (int rep = 0; rep < 4; ++rep)
    for (double s : {512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0}) w.push_back(s * s);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (int bins : {1, 2, 3, 4, 8}) {
    const auto parts = partition_by_flops(w, bins);
    ASSERT_EQ(parts.size(), static_cast<std::size_t>(bins));
    std::vector<int> seen(w.size(), 0);
    double heaviest = 0;
    for (const auto& p : parts) {
      EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
      double load = 0;
      for (int i : p) {
        ++seen[i];
        load += w[i];
      }
      heaviest = std::max(heaviest, load);
    }
    for (int s : seen) EXPECT_EQ(s, 1);
    // Largest-first greedy: never more than the largest case above the ideal share.
    EXPECT_LE(heaviest, total / bins + *std::max_element(w.begin(), w.end())) << bins;
    if (bins == 1 || bins == 2 || bins == 4) {  // 4 cases of each size: an even split exists
      EXPECT_LE(heaviest, 1.05 * total / bins) << bins;
    }
  }
}

TEST(Devices, PartitionIsDeterministicAndAllowsEmptyBins) {
  const std::vector<double> w{5, 1, 5, 3};
  EXPECT_EQ(partition_by_flops(w, 2), (std::vector<std::vector<int>>{{0, 3}, {1, 2}}));
  const auto three = partition_by_flops({7}, 3);
  EXPECT_EQ(three, (std::vector<std::vector<int>>{{0}, {}, {}}));
  EXPECT_THROW(partition_by_flops(w, 0), std::invalid_argument);
  EXPECT_EQ(part_path("r/x.json", 1, 3), "r/x.json.parts/part-1-cuda3.json");
}

TEST(Devices, CaseFlopsFollowTheRunOrder) {
  const ConfigResult r = parse_config(R"({"name": "t", "problem": {"heads_q": 2, "head_dim": 16},
      "sweep": {"product": {"seq": [8, 32]}}, "implementations": ["cpu.naive_3pass", "cpu.flash_fwd"],
      "passes": ["fwd", "bwd"]})");
  ASSERT_TRUE(std::holds_alternative<Config>(r)) << std::get<ConfigError>(r).text();
  const Config& c = std::get<Config>(r);
  const auto w = case_flops(c);
  ASSERT_EQ(w.size(), 2u);
  const Problem& p0 = c.groups[0].cases[0];
  EXPECT_DOUBLE_EQ(w[0], 2 * (pass_flops(p0, Pass::fwd) + pass_flops(p0, Pass::bwd)));
  EXPECT_NEAR(w[1] / w[0], 16.0, 1e-9);  // seq 4x: 16x the pairs
}

// ---- The merge ------------------------------------------------------------------------------------

ResultRow row(int case_index, const std::string& impl, const std::string& device) {
  ResultRow r;
  r.case_index = case_index;
  r.case_label = "c" + std::to_string(case_index);
  r.impl = impl;
  r.device = device;
  r.nvtx = impl + "@" + r.case_label;
  return r;
}

TEST(Devices, MergeOrdersByCaseAndKeepsEveryRow) {
  ResultsFile a, b;
  a.path = "a.json";
  b.path = "b.json";
  a.rows = {row(0, "x", "cuda:0"), row(0, "y", "cuda:0"), row(3, "x", "cuda:0")};
  b.rows = {row(1, "x", "cuda:1"), row(2, "y", "cuda:1"), row(2, "x", "cuda:1")};
  nlohmann::ordered_json ctx = {{"k", 1}};
  const ResultsFile m = merge_parts({a, b}, ctx);
  ASSERT_EQ(m.rows.size(), 6u);
  std::vector<std::string> order;
  for (const auto& r : m.rows) order.push_back(r.nvtx);
  EXPECT_EQ(order, (std::vector<std::string>{"x@c0", "y@c0", "x@c1", "y@c2", "x@c2", "x@c3"}));
  EXPECT_EQ(m.rows[2].device, "cuda:1");
  EXPECT_TRUE(m.complete);
  EXPECT_EQ(m.context, ctx);
  // compare matches on the device kind: the same row on another GPU of the sweep.
  EXPECT_EQ(row(1, "x", "cuda:1").key(), row(1, "x", "cuda:0").key());
  EXPECT_NE(row(1, "x", "cpu").key(), row(1, "x", "cuda:0").key());
}

TEST(Devices, MergeOfAnIncompletePartIsIncompleteAndDuplicatesAreRefused) {
  ResultsFile a, b;
  a.path = "a.json";
  b.path = "b.json";
  a.rows = {row(0, "x", "cuda:0")};
  b.rows = {row(1, "x", "cuda:1")};
  b.complete = false;
  b.stop_reason = "run in progress";
  const ResultsFile m = merge_parts({a, b}, {});
  EXPECT_FALSE(m.complete);
  EXPECT_EQ(m.stop_reason, "b.json: run in progress");
  b.rows.push_back(row(0, "x", "cuda:1"));
  try {
    merge_parts({a, b}, {});
    FAIL() << "a row in two parts was merged";
  } catch (const ResultsError& e) {
    EXPECT_NE(std::string(e.what()).find("row \"x@c0\" is also in a.json"), std::string::npos) << e.what();
  }
}

// ---- End to end: real workers on CPU rows (the test hook) -----------------------------------------

class DevicesE2E : public ::testing::Test {
 protected:
  fs::path dir_;
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("attnbench_devices_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    ::setenv(kFakeDeviceCountEnv, "2", 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);
  }
  void TearDown() override {
    ::unsetenv(kFakeDeviceCountEnv);
    ::unsetenv(kKillWorkerEnv);
    fs::remove_all(dir_);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }
};

// The smoke config's f32 cases, forward: CPU rows run in the workers; CUDA rows (SKIP without a
// GPU) carry their worker's device.
std::string smoke_args() {
  std::string a = "run " + (fs::path(source_dir()) / "configs" / "smoke.json").string() +
                  " --case '*_f32' --pass fwd --quiet --impl cpu.flash_fwd --impl cpu.naive_3pass";
#ifdef ATTNBENCH_WITH_CUDA
  // Without a GPU every CUDA row skips in both runs. With one GPU the second worker's device 1
  // does not exist, so its CUDA rows would skip where the one-process run passes them: left out.
  if (cuda_device_count() != 1) a += " --impl cuda.flash_fwd";
#endif
  return a;
}

TEST_F(DevicesE2E, WorkersWritePartsThatMergeIntoOneFile) {
  const std::string out = path("multi.json"), single = path("single.json");
  CliResult r = run_cli(smoke_args() + " --devices 0,1 --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(part_path(out, 0, 0))) << r.output;
  EXPECT_TRUE(fs::exists(part_path(out, 1, 1))) << r.output;
  const ResultsFile m = load_results(out);
  EXPECT_TRUE(m.complete) << m.stop_reason;
  ASSERT_EQ(m.context.at("workers").size(), 2u);
  std::map<int, int> device_of_case;
  for (const auto& w : m.context.at("workers"))
    for (int c : w.at("cases")) device_of_case[c] = w.at("device").get<int>();
  EXPECT_EQ(device_of_case.size(), 3u);  // smoke has 3 f32 cases
  std::set<int> used;
  for (const auto& [c, d] : device_of_case) used.insert(d);
  EXPECT_EQ(used, (std::set<int>{0, 1})) << "both workers got cases";
  EXPECT_EQ(m.context.at("devices_used"), nlohmann::ordered_json::array({0, 1}));
  EXPECT_TRUE(m.context.contains("devices"));
  for (const auto& w : m.context.at("workers")) EXPECT_TRUE(w.contains("devices")) << w.dump();

  // The same rows as a one-process run, in the same order, each labelled with its device.
  r = run_cli(smoke_args() + " --out " + single);
  ASSERT_EQ(r.code, 0) << r.output;
  const ResultsFile s = load_results(single);
  ASSERT_EQ(m.rows.size(), s.rows.size());
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    EXPECT_EQ(m.rows[i].nvtx, s.rows[i].nvtx) << i;
    EXPECT_EQ(m.rows[i].status, s.rows[i].status) << m.rows[i].nvtx;
    if (m.rows[i].device_kind() == "cuda") {
      EXPECT_EQ(m.rows[i].device, "cuda:" + std::to_string(device_of_case.at(m.rows[i].case_index)));
    } else {
      EXPECT_EQ(m.rows[i].device, "cpu");
    }
  }
  // table and compare read it as any results file.
  r = run_cli("table " + out);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find(" @cuda"), std::string::npos) << "one column per implementation:\n" << r.output;
  r = run_cli("compare " + single + " " + out + " --threshold 1000 --error-factor 1000");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("MISSING in NEW"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("new row (not in BASE)"), std::string::npos) << r.output;
}

TEST_F(DevicesE2E, ADeadWorkersPartIsResumable) {
  const std::string out = path("multi.json");
  ::setenv(kKillWorkerEnv, "1", 1);
  CliResult r = run_cli(smoke_args() + " --devices all --out " + out);
  ::unsetenv(kKillWorkerEnv);
  EXPECT_EQ(r.code, 1) << r.output;
  const ResultsFile dead = load_results(out);
  EXPECT_FALSE(dead.complete);
  EXPECT_NE(dead.stop_reason.find("worker 1 (cuda:1) was killed by signal 9"), std::string::npos) << dead.stop_reason;
  EXPECT_NE(dead.stop_reason.find("--resume " + out), std::string::npos) << dead.stop_reason;
  std::set<int> worker1;
  for (int c : dead.context.at("workers").at(1).at("cases")) worker1.insert(c);
  ASSERT_FALSE(worker1.empty());
  std::size_t finished = 0;
  for (const auto& row : dead.rows) {
    EXPECT_EQ(worker1.count(row.case_index), 0u) << "a row of the dead worker: " << row.nvtx;
    if (kept_on_resume(row, false)) ++finished;
  }
  ASSERT_GT(finished, 0u);

  r = run_cli(smoke_args() + " --devices 0,1 --resume " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const ResultsFile done = load_results(out);
  EXPECT_TRUE(done.complete) << done.stop_reason;
  EXPECT_EQ(done.context.at("rows_kept_from_resume").get<std::size_t>(), finished);
  EXPECT_EQ(done.context.at("resumed_from").get<std::string>(), out);
  std::set<int> cases;
  for (const auto& row : done.rows) cases.insert(row.case_index);
  EXPECT_EQ(cases.size(), 3u);
}

// Ctrl-C (SIGINT to the parent): one SIGINT passed to each worker, which finishes its row and
// writes its part; the merge is incomplete and the exit code 130.
TEST_F(DevicesE2E, SigintReachesEveryWorkerAndTheMergeIsIncomplete) {
  const std::string cfg = path("slow.json"), out = path("interrupted.json");
  std::ofstream(cfg) << R"({"name": "slow", "implementations": ["cpu.naive_3pass"], "passes": ["fwd"],
    "problem": {"head_dim": 16}, "sweep": {"product": {"seq": [8, 9, 10, 11, 12, 13, 14, 15, 16, 17]}},
    "timing": {"min_time_s": 1.0, "repetitions": 3, "warmup_s": 0}})";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(ATTNBENCH_EXE, ATTNBENCH_EXE, "run", cfg.c_str(), "--devices", "0,1", "--out", out.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Both parts appear once the workers' handlers are installed; then they are timing (1 s a row).
  for (int i = 0; i < 200 && !(fs::exists(part_path(out, 0, 0)) && fs::exists(part_path(out, 1, 1))); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const ResultsFile m = load_results(out);
  EXPECT_FALSE(m.complete);
  for (const auto& w : m.context.at("workers")) {
    EXPECT_EQ(w.at("end").get<std::string>(), "was interrupted (exit 130)") << w.dump();
    EXPECT_FALSE(w.at("complete").get<bool>()) << w.dump();
  }
  EXPECT_NE(m.stop_reason.find("interrupted (SIGINT)"), std::string::npos) << m.stop_reason;
}

TEST_F(DevicesE2E, RefusalsExitTwoNamingTheFlag) {
  const std::string out = path("x.json");
  CliResult r = run_cli(smoke_args() + " --devices 0,5 --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--devices = 0,5: device 5 does not exist (this machine has 2 CUDA devices)"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".parts"));
  // Without the test hook, CPU rows are refused (the workers would time them against each other).
  ::unsetenv(kFakeDeviceCountEnv);
  r = run_cli(smoke_args() + " --devices all --out " + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--devices = all: "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
