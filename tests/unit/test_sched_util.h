// Helpers shared by the schedule tests (test_sched_*.cc): building calls and asserting that the schedule
// of a call builds and passes the checker.
#pragma once

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "sched/checker.h"
#include "sched/schedule.h"

namespace conccl::sched::testing {

inline CollectiveCall makeCall(CollKind kind, int nranks, size_t count, concclDataType_t dtype = concclFloat32,
                               concclRedOp_t op = concclSum, int root = 0, bool inPlace = false) {
  CollectiveCall c;
  c.kind = kind;
  c.nranks = nranks;
  c.count = count;
  c.dtype = dtype;
  c.op = op;
  c.root = root;
  c.inPlace.assign(static_cast<size_t>(nranks), inPlace);
  return c;
}

// AllToAllv with random counts (some zero) and random, non-overlapping, gapped displacements.
inline CollectiveCall makeAllToAllv(int nranks, unsigned seed, concclDataType_t dtype = concclFloat32,
                                    size_t maxCount = 3000) {
  std::mt19937 rng(seed);
  const auto n = static_cast<size_t>(nranks);
  CollectiveCall c = makeCall(CollKind::kAllToAllv, nranks, 0, dtype);
  c.sendCounts.assign(n, std::vector<size_t>(n));
  c.sendDispls = c.recvCounts = c.recvDispls = c.sendCounts;
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = 0; p < n; ++p) c.sendCounts[r][p] = rng() % 4 == 0 ? 0 : rng() % maxCount;
  }
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = 0; p < n; ++p) c.recvCounts[r][p] = c.sendCounts[p][r];
  }
  // Displacements in a shuffled peer order with random gaps, so that regions are not in rank order.
  auto place = [&](const std::vector<size_t>& counts, std::vector<size_t>& displs) {
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    size_t at = rng() % 5;
    for (size_t p : order) {
      displs[p] = at;
      at += counts[p] + rng() % 3;
    }
  };
  for (size_t r = 0; r < n; ++r) {
    place(c.sendCounts[r], c.sendDispls[r]);
    place(c.recvCounts[r], c.recvDispls[r]);
  }
  return c;
}

inline std::string callStr(const CollectiveCall& c, const BuildOptions& o) {
  std::string s = std::string(collKindName(c.kind)) + " n=" + std::to_string(c.nranks) +
                  " count=" + std::to_string(c.count) + " dtype=" + std::to_string(static_cast<int>(c.dtype)) +
                  " op=" + std::to_string(static_cast<int>(c.op)) + " root=" + std::to_string(c.root) + " inPlace=";
  for (bool b : c.inPlace) s += b ? "1" : "0";
  s += " budget=" + std::to_string(o.scratchBudget) + " lanes=" + std::to_string(o.lanes) +
       " depth=" + std::to_string(o.pipelineDepth) + " minChunk=" + std::to_string(o.minChunkBytes);
  return s;
}

// Builds the schedule of `call`, checks it (alone and, when `pair`, back to back with itself) and the
// bounds every executor relies on.
inline void expectValid(const CollectiveCall& call, const BuildOptions& options, bool pair = false) {
  SCOPED_TRACE(callStr(call, options));
  Schedule s;
  ASSERT_NO_THROW(s = buildSchedule(call, options));
  EXPECT_EQ(s.nranks, call.nranks);
  EXPECT_EQ(s.lanes, options.lanes);
  EXPECT_LE(s.slots, maxSlots(call.nranks, options));
  EXPECT_LE(s.scratchBytes, options.scratchBudget);
  EXPECT_FALSE(s.algorithm.empty());
  const CheckResult r = checkSchedule(call, s);
  EXPECT_TRUE(r.ok) << r.error << "\nalgorithm: " << s.algorithm;
  if (pair && r.ok) {
    const CheckResult r2 = checkSchedulePair(call, s, call, s);
    EXPECT_TRUE(r2.ok) << "replayed back to back: " << r2.error;
  }
}

// A CollectiveCall::pairOwner table with a random owner (one of the two) for each pair.
inline std::vector<int> randomPairOwners(int nranks, std::mt19937& rng) {
  const auto n = static_cast<size_t>(nranks);
  std::vector<int> owner(n * n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) owner[i * n + j] = owner[j * n + i] = static_cast<int>(rng() % 2 == 0 ? i : j);
  }
  return owner;
}

inline BuildOptions tinyOptions(int depth, int lanes) {
  BuildOptions o;
  o.scratchBudget = 64u << 10;
  o.minChunkBytes = 4u << 10;
  o.pipelineDepth = depth;
  o.lanes = lanes;
  return o;
}

}  // namespace conccl::sched::testing
