// When an owner may let go of a retired export (src/exec/retire_after_peers.h): only once every peer has read past the
// call after the one whose entry carried the retirement, since a late peer may still map the export for any call up
// to that one.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "exec/retire_after_peers.h"

namespace conccl::exec {
namespace {

using Ids = std::vector<uint64_t>;

TEST(RetireAfterPeers, ReleasedOnlyOncePeersReadPastTheCallAfterTheCarrier) {
  RetireAfterPeers gate;
  gate.retired(7);
  EXPECT_EQ(gate.releasable(1000), Ids{}) << "not yet in any entry: a peer cannot know of it";
  gate.carriedBy(10);  // call 10's entry tells the peers
  EXPECT_EQ(gate.releasable(10), Ids{}) << "a peer has not read call 10 yet";
  EXPECT_EQ(gate.releasable(11), Ids{}) << "a peer read call 10 and may still be mapping what it needs";
  EXPECT_EQ(gate.releasable(12), Ids{7}) << "every peer read call 11: done with call 10";
  EXPECT_TRUE(gate.empty());
  EXPECT_EQ(gate.releasable(100), Ids{}) << "released once";
}

TEST(RetireAfterPeers, EachIdWaitsForItsOwnCarrier) {
  RetireAfterPeers gate;
  gate.retired(1);
  gate.carriedBy(3);
  gate.retired(2);
  gate.retired(4);
  gate.carriedBy(5);
  EXPECT_EQ(gate.releasable(5), Ids{1});
  EXPECT_EQ(gate.releasable(6), Ids{});
  EXPECT_EQ(gate.releasable(7), (Ids{2, 4}));
}

TEST(RetireAfterPeers, IdsHandedBackWaitForTheCallThatReallyCarriesThem) {
  RetireAfterPeers gate;
  gate.retired(1);
  gate.retired(2);
  gate.carriedBy(3);
  gate.notCarried({2, 99});  // the entry of call 3 was full: id 2 goes with a later call (99 was never retired here)
  EXPECT_EQ(gate.releasable(5), Ids{1});
  gate.carriedBy(8);
  EXPECT_EQ(gate.releasable(9), Ids{});
  EXPECT_EQ(gate.releasable(10), Ids{2});
}

TEST(RetireAfterPeers, DestroyTakesEverything) {
  RetireAfterPeers gate;
  gate.retired(1);
  gate.carriedBy(3);
  gate.retired(2);
  const Ids all = gate.takeAll();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_TRUE(gate.empty());
}

TEST(RetireAfterPeers, ALoggedIdGoesOnceEveryPeerReadItsRecord) {
  RetireAfterPeers gate;
  gate.retired(1);
  gate.retired(2);
  gate.retired(3);
  gate.logged({5, 1, 2}, /*firstIndex=*/40);  // 5: an IPC allocation (no unit held here), record 40; 1: 41; 2: 42
  EXPECT_EQ(gate.releasable(1000, 41), Ids{}) << "record 41 not read by every peer yet; calls say nothing of it";
  EXPECT_EQ(gate.releasable(0, 42), Ids{1});
  gate.carriedBy(7);  // id 3 was not logged: the entry of call 7 carries it
  EXPECT_EQ(gate.releasable(8, 1000), Ids{2}) << "id 3 waits for its carrier";
  EXPECT_EQ(gate.releasable(9, 1000), Ids{3});
  EXPECT_TRUE(gate.empty());
}

TEST(RetireAfterPeers, DestroyTakesLoggedIdsToo) {
  RetireAfterPeers gate;
  gate.retired(1);
  gate.logged({1}, 0);
  EXPECT_FALSE(gate.empty());
  EXPECT_EQ(gate.takeAll(), Ids{1});
  EXPECT_TRUE(gate.empty());
}

}  // namespace
}  // namespace conccl::exec
