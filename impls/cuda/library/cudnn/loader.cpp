// dlopen/dlsym of cuDNN 9; see loader.hpp.
#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include "library/cudnn/loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace attnbench::cudnn {
namespace {

struct Loaded {
  Api api;
  bool ok = false;
  std::string why;
};

template <class Fn>
bool resolve(void* lib, const char* name, Fn& out, std::string& why) {
  void* sym = dlsym(lib, name);
  if (!sym) {
    why += std::string(why.empty() ? "" : "; ") + "missing symbol " + name;
    return false;
  }
  out = reinterpret_cast<Fn>(sym);
  return true;
}

Loaded do_load() {
  Loaded r;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("ATTNBENCH_CUDNN_LIB"); env && *env)
    candidates.emplace_back(env);
  candidates.emplace_back("libcudnn.so.9");
  candidates.emplace_back("libcudnn.so");

  void* lib = nullptr;
  std::string errors;
  for (const auto& name : candidates) {
    dlerror();  // clear
    // RTLD_LOCAL: cuDNN's symbols stay out of the global namespace; its sub-libraries
    // (libcudnn_graph, engines) are found through its own RUNPATH ($ORIGIN).
    lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      r.api.path = name;
      break;
    }
    const char* e = dlerror();
    errors += std::string(errors.empty() ? "" : "; ") + (e ? e : name + ": unknown dlopen error");
  }
  if (!lib) {
    r.why = "cuDNN not loadable: " + errors;
    return r;
  }

  std::string missing;
  bool ok = true;
  ok &= resolve(lib, "cudnnGetVersion", r.api.GetVersion, missing);
  ok &= resolve(lib, "cudnnGetErrorString", r.api.GetErrorString, missing);
  ok &= resolve(lib, "cudnnCreate", r.api.Create, missing);
  ok &= resolve(lib, "cudnnDestroy", r.api.Destroy, missing);
  ok &= resolve(lib, "cudnnSetStream", r.api.SetStream, missing);
  ok &= resolve(lib, "cudnnBackendCreateDescriptor", r.api.BackendCreateDescriptor, missing);
  ok &= resolve(lib, "cudnnBackendDestroyDescriptor", r.api.BackendDestroyDescriptor, missing);
  ok &= resolve(lib, "cudnnBackendSetAttribute", r.api.BackendSetAttribute, missing);
  ok &= resolve(lib, "cudnnBackendGetAttribute", r.api.BackendGetAttribute, missing);
  ok &= resolve(lib, "cudnnBackendFinalize", r.api.BackendFinalize, missing);
  ok &= resolve(lib, "cudnnBackendExecute", r.api.BackendExecute, missing);
  if (!ok) {
    r.why = "cuDNN not loadable: " + r.api.path + ": " + missing;
    return r;  // the handle stays open: unloading a half-initialised cuDNN buys nothing
  }
  // Optional (cuDNN 9.0+): richer error messages.
  r.api.GetLastErrorString =
      reinterpret_cast<decltype(r.api.GetLastErrorString)>(dlsym(lib, "cudnnGetLastErrorString"));
  r.api.version = r.api.GetVersion();
  if (r.api.version < 90000) {
    r.why = "cuDNN " + std::to_string(r.api.version) + " loaded from " + r.api.path +
            " is too old: the SDPA graphs need cuDNN 9";
    return r;
  }
  r.ok = true;
  return r;
}

// Never unloaded: cuDNN handles and plans may outlive static destruction.
const Loaded& loaded() {
  static const Loaded* l = new Loaded(do_load());
  return *l;
}

}  // namespace

const Api* load(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok) {
    if (why) *why = l.why;
    return nullptr;
  }
  return &l.api;
}

const Api& api() {
  std::string why;
  const Api* a = load(&why);
  if (!a) throw std::runtime_error(why);
  return *a;
}

std::string status_text(cudnnStatus_t s) {
  const Api* a = load(nullptr);
  if (!a) return "cuDNN status " + std::to_string(static_cast<int>(s));
  std::string t = a->GetErrorString(s);
  if (a->GetLastErrorString) {
    char msg[2048] = {0};
    a->GetLastErrorString(msg, sizeof msg);
    if (msg[0]) t += std::string(" (") + msg + ")";
  }
  return t;
}

std::string version_text(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
