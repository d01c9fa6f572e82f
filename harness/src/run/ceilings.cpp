#include "attnbench/ceilings.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef ATTNBENCH_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#endif

#include "attnbench/execute.hpp"
#ifdef ATTNBENCH_WITH_CUDA
#include "read_ceiling.hpp"
#endif

namespace attnbench {

#ifdef ATTNBENCH_WITH_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

// Median of `reps` event-timed runs of fn, after `warm` untimed ones; pre() runs before each,
// outside the events (the read curve's flush).
template <class F, class Pre = void (*)()>
float median_ms(cudaStream_t st, int warm, int reps, F fn, Pre pre = [] {}) {
  for (int i = 0; i < warm; ++i) {
    pre();
    fn();
  }
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    pre();
    check(cudaEventRecord(a, st), "cudaEventRecord");
    fn();
    check(cudaEventRecord(b, st), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Random bf16 bits with a small exponent range: products of random data, not zeros (zeros run
// faster than real data on tensor cores).
void fill_random(void* p, std::size_t n) {
  std::vector<std::uint16_t> h(n);
  std::uint32_t x = 12345;
  for (auto& v : h) {
    x = x * 1664525u + 1013904223u;
    v = float_to_bf16(static_cast<float>((x >> 8) & 0xffff) / 65536.0f - 0.5f);
  }
  check(cudaMemcpy(p, h.data(), n * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
}

}  // namespace

nlohmann::json measure_ceilings() {
  if (cuda_device_count() == 0) return nlohmann::json::object();
  nlohmann::json j;
  const int n = 8192;
  const std::size_t elems = static_cast<std::size_t>(n) * n;
  void *a = nullptr, *b = nullptr, *c = nullptr, *r = nullptr, *f = nullptr;
  cudaStream_t st = static_cast<cudaStream_t>(device_ops(Device::cuda).stream());
  cublasHandle_t h = nullptr;
  try {
    check(cudaMalloc(&a, elems * 2), "cudaMalloc");
    check(cudaMalloc(&b, elems * 2), "cudaMalloc");
    check(cudaMalloc(&c, elems * 2), "cudaMalloc");
    fill_random(a, elems);
    fill_random(b, elems);
    check(cublasCreate(&h), "cublasCreate");
    check(cublasSetStream(h, st), "cublasSetStream");
    const float alpha = 1, beta = 0;
    auto gemm = [&] {
      check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, CUDA_R_16BF, n, b,
                         CUDA_R_16BF, n, &beta, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    };
    const float gms = median_ms(st, 3, 10, gemm);
    j["bf16_gemm_tflops"] = 2.0 * n * static_cast<double>(n) * n / (gms * 1e-3) / 1e12;
    j["gemm_shape"] = n;
    // 128 MiB copied: twice the L2 and more, counted as bytes read plus bytes written.
    const std::size_t bytes = elems * 2;
    auto copy = [&] { check(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, st), "cudaMemcpyAsync"); };
    const float cms = median_ms(st, 3, 20, copy);
    j["copy_tbps"] = 2.0 * static_cast<double>(bytes) / (cms * 1e-3) / 1e12;
    j["copy_bytes"] = bytes;
    // The read ceiling of memory-bound rows (decode reads K and V once and writes little): a
    // kernel that only reads (read_ceiling.cu), over 1 GiB (a quarter of the free memory on a
    // smaller device) so that launch and tail are under 3% of a call. A copy is the wrong ceiling
    // for them: its writes share the bus (issue 29 measured cuDNN's decode above the copy rate),
    // and a cuBLAS GEMV read only 3.2 TB/s on the H200.
    std::size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const std::size_t rbytes = std::min<std::size_t>(std::size_t{1} << 30, free_b / 4) / 256 * 256;
    check(cudaMalloc(&r, rbytes + 256), "cudaMalloc");
    check(cudaMemset(r, 0x5a, rbytes + 256), "cudaMemset");
    int dev = 0, sms = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
    unsigned* sink = reinterpret_cast<unsigned*>(static_cast<char*>(r) + rbytes);
    auto read = [&] { launch_read_all(r, rbytes, sink, sms, st); };
    const float rms = median_ms(st, 3, 20, read);
    j["read_tbps"] = static_cast<double>(rbytes) / (rms * 1e-3) / 1e12;
    j["read_bytes"] = rbytes;
    // The read curve: the same kernel over 8 MiB, 16 MiB, ... 256 MiB, each call after the read
    // flush (twice the L2, read with allocating loads: execute.cpp's FlushMode::read) and timed as
    // a row is, then the 1 GiB read above as its last point (many times the L2: a flush changes
    // nothing there), so that a memory-bound row's GB/s can be set against a read of its own
    // size (read_tbps_at). A call has a fixed cost that 1 GiB hides: a decode at batch 1 reads
    // 16-270 MB (issue 29: about 10 us a call on an H100, cuDNN's and ours alike). 11 calls a
    // size: about 13 GB of reads in all, less than the 1 GiB read's 23 calls (it runs under the
    // gate's sanitizers too).
    int l2 = 0;
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
    const std::size_t fbytes = 2 * static_cast<std::size_t>(l2 > 0 ? l2 : (64 << 20)) / 16 * 16;
    check(cudaMalloc(&f, fbytes), "cudaMalloc");
    check(cudaMemset(f, 0, fbytes), "cudaMemset");  // read by the flush: initialised (initcheck)
    nlohmann::json curve = nlohmann::json::array();
    for (std::size_t s = std::size_t{8} << 20; s < rbytes && s <= (std::size_t{256} << 20); s *= 2) {
      const float ms = median_ms(
          st, 2, 9, [&] { launch_read_all(r, s, sink, sms, st); },
          [&] { launch_read_flush(f, fbytes, sms, st); });
      curve.push_back({{"bytes", s}, {"tbps", static_cast<double>(s) / (ms * 1e-3) / 1e12}});
    }
    curve.push_back({{"bytes", rbytes}, {"tbps", j["read_tbps"]}});
    j["read_curve"] = curve;
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  if (h) cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(r);
  cudaFree(f);
  return j;
}
#else
nlohmann::json measure_ceilings() { return nlohmann::json::object(); }
#endif

namespace {

template <class Json>
std::optional<double> rate_at(const Json& ceilings, double bytes) {
  if (!ceilings.is_object() || !(bytes > 0)) return std::nullopt;
  const auto c = ceilings.find("read_curve");
  if (c == ceilings.end() || !c->is_array()) return std::nullopt;
  std::vector<std::pair<double, double>> pts;  // (bytes, seconds a call)
  for (const auto& p : *c) {
    if (!p.is_object()) continue;
    const auto b = p.find("bytes"), t = p.find("tbps");
    if (b == p.end() || t == p.end() || !b->is_number() || !t->is_number()) continue;
    const double bb = b->template get<double>(), tt = t->template get<double>();
    if (bb > 0 && tt > 0) pts.emplace_back(bb, bb / (tt * 1e12));
  }
  if (pts.empty()) return std::nullopt;
  std::sort(pts.begin(), pts.end());
  double secs;
  if (pts.size() == 1) {
    secs = pts[0].second * bytes / pts[0].first;  // one point: its rate
  } else {
    std::size_t i = 0;  // the segment [i, i + 1]: the one around bytes, else the nearest end's
    while (i + 2 < pts.size() && bytes > pts[i + 1].first) ++i;
    const auto [b0, t0] = pts[i];
    const auto [b1, t1] = pts[i + 1];
    secs = b1 > b0 ? t0 + (bytes - b0) * (t1 - t0) / (b1 - b0) : t0;
  }
  if (!(secs > 0)) return std::nullopt;
  return bytes / secs / 1e12;
}

}  // namespace

std::optional<double> read_tbps_at(const nlohmann::json& ceilings, double bytes) {
  return rate_at(ceilings, bytes);
}
std::optional<double> read_tbps_at(const nlohmann::ordered_json& ceilings, double bytes) {
  return rate_at(ceilings, bytes);
}

}  // namespace attnbench
