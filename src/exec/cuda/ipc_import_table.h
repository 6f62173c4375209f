// Process-wide table of the peer allocations this process has mapped with cudaIpcOpenMemHandle, and what the
// driver says about a pointer (one cuPointerGetAttributes call): the CUDA executor's view of buffers.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "exec/executor.h"

namespace conccl::exec {

std::string describePointer(const void* p);
std::string describeStream(cudaStream_t s);

// What the driver knows about a pointer, from one cuPointerGetAttributes call.
struct PointerInfo {
  unsigned int memoryType = 0;  // CUmemorytype; 0: not a CUDA pointer (plain host memory)
  int device = -1;
  unsigned int managed = 0;
  CUdeviceptr base = 0;  // allocation range (0 when the driver does not know it, e.g. some pool allocators)
  size_t size = 0;
  unsigned long long bufferId = 0;  // unique per allocation for the life of the process
};

PointerInfo queryPointer(const void* ptr);

// Shared by every communicator of the process because CUDA refuses to open one handle twice in a process;
// reference counted.
class IpcImportTable {
 public:
  static IpcImportTable& instance();
  // Maps (or finds) the allocation `b` of another process on `device`; returns its base here.
  void* acquire(const BufferExport& b, int device);
  size_t size();
  void release(int64_t pid, uint64_t allocId, int device);

 private:
  struct Key {
    int64_t pid;
    uint64_t allocId;
    int device;
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    void* base;
    int refs;
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

}  // namespace conccl::exec
