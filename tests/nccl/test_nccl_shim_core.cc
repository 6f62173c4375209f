// The NCCL shim's pure layer on the CPU: argument and result mapping, the environment switches, the routing
// decisions, and the loader of the real NCCL (against a fake NCCL built in this tree).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <vector>
#include <string>

#include "nccl/nccl_abi.h"
#include "nccl/premul_ops.h"
#include "nccl/real_nccl.h"
#include "nccl/routing.h"
#include "nccl/shim_env.h"
#include "nccl/split_plan.h"
#include "nccl/type_map.h"

using namespace conccl::nccl;

namespace {

EnvLookup lookupIn(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST(NcclShimTypeMap, EveryNcclTypeMapsToTheConcclTypeOfTheSameLayout) {
  // The enums are ordered differently (ncclFloat32 = 7, ncclBfloat16 = 9); the mapping must follow names.
  const std::pair<int, concclDataType_t> expected[] = {
      {kInt8, concclInt8},         {kUint8, concclUint8},           {kInt32, concclInt32},
      {kUint32, concclUint32},     {kInt64, concclInt64},           {kUint64, concclUint64},
      {kFloat16, concclFloat16},   {kFloat32, concclFloat32},       {kFloat64, concclFloat64},
      {kBfloat16, concclBfloat16}, {kFloat8e4m3, concclFloat8e4m3}, {kFloat8e5m2, concclFloat8e5m2}};
  for (auto [nccl, conccl] : expected) {
    auto t = toConcclType(nccl);
    ASSERT_TRUE(t.has_value()) << nccl;
    EXPECT_EQ(*t, conccl) << ncclTypeName(nccl);
  }
  EXPECT_FALSE(toConcclType(kNumTypes).has_value());
  EXPECT_FALSE(toConcclType(-1).has_value());
}

TEST(NcclShimTypeMap, BuiltInOpsMapAndCreatedOpsDoNot) {
  EXPECT_EQ(toConcclOp(kSum), concclSum);
  EXPECT_EQ(toConcclOp(kProd), concclProd);
  EXPECT_EQ(toConcclOp(kMax), concclMax);
  EXPECT_EQ(toConcclOp(kMin), concclMin);
  EXPECT_EQ(toConcclOp(kAvg), concclAvg);
  EXPECT_FALSE(toConcclOp(kNumOps).has_value());  // first ncclRedOpCreatePreMulSum op
  EXPECT_FALSE(toConcclOp(kNumOps + 7).has_value());
  EXPECT_FALSE(toConcclOp(-1).has_value());
}

TEST(NcclShimTypeMap, Fp8IsMovedButNotReduced) {
  EXPECT_TRUE(concclCanReduce(kBfloat16, kSum));
  EXPECT_TRUE(concclCanReduce(kInt64, kAvg));
  EXPECT_FALSE(concclCanReduce(kFloat8e4m3, kSum));
  EXPECT_FALSE(concclCanReduce(kFloat8e5m2, kMax));
  EXPECT_FALSE(concclCanReduce(kFloat32, kNumOps));
}

TEST(NcclShimTypeMap, ResultCodes) {
  EXPECT_EQ(toNcclResult(concclSuccess), kSuccess);
  EXPECT_EQ(toNcclResult(concclUnhandledCudaError), kUnhandledCudaError);
  EXPECT_EQ(toNcclResult(concclSystemError), kSystemError);
  EXPECT_EQ(toNcclResult(concclInternalError), kInternalError);
  EXPECT_EQ(toNcclResult(concclInvalidArgument), kInvalidArgument);
  EXPECT_EQ(toNcclResult(concclInvalidUsage), kInvalidUsage);
  EXPECT_EQ(toNcclResult(concclTimeout), kRemoteError);
  EXPECT_EQ(toNcclResult(concclNotSupported), kInvalidUsage);
  EXPECT_EQ(toNcclResult(static_cast<concclResult_t>(99)), kInternalError);
  EXPECT_STREQ(ncclResultString(kSuccess), "no error");
  EXPECT_STREQ(ncclResultString(12345), "unknown result code");
}

TEST(NcclShimEnv, DefaultsRunEverythingOnConccl) {
  ShimEnv env = parseShimEnv(lookupIn({}));
  EXPECT_TRUE(env.enabled);
  EXPECT_EQ(env.collMask, kAllColls);
  EXPECT_TRUE(env.realLib.empty());
  EXPECT_TRUE(env.error.empty());
}

TEST(NcclShimEnv, SwitchOffAndRealLib) {
  ShimEnv env = parseShimEnv(lookupIn({{"CONCCL_NCCL_SHIM", "0"}, {"CONCCL_NCCL_REAL_LIB", "/x/libnccl.so.2"}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_TRUE(env.error.empty());
  EXPECT_EQ(env.realLib, "/x/libnccl.so.2");
  EXPECT_TRUE(parseShimEnv(lookupIn({{"CONCCL_NCCL_SHIM", "1"}})).enabled);
}

TEST(NcclShimEnv, BadValuesTurnTheShimOffAndSaySo) {
  ShimEnv env = parseShimEnv(lookupIn({{"CONCCL_NCCL_SHIM", "yes"}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_NE(env.error.find("CONCCL_NCCL_SHIM"), std::string::npos);
  env = parseShimEnv(lookupIn({{"CONCCL_NCCL_COLLS", "all_reduce,allgather"}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_NE(env.error.find("allgather"), std::string::npos);
  env = parseShimEnv(lookupIn({{"CONCCL_NCCL_COLLS", " , "}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_FALSE(env.error.empty());
}

TEST(NcclShimEnv, CollListParsing) {
  std::string error;
  auto m = parseCollList(" all_reduce , all_gather,send_recv ", &error);
  ASSERT_TRUE(m.has_value()) << error;
  EXPECT_EQ(*m, collBit(Coll::kAllReduce) | collBit(Coll::kAllGather) | collBit(Coll::kSendRecv));
  EXPECT_EQ(parseCollList("all", &error), kAllColls);
  EXPECT_EQ(parseCollList("reduce_scatter,all", &error), kAllColls);
  for (int i = 0; i < static_cast<int>(Coll::kCount); ++i) {
    auto c = static_cast<Coll>(i);
    EXPECT_EQ(parseCollList(collName(c), &error), collBit(c)) << collName(c);
  }
  EXPECT_FALSE(parseCollList("All_Reduce", &error).has_value());
}

TEST(NcclShimRouting, LaunchScopeFromLaunchers) {
  std::string why;
  EXPECT_EQ(launchScopeFromEnv(lookupIn({}), &why), LaunchScope::kSingleNode);
  EXPECT_EQ(launchScopeFromEnv(lookupIn({{"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2"}}), &why),
            LaunchScope::kSingleNode);
  EXPECT_EQ(launchScopeFromEnv(lookupIn({{"WORLD_SIZE", "16"}, {"LOCAL_WORLD_SIZE", "8"}}), &why),
            LaunchScope::kMultiNode);
  EXPECT_NE(why.find("WORLD_SIZE=16"), std::string::npos);
  EXPECT_EQ(launchScopeFromEnv(lookupIn({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}), &why),
            LaunchScope::kMultiNode);
  EXPECT_EQ(launchScopeFromEnv(lookupIn({{"SLURM_NNODES", "2"}}), &why), LaunchScope::kMultiNode);
  EXPECT_EQ(launchScopeFromEnv(lookupIn({{"SLURM_NNODES", "1"}}), &why), LaunchScope::kSingleNode);
}

TEST(NcclShimRouting, UniqueIdDecision) {
  ShimEnv on;
  ShimEnv off;
  off.enabled = false;
  EXPECT_EQ(decideUniqueId(on, LaunchScope::kSingleNode, true).path, Path::kConccl);
  EXPECT_EQ(decideUniqueId(on, LaunchScope::kSingleNode, false).path, Path::kConccl);
  EXPECT_EQ(decideUniqueId(on, LaunchScope::kMultiNode, true).path, Path::kNccl);
  EXPECT_EQ(decideUniqueId(on, LaunchScope::kMultiNode, false).path, Path::kFail);
  EXPECT_EQ(decideUniqueId(off, LaunchScope::kSingleNode, true).path, Path::kNccl);
  EXPECT_EQ(decideUniqueId(off, LaunchScope::kSingleNode, false).path, Path::kFail);
}

TEST(NcclShimRouting, IdTagRoundTrip) {
  char id[kUniqueIdBytes] = {};
  id[0] = 7;
  EXPECT_FALSE(untagConcclId(id, kUniqueIdBytes));  // an NCCL-style id: zero tail, no mark
  ASSERT_TRUE(tagConcclId(id, kUniqueIdBytes));
  EXPECT_TRUE(untagConcclId(id, kUniqueIdBytes));
  for (int i = kUniqueIdBytes - 8; i < kUniqueIdBytes; ++i) EXPECT_EQ(id[i], 0);  // conccl's id again
  EXPECT_EQ(id[0], 7);
  id[kUniqueIdBytes - 1] = 1;  // an id that uses its tail cannot carry the mark
  EXPECT_FALSE(tagConcclId(id, kUniqueIdBytes));
}

TEST(NcclShimRouting, CommunicatorDecisions) {
  ShimEnv on;
  ShimEnv off;
  off.enabled = false;
  // A conccl id is followed by every rank, whatever its own switch says.
  EXPECT_EQ(decideInitRank(on, true, false).path, Path::kConccl);
  EXPECT_EQ(decideInitRank(off, true, true).path, Path::kConccl);
  EXPECT_EQ(decideInitRank(on, false, true).path, Path::kNccl);
  EXPECT_EQ(decideInitRank(on, false, false).path, Path::kFail);
  EXPECT_EQ(decideInitAll(on, false).path, Path::kConccl);
  EXPECT_EQ(decideInitAll(off, true).path, Path::kNccl);
  EXPECT_EQ(decideInitAll(off, false).path, Path::kFail);
  EXPECT_EQ(decideSplit(Path::kNccl).path, Path::kNccl);
  EXPECT_EQ(decideSplit(Path::kConccl).path, Path::kConccl);  // split by the shim (shim_split.cc)
  EXPECT_EQ(decideSplit(Path::kFail).path, Path::kFail);
}

TEST(NcclShimRouting, CallsOnConcclCommunicators) {
  ShimEnv env;
  EXPECT_EQ(routeCall(env, Path::kConccl, Coll::kAllReduce, kBfloat16, kSum).path, Path::kConccl);
  EXPECT_EQ(routeCall(env, Path::kConccl, Coll::kAllGather, kFloat8e4m3, -1).path, Path::kConccl);
  EXPECT_EQ(routeCall(env, Path::kConccl, Coll::kSendRecv, kUint8, -1).path, Path::kConccl);
  // What conccl cannot run exactly fails with a reason (no NCCL twin to forward to in this version).
  Decision d = routeCall(env, Path::kConccl, Coll::kAllReduce, kFloat32, kNumOps);
  EXPECT_EQ(d.path, Path::kFail);
  EXPECT_NE(d.reason.find("PreMulSum"), std::string::npos);
  d = routeCall(env, Path::kConccl, Coll::kReduceScatter, kFloat8e5m2, kSum);
  EXPECT_EQ(d.path, Path::kFail);
  EXPECT_NE(d.reason.find("ncclFloat8e5m2"), std::string::npos);
  EXPECT_EQ(routeCall(env, Path::kConccl, Coll::kBroadcast, kNumTypes, -1).path, Path::kFail);
  env.collMask = collBit(Coll::kAllReduce);
  EXPECT_EQ(routeCall(env, Path::kConccl, Coll::kAllReduce, kFloat32, kSum).path, Path::kConccl);
  d = routeCall(env, Path::kConccl, Coll::kAllGather, kFloat32, -1);
  EXPECT_EQ(d.path, Path::kFail);
  EXPECT_NE(d.reason.find("all_gather"), std::string::npos);
}

TEST(NcclShimRouting, CallsOnForwardedCommunicatorsAlwaysGoToNccl) {
  ShimEnv env;
  env.collMask = 0;
  EXPECT_EQ(routeCall(env, Path::kNccl, Coll::kAllReduce, kFloat8e4m3, kNumOps + 3).path, Path::kNccl);
  EXPECT_EQ(routeCall(env, Path::kNccl, Coll::kAllToAll, kFloat32, -1).path, Path::kNccl);
}

TEST(NcclShimRealNccl, Candidates) {
  EXPECT_EQ(realNcclCandidates("/opt/nccl/libnccl.so.2", "/x"), std::vector<std::string>{"/opt/nccl/libnccl.so.2"});
  EXPECT_EQ(realNcclCandidates("", "/x"), (std::vector<std::string>{"/x/libnccl.so.2", "libnccl.so.2"}));
  EXPECT_EQ(realNcclCandidates("", ""), std::vector<std::string>{"libnccl.so.2"});
}

TEST(NcclShimRealNccl, LoadsTheFakeAndForwardsToIt) {
  RealNccl real({"/nonexistent/libnccl.so.2", FAKE_NCCL_PATH}, nullptr);
  ASSERT_TRUE(real.available()) << real.error();
  EXPECT_EQ(real.path(), FAKE_NCCL_PATH);
  auto getVersion = reinterpret_cast<int (*)(int*)>(real.symbol("ncclGetVersion"));
  ASSERT_NE(getVersion, nullptr);
  int v = 0;
  EXPECT_EQ(getVersion(&v), 0);
  EXPECT_EQ(v, 99999);
  auto allReduce =
      reinterpret_cast<int (*)(const void*, void*, size_t, int, int, void*, void*)>(real.symbol("ncclAllReduce"));
  ASSERT_NE(allReduce, nullptr);
  int a = 0, b = 0;
  EXPECT_EQ(allReduce(&a, &b, 42, kBfloat16, kMax, &a, &b), 0);
  EXPECT_EQ(real.symbol("ncclAllReduce"), reinterpret_cast<void*>(allReduce));  // cached
  EXPECT_EQ(real.symbol("ncclNoSuchFunction"), nullptr);
}

TEST(NcclShimRealNccl, RefusesItselfAndMissingLibraries) {
  RealNccl probe({FAKE_NCCL_PATH}, nullptr);
  ASSERT_TRUE(probe.available());
  // The same library seen as "the shim itself" (its ncclGetVersion is the caller's own) is skipped.
  RealNccl self({FAKE_NCCL_PATH}, probe.symbol("ncclGetVersion"));
  EXPECT_FALSE(self.available());
  EXPECT_NE(self.error().find("itself"), std::string::npos);
  RealNccl none({"/nonexistent/libnccl.so.2"}, nullptr);
  EXPECT_FALSE(none.available());
  EXPECT_EQ(none.symbol("ncclGetVersion"), nullptr);
  EXPECT_NE(none.error().find("/nonexistent/libnccl.so.2"), std::string::npos);
}

TEST(NcclShimSplit, RanksOfOneColorOrderedByKeyThenParentRank) {
  // colors {0, 1, 0, NOCOLOR, 0}, keys {5, 0, 1, 0, 5}: color 0 holds parents 2 (key 1), then 0 and 4 (key 5, in
  // parent order); color 1 holds parent 1 alone; parent 3 gets no communicator.
  const std::vector<SplitRequest> all = {{0, 5}, {1, 0}, {0, 1}, {kSplitNoColor, 0}, {0, 5}};
  SplitPlacement p0 = placeInSplit(all, 0);
  ASSERT_TRUE(p0.error.empty()) << p0.error;
  EXPECT_TRUE(p0.member);
  EXPECT_EQ(p0.parents, (std::vector<int>{2, 0, 4}));
  EXPECT_EQ(p0.newRank, 1);
  EXPECT_EQ(placeInSplit(all, 2).newRank, 0);
  EXPECT_EQ(placeInSplit(all, 4).newRank, 2);
  SplitPlacement p1 = placeInSplit(all, 1);
  EXPECT_EQ(p1.parents, (std::vector<int>{1}));
  EXPECT_EQ(p1.newRank, 0);
  SplitPlacement p3 = placeInSplit(all, 3);
  EXPECT_TRUE(p3.error.empty());
  EXPECT_FALSE(p3.member);
}

TEST(NcclShimSplit, ABadColorAnywhereFailsEveryRank) {
  const std::vector<SplitRequest> all = {{0, 0}, {-2, 0}, {0, 1}};
  for (int r = 0; r < 3; ++r) {
    SplitPlacement p = placeInSplit(all, r);
    EXPECT_NE(p.error.find("parent rank 1 passed color -2"), std::string::npos) << p.error;
    EXPECT_FALSE(p.member);
  }
  EXPECT_FALSE(placeInSplit(all, 3).error.empty());
}

TEST(NcclShimPreMul, OpsAreNumberedAfterTheBuiltInOnesAndReused) {
  PreMulOpTable t;
  PreMulOp a;
  a.ncclType = kFloat32;
  int op0 = t.create(a);
  int op1 = t.create(a);
  EXPECT_EQ(op0, kNumOps);
  EXPECT_EQ(op1, kNumOps + 1);
  EXPECT_FALSE(t.find(kSum).has_value());
  EXPECT_TRUE(t.destroy(op0));
  EXPECT_FALSE(t.destroy(op0));
  EXPECT_FALSE(t.find(op0).has_value());
  EXPECT_EQ(t.create(a), op0);
  EXPECT_EQ(t.live(), 2u);
}

TEST(NcclShimPreMul, ScratchRegionsNeverOverlapWhileTheyMayBeInUse) {
  std::vector<std::pair<char*, size_t>> blocks;
  static char pool[64 << 20];
  size_t next = 0;
  int freed = 0;
  {
    ScratchArenas s(
        [&](size_t n) -> void* {
          if (next + n > sizeof(pool)) return nullptr;
          char* b = pool + next;
          next += n;
          blocks.push_back({b, n});
          return b;
        },
        [&](void*) { ++freed; });
    int streamA = 0, streamB = 0;
    // Outside groups, calls on one stream reuse the region (stream order protects it).
    void* a1 = s.acquire(&streamA, 1000, 0, false);
    void* a2 = s.acquire(&streamA, 1000, 0, false);
    EXPECT_EQ(a1, a2);
    // Another stream may run at the same time: other memory.
    void* b1 = s.acquire(&streamB, 1000, 0, false);
    EXPECT_NE(b1, a1);
    // Inside one group every call gets its own region; the next group starts over.
    void* g1 = s.acquire(&streamA, 1000, 7, false);
    void* g2 = s.acquire(&streamA, 1000, 7, false);
    EXPECT_EQ(static_cast<char*>(g2) - static_cast<char*>(g1), 1024);
    EXPECT_EQ(s.acquire(&streamA, 1000, 8, false), g1);
    // Growing keeps the old block (calls already enqueued may read it): a new block, nothing freed.
    const size_t blocksBefore = s.blocks();
    void* big = s.acquire(&streamA, 3 << 20, 0, false);
    EXPECT_EQ(s.blocks(), blocksBefore + 1);
    EXPECT_EQ(freed, 0);
    EXPECT_NE(big, a1);
    // A captured call gets memory of its own, never handed out again.
    void* c1 = s.acquire(&streamA, 100, 0, true);
    void* c2 = s.acquire(&streamA, 100, 0, true);
    EXPECT_NE(c1, c2);
    EXPECT_NE(c1, big);
    EXPECT_EQ(s.acquire(&streamA, 100, 0, false), big);
    // An allocation failure is reported, not papered over.
    EXPECT_EQ(s.acquire(&streamB, sizeof(pool), 0, false), nullptr);
  }
  EXPECT_EQ(freed, static_cast<int>(blocks.size()));  // everything freed once, at destruction
}

TEST(NcclShimPreMul, HostPreMultiplyRoundsLikeTheTypeAndWrapsIntegers) {
  float x[3] = {1.0f, 3.0f, 0.1f}, y[3];
  float s = 1.0f / 3.0f;
  uint64_t bits = 0;
  std::memcpy(&bits, &s, sizeof(s));
  ASSERT_TRUE(preMultiplyOnHost(y, x, 3, kFloat32, bits));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y[i], x[i] * s);  // one fp32 rounding per element
  int8_t i8[2] = {100, -100}, o8[2];
  int8_t three = 3;
  bits = 0;
  std::memcpy(&bits, &three, 1);
  ASSERT_TRUE(preMultiplyOnHost(o8, i8, 2, kInt8, bits));
  EXPECT_EQ(o8[0], static_cast<int8_t>(44));   // 300 mod 256
  EXPECT_EQ(o8[1], static_cast<int8_t>(-44));
  EXPECT_FALSE(preMultiplyOnHost(y, x, 3, kBfloat16, bits));
  EXPECT_EQ(ncclTypeBytes(kBfloat16), 2u);
  EXPECT_EQ(ncclTypeBytes(kNumTypes), 0u);
}
