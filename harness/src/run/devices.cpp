// `run --devices` (devices.hpp): the device list, the partition of the cases by FLOPs, and the
// parent that runs one worker process per GPU and merges their parts.
#include "attnbench/devices.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "attnbench/interrupt.hpp"
#include "attnbench/render.hpp"
#include "attnbench/results.hpp"

extern char** environ;

namespace attnbench {

std::optional<std::vector<int>> parse_devices(const std::string& text, int device_count,
                                              std::string& error) {
  const std::string at = "--devices = " + text + ": ";
  std::vector<int> out;
  if (text == "all") {
    if (device_count <= 0) {
      error = at + "no CUDA device on this machine (a --devices run has one worker per GPU)";
      return std::nullopt;
    }
    for (int d = 0; d < device_count; ++d) out.push_back(d);
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  std::set<int> seen;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6) {
      error = at + "\"" + item + "\" is not a device index (expected all, or indices like 0,1,3)";
      return std::nullopt;
    }
    const int d = std::stoi(item);
    if (d >= device_count) {
      error = at + "device " + item + " does not exist (this machine has " + std::to_string(device_count) +
              " CUDA device" + (device_count == 1 ? "" : "s") + ")";
      return std::nullopt;
    }
    if (!seen.insert(d).second) {
      error = at + "device " + item + " is listed twice";
      return std::nullopt;
    }
    out.push_back(d);
  }
  if (out.empty() || text.back() == ',') {
    error = at + "expected all, or device indices like 0,1,3";
    return std::nullopt;
  }
  return out;
}

std::vector<double> case_flops(const Config& cfg) {
  std::vector<double> w;
  for (const ConfigGroup& g : cfg.groups) {
    for (const Problem& p : g.cases) {
      double f = 0;
      for (const ImplRun& ir : g.impls) {
        for (std::size_t o = 0; o < ir.option_sets.size(); ++o) {
          for (Pass pass : g.passes) f += pass_flops(p, pass);
        }
      }
      w.push_back(f);
    }
  }
  return w;
}

std::vector<std::vector<int>> partition_by_flops(const std::vector<double>& weights, int bins) {
  if (bins < 1) throw std::invalid_argument("partition_by_flops: bins = " + std::to_string(bins));
  std::vector<int> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return weights[a] > weights[b]; });
  std::vector<std::vector<int>> out(static_cast<std::size_t>(bins));
  std::vector<double> load(static_cast<std::size_t>(bins), 0.0);
  for (int i : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    out[lightest].push_back(i);
    load[lightest] += weights[i];
  }
  for (auto& b : out) std::sort(b.begin(), b.end());
  return out;
}

std::string part_path(const std::string& out, int worker, int device) {
  return out + ".parts/part-" + std::to_string(worker) + "-cuda" + std::to_string(device) + ".json";
}

namespace {

struct Worker {
  int index = 0;
  int device = 0;
  std::string visible;  // its CUDA_VISIBLE_DEVICES
  std::vector<int> cases;
  double flops = 0;
  std::string part, log;
  pid_t pid = -1;
  int status = 0;
  bool waited = false;
};

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error(std::string("--devices: cannot find this program (/proc/self/exe): ") + std::strerror(errno));
  buf[n] = '\0';
  return buf;
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s.append(s.empty() ? "" : ",").append(std::to_string(x));
  return s;
}

// How a worker ended, in words; "" when it exited 0 or 1 (rows passed or failed: a normal end).
std::string abnormal_end(const Worker& w) {
  if (!w.waited) return "was not started";
  if (WIFSIGNALED(w.status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(w.status)) + " (" + strsignal(WTERMSIG(w.status)) + ")";
  if (WIFEXITED(w.status)) {
    const int c = WEXITSTATUS(w.status);
    if (c == 0 || c == 1) return {};
    if (c == 129 || c == 130 || c == 143) return "was interrupted (exit " + std::to_string(c) + ")";
    return "exited with code " + std::to_string(c);
  }
  return "ended with wait status " + std::to_string(w.status);
}

// The workers, one per device, each with its bin of cases, its part and its log.
std::vector<Worker> plan_workers(const RunOptions& opts, const std::vector<int>& devices,
                                 const std::vector<double>& weights,
                                 const std::vector<std::vector<int>>& bins) {
  // The parent's CUDA_VISIBLE_DEVICES (if any) maps its indices to the GPUs the workers see.
  std::vector<std::string> visible;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v && *v) {
    std::stringstream ss(v);
    for (std::string item; std::getline(ss, item, ',');) visible.push_back(item);
  }
  std::vector<Worker> workers;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    Worker w;
    w.index = static_cast<int>(i);
    w.device = devices[i];
    w.visible = w.device < static_cast<int>(visible.size()) ? visible[w.device] : std::to_string(w.device);
    w.cases = bins[i];
    for (int c : w.cases) w.flops += weights[c];
    w.part = part_path(opts.out_path, w.index, w.device);
    w.log = w.part.substr(0, w.part.size() - 5) + ".log";
    workers.push_back(std::move(w));
  }
  return workers;
}

// Starts one worker: this program with the parent's arguments and the worker's flags, in a
// process group of its own, its GPU alone visible, its output in its log; omp: its
// OMP_NUM_THREADS unless the parent's environment sets one. w.pid is -1 when it cannot start.
void start_worker(Worker& w, const std::string& exe, const std::vector<std::string>& args,
                  const std::string& omp, const RunOptions& opts, std::ostream& err) {
  std::vector<std::string> argv_s{exe};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.insert(argv_s.end(), {"--worker-device", std::to_string(w.device), "--worker-cases",
                               join_ints(w.cases), "--worker-part", w.part});
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("CUDA_VISIBLE_DEVICES=", 0) == 0) continue;
    env_s.push_back(kv);
  }
  env_s.push_back("CUDA_VISIBLE_DEVICES=" + w.visible);
  if (!omp.empty()) env_s.push_back("OMP_NUM_THREADS=" + omp);
  if (!std::getenv("NCCL_NVLS_ENABLE")) env_s.push_back("NCCL_NVLS_ENABLE=0");
  std::vector<char*> argv_c, env_c;
  for (auto& s : argv_s) argv_c.push_back(s.data());
  argv_c.push_back(nullptr);
  for (auto& s : env_s) env_c.push_back(s.data());
  env_c.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, w.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);  // its own group
  const int rc = ::posix_spawn(&w.pid, exe.c_str(), &fa, &attr, argv_c.data(), env_c.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    w.pid = -1;
    err << "attnbench run: --devices: cannot start worker " << w.index << ": " << std::strerror(rc)
        << "\n";
    return;
  }
  // Test hook (with the fake device count only): this worker dies at once, as a crashed one
  // would, so that the tests see a dead worker's merge and its --resume deterministically.
  if (const char* k = std::getenv(kKillWorkerEnv);
      k && *k && std::getenv(kFakeDeviceCountEnv) && std::atoi(k) == w.index) {
    ::kill(w.pid, SIGKILL);
  }
  if (!opts.quiet) {
    err << "worker " << w.index << ": cuda:" << w.device << " (CUDA_VISIBLE_DEVICES=" << w.visible
        << "), " << w.cases.size() << " cases, " << w.flops / 1e12 << " TFLOP, log " << w.log
        << "\n";
  }
}

// Waits for every started worker, passing a Ctrl-C on to them once.
void wait_workers(std::vector<Worker>& workers, const RunOptions& opts, std::ostream& err) {
  bool forwarded = false;
  auto forward_sigint = [&] {
    if (forwarded || !interrupted()) return;
    forwarded = true;
    for (const Worker& o : workers)
      if (o.pid > 0 && !o.waited) ::kill(o.pid, SIGINT);
  };
  // Polled, not a blocking waitpid: the signal handlers restart system calls (SA_RESTART), so a
  // blocking wait on one worker would not return on Ctrl-C and the others would run on.
  for (auto left = std::count_if(workers.begin(), workers.end(), [](const Worker& w) { return w.pid > 0; });
       left > 0;) {
    forward_sigint();  // also a Ctrl-C while the workers were being started
    bool any = false;
    for (Worker& w : workers) {
      if (w.pid <= 0 || w.waited) continue;
      const pid_t r = ::waitpid(w.pid, &w.status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) continue;
      w.waited = true;  // ended (r == pid), or not ours to wait for (r < 0: nothing to merge from it)
      --left;
      any = true;
      if (!opts.quiet) {
        const std::string how = abnormal_end(w);
        err << "worker " << w.index << " (cuda:" << w.device << ") " << (how.empty() ? "done" : how) << "\n";
      }
    }
    if (!any && left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// What the workers left: every part that can be read, whatever its worker's end, and the
// workers' block of the merged file's context.
struct WorkerParts {
  std::vector<ResultsFile> parts;
  nlohmann::ordered_json workers = nlohmann::ordered_json::array();
  std::vector<std::string> dead;  // workers that ended abnormally or left no readable part
  std::size_t planned = 0, kept = 0, retimed = 0;
  bool any_interrupted = false, any_bad_input = false;
};

WorkerParts read_parts(const std::vector<Worker>& workers) {
  WorkerParts r;
  for (const Worker& w : workers) {
    nlohmann::ordered_json j;
    j["worker"] = w.index;
    j["device"] = w.device;
    j["cuda_visible_devices"] = w.visible;
    j["cases"] = w.cases;
    j["flops"] = w.flops;
    j["part"] = w.part;
    j["log"] = w.log;
    if (w.cases.empty()) {
      j["end"] = "no cases (more devices than cases)";
      r.workers.push_back(std::move(j));
      continue;
    }
    const std::string how = abnormal_end(w);
    j["end"] = how.empty() ? "exit " + std::to_string(WEXITSTATUS(w.status)) : how;
    if (w.waited && WIFEXITED(w.status) &&
        (WEXITSTATUS(w.status) == 129 || WEXITSTATUS(w.status) == 130 || WEXITSTATUS(w.status) == 143)) {
      r.any_interrupted = true;
    }
    if (w.waited && WIFEXITED(w.status) && WEXITSTATUS(w.status) == 2) r.any_bad_input = true;
    try {
      ResultsFile part = load_results(w.part);
      j["rows"] = part.rows.size();
      j["complete"] = part.complete;
      if (const auto it = part.context.find("devices"); it != part.context.end()) j["devices"] = *it;
      r.planned += part.context.value("rows_planned", std::size_t{0});
      r.kept += part.context.value("rows_kept_from_resume", std::size_t{0});
      r.retimed += part.context.value("rows_timed_from_resume", std::size_t{0});
      if (!how.empty()) {
        part.complete = false;
        r.dead.push_back("worker " + std::to_string(w.index) +
                         " (cuda:" + std::to_string(w.device) + ") " + how + " after " +
                         std::to_string(part.rows.size()) + " rows");
      }
      r.parts.push_back(std::move(part));
    } catch (const ResultsError& e) {
      j["rows"] = 0;
      j["complete"] = false;
      r.dead.push_back("worker " + std::to_string(w.index) + " (cuda:" + std::to_string(w.device) +
                       ") " + (how.empty() ? "ended" : how) + " without a readable part (" +
                       e.what() + ")");
    }
    r.workers.push_back(std::move(j));
  }
  return r;
}

}  // namespace

int run_on_devices(const Config& cfg, const RunOptions& opts, const std::vector<int>& devices,
                   const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  namespace fs = std::filesystem;
  // Ctrl-C: the workers are in process groups of their own, so a terminal's Ctrl-C reaches the
  // parent alone, which passes exactly one SIGINT on to each worker (a second one would kill a
  // worker before it writes its part) and merges what they wrote.
  InterruptGuard guard;
  nlohmann::ordered_json ctx = run_context(cfg, opts);
  if (!opts.resume_path.empty()) {
    const std::string why = resume_refusal(opts.resume, opts.resume_path, cfg.hash(), opts.profile,
                                           ctx.value("git_revision", ""));
    if (!why.empty()) throw std::runtime_error(why);
    ctx["resumed_from"] = opts.resume_path;
  }
  const std::vector<double> weights = case_flops(cfg);
  const auto bins = partition_by_flops(weights, static_cast<int>(devices.size()));
  const std::string exe = self_exe();
  const fs::path parts_dir = opts.out_path + ".parts";
  std::error_code ec;
  fs::create_directories(parts_dir, ec);
  if (ec)
    throw std::runtime_error("--devices: cannot create the part folder '" + parts_dir.string() +
                             "': " + ec.message());

  std::vector<Worker> workers = plan_workers(opts, devices, weights, bins);
  // The workers share the host's cores for their references and CPU-side work.
  const bool omp_set = std::getenv("OMP_NUM_THREADS") != nullptr;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string omp =
      std::to_string(std::max<unsigned>(1, cores / static_cast<unsigned>(devices.size())));
  const auto t0 = std::chrono::steady_clock::now();
  for (Worker& w : workers) {
    if (interrupted()) break;       // Ctrl-C while starting: the rest are not started
    if (w.cases.empty()) continue;  // more GPUs than cases
    start_worker(w, exe, args, omp_set ? std::string() : omp, opts, err);
  }
  wait_workers(workers, opts, err);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  WorkerParts got = read_parts(workers);
  ctx["multi_gpu"] = "--devices " + join_ints(devices) + ": one worker process per GPU, cases partitioned by FLOPs";
  ctx["devices_used"] = devices;
  if (const char* fake = std::getenv(kFakeDeviceCountEnv); fake && *fake)
    ctx["test_hook"] = std::string(kFakeDeviceCountEnv) + "=" + fake + " (CPU rows allowed; not a measurement)";
  ctx["workers"] = std::move(got.workers);
  ctx["rows_planned"] = got.planned;
  if (!opts.resume_path.empty()) {
    ctx["rows_kept_from_resume"] = got.kept;
    ctx["rows_timed_from_resume"] = got.retimed;
  }
  ctx["wall_s"] = wall;
  ResultsFile merged = merge_parts(got.parts, ctx);
  const std::vector<std::string>& dead = got.dead;
  if (!dead.empty()) {
    merged.complete = false;
    std::string why;
    for (const auto& d : dead) why += (why.empty() ? "" : "; ") + d;
    merged.stop_reason = why + "; run again with --resume " + opts.out_path + " to finish" +
                         (merged.stop_reason.empty() ? "" : "; " + merged.stop_reason);
  }
  write_results(opts.out_path, merged);
  print_run_table(merged, out);
  out << "results: " << opts.out_path << " (" << workers.size() << " workers, parts in " << parts_dir.string() << ")\n";
  if (!dead.empty()) err << "attnbench run: " << merged.stop_reason << "\n";
  if (interrupted()) return 128 + interrupt_signal();  // SIGINT 130, SIGTERM 143, SIGHUP 129
  if (got.any_interrupted) return 130;
  if (got.any_bad_input) return 2;
  const bool any_fail = std::any_of(merged.rows.begin(), merged.rows.end(),
                                    [](const ResultRow& r) { return r.status == Status::fail; });
  return any_fail || !dead.empty() ? 1 : 0;
}

}  // namespace attnbench
