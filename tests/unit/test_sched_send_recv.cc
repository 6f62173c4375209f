// Groups of point-to-point operations: rings, pairwise exchanges, self-sends, several ops between the
// same pair (matched in posting order), and mixed sizes including zero.
#include <gtest/gtest.h>

#include <vector>

#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

CollectiveCall p2pCall(int n, concclDataType_t dtype = concclFloat32) {
  CollectiveCall c;
  c.kind = CollKind::kSendRecv;
  c.nranks = n;
  c.dtype = dtype;
  c.p2p.resize(static_cast<size_t>(n));
  return c;
}

void post(CollectiveCall& c, int rank, bool isSend, int peer, size_t count) {
  auto& ops = c.p2p[static_cast<size_t>(rank)];
  ops.push_back(P2POp{isSend, peer, count, static_cast<int>(ops.size())});
}

const std::vector<BuildOptions> kOptions = {BuildOptions{}, tinyOptions(1, 1), tinyOptions(2, 3), tinyOptions(3, 4)};

TEST(SchedSendRecv, Rings) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{1} << 20}) {
      CollectiveCall c = p2pCall(n);
      for (int r = 0; r < n; ++r) {
        post(c, r, true, (r + 1) % n, count);
        post(c, r, false, (r + n - 1) % n, count);
      }
      for (const BuildOptions& o : kOptions) expectValid(c, o, /*pair=*/count == 4099);
    }
  }
}

TEST(SchedSendRecv, PairwiseExchange) {
  for (int n = 2; n <= 8; n += 2) {
    CollectiveCall c = p2pCall(n, concclFloat8e4m3);
    for (int r = 0; r < n; ++r) {
      const int peer = r ^ 1;
      // Receive posted before the send on odd ranks: matching is by order per pair, not by op position.
      if (r % 2) post(c, r, false, peer, 777);
      post(c, r, true, peer, 777);
      if (r % 2 == 0) post(c, r, false, peer, 777);
    }
    for (const BuildOptions& o : kOptions) expectValid(c, o, true);
  }
}

TEST(SchedSendRecv, SelfSend) {
  for (int n : {1, 3}) {
    CollectiveCall c = p2pCall(n, concclInt64);
    for (int r = 0; r < n; ++r) {
      post(c, r, true, r, 1000);
      post(c, r, false, r, 1000);
    }
    for (const BuildOptions& o : kOptions) expectValid(c, o, true);
  }
}

TEST(SchedSendRecv, SeveralOpsBetweenTheSamePair) {
  CollectiveCall c = p2pCall(3, concclFloat16);
  // 0 -> 1 three times with different sizes (one empty), 1 -> 0 twice, 2 -> 2 and 2 -> 0.
  for (size_t count : {size_t{5}, size_t{0}, size_t{300000}}) {
    post(c, 0, true, 1, count);
    post(c, 1, false, 0, count);
  }
  post(c, 1, true, 0, 42);
  post(c, 1, true, 0, 43);
  post(c, 0, false, 1, 42);
  post(c, 0, false, 1, 43);
  post(c, 2, true, 2, 9);
  post(c, 2, false, 2, 9);
  post(c, 2, true, 0, 65536);
  post(c, 0, false, 2, 65536);
  for (const BuildOptions& o : kOptions) expectValid(c, o, true);
}

TEST(SchedSendRecv, BufferIndicesNeedNotFollowPostingOrder) {
  CollectiveCall c = p2pCall(2);
  c.p2p[0] = {P2POp{true, 1, 10, 1}, P2POp{false, 1, 20, 0}};
  c.p2p[1] = {P2POp{false, 0, 10, 0}, P2POp{true, 0, 20, 1}};
  expectValid(c, BuildOptions{}, true);
  EXPECT_EQ(bufferBytes(c, 0), (std::vector<size_t>{80, 40}));
}

TEST(SchedSendRecv, AllToAllAsPointToPoint) {
  for (int n = 2; n <= 8; ++n) {
    CollectiveCall c = p2pCall(n, concclUint8);
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        post(c, r, true, p, static_cast<size_t>(100 * r + p));
        post(c, r, false, p, static_cast<size_t>(100 * p + r));
      }
    }
    expectValid(c, tinyOptions(2, 2), n == 5);
  }
}

TEST(SchedSendRecv, EmptyGroup) {
  CollectiveCall c = p2pCall(4);
  const Schedule s = buildSchedule(c, BuildOptions{});
  EXPECT_TRUE(checkSchedule(c, s).ok);
  for (const RankProgram& p : s.programs) EXPECT_TRUE(p.ops.empty());
}

}  // namespace
}  // namespace conccl::sched::testing
