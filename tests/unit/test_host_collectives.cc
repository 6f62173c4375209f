// End to end on the host backend: every collective through the public API, checked against the plain reference
// on fresh random data, in place and out of place, from one thread (group) and from one thread per rank.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include "common/host_driver.h"

namespace conccl::test {
namespace {

struct Case {
  Coll coll;
  int nranks;
  size_t count;
  concclDataType_t dtype;
  concclRedOp_t op;
  bool inPlace;
  Drive drive;
  concclEngine_t engine = concclEngineAuto;  // copy: own blocks routed through a peer (BuildOptions::ownBlockViaPeer)
};

std::string caseName(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  std::string s = std::string(collKindName(c.coll)) + "_n" + std::to_string(c.nranks) + "_c" + std::to_string(c.count) +
                  "_t" + std::to_string(static_cast<int>(c.dtype));
  if (isReduction(c.coll)) s += "_op" + std::to_string(static_cast<int>(c.op));
  s += c.inPlace ? "_inplace" : "_outplace";
  s += c.drive == Drive::kGroup ? "_group" : "_threads";
  if (c.engine == concclEngineCopy) s += "_copy";
  s += "_" + std::to_string(info.index);
  return s;
}

class HostCollective : public testing::TestWithParam<Case> {};

TEST_P(HostCollective, MatchesReference) {
  const Case c = GetParam();
  const int n = c.nranks;
  const int root = n > 1 ? n - 1 : 0;  // a non-zero root where possible
  const size_t es = esize(c.dtype);
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  config.scratchBytes = 64 << 10;  // small scratch: large counts run the pipelined path with many chunks
  config.timeoutMs = 60000;
  config.engine = c.engine;
  std::vector<concclComm_t> comms(n);
  ASSERT_EQ(concclCommInitAll(comms.data(), n, nullptr, &config), concclSuccess) << concclGetLastError(nullptr);

  std::mt19937_64 rng(1234 + n * 31 + c.count);
  std::vector<Bytes> inputs(n), buffers(n), sendBufs(n);
  std::vector<const void*> sendPtr(n);
  std::vector<void*> recvPtr(n);
  for (int r = 0; r < n; ++r) {
    size_t s = sendElems(c.coll, c.count, n, r, root), v = recvElems(c.coll, c.count, n, r, root);
    inputs[r] = randomData(s, c.dtype, rng);
    if (c.inPlace) {
      InPlaceLayout l = inPlaceLayout(c.coll, c.count, n, r, root);
      buffers[r] = randomData(l.bufferElems, c.dtype, rng);  // garbage where the output goes
      if (s > 0) std::memcpy(buffers[r].data() + l.sendAt * es, inputs[r].data(), s * es);
      sendPtr[r] = s > 0 ? buffers[r].data() + l.sendAt * es : nullptr;
      recvPtr[r] = v > 0 ? buffers[r].data() + l.recvAt * es : nullptr;
    } else {
      sendBufs[r] = inputs[r];
      buffers[r] = randomData(v, c.dtype, rng);
      sendPtr[r] = s > 0 ? sendBufs[r].data() : nullptr;
      recvPtr[r] = v > 0 ? buffers[r].data() : nullptr;
    }
  }
  auto results = forEachRank(n, c.drive, [&](int r) {
    return callCollective(c.coll, sendPtr[r], recvPtr[r], c.count, c.dtype, c.op, root, comms[r], nullptr);
  });
  for (int r = 0; r < n; ++r) ASSERT_EQ(results[r], concclSuccess) << "rank " << r << ": " << concclGetLastError(comms[r]);

  std::vector<Bytes> want = reference(c.coll, inputs, c.count, c.dtype, c.op, root);
  for (int r = 0; r < n; ++r) {
    size_t v = recvElems(c.coll, c.count, n, r, root);
    Bytes got(v * es);
    if (v > 0) std::memcpy(got.data(), recvPtr[r], v * es);
    EXPECT_EQ(countWrong(got, want[r], c.dtype, isReduction(c.coll), n), 0u) << "rank " << r;
  }
  for (auto comm : comms) EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  const Coll colls[] = {Coll::kAllGather, Coll::kReduceScatter, Coll::kAllReduce, Coll::kBroadcast,
                        Coll::kReduce,    Coll::kAllToAll,      Coll::kGather,    Coll::kScatter};
  // Shape sweep: ranks 1..8 (odd too) x counts {0, 1, 7, 4099, 1<<16} x in/out of place, fp32 sum.
  for (Coll coll : colls) {
    for (int n : {1, 2, 3, 4, 5, 8}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}, size_t{1} << 16}) {
        for (bool inPlace : {false, true}) {
          if (inPlace && !hasInPlace(coll)) continue;
          cases.push_back({coll, n, count, concclFloat32, concclSum, inPlace, Drive::kGroup});
        }
      }
    }
    // Every dtype (movement) or dtype x op (reductions) on 3 ranks.
    for (int t = 0; t < concclNumTypes; ++t) {
      auto dtype = static_cast<concclDataType_t>(t);
      if (isReduction(coll)) {
        if (dtype == concclFloat8e4m3 || dtype == concclFloat8e5m2) continue;
        for (int op = 0; op < concclNumOps; ++op) {
          cases.push_back({coll, 3, 4099, dtype, static_cast<concclRedOp_t>(op), false, Drive::kGroup});
        }
      } else {
        cases.push_back({coll, 3, 4099, dtype, concclSum, false, Drive::kGroup});
      }
    }
    // One thread per rank.
    cases.push_back({coll, 4, 4099, concclBfloat16, concclMax, false, Drive::kThreads});
    if (hasInPlace(coll)) cases.push_back({coll, 5, 7, concclInt32, concclSum, true, Drive::kThreads});
    // engine = copy: own blocks through a peer (echo or scratch bounce; 64 KiB of scratch makes many pieces).
    for (int n : {2, 3, 8}) {
      for (size_t count : {size_t{7}, size_t{4099}, size_t{1} << 16}) {
        for (bool inPlace : {false, true}) {
          if (inPlace && !hasInPlace(coll)) continue;
          const Drive drive = count == 4099 ? Drive::kThreads : Drive::kGroup;
          cases.push_back({coll, n, count, concclFloat16, concclMin, inPlace, drive, concclEngineCopy});
        }
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(All, HostCollective, testing::ValuesIn(allCases()), caseName);

}  // namespace
}  // namespace conccl::test
