#include "nccl/real_nccl.h"

#include <dlfcn.h>

namespace conccl::nccl {

std::vector<std::string> realNcclCandidates(const std::string& configured, const std::string& shimDir) {
  if (!configured.empty()) return {configured};
  std::vector<std::string> out;
  if (!shimDir.empty()) out.push_back(shimDir + "/libnccl.so.2");
  out.push_back("libnccl.so.2");
  return out;
}

RealNccl::RealNccl(const std::vector<std::string>& candidates, const void* selfGetVersion) {
  for (const std::string& candidate : candidates) {
    // RTLD_LOCAL: the real NCCL's symbols must not take the place of the shim's in the global scope.
    void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* e = dlerror();
      error_ += (error_.empty() ? "" : "; ") + candidate + ": " + (e ? e : "dlopen failed");
      continue;
    }
    void* v = dlsym(h, "ncclGetVersion");
    if (v == nullptr || (selfGetVersion != nullptr && v == selfGetVersion)) {
      error_ += (error_.empty() ? "" : "; ") + candidate +
                (v == nullptr ? ": has no ncclGetVersion" : ": is the shim itself");
      dlclose(h);
      continue;
    }
    handle_ = h;
    path_ = candidate;
    error_.clear();
    return;
  }
  if (error_.empty()) error_ = "no candidate library";
}

RealNccl::~RealNccl() {
  // The library stays loaded: a communicator forwarded to it may outlive this object at process exit.
}

void* RealNccl::symbol(const char* name) {
  if (handle_ == nullptr) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = cache_.find(name);
  if (it != cache_.end()) return it->second;
  void* s = dlsym(handle_, name);
  cache_.emplace(name, s);
  return s;
}

}  // namespace conccl::nccl
