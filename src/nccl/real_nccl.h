// The real NCCL the shim forwards to: found once (dlopen), symbols looked up by name (dlsym) and cached.
// No NCCL header here: callers cast a symbol to the function type nccl.h declares (shim_forward.h).
#ifndef CONCCL_NCCL_REAL_NCCL_H_
#define CONCCL_NCCL_REAL_NCCL_H_

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace conccl::nccl {

// Where to look, in order: the configured path alone if one is given (CONCCL_NCCL_REAL_LIB: no silent
// fallback to another library), else libnccl.so.2 in the shim's own directory, then libnccl.so.2 on the
// library path.
std::vector<std::string> realNcclCandidates(const std::string& configured, const std::string& shimDir);

class RealNccl {
 public:
  // Opens the first candidate that loads and is not the shim itself: a library whose ncclGetVersion is
  // `selfGetVersion` (the shim named libnccl.so.2 and found again) is closed and skipped.
  // Never throws; available() says whether one was found, error() why not.
  RealNccl(const std::vector<std::string>& candidates, const void* selfGetVersion);
  ~RealNccl();
  RealNccl(const RealNccl&) = delete;
  RealNccl& operator=(const RealNccl&) = delete;

  bool available() const { return handle_ != nullptr; }
  const std::string& path() const { return path_; }
  const std::string& error() const { return error_; }

  // The symbol, or nullptr when the library lacks it (or none is loaded). Thread-safe.
  void* symbol(const char* name);

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string error_;
  std::mutex mutex_;
  std::map<std::string, void*> cache_;
};

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_REAL_NCCL_H_
