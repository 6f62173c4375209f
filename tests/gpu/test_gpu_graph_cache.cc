// The graph cache of the copy-engine path (exec/cuda/graph_cache.h, docs/cuda-executor.md "Graph cache"): eager
// calls that repeat their shape (schedule and buffers) are captured once and replayed as one CUDA graph. Every test
// checks every iteration against the host reference on fresh random data, with the cache on and off:
//   - RepeatedCalls: every collective, 2 and 3 ranks, grouped from one thread and one thread per rank, the same
//     buffers call after call (a training loop), sizes up to programs that use lanes (parallel graph branches);
//   - RotatingBuffersAndEviction: three buffer sets of one shape in turn, no synchronisation between calls, a cache
//     of 2 shapes (graphs evicted while they may still run), and buffers freed and allocated again (same addresses,
//     new allocations) between rounds;
//   - SeveralCallsInOneGroup: two calls per rank in one group (prepared together, launched in order);
//   - ThreadPerRankOnOneGpu: 3 ranks sharing one GPU, thread per rank, graph replays with lanes (the issue-13 shape
//     of deadlock, now with the driver's graph branches instead of our lanes);
//   - WatchdogAndAbort: a cached graph waiting for a stalled peer is reported by the GPU watchdog, drains when the
//     flags are re-opened, and abort returns promptly.
// Ranks are spread over the visible GPUs (r % count), so a 2-GPU machine runs them across NVLink.
//
// Env: CONCCL_GRAPH_CACHE_TEST_ITERS (default 8) calls per case.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "exec/executor.h"
#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_stall.h"
#include "gpu/gpu_test_util.h"
#include "gpu/gpu_thread_per_rank.h"

namespace conccl::gputest {
namespace {

int iterations() { return envInt("CONCCL_GRAPH_CACHE_TEST_ITERS", 8); }

std::vector<int> spreadDevices(int n) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
  std::vector<int> devices;
  for (int r = 0; r < n; ++r) devices.push_back(r % count);
  return devices;
}

// A communicator on the copy-engine path only (smallMessageBytes 0), with CONCCL_GRAPH_CACHE set to `entries` while
// it is made (the library reads the environment at init).
std::unique_ptr<Clique> makeClique(int n, const std::vector<int>& devices, int entries) {
  const std::string value = std::to_string(entries);
  setenv("CONCCL_GRAPH_CACHE", value.c_str(), /*overwrite=*/1);
  auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices, /*smallMessageBytes=*/0);
  unsetenv("CONCCL_GRAPH_CACHE");
  return clique;
}

CaseSpec specFor(Coll coll, size_t count, int n) {
  CaseSpec spec;
  spec.coll = coll;
  spec.count = count;
  spec.dtype = isReduction(coll) ? concclBfloat16 : concclFloat32;
  spec.op = concclSum;
  spec.root = n - 1;
  return spec;
}

bool runGrouped(Clique& clique, const CollCase& c, const std::string& what) {
  const concclResult_t res = c.enqueueAll(clique);
  if (res != concclSuccess) {
    ADD_FAILURE() << what << ": " << concclGetErrorString(res) << ": " << concclGetLastError(clique.comms[0]);
    return false;
  }
  if (!clique.sync()) {
    ADD_FAILURE() << what << ": did not complete";
    return false;
  }
  return true;
}

enum class Mode { kGrouped, kThreadPerRank };

class RepeatedCalls : public ::testing::TestWithParam<std::tuple<Coll, int, Mode, bool>> {};

TEST_P(RepeatedCalls, SameBuffersFreshDataCheckedEveryCall) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  const auto [coll, n, mode, cacheOn] = GetParam();
  const std::vector<int> devices = spreadDevices(n);
  auto clique = makeClique(n, devices, cacheOn ? 64 : 0);
  ASSERT_NE(clique, nullptr);
  // 4099: a few handshakes and copies, one stream; 300000: ~1 MB per rank, one stream; large: 6 MB blocks (1.5M
  // floats, 3M bf16 for reductions), above CONCCL_SINGLE_STREAM_BYTES (4 MiB): lanes, i.e. parallel branches in the
  // graph, and for reductions several pieces.
  std::vector<size_t> counts = {4099, 300000};
  if (coll == Coll::kAllGather || coll == Coll::kAllReduce || coll == Coll::kReduceScatter || coll == Coll::kReduce ||
      coll == Coll::kAllToAll) {
    counts.push_back(isReduction(coll) ? 3000000 : 1500000);
  }
  const int iters = iterations();
  const size_t before = exec::graphCacheReplays();
  const size_t lanesBefore = exec::graphCacheLaneReplays();
  for (size_t count : counts) {
    CaseSpec spec = specFor(coll, count, n);
    spec.inPlace = hasInPlace(coll) && count == 300000;
    CollCase c(spec, n, devices);
    for (int iter = 0; iter < iters; ++iter) {
      const uint64_t seed = freshSeed();
      const std::string what = spec.describe(n) + (mode == Mode::kGrouped ? " grouped" : " thread per rank") +
                               (cacheOn ? " cache on" : " cache off") + ", call " + std::to_string(iter) + ", seed " +
                               std::to_string(seed);
      c.prepare(seed);
      const bool ran = mode == Mode::kGrouped ? runGrouped(*clique, c, what) : runThreadPerRank(*clique, c, what);
      ASSERT_TRUE(ran) << what;
      ASSERT_TRUE(c.check(what));
    }
  }
  const size_t replays = exec::graphCacheReplays() - before;
  if (cacheOn) {
    // Every rank replays from its second call on (the first call of a shape runs eagerly, the second is captured
    // and launched as a graph), except the lane programs of ranks sharing a GPU, which are never cached
    // (CudaExecutor::graphCacheable).
    const bool shared = std::set<int>(devices.begin(), devices.end()).size() < devices.size();
    const size_t cached = shared ? 2 : counts.size();
    EXPECT_GE(replays, cached * static_cast<size_t>(n) * static_cast<size_t>(iters - 1)) << "the cache was not used";
    if (shared) {
      EXPECT_EQ(exec::graphCacheLaneReplays() - lanesBefore, 0u) << "a lane program replayed on a shared GPU";
    }
  } else {
    EXPECT_EQ(replays, 0u) << "CONCCL_GRAPH_CACHE=0 must turn the cache off";
  }
}

std::string repeatedCallsName(const ::testing::TestParamInfo<RepeatedCalls::ParamType>& p) {
  return std::string(collKindName(std::get<0>(p.param))) + "_n" + std::to_string(std::get<1>(p.param)) +
         (std::get<2>(p.param) == Mode::kGrouped ? "_grouped" : "_threadPerRank") +
         (std::get<3>(p.param) ? "_cacheOn" : "_cacheOff");
}

INSTANTIATE_TEST_SUITE_P(GraphCache, RepeatedCalls,
                         ::testing::Combine(::testing::Values(Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce,
                                                              Coll::kBroadcast, Coll::kReduce, Coll::kAllToAll,
                                                              Coll::kAllToAllv, Coll::kGather, Coll::kScatter),
                                            ::testing::Values(2, 3),
                                            ::testing::Values(Mode::kGrouped, Mode::kThreadPerRank), ::testing::Bool()),
                         repeatedCallsName);
// A rank's Send and Recv of the ring must be one group (each issued alone would wait for a receive queued behind the
// peer's send), so Send/Recv runs grouped only.
INSTANTIATE_TEST_SUITE_P(GraphCacheSendRecv, RepeatedCalls,
                         ::testing::Combine(::testing::Values(Coll::kSendRecv), ::testing::Values(2, 3),
                                            ::testing::Values(Mode::kGrouped), ::testing::Bool()),
                         repeatedCallsName);

// Three buffer sets of one shape, called A A B B C C A A without waiting in between, so that with a cache of 2 shapes
// a graph is evicted (destroyed) while its launch may still run. Out of place, so a buffer's final content is its
// last call's result whatever ran before. Between rounds set C is freed and allocated again: the new buffers may
// reuse the old addresses, and must not be mistaken for the old allocation.
TEST(GraphCache, RotatingBuffersAndEviction) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  for (Coll coll : {Coll::kAllGather, Coll::kAllReduce}) {
    for (int entries : {2, 64}) {
      const int n = 2;
      const std::vector<int> devices = spreadDevices(n);
      auto clique = makeClique(n, devices, entries);
      ASSERT_NE(clique, nullptr);
      const CaseSpec spec = specFor(coll, 300000, n);
      std::vector<std::unique_ptr<CollCase>> sets;
      for (int i = 0; i < 3; ++i) sets.push_back(std::make_unique<CollCase>(spec, n, devices));
      const size_t before = exec::graphCacheReplays();
      for (int round = 0; round < iterations(); ++round) {
        const std::string what = spec.describe(n) + ", cache of " + std::to_string(entries) + ", round " +
                                 std::to_string(round);
        for (auto& s : sets) s->prepare(freshSeed());
        for (int i : {0, 0, 1, 1, 2, 2, 0, 0}) {
          const concclResult_t res = sets[static_cast<size_t>(i)]->enqueueAll(*clique);
          ASSERT_EQ(res, concclSuccess) << what << ": " << concclGetLastError(clique->comms[0]);
        }
        ASSERT_TRUE(clique->sync()) << what;
        for (size_t i = 0; i < sets.size(); ++i) {
          ASSERT_TRUE(sets[i]->check(what + ", buffer set " + std::to_string(i)));
        }
        sets[2].reset();  // freed first, so that the allocator may hand the same addresses out again
        sets[2] = std::make_unique<CollCase>(spec, n, devices);
      }
      EXPECT_GT(exec::graphCacheReplays() - before, 0u) << "the cache was not used";
    }
  }
}

// Two calls per rank in one group (AllReduce on one buffer set, AllGather on another): a group posts, and so
// prepares, every call before it launches the first, so a rank has two prepared calls when its launches begin.
TEST(GraphCache, SeveralCallsInOneGroup) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  const int n = 2;
  const std::vector<int> devices = spreadDevices(n);
  auto clique = makeClique(n, devices, 64);
  ASSERT_NE(clique, nullptr);
  CollCase reduce(specFor(Coll::kAllReduce, 300000, n), n, devices);
  CollCase gather(specFor(Coll::kAllGather, 300000, n), n, devices);
  const size_t before = exec::graphCacheReplays();
  const int iters = iterations();
  for (int iter = 0; iter < iters; ++iter) {
    const std::string what = "group of AllReduce + AllGather, call " + std::to_string(iter);
    reduce.prepare(freshSeed());
    gather.prepare(freshSeed());
    ASSERT_EQ(concclGroupStart(), concclSuccess);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(reduce.call(r, clique->comms[static_cast<size_t>(r)], clique->streams[static_cast<size_t>(r)]),
                concclSuccess);
      ASSERT_EQ(gather.call(r, clique->comms[static_cast<size_t>(r)], clique->streams[static_cast<size_t>(r)]),
                concclSuccess);
    }
    ASSERT_EQ(concclGroupEnd(), concclSuccess) << what << ": " << concclGetLastError(clique->comms[0]);
    ASSERT_TRUE(clique->sync()) << what;
    ASSERT_TRUE(reduce.check(what));
    ASSERT_TRUE(gather.check(what));
  }
  EXPECT_GE(exec::graphCacheReplays() - before, 2u * n * static_cast<size_t>(iters - 1)) << "the cache was not used";
}

// 3 ranks on one GPU, one thread per rank, repeated calls from several threads at once on a shared GPU. Calls that
// use lanes are never replayed there: a replayed graph's branches run on streams the queue claim cannot claim, and this
// test hung at the first replay of a 6 MB AllGather (2026-12-01, fifth session). Single-stream calls are replayed.
// Bounded: a deadlock fails the case and aborts (gpu_thread_per_rank.h).
TEST(GraphCache, ThreadPerRankOnOneGpu) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  const int n = 3;
  const std::vector<int> devices(n, 0);
  auto clique = makeClique(n, devices, 64);
  ASSERT_NE(clique, nullptr);
  auto run = [&](Coll coll, size_t count) {
    CollCase c(specFor(coll, count, n), n, devices);
    for (int iter = 0; iter < 2 * iterations(); ++iter) {
      const uint64_t seed = freshSeed();
      const std::string what = std::string(collKindName(coll)) + " of " + std::to_string(count) + ", call " +
                               std::to_string(iter) + ", seed " + std::to_string(seed);
      c.prepare(seed);
      if (!runThreadPerRank(*clique, c, what) || !c.check(what)) return false;
    }
    return true;
  };
  const std::initializer_list<Coll> colls = {Coll::kAllGather, Coll::kAllReduce, Coll::kReduceScatter,
                                              Coll::kBroadcast};
  const size_t lanesBefore = exec::graphCacheLaneReplays();
  const size_t before = exec::graphCacheReplays();
  for (Coll coll : colls) ASSERT_TRUE(run(coll, isReduction(coll) ? 3000000 : 1500000));  // lanes on some ranks
  for (Coll coll : colls) ASSERT_TRUE(run(coll, 300000));                                  // one stream
  EXPECT_EQ(exec::graphCacheLaneReplays() - lanesBefore, 0u) << "lane programs of ranks sharing a GPU were replayed";
  EXPECT_GT(exec::graphCacheReplays() - before, 0u) << "the cache was not used";
}

// A cached graph that waits for a peer whose stream is stalled (by work queued before the call): the GPU watchdog
// reports it on every rank (graph launches count as launches), the re-opened flags drain rank 0's graph, and once the
// application ends the stall, abort returns promptly.
TEST(GraphCache, WatchdogAndAbort) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();
  constexpr int kN = 2;
  constexpr int kTimeoutMs = 2000;
  setenv("CONCCL_GRAPH_CACHE", "64", 1);
  concclConfig_t config = cudaConfig(CONCCL_CONFIG_UNDEF_INT, /*smallMessageBytes=*/0);
  config.timeoutMs = kTimeoutMs;
  std::vector<concclComm_t> comms(kN, nullptr);
  const std::vector<int> devices = spreadDevices(kN);
  ASSERT_EQ(concclCommInitAll(comms.data(), kN, devices.data(), &config), concclSuccess)
      << concclGetLastError(nullptr);
  unsetenv("CONCCL_GRAPH_CACHE");
  std::vector<cudaStream_t> streams(kN, nullptr);
  for (int r = 0; r < kN; ++r) {
    CUDA_OK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    CUDA_OK(cudaStreamCreateWithFlags(&streams[static_cast<size_t>(r)], cudaStreamNonBlocking));
  }
  CUDA_OK(cudaSetDevice(0));

  CollCase c(specFor(Coll::kAllReduce, 300000, kN), kN, devices);
  auto callAll = [&] {
    EXPECT_EQ(concclGroupStart(), concclSuccess);
    for (int r = 0; r < kN; ++r) {
      EXPECT_EQ(c.call(r, comms[static_cast<size_t>(r)], streams[static_cast<size_t>(r)]), concclSuccess);
    }
    EXPECT_EQ(concclGroupEnd(), concclSuccess) << concclGetLastError(comms[0]);
  };
  for (int warm = 0; warm < 3; ++warm) {  // the shape is captured on its second call
    c.prepare(freshSeed());
    callAll();
    ASSERT_TRUE(syncStreams(streams, comms));
    ASSERT_TRUE(c.check("warm-up call " + std::to_string(warm)));
  }

  CUDA_OK(stallStream(streams[1]));
  const size_t before = exec::graphCacheReplays();
  callAll();
  EXPECT_EQ(exec::graphCacheReplays() - before, static_cast<size_t>(kN)) << "the stalled call was not a replay";

  const std::vector<concclResult_t> async = waitForAsyncErrors(comms, std::chrono::seconds(20));
  EXPECT_EQ(async[0], concclTimeout);
  EXPECT_EQ(async[1], concclTimeout);
  // Rank 0's graph drains (its waits were re-opened) although rank 1 never reached the call.
  const cudaError_t q0 = waitForStream(streams[0], std::chrono::seconds(10));
  EXPECT_EQ(q0, cudaSuccess) << "rank 0's cached graph did not drain after the watchdog fired";
  // The stall is the application's to end; then rank 1's stream finishes and abort is prompt.
  expectStallEndsAndAbortIsPrompt(comms, streams);
}

}  // namespace
}  // namespace conccl::gputest
