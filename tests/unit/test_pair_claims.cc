// The pair claims of the pair-owned route (core/pair_claims.h): ranks as threads publish one call after another in
// random order and timing, each then claims its pairs; every pair must end with exactly one owner that both ranks
// agree on, and an owner that claimed after publishing must have seen its peer's entry (it maps the peer's buffers).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/pair_claims.h"

namespace conccl {
namespace {

// The shared state of one "segment": per rank the published word, per unordered pair a claim word (reused call after
// call, as the ring slot's words are).
struct Segment {
  explicit Segment(int ranks)
      : n(ranks), published(static_cast<size_t>(ranks)), words(static_cast<size_t>(ranks * ranks)) {}
  int n;
  std::vector<std::atomic<uint64_t>> published;
  std::vector<std::atomic<uint64_t>> words;
  std::atomic<uint64_t>& word(int a, int b) {
    const int lo = a < b ? a : b, hi = a < b ? b : a;
    return words[static_cast<size_t>(lo * n + hi)];
  }
};

struct Claimed {
  std::vector<int> owner;
  std::vector<bool> sawPublished;  // [p]: p had published when this rank read it
};

// Rank `rank` of call `seq`: optionally claims everything first (its memory cannot be mapped), publishes, claims.
Claimed runRank(Segment& s, int rank, uint64_t seq, bool claimAll) {
  Claimed c;
  c.sawPublished.assign(static_cast<size_t>(s.n), false);
  auto published = [&](int p) {
    const bool seen = s.published[static_cast<size_t>(p)].load(std::memory_order_acquire) == seq + 1;
    c.sawPublished[static_cast<size_t>(p)] = seen;
    return seen;
  };
  auto wordOf = [&](int p) -> std::atomic<uint64_t>& { return s.word(rank, p); };
  if (claimAll) c.owner = claimPairs(rank, s.n, seq, true, published, wordOf);
  s.published[static_cast<size_t>(rank)].store(seq + 1, std::memory_order_release);
  if (!claimAll) c.owner = claimPairs(rank, s.n, seq, false, published, wordOf);
  return c;
}

TEST(PairClaims, EveryPairHasOneOwnerBothRanksAgreeOn) {
  std::mt19937_64 rng(20261204);
  int claimedByTheLater = 0;
  for (int n = 2; n <= 6; ++n) {
    Segment s(n);
    for (uint64_t seq = 0; seq < 300; ++seq) {
      // At most one rank claims everything (two such ranks could not move their own pair: ProcessClique refuses it).
      const int claimAllRank = rng() % 4 == 0 ? static_cast<int>(rng() % static_cast<uint64_t>(n)) : -1;
      std::vector<int> delayUs(static_cast<size_t>(n));
      for (int& d : delayUs) d = static_cast<int>(rng() % 3) == 0 ? 0 : static_cast<int>(rng() % 200);
      std::vector<Claimed> out(static_cast<size_t>(n));
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r) {
        threads.emplace_back([&, r] {
          std::this_thread::sleep_for(std::chrono::microseconds(delayUs[static_cast<size_t>(r)]));
          out[static_cast<size_t>(r)] = runRank(s, r, seq, r == claimAllRank);
        });
      }
      for (auto& t : threads) t.join();
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          const int oa = out[static_cast<size_t>(a)].owner[static_cast<size_t>(b)];
          const int ob = out[static_cast<size_t>(b)].owner[static_cast<size_t>(a)];
          ASSERT_EQ(oa, ob) << "ranks " << a << " and " << b << " disagree on their pair's owner (n " << n << ", call "
                            << seq << ")";
          ASSERT_TRUE(oa == a || oa == b) << "pair (" << a << ", " << b << ") owned by " << oa;
          const int other = oa == a ? b : a;
          if (oa == claimAllRank) continue;
          ASSERT_NE(other, claimAllRank) << "a rank claimed a pair of the rank whose memory cannot be mapped";
          EXPECT_TRUE(out[static_cast<size_t>(oa)].sawPublished[static_cast<size_t>(other)])
              << "rank " << oa << " owns its pair with rank " << other << " without having seen its entry";
          ++claimedByTheLater;
        }
      }
    }
  }
  EXPECT_GT(claimedByTheLater, 0);
}

TEST(PairClaims, AWordHoldsItsCallsOwnerAndIsReusedByALaterCall) {
  std::atomic<uint64_t> word{0};
  EXPECT_EQ(claimPairWord(word, 5, 3), 3);
  EXPECT_EQ(claimPairWord(word, 5, 1), 3) << "a second claim of the same call must see the first";
  EXPECT_EQ(claimPairWord(word, 21, 1), 1) << "a later call reuses the word";
  EXPECT_EQ(claimPairWord(word, 21, 3), 1);
}

TEST(PairClaims, ARankAloneOwnsNothingItHasNotClaimed) {
  // The first of two ranks to publish leaves the pair to its peer and claims nothing.
  Segment s(2);
  Claimed first = runRank(s, 0, 0, false);
  EXPECT_EQ(first.owner[1], 1);
  EXPECT_EQ(s.word(0, 1).load(), 0u) << "the earlier rank wrote a claim";
  Claimed second = runRank(s, 1, 0, false);
  EXPECT_EQ(second.owner[0], 1);
}

}  // namespace
}  // namespace conccl
