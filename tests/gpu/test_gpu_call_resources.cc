// concclCallResources against what the executor really enqueues, and the greatest-priority kernels' results.
//
// What a call launched is observable in a captured graph: its kernel nodes, their grids and their priority
// attribute (conccl's kernels are its only kernel nodes; copies are memcpy nodes, flags memory-op nodes). Each case
// is captured per rank, the graph's kernel nodes are compared with the query's answer, then the graph is replayed on
// fresh random inputs and checked against the host reference; the same case also runs eagerly.
#include <conccl/conccl.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

std::vector<int> rankDevices(int n) {
  std::vector<int> d(static_cast<size_t>(n), 0);
  if (deviceCount() >= n) {
    for (int r = 0; r < n; ++r) d[static_cast<size_t>(r)] = r;  // one GPU per rank: copy engines between GPUs
  }
  return d;
}

std::unique_ptr<Clique> makeClique(int n, int highPriority, int smBudget) {
  auto c = std::make_unique<Clique>();
  const std::vector<int> devices = rankDevices(n);
  concclConfig_t config = cudaConfig();
  config.highPriority = highPriority;
  config.smBudget = smBudget;
  c->comms.resize(static_cast<size_t>(n));
  if (concclCommInitAll(c->comms.data(), n, devices.data(), &config) != concclSuccess) {
    ADD_FAILURE() << "concclCommInitAll: " << concclGetLastError(nullptr);
    return nullptr;
  }
  for (int r = 0; r < n; ++r) {
    cudaSetDevice(devices[static_cast<size_t>(r)]);
    cudaStream_t s = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);  // default (least) priority
    c->streams.push_back(s);
  }
  cudaSetDevice(0);
  return c;
}

concclCollective_t publicColl(Coll c) {
  switch (c) {
    case Coll::kAllGather: return concclCollAllGather;
    case Coll::kReduceScatter: return concclCollReduceScatter;
    case Coll::kAllReduce: return concclCollAllReduce;
    case Coll::kBroadcast: return concclCollBroadcast;
    case Coll::kReduce: return concclCollReduce;
    case Coll::kAllToAll: return concclCollAllToAll;
    case Coll::kGather: return concclCollGather;
    case Coll::kScatter: return concclCollScatter;
    default: return concclNumColls;
  }
}

struct KernelNodes {
  int count = 0;
  unsigned maxGrid = 0;
  std::vector<int> priorities;
};

KernelNodes kernelNodesOf(cudaGraph_t graph) {
  KernelNodes k;
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(graph, nullptr, &n), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) {
    EXPECT_EQ(cudaGraphGetNodes(graph, nodes.data(), &n), cudaSuccess);
  }
  for (cudaGraphNode_t node : nodes) {
    // The runtime answers an error for node types it has no enum value for (the copy-engine path's batched stream
    // memory operations, a driver-API node type): those are not kernels, and every kernel node's type is known.
    cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams params{};
    EXPECT_EQ(cudaGraphKernelNodeGetParams(node, &params), cudaSuccess);
    cudaLaunchAttributeValue value{};
    EXPECT_EQ(cudaGraphKernelNodeGetAttribute(node, cudaLaunchAttributePriority, &value), cudaSuccess);
    ++k.count;
    k.maxGrid = std::max(k.maxGrid, params.gridDim.x * params.gridDim.y * params.gridDim.z);
    k.priorities.push_back(value.priority);
  }
  return k;
}

uint64_t freshSeed() { return std::random_device{}(); }

// One case: the query on every rank, a captured call compared with it, replays and an eager run on fresh data.
void checkCase(Clique& clique, const CaseSpec& spec, int highPriority, int smBudget) {
  const int n = clique.size();
  const uint64_t seed = freshSeed();
  const std::string what = spec.describe(n) + " highPriority " + std::to_string(highPriority) + " smBudget " +
                           std::to_string(smBudget) + " seed " + std::to_string(seed);
  SCOPED_TRACE(what);
  std::vector<concclCallResources_t> res(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    CONCCL_OK(concclCallResources(clique.comms[static_cast<size_t>(r)], publicColl(spec.coll), spec.count, spec.dtype,
                                  spec.root, &res[static_cast<size_t>(r)]));
    EXPECT_LE(res[static_cast<size_t>(r)].sms, smBudget);
    EXPECT_EQ(res[static_cast<size_t>(r)].highPriority, highPriority);
  }
  CollCase c(spec, n, rankDevices(n));
  c.prepare(seed);
  std::vector<cudaGraph_t> graphs(static_cast<size_t>(n), nullptr);
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamBeginCapture(clique.streams[static_cast<size_t>(r)], cudaStreamCaptureModeThreadLocal));
  }
  const concclResult_t rc = c.enqueueAll(clique);
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaStreamEndCapture(clique.streams[static_cast<size_t>(r)], &graphs[static_cast<size_t>(r)]));
  }
  ASSERT_EQ(rc, concclSuccess) << concclGetLastError(nullptr);
  int greatest = 0, least = 0;
  CUDA_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  for (int r = 0; r < n; ++r) {
    const concclCallResources_t& q = res[static_cast<size_t>(r)];
    const KernelNodes k = kernelNodesOf(graphs[static_cast<size_t>(r)]);
    SCOPED_TRACE("rank " + std::to_string(r) + ": query path " + std::to_string(q.path) + " ctas " +
                 std::to_string(q.ctas) + "; graph " + std::to_string(k.count) + " kernels, largest grid " +
                 std::to_string(k.maxGrid));
    switch (q.path) {
      case concclPathCopyEngines:
        EXPECT_EQ(k.count, 0);
        EXPECT_EQ(q.ctas, 0);
        break;
      case concclPathSmallKernel:
        EXPECT_EQ(k.count, 1);
        EXPECT_EQ(k.maxGrid, 1u);
        EXPECT_EQ(q.ctas, 1);
        break;
      case concclPathReduceKernel:
        EXPECT_GE(k.count, 1);
        // The kernel launches fewer CTAs than asked only when a piece is too small to give each one work; the large
        // cases below are not.
        EXPECT_EQ(static_cast<int>(k.maxGrid), q.ctas);
        break;
      default:
        ADD_FAILURE() << "unexpected path " << q.path;
    }
    EXPECT_LE(static_cast<int>(k.maxGrid), smBudget);
    for (int p : k.priorities) EXPECT_EQ(p, highPriority ? greatest : 0) << "kernel node priority";
  }
  for (int r = 0; r < n; ++r) {
    CUDA_OK(cudaGraphInstantiate(&execs[static_cast<size_t>(r)], graphs[static_cast<size_t>(r)],
                                 cudaGraphInstantiateFlagUseNodePriority));
  }
  for (int replay = 0; replay < 3; ++replay) {
    c.prepare(seed + 1 + static_cast<uint64_t>(replay));
    for (int r = 0; r < n; ++r) {
      CUDA_OK(cudaGraphLaunch(execs[static_cast<size_t>(r)], clique.streams[static_cast<size_t>(r)]));
    }
    ASSERT_TRUE(clique.sync());
    ASSERT_TRUE(c.check("graph replay " + std::to_string(replay)));
  }
  for (int r = 0; r < n; ++r) {
    cudaGraphExecDestroy(execs[static_cast<size_t>(r)]);
    cudaGraphDestroy(graphs[static_cast<size_t>(r)]);
  }
  EXPECT_TRUE(c.runEager(clique, seed + 100));
}

class CallResourcesGpu : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CallResourcesGpu, QueryMatchesTheLaunchedKernelsAndResultsAreExact) {
  SKIP_WITHOUT_GPU();
  cliqueCache().clear();  // only this test's streams on the GPU
  const auto [highPriority, smBudget] = GetParam();
  for (int n : {2, 3}) {
    auto clique = makeClique(n, highPriority, smBudget);
    ASSERT_NE(clique, nullptr);
    // Sizes: the small kernel (1 KiB), the copy-engine / reduction path well above it (4M elements, pipelined).
    for (size_t count : {size_t{256}, size_t{4} << 20}) {
      for (Coll coll : {Coll::kAllReduce, Coll::kReduceScatter, Coll::kReduce, Coll::kAllGather, Coll::kBroadcast}) {
        CaseSpec spec;
        spec.coll = coll;
        spec.count = count;
        spec.dtype = isReduction(coll) ? concclBfloat16 : concclFloat32;
        spec.root = n - 1;
        checkCase(*clique, spec, highPriority, smBudget);
        if (HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PriorityAndBudget, CallResourcesGpu,
                         ::testing::Values(std::make_tuple(1, 8), std::make_tuple(0, 8), std::make_tuple(1, 3),
                                           std::make_tuple(1, 1)),
                         [](const auto& param_info) {
                           return std::string(std::get<0>(param_info.param) ? "high" : "stream") + "Priority_budget" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

}  // namespace
}  // namespace conccl::gputest
