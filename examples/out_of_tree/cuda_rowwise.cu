// example.cuda_rowwise: attention with one thread block per query row, online softmax over tiles
// of keys, in plain CUDA; an implementation that lives outside attnbench's tree
// (examples/out_of_tree/README.md).
//
// Algorithm, per (batch, query head, query row i) = one block of kThreads threads:
//   q_i is staged in shared memory as float; for each tile of kThreads visible keys, thread t
//   scores key j = tile + t (s = scale * q_i . k_j, into shared memory), then every thread
//   folds the tile into the row's running max m and sum l (the same arithmetic in every thread)
//   and thread c rescales and accumulates its column: o_c = o_c * exp(m_old - m) + sum_j
//   exp(s_j - m) v_jc. At the end o_c /= l, LSE = m + log(l) (thread 0).
// One pass over K and V per query row (no reuse across rows: K and V come through L2 once per
// row); scores never leave shared memory. Causal (bottom-right): row i sees keys
// j < i + seq_kv - seq_q + 1; a row that sees none gets O = 0 and LSE = -inf.
// Extra memory: none. Limits: forward only; head_dim 1..256 (one column per thread); every dtype;
// grid.y = heads_q and grid.z = batch up to 65535.
// Arithmetic in double (scores, max, sums, O): it is an example of packaging, not of speed, and in
// float32 its sums in another order than the naive baseline's put O at 2.6-2.8x the naive error on
// FlashAttention-3's outlier inputs in f32 (the H200 gates of bf30a93 and e9157e3), past the
// rule's 2x.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "attnbench/implementation.hpp"

namespace {

using namespace attnbench;

constexpr int kThreads = kMaxHeadDim;  // one output column per thread, one key per thread per tile

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void store(float* p, float x) {
  *p = x;
}
__device__ __forceinline__ void store(__half* p, float x) {
  *p = __float2half_rn(x);
}
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) {
  *p = __float2bfloat16_rn(x);
}

struct Dims {
  int hq, hkv, sq, skv, d;
  bool causal;
  double scale;
};

// q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]; lse: [B, Hq, Sq]. Block (i, h, b).
template <class T>
__global__ void __launch_bounds__(kThreads)
    rowwise_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                   T* __restrict__ o, float* __restrict__ lse, Dims n) {
  __shared__ float sq[kMaxHeadDim];
  __shared__ double ss[kThreads];
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
  const int hk = h / (n.hq / n.hkv);
  const long long q_row = ((static_cast<long long>(b) * n.sq + i) * n.hq + h) * n.d;
  if (t < n.d) sq[t] = to_float(q[q_row + t]);
  const int visible = n.causal ? min(max(i + n.skv - n.sq + 1, 0), n.skv) : n.skv;
  double m = -INFINITY, l = 0, acc = 0;
  __syncthreads();
  for (int j0 = 0; j0 < visible; j0 += kThreads) {
    const int j = j0 + t;
    double s = -INFINITY;
    if (j < visible) {
      const T* kj = k + ((static_cast<long long>(b) * n.skv + j) * n.hkv + hk) * n.d;
      double dot = 0;
      for (int c = 0; c < n.d; ++c) dot += static_cast<double>(sq[c]) * to_float(kj[c]);
      s = n.scale * dot;
    }
    ss[t] = s;
    __syncthreads();
    const int count = min(kThreads, visible - j0);
    double tile_max = -INFINITY;
    for (int x = 0; x < count; ++x) tile_max = fmax(tile_max, ss[x]);
    const double m_new = fmax(m, tile_max);
    const double r = exp(m - m_new);  // 0 on the first tile (m = -inf), where l and acc are 0
    l *= r;
    acc *= r;
    for (int x = 0; x < count; ++x) {
      const double e = exp(ss[x] - m_new);
      l += e;
      if (t < n.d)
        acc +=
            e * to_float(v[((static_cast<long long>(b) * n.skv + j0 + x) * n.hkv + hk) * n.d + t]);
    }
    m = m_new;
    __syncthreads();  // ss is rewritten by the next tile
  }
  if (t < n.d) store(o + q_row + t, l > 0 ? static_cast<float>(acc / l) : 0.0f);
  if (t == 0)
    lse[(static_cast<long long>(b) * n.hq + h) * n.sq + i] =
        l > 0 ? static_cast<float>(m + log(l)) : -INFINITY;
}

template <class T>
void launch(const FwdArgs& a) {
  const Problem& p = a.p;
  const Dims n{p.heads_q,
               p.heads_kv,
               p.seq_q,
               p.seq_kv,
               p.head_dim,
               p.causal,
               p.effective_scale()};
  const dim3 grid(static_cast<unsigned>(p.seq_q), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  rowwise_kernel<T><<<grid, kThreads, 0, static_cast<cudaStream_t>(a.stream)>>>(
      static_cast<const T*>(a.q), static_cast<const T*>(a.k), static_cast<const T*>(a.v),
      static_cast<T*>(a.o), a.lse, n);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw std::runtime_error(std::string("example.cuda_rowwise launch: ") + cudaGetErrorString(e));
}

class CudaRowwise final : public Implementation {
 public:
  std::string name() const override { return "example.cuda_rowwise"; }
  Device device() const override { return Device::cuda; }
  std::string summary() const override {
    return "out-of-tree example: one block per query row, online softmax";
  }
  Capabilities capabilities() const override {
    return {};
  }  // every dtype, head_dim 1..256, causal, GQA

  Support supports_extra(const Problem& p, Pass) const override {
    if (p.heads_q > 65535 || p.batch > 65535)
      return Support::no("grid.y (heads_q) and grid.z (batch) must be <= 65535");
    return Support::yes();
  }

  void forward(const FwdArgs& a) const override {
    switch (a.p.dtype) {
      case DType::f32:
        return launch<float>(a);
      case DType::f16:
        return launch<__half>(a);
      case DType::bf16:
        return launch<__nv_bfloat16>(a);
    }
  }
};

}  // namespace

ATTNBENCH_REGISTER(CudaRowwise)
