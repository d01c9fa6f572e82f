// The one checked-call macro of the CUDA implementations: ATTN_CHECK(call) throws
// std::runtime_error("file:line: call: message") when call returns an error status, which the
// harness records as a FAIL. It takes any status type with a call_error() overload in namespace
// attnbench::cuda, declared here or beside its library's header: cudaError_t here,
// cublasStatus_t in common/device.cuh, cudnnStatus_t in library/cudnn/loader.hpp, ncclResult_t in
// ring/ring_attention.cu. On success the check builds an empty std::string, which never allocates. After
// a <<<...>>> launch, ATTN_CHECK(cudaGetLastError()) catches bad configurations at once;
// faults inside the kernel surface at the harness's synchronisation.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace attnbench::cuda {

[[noreturn]] inline void throw_call_error(const char* file, int line, const char* call,
                                          const std::string& msg) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
                           msg);
}

// Empty on success, else the error's message.
inline std::string call_error(cudaError_t e) {
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorString(e));
}

}  // namespace attnbench::cuda

#define ATTN_CHECK(call)                                                                  \
  do {                                                                                         \
    if (const std::string attn_msg_ = ::attnbench::cuda::call_error(call); !attn_msg_.empty()) \
      ::attnbench::cuda::throw_call_error(__FILE__, __LINE__, #call, attn_msg_);               \
  } while (0)
