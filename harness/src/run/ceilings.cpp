#include "attnbench/ceilings.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
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

// Median of `reps` event-timed runs of fn, after `warm` untimed ones.
template <class F>
float median_ms(cudaStream_t st, int warm, int reps, F fn) {
  for (int i = 0; i < warm; ++i) fn();
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
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
  void *a = nullptr, *b = nullptr, *c = nullptr, *r = nullptr;
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
  } catch (const std::exception& e) {
    j["error"] = e.what();
  }
  if (h) cublasDestroy(h);
  cudaFree(a);
  cudaFree(b);
  cudaFree(c);
  cudaFree(r);
  return j;
}
#else
nlohmann::json measure_ceilings() { return nlohmann::json::object(); }
#endif

}  // namespace attnbench
