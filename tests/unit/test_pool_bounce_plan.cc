// planPoolBounce (exec/pool_bounce_plan.h): which bytes a call on pool memory copies into its rank's bounce regions
// and out of them, and where its pointers land, for the buffer layouts the collectives take.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/pool_bounce_plan.h"

namespace conccl::exec {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kMax = size_t{1} << 30;

const void* at(uintptr_t a) { return reinterpret_cast<const void*>(a); }

// Fake region bases, far from the fake caller addresses.
std::array<void*, 2> regions() {
  return {reinterpret_cast<void*>(uintptr_t{0x7000'0000'0000}), reinterpret_cast<void*>(uintptr_t{0x7100'0000'0000})};
}

uintptr_t regionAt(int r, size_t offset) {
  return reinterpret_cast<uintptr_t>(regions()[static_cast<size_t>(r)]) + offset;
}

TEST(PoolBouncePlan, InPlaceAllReduceIsOneSpanCopiedInAndOut) {
  const uintptr_t b = 0x1000'0000;
  std::string why;
  auto plan = planPoolBounce({at(b), 64 * kMiB, true}, {at(b), 64 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->spans[0].base, b);
  EXPECT_EQ(plan->spans[0].bytes, 64 * kMiB);
  EXPECT_EQ(plan->spans[1].bytes, 0u);
  ASSERT_EQ(plan->copiesIn.size(), 1u);
  EXPECT_EQ(plan->copiesIn[0].region, 0);
  EXPECT_EQ(plan->copiesIn[0].offset, 0u);
  EXPECT_EQ(plan->copiesIn[0].bytes, 64 * kMiB);
  ASSERT_EQ(plan->copiesOut.size(), 1u);
  EXPECT_EQ(plan->copiesOut[0].bytes, 64 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(0, at(b), regions())), regionAt(0, 0));
}

TEST(PoolBouncePlan, InPlaceAllGatherCopiesInOnlyItsBlockAndOutTheWhole) {
  // 4 ranks, rank 2: sendbuff = recvbuff + 2 * 16 MiB.
  const uintptr_t r = 0x2000'0000, s = r + 32 * kMiB;
  std::string why;
  auto plan = planPoolBounce({at(s), 16 * kMiB, true}, {at(r), 64 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->spans[0].base, r);
  EXPECT_EQ(plan->spans[0].bytes, 64 * kMiB);
  ASSERT_EQ(plan->copiesIn.size(), 1u);
  EXPECT_EQ(plan->copiesIn[0].offset, 32 * kMiB);
  EXPECT_EQ(plan->copiesIn[0].user, s);
  EXPECT_EQ(plan->copiesIn[0].bytes, 16 * kMiB);
  ASSERT_EQ(plan->copiesOut.size(), 1u);
  EXPECT_EQ(plan->copiesOut[0].offset, 0u);
  EXPECT_EQ(plan->copiesOut[0].bytes, 64 * kMiB);
  // The in-place relation survives: sendbuff is recvbuff + 32 MiB in the region too.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(0, at(s), regions())), regionAt(0, 32 * kMiB));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(1, at(r), regions())), regionAt(0, 0));
}

TEST(PoolBouncePlan, InPlaceReduceScatterCopiesOutOnlyItsBlock) {
  const uintptr_t s = 0x3000'0000, r = s + 16 * kMiB;  // rank 1 of 4
  std::string why;
  auto plan = planPoolBounce({at(s), 64 * kMiB, true}, {at(r), 16 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(plan->spans[0].bytes, 64 * kMiB);
  ASSERT_EQ(plan->copiesIn.size(), 1u);
  EXPECT_EQ(plan->copiesIn[0].bytes, 64 * kMiB);
  ASSERT_EQ(plan->copiesOut.size(), 1u);
  EXPECT_EQ(plan->copiesOut[0].offset, 16 * kMiB);
  EXPECT_EQ(plan->copiesOut[0].user, r);
  EXPECT_EQ(plan->copiesOut[0].bytes, 16 * kMiB);
}

TEST(PoolBouncePlan, OutOfPlaceBuffersTakeARegionEachAndOnlyPoolOnesMove) {
  const uintptr_t s = 0x4000'0000, r = 0x5000'0000;
  std::string why;
  auto both = planPoolBounce({at(s), 16 * kMiB, true}, {at(r), 64 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(both) << why;
  EXPECT_EQ(both->spans[0].base, s);
  EXPECT_EQ(both->spans[1].base, r);
  ASSERT_EQ(both->copiesIn.size(), 1u);  // the output's old bytes are not needed
  EXPECT_EQ(both->copiesIn[0].region, 0);
  ASSERT_EQ(both->copiesOut.size(), 1u);
  EXPECT_EQ(both->copiesOut[0].region, 1);
  EXPECT_EQ(both->copiesOut[0].bytes, 64 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(both->place(1, at(r), regions())), regionAt(1, 0));
  // Only the output is pool memory: the input stays where it is, nothing is copied in.
  auto recvOnly = planPoolBounce({at(s), 16 * kMiB, false}, {at(r), 64 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(recvOnly) << why;
  EXPECT_EQ(recvOnly->spans[0].bytes, 0u);
  EXPECT_TRUE(recvOnly->copiesIn.empty());
  EXPECT_EQ(recvOnly->place(0, at(s), regions()), at(s));
  // Only the input: nothing is copied out.
  auto sendOnly = planPoolBounce({at(s), 16 * kMiB, true}, {at(r), 64 * kMiB, false}, false, kMax, &why);
  ASSERT_TRUE(sendOnly) << why;
  EXPECT_TRUE(sendOnly->copiesOut.empty());
  EXPECT_EQ(sendOnly->place(1, at(r), regions()), at(r));
}

TEST(PoolBouncePlan, TouchingBuffersEachKeepTheirOwnRegion) {
  // Two pool allocations side by side: recvbuff starts where sendbuff ends (4 ranks, AllGather of 4 MiB a rank).
  const uintptr_t s = 0x4000'0000, r = s + 4 * kMiB;
  std::string why;
  auto plan = planPoolBounce({at(s), 4 * kMiB, true}, {at(r), 16 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(0, at(s), regions())), regionAt(0, 0));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(1, at(r), regions())), regionAt(1, 0));
  // The other order: sendbuff starts where recvbuff ends.
  auto other = planPoolBounce({at(r), 4 * kMiB, true}, {at(s), 4 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(other) << why;
  EXPECT_EQ(reinterpret_cast<uintptr_t>(other->place(0, at(r), regions())), regionAt(0, 0));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(other->place(1, at(s), regions())), regionAt(1, 0));
}

TEST(PoolBouncePlan, AllToAllvKeepsTheBytesItsDisplacementsSkip) {
  const uintptr_t s = 0x4000'0000, r = 0x5000'0000;
  std::string why;
  auto plan = planPoolBounce({at(s), 16 * kMiB, true}, {at(r), 20 * kMiB, true}, true, kMax, &why);
  ASSERT_TRUE(plan) << why;
  ASSERT_EQ(plan->copiesIn.size(), 2u);
  EXPECT_EQ(plan->copiesIn[1].region, 1);
  EXPECT_EQ(plan->copiesIn[1].user, r);
  EXPECT_EQ(plan->copiesIn[1].bytes, 20 * kMiB);
  // In place: the whole span comes in.
  auto inPlace = planPoolBounce({at(s), 16 * kMiB, true}, {at(s), 20 * kMiB, true}, true, kMax, &why);
  ASSERT_TRUE(inPlace) << why;
  ASSERT_EQ(inPlace->copiesIn.size(), 1u);
  EXPECT_EQ(inPlace->copiesIn[0].bytes, 20 * kMiB);
}

TEST(PoolBouncePlan, AnUnusedBufferMovesOnlyWithTheSpanItPointsInto) {
  // A Broadcast non-root: sendbuff unused (0 bytes), passed as recvbuff (PyTorch passes one tensor).
  const uintptr_t r = 0x6000'0000;
  std::string why;
  auto plan = planPoolBounce({at(r), 0, true}, {at(r), 64 * kMiB, true}, false, kMax, &why);
  ASSERT_TRUE(plan) << why;
  EXPECT_TRUE(plan->copiesIn.empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(plan->place(0, at(r), regions())), regionAt(1, 0));
}

TEST(PoolBouncePlan, RefusedWithoutPoolMemoryOrAboveTheCap) {
  const uintptr_t s = 0x4000'0000, r = 0x5000'0000;
  std::string why;
  EXPECT_FALSE(planPoolBounce({at(s), kMiB, false}, {at(r), kMiB, false}, false, kMax, &why));
  EXPECT_NE(why.find("pool"), std::string::npos) << why;
  EXPECT_FALSE(planPoolBounce({at(s), 64 * kMiB, true}, {at(r), 64 * kMiB, true}, false, 32 * kMiB, &why));
  EXPECT_NE(why.find("CONCCL_POOL_BOUNCE_MAX_BYTES"), std::string::npos) << why;
  EXPECT_NE(why.find("64 MiB"), std::string::npos) << why;
  // An unused pool buffer alone is no reason to bounce.
  EXPECT_FALSE(planPoolBounce({at(s), 0, true}, {at(r), kMiB, false}, false, kMax, &why));
}

}  // namespace
}  // namespace conccl::exec
