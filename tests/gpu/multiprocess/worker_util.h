// Small helpers the scenario files of conccl_mp_worker share: CUDA and conccl result checks that throw, a bounded
// stream wait, and a device buffer.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>

#include <chrono>
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

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { cudaOk(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  char* c() const { return static_cast<char*>(p); }
};

}  // namespace conccl::mpworker
