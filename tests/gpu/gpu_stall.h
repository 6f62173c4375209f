// The pieces of the GPU-watchdog tests (test_gpu_no_hang.cc, test_gpu_graph_cache.cc): a rank's stream stalled by
// work queued before a call, polling the communicators' asynchronous errors, and waiting (bounded) for a stream to
// drain.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace conccl::gputest {

// Set by endStall(); the stall also ends by itself after a minute, so a failing test cannot hang the binary.
inline std::atomic<int> gStallRelease{0};

// Queues on `stream` a host function that waits until endStall(): everything enqueued after it waits too. Until then
// nothing may wait for the device (cudaDeviceSynchronize, CollCase::prepare's syncAllDevices): it would wait for the
// stall itself, a minute.
inline cudaError_t stallStream(cudaStream_t stream) {
  gStallRelease = 0;
  return cudaLaunchHostFunc(
      stream,
      [](void*) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (gStallRelease.load() == 0 && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
      },
      nullptr);
}
inline void endStall() { gStallRelease = 1; }

// Polls every communicator's asynchronous error until all report one, or `limit` passed; returns the last answers.
inline std::vector<concclResult_t> waitForAsyncErrors(const std::vector<concclComm_t>& comms,
                                                      std::chrono::seconds limit) {
  std::vector<concclResult_t> async(comms.size(), concclSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < limit) {
    bool all = true;
    for (size_t r = 0; r < comms.size(); ++r) {
      concclCommGetAsyncError(comms[r], &async[r]);
      all = all && async[r] != concclSuccess;
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return async;
}

// cudaStreamQuery until the stream is idle or `limit` passed; returns the last answer (cudaSuccess: drained).
inline cudaError_t waitForStream(cudaStream_t stream, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t q = cudaErrorNotReady;
  while ((q = cudaStreamQuery(stream)) == cudaErrorNotReady && std::chrono::steady_clock::now() - t0 < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return q;
}

// The end of a watchdog test: the application ends the stall of rank 1's stream (before the abort: releasing a
// rank frees memory with cudaFree, which waits for the whole device), that stream finishes, every communicator
// aborts promptly, and the streams are destroyed.
inline void expectStallEndsAndAbortIsPrompt(const std::vector<concclComm_t>& comms,
                                            const std::vector<cudaStream_t>& streams) {
  endStall();
  const cudaError_t q1 = waitForStream(streams[1], std::chrono::seconds(10));
  EXPECT_EQ(q1, cudaSuccess) << "rank 1's stream did not finish after the stall ended";
  const auto t3 = std::chrono::steady_clock::now();
  for (concclComm_t comm : comms) EXPECT_EQ(concclCommAbort(comm), concclSuccess);
  EXPECT_LT(std::chrono::steady_clock::now() - t3, std::chrono::seconds(5)) << "abort took long";
  for (auto s : streams) cudaStreamDestroy(s);
}

}  // namespace conccl::gputest
