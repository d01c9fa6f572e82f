// Offline check of cuda.cudnn_sdpa's graphs: builds the forward and backward plans for an H200
// that is not there, so a machine without a GPU can tell whether cuDNN's fused-attention engines
// accept the graphs (attribute names, types, shapes, strides, the pattern itself).
//
// A developer tool, in no CMake target: docs/peers.md has the command that builds it (with
// -DATTNBENCH_CUDNN_OFFLINE_CHECK, without which this file is empty) from
// impls/cuda/library/cudnn/. It needs cuDNN >= 9.8 (device descriptions) and libcuda.so.1
// resolvable: the CUDA toolkit's stub library is enough, since the check stops where cuDNN, having
// compiled an engine's kernel with NVRTC, tries to load it onto the GPU. A configuration that fails
// only there (CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) passed every support check; any other
// failure is reported with cuDNN's message.
#if defined(ATTNBENCH_CUDNN_OFFLINE_CHECK) && defined(ATTNBENCH_HAVE_CUDNN_HEADERS)

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "library/cudnn/graph.hpp"
#include "library/cudnn/loader.hpp"
#include "library/cudnn/sdpa_graph.hpp"

#if CUDNN_VERSION < 90800
#error "the offline check needs cuDNN >= 9.8 headers (device descriptions)"
#endif

namespace {

using namespace attnbench::cudnn;

// The device description cuDNN's heuristics and engines read (CUDNN_ATTR_DEVICEPROP_JSON_
// REPRESENTATION): an H200 as the GPU machine reports it.
constexpr const char* kH200 =
    R"({"deviceName":"NVIDIA H200","cudaDeviceId":0,"deviceVer":900,"smVersion":90,)"
    R"("driverVer":13000,"multiProcessorCount":132,"totalGlobalMem":150754820096,)"
    R"("maxGridSize":[2147483647,65535,65535],"maxBlockSize":[1024,1024,64],"regsPerBlock":65536,)"
    R"("warpSize":32,"maxSharedMemoryPerBlock":49152,"maxSharedMemoryPerBlockOptin":232448,)"
    R"("reservedSharedMemoryPerBlock":1024,"maxRegistersPerSM":65536,"maxCtasPerSM":32,)"
    R"("maxThreadsPerBlock":1024,"maxThreadsPerSM":2048,"pciDeviceId":0,"isTccDriver":0,)"
    R"("supportCoopLaunch":1,"smClockRateKHz":1980000,"memClockRateKHz":3201000,)"
    R"("l2CacheSize":62914560})";

struct Case {
  std::int64_t b, hq, hkv, sq, skv, d;
  bool causal;
  cudnnDataType_t io;
};

// The odd shapes of the verification list and the FlashAttention-2 grid's corners.
constexpr Case kCases[] = {
    {1, 8, 2, 17, 33, 64, true, CUDNN_DATA_BFLOAT16},   // GQA, bottom-right causal
    {1, 8, 1, 33, 17, 64, false, CUDNN_DATA_HALF},      // MQA, seq_q > seq_kv
    {2, 4, 4, 77, 77, 256, true, CUDNN_DATA_BFLOAT16},  // head_dim 256, odd length
    {1, 4, 4, 128, 384, 40, true, CUDNN_DATA_HALF},     // head_dim 40
    {3, 2, 2, 1, 129, 8, false, CUDNN_DATA_BFLOAT16},   // one query, head_dim 8
    {32, 32, 32, 512, 512, 64, true, CUDNN_DATA_BFLOAT16},
    {1, 16, 16, 16384, 16384, 128, false, CUDNN_DATA_BFLOAT16},
    {1, 16, 16, 16384, 16384, 128, true, CUDNN_DATA_HALF},
};

// Varlen (packed THD) batches: the graphs see only the count, the longest lengths and the totals
// (the lengths themselves are device data at execution), so a zero-length sequence builds the
// same plan as any other; cuda.cudnn_sdpa SKIPs it by cuDNN version (cudnn_sdpa.cpp).
struct VarlenCase {
  std::vector<std::int64_t> q, kv;  // per-sequence lengths
  std::int64_t hq, hkv, d;
  bool causal;
  cudnnDataType_t io;
  std::int64_t window_left = -1, window_right = -1;
};

const std::vector<VarlenCase>& varlen_cases() {
  // clang-format off
  static const std::vector<VarlenCase> cases = {
      {{50, 25, 9, 33}, {60, 30, 17, 40}, 2, 2, 64, false, CUDNN_DATA_BFLOAT16},  // normal lengths
      {{50, 25, 9, 33}, {60, 30, 17, 40}, 2, 2, 64, true, CUDNN_DATA_HALF},       // causal
      {{50, 25, 0, 33}, {20, 0, 17, 40}, 2, 2, 64, false, CUDNN_DATA_BFLOAT16},   // zero lengths
      {{65, 1, 30}, {80, 64, 30}, 8, 2, 40, true, CUDNN_DATA_BFLOAT16},           // GQA 8:2
      {{33, 100, 7}, {90, 120, 7}, 8, 1, 64, false, CUDNN_DATA_HALF},             // MQA
      {{65, 1, 30}, {80, 64, 30}, 8, 2, 40, true, CUDNN_DATA_BFLOAT16, 16, -1},   // + window
      {{33, 100, 7}, {90, 120, 7}, 8, 1, 64, false, CUDNN_DATA_HALF, 8, 8},       // window 8/8
      {{64, 300, 129}, {64, 300, 129}, 4, 4, 256, true, CUDNN_DATA_BFLOAT16},     // head_dim 256
      // configs/varlen.json's shape: 16384 tokens, lengths 64..4096, 16 heads of 128.
      {{4096, 64, 2000, 3000, 1024, 4096, 2104}, {4096, 64, 2000, 3000, 1024, 4096, 2104}, 16,
       16, 128, true, CUDNN_DATA_BFLOAT16},
  };
  // clang-format on
  return cases;
}

const char* name(cudnnDataType_t t) {
  return t == CUDNN_DATA_HALF ? "f16" : "bf16";
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string r;
  for (const std::int64_t x : v) r += (r.empty() ? "" : ",") + std::to_string(x);
  return r;
}

// Builds one plan and prints the verdict; returns whether it was accepted.
bool check(const char* what, const SdpaShape& s, const SdpaFlags& f, bool bwd,
           cudnnBackendDescriptor_t prop) {
  try {
    Graph g = bwd ? build_sdpa_bwd(s, f) : build_sdpa_fwd(s, f);
    const std::size_t ops = g.op_count();
    Plan plan(std::move(g), Target{nullptr, prop});
    std::printf("OK      %s: %zu ops, plan built (workspace %lld B)\n", what, ops,
                static_cast<long long>(plan.workspace_bytes()));
    return true;
  } catch (const NoEngine& e) {
    bool only_load = !e.statuses.empty();
    for (const cudnnStatus_t st : e.statuses)
      only_load &= st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER;
    if (only_load) {
      std::printf("OK      %s: %zu engine configs compiled; loading them needs the GPU\n", what,
                  e.statuses.size());
      return true;
    }
    std::printf("FAIL    %s: %s\n", what, e.what());
  } catch (const std::exception& e) {
    std::printf("FAIL    %s: %s\n", what, e.what());
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // --flags-for V: build the graphs with the workarounds chosen for cuDNN version V (e.g. 91400)
  // instead of the loaded one's, to check their structure against the loaded cuDNN.
  // --varlen: the varlen (packed THD) cases only.
  std::size_t flags_version = 0;
  bool varlen_only = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--flags-for") && i + 1 < argc) {
      flags_version = std::strtoul(argv[++i], nullptr, 10);
    } else if (!std::strcmp(argv[i], "--varlen")) {
      varlen_only = true;
    } else {
      std::fprintf(stderr, "usage: %s [--flags-for CUDNN_VERSION] [--varlen]\n", argv[0]);
      return 2;
    }
  }
  try {
    const Api& a = api();
    std::printf("cuDNN %s from %s\n", version_text(a.version).c_str(), a.path.c_str());
    if (a.version < 90800) {
      std::fprintf(stderr, "device descriptions need cuDNN >= 9.8\n");
      return 2;
    }
    Desc prop(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device description");
    ATTN_CUDNN_SET(prop, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                   static_cast<std::int64_t>(std::strlen(kH200)), kH200);
    prop.finalize("device description");

    const std::size_t v = flags_version ? flags_version : a.version;
    int bad = 0;
    if (!varlen_only) {
      for (const Case& c : kCases) {
        const SdpaShape s{c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal, 0.125f, c.io};
        const SdpaFlags f = sdpa_flags(v, s);
        for (const bool bwd : {false, true}) {
          char what[160];
          std::snprintf(what, sizeof what, "%s b%lld hq%lld hkv%lld sq%lld skv%lld d%lld %s %s",
                        bwd ? "bwd" : "fwd", static_cast<long long>(c.b),
                        static_cast<long long>(c.hq), static_cast<long long>(c.hkv),
                        static_cast<long long>(c.sq), static_cast<long long>(c.skv),
                        static_cast<long long>(c.d), c.causal ? "causal" : "full", name(c.io));
          bad += !check(what, s, f, bwd, prop.get());
        }
      }
    }
    for (const VarlenCase& c : varlen_cases()) {
      SdpaShape s{static_cast<std::int64_t>(c.q.size()),
                  c.hq,
                  c.hkv,
                  *std::max_element(c.q.begin(), c.q.end()),
                  *std::max_element(c.kv.begin(), c.kv.end()),
                  c.d,
                  c.causal,
                  0.125f,
                  c.io,
                  c.window_left,
                  c.window_right};
      s.varlen = true;
      s.total_q = std::accumulate(c.q.begin(), c.q.end(), std::int64_t{0});
      s.total_kv = std::accumulate(c.kv.begin(), c.kv.end(), std::int64_t{0});
      const SdpaFlags f = sdpa_flags(v, s);
      for (const bool bwd : {false, true}) {
        const std::string window =
            c.window_left >= 0 || c.window_right >= 0
                ? " wl" + std::to_string(c.window_left) + " wr" + std::to_string(c.window_right)
                : "";
        char what[240];
        std::snprintf(what, sizeof what, "%s varlen q[%s] kv[%s] hq%lld hkv%lld d%lld %s%s %s",
                      bwd ? "bwd" : "fwd", join(c.q).c_str(), join(c.kv).c_str(),
                      static_cast<long long>(c.hq), static_cast<long long>(c.hkv),
                      static_cast<long long>(c.d), c.causal ? "causal" : "full", window.c_str(),
                      name(c.io));
        bad += !check(what, s, f, bwd, prop.get());
      }
    }
    return bad ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}

#endif  // ATTNBENCH_CUDNN_OFFLINE_CHECK && ATTNBENCH_HAVE_CUDNN_HEADERS
