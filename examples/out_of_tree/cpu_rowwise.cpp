// example.cpu_rowwise: attention one query row at a time with the online softmax, in plain C++;
// an implementation that lives outside attnbench's tree (examples/out_of_tree/README.md).
//
// Algorithm, per (batch, query head, query row i), keys in order:
//   s = scale * q_i . k_j;  if s > m: rescale l and o by exp(m - s), m = s;
//   p = exp(s - m);  l += p;  o += p * v_j.    At the end o /= l, LSE = m + log(l).
// One pass over K and V per query row, no N x N matrix; the scores are scaled before the max is
// taken, so the largest score's exponent is exactly 0 (logits near 1e9 stay finite).
// Causal (bottom-right): row i sees keys j < i + seq_kv - seq_q + 1; a row that sees none gets
// O = 0 and LSE = -inf. Extra memory: two float rows (q and o) of head_dim, on the stack.
// Limits: forward only, single-threaded, head_dim 1..256, every dtype (float32 arithmetic).
//
// Built with -DEXAMPLE_PLANTED_BUG (attnbench-example_planted, for attnbench's own test) one row
// of O is wrong: the last query row of every head drops its last visible key. `check` must fail.
#include <algorithm>
#include <cmath>
#include <limits>

#include "attnbench/implementation.hpp"

namespace {

using namespace attnbench;

class CpuRowwise final : public Implementation {
 public:
  std::string name() const override { return "example.cpu_rowwise"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override { return "out-of-tree example: one query row at a time, online softmax"; }
  Capabilities capabilities() const override { return {}; }  // every dtype, head_dim 1..256, causal, GQA

  // q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]; lse: [B, Hq, Sq].
  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const int d = p.head_dim;
    const float scale = static_cast<float>(p.effective_scale());
    float q[kMaxHeadDim], o[kMaxHeadDim];
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.heads_q; ++h) {
        const int hk = p.kv_head(h);
        for (int i = 0; i < p.seq_q; ++i) {
          const std::size_t qo = ((static_cast<std::size_t>(b) * p.seq_q + i) * p.heads_q + h) * d;
          for (int c = 0; c < d; ++c) {
            q[c] = load_as_float(a.q, qo + c, p.dtype);
            o[c] = 0;
          }
          int visible = p.causal ? p.first_invisible_key(i) : p.seq_kv;
#ifdef EXAMPLE_PLANTED_BUG
          if (i == p.seq_q - 1 && visible > 1) --visible;
#endif
          float m = -std::numeric_limits<float>::infinity(), l = 0;
          for (int j = 0; j < visible; ++j) {
            const std::size_t kv = ((static_cast<std::size_t>(b) * p.seq_kv + j) * p.heads_kv + hk) * d;
            float dot = 0;
            for (int c = 0; c < d; ++c) dot += q[c] * load_as_float(a.k, kv + c, p.dtype);
            const float s = scale * dot;
            if (s > m) {  // exp(-inf) = 0 on the first key: l and o are still 0
              const float r = std::exp(m - s);
              l *= r;
              for (int c = 0; c < d; ++c) o[c] *= r;
              m = s;
            }
            const float e = std::exp(s - m);
            l += e;
            for (int c = 0; c < d; ++c) o[c] += e * load_as_float(a.v, kv + c, p.dtype);
          }
          const float inv = l > 0 ? 1.0f / l : 0.0f;
          for (int c = 0; c < d; ++c) store_from_float(a.o, qo + c, o[c] * inv, p.dtype);
          a.lse[(static_cast<std::size_t>(b) * p.heads_q + h) * p.seq_q + i] =
              l > 0 ? m + std::log(l) : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
};

}  // namespace

ATTNBENCH_REGISTER(CpuRowwise)
