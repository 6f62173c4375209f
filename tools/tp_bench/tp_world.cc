#include "tp_world.h"

#include <chrono>
#include <thread>

#include "c3_check.h"

namespace conccl::tp {

namespace {

constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;  // as the fused ops' default

}  // namespace

void enqueueGemm(RankResources& rank, const void* a, const void* b, void* c, int64_t m, int64_t n, int64_t k,
                 cudaStream_t stream) {
  std::string why;
  if (!rank.gemm->run(concclBfloat16, /*bTransposed=*/false, a, k, b, n, c, n, m, n, k, stream, &why)) {
    CONCCL_THROW(concclUnhandledCudaError, "GEMM on device " + std::to_string(rank.device) + ": " + why);
  }
}

TpWorld::TpWorld(const std::vector<int>& devices, concclEngine_t engine, double timeoutS) : timeoutS_(timeoutS) {
  const int n = int(devices.size());
  CONCCL_REQUIRE(n >= 1, "no GPU to run on");
  ranks_.resize(devices.size());
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, devices[0]));
  deviceName_ = prop.name;
  std::vector<ncclComm_t> nccl(devices.size(), nullptr);
  C3_NCCL_CHECK(ncclCommInitAll(nccl.data(), n, devices.data()));
  for (int r = 0; r < n; ++r) ranks_[size_t(r)].nccl = nccl[size_t(r)];
  std::vector<concclComm_t> conccl(devices.size(), nullptr);
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendCuda;
  config.engine = engine;
  C3_CONCCL_CHECK(concclCommInitAll(conccl.data(), n, devices.data(), &config));
  for (int r = 0; r < n; ++r) {
    RankResources& rr = ranks_[size_t(r)];
    rr.conccl = conccl[size_t(r)];
    rr.device = devices[size_t(r)];
    exec::DeviceGuard guard(rr.device);
    rr.main = exec::Stream::createNonBlocking();
    rr.comm = exec::Stream::createNonBlocking();
    rr.compute = exec::Stream::createNonBlocking();
    rr.fork = exec::Event::createForOrdering();
    rr.join = exec::Event::createForOrdering();
    rr.done = exec::Event::createForOrdering();
    for (int i = 0; i < n; ++i) rr.pieces.push_back(exec::Event::createForOrdering());
    rr.gemm = std::make_unique<ops::detail::RowMajorGemm>(kGemmWorkspaceBytes);
    CONCCL_REQUIRE(rr.gemm->ok(), "cuBLASLt: no handle or workspace on device " + std::to_string(rr.device));
  }
  exec::DeviceGuard guard(devices[0]);
  start_ = exec::Event::createForTiming();
  stop_ = exec::Event::createForTiming();
}

TpWorld::~TpWorld() {
  // No DeviceGuard here: it throws, and a destructor must not. Failures while freeing are ignored (nothing to
  // recover at exit).
  int previous = 0;
  cudaGetDevice(&previous);
  for (RankResources& r : ranks_) {
    if (r.device >= 0) cudaSetDevice(r.device);
    if (r.nccl != nullptr) broken_ ? ncclCommAbort(r.nccl) : ncclCommDestroy(r.nccl);
    if (r.conccl != nullptr) broken_ ? concclCommAbort(r.conccl) : concclCommDestroy(r.conccl);
    r.gemm.reset();  // its cuBLASLt handle and workspace live on this device
  }
  cudaSetDevice(previous);
}

void TpWorld::synchronize() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS_);
  for (RankResources& r : ranks_) {
    exec::DeviceGuard guard(r.device);
    for (cudaStream_t s : {r.main.get(), r.comm.get(), r.compute.get()}) {
      for (;;) {
        const cudaError_t e = cudaStreamQuery(s);
        if (e == cudaSuccess) break;
        if (e != cudaErrorNotReady) CUDA_CHECK(e);
        ncclResult_t async = ncclSuccess;
        C3_NCCL_CHECK(ncclCommGetAsyncError(r.nccl, &async));
        C3_NCCL_CHECK(async);
        if (std::chrono::steady_clock::now() > deadline) {
          throw TimeoutError("the GPUs did not finish within " + std::to_string(timeoutS_) + " s (--timeout); device " +
                             std::to_string(r.device) + " is still busy");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
}

std::vector<double> TpWorld::time(const std::function<void()>& launch, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) {
    launch();
    synchronize();
  }
  std::vector<double> ms;
  RankResources& r0 = ranks_[0];
  for (int i = 0; i < iters; ++i) {
    synchronize();  // the barrier: every GPU idle, so each iteration starts from the same state
    {
      exec::DeviceGuard guard(r0.device);
      CUDA_CHECK(cudaEventRecord(start_.get(), r0.main.get()));
    }
    launch();
    for (size_t r = 1; r < ranks_.size(); ++r) {
      exec::DeviceGuard guard(ranks_[r].device);
      CUDA_CHECK(cudaEventRecord(ranks_[r].done.get(), ranks_[r].main.get()));
    }
    exec::DeviceGuard guard(r0.device);
    for (size_t r = 1; r < ranks_.size(); ++r) CUDA_CHECK(cudaStreamWaitEvent(r0.main.get(), ranks_[r].done.get(), 0));
    CUDA_CHECK(cudaEventRecord(stop_.get(), r0.main.get()));
    synchronize();
    float elapsed = 0;
    CUDA_CHECK(cudaEventElapsedTime(&elapsed, start_.get(), stop_.get()));
    ms.push_back(double(elapsed));
  }
  return ms;
}

}  // namespace conccl::tp
