// Owning wrappers for the CUDA objects of the executor: streams, events, graphs, device memory, and a guard that
// makes a device current for a scope. Non-copyable, movable; destructors never throw (a failure while
// freeing is ignored: the context may already be gone at process exit, and there is nothing to recover).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "exec/cuda/cuda_check.h"

namespace conccl::exec {

// Makes `device` current and restores the previous device at scope exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

template <typename Handle, cudaError_t (*Destroy)(Handle)>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  explicit UniqueHandle(Handle h) : handle_(h) {}
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept : handle_(std::exchange(other.handle_, Handle{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  Handle get() const { return handle_; }
  explicit operator bool() const { return handle_ != Handle{}; }
  void reset() {
    if (handle_ != Handle{}) Destroy(handle_);
    handle_ = Handle{};
  }
  // Forgets the handle without destroying it (used when destroying could block forever: see releaseRank).
  void leak() { handle_ = Handle{}; }

 private:
  Handle handle_{};
};

// A stream that never synchronises with the legacy default stream.
class Stream : public UniqueHandle<cudaStream_t, cudaStreamDestroy> {
 public:
  Stream() = default;
  static Stream createNonBlocking() {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Stream(s);
  }
  // Non-blocking with a priority (cudaDeviceGetStreamPriorityRange: numerically lower = greater priority).
  static Stream createNonBlocking(int priority) {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    return Stream(s);
  }

 private:
  explicit Stream(cudaStream_t s) : UniqueHandle(s) {}
};

// An event for ordering only (no timing: recording and waiting are cheaper).
class Event : public UniqueHandle<cudaEvent_t, cudaEventDestroy> {
 public:
  Event() = default;
  static Event createForOrdering() {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return Event(e);
  }
  // An event that cudaEventElapsedTime can read (the tools' timing).
  static Event createForTiming() {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    return Event(e);
  }

 private:
  explicit Event(cudaEvent_t e) : UniqueHandle(e) {}
};

// A CUDA graph (the template a capture produces) and an instantiated, launchable graph. Destroying an executable
// graph that is still running is allowed: the driver frees it when the launch completes (cuGraphExecDestroy).
using Graph = UniqueHandle<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = UniqueHandle<cudaGraphExec_t, cudaGraphExecDestroy>;

// cudaFree has the signature cudaError_t(void*); the wrapper keeps it as the single free path.
class DeviceBuffer : public UniqueHandle<void*, cudaFree> {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` (> 0) on the current device.
  static DeviceBuffer allocate(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return DeviceBuffer(p, bytes);
  }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }

 private:
  DeviceBuffer(void* p, size_t bytes) : UniqueHandle(p), bytes_(bytes) {}
  size_t bytes_ = 0;
};

// Page-locked host memory mapped into every device's address space (cudaHostAllocMapped | Portable), freed
// with cudaFreeHost. The executor keeps its flags here: see the comment at RankState::flags.
class PinnedBuffer : public UniqueHandle<void*, cudaFreeHost> {
 public:
  PinnedBuffer() = default;
  static PinnedBuffer allocate(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    return PinnedBuffer(p, bytes);
  }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(get());
  }

 private:
  PinnedBuffer(void* p, size_t bytes) : UniqueHandle(p), bytes_(bytes) {}
  size_t bytes_ = 0;
};

}  // namespace conccl::exec
