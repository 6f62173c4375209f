// The checker must fail: hand-made and mutated schedules, each rejected with a message that says what is
// wrong. A checker that accepts everything would pass every builder test, so these tests are what give
// the builder tests their meaning.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "sched/builder_util.h"
#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

// Index of the first op of rank r's program matching pred (fails the test if none).
int findOp(const Schedule& s, int r, const std::function<bool(const Op&)>& pred) {
  const auto& ops = s.programs[static_cast<size_t>(r)].ops;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (pred(ops[i])) return static_cast<int>(i);
  }
  ADD_FAILURE() << "no matching op on rank " << r;
  return -1;
}

void eraseOp(Schedule& s, int r, int index) {
  auto& ops = s.programs[static_cast<size_t>(r)].ops;
  ASSERT_GE(index, 0);
  ops.erase(ops.begin() + index);
}

bool isWaitOn(const Op& op, int slot) {
  const auto* w = std::get_if<Wait>(&op);
  return w != nullptr && w->slot == slot;
}
bool isSignalTo(const Op& op, int peer, int slot) {
  const auto* s = std::get_if<Signal>(&op);
  return s != nullptr && s->peer == peer && s->slot == slot;
}
bool isCopyTo(const Op& op, int rank) {
  const auto* c = std::get_if<Copy>(&op);
  return c != nullptr && c->dst.rank == rank;
}

// The schedule without its Ready marks (optional claims), so that a mutation is caught by the check it was written
// for rather than earlier by a mark.
Schedule withoutMarks(Schedule s) {
  for (RankProgram& p : s.programs) std::erase_if(p.ops, [](const Op& op) { return std::holds_alternative<Ready>(op); });
  return s;
}

CheckResult expectRejected(const CollectiveCall& call, const Schedule& s, const std::string& fragment) {
  const CheckResult r = checkSchedule(call, s);
  EXPECT_FALSE(r.ok) << "expected an error containing \"" << fragment << "\"";
  EXPECT_NE(r.error.find(fragment), std::string::npos) << r.error;
  return r;
}

class CheckerRejects : public ::testing::Test {
 protected:
  // AllGather over 3 ranks, 1000 floats: copies into peers after ready, done at the end.
  CollectiveCall ag = makeCall(CollKind::kAllGather, 3, 1000);
  Schedule agSched = withoutMarks(buildSchedule(ag, BuildOptions{}));
  Schedule agMarked = buildSchedule(ag, BuildOptions{});
  // A pipelined ReduceScatter with many chunks per share and depth 1 (every chunk reuses the slot).
  BuildOptions tiny = tinyOptions(1, 2);
  CollectiveCall rs = makeCall(CollKind::kReduceScatter, 3, 20000);
  Schedule rsSched = buildSchedule(rs, tiny);
};

TEST_F(CheckerRejects, ValidSchedulesPass) {
  EXPECT_TRUE(checkSchedule(ag, agSched).ok);
  EXPECT_TRUE(checkSchedule(ag, agMarked).ok);
  EXPECT_TRUE(checkSchedule(rs, rsSched).ok);
  EXPECT_NE(rsSched.algorithm.find("depth=1"), std::string::npos) << rsSched.algorithm;
}

TEST_F(CheckerRejects, DroppedReadyWait) {
  // Rank 0 no longer waits for rank 1's ready (and rank 1 no longer sends it, so flags still balance):
  // rank 0 may write into rank 1 before rank 1's program started.
  eraseOp(agSched, 0, findOp(agSched, 0, [](const Op& op) { return isWaitOn(op, readySlot(3, 1)); }));
  eraseOp(agSched, 1, findOp(agSched, 1, [](const Op& op) { return isSignalTo(op, 0, readySlot(3, 1)); }));
  expectRejected(ag, agSched, "program start");
}

TEST_F(CheckerRejects, DroppedWaitLeavesFlagSet) {
  eraseOp(agSched, 0, findOp(agSched, 0, [](const Op& op) { return isWaitOn(op, readySlot(3, 1)); }));
  const CheckResult r = checkSchedule(ag, agSched);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
}

TEST_F(CheckerRejects, DroppedDoneHandshake) {
  // Rank 1 stops waiting for rank 0's done: rank 0's copies may land after rank 1's program ended.
  eraseOp(agSched, 1, findOp(agSched, 1, [](const Op& op) { return isWaitOn(op, doneSlot(3, 0)); }));
  eraseOp(agSched, 0, findOp(agSched, 0, [](const Op& op) { return isSignalTo(op, 1, doneSlot(3, 0)); }));
  expectRejected(ag, agSched, "end of its program");
}

TEST_F(CheckerRejects, DroppedSignalDeadlocks) {
  eraseOp(agSched, 2, findOp(agSched, 2, [](const Op& op) { return isSignalTo(op, 0, readySlot(3, 2)); }));
  expectRejected(ag, agSched, "deadlock");
}

TEST_F(CheckerRejects, DroppedCopy) {
  eraseOp(agSched, 0, findOp(agSched, 0, [](const Op& op) { return isCopyTo(op, 2); }));
  expectRejected(ag, agSched, "wrong result");
}

TEST_F(CheckerRejects, DuplicatedCopy) {
  auto& ops = agSched.programs[0].ops;
  const int i = findOp(agSched, 0, [](const Op& op) { return isCopyTo(op, 1); });
  ops.insert(ops.begin() + i + 1, ops[static_cast<size_t>(i)]);
  expectRejected(ag, agSched, "a second time");
}

TEST_F(CheckerRejects, WrongSourceOffset) {
  // Rank 1's own piece is copied from one element too far into its sendbuff... after shrinking it so the
  // read stays in bounds: the result must be caught as wrong data, not as a bounds error.
  auto& ops = agSched.programs[1].ops;
  auto& c = std::get<Copy>(ops[static_cast<size_t>(findOp(agSched, 1, [](const Op& op) { return isCopyTo(op, 2); }))]);
  c.src.offset += 4;
  c.bytes -= 4;
  expectRejected(ag, agSched, "wrong result");
}

TEST_F(CheckerRejects, OutOfBoundsOffset) {
  auto& ops = agSched.programs[1].ops;
  std::get<Copy>(ops[static_cast<size_t>(findOp(agSched, 1, [](const Op& op) { return isCopyTo(op, 2); }))])
      .src.offset += 4;
  expectRejected(ag, agSched, "exceeds");
}

TEST_F(CheckerRejects, WritePeerBeforeReady) {
  // Move rank 0's copies to rank 1 before its Wait for rank 1's ready.
  auto& ops = agSched.programs[0].ops;
  const int w = findOp(agSched, 0, [](const Op& op) { return isWaitOn(op, readySlot(3, 1)); });
  const int c = findOp(agSched, 0, [](const Op& op) { return isCopyTo(op, 1); });
  ASSERT_LT(w, c);
  Op copy = ops[static_cast<size_t>(c)];
  ops.erase(ops.begin() + c);
  ops.insert(ops.begin() + w, copy);
  expectRejected(ag, agSched, "program start");
}

TEST_F(CheckerRejects, SignalTwiceWithoutConsumption) {
  auto& ops = agSched.programs[1].ops;
  const int i = findOp(agSched, 1, [](const Op& op) { return isSignalTo(op, 0, readySlot(3, 1)); });
  ops.insert(ops.begin() + i + 1, ops[static_cast<size_t>(i)]);
  expectRejected(ag, agSched, "still unconsumed");
}

TEST_F(CheckerRejects, ScratchSlotReusedWithoutCredit) {
  // Rank 0 stops waiting for rank 1's credits (and rank 1 stops sending them): rank 0 overwrites the scratch
  // slot on rank 1 while rank 1's Reduce of the previous chunk may still read it.
  int removed = 0;
  for (int k = 0; k < tiny.pipelineDepth; ++k) {
    const int slot = detail::creditSlot(3, 1, k, tiny.pipelineDepth);
    auto& w = rsSched.programs[0].ops;
    std::erase_if(w, [&](const Op& op) { return isWaitOn(op, slot); });
    auto& s = rsSched.programs[1].ops;
    const size_t before = s.size();
    std::erase_if(s, [&](const Op& op) { return isSignalTo(op, 0, slot); });
    removed += static_cast<int>(before - s.size());
  }
  ASSERT_GT(removed, 0);
  expectRejected(rs, rsSched, "race");
}

TEST_F(CheckerRejects, ReduceBeforeDataArrived) {
  // Rank 2 reduces its first chunk without waiting for rank 0's data signal.
  const int slot = detail::dataSlot(3, 0, 0, tiny.pipelineDepth);
  eraseOp(rsSched, 2, findOp(rsSched, 2, [&](const Op& op) { return isWaitOn(op, slot); }));
  const CheckResult r = checkSchedule(rs, rsSched);
  EXPECT_FALSE(r.ok);
  // Depending on the simulated order, either the scratch is still undefined or the race is reported.
  EXPECT_TRUE(r.error.find("before they were produced") != std::string::npos ||
              r.error.find("race") != std::string::npos)
      << r.error;
}

TEST_F(CheckerRejects, ReadBeforeProduced) {
  // A hand-made Reduce of scratch that nothing wrote.
  CollectiveCall c = makeCall(CollKind::kReduce, 1, 4);
  Schedule s;
  s.nranks = 1;
  s.scratchBytes = 16;
  s.programs.resize(1);
  s.programs[0].ops.push_back(
      Reduce{{Location{0, 0, 0}, Location{0, kScratch, 0}}, Location{0, 1, 0}, 4, concclFloat32, concclSum});
  expectRejected(c, s, "before they were produced");
}

TEST_F(CheckerRejects, ReduceOfAnotherRanksMemory) {
  CollectiveCall c = makeCall(CollKind::kAllReduce, 2, 4);
  Schedule s = buildSchedule(c, BuildOptions{});
  for (Op& op : s.programs[0].ops) {
    if (auto* r = std::get_if<Reduce>(&op)) r->inputs[1] = Location{1, 0, 0};
  }
  expectRejected(c, s, "another rank's memory");
}

TEST_F(CheckerRejects, CopyNotInvolvingIssuer) {
  auto& ops = agSched.programs[0].ops;
  auto& c = std::get<Copy>(ops[static_cast<size_t>(findOp(agSched, 0, [](const Op& op) { return isCopyTo(op, 1); }))]);
  c.src.rank = 2;
  expectRejected(ag, agSched, "issuing rank");
}

TEST_F(CheckerRejects, ZeroByteCopyLaneAndSlotRanges) {
  {
    Schedule s = agSched;
    std::get<Copy>(s.programs[0].ops[static_cast<size_t>(findOp(s, 0, [](const Op& op) { return isCopyTo(op, 1); }))])
        .bytes = 0;
    expectRejected(ag, s, "zero-byte");
  }
  {
    Schedule s = agSched;
    std::get<Copy>(s.programs[0].ops[static_cast<size_t>(findOp(s, 0, [](const Op& op) { return isCopyTo(op, 1); }))])
        .lane = 7;
    expectRejected(ag, s, "lane 7 out of range");
  }
  {
    Schedule s = agSched;
    s.slots = 1;
    expectRejected(ag, s, "out of range");
  }
}

TEST_F(CheckerRejects, InPlaceRankMustNotUseItsOtherBuffer) {
  CollectiveCall c = makeCall(CollKind::kAllGather, 2, 16, concclFloat32, concclSum, 0, true);
  Schedule s = buildSchedule(c, BuildOptions{});
  ASSERT_TRUE(checkSchedule(c, s).ok);
  for (Op& op : s.programs[0].ops) {
    if (auto* cp = std::get_if<Copy>(&op)) cp->src = Location{0, 0, 0};
  }
  expectRejected(c, s, "runs in place");
}

TEST_F(CheckerRejects, WritingASendBuffer) {
  CollectiveCall c = makeCall(CollKind::kBroadcast, 2, 16);
  Schedule s = buildSchedule(c, BuildOptions{});
  // The root copies its own recvbuff back into its sendbuff after everything else.
  s.programs[0].ops.push_back(Copy{Location{0, 1, 0}, Location{0, 0, 0}, 64, kMainStream});
  const CheckResult r = checkSchedule(c, s);
  EXPECT_FALSE(r.ok);
  EXPECT_FALSE(r.error.empty());
}

TEST_F(CheckerRejects, UnorderedLocalAccesses) {
  // A lane copy reads the recvbuff while M writes it: not ordered, because M ops do not wait for lanes.
  CollectiveCall c = makeCall(CollKind::kBroadcast, 1, 16);
  Schedule s;
  s.nranks = 1;
  s.lanes = 2;
  s.programs.resize(1);
  s.programs[0].ops.push_back(Copy{Location{0, 0, 0}, Location{0, 1, 0}, 32, 0});
  s.programs[0].ops.push_back(Copy{Location{0, 0, 32}, Location{0, 1, 32}, 32, kMainStream});
  ASSERT_TRUE(checkSchedule(c, s).ok) << checkSchedule(c, s).error;  // disjoint bytes: fine
  // Now the M copy overlaps the lane copy's destination.
  std::get<Copy>(s.programs[0].ops[1]).dst.offset = 16;
  std::get<Copy>(s.programs[0].ops[1]).src.offset = 16;
  const CheckResult r = checkSchedule(c, s);
  EXPECT_FALSE(r.ok);
}

TEST_F(CheckerRejects, LaneAfterMIsOrdered) {
  // The converse of the above: a lane op after an M op in program order is ordered after it.
  CollectiveCall c = makeCall(CollKind::kBroadcast, 1, 16);
  Schedule s;
  s.nranks = 1;
  s.lanes = 1;
  s.slots = 1;
  s.programs.resize(1);
  // M writes the whole recvbuff from the sendbuff, then a lane reads recvbuff... into nothing illegal: we
  // instead check M -> self-signal -> lane ordering by having M signal itself and wait.
  s.programs[0].ops.push_back(Copy{Location{0, 0, 0}, Location{0, 1, 0}, 64, kMainStream});
  s.programs[0].ops.push_back(Signal{0, 0, 0});
  s.programs[0].ops.push_back(Wait{0});
  EXPECT_TRUE(checkSchedule(c, s).ok) << checkSchedule(c, s).error;
}

TEST_F(CheckerRejects, NestedAverageIsWrong) {
  // Avg must be one reduction over all inputs: averaging a partial average is rejected.
  CollectiveCall c = makeCall(CollKind::kAllReduce, 1, 4, concclFloat32, concclAvg, 0, false);
  c.inPlace = {false};
  Schedule s;
  s.nranks = 1;
  s.programs.resize(1);
  s.programs[0].ops.push_back(
      Reduce{{Location{0, 0, 0}, Location{0, 0, 0}}, Location{0, 1, 0}, 4, concclFloat32, concclAvg});
  expectRejected(c, s, "wrong result");
}

// A Ready mark claims its bytes are final: placed before the Wait that orders the writer's copies, it is wrong.
TEST_F(CheckerRejects, MarkBeforeItsDoneWait) {
  auto& ops = agMarked.programs[0].ops;
  const int mark = findOp(agMarked, 0, [](const Op& op) {
    const auto* m = std::get_if<Ready>(&op);
    return m != nullptr && m->tag == 1;
  });
  ASSERT_GT(mark, 0);
  ASSERT_TRUE(isWaitOn(ops[static_cast<size_t>(mark - 1)], doneSlot(3, 1)));
  std::swap(ops[static_cast<size_t>(mark - 1)], ops[static_cast<size_t>(mark)]);
  // Found as a race or, when the mark runs before the copy lands, as bytes that do not hold their result yet.
  expectRejected(ag, agMarked, "mark");
}

// A mark on a block whose writer's done was not waited for yet (block 2 right after the done of rank 1) claims bytes
// that may still be missing.
TEST_F(CheckerRejects, MarkOfABlockNotLandedYet) {
  auto& ops = agMarked.programs[0].ops;
  const int mark = findOp(agMarked, 0, [](const Op& op) {
    const auto* m = std::get_if<Ready>(&op);
    return m != nullptr && m->tag == 1;
  });
  ASSERT_GE(mark, 0);
  const bool twoFirst = findOp(agMarked, 0, [](const Op& op) { return isWaitOn(op, doneSlot(3, 2)); }) < mark;
  auto& m = std::get<Ready>(ops[static_cast<size_t>(mark)]);
  // Point the mark at the block whose done comes later.
  const int other = twoFirst ? 0 : 2;
  m.at.offset = static_cast<size_t>(other) * 1000 * sizeof(float);
  const CheckResult r = checkSchedule(ag, agMarked);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.error.find("mark") != std::string::npos) << r.error;
}

TEST_F(CheckerRejects, MarkOfAnotherRanksMemory) {
  auto& ops = agMarked.programs[0].ops;
  const int mark = findOp(agMarked, 0, [](const Op& op) { return std::holds_alternative<Ready>(op); });
  ASSERT_GE(mark, 0);
  std::get<Ready>(ops[static_cast<size_t>(mark)]).at.rank = 1;
  expectRejected(ag, agMarked, "marks another rank's memory");
}

// Every op of these schedules is needed: dropping any single one must be caught (a lost copy or Reduce
// changes the result, a lost Wait leaves a flag set or a race, a lost Signal deadlocks). Ready marks are the
// exception: they only claim, and a dropped claim leaves the block to be recorded at the program's end.
TEST(CheckerMutations, DroppingAnyOpIsRejected) {
  struct Case {
    CollectiveCall call;
    BuildOptions options;
  };
  std::vector<Case> cases = {
      {makeCall(CollKind::kAllGather, 3, 5000), tinyOptions(1, 2)},
      {makeCall(CollKind::kAllReduce, 3, 30000, concclFloat32, concclSum, 0, true), tinyOptions(2, 2)},
      {makeCall(CollKind::kReduceScatter, 2, 3000, concclFloat64, concclAvg), tinyOptions(3, 3)},
      {makeCall(CollKind::kReduce, 3, 20000, concclInt32, concclMax, 1), tinyOptions(2, 1)},
      {makeCall(CollKind::kScatter, 4, 50, concclInt8, concclSum, 2, true), BuildOptions{}},
      {makeAllToAllv(3, 4), BuildOptions{}},
  };
  for (const Case& c : cases) {
    const Schedule s = buildSchedule(c.call, c.options);
    ASSERT_TRUE(checkSchedule(c.call, s).ok) << callStr(c.call, c.options);
    for (size_t r = 0; r < s.programs.size(); ++r) {
      for (size_t i = 0; i < s.programs[r].ops.size(); ++i) {
        if (std::holds_alternative<Ready>(s.programs[r].ops[i])) continue;
        Schedule m = s;
        m.programs[r].ops.erase(m.programs[r].ops.begin() + static_cast<std::ptrdiff_t>(i));
        const CheckResult res = checkSchedule(c.call, m);
        EXPECT_FALSE(res.ok) << callStr(c.call, c.options) << ": dropping rank " << r << " op #" << i << " "
                             << describeOp(s.programs[r].ops[i]) << " went unnoticed";
      }
    }
  }
}

TEST(CheckerPairs, FlagReusedAcrossCallsWithoutOrdering) {
  // Alone this is fine: rank 0 signals rank 1, which waits. Back to back, rank 0's second signal is not
  // ordered after rank 1's first wait, so the two signals can collide on one flag.
  CollectiveCall c;
  c.kind = CollKind::kSendRecv;
  c.nranks = 2;
  c.p2p.resize(2);
  Schedule s;
  s.nranks = 2;
  s.slots = 1;
  s.programs.resize(2);
  s.programs[0].ops.push_back(Signal{1, 0, kMainStream});
  s.programs[1].ops.push_back(Wait{0});
  ASSERT_TRUE(checkSchedule(c, s).ok) << checkSchedule(c, s).error;
  const CheckResult r = checkSchedulePair(c, s, c, s);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.error.find("unconsumed") != std::string::npos || r.error.find("previous signal") != std::string::npos)
      << r.error;
}

TEST(CheckerPairs, ScratchDoesNotCarryDataAcrossCalls) {
  // Call A fills rank 0's scratch, call B reduces it without producing it again.
  CollectiveCall c = makeCall(CollKind::kReduce, 1, 4);
  Schedule a;
  a.nranks = 1;
  a.scratchBytes = 16;
  a.programs.resize(1);
  a.programs[0].ops.push_back(Copy{Location{0, 0, 0}, Location{0, kScratch, 0}, 16, kMainStream});
  a.programs[0].ops.push_back(Copy{Location{0, kScratch, 0}, Location{0, 1, 0}, 16, kMainStream});
  ASSERT_TRUE(checkSchedule(c, a).ok) << checkSchedule(c, a).error;
  Schedule b = a;
  b.programs[0].ops.erase(b.programs[0].ops.begin());
  const CheckResult r = checkSchedulePair(c, a, c, b);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("before they were produced"), std::string::npos) << r.error;
}

TEST(CheckerPairs, MissingReadyRacesWithThePreviousCall) {
  // ReduceScatter without ready handshakes: alone the first writes still come after... nothing; the checker
  // must refuse it (program start), and the fault is independent of the call order.
  const BuildOptions o = tinyOptions(2, 2);
  CollectiveCall c = makeCall(CollKind::kReduceScatter, 2, 10000);
  Schedule s = buildSchedule(c, o);
  for (int r = 0; r < 2; ++r) {
    std::erase_if(s.programs[static_cast<size_t>(r)].ops, [&](const Op& op) {
      return isWaitOn(op, readySlot(2, 1 - r)) || isSignalTo(op, 1 - r, readySlot(2, r));
    });
  }
  const CheckResult r = checkSchedule(c, s);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("program start"), std::string::npos) << r.error;
}

TEST(CheckerCalls, InvalidCallIsReported) {
  CollectiveCall c = makeCall(CollKind::kBroadcast, 2, 4, concclFloat32, concclSum, 5);
  Schedule s;
  s.nranks = 2;
  s.programs.resize(2);
  const CheckResult r = checkSchedule(c, s);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("root"), std::string::npos) << r.error;
}

TEST(CheckerCalls, MismatchedRankCount) {
  CollectiveCall c = makeCall(CollKind::kAllGather, 3, 4);
  Schedule s = buildSchedule(makeCall(CollKind::kAllGather, 2, 4), BuildOptions{});
  EXPECT_FALSE(checkSchedule(c, s).ok);
}

TEST(CheckerMessages, DescribeOp) {
  EXPECT_EQ(describeOp(Copy{Location{0, 0, 0}, Location{1, 1, 256}, 256, 1}),
            "Copy{r0.buf0+0 -> r1.buf1+256, 256 B, lane 1}");
  EXPECT_EQ(describeOp(Wait{3}), "Wait{slot 3}");
  EXPECT_EQ(describeOp(Signal{2, 5, kMainStream}), "Signal{rank 2, slot 5, M}");
}

}  // namespace
}  // namespace conccl::sched::testing
