// Faults during a run: each becomes one FAIL or SKIP row with its reason and the run goes on
// (an implementation that throws, one that writes NaN, one whose workspace cannot be allocated,
// one that fails only while timed; on CUDA a bad launch and a device OOM). A sticky CUDA error
// may end the CUDA part of the run, but the results file is still written, valid, with
// complete=false and a non-zero exit code. SIGINT at any point leaves a valid results file with
// complete=false and exit code 130 (or no file), never a torn one; SIGKILL at any point leaves a
// valid file or none. Every input the config fuzzer found is refused by the CLI with exit code 2.
// The planted implementations are in tests/planted/.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "attnbench/config.hpp"
#include "attnbench/context.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/results.hpp"
#include "attnbench/runner.hpp"

#ifndef ATTNBENCH_EXE
#error "ATTNBENCH_EXE (the attnbench binary) must be defined by the build"
#endif

// Under AddressSanitizer a 1 PiB request must fail like malloc does (null), not abort the
// process: that is the host-OOM path under test.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace {

using namespace attnbench;
namespace fs = std::filesystem;
using json = nlohmann::json;

class Faults : public ::testing::Test {
 protected:
  fs::path dir_;
  void SetUp() override {
    // Death tests re-run this test in a child process: it must use the parent's folder.
    if (const char* d = std::getenv("ATTNBENCH_FAULTS_DIR")) {
      dir_ = d;
    } else {
      dir_ = fs::temp_directory_path() / ("attnbench_faults_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
      ::setenv("ATTNBENCH_FAULTS_DIR", dir_.c_str(), 1);
    }
    fs::create_directories(dir_);
  }
  void TearDown() override {
    ::unsetenv("ATTNBENCH_FAULTS_DIR");
    fs::remove_all(dir_);
  }
  std::string path(const char* name) const { return (dir_ / name).string(); }

  // The config through the real run loop; returns the exit code. profile: no timing phase.
  int run(const std::string& text, bool profile, const std::string& out) {
    const ConfigResult parsed = parse_config(text);
    if (const auto* e = std::get_if<ConfigError>(&parsed)) {
      ADD_FAILURE() << e->text();
      return -1;
    }
    RunOptions ro;
    ro.out_path = out;
    ro.profile = profile;
    ro.quiet = true;
    std::ostringstream o, e;
    return run_config(std::get<Config>(parsed), ro, o, e);
  }
};

// Rows by (impl, case index, pass).
std::map<std::string, json> index_rows(const json& rows) {
  std::map<std::string, json> m;
  for (const auto& r : rows) {
    m[r["impl"].get<std::string>() + "#" + std::to_string(r["case_index"].get<int>()) + "#" + r["pass"].get<std::string>()] = r;
  }
  return m;
}

bool has(const json& row, const std::string& piece) {
  return row["reason"].get<std::string>().find(piece) != std::string::npos;
}

// A child attnbench whose stdout and stderr come through a pipe, read as it runs (a full pipe
// would block it).
class Child {
 public:
  explicit Child(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(ATTNBENCH_EXE));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(ATTNBENCH_EXE, argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (fd_ >= 0) ::close(fd_);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Reads output until `marker` appears (true) or the timeout or end of output (false).
  bool wait_for(const std::string& marker, std::chrono::milliseconds timeout) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (output_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(static_cast<int>(left.count()))) return false;
    }
    return true;
  }
  void pump_for(std::chrono::milliseconds t) {
    const auto until = std::chrono::steady_clock::now() + t;
    for (auto now = until - t; now < until; now = std::chrono::steady_clock::now()) {
      if (!read_some(static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count()) + 1)) {
        std::this_thread::sleep_for(until - now);
        return;
      }
    }
  }
  void signal(int sig) { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // Drains the output and reaps the child; returns its wait status.
  int wait() {
    while (read_some(60000)) {
    }
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  bool reaped_ = false;
  std::string output_;

  // false at end of output or timeout.
  bool read_some(int timeout_ms) {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return false;
    char buf[4096];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) {
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    output_.append(buf, static_cast<std::size_t>(n));
    return true;
  }
};

// ---- CPU faults --------------------------------------------------------------------------------

TEST_F(Faults, CpuFaultsAreRowsAndTheRunGoesOn) {
  const std::string out = path("cpu.json");
  // Two cases so that every fault is followed by more rows; timing on, so the timing phase runs
  // after the faults and cpu.planted_throws_timed fails there.
  const int rc = run(R"({"name": "faults", "implementations": ["cpu.naive_3pass", "cpu.planted_control",
      "cpu.planted_host_oom", "cpu.planted_nan", "cpu.planted_throws", "cpu.planted_throws_timed"],
      "passes": ["fwd", "bwd"], "verify": {"mode": "full"},
      "timing": {"min_time_s": 0.001, "repetitions": 1, "warmup_s": 0},
      "sweep": {"zip": [{"seq_q": [17, 24], "seq_kv": [17, 40], "heads_kv": [4, 2], "causal": [false, true]}]},
      "problem": {"heads_q": 4, "head_dim": 32, "dtype": "f32"}})",
                     false, out);
  EXPECT_EQ(rc, 1) << "rows failed: exit code 1";
  const json j = read_results_json(out);
  EXPECT_TRUE(j["complete"].get<bool>()) << j["stop_reason"];
  ASSERT_EQ(j["rows"].size(), 2u * 6u * 2u) << "every planned row is in the file";
  const auto rows = index_rows(j["rows"]);
  for (int c = 0; c < 2; ++c) {
    const std::string k = "#" + std::to_string(c) + "#";
    for (const char* pass : {"fwd", "bwd"}) {
      const std::string kp = k + pass;
      // The correct implementations run (and are timed) after the faults, in both cases.
      for (const char* ok : {"cpu.naive_3pass", "cpu.planted_control"}) {
        const json& r = rows.at(ok + kp);
        EXPECT_EQ(r["status"], "pass") << ok << kp << ": " << r["reason"];
        EXPECT_TRUE(r.contains("time")) << ok << kp << " was not timed";
      }
      const json& oom = rows.at("cpu.planted_host_oom" + kp);
      EXPECT_EQ(oom["status"], "skip");
      EXPECT_TRUE(has(oom, "out of memory")) << oom["reason"];
      const json& thr = rows.at("cpu.planted_throws" + kp);
      EXPECT_EQ(thr["status"], "fail");
      EXPECT_TRUE(has(thr, std::string("planted: ") + (pass == std::string("fwd") ? "forward" : "backward") + " threw on purpose"))
          << thr["reason"];
      EXPECT_FALSE(thr.contains("time"));
      const json& nan = rows.at("cpu.planted_nan" + kp);
      EXPECT_EQ(nan["status"], "fail");
      EXPECT_TRUE(has(nan, pass == std::string("fwd") ? "O: 1 element(s) NaN" : "dQ: 1 element(s) NaN")) << nan["reason"];
    }
    const json& timed = rows.at("cpu.planted_throws_timed" + k + "fwd");
    EXPECT_EQ(timed["status"], "fail");
    EXPECT_TRUE(has(timed, "timed call failed")) << timed["reason"];
    EXPECT_TRUE(has(timed, "planted: timed call threw on purpose")) << timed["reason"];
    EXPECT_EQ(rows.at("cpu.planted_throws_timed" + k + "bwd")["status"], "pass");  // its backward is fine
  }
  EXPECT_EQ(j["summary"]["skip"], 4);
  EXPECT_EQ(j["summary"]["fail"], 2 * 5);
}

// The workspace's zeroed prefix (Implementation::workspace_zeroed_bytes): zero at each case's first
// call, kept by an implementation that leaves it zero through the timed calls; one that leaves it
// dirty fails at its next call; a forward partner asking for one is refused in fwd_bwd rows.
TEST_F(Faults, WorkspaceZeroedPrefixHoldsAcrossCalls) {
  const std::string out = path("zeroed.json");
  const int rc = run(R"({"name": "zeroed", "implementations": ["cpu.planted_zeroed_ws", "cpu.planted_dirty_ws",
      "cpu.planted_zeroed_ws_bwd"], "passes": ["fwd", "fwd_bwd"], "verify": {"mode": "full"},
      "timing": {"min_time_s": 0.001, "repetitions": 2, "warmup_s": 0},
      "sweep": {"product": {"seq_q": [17, 24]}},
      "problem": {"heads_q": 4, "heads_kv": 2, "seq_kv": 33, "head_dim": 32, "dtype": "f32"}})",
                     false, out);
  EXPECT_EQ(rc, 1) << "rows failed: exit code 1";
  const json j = read_results_json(out);
  const auto rows = index_rows(j["rows"]);
  for (int c = 0; c < 2; ++c) {
    const std::string k = "#" + std::to_string(c) + "#";
    for (const char* pass : {"fwd", "fwd_bwd"}) {
      const json& ok = rows.at("cpu.planted_zeroed_ws" + k + pass);
      EXPECT_EQ(ok["status"], "pass") << pass << ": " << ok["reason"];
      EXPECT_TRUE(ok.contains("time")) << pass << ": timed calls after the validation call";
    }
    const json& dirty = rows.at("cpu.planted_dirty_ws" + k + "fwd");
    EXPECT_EQ(dirty["status"], "fail");
    EXPECT_TRUE(has(dirty, "timed call failed")) << dirty["reason"];
    EXPECT_TRUE(has(dirty, "planted: workspace prefix byte 0 not zero")) << dirty["reason"];
    const json& pair = rows.at("cpu.planted_zeroed_ws_bwd" + k + "fwd_bwd");
    EXPECT_EQ(pair["status"], "fail");
    EXPECT_TRUE(has(pair, "asks for a zeroed workspace prefix")) << pair["reason"];
  }
}

// Google Benchmark's report (--benchmark_out) lists the rows that failed verification too, as
// errors with the verdict, beside the timed ones: a failure does not look like a row left out.
TEST_F(Faults, FailedRowsAreErrorsInGoogleBenchmarksReport) {
  const std::string gb = path("gb.json");
  const std::string flag = "--benchmark_out=" + gb;
  char prog[] = "test_faults";
  std::vector<char*> argv{prog, const_cast<char*>(flag.c_str()), nullptr};
  int argc = 2;
  benchmark::Initialize(&argc, argv.data());
  const ConfigResult parsed =
      parse_config(R"({"name": "faults", "implementations": ["cpu.naive_3pass",
      "cpu.planted_nan", "cpu.planted_throws_timed"], "passes": ["fwd"], "verify": {"mode": "full"},
      "timing": {"min_time_s": 0.001, "repetitions": 2, "warmup_s": 0},
      "problem": {"heads_q": 2, "seq": 16, "head_dim": 16, "dtype": "f32"}})");
  ASSERT_TRUE(std::holds_alternative<Config>(parsed));
  RunOptions ro;
  ro.out_path = path("r.json");
  ro.quiet = true;
  ro.benchmark_flags = {{"benchmark_out", gb}};
  std::ostringstream o, e;
  EXPECT_EQ(run_config(std::get<Config>(parsed), ro, o, e), 1);
  // Back to no file report for the tests after this one.
  std::string none = "--benchmark_out=";
  argv = {prog, none.data(), nullptr};
  argc = 2;
  benchmark::Initialize(&argc, argv.data());

  std::ifstream in(gb);
  const json j = json::parse(in);
  std::map<std::string, json> by_name;
  for (const auto& b : j["benchmarks"]) by_name.emplace(b["name"].get<std::string>(), b);
  const std::string c = ":b1_hq2_hkv2_sq16_skv16_d16_f32:fwd";
  ASSERT_TRUE(by_name.count("cpu.planted_nan" + c)) << j.dump(1);
  const json& nan = by_name.at("cpu.planted_nan" + c);
  EXPECT_EQ(nan["error_occurred"], true);
  EXPECT_EQ(
      nan["error_message"].get<std::string>().rfind("verification failed: O: 1 element(s) NaN", 0),
      0u)
      << nan.dump();
  const json& timed = by_name.at("cpu.planted_throws_timed" + c);
  EXPECT_EQ(timed["error_occurred"], true);
  EXPECT_NE(timed["error_message"].get<std::string>().find("planted: timed call threw on purpose"),
            std::string::npos);
  const json& ok = by_name.at("cpu.naive_3pass" + c + "_median");
  EXPECT_FALSE(ok.contains("error_occurred"));
  EXPECT_EQ(ok["time_unit"], "ns");
  EXPECT_EQ(j["context"]["attnbench_config_name"], "faults");
}

// An option value the implementation cannot run at this problem (a tile too large for shared
// memory, in cuda.flash_fwd) is a SKIP row with the implementation's reason, not a FAIL.
TEST_F(Faults, UnsupportedOptionValueIsASkipRow) {
  const std::string out = path("opts.json");
  const int rc = run(R"({"name": "opts", "implementations": ["cpu.planted_tile_limit"], "passes": ["fwd"],
      "options": {"cpu.planted_tile_limit": {"tile": [32, 128]}}, "verify": {"mode": "full"},
      "timing": {"min_time_s": 0.001, "repetitions": 1, "warmup_s": 0},
      "problem": {"heads_q": 2, "seq": 17, "head_dim": 32, "dtype": "f32"}})",
                     false, out);
  EXPECT_EQ(rc, 0) << "a SKIP is not a failure";
  const json j = read_results_json(out);
  ASSERT_EQ(j["rows"].size(), 2u);
  for (const json& r : j["rows"]) {
    const int tile = r["options"]["tile"].get<int>();
    if (tile == 32) {
      EXPECT_EQ(r["status"], "pass") << r["reason"];
    } else {
      EXPECT_EQ(r["status"], "skip");
      EXPECT_TRUE(has(r, "tile 128 exceeds 64")) << r["reason"];
    }
  }
}

TEST_F(Faults, UnwritableResultsFileStopsBeforeAnyWork) {
  const ConfigResult parsed = parse_config(R"({"implementations": ["cpu.naive_3pass"]})");
  ASSERT_TRUE(std::holds_alternative<Config>(parsed));
  RunOptions ro;
  ro.out_path = "/proc/attnbench-cannot-write-here/results.json";
  ro.quiet = true;
  std::ostringstream o, e;
  EXPECT_THROW(run_config(std::get<Config>(parsed), ro, o, e), std::runtime_error);
  // The CLI turns that into exit code 2 with the path in the message.
  Child c({"run", "--impl", "cpu.naive_3pass", "--seq", "4", "--quiet", "--out", ro.out_path});
  const int status = c.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << c.output();
  EXPECT_NE(c.output().find("attnbench-cannot-write-here"), std::string::npos) << c.output();
}

// --out never destroys anything: each of these is refused with exit code 2 before anything runs,
// and the path is left exactly as it was (same inode, same bytes, same kind).
TEST_F(Faults, OutThatWouldDestroySomethingIsRefused) {
  const std::string cfg = path("my.json");
  std::ofstream(cfg) << R"({"implementations": ["cpu.naive_3pass"], "problem": {"seq": 4}})";
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  fs::create_directories(path("dir"));
  // A character device node of our own (as root; else a link to /dev/null stands for it).
  const bool node = ::mknod(path("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  fs::create_symlink("/dev/null", path("null.json"));
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string sock_path = path("sock");
  ASSERT_LT(sock_path.size(), sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock_path.c_str(), sock_path.size() + 1);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0)
      << std::strerror(errno);
  std::ofstream(path("ro.json")) << "keep me";
  fs::permissions(path("ro.json"),
                  fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::create_hard_link(cfg, path("hard.json"));
  fs::create_symlink(cfg, path("link.json"));
  struct Bad {
    std::string out;
    std::string what;
  };
  std::vector<Bad> bad = {{path("fifo"), "is a FIFO"},
                          {path("dir"), "is a directory"},
                          {path("null.json"), "is a character device"},
                          {path("sock"), "is a socket"},
                          {path("ro.json"), "is read-only"},
                          {cfg, "is the config file"},
                          {(dir_ / "." / "my.json").string(), "is the config file"},
                          {path("hard.json"), "is the config file"},
                          {path("link.json"), "is the config file"}};
  if (node) bad.push_back({path("null"), "is a character device"});
  for (const Bad& b : bad) {
    struct stat before {};
    ASSERT_EQ(::lstat(b.out.c_str(), &before), 0) << b.out;
    Child c({"run", cfg, "--out", b.out, "--quiet"});
    const int status = c.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << b.out << "\n" << c.output();
    EXPECT_NE(c.output().find("--out = " + b.out + ": " + b.what), std::string::npos) << c.output();
    struct stat after {};
    ASSERT_EQ(::lstat(b.out.c_str(), &after), 0) << b.out << " is gone";
    EXPECT_EQ(before.st_ino, after.st_ino) << b.out << " was replaced";
    EXPECT_EQ(before.st_mode, after.st_mode) << b.out;
    EXPECT_FALSE(fs::exists(b.out + ".lock")) << b.out;
  }
  ::close(sock);
  std::ifstream ro(path("ro.json"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(ro), {}), "keep me");
  // The config through a link may also be the --out of a run of the link: the same file.
  Child c({"run", path("link.json"), "--out", cfg, "--quiet"});
  EXPECT_EQ(WEXITSTATUS(c.wait()), 2) << c.output();
  // A results file through a symlink: the target is replaced, the link stays a link.
  fs::create_symlink("target.json", path("results-link.json"));
  Child ok({"run", cfg, "--out", path("results-link.json"), "--quiet", "--profile"});
  EXPECT_EQ(WEXITSTATUS(ok.wait()), 0) << ok.output();
  EXPECT_TRUE(fs::is_symlink(path("results-link.json")));
  EXPECT_NO_THROW(read_results_json(path("target.json")));
  // Google Benchmark's own --benchmark_out may not be the results file either.
  Child gb({"run", cfg, "--out", path("r.json"), "--benchmark_out=" + path("r.json"), "--quiet"});
  EXPECT_EQ(WEXITSTATUS(gb.wait()), 2) << gb.output();
  EXPECT_FALSE(fs::exists(path("r.json")));
}

// A --dump folder that cannot be made is bad input before anything runs (it was a warning at the
// first row, and exit 0).
TEST_F(Faults, DumpFolderThatCannotBeMadeIsRefused) {
  std::ofstream(path("file")) << "x";
  for (const std::string& dump :
       {std::string("/proc/attnbench-no-such/dump"), path("file") + "/dump", path("file")}) {
    Child c({"run", "--seq", "4", "--impl", "cpu.naive_3pass", "--quiet", "--out", path("r.json"),
             "--dump", dump});
    const int status = c.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << dump << "\n" << c.output();
    EXPECT_NE(c.output().find("--dump = " + dump), std::string::npos) << c.output();
    EXPECT_FALSE(fs::exists(path("r.json"))) << dump;
  }
}

// The CLI reads a config with its own JSON call before parse_config: every input the fuzzer
// found must be refused there too, exit code 2 and no results file, never a crash.
TEST_F(Faults, CliRefusesEveryFuzzFindingWithExitCode2) {
  const fs::path dir = fs::path(source_dir()) / "tests" / "fuzz" / "regressions";
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().rfind("error-", 0) != 0) continue;
    const std::string out = path("never.json");
    Child c({"run", e.path().string(), "--out", out, "--quiet"});
    const int status = c.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2)
        << e.path().filename() << ": " << (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                               : "exit " + std::to_string(WEXITSTATUS(status)))
        << "\n" << c.output();
    EXPECT_FALSE(fs::exists(out)) << e.path().filename();
    ++n;
  }
  EXPECT_GE(n, 1);
}

// ---- CUDA faults (need a GPU and the CUDA build) --------------------------------------------

bool cuda_ready(std::string& why) {
  if (!Registry::instance().find("cuda.planted_bad_launch")) {
    why = "built without CUDA";
    return false;
  }
  if (!device_present(Device::cuda)) {
    why = "no CUDA device";
    return false;
  }
  return true;
}

TEST_F(Faults, CudaBadLaunchFailsAndDeviceOomSkipsAndTheRunGoesOn) {
  std::string why;
  if (!cuda_ready(why)) GTEST_SKIP() << why;
  const std::string out = path("cuda.json");
  const int rc = run(R"({"name": "cuda_faults", "implementations": ["cpu.naive_3pass", "cuda.naive_3pass",
      "cuda.planted_bad_launch", "cuda.planted_device_oom"], "passes": ["fwd"], "verify": {"mode": "full"},
      "sweep": {"product": {"seq": [17, 33]}}, "problem": {"heads_q": 4, "heads_kv": 2, "head_dim": 64, "dtype": "bf16"}})",
                     true, out);
  EXPECT_EQ(rc, 1);
  const json j = read_results_json(out);
  EXPECT_TRUE(j["complete"].get<bool>()) << "a bad launch is not sticky: " << j["stop_reason"];
  ASSERT_EQ(j["rows"].size(), 8u);
  const auto rows = index_rows(j["rows"]);
  for (int c = 0; c < 2; ++c) {
    const std::string k = "#" + std::to_string(c) + "#fwd";
    const json& bad = rows.at("cuda.planted_bad_launch" + k);
    EXPECT_EQ(bad["status"], "fail");
    // The launch error is named: CUDA 12 reports a 2048-thread block as an invalid
    // configuration, CUDA 13 (driver 580, H200) as cudaErrorInvalidValue.
    EXPECT_TRUE(has(bad, "invalid configuration") || has(bad, "InvalidConfiguration") ||
                has(bad, "cudaErrorInvalidValue"))
        << bad["reason"];
    const json& oom = rows.at("cuda.planted_device_oom" + k);
    EXPECT_EQ(oom["status"], "skip");
    EXPECT_TRUE(has(oom, "out of memory")) << oom["reason"];
    // Case 1's CUDA rows run after case 0's bad launch: the context still works.
    EXPECT_EQ(rows.at("cuda.naive_3pass" + k)["status"], "pass") << rows.at("cuda.naive_3pass" + k)["reason"];
    EXPECT_EQ(rows.at("cpu.naive_3pass" + k)["status"], "pass");
  }
}

TEST_F(Faults, CudaStickyErrorKeepsAValidIncompleteFile) {
  std::string why;
  if (!cuda_ready(why)) GTEST_SKIP() << why;
  const std::string out = path("sticky.json");
  const std::string cfg = R"({"name": "sticky", "implementations": ["cpu.naive_3pass", "cuda.naive_3pass",
      "cuda.planted_illegal_address"], "passes": ["fwd"], "verify": {"mode": "full"},
      "timing": {"min_time_s": 0.001, "repetitions": 1, "warmup_s": 0},
      "sweep": {"product": {"seq": [17, 33]}}, "problem": {"heads_q": 4, "heads_kv": 2, "head_dim": 64, "dtype": "f16"}})";
  // The poisoned context must not leak into other tests: the run happens in a child process.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(run(cfg, false, out)), ::testing::ExitedWithCode(1), "");
  const json j = read_results_json(out);  // written, and valid JSON
  EXPECT_FALSE(j["complete"].get<bool>());
  EXPECT_NE(j["stop_reason"].get<std::string>().find("sticky CUDA error"), std::string::npos) << j["stop_reason"];
  const auto rows = index_rows(j["rows"]);
  ASSERT_EQ(rows.size(), 6u) << "the rows of both cases are in the file";
  const json& ill = rows.at("cuda.planted_illegal_address#0#fwd");
  EXPECT_EQ(ill["status"], "fail");
  EXPECT_TRUE(has(ill, "illegal") || has(ill, "Illegal")) << ill["reason"];
  // After the sticky error: CUDA rows SKIP with the reason, CPU rows still run.
  for (const char* name : {"cuda.naive_3pass", "cuda.planted_illegal_address"}) {
    const json& r = rows.at(std::string(name) + "#1#fwd");
    EXPECT_EQ(r["status"], "skip") << name;
    EXPECT_TRUE(has(r, "CUDA context unusable")) << r["reason"];
  }
  EXPECT_EQ(rows.at("cpu.naive_3pass#0#fwd")["status"], "pass");
  EXPECT_EQ(rows.at("cpu.naive_3pass#1#fwd")["status"], "pass");
  // The CUDA row verified before the error: passed, or (not timeable any more) failed with why.
  const json& before = rows.at("cuda.naive_3pass#0#fwd");
  EXPECT_TRUE(before["status"] == "pass" || !before["reason"].get<std::string>().empty()) << before;
}

// ---- Interrupts: SIGINT and SIGKILL against the attnbench binary -----------------------------

// Long enough to be interrupted in either phase: ten cases whose float64 reference takes a
// noticeable time, then a timing phase of several seconds.
constexpr const char* kLongConfig = R"({"name": "long", "implementations": ["cpu.naive_3pass"], "passes": ["fwd"],
  "problem": {"heads_q": 4, "head_dim": 64, "dtype": "f32"},
  "sweep": {"product": {"seq": [768, 776, 784, 792, 800, 808, 816, 824, 832, 840]}},
  "verify": {"mode": "full"}, "timing": {"min_time_s": 0.5, "repetitions": 2, "warmup_s": 0}})";

// The file is absent, or a complete JSON results file; no temporary file is left behind.
// killed (SIGKILL): the run's lock file may be left too; it holds no lock once its process is
// gone (the next run takes it over: SecondRunOntoTheSameOutIsRefusedNamingTheHolder).
// Returns the parsed file (null when absent).
json expect_whole_or_absent(const fs::path& dir, const std::string& out, bool killed = false) {
  const std::string name = fs::path(out).filename().string();
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == "long.json" || n == name || (killed && n == name + ".lock"))
        << "left behind: " << n;
  }
  if (!fs::exists(out)) return nullptr;
  json j;
  EXPECT_NO_THROW(j = read_results_json(out)) << "torn or invalid results file";
  if (j.is_null()) return nullptr;
  for (const auto& r : j["rows"]) {
    const std::string s = r["status"];
    EXPECT_TRUE(s == "pass" || s == "fail" || s == "skip") << s;
  }
  return j;
}

TEST_F(Faults, SigintAtAnyPointLeavesAValidIncompleteFile) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg) << kLongConfig;
  struct When {
    const char* what;
    const char* marker;  // in the output
    int after_ms;        // then wait this long
    bool early;          // certainly before the last row was verified
  };
  // Phase 1 (verification) early and later, about 1 s in, and in the timing phase.
  const std::vector<When> whens = {{"first row", "[1/", 0, true},
                                   {"third row", "[3/", 0, true},
                                   {"about 1 s in", "attnbench: long", 1000, false},
                                   {"timing phase", "timing 10 rows", 300, false}};
  for (const When& w : whens) {
    const std::string out = path("results.json");
    fs::remove(out);
    Child c({"run", cfg, "--out", out});
    ASSERT_TRUE(c.wait_for(w.marker, std::chrono::seconds(120))) << w.what << ": no '" << w.marker << "' in\n" << c.output();
    c.pump_for(std::chrono::milliseconds(w.after_ms));
    c.signal(SIGINT);
    const int status = c.wait();
    ASSERT_TRUE(WIFEXITED(status)) << w.what << ": killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0) << "\n" << c.output();
    EXPECT_EQ(WEXITSTATUS(status), 130) << w.what << "\n" << c.output();
    const json j = expect_whole_or_absent(dir_, out);
    ASSERT_FALSE(j.is_null()) << w.what << ": the handler is installed before the first row, so a file exists";
    EXPECT_FALSE(j["complete"].get<bool>()) << w.what;
    EXPECT_NE(j["stop_reason"].get<std::string>().find("SIGINT"), std::string::npos) << w.what << ": " << j["stop_reason"];
    EXPECT_LE(j["rows"].size(), 10u) << w.what;
    if (w.early) {
      EXPECT_LT(j["rows"].size(), 10u) << w.what << ": the rows after the signal did not run";
    }
  }
}

// One run at a time on one results file: a second run onto the path (however it is spelled) is
// refused while the first holds its lock, and is told who holds it. The lock goes with the run.
TEST_F(Faults, SecondRunOntoTheSameOutIsRefusedNamingTheHolder) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg) << kLongConfig;
  const std::string out = path("results.json");
  Child first({"run", cfg, "--out", out});
  ASSERT_TRUE(first.wait_for("[1/", std::chrono::seconds(60))) << first.output();
  for (const std::string& spelling : {out, (dir_ / "." / "results.json").string()}) {
    Child second({"run", "--seq", "4", "--impl", "cpu.naive_3pass", "--quiet", "--profile", "--out",
                  spelling});
    const int status = second.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << second.output();
    EXPECT_NE(
        second.output().find("is being written by another run: pid " + std::to_string(first.pid())),
        std::string::npos)
        << second.output();
    EXPECT_NE(second.output().find("long.json"), std::string::npos)
        << "the holder's command line: " << second.output();
  }
  first.signal(SIGINT);
  const int status = first.wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << first.output();
  EXPECT_FALSE(fs::exists(out + ".lock")) << "the lock file outlived its run";
  const json j = read_results_json(out);  // the first run's file, not the second's
  EXPECT_EQ(j["context"]["config_name"], "long");
  // A lock file left by a killed run holds no lock: the next run takes it over.
  std::ofstream(out + ".lock") << "pid 999999 on nowhere, started 2000-01-01T00:00:00Z: killed\n";
  Child next(
      {"run", "--seq", "4", "--impl", "cpu.naive_3pass", "--quiet", "--profile", "--out", out});
  EXPECT_EQ(WEXITSTATUS(next.wait()), 0) << next.output();
  EXPECT_FALSE(fs::exists(out + ".lock"));
}

// SIGTERM (a kill, a batch system's time limit) and SIGHUP (the terminal went away) stop a run as
// SIGINT does: the row in progress finishes, the file says complete=false and names the signal,
// the exit code is 128 + the signal. Before, SIGTERM killed the run with "run in progress" in it.
TEST_F(Faults, SigtermAndSighupStopLikeSigint) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg) << kLongConfig;
  for (const auto& [sig, name] : {std::pair{SIGTERM, "SIGTERM"}, std::pair{SIGHUP, "SIGHUP"}}) {
    const std::string out = path("results.json");
    fs::remove(out);
    Child c({"run", cfg, "--out", out});
    ASSERT_TRUE(c.wait_for("[2/", std::chrono::seconds(120))) << c.output();
    c.signal(sig);
    const int status = c.wait();
    ASSERT_TRUE(WIFEXITED(status))
        << name << ": killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << name << "\n" << c.output();
    const json j = expect_whole_or_absent(dir_, out);
    ASSERT_FALSE(j.is_null()) << name;
    EXPECT_FALSE(j["complete"].get<bool>()) << name;
    const std::string why = j["stop_reason"];
    EXPECT_NE(why.find(std::string("interrupted (") + name + ")"), std::string::npos) << why;
    EXPECT_LT(j["rows"].size(), 10u) << name << ": the rows after the signal did not run";
    EXPECT_GE(j["rows"].size(), 2u) << name << ": the row in progress finished";
  }
}

// A second signal stops at once, and the file still says what happened (before, the second
// SIGINT killed the process and left "run in progress"). Sent during the timing phase, where the
// first signal lets the row being timed finish its repetitions (seconds).
TEST_F(Faults, SecondSignalStopsAtOnceAndSaysSo) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg)
      << R"({"name": "long", "implementations": ["cpu.naive_3pass"], "passes": ["fwd"],
    "problem": {"heads_q": 2, "head_dim": 32, "dtype": "f32"}, "sweep": {"product": {"seq": [64, 65, 66]}},
    "verify": {"mode": "full"}, "timing": {"min_time_s": 4.0, "repetitions": 3, "warmup_s": 0}})";
  for (const auto& [second, name] : {std::pair{SIGINT, "SIGINT"}, std::pair{SIGTERM, "SIGTERM"}}) {
    const std::string out = path("results.json");
    fs::remove(out);
    Child c({"run", cfg, "--out", out});
    ASSERT_TRUE(c.wait_for("timing 3 rows", std::chrono::seconds(120))) << c.output();
    c.pump_for(std::chrono::milliseconds(300));
    c.signal(SIGINT);
    c.pump_for(std::chrono::milliseconds(300));
    const auto t0 = std::chrono::steady_clock::now();
    c.signal(second);
    const int status = c.wait();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(WIFEXITED(status))
        << name << ": killed by signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 128 + second) << name << "\n" << c.output();
    EXPECT_LT(secs, 2.0) << name << ": the second signal did not stop the run at once";
    const json j = expect_whole_or_absent(dir_, out);
    ASSERT_FALSE(j.is_null());
    EXPECT_FALSE(j["complete"].get<bool>());
    const std::string why = j["stop_reason"];
    EXPECT_NE(
        why.find(std::string("stopped at once by a second signal (") + name + " after SIGINT)"),
        std::string::npos)
        << why;
    EXPECT_EQ(why.find("run in progress"), std::string::npos) << why;
    EXPECT_EQ(j["rows"].size(), 3u) << "the verified rows are in the file";
  }
}

// Each row's time is written as soon as it is measured: a run killed in the middle of its
// timing phase (the GPU machine's time limit does that) keeps the rows timed before the kill.
TEST_F(Faults, SigkillDuringTimingKeepsTheRowsTimedSoFar) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg) << kLongConfig;
  const std::string out = path("results.json");
  fs::remove(out);
  Child c({"run", cfg, "--out", out});
  // The run prints a row's progress line when its time is measured (and written); the third:
  ASSERT_TRUE(c.wait_for("[timing 3/", std::chrono::seconds(240))) << c.output();
  c.pump_for(std::chrono::milliseconds(300));
  c.signal(SIGKILL);
  c.wait();
  const json j = expect_whole_or_absent(dir_, out, true);
  ASSERT_FALSE(j.is_null());
  EXPECT_FALSE(j["complete"].get<bool>());
  // Written while running, and still true once the process is gone.
  const std::string why = j["stop_reason"];
  EXPECT_EQ(
      why.rfind("unfinished: written while the run was going (pid " + std::to_string(c.pid()), 0),
      0u)
      << why;
  EXPECT_NE(why.find("killed before it could say why"), std::string::npos) << why;
  ASSERT_EQ(j["rows"].size(), 10u) << "verification was over before timing started";
  int timed = 0;
  for (const json& r : j["rows"]) {
    if (!r.contains("time") || r["time"].is_null()) continue;
    ++timed;
    EXPECT_GT(r["time"]["median_ms"].get<double>(), 0.0) << r["case"];
    EXPECT_EQ(r["time"]["repetitions"].get<int>(), 2) << r["case"];
  }
  EXPECT_GE(timed, 3) << "rows 1-3 were timed before the kill";
  EXPECT_LT(timed, 10) << "the kill came before the last row";
}

TEST_F(Faults, SigkillAtAnyPointNeverLeavesATornFile) {
  const std::string cfg = path("long.json");
  std::ofstream(cfg) << kLongConfig;
  std::mt19937 rng(7);
  int with_file = 0;
  for (int i = 0; i < 8; ++i) {
    const std::string out = path("results.json");
    fs::remove(out);
    Child c({"run", cfg, "--out", out});
    ASSERT_TRUE(c.wait_for("attnbench: long", std::chrono::seconds(60))) << c.output();
    c.pump_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 2500)(rng)));
    c.signal(SIGKILL);
    c.wait();
    // A kill between mkstemp and rename may leave the temporary file: remove it, but the
    // results file itself must be whole or absent.
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().rfind(".results.json.", 0) == 0) fs::remove(e.path());
    }
    const json j = expect_whole_or_absent(dir_, out, true);
    if (!j.is_null()) {
      ++with_file;
      EXPECT_EQ(j["stop_reason"].get<std::string>().find("run in progress"), std::string::npos)
          << j["stop_reason"];
    }
  }
  std::cout << "[ sigkill  ] " << with_file << " of 8 killed runs left a (valid) results file\n";
}

}  // namespace
