// The NCCL shim's pure layer on the CPU: argument and result mapping, the environment switches, the routing
// decisions, and the loader of the real NCCL (against a fake NCCL built in this tree).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

TEST(NcclShimEnv, ScratchLimit) {
  EXPECT_EQ(parseShimEnv(lookupIn({})).scratchMaxBytes, kDefaultScratchMaxBytes);
  EXPECT_EQ(parseShimEnv(lookupIn({{"CONCCL_NCCL_SCRATCH_MAX_BYTES", "8G"}})).scratchMaxBytes, 8ull << 30);
  EXPECT_EQ(parseByteCount("512k"), 512u << 10);
  EXPECT_EQ(parseByteCount(" 3M "), 3u << 20);
  EXPECT_EQ(parseByteCount("1000"), 1000u);
  for (const char* bad : {"0", "", "G", "-5", "1.5G", "12T", "99999999999999999999"}) {
    EXPECT_FALSE(parseByteCount(bad).has_value()) << bad;
  }
  ShimEnv env = parseShimEnv(lookupIn({{"CONCCL_NCCL_SCRATCH_MAX_BYTES", "lots"}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_NE(env.error.find("CONCCL_NCCL_SCRATCH_MAX_BYTES"), std::string::npos);
}

TEST(NcclShimEnv, HierarchicalSwitch) {
  EXPECT_TRUE(parseShimEnv(lookupIn({})).hierarchical);  // on by default
  EXPECT_FALSE(parseShimEnv(lookupIn({{"CONCCL_NCCL_HIERARCHICAL", "0"}})).hierarchical);
  EXPECT_TRUE(parseShimEnv(lookupIn({{"CONCCL_NCCL_HIERARCHICAL", " 1 "}})).hierarchical);
  ShimEnv env = parseShimEnv(lookupIn({{"CONCCL_NCCL_HIERARCHICAL", "yes"}}));
  EXPECT_FALSE(env.enabled);
  EXPECT_NE(env.error.find("CONCCL_NCCL_HIERARCHICAL"), std::string::npos);
  EXPECT_EQ(parseShimEnv(lookupIn({})).hierChunks, 1);
  EXPECT_EQ(parseShimEnv(lookupIn({{"CONCCL_NCCL_HIER_CHUNKS", "8"}})).hierChunks, 8);
  for (const char* bad : {"0", "65", "", "x", "-1", "100"}) {
    ShimEnv e = parseShimEnv(lookupIn({{"CONCCL_NCCL_HIER_CHUNKS", bad}}));
    EXPECT_FALSE(e.enabled) << bad;
    EXPECT_NE(e.error.find("CONCCL_NCCL_HIER_CHUNKS"), std::string::npos) << bad;
  }
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

// A device for the pool: memory from the heap, fences whose completion the test decides, capture ties the test
// releases (as CUDA does when a graph is destroyed).
struct FakeScratch {
  struct Fence {
    bool done = true;
    const void* stream = nullptr;
  };
  std::vector<void*> live;
  int allocs = 0, frees = 0, waits = 0;
  bool failRecord = false, failAlloc = false;
  std::vector<std::unique_ptr<Fence>> fences;
  std::vector<std::shared_ptr<std::atomic<bool>>> captures;
  // Every fence recorded on `stream` completes.
  void complete(const void* stream) {
    for (auto& f : fences) {
      if (f->stream == stream) f->done = true;
    }
  }
  void destroyGraphs() {
    for (auto& c : captures) c->store(true);
    captures.clear();
  }
};

class FakeScratchDevice final : public ScratchDevice {
 public:
  explicit FakeScratchDevice(FakeScratch* f) : f_(f) {}
  void* alloc(size_t bytes) override {
    if (f_->failAlloc) return nullptr;
    ++f_->allocs;
    void* p = std::malloc(bytes);
    f_->live.push_back(p);
    return p;
  }
  void free(void* block) override {
    ++f_->frees;
    std::erase(f_->live, block);
    std::free(block);
  }
  void* createFence() override {
    f_->fences.push_back(std::make_unique<FakeScratch::Fence>());
    return f_->fences.back().get();
  }
  void destroyFence(void*) override {}
  bool recordFence(void* fence, const void* stream) override {
    if (f_->failRecord) return false;
    auto* x = static_cast<FakeScratch::Fence*>(fence);
    x->done = false;
    x->stream = stream;
    return true;
  }
  bool fenceDone(void* fence) override { return static_cast<FakeScratch::Fence*>(fence)->done; }
  bool waitFence(const void*, void*) override {
    ++f_->waits;
    return true;
  }
  bool attachToCapture(const void*, std::shared_ptr<std::atomic<bool>> released) override {
    f_->captures.push_back(std::move(released));
    return true;
  }

 private:
  FakeScratch* f_;
};

constexpr size_t kBlock = ScratchPool::kMinBlock;

TEST(NcclShimScratch, BlockSizesStepByAnEighthOfAPowerOfTwo) {
  EXPECT_EQ(ScratchPool::blockSize(0), kBlock);
  EXPECT_EQ(ScratchPool::blockSize(kBlock), kBlock);
  EXPECT_EQ(ScratchPool::blockSize(kBlock + 1), kBlock + kBlock / 8);
  for (size_t n : {size_t{100000}, size_t{3} << 20, (size_t{1} << 30) + 5, size_t{123456789}}) {
    const size_t b = ScratchPool::blockSize(n);
    EXPECT_GE(b, n);
    EXPECT_LE(b - n, n / 8) << n;  // at most 12.5% slack
    EXPECT_EQ(ScratchPool::blockSize(b), b) << n;
  }
}

TEST(NcclShimScratch, ReusedOnItsStreamAtOnceAndOnAnotherOnlyWhenItsFenceCompleted) {
  FakeScratch f;
  int a = 0, b = 0;
  {
    ScratchPool pool(std::make_unique<FakeScratchDevice>(&f), 16 * kBlock);
    ScratchGrant g1 = pool.acquire(&a, 1000, false, 0);
    ASSERT_NE(g1.ptr, nullptr) << g1.error;
    // Held until released: a second call gets other memory even on the same stream.
    ScratchGrant g2 = pool.acquire(&a, 1000, false, 0);
    EXPECT_NE(g2.ptr, g1.ptr);
    pool.release(g1.block);
    pool.release(g2.block);
    // Same stream: stream order protects the block, reused although its fence is pending.
    ScratchGrant g3 = pool.acquire(&a, 1000, false, 0);
    EXPECT_TRUE(g3.ptr == g1.ptr || g3.ptr == g2.ptr);
    pool.release(g3.block);
    // Another stream while stream a's work may still read both blocks: fresh memory, no wait.
    ScratchGrant g4 = pool.acquire(&b, 1000, false, 0);
    EXPECT_NE(g4.ptr, g1.ptr);
    EXPECT_NE(g4.ptr, g2.ptr);
    EXPECT_EQ(f.waits, 0);
    pool.release(g4.block);
    // Once stream a's fences completed, stream b may take a's blocks: no new allocation.
    f.complete(&a);
    const int allocs = f.allocs;
    ScratchGrant g5 = pool.acquire(&b, 1000, false, 0);
    ScratchGrant g6 = pool.acquire(&b, 1000, false, 0);
    EXPECT_EQ(f.allocs, allocs);
    EXPECT_NE(g5.ptr, g6.ptr);
    // The smallest fitting block is taken, a larger request gets a larger block.
    ScratchGrant big = pool.acquire(&b, 5 * kBlock, false, 0);
    ASSERT_NE(big.ptr, nullptr);
    EXPECT_EQ(pool.bytesAllocated(), 3 * kBlock + ScratchPool::blockSize(5 * kBlock));
    EXPECT_EQ(f.frees, 0);  // nothing is freed in the steady state
  }
  EXPECT_EQ(f.frees, f.allocs);  // everything once, at destruction
  EXPECT_TRUE(f.live.empty());
}

TEST(NcclShimScratch, CallsOfOneGroupNeverShareABlockUntilTheGroupEnds) {
  FakeScratch f;
  int a = 0;
  ScratchPool pool(std::make_unique<FakeScratchDevice>(&f), 16 * kBlock);
  ScratchGrant g1 = pool.acquire(&a, 100, false, 7);
  ScratchGrant g2 = pool.acquire(&a, 100, false, 7);
  ScratchGrant g3 = pool.acquire(&a, 100, false, 7);
  pool.release(g1.block);  // inside a group the shim does not release per call; a stray release is harmless
  EXPECT_NE(g2.ptr, g3.ptr);
  EXPECT_EQ(pool.heldBlocks(), 2u);
  pool.releaseGroup(7);
  EXPECT_EQ(pool.heldBlocks(), 0u);
  // The next group on the same stream reuses all three.
  const int allocs = f.allocs;
  for (int i = 0; i < 3; ++i) ASSERT_NE(pool.acquire(&a, 100, false, 8).ptr, nullptr);
  EXPECT_EQ(f.allocs, allocs);
  pool.releaseGroup(8);
  EXPECT_EQ(pool.blocks(), 3u);
}

TEST(NcclShimScratch, TheLimitHoldsAndAboveItTheCallFailsSayingWhy) {
  FakeScratch f;
  int a = 0, b = 0;
  ScratchPool pool(std::make_unique<FakeScratchDevice>(&f), 4 * kBlock);
  // A request larger than the limit fails at once, naming the variable.
  ScratchGrant huge = pool.acquire(&a, 4 * kBlock + 1, false, 0);
  EXPECT_EQ(huge.ptr, nullptr);
  EXPECT_NE(huge.error.find("CONCCL_NCCL_SCRATCH_MAX_BYTES"), std::string::npos) << huge.error;
  // Four held blocks fill it; a fifth call fails (never an overlap with memory in use).
  std::vector<ScratchGrant> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(&a, 100, false, 1));
  for (auto& g : held) ASSERT_NE(g.ptr, nullptr) << g.error;
  ScratchGrant over = pool.acquire(&a, 100, false, 1);
  EXPECT_EQ(over.ptr, nullptr);
  EXPECT_NE(over.error.find("4 held by calls not yet launched"), std::string::npos) << over.error;
  EXPECT_LE(pool.bytesAllocated(), pool.maxBytes());
  // Released on stream a with work pending: stream b, at the limit, waits on a fence (stream-ordered) instead.
  pool.releaseGroup(1);
  ScratchGrant waited = pool.acquire(&b, 100, false, 0);
  ASSERT_NE(waited.ptr, nullptr) << waited.error;
  EXPECT_EQ(f.waits, 1);
  pool.release(waited.block);
  // A larger request at the limit frees idle completed blocks too small for it, then fits.
  f.complete(&a);
  f.complete(&b);
  ScratchGrant larger = pool.acquire(&a, 2 * kBlock, false, 0);
  ASSERT_NE(larger.ptr, nullptr) << larger.error;
  EXPECT_EQ(f.frees, 2);
  EXPECT_LE(pool.bytesAllocated(), pool.maxBytes());
  // An allocation failure is reported as such.
  pool.release(larger.block);
  f.complete(&a);
  f.failAlloc = true;
  ScratchGrant none = pool.acquire(&a, 3 * kBlock, false, 0);
  EXPECT_EQ(none.ptr, nullptr);
  EXPECT_NE(none.error.find("failed"), std::string::npos) << none.error;
}

TEST(NcclShimScratch, CapturedCallsOwnTheirBlockUntilTheGraphIsGone) {
  FakeScratch f;
  int a = 0;
  ScratchPool pool(std::make_unique<FakeScratchDevice>(&f), 4 * kBlock);
  ScratchGrant e = pool.acquire(&a, 100, false, 0);
  pool.release(e.block);  // its fence is pending
  // A capture never takes a block whose eager work may still run, nor one an eager call may take later.
  ScratchGrant c1 = pool.acquire(&a, 100, true, 0);
  ASSERT_NE(c1.ptr, nullptr);
  EXPECT_NE(c1.ptr, e.ptr);
  ScratchGrant c2 = pool.acquire(&a, 100, true, 0);
  EXPECT_NE(c2.ptr, c1.ptr);
  EXPECT_EQ(pool.graphBlocks(), 2u);
  EXPECT_EQ(f.captures.size(), 2u);
  // Eager calls never get a graph's block (release of one is a no-op).
  pool.release(c1.block);
  ScratchGrant e2 = pool.acquire(&a, 100, false, 0);
  EXPECT_EQ(e2.ptr, e.ptr);
  pool.release(e2.block);
  // With eager work completed, a capture may take that idle block.
  f.complete(&a);
  ScratchGrant c3 = pool.acquire(&a, 100, true, 0);
  EXPECT_EQ(c3.ptr, e.ptr);
  // Graphs hold every block: the limit is reached.
  ScratchGrant c4 = pool.acquire(&a, 100, true, 0);
  ScratchGrant c5 = pool.acquire(&a, 100, true, 0);
  ASSERT_NE(c4.ptr, nullptr);
  EXPECT_EQ(c5.ptr, nullptr);
  EXPECT_NE(c5.error.find("4 kept for captured CUDA graphs"), std::string::npos) << c5.error;
  // CUDA released the graphs: their blocks come back, without a new allocation.
  f.destroyGraphs();
  const int allocs = f.allocs;
  ScratchGrant again = pool.acquire(&a, 100, true, 0);
  ASSERT_NE(again.ptr, nullptr) << again.error;
  EXPECT_EQ(f.allocs, allocs);
  EXPECT_EQ(pool.graphBlocks(), 1u);
}

TEST(NcclShimScratch, ABlockWhoseFenceFailedIsNeverReusedAndForgetFreesNothing) {
  FakeScratch f;
  int a = 0;
  {
    ScratchPool pool(std::make_unique<FakeScratchDevice>(&f), 4 * kBlock);
    ScratchGrant g = pool.acquire(&a, 100, false, 0);
    f.failRecord = true;
    pool.release(g.block);
    f.failRecord = false;
    ScratchGrant h = pool.acquire(&a, 100, false, 0);
    EXPECT_NE(h.ptr, g.ptr);
    pool.forget();  // after an abort: memory in flight is dropped, not freed
    EXPECT_EQ(pool.bytesAllocated(), 0u);
  }
  EXPECT_EQ(f.frees, 0);
  for (void* p : f.live) std::free(p);
}

// NCCL reads a HostImmediate scalar as ncclTypeSize(datatype) bytes at `scalar` (enqueue.cc), whatever the caller
// meant: PyTorch passes a float for bf16 (ProcessGroupNCCL's unpackPreMulSum<float, ncclBfloat16>), and NCCL then
// multiplies by the bf16 made of that float's two low bytes. The shim reads the same two bytes.
TEST(NcclShimPreMul, ScalarIsReadAsNcclReadsIt) {
  const uint16_t bf16Half = 0x3f00;  // 0.5 in bf16
  PreMulOp p = makePreMulOp(kBfloat16, &bf16Half, false);
  EXPECT_EQ(p.scalarBits, 0x3f00u);
  EXPECT_FALSE(p.onDevice);
  const float third = 1.0f / 3.0f;  // 0x3eaaaaab: NCCL's bf16 scalar is 0xaaab (about -3.0e-13)
  EXPECT_EQ(makePreMulOp(kBfloat16, &third, false).scalarBits, 0xaaabu);
  const float quarter = 0.25f;  // 0x3e800000: a bf16 scalar of 0
  EXPECT_EQ(makePreMulOp(kBfloat16, &quarter, false).scalarBits, 0u);
  EXPECT_EQ(makePreMulOp(kFloat16, &third, false).scalarBits, 0xaaabu);
  EXPECT_EQ(makePreMulOp(kFloat32, &third, false).scalarBits, 0x3eaaaaabu);
  const double d = 0.1;
  uint64_t dbits = 0;
  std::memcpy(&dbits, &d, sizeof(d));
  EXPECT_EQ(makePreMulOp(kFloat64, &d, false).scalarBits, dbits);
  const int8_t m = -3;
  EXPECT_EQ(makePreMulOp(kInt8, &m, false).scalarBits, 0xfdu);
  // A device scalar is the pointer, read when the collective runs.
  PreMulOp dev = makePreMulOp(kBfloat16, &bf16Half, true);
  EXPECT_TRUE(dev.onDevice);
  EXPECT_EQ(dev.devScalar, &bf16Half);
  EXPECT_EQ(dev.scalarBits, 0u);
  // The bf16 scalar 0xaaab multiplies as the value it is, not as 1/3.
  uint16_t x = 0x3f80, y = 0;  // 1.0
  ASSERT_TRUE(preMultiplyOnHost(&y, &x, 1, kBfloat16, 0xaaab));
  EXPECT_EQ(y, 0xaaab);
}

// The fp16 / bf16 conversions are round to nearest even, every value checked: each finite value converts back to
// itself, and the midpoint of two neighbours goes to the one with the even significand (and just off it, to the
// nearer one). The product rounding of preMultiplyOnHost is built on them.
TEST(NcclShimPreMul, HalfAndBfloat16RoundToNearestEvenEverywhere) {
  struct Format {
    double (*toDouble)(uint16_t);
    uint16_t (*fromDouble)(double);
    uint16_t inf;
  };
  const Format formats[] = {{&halfToDouble, &doubleToHalf, 0x7c00}, {&bfloat16ToDouble, &doubleToBfloat16, 0x7f80}};
  for (const Format& fm : formats) {
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const auto bits = static_cast<uint16_t>(b);
      const double v = fm.toDouble(bits);
      if (std::isnan(v)) {
        EXPECT_EQ(fm.fromDouble(v), 0x7fff);
        continue;
      }
      ASSERT_EQ(fm.fromDouble(v), bits) << std::hex << b;
      if ((bits & 0x7fff) >= fm.inf - 1) continue;  // no finite neighbour above (or it is infinity)
      const auto next = static_cast<uint16_t>(bits + 1);
      const double mid = (v + fm.toDouble(next)) / 2;  // exact in double
      const uint16_t even = (bits & 1) == 0 ? bits : next;
      ASSERT_EQ(fm.fromDouble(mid), even) << std::hex << b;
      const double off = std::fabs(fm.toDouble(next) - v) / 1024;
      const bool negative = (bits & 0x8000) != 0;
      // Just above the midpoint in magnitude goes to the larger magnitude (next), just below to bits.
      ASSERT_EQ(fm.fromDouble(negative ? mid - off : mid + off), next) << std::hex << b;
      ASSERT_EQ(fm.fromDouble(negative ? mid + off : mid - off), bits) << std::hex << b;
    }
  }
  EXPECT_EQ(doubleToHalf(65520.0), 0x7c00);   // half's overflow threshold rounds to infinity
  EXPECT_EQ(doubleToHalf(65519.99), 0x7bff);  // just below it, to the largest finite value
  EXPECT_EQ(doubleToBfloat16(-0.0), 0x8000);
  EXPECT_EQ(doubleToHalf(1e-10), 0x0000);     // below half the smallest subnormal
}

TEST(NcclShimPreMul, HostHalfAndBfloat16ProductIsTheCorrectlyRoundedProduct) {
  // bf16 (normal products): the fp32 product is exact, then the usual bit rounding to bf16 is a second, independent
  // computation of the same value.
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  std::vector<uint16_t> xs(4096), ys(4096);
  const uint16_t s = 0x3eab;  // about 0.334
  for (auto& x : xs) x = static_cast<uint16_t>((next() >> 8) % 0x3000 + 0x2800);  // moderate magnitudes, both signs
  for (size_t i = 0; i < xs.size(); i += 2) xs[i] |= 0x8000;
  ASSERT_TRUE(preMultiplyOnHost(ys.data(), xs.data(), xs.size(), kBfloat16, s));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float p = static_cast<float>(bfloat16ToDouble(xs[i]) * bfloat16ToDouble(s));
    uint32_t u = 0;
    std::memcpy(&u, &p, sizeof(u));
    const auto want = static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    ASSERT_EQ(ys[i], want) << i;
  }
  // fp16: 1.5 * (1/3 in fp16 = 0x3555 = 0.333251953125) = 0.4998779296875 exactly, halfway between 0x37ff and
  // 0x3800 (0.5): the tie goes to the even significand, 0x3800.
  uint16_t h = 0x3e00, out = 0;
  ASSERT_TRUE(preMultiplyOnHost(&out, &h, 1, kFloat16, 0x3555));
  EXPECT_EQ(out, 0x3800);
  // Overflow to infinity, and underflow into fp16's subnormals: 2^-14 * 2^-5 = 2^-19 = subnormal 0x0020.
  uint16_t big = 0x7bff, tiny = 0x0400;
  ASSERT_TRUE(preMultiplyOnHost(&out, &big, 1, kFloat16, 0x4000));  // 65504 * 2
  EXPECT_EQ(out, 0x7c00);
  ASSERT_TRUE(preMultiplyOnHost(&out, &tiny, 1, kFloat16, 0x2800));  // 2^-14 * 2^-5
  EXPECT_EQ(out, 0x0020);
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
  EXPECT_FALSE(preMultiplyOnHost(y, x, 3, kFloat8e4m3, bits));
  EXPECT_EQ(ncclTypeBytes(kBfloat16), 2u);
  EXPECT_EQ(ncclTypeBytes(kNumTypes), 0u);
}
