// example.cpu_rowwise: attention one query row at a time, in plain C++; an implementation that
// lives outside attnbench's tree (examples/out_of_tree/README.md).
//
// Algorithm, per (batch, query head, query row i), over the keys row i sees:
//   1. s_j = scale * q_i . k_j into a row of scores (the workspace), and m = max_j s_j;
//   2. p_j = exp(s_j - m), l = sum_j p_j;
//   3. o_i = sum_j p_j v_j / l, LSE = m + log(l).
// K is read once and V once per query row; the scores never leave the row buffer (no N x N
// matrix). The scores are scaled before the max is taken, so the largest one's exponent is
// exactly 0 (logits near 1e9 stay finite). Causal (bottom-right): row i sees the keys
// j < i + seq_kv - seq_q + 1; a row that sees none gets O = 0 and LSE = -inf.
// Extra memory: seq_kv floats (the harness allocates them: workspace_bytes). Limits: forward
// only, single-threaded, head_dim 1..256, every dtype. Sums in float64, the rest in float32: the
// naive baseline's blocked float32 sums (Eigen's GEMMs) are more accurate than a plain sequential
// float32 loop, which is 4x its error over a row of 1025 outlier keys (the rule allows 2x), and
// with one key LSE is the score itself.
//
// Built with -DEXAMPLE_PLANTED_BUG (attnbench-example_planted, for attnbench's own test), the
// last query row of every head drops its last visible key: one wrong row. `check` must fail.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "attnbench/implementation.hpp"

namespace {

using namespace attnbench;

class CpuRowwise final : public Implementation {
 public:
  std::string name() const override { return "example.cpu_rowwise"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "out-of-tree example: one query row at a time, scores in a row buffer";
  }
  Capabilities capabilities() const override {
    return {};
  }  // every dtype, head_dim 1..256, causal, GQA

  std::size_t workspace_bytes(const Problem& p, Pass, const Options&) const override {
    return static_cast<std::size_t>(p.seq_kv) * sizeof(float);
  }

  // q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]; lse: [B, Hq, Sq].
  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    if (a.workspace_bytes < workspace_bytes(p, Pass::fwd, {}))
      throw std::runtime_error("workspace too small");
    const int d = p.head_dim;
    const double scale = p.effective_scale();
    float* s = static_cast<float*>(a.workspace);
    float q[kMaxHeadDim];
    double o[kMaxHeadDim];  // the sums over keys in float64: a long row in float32 loses more than
                            // the rule allows
    auto kv_at = [&](int b, int j, int hk) {
      return ((static_cast<std::size_t>(b) * p.seq_kv + j) * p.heads_kv + hk) * d;
    };
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.heads_q; ++h) {
        const int hk = p.kv_head(h);
        for (int i = 0; i < p.seq_q; ++i) {
          const std::size_t qo = ((static_cast<std::size_t>(b) * p.seq_q + i) * p.heads_q + h) * d;
          int visible = p.causal ? p.first_invisible_key(i) : p.seq_kv;
#ifdef EXAMPLE_PLANTED_BUG
          if (i == p.seq_q - 1 && visible > 1) --visible;
#endif
          for (int c = 0; c < d; ++c) {
            q[c] = load_as_float(a.q, qo + c, p.dtype);
            o[c] = 0;
          }
          float m = -std::numeric_limits<float>::infinity();
          for (int j = 0; j < visible; ++j) {
            double dot = 0;
            for (int c = 0; c < d; ++c)
              dot += q[c] * static_cast<double>(load_as_float(a.k, kv_at(b, j, hk) + c, p.dtype));
            s[j] = static_cast<float>(scale * dot);
            m = std::max(m, s[j]);
          }
          double l = 0;
          for (int j = 0; j < visible; ++j) {
            const float e = std::exp(s[j] - m);
            l += e;
            for (int c = 0; c < d; ++c)
              o[c] += e * load_as_float(a.v, kv_at(b, j, hk) + c, p.dtype);
          }
          const double inv = visible > 0 ? 1.0 / l : 0.0;
          for (int c = 0; c < d; ++c)
            store_from_float(a.o, qo + c, static_cast<float>(o[c] * inv), p.dtype);
          a.lse[(static_cast<std::size_t>(b) * p.heads_q + h) * p.seq_q + i] =
              visible > 0 ? m + static_cast<float>(std::log(l))
                          : -std::numeric_limits<float>::infinity();
        }
      }
    }
  }
};

}  // namespace

ATTNBENCH_REGISTER(CpuRowwise)
