// cuda.flash_bwd_mma compiled as C++ against the CPU emulator (see fwd_wrap.cpp).
#include "mma/flash_bwd_mma.cu"
