// cuda.flash_decode compiled as C++ against the CPU emulator of mma.sync/ldmatrix/cp.async
// (impls/cuda/mma/emulation/, found before impls/cuda/mma/ on the include path).
#include "mma/flash_decode.cu"

// The automatic split count of a problem on `sms` multiprocessors with a peak DRAM bandwidth of
// `gbps` (plan_splits with splits 0), for main.cpp's check of the plan's rule: plan_splits lives
// in this translation unit's unnamed namespace.
int decode_auto_splits(const attnbench::Problem& p, int sms, double gbps) {
  return attn_mma::plan_splits(p, 0, sms, gbps).splits;
}
