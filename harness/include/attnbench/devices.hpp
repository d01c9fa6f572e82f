// `attnbench run --devices all|0,1,...`: one worker process per GPU over a partition of the cases
// balanced by FLOPs, each writing its own part file, the parts merged into one results file
// (docs/multi_gpu.md). The pieces are plain functions, so the CPU tests check them:
//   parse_devices     the flag's value against the devices this machine has;
//   case_flops        the work of each case of a config (every row's FLOPs);
//   partition_by_flops the cases into one set per worker (largest first, to the lightest);
//   part_path         where worker i's part goes (next to the results file, never over it);
//   run_on_devices    the parent: launch the workers, wait, merge their parts (results.hpp,
//                     merge_parts), write the file, print the table.
// A worker is the same binary with the same arguments plus the hidden --worker-device,
// --worker-cases and --worker-part flags: a normal run of its cases (RunOptions::only_cases)
// that sees one GPU (CUDA_VISIBLE_DEVICES) and labels its CUDA rows with that GPU's index.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "attnbench/config.hpp"
#include "attnbench/runner.hpp"

namespace attnbench {

// The test hook (docs/multi_gpu.md, "Testing without a GPU"): with this environment variable set
// to N, the parent takes the machine to have N CUDA devices and lets CPU rows run in workers, so
// that the CPU tests drive real workers, parts and merges. Never set it for measurements.
inline constexpr const char* kFakeDeviceCountEnv = "ATTNBENCH_TEST_DEVICE_COUNT";
// With the fake device count set, worker <this value> is killed (SIGKILL) right after it starts:
// the tests' dead worker. Ignored without kFakeDeviceCountEnv.
inline constexpr const char* kKillWorkerEnv = "ATTNBENCH_TEST_KILL_WORKER";

// "all" (every device) or a comma-separated list of distinct indices below device_count. On a
// bad value: nullopt, and error says why, starting with "--devices = <text>: ".
std::optional<std::vector<int>> parse_devices(const std::string& text, int device_count,
                                              std::string& error);

// The FLOPs of each case of the config, in run order (the runner's case_index): the sum over its
// rows (implementations x option sets x passes) of pass_flops.
std::vector<double> case_flops(const Config& config);

// The items (their weights) in `bins` sets of about equal total weight: the heaviest first, each
// to the bin with the least weight so far (the lower bin on a tie). Each set lists its indices in
// ascending order; a set may be empty (fewer items than bins). Deterministic.
std::vector<std::vector<int>> partition_by_flops(const std::vector<double>& weights, int bins);

// Worker `worker` (on GPU `device`)'s part of the results file `out`: <out>.parts/part-<worker>-cuda<device>.json
// (its log: the same with .log).
std::string part_path(const std::string& out, int worker, int device);

// The parent of a --devices run. `args` are the command line's arguments after the program name,
// given to every worker with the hidden flags added. Returns the exit code: 130 when a worker was
// interrupted, 2 when one refused its input, 1 when a row failed or a worker died (its part is
// then resumable: --resume <out>), else 0. Throws std::runtime_error, before launching anything,
// when the run cannot start (the resume refusal, a part folder that cannot be made).
int run_on_devices(const Config& config, const RunOptions& opts, const std::vector<int>& devices,
                   const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace attnbench
