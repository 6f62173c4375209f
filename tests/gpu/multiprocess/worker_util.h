// Small helpers the scenario files of conccl_mp_worker share: CUDA and conccl result checks that throw, a bounded
// stream wait, and a device buffer.
#pragma once

#include <conccl/conccl.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

namespace conccl::mpworker {

inline void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

inline void ok(concclResult_t r, concclComm_t comm, const char* what) {
  if (r != concclSuccess) {
    throw std::runtime_error(std::string(what) + " -> " + concclGetErrorString(r) + ": " + concclGetLastError(comm));
  }
}

// Waits at most `seconds` for the stream: a hang fails the scenario instead of stalling it.
inline void syncBounded(cudaStream_t s, const char* what, int seconds = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  cudaError_t e;
  while ((e = cudaStreamQuery(s)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error(std::string(what) + ": stream hangs");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  cudaOk(e, what);
}

// VMM memory as PyTorch's expandable segments map it: cuMemCreate + cuMemMap + cuMemSetAccess, no IPC handle type.
struct VmmBuffer {
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
  VmmBuffer(size_t want, int device) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    size_t granularity = 0;
    if (cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) {
      throw std::runtime_error("cuMemGetAllocationGranularity failed");
    }
    bytes = (want + granularity - 1) / granularity * granularity;
    if (cuMemCreate(&handle, bytes, &prop, 0) != CUDA_SUCCESS) throw std::runtime_error("cuMemCreate failed");
    if (cuMemAddressReserve(&ptr, bytes, 0, 0, 0) != CUDA_SUCCESS) throw std::runtime_error("cuMemAddressReserve");
    if (cuMemMap(ptr, bytes, 0, handle, 0) != CUDA_SUCCESS) throw std::runtime_error("cuMemMap failed");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemSetAccess(ptr, bytes, &access, 1) != CUDA_SUCCESS) throw std::runtime_error("cuMemSetAccess failed");
  }
  ~VmmBuffer() {
    cuMemUnmap(ptr, bytes);
    cuMemAddressFree(ptr, bytes);
    cuMemRelease(handle);
  }
  VmmBuffer(const VmmBuffer&) = delete;
  VmmBuffer& operator=(const VmmBuffer&) = delete;
  void* p() const { return reinterpret_cast<void*>(ptr); }
};

// Where a Buf's memory comes from: cudaMalloc (CUDA IPC can share it), or the two kinds it cannot: the VMM API
// (PyTorch's expandable segments) and a cudaMallocAsync pool.
enum class BufKind { kMalloc, kVmm, kPool };
inline const char* bufKindName(BufKind k) { return k == BufKind::kMalloc ? "cudaMalloc" : k == BufKind::kVmm ? "VMM" : "pool"; }

struct Buf {
  void* p = nullptr;
  std::unique_ptr<VmmBuffer> vmm;
  explicit Buf(size_t bytes, BufKind kind = BufKind::kMalloc) {
    bytes = bytes == 0 ? 1 : bytes;
    if (kind == BufKind::kVmm) {
      int device = 0;
      cudaOk(cudaGetDevice(&device), "cudaGetDevice");
      vmm = std::make_unique<VmmBuffer>(bytes, device);
      p = vmm->p();
    } else if (kind == BufKind::kPool) {
      cudaOk(cudaMallocAsync(&p, bytes, cudaStreamLegacy), "cudaMallocAsync");
      cudaOk(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize");
    } else {
      cudaOk(cudaMalloc(&p, bytes), "cudaMalloc");
    }
  }
  ~Buf() {
    if (!vmm) cudaFree(p);  // cudaFree takes pool memory too (it waits for the device)
  }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* c() const { return static_cast<char*>(p); }
};

}  // namespace conccl::mpworker
