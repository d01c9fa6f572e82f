#include "attnbench/context.hpp"

#include <omp.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "attnbench/nvtx.hpp"

#ifndef ATTNBENCH_SOURCE_DIR
#define ATTNBENCH_SOURCE_DIR "."
#endif
#ifndef ATTNBENCH_BIN_TO_DATA
#define ATTNBENCH_BIN_TO_DATA "../share/attnbench"
#endif
#ifndef ATTNBENCH_BUILD_TYPE
#define ATTNBENCH_BUILD_TYPE "unknown"
#endif
#ifndef ATTNBENCH_CXX_COMPILER
#define ATTNBENCH_CXX_COMPILER "unknown"
#endif

namespace attnbench {

namespace build_info {  // generated at build time (cmake/build_info.cmake)
extern const char* const git_revision;
extern const bool git_dirty;
extern const char* const git_revision_source;
}  // namespace build_info

std::string source_dir() { return ATTNBENCH_SOURCE_DIR; }

std::string installed_data_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec || exe.empty()) return "";
  return (exe.parent_path() / ATTNBENCH_BIN_TO_DATA).lexically_normal().string();
}

std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(std::uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

namespace {

std::string format_utc(const char* fmt) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, fmt, &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        std::string v = line.substr(colon + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        return v;
      }
    }
  }
  return "unknown";
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

#ifdef ATTNBENCH_WITH_CUDA
std::string cuda_version_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
#endif

}  // namespace

std::string iso_date_utc() { return format_utc("%Y-%m-%dT%H:%M:%SZ"); }
std::string file_date_utc() { return format_utc("%Y%m%d-%H%M%S"); }

nlohmann::ordered_json load_average() {
  std::ifstream la("/proc/loadavg");
  double l1 = 0, l5 = 0, l15 = 0;
  if (la >> l1 >> l5 >> l15) return {l1, l5, l15};
  return nullptr;
}

std::int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  std::int64_t bytes = pages > 0 && page > 0 ? static_cast<std::int64_t>(pages) * page : 0;
  // For tests of the out-of-memory paths: a smaller machine than this one (never a larger one).
  if (const char* env = std::getenv("ATTNBENCH_HOST_MEMORY_BYTES"); env && *env) {
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (*end == '\0' && v > 0 && (bytes == 0 || v < bytes)) bytes = v;
  }
  return bytes;
}

nlohmann::ordered_json collect_context() {
  nlohmann::ordered_json c;
  c["date"] = iso_date_utc();
  c["host"] = host_name();
  c["cpu"] = cpu_model();
  c["cpu_cores"] = std::thread::hardware_concurrency();
  c["omp_threads"] = omp_get_max_threads();
  c["host_memory_bytes"] = host_memory_bytes();
  // CPU timings on a busy machine are mostly scheduling noise (OpenMP threads waiting for a
  // core); the load at the start says how busy it was (the run adds load_average_end).
  if (auto la = load_average(); !la.is_null()) c["load_average"] = std::move(la);
  c["compiler"] = ATTNBENCH_CXX_COMPILER;
  c["build_type"] = ATTNBENCH_BUILD_TYPE;

  // The revision is the build's (cmake/build_info.cmake). ATTNBENCH_GIT_REVISION at run time
  // names another: a copy of the tree built elsewhere whose git metadata, if any, may not be the
  // commit it was copied from. Whether the copy matched it cannot be checked here.
  const char* named = std::getenv("ATTNBENCH_GIT_REVISION");
  if (named && *named) {
    c["git_revision"] = named;
    c["git_dirty"] = std::getenv("ATTNBENCH_GIT_DIRTY") ? std::string(std::getenv("ATTNBENCH_GIT_DIRTY")) != "0" : true;
    c["git_revision_source"] = "ATTNBENCH_GIT_REVISION";
    c["git_revision_built"] = build_info::git_revision;
  } else {
    c["git_revision"] = build_info::git_revision;
    c["git_dirty"] = build_info::git_dirty;
    c["git_revision_source"] = build_info::git_revision_source;
  }
  c["nvtx"] = nvtx::enabled();

#ifdef ATTNBENCH_WITH_CUDA
  int rt = 0, drv = 0;
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) c["cuda_runtime"] = cuda_version_text(rt);
  if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0) c["cuda_driver"] = cuda_version_text(drv);
  cudaGetLastError();
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    auto attr = [d](cudaDeviceAttr a) {
      int v = 0;
      return cudaDeviceGetAttribute(&v, a, d) == cudaSuccess ? v : 0;
    };
    nlohmann::ordered_json dj;
    dj["name"] = prop.name;
    dj["index"] = d;
    dj["sms"] = attr(cudaDevAttrMultiProcessorCount);
    // Peak (boost) clocks as the driver reports them; locked application clocks need NVML.
    dj["sm_clock_mhz"] = attr(cudaDevAttrClockRate) / 1000;
    dj["mem_clock_mhz"] = attr(cudaDevAttrMemoryClockRate) / 1000;
    dj["l2_bytes"] = attr(cudaDevAttrL2CacheSize);
    dj["memory_bytes"] = static_cast<std::int64_t>(prop.totalGlobalMem);
    dj["compute_capability"] = std::to_string(attr(cudaDevAttrComputeCapabilityMajor)) + "." +
                               std::to_string(attr(cudaDevAttrComputeCapabilityMinor));
    devices.push_back(std::move(dj));
  }
  cudaGetLastError();
  c["devices"] = std::move(devices);
#else
  c["devices"] = nlohmann::ordered_json::array();
#endif
  return c;
}

}  // namespace attnbench
