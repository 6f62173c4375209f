// Issue 13, item 1: the shared-GPU deadlock. 3 to 5 ranks on ONE GPU, one host thread per rank, a fresh
// communicator (and fresh streams), first call above the small-message threshold (copy-engine path): before the
// fix, calls returned concclSuccess and a rank's stream never finished. Every case here is bounded: the host calls
// and the GPU work each get a deadline, after which the communicators are aborted (which re-opens every flag, so
// the GPU drains) and the test fails, naming the case. It never hangs.
//
// Env: CONCCL_NO_HANG_ITERS (default 20) fresh communicators per (ranks, collective); CONCCL_NO_HANG_LIMIT_S
// (default 10) seconds per call. NoHangRepro.DISABLED_* run the same cases with the fix off (Config::queueClaim
// through ConfigTestHook), to show what it prevents: they are expected to FAIL (scripts/gpu.sh repro).
// Also the GPU watchdog (item 2): Watchdog.*.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_stall.h"
#include "gpu/gpu_test_util.h"
#include "gpu/gpu_thread_per_rank.h"

namespace conccl::gputest {
namespace {

// Above the 64 KiB small-message threshold for every rank that sends: AllReduce of 1,000,003 bf16 is the case of
// the issue; ReduceScatter 200,003 bf16 per rank (every rank sends (n-1) x 400 KB); Broadcast 1,000,003 bf16 (the
// root pushes 2 MB to each peer).
CaseSpec bigSpec(Coll coll, int n, int iter) {
  CaseSpec spec;
  spec.coll = coll;
  spec.dtype = concclBfloat16;
  spec.op = concclSum;
  spec.count = coll == Coll::kReduceScatter ? 200003 : 1000003;
  spec.root = iter % n;
  return spec;
}

// One case of the matrix on `clique`: fresh random inputs, one thread per rank, results checked against
// the host reference. `how` says how the communicator and its streams were prepared (for the failure message).
bool runFreshCase(Clique& clique, Coll coll, int iter, const std::string& how) {
  const int n = clique.size();
  const CaseSpec spec = bigSpec(coll, n, iter);
  const uint64_t seed = freshSeed();
  const std::string what = "iteration " + std::to_string(iter) + ", " + spec.describe(n) + ", seed " +
                           std::to_string(seed) + " (" + how + ")";
  if (verbose()) std::fprintf(stderr, "case: %s\n", what.c_str());
  CollCase c(spec, n);
  c.prepare(seed);
  return runThreadPerRank(clique, c, what) && c.check(what);
}

// The test the issue asks for: >= 20 fresh communicators x ranks {3,4,5} on one GPU x thread per rank x
// AllReduce / ReduceScatter / Broadcast above the small-message threshold, checked against a host reference on
// fresh random data. Failed before the fix (the first call of a fresh communicator could deadlock on the GPU).
void runFreshCommunicators() {
  cliqueCache().clear();  // only this test's streams on the GPU
  const int iters = envInt("CONCCL_NO_HANG_ITERS", 20);
  int cases = 0;
  for (int iter = 0; iter < iters; ++iter) {
    for (int n : {3, 4, 5}) {
      for (Coll coll : {Coll::kAllReduce, Coll::kReduceScatter, Coll::kBroadcast}) {
        auto clique = Clique::create(n);
        ASSERT_NE(clique, nullptr) << "iteration " << iter << ", " << n << " ranks";
        ASSERT_TRUE(runFreshCase(*clique, coll, iter, "fresh communicator, thread per rank"));
        ++cases;
      }
    }
  }
  ::testing::Test::RecordProperty("cases", cases);
}

TEST(NoHang, FreshCommunicatorsThreadPerRankAboveSmallThreshold) {
  SKIP_WITHOUT_GPU();
  runFreshCommunicators();
}

// The same without the queue claim: expected to fail (a rank's stream that never finishes, bounded by the limits
// above). Not run by default.
TEST(NoHangRepro, DISABLED_FreshCommunicatorsWithoutQueueClaim) {
  SKIP_WITHOUT_GPU();
  const ConfigTestHook hook([](Config& config) { config.queueClaim = false; });
  runFreshCommunicators();
}

// The same on a communicator that already ran calls: every few calls each rank gets a stream it never used
// before (streams are claimed when a call first meets them, see docs/cuda-executor.md, Hazards).
TEST(NoHang, NewStreamsOnAWarmCommunicatorThreadPerRank) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  const int iters = envInt("CONCCL_NO_HANG_ITERS", 20);
  for (int n : {3, 5}) {
    auto clique = Clique::create(n);
    ASSERT_NE(clique, nullptr);
    for (int iter = 0; iter < iters; ++iter) {
      if (iter % 2 == 1) {  // fresh streams for every rank
        for (auto& s : clique->streams) {
          ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
          cudaStreamDestroy(s);
          s = nullptr;
          ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
        }
      }
      const Coll coll = iter % 3 == 0 ? Coll::kAllReduce : iter % 3 == 1 ? Coll::kReduceScatter : Coll::kBroadcast;
      ASSERT_TRUE(runFreshCase(*clique, coll, iter, "warm communicator, thread per rank"));
    }
  }
}

// Diagnosis (run with the fix off, Config::queueClaim false): the caller's streams get work one at a
// time from one thread before the first call, each kept busy (by a host-released wait) while the next is first
// used. If this passes with the fix off while FreshCommunicators... fails, the first use of the caller's streams
// from several threads at once is what deadlocked; if it fails too, the lanes' first use is (or another cause).
TEST(NoHangDiagnosis, DISABLED_CallerStreamsUsedFirstFromOneThread) {
  SKIP_WITHOUT_GPU();
  const ConfigTestHook hook([](Config& config) { config.queueClaim = false; });
  cliqueCache().clear();
  const int iters = envInt("CONCCL_NO_HANG_ITERS", 20);
  for (int iter = 0; iter < iters; ++iter) {
    for (int n : {3, 5}) {
      auto clique = Clique::create(n);
      ASSERT_NE(clique, nullptr);
      // One pinned word, 0 until every stream has been given its first work: each stream's first op is a host
      // function that spins on it, so every stream is busy while the next one is first used.
      void* gateMem = nullptr;
      ASSERT_EQ(cudaHostAlloc(&gateMem, sizeof(int), cudaHostAllocDefault), cudaSuccess);
      volatile int* gate = static_cast<volatile int*>(gateMem);
      *gate = 0;
      for (auto s : clique->streams) {
        ASSERT_EQ(cudaLaunchHostFunc(
                      s, [](void* g) { while (*static_cast<volatile int*>(g) == 0) std::this_thread::yield(); },
                      gateMem),
                  cudaSuccess);
      }
      *gate = 1;
      for (auto s : clique->streams) ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      cudaFreeHost(gateMem);
      ASSERT_TRUE(runFreshCase(*clique, Coll::kAllReduce, iter, "caller streams first used from one thread"));
    }
  }
}

// Issue 13, item 2: the GPU-side watchdog. Rank 1's stream is stalled by work queued before the call (a host
// function that waits for a host flag), so rank 0 waits on the GPU for rank 1's signals. Every call returns
// concclSuccess; within about timeoutMs the communicator reports concclTimeout on every rank, the message names
// the call and the ranks that made no progress, and rank 0's stream drains (the failure re-opens every flag);
// once the application ends its stall, rank 1's stream finishes too, and concclCommAbort returns promptly.
TEST(Watchdog, StalledRankBecomesTimeoutOnEveryRank) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  constexpr int kN = 2;
  constexpr int kTimeoutMs = 2000;
  concclConfig_t config = cudaConfig();
  config.timeoutMs = kTimeoutMs;
  std::vector<concclComm_t> comms(kN, nullptr);
  std::vector<int> devices(kN, 0);
  ASSERT_EQ(concclCommInitAll(comms.data(), kN, devices.data(), &config), concclSuccess)
      << concclGetLastError(nullptr);
  std::vector<cudaStream_t> streams(kN, nullptr);
  for (auto& s : streams) CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Inputs first: prepare() waits for every device (syncAllDevices), so after the stall it would wait for the stall
  // itself to end (a minute) and the call would then find nothing stalled.
  CaseSpec spec = bigSpec(Coll::kAllReduce, kN, 0);
  CollCase c(spec, kN);
  c.prepare(freshSeed());

  CUDA_OK(stallStream(streams[1]));
  ASSERT_EQ(concclGroupStart(), concclSuccess);
  for (int r = 0; r < kN; ++r) ASSERT_EQ(c.call(r, comms[static_cast<size_t>(r)], streams[static_cast<size_t>(r)]), concclSuccess);
  ASSERT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(comms[0]);

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<concclResult_t> async = waitForAsyncErrors(comms, std::chrono::seconds(20));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(async[0], concclTimeout);
  EXPECT_EQ(async[1], concclTimeout);
  EXPECT_GE(waited, kTimeoutMs / 1000.0 * 0.8);
  EXPECT_LE(waited, kTimeoutMs / 1000.0 + 3.0);
  // The next call reports the watchdog's reason.
  EXPECT_NE(c.call(0, comms[0], streams[0]), concclSuccess);
  const std::string message = concclGetLastError(comms[0]);
  EXPECT_NE(message.find("concclAllReduce #0"), std::string::npos) << message;
  EXPECT_NE(message.find("did not complete within 2000 ms"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  // Rank 0's stream drains (its waits were re-opened) although rank 1 never reached the call.
  const cudaError_t q0 = waitForStream(streams[0], std::chrono::seconds(10));
  EXPECT_EQ(q0, cudaSuccess) << "rank 0's stream did not drain after the watchdog fired";
  // The stall is the application's to end; then rank 1's stream finishes and abort is prompt.
  expectStallEndsAndAbortIsPrompt(comms, streams);
}

}  // namespace
}  // namespace conccl::gputest
