// Thread-per-rank calls that launch without waiting for the peers' threads (LocalClique::post, Config::threadStaged):
// every collective with a staged form, on the small-message kernel and on the copy engines, in and out of place,
// checked against the reference on fresh random data; and a rank's call returns while its peer has not called yet.
//
// With a GPU per rank (2+ GPUs) the test turns the path on with threadStaged 1 (CONCCL_THREAD_STAGED=1, off by default
// until measured across GPUs). On one GPU the ranks share it, which needs threadStaged 2 (tests only, through
// ConfigTestHook) and one grouped call first, so that the ranks' streams are claimed together (docs/cuda-executor.md,
// Hazard 4); such calls never use the graph cache.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/config.h"
#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"
#include "gpu/gpu_thread_per_rank.h"

namespace conccl::gputest {
namespace {

// Ranks and their devices: a GPU each where there are enough, else all on GPU 0.
std::vector<int> rankDevices(int n) {
  std::vector<int> devices(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) devices[static_cast<size_t>(r)] = r;
  }
  return devices;
}

// Turns the path on for the communicators made while it lives: threadStaged 1 (the user's setting) with a GPU per
// rank, else 2 (ranks sharing a GPU).
ConfigTestHook threadStagedOn(int n) {
  const int value = deviceCount() >= n ? 1 : 2;
  return ConfigTestHook([value](Config& config) { config.threadStaged = value; });
}

// One grouped call on every rank's stream (the queue claim of a shared GPU), checked like any other.
bool warmUp(Clique& clique, const std::vector<int>& devices) {
  CaseSpec spec;
  spec.coll = Coll::kAllReduce;
  spec.count = 1024;
  CollCase c(spec, clique.size(), devices);
  return c.runEager(clique, freshSeed());
}

TEST(ThreadStaged, EveryCollectiveBothPathsThreadPerRank) {
  SKIP_WITHOUT_GPU();
  const Coll colls[] = {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,      Coll::kGather,    Coll::kScatter};
  for (int n : {2, 3}) {
    const std::vector<int> devices = rankDevices(n);
    const ConfigTestHook hook = threadStagedOn(n);
    auto clique = Clique::create(n, CONCCL_CONFIG_UNDEF_INT, devices);
    ASSERT_TRUE(clique);
    ASSERT_TRUE(warmUp(*clique, devices));
    // 4099 floats: the small-message kernel; 300,000 (1.2 MB): the copy engines, still under the 8 MiB staging limit.
    for (Coll coll : colls) {
      for (size_t count : {size_t{4099}, size_t{300000}}) {
        for (bool inPlace : {false, true}) {
          if (coll == Coll::kAllToAll && inPlace) continue;
          for (concclDataType_t dtype : {concclFloat32, concclBfloat16}) {
            CaseSpec spec;
            spec.coll = coll;
            spec.count = count;
            spec.dtype = dtype;
            spec.inPlace = inPlace;
            spec.root = n - 1;
            CollCase c(spec, n, devices);
            // Three calls in a row on the same buffers: the second and later replay a cached graph.
            for (int round = 0; round < 3; ++round) {
              const uint64_t seed = freshSeed();
              c.prepare(seed);
              const std::string what = spec.describe(n) + " round " + std::to_string(round) + " seed " +
                                       std::to_string(seed);
              ASSERT_TRUE(runThreadPerRank(*clique, c, what)) << what;
              ASSERT_TRUE(c.check(what)) << what;
            }
          }
        }
      }
    }
  }
}

TEST(ThreadStaged, CallReturnsBeforeItsPeerCalls) {
  SKIP_WITHOUT_GPU();
  const std::vector<int> devices = rankDevices(2);
  const ConfigTestHook hook = threadStagedOn(2);
  auto clique = Clique::create(2, CONCCL_CONFIG_UNDEF_INT, devices);
  ASSERT_TRUE(clique);
  ASSERT_TRUE(warmUp(*clique, devices));
  CaseSpec spec;
  spec.coll = Coll::kAllReduce;
  spec.count = 1 << 18;  // 1 MiB of floats: the copy engines
  CollCase c(spec, 2, devices);
  c.prepare(freshSeed());
  constexpr auto kPeerLate = std::chrono::milliseconds(300);
  std::chrono::microseconds rank0Took{0};
  concclResult_t results[2] = {concclInternalError, concclInternalError};
  std::thread late([&] {
    std::this_thread::sleep_for(kPeerLate);
    results[1] = c.call(1, clique->comms[1], clique->streams[1]);
  });
  const auto start = std::chrono::steady_clock::now();
  results[0] = c.call(0, clique->comms[0], clique->streams[0]);
  rank0Took = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start);
  late.join();
  ASSERT_EQ(results[0], concclSuccess) << concclGetLastError(clique->comms[0]);
  ASSERT_EQ(results[1], concclSuccess) << concclGetLastError(clique->comms[1]);
  EXPECT_LT(rank0Took, std::chrono::milliseconds(100))
      << "rank 0's call waited for rank 1 (" << rank0Took.count() << " us): the staged call did not launch early";
  ASSERT_TRUE(clique->sync());
  EXPECT_TRUE(c.check("peer 300 ms late"));
  std::fprintf(stderr, "rank 0's call returned after %lld us with its peer %lld ms late\n",
               static_cast<long long>(rank0Took.count()), static_cast<long long>(kPeerLate.count()));
}

}  // namespace
}  // namespace conccl::gputest
