// cuda.flash_decode compiled as C++ against the CPU emulator of mma.sync/ldmatrix/cp.async
// (impls/cuda/mma/emulation/, found before impls/cuda/mma/ on the include path).
#include "mma/flash_decode.cu"
