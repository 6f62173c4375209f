#include "backend_factory.h"

#include <numeric>

#if defined(CONCCL_HAVE_CUDA)
#include <cuda_runtime.h>
#endif
#if defined(CONCCL_HAVE_NCCL)
#include <nccl.h>
#endif

namespace conccl::bench {

int CudaDeviceCount() {
#if defined(CONCCL_HAVE_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::vector<int> RankDevices(const BenchOptions& options) {
  if (!options.devices.empty()) return options.devices;
  std::vector<int> devices(options.nranks);
  std::iota(devices.begin(), devices.end(), 0);
  return devices;
}

std::vector<std::string> MachineDescription() {
  std::vector<std::string> lines;
  int version = 0;
  concclGetVersion(&version);
  lines.push_back("conccl library version " + std::to_string(version) + " (header " +
                  std::to_string(CONCCL_VERSION_CODE) + ")");
#if defined(CONCCL_HAVE_CUDA)
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  lines.push_back("CUDA driver " + std::to_string(driver) + ", runtime " + std::to_string(runtime));
  const int n = CudaDeviceCount();
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    char bus[32];
    std::snprintf(bus, sizeof(bus), "%04x:%02x:%02x", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    lines.push_back("device " + std::to_string(d) + " [" + bus + "] " + prop.name + ", " +
                    std::to_string(prop.multiProcessorCount) + " SMs, " + std::to_string(prop.asyncEngineCount) +
                    " copy engines");
  }
  if (n == 0) lines.push_back("no CUDA device");
#else
  lines.push_back("built without CUDA: host backend only");
#endif
#if defined(CONCCL_HAVE_NCCL)
  int nccl = 0;
  ncclGetVersion(&nccl);
  lines.push_back("NCCL " + std::to_string(nccl) + " (header " + std::to_string(NCCL_VERSION_CODE) + ")");
#endif
  return lines;
}

std::unique_ptr<Backend> MakeBackend(const std::string& name, const BenchOptions& options) {
  if (name == "host") return MakeHostBackend(options);
#if defined(CONCCL_HAVE_CUDA)
  if (name == "conccl") return MakeConcclCudaBackend(options);
#endif
#if defined(CONCCL_HAVE_NCCL)
  if (name == "nccl") return MakeNcclBackend(options);
  if (name == "nccl-ce") return MakeNcclCeBackend(options);
#endif
  if (name == "conccl") throw BackendError("backend conccl needs a build with CUDA (CONCCL_ENABLE_CUDA)");
  throw BackendError("backend " + name + " needs a build with CUDA and NCCL (NCCL_ROOT)");
}

}  // namespace conccl::bench
