// CUDA graph capture of every collective: each rank's stream is captured into its own graph (the way a
// program with one stream per GPU captures), and the graphs are replayed 100 times with fresh inputs copied
// in before each replay. Flags carry constants, never sequence numbers, so every replay must be correct.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

constexpr int kReplays = 100;

// Both paths (small-message kernel by default, copy engines only) at every size.
class GraphCapture : public ::testing::TestWithParam<std::tuple<Coll, int, Path>> {};

TEST_P(GraphCapture, ReplaysWithFreshInputs) {
  SKIP_WITHOUT_GPU();
  const auto [coll, n, path] = GetParam();
  Clique* clique = sharedClique(n, path);
  ASSERT_NE(clique, nullptr);
  for (size_t count : {size_t{7}, size_t{4099}, size_t{300000}}) {
    CaseSpec spec;
    spec.coll = coll;
    spec.count = count;
    spec.dtype = isReduction(coll) ? concclBfloat16 : concclFloat32;
    spec.root = n - 1;
    spec.inPlace = hasInPlace(coll) && count == 4099;
    CollCase c(spec, n);
    c.prepare(1);

    std::vector<cudaGraph_t> graphs(static_cast<size_t>(n), nullptr);
    std::vector<cudaGraphExec_t> execs(static_cast<size_t>(n), nullptr);
    for (int r = 0; r < n; ++r) {
      // Global mode, PyTorch's: an unsafe CUDA call from any of conccl's threads meanwhile invalidates the capture.
      CUDA_OK(cudaStreamBeginCapture(clique->streams[static_cast<size_t>(r)], cudaStreamCaptureModeGlobal));
    }
    concclResult_t res = c.enqueueAll(*clique);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaStreamEndCapture(clique->streams[static_cast<size_t>(r)], &graphs[static_cast<size_t>(r)]));
    }
    ASSERT_EQ(res, concclSuccess) << spec.describe(n) << ": " << concclGetLastError(nullptr);
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaGraphInstantiate(&execs[static_cast<size_t>(r)], graphs[static_cast<size_t>(r)], 0));
    }
    for (int replay = 0; replay < kReplays; ++replay) {
      c.prepare(static_cast<uint64_t>(1000 + replay));  // fresh inputs and fresh poison, synchronously
      for (int r = 0; r < n; ++r) {
        CUDA_OK(cudaGraphLaunch(execs[static_cast<size_t>(r)], clique->streams[static_cast<size_t>(r)]));
      }
      ASSERT_TRUE(clique->sync()) << spec.describe(n) << " replay " << replay;
      ASSERT_TRUE(c.check("graph replay " + std::to_string(replay)));
    }
    for (int r = 0; r < n; ++r) {
      cudaGraphExecDestroy(execs[static_cast<size_t>(r)]);
      cudaGraphDestroy(graphs[static_cast<size_t>(r)]);
    }
    // Eager calls still work after the graphs (no flag left set by a replay).
    EXPECT_TRUE(c.runEager(*clique, 5));
  }
}

INSTANTIATE_TEST_SUITE_P(AllCollectives, GraphCapture,
                         ::testing::Combine(::testing::Values(Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce,
                                                              Coll::kBroadcast, Coll::kReduce, Coll::kAllToAll,
                                                              Coll::kAllToAllv, Coll::kGather, Coll::kScatter,
                                                              Coll::kSendRecv),
                                            ::testing::Values(2, 4),
                                            ::testing::Values(Path::kDefault, Path::kCopyEngines, Path::kNoSm)),
                         [](const auto& param_info) {
                           return std::string(collKindName(std::get<0>(param_info.param))) + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "ranks_" +
                                  pathName(std::get<2>(param_info.param));
                         });

}  // namespace
}  // namespace conccl::gputest
