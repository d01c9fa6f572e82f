// The provenance block of a results file: machine, toolchain, source revision, date.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace attnbench {

// The source tree attnbench was configured from (configs are looked up there too).
std::string source_dir();

// Where `cmake --install` put the configs, as seen from the running executable:
// <its folder>/<the install's bindir to datadir>/attnbench (PREFIX/share/attnbench for
// PREFIX/bin/attnbench), whatever the prefix; empty when /proc/self/exe cannot be read. The
// folder need not exist (an executable in a build tree).
std::string installed_data_dir();

// date, host, cpu, cpu_cores, omp_threads, compiler, build_type, git_revision, git_dirty,
// nvtx, and with CUDA: cuda_runtime, cuda_driver, devices[]. git is run in source_dir() and
// may be missing: then git_revision is "unknown".
nlohmann::ordered_json collect_context();

// "2026-11-29T10:42:13Z" (UTC) and "20261129-104213" (for file names).
std::string iso_date_utc();
std::string file_date_utc();

// FNV-1a, 64 bit, and its 16-digit hex form.
std::uint64_t fnv1a64(std::string_view s);
std::string hex64(std::uint64_t x);

// /proc/loadavg's 1, 5 and 15 minute averages, or null where there is none.
nlohmann::ordered_json load_average();

// Physical memory of this machine in bytes (0 if unknown), or ATTNBENCH_HOST_MEMORY_BYTES when
// that is set and smaller (for tests of the out-of-memory paths).
std::int64_t host_memory_bytes();

}  // namespace attnbench
