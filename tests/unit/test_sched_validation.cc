// Call validation (buildSchedule throws conccl::Error(concclInvalidArgument) with a clear message) and the
// call-level helpers of schedule.h: names, buffer sizes, the flag layout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

// Expects buildSchedule to throw concclInvalidArgument with `fragment` in the message.
void expectInvalid(const CollectiveCall& call, const std::string& fragment, const BuildOptions& o = BuildOptions{}) {
  try {
    buildSchedule(call, o);
    ADD_FAILURE() << "no error for " << callStr(call, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), concclInvalidArgument) << e.what();
    EXPECT_NE(e.message().find(fragment), std::string::npos) << e.what();
  }
}

TEST(SchedValidation, RankCountAndInPlace) {
  expectInvalid(makeCall(CollKind::kAllGather, 0, 4), "nranks");
  CollectiveCall c = makeCall(CollKind::kAllReduce, 3, 4);
  c.inPlace.resize(2);
  expectInvalid(c, "inPlace");
  expectInvalid(makeCall(CollKind::kAllToAll, 2, 4, concclFloat32, concclSum, 0, true), "in place");
}

TEST(SchedValidation, Roots) {
  for (CollKind k : {CollKind::kBroadcast, CollKind::kReduce, CollKind::kGather, CollKind::kScatter}) {
    expectInvalid(makeCall(k, 3, 4, concclFloat32, concclSum, 3), "root");
    expectInvalid(makeCall(k, 3, 4, concclFloat32, concclSum, -1), "root");
  }
}

TEST(SchedValidation, TypesAndOps) {
  for (CollKind k : {CollKind::kReduceScatter, CollKind::kAllReduce, CollKind::kReduce}) {
    expectInvalid(makeCall(k, 2, 4, concclFloat8e4m3), "fp8");
    expectInvalid(makeCall(k, 2, 4, concclFloat8e5m2), "fp8");
    expectInvalid(makeCall(k, 2, 4, concclFloat32, static_cast<concclRedOp_t>(6)), "op");
  }
  expectInvalid(makeCall(CollKind::kAllGather, 2, 4, static_cast<concclDataType_t>(13)), "datatype");
  // fp8 data movement is fine.
  EXPECT_NO_THROW(buildSchedule(makeCall(CollKind::kAllGather, 2, 4, concclFloat8e4m3), BuildOptions{}));
}

TEST(SchedValidation, CountOverflow) {
  expectInvalid(makeCall(CollKind::kAllGather, 4, SIZE_MAX / 8, concclFloat64), "overflow");
}

TEST(SchedValidation, Options) {
  BuildOptions o;
  o.lanes = 0;
  expectInvalid(makeCall(CollKind::kAllGather, 2, 4), "lanes", o);
  o = BuildOptions{};
  o.pipelineDepth = 0;
  expectInvalid(makeCall(CollKind::kAllGather, 2, 4), "pipelineDepth", o);
  o = BuildOptions{};
  o.scratchBudget = 100;  // cannot hold one aligned chunk per peer
  expectInvalid(makeCall(CollKind::kAllReduce, 4, 1000), "scratch budget", o);
}

TEST(SchedValidation, AllToAllv) {
  CollectiveCall c = makeAllToAllv(3, 1);
  c.recvCounts[1][2] += 1;
  expectInvalid(c, "expects");
  c = makeAllToAllv(3, 1);
  c.sendDispls.pop_back();
  expectInvalid(c, "sendDispls");
  c = makeAllToAllv(3, 1);
  c.recvDispls[0].resize(2);
  expectInvalid(c, "recvDispls[0]");
  // Two peers' data overlapping in the receive buffer.
  c = makeAllToAllv(2, 1);
  c.sendCounts = {{5, 5}, {5, 5}};
  c.recvCounts = c.sendCounts;
  c.sendDispls = {{0, 5}, {0, 5}};
  c.recvDispls = {{0, 3}, {0, 5}};
  expectInvalid(c, "overlap");
}

CollectiveCall p2p(int n) {
  CollectiveCall c;
  c.kind = CollKind::kSendRecv;
  c.nranks = n;
  c.p2p.resize(static_cast<size_t>(n));
  return c;
}

TEST(SchedValidation, SendRecvMatching) {
  CollectiveCall c = p2p(2);
  c.p2p[0] = {P2POp{true, 1, 10, 0}};
  expectInvalid(c, "matching receive");
  c.p2p[1] = {P2POp{false, 0, 11, 0}};
  expectInvalid(c, "elements but the receive has");
  c.p2p[1] = {P2POp{false, 0, 10, 0}, P2POp{false, 0, 10, 1}};
  expectInvalid(c, "matching receive");
  c = p2p(2);
  c.p2p[1] = {P2POp{false, 0, 10, 0}};
  expectInvalid(c, "without a matching send");
  c = p2p(2);
  c.p2p[0] = {P2POp{true, 2, 10, 0}};
  expectInvalid(c, "peer");
  c = p2p(2);
  c.p2p[0] = {P2POp{true, 0, 10, 0}, P2POp{false, 0, 10, 0}};
  expectInvalid(c, "buffer index");
  c = p2p(2);
  c.p2p.pop_back();
  expectInvalid(c, "p2p");
  c = p2p(2);
  c.inPlace = {true, false};
  expectInvalid(c, "in place");
}

TEST(SchedNames, CollKindNames) {
  EXPECT_STREQ(collKindName(CollKind::kAllGather), "AllGather");
  EXPECT_STREQ(collKindName(CollKind::kAllToAllv), "AllToAllv");
  EXPECT_STREQ(collKindName(CollKind::kSendRecv), "SendRecv");
}

TEST(SchedBufferBytes, NcclConventions) {
  const size_t es = 4, c = 10;
  using V = std::vector<size_t>;
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kAllGather, 3, c), 1), (V{c * es, 3 * c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kReduceScatter, 3, c), 1), (V{3 * c * es, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kAllReduce, 3, c), 1), (V{c * es, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kBroadcast, 3, c, concclFloat32, concclSum, 2), 2), (V{c * es, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kBroadcast, 3, c, concclFloat32, concclSum, 2), 0), (V{0, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kReduce, 3, c, concclFloat32, concclSum, 1), 1), (V{c * es, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kReduce, 3, c, concclFloat32, concclSum, 1), 0), (V{c * es, 0}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kAllToAll, 3, c), 0), (V{3 * c * es, 3 * c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kGather, 3, c, concclFloat32, concclSum, 0), 0), (V{c * es, 3 * c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kGather, 3, c, concclFloat32, concclSum, 0), 2), (V{c * es, 0}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kScatter, 3, c, concclFloat32, concclSum, 0), 0), (V{3 * c * es, c * es}));
  EXPECT_EQ(bufferBytes(makeCall(CollKind::kScatter, 3, c, concclFloat32, concclSum, 0), 1), (V{0, c * es}));
  CollectiveCall v = makeCall(CollKind::kAllToAllv, 2, 0, concclFloat64);
  v.sendCounts = {{1, 2}, {3, 0}};
  v.sendDispls = {{4, 0}, {0, 100}};  // rank 1's zero count at displacement 100 does not count
  v.recvCounts = {{1, 3}, {2, 0}};
  v.recvDispls = {{0, 1}, {7, 0}};
  EXPECT_EQ(bufferBytes(v, 0), (V{5 * 8, 4 * 8}));
  EXPECT_EQ(bufferBytes(v, 1), (V{3 * 8, 9 * 8}));
}

}  // namespace
}  // namespace conccl::sched::testing
