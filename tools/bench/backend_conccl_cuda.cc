// The conccl CUDA backend: one rank per listed device (repeats allowed), device memory, one stream per rank,
// data moved by the GPUs' copy engines; reductions on config.reduceCtas CTAs.
#include "backend_conccl.h"
#include "backend_factory.h"
#include "cuda_timer.h"

namespace conccl::bench {
namespace {

class ConcclCudaBackend final : public ConcclBackend {
 public:
  explicit ConcclCudaBackend(const BenchOptions& options)
      : ConcclBackend(concclBackendCuda, options.nranks, RankDevices(options), options),
        streams_(RankDevices(options)) {}

  std::string Name() const override { return "conccl"; }
  bool GpusShared() const override { return HasRepeats(streams_.devices()); }
  std::vector<std::string> Describe() const override {
    std::vector<std::string> lines = {"conccl: CUDA backend (" + ConfigText() + ")"};
    for (int r = 0; r < NumRanks(); ++r) {
      lines.push_back("  conccl rank " + std::to_string(r) + " device " + std::to_string(streams_.devices()[r]));
    }
    return lines;
  }

  void* Alloc(int rank, size_t bytes) override {
    DeviceGuard guard(streams_.devices()[rank]);
    void* p = nullptr;
    BENCH_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void Free(int rank, void* ptr) override {
    DeviceGuard guard(streams_.devices()[rank]);
    cudaFree(ptr);
  }
  void CopyIn(int rank, void* dst, const void* src, size_t bytes) override {
    DeviceGuard guard(streams_.devices()[rank]);
    BENCH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
  void CopyOut(int rank, void* dst, const void* src, size_t bytes) override {
    DeviceGuard guard(streams_.devices()[rank]);
    BENCH_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
  }
  std::vector<double> Time(const std::function<void()>& launch, int iters, bool graph) override {
    return TimeWithEvents(streams_, launch, iters, graph);
  }
  std::unique_ptr<RankTimer> MakeRankTimer(const std::vector<int>& ranks, int iters) override {
    return MakeEventTimer(streams_, ranks, iters);
  }

 protected:
  cudaStream_t StreamOf(int rank) const override { return streams_[rank]; }

 private:
  RankStreams streams_;
};

}  // namespace

std::unique_ptr<Backend> MakeConcclCudaBackend(const BenchOptions& options) {
  return std::make_unique<ConcclCudaBackend>(options);
}

}  // namespace conccl::bench
