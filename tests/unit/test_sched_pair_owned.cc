// CollectiveCall::pairOwner: every copy between two ranks issued by the pair's owner (pushing and pulling), the basis
// of "the later rank moves" (docs/dev/next-steps.md item 1). Proven by the checker for every data-movement collective
// with random and extreme ownerships, back to back with a different ownership and with the direct schedule (a
// communicator's consecutive calls may take either), and checked for what the design needs: a rank that owns none of
// its pairs only signals and waits, and its program follows from its own arguments.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "test_sched_util.h"

namespace conccl::sched::testing {
namespace {

const std::vector<CollKind> kMovement = {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kAllToAll,
                                         CollKind::kGather, CollKind::kScatter};

// Owner of each pair: the later of the two in `arrival` (a permutation of the ranks: who called when).
std::vector<int> laterOwns(const std::vector<int>& arrival) {
  const auto n = arrival.size();
  std::vector<int> when(n);
  for (size_t k = 0; k < n; ++k) when[static_cast<size_t>(arrival[k])] = static_cast<int>(k);
  std::vector<int> owner(n * n, -1);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) owner[i * n + j] = static_cast<int>(when[i] > when[j] ? i : j);
    }
  }
  return owner;
}

std::vector<int> arrivalOrder(int n, std::mt19937& rng) {
  std::vector<int> a(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) a[static_cast<size_t>(i)] = i;
  std::shuffle(a.begin(), a.end(), rng);
  return a;
}

std::string ownersStr(const std::vector<int>& owner) {
  std::string s;
  for (int o : owner) s += (o < 0 ? std::string("-") : std::to_string(o)) + " ";
  return s;
}

CollectiveCall movementCall(CollKind kind, int n, size_t count, bool inPlace, int root) {
  return makeCall(kind, n, count, concclFloat32, concclSum, root, inPlace);
}

// Proves `call` with `owner` alone, replayed, and next to the direct schedule and another ownership.
void expectPairOwnedValid(CollectiveCall call, const std::vector<int>& owner, const std::vector<int>& other,
                          const BuildOptions& options) {
  SCOPED_TRACE("owners " + ownersStr(owner) + "/ next " + ownersStr(other));
  call.pairOwner = owner;
  expectValid(call, options, /*pair=*/true);
  if (::testing::Test::HasFailure()) return;
  const Schedule s = buildSchedule(call, options);
  EXPECT_EQ(s.algorithm, "pair-owned");
  CollectiveCall direct = call;
  direct.pairOwner.clear();
  const Schedule d = buildSchedule(direct, options);
  CollectiveCall next = call;
  next.pairOwner = other;
  const Schedule o = buildSchedule(next, options);
  for (const auto& [a, sa, b, sb, what] :
       {std::tuple{&call, &s, &direct, &d, "pair-owned then direct"}, std::tuple{&direct, &d, &call, &s, "direct then pair-owned"},
        std::tuple{&call, &s, &next, &o, "one ownership then another"}}) {
    const CheckResult r = checkSchedulePair(*a, *sa, *b, *sb);
    EXPECT_TRUE(r.ok) << what << ": " << r.error;
  }
}

TEST(PairOwned, EveryMovementCollectiveWithRandomOwnersIsProven) {
  std::mt19937 rng(20261204);
  for (CollKind kind : kMovement) {
    for (int n = 2; n <= 6; ++n) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{4099}, size_t{1} << 18}) {
        for (bool inPlace : {false, true}) {
          if (inPlace && kind == CollKind::kAllToAll) continue;  // not supported in place
          const int root = static_cast<int>(rng() % static_cast<unsigned>(n));
          const CollectiveCall call = movementCall(kind, n, count, inPlace, root);
          for (bool viaPeer : {false, true}) {
            BuildOptions options = count > 4099 ? tinyOptions(2, 1 + n % 3) : BuildOptions{};
            options.ownBlockViaPeer = viaPeer;
            SCOPED_TRACE(std::string(collKindName(kind)) + " n=" + std::to_string(n) + " count=" +
                         std::to_string(count) + (inPlace ? " in place" : "") + (viaPeer ? " own blocks via peers" : ""));
            expectPairOwnedValid(call, laterOwns(arrivalOrder(n, rng)), randomPairOwners(n, rng), options);
            expectPairOwnedValid(call, randomPairOwners(n, rng), laterOwns(arrivalOrder(n, rng)), options);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(PairOwned, AllToAllvWithRandomCountsAndOwnersIsProven) {
  std::mt19937 rng(7);
  for (int n = 2; n <= 6; ++n) {
    for (unsigned seed = 0; seed < 4; ++seed) {
      const CollectiveCall call = makeAllToAllv(n, 100 * static_cast<unsigned>(n) + seed);
      for (bool viaPeer : {false, true}) {
        BuildOptions options = tinyOptions(1, 2);
        options.ownBlockViaPeer = viaPeer;
        expectPairOwnedValid(call, laterOwns(arrivalOrder(n, rng)), randomPairOwners(n, rng), options);
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

// The design's point: the first rank to call owns nothing, so its program is signals and waits (plus its local copies)
// whatever the size, and it touches no peer memory; the last owns every pair and issues all of its pairs' copies.
TEST(PairOwned, TheFirstRankOnlySignalsAndWaitsAndTheLastMovesItsPairs) {
  std::mt19937 rng(3);
  for (CollKind kind : kMovement) {
    for (int n = 2; n <= 5; ++n) {
      const std::vector<int> arrival = arrivalOrder(n, rng);
      const int first = arrival.front(), last = arrival.back();
      CollectiveCall call = movementCall(kind, n, size_t{1} << 20, false, /*root=*/static_cast<int>(rng() % n));
      call.pairOwner = laterOwns(arrival);
      const Schedule s = buildSchedule(call, BuildOptions{});
      SCOPED_TRACE(std::string(collKindName(kind)) + " n=" + std::to_string(n) + " first " + std::to_string(first));
      for (const Op& op : s.programs[static_cast<size_t>(first)].ops) {
        if (const auto* c = std::get_if<Copy>(&op)) {
          EXPECT_TRUE(c->src.rank == first && c->dst.rank == first) << "the first rank issues " << describeOp(op);
        }
        EXPECT_FALSE(std::holds_alternative<Reduce>(op));
      }
      for (int r = 0; r < n; ++r) {
        if (r == last) continue;
        forEachPeerLocation(s.programs[static_cast<size_t>(r)], r, [&](const Location& loc) {
          EXPECT_NE(loc.rank, last) << "rank " << r << " touches the last rank's memory: the last owns that pair";
        });
      }
    }
  }
}

// With own blocks through peers (ranks on distinct GPUs), a rank's own block leaves its GPU and comes back on copy
// engines, moved by the owner of its pair with the next rank: echoed back from that rank where it receives the same
// bytes (AllGather, a Broadcast root), else bounced through its scratch (AllToAll, AllToAllv, Gather and Scatter
// roots). The first rank to call then issues no copy at all (no same-device copy, which runs on SMs).
TEST(PairOwned, OwnBlocksMovedByThePairsOwnerLeaveTheFirstRankNoCopy) {
  std::mt19937 rng(11);
  for (CollKind kind : kMovement) {
    for (int n = 2; n <= 5; ++n) {
      const std::vector<int> arrival = arrivalOrder(n, rng);
      const int first = arrival.front();
      // The first rank is the root: its own block is the one a Broadcast, Gather or Scatter has.
      for (size_t count : {size_t{1000}, size_t{1} << 16}) {
        CollectiveCall call = movementCall(kind, n, count, false, first);
        call.pairOwner = laterOwns(arrival);
        BuildOptions options = count > 1000 ? tinyOptions(2, 2) : BuildOptions{};
        options.ownBlockViaPeer = true;
        SCOPED_TRACE(std::string(collKindName(kind)) + " n=" + std::to_string(n) + " count=" + std::to_string(count) +
                     " first " + std::to_string(first));
        expectValid(call, options, /*pair=*/true);
        const Schedule built = buildSchedule(call, options);
        size_t firstCopies = 0;
        for (const Op& op : built.programs[static_cast<size_t>(first)].ops) firstCopies += std::holds_alternative<Copy>(op);
        EXPECT_EQ(firstCopies, 0u) << "copies issued by the first rank";
      }
    }
  }
  for (int n = 2; n <= 4; ++n) {
    CollectiveCall v = makeAllToAllv(n, 5 + static_cast<unsigned>(n));
    std::vector<int> arrival(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) arrival[static_cast<size_t>(i)] = i;
    v.pairOwner = laterOwns(arrival);
    BuildOptions options = tinyOptions(1, 2);
    options.ownBlockViaPeer = true;
    expectValid(v, options, /*pair=*/true);
    size_t copies = 0;
    const Schedule built = buildSchedule(v, options);
    for (const Op& op : built.programs[0].ops) copies += std::holds_alternative<Copy>(op);
    EXPECT_GT(v.sendCounts[0][0], 0u) << "AllToAllv n=" << n << ": the case needs an own block";
    EXPECT_EQ(copies, 0u) << "AllToAllv n=" << n << ": copies issued by the first rank";
  }
}

// A rank that owns none of its pairs can launch before its peers call: its program must be the same whatever the
// peers' buffers (in place or not) and, for AllToAllv, whatever the counts of pairs it is not part of.
TEST(PairOwned, ARankThatOwnsNothingNeedsOnlyItsOwnArguments) {
  for (int n = 2; n <= 5; ++n) {
    std::vector<int> arrival(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) arrival[static_cast<size_t>(i)] = i;  // rank 0 first: it owns nothing
    const std::vector<int> owner = laterOwns(arrival);
    for (CollKind kind : kMovement) {
      CollectiveCall a = movementCall(kind, n, 4099, false, n - 1);
      CollectiveCall b = a;
      if (kind != CollKind::kAllToAll) {
        for (int r = 1; r < n; ++r) b.inPlace[static_cast<size_t>(r)] = r % 2 == 1;  // the peers' choices differ
      }
      a.pairOwner = b.pairOwner = owner;
      for (bool viaPeer : {false, true}) {
        BuildOptions options;
        options.ownBlockViaPeer = viaPeer;
        EXPECT_EQ(buildSchedule(a, options).programs[0], buildSchedule(b, options).programs[0])
            << collKindName(kind) << " n=" << n << (viaPeer ? " own blocks via peers" : "");
      }
    }
    CollectiveCall v = makeAllToAllv(n, 11 + static_cast<unsigned>(n));
    CollectiveCall w = v;
    // Counts between the other ranks change (rank 0's row and column stay): rank 0's program must not.
    for (size_t r = 1; r < static_cast<size_t>(n); ++r) {
      for (size_t p = 1; p < static_cast<size_t>(n); ++p) {
        w.sendCounts[r][p] += 5;
        w.recvCounts[p][r] += 5;
      }
    }
    // Re-place the changed regions so that the call stays valid: displacements from the counts, no gaps.
    for (auto* table : {&w.sendCounts, &w.recvCounts}) {
      auto& displs = table == &w.sendCounts ? w.sendDispls : w.recvDispls;
      for (size_t r = 1; r < static_cast<size_t>(n); ++r) {
        size_t at = 0;
        for (size_t p = 0; p < static_cast<size_t>(n); ++p) {
          displs[r][p] = at;
          at += (*table)[r][p];
        }
      }
    }
    v.pairOwner = w.pairOwner = owner;
    expectValid(w, tinyOptions(1, 2));
    EXPECT_EQ(buildSchedule(v, tinyOptions(1, 2)).programs[0], buildSchedule(w, tinyOptions(1, 2)).programs[0])
        << "AllToAllv n=" << n;
  }
}

// What ProcessClique::launchPairOwned builds on rank k: the call as k knows it, with the real arguments of the peers
// whose pairs k owns (an AllToAllv peer's only as far as its exchange with k, and its own block), k's own arguments
// mirrored for the others, and the true owner only of k's own pairs (the others any valid owner).
CollectiveCall viewOf(const CollectiveCall& full, const std::vector<int>& owner, int k) {
  const int n = full.nranks;
  CollectiveCall view = full;
  const auto uk = static_cast<size_t>(k);
  for (int p = 0; p < n; ++p) {
    const auto up = static_cast<size_t>(p);
    if (p == k) continue;
    const bool real = owner[uk * static_cast<size_t>(n) + up] == k;
    if (full.kind == CollKind::kAllToAllv) {
      // Only the exchange with k is known: what ProcessClique keeps of a real peer, and what it mirrors.
      const size_t send = real ? full.sendCounts[up][uk] : full.recvCounts[uk][up];
      const size_t recv = real ? full.recvCounts[up][uk] : full.sendCounts[uk][up];
      view.sendCounts[up].assign(static_cast<size_t>(n), 0);
      view.recvCounts[up].assign(static_cast<size_t>(n), 0);
      if (!real) {  // a mirror's displacements are zero: no program built from it touches its buffers
        view.sendDispls[up].assign(static_cast<size_t>(n), 0);
        view.recvDispls[up].assign(static_cast<size_t>(n), 0);
      }
      view.sendCounts[up][uk] = send;
      view.recvCounts[up][uk] = recv;
      if (real) {  // and its own block (its owner of the pair with the next rank may move it)
        view.sendCounts[up][up] = full.sendCounts[up][up];
        view.recvCounts[up][up] = full.recvCounts[up][up];
      }
    } else if (!real) {
      view.inPlace[up] = full.inPlace[uk];  // mirrored
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j && i != k && j != k) view.pairOwner[static_cast<size_t>(i * n + j)] = std::min(i, j);
    }
  }
  return view;
}

// Each rank's program from its own view (viewOf) must be its program in the whole call, or the ranks' handshakes would
// not meet. With own blocks through peers too, since who moves a rank's own block is decided by its pair with the next
// rank.
TEST(PairOwned, EveryRanksProgramFollowsFromWhatItKnows) {
  std::mt19937 rng(404);
  for (bool viaPeer : {false, true}) {
    BuildOptions options = tinyOptions(2, 2);
    options.ownBlockViaPeer = viaPeer;
    for (int n = 2; n <= 5; ++n) {
      for (CollKind kind : {CollKind::kAllGather, CollKind::kBroadcast, CollKind::kAllToAll, CollKind::kGather,
                            CollKind::kScatter, CollKind::kAllToAllv}) {
        for (int round = 0; round < 3; ++round) {
          const std::vector<int> arrival = arrivalOrder(n, rng);
          const std::vector<int> owner = laterOwns(arrival);
          const int root = static_cast<int>(rng() % static_cast<unsigned>(n));
          CollectiveCall full = kind == CollKind::kAllToAllv
                                    ? makeAllToAllv(n, 1000 + static_cast<unsigned>(round))
                                    : movementCall(kind, n, 70000, false, root);
          if (kind != CollKind::kAllToAll && kind != CollKind::kAllToAllv) {
            for (int r = 0; r < n; ++r) full.inPlace[static_cast<size_t>(r)] = rng() % 2 == 0;
          }
          full.pairOwner = owner;
          const Schedule whole = buildSchedule(full, options);
          for (int k = 0; k < n; ++k) {
            SCOPED_TRACE(std::string(collKindName(kind)) + " n=" + std::to_string(n) + " rank " + std::to_string(k) +
                         " owners " + ownersStr(owner) + (viaPeer ? " own blocks via peers" : ""));
            EXPECT_EQ(buildSchedule(viewOf(full, owner, k), options).programs[static_cast<size_t>(k)],
                      whole.programs[static_cast<size_t>(k)]);
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

// An AllToAllv may send the same bytes to several ranks, its own block included (only receive regions must not
// overlap). With own blocks through peers, a rank's own block must still be moved by one rank: the owner of its pair
// with the next rank, which echoes it off that rank when the rank pushes the same bytes there and bounces it
// otherwise, whatever the rank sends elsewhere (an owner of another pair sees only its own). The schedule the ranks
// build, each from its own view, must be the whole call's and pass the checker (every byte written once). Found in a
// review (2026-12-05): with echoes off the nearest peer that received the same bytes, the owners of two or three pairs
// each moved the block.
TEST(PairOwned, SharedSendRegionsGiveAnOwnBlockOneMover) {
  std::mt19937 rng(5);
  BuildOptions options = tinyOptions(2, 2);
  options.ownBlockViaPeer = true;
  for (int n = 2; n <= 5; ++n) {
    for (int skipNext : {0, 1}) {
      // Every rank sends bytes [0, c) to every rank, itself included, except (skipNext) nothing to the next rank.
      CollectiveCall full = makeAllToAllv(n, 1);
      const auto un = static_cast<size_t>(n);
      const size_t c = 5000;
      for (size_t r = 0; r < un; ++r) {
        for (size_t p = 0; p < un; ++p) {
          full.sendCounts[r][p] = skipNext == 1 && n > 2 && p == (r + 1) % un ? 0 : c;
          full.sendDispls[r][p] = 0;
        }
      }
      for (size_t r = 0; r < un; ++r) {
        size_t at = 0;
        for (size_t p = 0; p < un; ++p) {
          full.recvCounts[r][p] = full.sendCounts[p][r];
          full.recvDispls[r][p] = at;
          at += full.recvCounts[r][p];
        }
      }
      for (int round = 0; round < 4; ++round) {
        const std::vector<int> owner = laterOwns(arrivalOrder(n, rng));
        full.pairOwner = owner;
        SCOPED_TRACE("n=" + std::to_string(n) + (skipNext == 1 ? " nothing to the next rank" : "") + " owners " +
                     ownersStr(owner));
        expectValid(full, options, /*pair=*/true);
        const Schedule whole = buildSchedule(full, options);
        Schedule mixed = whole;
        for (int k = 0; k < n; ++k) {
          const Schedule mine = buildSchedule(viewOf(full, owner, k), options);
          EXPECT_EQ(mine.programs[static_cast<size_t>(k)], whole.programs[static_cast<size_t>(k)]) << "rank " << k;
          mixed.programs[static_cast<size_t>(k)] = mine.programs[static_cast<size_t>(k)];
          mixed.scratchBytes = std::max(mixed.scratchBytes, mine.scratchBytes);
          mixed.slots = std::max(mixed.slots, mine.slots);
        }
        const CheckResult checked = checkSchedule(full, mixed);
        EXPECT_TRUE(checked.ok) << checked.error;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(PairOwned, InvalidOwnershipsAndKindsAreRefused) {
  CollectiveCall call = movementCall(CollKind::kAllGather, 3, 100, false, 0);
  call.pairOwner = {-1, 0, 0, 0, -1, 2, 0, 2, -1};
  EXPECT_NO_THROW(buildSchedule(call, BuildOptions{}));
  CollectiveCall asymmetric = call;
  asymmetric.pairOwner[1] = 1;  // (0,1) owned by 1, (1,0) by 0
  EXPECT_THROW(buildSchedule(asymmetric, BuildOptions{}), Error);
  CollectiveCall outsider = call;
  outsider.pairOwner[1] = outsider.pairOwner[3] = 2;  // pair (0,1) owned by rank 2
  EXPECT_THROW(buildSchedule(outsider, BuildOptions{}), Error);
  CollectiveCall shortTable = call;
  shortTable.pairOwner.pop_back();
  EXPECT_THROW(buildSchedule(shortTable, BuildOptions{}), Error);
  CollectiveCall staged = call;
  staged.peerScratchOnly = true;
  EXPECT_THROW(buildSchedule(staged, BuildOptions{}), Error);
  CollectiveCall reduction = movementCall(CollKind::kAllReduce, 3, 100, false, 0);
  reduction.pairOwner = call.pairOwner;
  EXPECT_THROW(buildSchedule(reduction, BuildOptions{}), Error);
}

}  // namespace
}  // namespace conccl::sched::testing
