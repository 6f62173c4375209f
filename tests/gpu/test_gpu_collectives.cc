// Every collective through the public API on the CUDA backend, against a host reference: ranks
// {1,2,3,4,8} on device 0 repeated, counts 0/1/7/4099 and a few large ones, movement and reduction dtypes,
// in place and out of place, each on both paths: the default config (small-message kernel up to 64 KiB) and
// copy engines only (smallMessageBytes = 0). All ranks are driven from one thread inside concclGroupStart/End.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu/gpu_collective_case.h"
#include "gpu/gpu_test_util.h"

namespace conccl::gputest {
namespace {

const std::vector<concclDataType_t> kMoveTypes = {concclFloat32, concclBfloat16, concclFloat16,   concclInt32,
                                                  concclInt8,    concclFloat64,  concclFloat8e4m3};
const std::vector<concclDataType_t> kReduceTypes = {concclFloat32, concclBfloat16, concclFloat16,
                                                    concclInt32,   concclInt8,     concclFloat64};
const std::vector<size_t> kCounts = {0, 1, 7, 4099};

class Collectives : public ::testing::TestWithParam<std::tuple<Coll, int, Path>> {};

TEST_P(Collectives, MatchesHostReference) {
  SKIP_WITHOUT_GPU();
  const auto [coll, n, path] = GetParam();
  Clique* clique = sharedClique(n, path);
  ASSERT_NE(clique, nullptr);
  const auto& types = isReduction(coll) ? kReduceTypes : kMoveTypes;
  uint64_t seed = 1;
  int failures = 0;
  for (concclDataType_t dtype : types) {
    for (size_t ci = 0; ci < kCounts.size(); ++ci) {
      for (bool inPlace : {false, true}) {
        if (inPlace && !hasInPlace(coll)) continue;
        std::vector<concclRedOp_t> ops = {concclSum};
        // Every op on a few types at the odd size; sum everywhere.
        if (isReduction(coll) && kCounts[ci] == 4099 &&
            (dtype == concclFloat32 || dtype == concclBfloat16 || dtype == concclInt32 || dtype == concclInt8)) {
          ops = {concclSum, concclProd, concclMax, concclMin, concclAvg};
        }
        for (concclRedOp_t op : ops) {
          CaseSpec spec;
          spec.coll = coll;
          spec.count = kCounts[ci];
          spec.dtype = dtype;
          spec.op = op;
          spec.root = static_cast<int>((ci + 1) % static_cast<size_t>(n));
          spec.inPlace = inPlace;
          CollCase c(spec, n);
          if (!c.runEager(*clique, seed++)) ++failures;
          ASSERT_LT(failures, 5) << "stopping after 5 failing cases";
          ASSERT_FALSE(clique->broken);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCollectives, Collectives,
                         ::testing::Combine(::testing::Values(Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce,
                                                              Coll::kBroadcast, Coll::kReduce, Coll::kAllToAll,
                                                              Coll::kAllToAllv, Coll::kGather, Coll::kScatter,
                                                              Coll::kSendRecv),
                                            ::testing::Values(1, 2, 3, 4, 8),
                                            ::testing::Values(Path::kDefault, Path::kCopyEngines, Path::kNoSm)),
                         [](const auto& param_info) {
                           return std::string(collKindName(std::get<0>(param_info.param))) + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "ranks_" +
                                  pathName(std::get<2>(param_info.param));
                         });

// Large messages: 64 MiB and 256 MiB in total over all ranks (the pipelined reductions split these into many
// chunks through the bounded scratch).
class LargeCollectives : public ::testing::TestWithParam<std::tuple<Coll, int>> {};

TEST_P(LargeCollectives, MatchesHostReference) {
  SKIP_WITHOUT_GPU();
  const auto [coll, n] = GetParam();
  Clique* clique = sharedClique(n);
  ASSERT_NE(clique, nullptr);
  for (size_t totalBytes : {size_t{64} << 20, size_t{256} << 20}) {
    CaseSpec spec;
    spec.coll = coll;
    spec.dtype = coll == Coll::kAllReduce ? concclBfloat16 : concclFloat32;
    const size_t es = concclTypeSize(spec.dtype);
    // The biggest per-rank buffer of these collectives holds n * count elements (AllGather recv,
    // ReduceScatter/AllToAll send) or count (AllReduce, Broadcast): size it so all ranks together hold total.
    const bool perPeer = coll == Coll::kAllGather || coll == Coll::kReduceScatter || coll == Coll::kAllToAll;
    spec.count = totalBytes / es / static_cast<size_t>(n) / (perPeer ? static_cast<size_t>(n) : 1) + 3;
    spec.root = n - 1;
    spec.inPlace = coll != Coll::kAllToAll;
    CollCase c(spec, n);
    EXPECT_TRUE(c.runEager(*clique, totalBytes + static_cast<uint64_t>(n)));
    ASSERT_FALSE(clique->broken);
  }
}

INSTANTIATE_TEST_SUITE_P(Large, LargeCollectives,
                         ::testing::Combine(::testing::Values(Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce,
                                                              Coll::kBroadcast, Coll::kAllToAll),
                                            ::testing::Values(2, 8)),
                         [](const auto& param_info) {
                           return std::string(collKindName(std::get<0>(param_info.param))) + "_" +
                                  std::to_string(std::get<1>(param_info.param)) + "ranks";
                         });

// Ranks on distinct GPUs, where the machine has them: the copy-engine path proper.
TEST(MultiGpu, AllCollectivesAcrossDevices) {
  SKIP_WITHOUT_GPUS(2);
  const int devices = deviceCount();
  std::vector<int> devlist;
  for (int d = 0; d < devices && d < 8; ++d) devlist.push_back(d);
  uint64_t seed = 99;
  for (Path path : {Path::kDefault, Path::kCopyEngines, Path::kNoSm}) {
  SCOPED_TRACE(pathName(path));
  auto clique = Clique::create(static_cast<int>(devlist.size()), CONCCL_CONFIG_UNDEF_INT, devlist, smallBytesFor(path),
                               engineFor(path));
  ASSERT_NE(clique, nullptr);
  for (Coll coll : {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce,
                    Coll::kAllToAll, Coll::kAllToAllv, Coll::kGather, Coll::kScatter, Coll::kSendRecv}) {
    for (size_t count : {size_t{7}, size_t{4099}, size_t{1} << 20}) {
      CaseSpec spec;
      spec.coll = coll;
      spec.count = count;
      spec.dtype = concclFloat32;
      spec.root = 1;
      CollCase c(spec, clique->size(), devlist);  // rank r's buffers on device r
      EXPECT_TRUE(c.runEager(*clique, seed++));
      ASSERT_FALSE(clique->broken);
    }
  }
  }
}

}  // namespace
}  // namespace conccl::gputest
