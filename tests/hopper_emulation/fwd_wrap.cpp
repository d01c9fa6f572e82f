// cuda.flash_fwd_wgmma compiled as C++ against the CPU emulator of the Hopper primitives
// (impls/cuda/hopper/emulation/, on top of impls/cuda/mma/emulation/).
#include "hopper/flash_fwd_wgmma.cu"
