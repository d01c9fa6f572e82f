// The two ceilings every GPU number is quoted against, measured in the same run (PERF.md):
// a bf16 tensor-core GEMM (cuBLAS, 8192^3, random data) and a device-to-device copy (bytes read
// plus written); and for memory-bound rows (decode) a read of HBM. Returns an empty object
// without CUDA or a device.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

namespace attnbench {

// {"bf16_gemm_tflops": ..., "gemm_shape": 8192, "copy_tbps": ..., "copy_bytes": ...,
//  "read_tbps": ..., "read_bytes": ...,
//  "read_curve": [{"bytes": 8388608, "tbps": ...}, ...]} (read: a kernel that only reads 1 GiB
// once, 16-byte streaming loads: the ceiling of memory-bound rows; read_curve: the same kernel
// over 8 MiB, 16 MiB, ... 256 MiB, each call timed after the read flush that memory-bound rows are
// timed with (FlushMode::read), median of 9, then the 1 GiB read as its last point)
// for the current CUDA device; {} when there is none. Takes about a second.
nlohmann::json measure_ceilings();

// The rate (TB/s) of a read of `bytes` from `ceilings.read_curve`: the time of a call is taken as
// linear in its bytes between the two curve points around `bytes` (beyond the ends, along the
// nearest segment), and the rate is bytes over that time. So a memory-bound row can be set
// against a read of its own size, which pays the same fixed cost per call (launch, ramp-up,
// tail) that a 1 GiB read hides. nullopt without a usable curve (runs before it was measured,
// CPU runs) or for bytes <= 0.
// (Both JSON types: results files hold their context as ordered_json.)
std::optional<double> read_tbps_at(const nlohmann::json& ceilings, double bytes);
std::optional<double> read_tbps_at(const nlohmann::ordered_json& ceilings, double bytes);

}  // namespace attnbench
