// The tensor-core kernels' logic on a machine without a GPU: impls/cuda/mma/emulation/selftest.cuh
// runs cuda.flash_fwd_mma and cuda.flash_bwd_mma, emulated warp by warp, on odd shapes against a
// float64 reference of its own. Exit code: the number of failed checks (0 = pass).
#include "selftest.cuh"

int main() { return attn_mma_emulation::selftest(); }
