// CPU emulation of hopper/wgmma_ops.cuh: Wgmma<T, N> is defined with the other emulated
// primitives in hopper/emulation/hopper/ptx.cuh (operations queue there and run at wgmma_wait).
#pragma once
#include "hopper/ptx.cuh"
