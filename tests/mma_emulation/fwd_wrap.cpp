// cuda.flash_fwd_mma compiled as C++ against the CPU emulator of mma.sync/ldmatrix/cp.async
// (impls/cuda/mma/emulation/, found before impls/cuda/mma/ on the include path).
#include "mma/flash_fwd_mma.cu"
