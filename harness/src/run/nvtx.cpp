#include "attnbench/nvtx.hpp"

#ifdef ATTNBENCH_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace attnbench::nvtx {

#ifdef ATTNBENCH_WITH_NVTX
namespace {
// Created on first use; NVTX keeps domains for the life of the process.
nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA(kDomain);
  return d;
}
}  // namespace

bool enabled() { return true; }

void push(const std::string& name) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  nvtxDomainRangePushEx(domain(), &a);
}

void pop() { nvtxDomainRangePop(domain()); }
#else
bool enabled() { return false; }
void push(const std::string&) {}
void pop() {}
#endif

std::string call_range_name(const std::string& impl, const Options& options,
                            const std::string& case_label, Pass pass) {
  std::string s = impl;
  for (const auto& [k, v] : options) s += "+" + k + "=" + std::to_string(v);
  s += ":";
  s += case_label;
  s += ":";
  s += to_string(pass);
  return s;
}

}  // namespace attnbench::nvtx
