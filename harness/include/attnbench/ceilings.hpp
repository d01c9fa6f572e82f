// The two ceilings every GPU number is quoted against, measured in the same run (PERF.md):
// a bf16 tensor-core GEMM (cuBLAS, 8192^3, random data) and a device-to-device copy (bytes read
// plus written); and for memory-bound rows (decode) a read of HBM. Returns an empty object
// without CUDA or a device.
#pragma once

#include <nlohmann/json.hpp>

namespace attnbench {

// {"bf16_gemm_tflops": ..., "gemm_shape": 8192, "copy_tbps": ..., "copy_bytes": ...,
//  "read_tbps": ..., "read_bytes": ...} (read: a kernel that only reads 1 GiB once, 16-byte
// streaming loads: the ceiling of memory-bound rows)
// for the current CUDA device; {} when there is none. Takes about a second.
nlohmann::json measure_ceilings();

}  // namespace attnbench
