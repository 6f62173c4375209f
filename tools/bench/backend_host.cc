// The conccl host backend: ranks are host threads of the library, buffers are host memory, time is wall
// clock around each iteration (the group returns when every rank has finished). The backend a CPU-only
// machine runs; CUDA graphs (-G) do not apply and are ignored.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend_conccl.h"
#include "backend_factory.h"

namespace conccl::bench {
namespace {

class HostBackend final : public ConcclBackend {
 public:
  HostBackend(int nranks, const BenchOptions& options) : ConcclBackend(concclBackendHost, nranks, {}, options) {}

  std::string Name() const override { return "host"; }
  std::vector<std::string> Describe() const override {
    return {"host: conccl host backend, " + std::to_string(NumRanks()) + " ranks as threads, host memory (" +
            ConfigText() + ")"};
  }
  SmUsage Sms(CollKind /*kind*/, size_t /*bytes*/) const override { return {0, false, false, "host threads, no GPU"}; }

  void* Alloc(int /*rank*/, size_t bytes) override {
    // 4 KiB alignment, like device allocations, so that alignment-dependent paths behave alike.
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void Free(int /*rank*/, void* ptr) override { std::free(ptr); }
  void CopyIn(int /*rank*/, void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void CopyOut(int /*rank*/, void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }

  std::vector<double> Time(const std::function<void()>& launch, int iters, bool /*graph*/) override {
    std::vector<double> seconds;
    seconds.reserve(iters);
    for (int i = 0; i < iters; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      launch();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return seconds;
  }
};

}  // namespace

std::unique_ptr<Backend> MakeHostBackend(const BenchOptions& options) {
  return std::make_unique<HostBackend>(options.nranks, options);
}

}  // namespace conccl::bench
