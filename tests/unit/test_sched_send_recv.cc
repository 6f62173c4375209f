// Groups of point-to-point operations: rings, pairwise exchanges, self-sends, several ops between the
// same pair (matched in posting order), and mixed sizes including zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <variant>
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

// Receives whose buffers the senders cannot map (P2POp::viaScratch): the pair goes through the receiver's scratch,
// its sender never touches the receiver's call buffers, and the other pairs stay direct.
TEST(SchedSendRecv, ViaScratchPairs) {
  for (int n = 2; n <= 6; ++n) {
    for (unsigned pattern = 1; pattern < (1u << n); pattern += 3) {  // which ranks receive via scratch
      CollectiveCall c = p2pCall(n, concclFloat32);
      for (int r = 0; r < n; ++r) {
        for (int p = 0; p < n; ++p) {
          post(c, r, true, p, static_cast<size_t>(700 * r + 13 * p + 1));
          post(c, r, false, p, static_cast<size_t>(700 * p + 13 * r + 1));
          c.p2p[static_cast<size_t>(r)].back().viaScratch = (pattern >> r) & 1u;
        }
      }
      for (const BuildOptions& o : kOptions) {
        expectValid(c, o, n == 3);
        const Schedule s = buildSchedule(c, o);
        for (int r = 0; r < n; ++r) {
          forEachPeerLocation(s.programs[static_cast<size_t>(r)], r, [&](const Location& loc) {
            if ((pattern >> loc.rank) & 1u) {
              EXPECT_EQ(loc.buffer, kScratch) << "rank " << r << " writes into the call buffer of rank " << loc.rank
                                              << ", which receives via scratch";
            }
          });
        }
      }
    }
  }
}

// What a process clique builds (core/process_clique_p2p.cc): each rank's program comes from its own view of the
// group, its own ops plus, per partner, the mirror of only the ops it shares with that partner. The views of one pair
// differ in everything else (here: rank 1 also receives a much larger message from rank 2), yet the programs built
// from them must fit together. Checked by running each rank's program from its own view as one schedule.
TEST(SchedSendRecv, ViaScratchProgramsFromEachRanksOwnViewFitTogether) {
  CollectiveCall full = p2pCall(3, concclFloat32);
  post(full, 0, false, 1, 5000);  // direct (buffer index 0 on both views)
  post(full, 0, true, 1, 70000);
  post(full, 0, true, 2, 300);
  post(full, 1, true, 0, 5000);
  post(full, 1, false, 0, 70000);
  full.p2p[1].back().viaScratch = true;
  post(full, 1, false, 2, 200000);
  full.p2p[1].back().viaScratch = true;
  post(full, 2, false, 0, 300);  // direct
  post(full, 2, true, 1, 200000);
  auto viewOf = [&](int me) -> CollectiveCall {
    CollectiveCall v = p2pCall(3, concclFloat32);
    v.p2p[static_cast<size_t>(me)] = full.p2p[static_cast<size_t>(me)];
    std::vector<std::vector<int>> seen(3, std::vector<int>(2, 0));  // [peer][isSend]: ops matched so far
    for (const P2POp& op : full.p2p[static_cast<size_t>(me)]) {
      if (op.peer == me) continue;
      // The partner's k-th op of the opposite direction with `me` (matching is by order per pair).
      int k = seen[static_cast<size_t>(op.peer)][op.isSend ? 1 : 0]++;
      const P2POp* theirs = nullptr;
      for (const P2POp& t : full.p2p[static_cast<size_t>(op.peer)]) {
        if (t.peer == me && t.isSend != op.isSend && k-- == 0) {
          theirs = &t;
          break;
        }
      }
      if (theirs == nullptr) {
        ADD_FAILURE() << "rank " << op.peer << " has no op matching one of rank " << me;
        return v;
      }
      auto& mirror = v.p2p[static_cast<size_t>(op.peer)];
      P2POp m{!op.isSend, me, op.count, static_cast<int>(mirror.size())};
      m.viaScratch = theirs->viaScratch;
      mirror.push_back(m);
    }
    return v;
  };
  for (const BuildOptions& o : kOptions) {
    Schedule composed = buildSchedule(full, o);
    for (int r = 0; r < 3; ++r) {
      const Schedule own = buildSchedule(viewOf(r), o);
      composed.programs[static_cast<size_t>(r)] = own.programs[static_cast<size_t>(r)];
      composed.slots = std::max(composed.slots, own.slots);
      composed.scratchBytes = std::max(composed.scratchBytes, own.scratchBytes);
    }
    const CheckResult result = checkSchedule(full, composed);
    EXPECT_TRUE(result.ok) << callStr(full, o) << ": " << result.error;
  }
}

TEST(SchedSendRecv, EmptyGroup) {
  CollectiveCall c = p2pCall(4);
  const Schedule s = buildSchedule(c, BuildOptions{});
  EXPECT_TRUE(checkSchedule(c, s).ok);
  for (const RankProgram& p : s.programs) EXPECT_TRUE(p.ops.empty());
}

// A self-send cut into pieces for the lanes: each piece continues the one before in the same two buffers, which is
// what lets an executor running the program on one stream issue them as one copy (sched::copyContinues).
TEST(SchedSendRecv, SelfSendPiecesContinueEachOther) {
  CollectiveCall c = p2pCall(2);
  post(c, 0, true, 0, 87381);
  post(c, 0, false, 0, 87381);
  BuildOptions options;
  options.lanes = 2;
  const Schedule s = buildSchedule(c, options);
  std::vector<Copy> pieces;
  for (const Op& op : s.programs[0].ops) {
    if (const auto* copy = std::get_if<Copy>(&op)) pieces.push_back(*copy);
  }
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(copyContinues(pieces[0], pieces[1]));
  EXPECT_FALSE(copyContinues(pieces[1], pieces[0]));
  EXPECT_EQ(pieces[0].bytes + pieces[1].bytes, size_t{87381} * 4);
}

TEST(SchedSendRecv, CopiesContinueOnlyInTheSameBuffersAtTheEnd) {
  const Copy first{Location{0, 0, 64}, Location{1, kScratch, 128}, 32, 0};
  Copy next{Location{0, 0, 96}, Location{1, kScratch, 160}, 16, 1};
  EXPECT_TRUE(copyContinues(first, next));
  Copy other = next;
  other.src.buffer = 1;  // another source buffer
  EXPECT_FALSE(copyContinues(first, other));
  other = next;
  other.dst.rank = 0;  // another rank's scratch
  EXPECT_FALSE(copyContinues(first, other));
  other = next;
  other.dst.offset = 161;  // a gap in the destination
  EXPECT_FALSE(copyContinues(first, other));
  other = next;
  other.src.offset = 64;  // the same source bytes again
  EXPECT_FALSE(copyContinues(first, other));
}

}  // namespace
}  // namespace conccl::sched::testing
