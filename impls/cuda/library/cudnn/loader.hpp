// Run-time loading of cuDNN (dlopen) for cuda.cudnn_sdpa: the project never links libcudnn, so a
// machine without it still starts and records SKIP rows. Only the cuDNN headers are needed at
// build time (ATTNBENCH_HAVE_CUDNN_HEADERS, set by CMakeLists.txt when cudnn.h is found).
#pragma once

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include <cudnn.h>

#include <cstddef>
#include <string>

#include "common/check.hpp"

namespace attnbench::cudnn {

// The cuDNN entry points this project uses, resolved with dlsym. decltype keeps each pointer's
// type identical to the header's declaration without creating a link dependency.
struct Api {
  decltype(&::cudnnGetVersion) GetVersion = nullptr;
  decltype(&::cudnnGetErrorString) GetErrorString = nullptr;
  decltype(&::cudnnGetLastErrorString) GetLastErrorString = nullptr;  // may be null (optional)
  decltype(&::cudnnCreate) Create = nullptr;
  decltype(&::cudnnDestroy) Destroy = nullptr;
  decltype(&::cudnnSetStream) SetStream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) BackendCreateDescriptor = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) BackendDestroyDescriptor = nullptr;
  decltype(&::cudnnBackendSetAttribute) BackendSetAttribute = nullptr;
  decltype(&::cudnnBackendGetAttribute) BackendGetAttribute = nullptr;
  decltype(&::cudnnBackendFinalize) BackendFinalize = nullptr;
  decltype(&::cudnnBackendExecute) BackendExecute = nullptr;

  std::size_t version = 0;  // cudnnGetVersion(): major*10000 + minor*100 + patch for cuDNN 9
  std::string path;         // what dlopen was given
};

// Loads the library once (thread-safe) and returns it, or null with the reason in `why`.
// Search order: $ATTNBENCH_CUDNN_LIB (a full path), then "libcudnn.so.9", then "libcudnn.so".
const Api* load(std::string* why);

// The loaded API; throws std::runtime_error if cuDNN is not loadable.
const Api& api();

// "CUDNN_STATUS_X (message from cudnnGetLastErrorString)" for a failed status.
std::string status_text(cudnnStatus_t s);

// "9.19.0" from 91900.
std::string version_text(std::size_t v);

}  // namespace attnbench::cudnn

namespace attnbench::cuda {
// For ATTN_CHECK on cuDNN calls.
inline std::string call_error(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? std::string() : cudnn::status_text(s);
}
}  // namespace attnbench::cuda

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
