// Running one collective case with one host thread per rank (no group), every step bounded: the calls, then the
// GPU work; a hang becomes a failure that names the case (and an abort, which re-opens every flag so that the GPU
// drains). Shared by test_gpu_no_hang (issue 13) and test_gpu_graph_cache.
//
// Env: CONCCL_NO_HANG_LIMIT_S (default 10) seconds per call.
#pragma once

#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {

inline int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

inline std::chrono::seconds callLimit() { return std::chrono::seconds(envInt("CONCCL_NO_HANG_LIMIT_S", 10)); }

// Fresh seeds per run (printed on failure), so every run checks new random data.
inline uint64_t freshSeed() {
  static std::mt19937_64 gen(std::random_device{}());
  return gen();
}

// Runs `c` with one std::thread per rank (no group), then waits for the GPU, all bounded. Returns false (after
// recording a failure and aborting the communicators) on an error, a call that does not return, or GPU work that
// does not finish; true when every rank's call succeeded, its stream finished and no async error is set.
inline bool runThreadPerRank(Clique& clique, const CollCase& c, const std::string& what) {
  const int n = clique.size();
  const auto limit = callLimit();
  std::vector<concclResult_t> results(static_cast<size_t>(n), concclInternalError);
  std::atomic<int> returned{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      results[static_cast<size_t>(r)] = c.call(r, clique.comms[static_cast<size_t>(r)], clique.streams[static_cast<size_t>(r)]);
      returned.fetch_add(1);
    });
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (returned.load() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (returned.load() < n) {
    // Not aborted here: conccl.h forbids aborting a communicator while another thread is inside a call on it.
    // The library bounds its own host waits (config.timeoutMs = 20 s); a call stuck inside CUDA would keep the
    // join below waiting, and the script's per-binary timeout then ends the test: it fails, never silently.
    ADD_FAILURE() << what << ": " << n - returned.load() << " of " << n << " host calls did not return within "
                  << limit.count() << " s (a host-side hang)";
    for (auto& t : threads) t.join();
    clique.broken = true;
    return false;
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (results[static_cast<size_t>(r)] != concclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " returned " << concclGetErrorString(results[static_cast<size_t>(r)])
                    << ": " << concclGetLastError(clique.comms[static_cast<size_t>(r)]);
      clique.broken = true;
      return false;
    }
  }
  // GPU work, bounded: poll every stream until the deadline.
  const auto gpuDeadline = std::chrono::steady_clock::now() + limit;
  for (int r = 0; r < n; ++r) {
    for (;;) {
      cudaError_t e = cudaStreamQuery(clique.streams[static_cast<size_t>(r)]);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        ADD_FAILURE() << what << ": rank " << r << " stream error " << cudaGetErrorName(e);
        clique.broken = true;
        return false;
      }
      if (std::chrono::steady_clock::now() > gpuDeadline) {
        std::string stuck;
        for (int q = 0; q < n; ++q) {
          if (cudaStreamQuery(clique.streams[static_cast<size_t>(q)]) == cudaErrorNotReady) {
            stuck += (stuck.empty() ? "" : ",") + std::to_string(q);
          }
        }
        ADD_FAILURE() << what << ": every call returned concclSuccess but the streams of rank(s) " << stuck
                      << " did not finish within " << limit.count() << " s (the issue 13 deadlock); aborting";
        for (concclComm_t comm : clique.comms) concclCommAbort(comm);
        clique.broken = true;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  for (int r = 0; r < n; ++r) {
    concclResult_t async = concclInternalError;
    EXPECT_EQ(concclCommGetAsyncError(clique.comms[static_cast<size_t>(r)], &async), concclSuccess);
    if (async != concclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " async error " << concclGetErrorString(async) << ": "
                    << concclGetLastError(clique.comms[static_cast<size_t>(r)]);
      clique.broken = true;
      return false;
    }
  }
  return true;
}

}  // namespace conccl::gputest
