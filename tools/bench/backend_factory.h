// Creation of the bench's backends by name; each maker lives in its backend's file and exists only in builds
// that have what it needs (CUDA, NCCL).
#ifndef CONCCL_TOOLS_BENCH_BACKEND_FACTORY_H_
#define CONCCL_TOOLS_BENCH_BACKEND_FACTORY_H_

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "options.h"

namespace conccl::bench {

// Number of CUDA devices (0 in a build without CUDA or on a machine without a GPU).
int CudaDeviceCount();
// Device of each rank: options.devices, else 0..nranks-1.
std::vector<int> RankDevices(const BenchOptions& options);
// Machine facts for the header and the JSON metadata line (GPU names, driver, NCCL version, ...).
std::vector<std::string> MachineDescription();

// Throws BackendError when the backend is not available in this build or on this machine.
std::unique_ptr<Backend> MakeBackend(const std::string& name, const BenchOptions& options);

std::unique_ptr<Backend> MakeHostBackend(const BenchOptions& options);
#if defined(CONCCL_HAVE_CUDA)
std::unique_ptr<Backend> MakeConcclCudaBackend(const BenchOptions& options);
#endif
#if defined(CONCCL_HAVE_NCCL)
std::unique_ptr<Backend> MakeNcclBackend(const BenchOptions& options);
std::unique_ptr<Backend> MakeNcclCeBackend(const BenchOptions& options);
#endif

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_BACKEND_FACTORY_H_
