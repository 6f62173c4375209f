// The spin of a routed call across processes (core/route_spin.h): spin for peers that were on time for the previous
// call, not for a peer two calls behind or one that was late for the previous call; a call on time resets it.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <optional>

#include "core/route_spin.h"

namespace conccl {
namespace {

constexpr int kSpinUs = 50;
constexpr uint64_t kUs = 1000;  // ns

// Peers' entries for the previous call, by rank; a rank absent from the map has published nothing since seq - 2.
RouteSpin spinFor(uint64_t seq, int rank, int nranks, std::optional<uint64_t> mineAtNs,
                  const std::map<int, PreviousEntry>& peers, int spinUs = kSpinUs) {
  return routeSpinFor(seq, rank, nranks, spinUs, mineAtNs, [&](int p) {
    EXPECT_NE(p, rank) << "asked for its own entry";
    const auto it = peers.find(p);
    return it != peers.end() ? it->second : PreviousEntry{seq - 1, 0};
  });
}

TEST(RouteSpin, TheFirstCallSpins) {
  const RouteSpin s = spinFor(0, 0, 2, std::nullopt, {});
  EXPECT_EQ(s.spinUs, kSpinUs);
  EXPECT_EQ(s.why, RouteSpin::Why::kSpin);
}

TEST(RouteSpin, PeersOnTimeForThePreviousCallAreWaitedFor) {
  // Rank 1 of 4 published call 6 at 1000 us; its peers within 50 us either side of it.
  const RouteSpin s = spinFor(7, 1, 4, 1000 * kUs,
                              {{0, {7, 990 * kUs}}, {2, {7, 1049 * kUs}}, {3, {7, 1050 * kUs}}});
  EXPECT_EQ(s.spinUs, kSpinUs);
  EXPECT_EQ(s.why, RouteSpin::Why::kSpin);
  EXPECT_EQ(s.peer, -1);
}

TEST(RouteSpin, APeerLateForThePreviousCallIsNotWaitedFor) {
  const RouteSpin s = spinFor(7, 0, 3, 1000 * kUs, {{1, {7, 1010 * kUs}}, {2, {7, 2'001'000 * kUs}}});
  EXPECT_EQ(s.spinUs, 0);
  EXPECT_EQ(s.why, RouteSpin::Why::kPeerLateLastCall);
  EXPECT_EQ(s.peer, 2);
  EXPECT_EQ(s.lateByNs, 2'000'000 * kUs);
}

TEST(RouteSpin, LateMeansLaterThanTheSpinAfterThisRank) {
  EXPECT_EQ(spinFor(3, 0, 2, 100 * kUs, {{1, {3, 150 * kUs}}}).spinUs, kSpinUs);  // exactly the spin: on time
  EXPECT_EQ(spinFor(3, 0, 2, 100 * kUs, {{1, {3, 150 * kUs + 1}}}).spinUs, 0);
  // With a longer spin configured, the same peer was on time.
  EXPECT_EQ(spinFor(3, 0, 2, 100 * kUs, {{1, {3, 200 * kUs}}}, 200).spinUs, 200);
}

TEST(RouteSpin, APeerTwoCallsBehindIsNotWaitedFor) {
  // Rank 2 has published call 3 at most (its slot of call 4 still holds 3 + 1, or 0 before any call).
  for (uint64_t published : {uint64_t{0}, uint64_t{4}}) {
    const RouteSpin s = spinFor(5, 0, 3, 1000 * kUs, {{1, {5, 1000 * kUs}}, {2, {published, 5 * kUs}}});
    EXPECT_EQ(s.spinUs, 0);
    EXPECT_EQ(s.why, RouteSpin::Why::kPeerTwoCallsBehind);
    EXPECT_EQ(s.peer, 2);
  }
}

TEST(RouteSpin, WhenThisRankWasTheLateOneItStillSpins) {
  // Its peers published call 8 long before it did: they are ahead, and may well be waiting for it.
  const RouteSpin s = spinFor(9, 1, 2, 5'000'000 * kUs, {{0, {9, 1000 * kUs}}});
  EXPECT_EQ(s.spinUs, kSpinUs);
  EXPECT_EQ(s.why, RouteSpin::Why::kSpin);
}

TEST(RouteSpin, APeerFarAheadIsNotLate) {
  // The peer reused the slot of call seq - 1 for a later call (published larger than seq): whatever its time says.
  const RouteSpin s = spinFor(9, 1, 2, 1000 * kUs, {{0, {9 + 16, 9'000'000 * kUs}}});
  EXPECT_EQ(s.spinUs, kSpinUs);
}

TEST(RouteSpin, WithoutItsOwnTimeOnlyTwoCallsBehindCounts) {
  EXPECT_EQ(spinFor(4, 0, 2, std::nullopt, {{1, {4, 9'000'000 * kUs}}}).spinUs, kSpinUs);
  EXPECT_EQ(spinFor(4, 0, 2, std::nullopt, {{1, {3, 0}}}).why, RouteSpin::Why::kPeerTwoCallsBehind);
}

TEST(RouteSpin, NoSpinConfiguredMeansNone) {
  const RouteSpin s = spinFor(4, 0, 2, 1000 * kUs, {{1, {4, 1000 * kUs}}}, 0);
  EXPECT_EQ(s.spinUs, 0);
  EXPECT_EQ(s.why, RouteSpin::Why::kSpin);
}

// Calls of two ranks in sequence: rank 1 is late for calls 3-5 (2 s after rank 0), on time otherwise. Rank 0 spins
// for call 3 (its peer was on time for call 2), not for calls 4-6 (the call before each was late), and again from
// call 7 on (call 6 was on time).
TEST(RouteSpin, OneCallOnTimeBringsTheSpinBack) {
  std::map<uint64_t, uint64_t> at0, at1;  // seq -> publish time (ns)
  uint64_t t = 1'000'000;
  for (uint64_t seq = 0; seq < 9; ++seq) {
    const bool late = seq >= 3 && seq <= 5;
    at0[seq] = t;
    at1[seq] = t + (late ? 2'000'000 * kUs : 3 * kUs);
    t = at1[seq] + 100 * kUs;
  }
  const int want[] = {kSpinUs, kSpinUs, kSpinUs, kSpinUs, 0, 0, 0, kSpinUs, kSpinUs};
  for (uint64_t seq = 0; seq < 9; ++seq) {
    std::optional<uint64_t> mine;
    std::map<int, PreviousEntry> peers;
    if (seq > 0) {
      mine = at0[seq - 1];
      peers[1] = PreviousEntry{seq, at1[seq - 1]};
    }
    EXPECT_EQ(spinFor(seq, 0, 2, mine, peers).spinUs, want[seq]) << "call " << seq;
  }
}

}  // namespace
}  // namespace conccl
