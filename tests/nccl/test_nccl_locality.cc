// Locality per communicator (issue 25 item 1) on the CPU: the pure rules (host identity, the conccl-or-NCCL rule,
// the interface choice, the id's mark) and the TCP rendezvous with every rank a thread on loopback, host identities
// overridden to lay the ranks out on simulated nodes.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "nccl/liveness_link.h"
#include "nccl/rendezvous.h"
#include "nccl/routing.h"

using namespace conccl::nccl;
using namespace std::chrono_literals;

namespace {

EnvLookup lookupIn(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

constexpr uint32_t kLoopback = 0x7f000001;

// The shim's answer, reduced to the decision: the path's name and its reason.
RendezvousRoot::Answer decidingAnswer(bool realNccl = true) {
  return [realNccl](const std::vector<uint64_t>& hosts, std::string* answer, std::string* error) {
    Decision d = decideLocality(hosts, realNccl);
    if (d.path == Path::kFail) {
      *error = d.reason;
      return false;
    }
    *answer = std::string(pathName(d.path)) + ": " + d.reason;
    return true;
  };
}

struct RankOutcome {
  RendezvousStatus status = RendezvousStatus::kSocketError;
  RendezvousResult result;
  std::string error;
};

// Runs `ranks` (rank numbers) as threads against the root; host of rank r = its node, r / perNode. The connections
// left open for a watch (RendezvousResult::link) are closed unless keepLinks.
std::vector<RankOutcome> runRanks(const RendezvousId& id, int nranks, const std::vector<int>& ranks, int perNode,
                                  bool keepLinks = false) {
  std::vector<RankOutcome> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      const int r = ranks[i];
      const uint64_t host = hashHostString("node" + std::to_string(r / perNode));
      out[i].status = rendezvous(id, r, nranks, host, &out[i].result, &out[i].error);
    });
  }
  for (auto& t : threads) t.join();
  for (RankOutcome& o : out) {
    if (!keepLinks && o.result.link >= 0) {
      ::close(o.result.link);
      o.result.link = -1;
    }
  }
  return out;
}

std::vector<int> allRanks(int n) {
  std::vector<int> v;
  for (int r = 0; r < n; ++r) v.push_back(r);
  return v;
}

}  // namespace

TEST(NcclLocality, HostIdentityOverrides) {
  HostIdentity plain = hostIdentity(lookupIn({}), "gpu-node-3", "boot-a");
  EXPECT_EQ(plain.source, "hostname+boot_id");
  EXPECT_EQ(plain.id, hostIdentity(lookupIn({}), "gpu-node-3", "boot-a").id);  // stable
  EXPECT_NE(plain.id, hostIdentity(lookupIn({}), "gpu-node-4", "boot-a").id);
  EXPECT_NE(plain.id, hostIdentity(lookupIn({}), "gpu-node-3", "boot-b").id);  // rebooted or another container host
  HostIdentity nccl = hostIdentity(lookupIn({{"NCCL_HOSTID", "n1"}}), "gpu-node-3", "boot-a");
  EXPECT_EQ(nccl.source, "NCCL_HOSTID");
  EXPECT_EQ(nccl.id, hostIdentity(lookupIn({{"NCCL_HOSTID", "n1"}}), "other", "other").id);
  HostIdentity ours = hostIdentity(lookupIn({{"NCCL_HOSTID", "n1"}, {"CONCCL_HOSTID", "c7"}}), "gpu-node-3", "boot-a");
  EXPECT_EQ(ours.source, "CONCCL_HOSTID");  // wins over NCCL_HOSTID
  EXPECT_NE(ours.id, nccl.id);
  EXPECT_EQ(hostIdentity(lookupIn({{"NCCL_HOSTID", ""}}), "h", "b").source, "hostname+boot_id");  // empty: unset
}

TEST(NcclLocality, ConcclWhenEveryRankSharesAHostWhateverTheJobsSize) {
  const uint64_t a = hashHostString("a"), b = hashHostString("b");
  Decision d = decideLocality({a, a, a, a, a, a, a, a}, true);
  EXPECT_EQ(d.path, Path::kConccl);
  EXPECT_NE(d.reason.find("all 8 ranks on one host"), std::string::npos);
  EXPECT_EQ(decideLocality({a}, false).path, Path::kConccl);
  d = decideLocality({a, a, b, b}, true);
  EXPECT_EQ(d.path, Path::kNccl);
  EXPECT_NE(d.reason.find("2 hosts"), std::string::npos);
  d = decideLocality({a, b}, false);
  EXPECT_EQ(d.path, Path::kFail);
  EXPECT_NE(d.reason.find("no real NCCL"), std::string::npos);
  EXPECT_EQ(decideLocality({}, true).path, Path::kFail);
  EXPECT_EQ(countHosts({a, b, a, b, b}), 2);
  // A split child of an NCCL parent follows the same rule.
  EXPECT_EQ(decideNcclSplitChild({b, b, b}, true).path, Path::kConccl);
  EXPECT_EQ(decideNcclSplitChild({a, b}, true).path, Path::kNccl);
}

TEST(NcclLocality, IdKinds) {
  char id[kRendezvousIdBytes] = {};
  EXPECT_EQ(classifyId(id, kRendezvousIdBytes), IdKind::kNccl);
  ASSERT_TRUE(tagConcclId(id, kRendezvousIdBytes));
  EXPECT_EQ(classifyId(id, kRendezvousIdBytes), IdKind::kConcclJob);
  RendezvousId r;
  r.ipv4 = 0x0a000003;
  r.port = 41234;
  r.timeoutMs = 5000;
  for (int i = 0; i < 16; ++i) {
    r.secret[i] = static_cast<uint8_t>(i + 1);
    r.nonce[i] = static_cast<uint8_t>(0xf0 + i);
  }
  encodeRendezvousId(r, id);
  EXPECT_EQ(classifyId(id, kRendezvousIdBytes), IdKind::kRendezvous);
  auto back = decodeRendezvousId(id);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ipv4, r.ipv4);
  EXPECT_EQ(back->port, r.port);
  EXPECT_EQ(back->timeoutMs, r.timeoutMs);
  EXPECT_EQ(back->secret, r.secret);
  EXPECT_EQ(back->nonce, r.nonce);
  EXPECT_EQ(rendezvousAddress(*back), "10.0.0.3:41234");
  char nccl[kRendezvousIdBytes] = {};
  nccl[0] = 2;
  EXPECT_FALSE(decodeRendezvousId(nccl).has_value());
}

TEST(NcclLocality, InterfaceChoiceFollowsNccl) {
  const std::vector<NetInterface> ifs = {
      {"lo", kLoopback, 0xff000000, true, true},
      {"docker0", 0xac110001, 0xffff0000, true, false},
      {"eth0", 0x0a000005, 0xffffff00, false, false},  // down
      {"ens5", 0x0a010007, 0xffff0000, true, false},
      {"ib0", 0xc0a80102, 0xffffff00, true, false},
  };
  InterfaceChoice c = pickInterface(ifs, lookupIn({}));
  EXPECT_EQ(c.index, 3) << c.why;  // first up, not loopback, not docker
  c = pickInterface(ifs, lookupIn({{"MASTER_ADDR", "192.168.1.40"}}));
  EXPECT_EQ(c.index, 4);
  EXPECT_NE(c.why.find("MASTER_ADDR"), std::string::npos);
  c = pickInterface(ifs, lookupIn({{"MASTER_ADDR", "node-0.cluster"}}));  // not a literal: ignored
  EXPECT_EQ(c.index, 3);
  c = pickInterface(ifs, lookupIn({{"NCCL_SOCKET_IFNAME", "lo"}}));
  EXPECT_EQ(c.index, 0);
  c = pickInterface(ifs, lookupIn({{"NCCL_SOCKET_IFNAME", "lo"}, {"CONCCL_SOCKET_IFNAME", "ib"}}));
  EXPECT_EQ(c.index, 4);  // conccl's variable wins
  c = pickInterface(ifs, lookupIn({{"NCCL_SOCKET_IFNAME", "^lo,docker,ens"}}));
  EXPECT_EQ(c.index, 4);
  c = pickInterface(ifs, lookupIn({{"NCCL_SOCKET_IFNAME", "=ens"}}));  // exact names only
  EXPECT_EQ(c.index, -1);
  EXPECT_NE(c.error.find("NCCL_SOCKET_IFNAME"), std::string::npos);
  c = pickInterface(ifs, lookupIn({{"NCCL_SOCKET_IFNAME", "eth"}}));  // eth0 is down
  EXPECT_EQ(c.index, -1);
  c = pickInterface({ifs[1], ifs[0]}, lookupIn({}));
  EXPECT_EQ(c.index, 0);  // docker before loopback
  c = pickInterface({ifs[0]}, lookupIn({}));
  EXPECT_EQ(c.index, 0);
  EXPECT_EQ(pickInterface({}, lookupIn({})).index, -1);
  uint32_t a = 0;
  EXPECT_TRUE(parseIpv4("10.1.2.3", &a));
  EXPECT_EQ(a, 0x0a010203u);
  EXPECT_FALSE(parseIpv4("10.1.2", &a));
  EXPECT_FALSE(parseIpv4("10.1.2.300", &a));
  EXPECT_FALSE(parseIpv4("10.1.2.3x", &a));
  EXPECT_EQ(formatIpv4(0x0a010203u), "10.1.2.3");
}

TEST(NcclLocality, ThisMachineHasAnInterfaceToListenOn) {
  std::vector<NetInterface> ifs = listInterfaces();
  InterfaceChoice c = pickInterface(ifs, lookupIn({}));
  ASSERT_GE(c.index, 0) << c.error;
}

// 1 node x 4, 2x2, 2x3, 3x2, 4x1: every rank gets the same table of hosts and the same answer, conccl only when
// the layout is one node; the root's thread has ended.
TEST(NcclRendezvous, LayoutsOfSimulatedNodes) {
  const std::pair<int, int> layouts[] = {{1, 4}, {2, 2}, {2, 3}, {3, 2}, {4, 1}, {1, 1}};
  for (auto [nodes, perNode] : layouts) {
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(perNode));
    const int n = nodes * perNode;
    std::string error;
    auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error);
    ASSERT_NE(root, nullptr) << error;
    std::vector<RankOutcome> out = runRanks(root->id(), n, allRanks(n), perNode);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(out[r].status, RendezvousStatus::kOk) << out[r].error;
      ASSERT_EQ(out[r].result.hosts.size(), static_cast<size_t>(n));
      for (int q = 0; q < n; ++q) {
        EXPECT_EQ(out[r].result.hosts[q], hashHostString("node" + std::to_string(q / perNode)));
      }
      EXPECT_EQ(out[r].result.answer, out[0].result.answer);
    }
    EXPECT_EQ(out[0].result.answer.rfind(nodes == 1 ? "conccl: " : "NCCL: ", 0), 0u) << out[0].result.answer;
    if (nodes > 1) {
      EXPECT_NE(out[0].result.answer.find(std::to_string(nodes) + " hosts"), std::string::npos);
    }
    for (int i = 0; i < 200 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(root->finished());
    EXPECT_EQ(root->outcome(), "");
  }
}

TEST(NcclRendezvous, ARankThatNeverArrivesEndsInABoundedTimeoutNamingIt) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 600ms, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<RankOutcome> out = runRanks(root->id(), 4, {0, 1, 3}, 2);  // rank 2 never comes
  auto elapsed = std::chrono::steady_clock::now() - t0;
  for (const RankOutcome& o : out) {
    EXPECT_EQ(o.status, RendezvousStatus::kTimeout);
    EXPECT_NE(o.error.find("rank 2 (1 of 4) did not reach the rendezvous"), std::string::npos) << o.error;
    EXPECT_TRUE(o.result.hosts.empty());
  }
  EXPECT_LT(elapsed, 3s);
  for (int i = 0; i < 200 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(root->finished());
  EXPECT_NE(root->outcome().find("rank 2"), std::string::npos);
  // A rank that comes after the root gave up cannot reach it, and says so within its own bound.
  RankOutcome late;
  auto t1 = std::chrono::steady_clock::now();
  late.status = rendezvous(root->id(), 2, 4, 1, &late.result, &late.error);  // fails: no link to close
  EXPECT_EQ(late.status, RendezvousStatus::kTimeout);
  EXPECT_NE(late.error.find("could not reach"), std::string::npos) << late.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 4s);
}

TEST(NcclRendezvous, AWrongSecretIsRefusedAndLearnsNothing) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  std::array<uint8_t, 16> wrong = root->id().secret;
  wrong[5] ^= 1;
  RankOutcome intruder;
  intruder.status = rendezvousWithSecret(root->id(), wrong, 0, 2, 42, &intruder.result, &intruder.error);
  EXPECT_EQ(intruder.status, RendezvousStatus::kRefused);
  EXPECT_NE(intruder.error.find("refused"), std::string::npos) << intruder.error;
  EXPECT_TRUE(intruder.result.hosts.empty());
  EXPECT_TRUE(intruder.result.answer.empty());
  EXPECT_EQ(root->refused(), 1);
  // An id whose nonce was altered proves nothing either.
  RendezvousId altered = root->id();
  altered.nonce[0] ^= 0x80;
  RankOutcome other;
  other.status = rendezvous(altered, 1, 2, 42, &other.result, &other.error);
  EXPECT_EQ(other.status, RendezvousStatus::kRefused);
  EXPECT_EQ(root->refused(), 2);
  // The intruder took no slot: the real ranks (rank 0 included) still meet.
  std::vector<RankOutcome> out = runRanks(root->id(), 2, allRanks(2), 2);
  for (const RankOutcome& o : out) EXPECT_EQ(o.status, RendezvousStatus::kOk) << o.error;
}

TEST(NcclRendezvous, TwoRanksWithOneNumberOrDisagreeingSizesFailEveryone) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  std::vector<RankOutcome> out = runRanks(root->id(), 3, {0, 1, 1}, 3);
  // Both claimants of rank 1 hear why; rank 0 either heard it too or (still in the listen queue when the root
  // ended) finds the connection closed. Nobody proceeds.
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_NE(out[i].status, RendezvousStatus::kOk);
    if (i > 0) {
      EXPECT_EQ(out[i].status, RendezvousStatus::kBadUsage) << out[i].error;
      EXPECT_NE(out[i].error.find("as rank 1"), std::string::npos) << out[i].error;
    }
  }

  root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  RankOutcome a, b;
  std::thread ta([&] { a.status = rendezvous(root->id(), 0, 2, 1, &a.result, &a.error); });
  std::this_thread::sleep_for(100ms);
  b.status = rendezvous(root->id(), 1, 3, 1, &b.result, &b.error);
  ta.join();
  EXPECT_EQ(a.status, RendezvousStatus::kBadUsage);
  EXPECT_EQ(b.status, RendezvousStatus::kBadUsage);
  EXPECT_NE(b.error.find("nranks 3"), std::string::npos) << b.error;
  EXPECT_EQ(rendezvous(root->id(), 2, 2, 1, &b.result, &b.error), RendezvousStatus::kBadUsage);  // bad rank
}

TEST(NcclRendezvous, TheRootsFailureReachesEveryRank) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(/*realNccl=*/false), &error);
  ASSERT_NE(root, nullptr) << error;
  std::vector<RankOutcome> out = runRanks(root->id(), 4, allRanks(4), 2);
  for (const RankOutcome& o : out) {
    EXPECT_EQ(o.status, RendezvousStatus::kAnswerFailed);
    EXPECT_NE(o.error.find("no real NCCL"), std::string::npos) << o.error;
  }
}

TEST(NcclRendezvous, AnAbandonedIdLeavesNoThreadBehind) {
  std::string error;
  // Never used, short timeout: the thread ends by itself.
  auto root = RendezvousRoot::start(kLoopback, 200ms, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  for (int i = 0; i < 300 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(root->finished());
  EXPECT_NE(root->outcome().find("no rank reached"), std::string::npos);
  // Never used, long timeout: destroying it stops the thread at once.
  root = RendezvousRoot::start(kLoopback, 3600s, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  auto t0 = std::chrono::steady_clock::now();
  root.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

TEST(NcclRendezvous, ARankThatDiesBeforeTheOthersArriveFreesItsSlot) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error);
  ASSERT_NE(root, nullptr) << error;
  // Rank 0 of a 2-rank communicator whose wait is cut short: an id with a tiny timeout makes it give up.
  RendezvousId impatient = root->id();
  impatient.timeoutMs = 1;  // its own bound: 1 ms + the 1 s grace
  RankOutcome gone;
  gone.status = rendezvous(impatient, 0, 2, 7, &gone.result, &gone.error);
  EXPECT_EQ(gone.status, RendezvousStatus::kTimeout);
  std::this_thread::sleep_for(100ms);
  std::vector<RankOutcome> out = runRanks(root->id(), 2, allRanks(2), 2);  // rank 0 again, and rank 1
  for (const RankOutcome& o : out) EXPECT_EQ(o.status, RendezvousStatus::kOk) << o.error;
}

// Liveness (nccl/liveness_link.h): for a watched answer every rank keeps its connection to the root, and the first
// rank whose connection closes without a bye (its process ended) is reported to every other rank at once.
namespace {

RendezvousRoot::Watch watchEverything() {
  return [](const std::string&) { return true; };
}

// The links of a watched rendezvous of n ranks on `nodes` simulated nodes.
std::vector<std::unique_ptr<LivenessLink>> watchedRanks(RendezvousRoot& root, int n, int perNode) {
  std::vector<RankOutcome> out = runRanks(root.id(), n, allRanks(n), perNode, /*keepLinks=*/true);
  std::vector<std::unique_ptr<LivenessLink>> links;
  for (RankOutcome& o : out) {
    EXPECT_EQ(o.status, RendezvousStatus::kOk) << o.error;
    EXPECT_GE(o.result.link, 0);
    links.push_back(std::make_unique<LivenessLink>(o.result.link));
  }
  return links;
}

// Polls until every link but `except` says something other than kAlive (or has ended), at most `bound`.
bool waitForNews(std::vector<std::unique_ptr<LivenessLink>>& links, int except, std::chrono::milliseconds bound) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    for (size_t r = 0; r < links.size(); ++r) {
      if (static_cast<int>(r) == except || !links[r]) continue;
      all = all && (links[r]->poll() != LivenessLink::kAlive || links[r]->ended());
    }
    if (all) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

}  // namespace

TEST(NcclLiveness, ARankWhoseProcessEndsIsReportedToEveryOtherRank) {
  for (auto [nodes, perNode, victim] : {std::tuple{2, 2, 2}, std::tuple{3, 2, 3}, std::tuple{2, 3, 0}}) {
    SCOPED_TRACE(std::to_string(nodes) + "x" + std::to_string(perNode) + ", victim " + std::to_string(victim));
    const int n = nodes * perNode;
    std::string error;
    auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error, watchEverything());
    ASSERT_NE(root, nullptr) << error;
    auto links = watchedRanks(*root, n, perNode);
    ASSERT_EQ(links.size(), static_cast<size_t>(n));
    // Nothing to report while every rank lives.
    std::this_thread::sleep_for(50ms);
    for (auto& l : links) EXPECT_EQ(l->poll(), LivenessLink::kAlive);
    EXPECT_FALSE(root->finished());  // still watching
    // The victim's connection closes without a bye, as the kernel closes a killed process's sockets.
    const auto t0 = std::chrono::steady_clock::now();
    links[static_cast<size_t>(victim)].reset();
    ASSERT_TRUE(waitForNews(links, victim, 2000ms));
    const auto took = std::chrono::steady_clock::now() - t0;
    for (int r = 0; r < n; ++r) {
      if (r == victim) continue;
      EXPECT_EQ(links[static_cast<size_t>(r)]->poll(), victim) << "rank " << r;
      EXPECT_FALSE(links[static_cast<size_t>(r)]->ended());
      EXPECT_NE(links[static_cast<size_t>(r)]->describe(victim).find("rank " + std::to_string(victim)),
                std::string::npos);
    }
    EXPECT_LT(took, 1s);
    for (int i = 0; i < 200 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(root->finished());
  }
}

TEST(NcclLiveness, AByeEndsTheWatchForEveryRankWithoutAReport) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error, watchEverything());
  ASSERT_NE(root, nullptr) << error;
  auto links = watchedRanks(*root, 4, 2);
  links[1]->bye();  // rank 1 destroys its communicator first (the end of a job)
  EXPECT_EQ(links[1]->poll(), LivenessLink::kAlive);
  ASSERT_TRUE(waitForNews(links, 1, 2000ms));
  for (auto& l : links) {
    EXPECT_EQ(l->poll(), LivenessLink::kAlive);
    EXPECT_TRUE(l->ended());
  }
  // The other ranks exit afterwards: nobody is reported, and the root's thread is done.
  links.clear();
  for (int i = 0; i < 200 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(root->finished());
}

TEST(NcclLiveness, AnUnwatchedAnswerClosesTheConnectionsAfterTheReply) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error,
                                    [](const std::string& answer) { return answer.rfind("NCCL", 0) == 0; });
  ASSERT_NE(root, nullptr) << error;
  auto links = watchedRanks(*root, 2, 2);  // one node: "conccl: ...", not watched
  for (int i = 0; i < 200 && !root->finished(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(root->finished());
  // The root closed its ends without a frame: a link kept by mistake would read that as the root lost, which is why
  // ranks keep the link only for answers the root watches (the same predicate on the same answer).
  EXPECT_TRUE(waitForNews(links, -1, 2000ms));
  for (auto& l : links) EXPECT_EQ(l->poll(), LivenessLink::kRootLost);
}

TEST(NcclLiveness, DestroyingTheRootEndsTheWatchCleanly) {
  std::string error;
  auto root = RendezvousRoot::start(kLoopback, 10s, decidingAnswer(), &error, watchEverything());
  ASSERT_NE(root, nullptr) << error;
  auto links = watchedRanks(*root, 3, 1);
  root.reset();  // joins the watching thread: it says the watch ended
  ASSERT_TRUE(waitForNews(links, -1, 2000ms));
  for (auto& l : links) {
    EXPECT_EQ(l->poll(), LivenessLink::kAlive);
    EXPECT_TRUE(l->ended());
  }
}

TEST(NcclLiveness, TheRootsProcessEndingIsReportedAsTheRootLost) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  LivenessLink link(sv[0]);
  EXPECT_EQ(link.poll(), LivenessLink::kAlive);
  // Half a frame, then the rest: read across calls.
  uint8_t frame[watch_wire::kFrameBytes];
  watch_wire::encode({watch_wire::kDied, 5}, frame);
  ASSERT_EQ(::write(sv[1], frame, 7), 7);
  EXPECT_EQ(link.poll(), LivenessLink::kAlive);
  ASSERT_EQ(::write(sv[1], frame + 7, sizeof(frame) - 7), static_cast<ssize_t>(sizeof(frame) - 7));
  EXPECT_EQ(link.poll(), 5);
  EXPECT_EQ(link.poll(), 5);  // sticky
  ::close(sv[1]);

  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  LivenessLink lost(sv[0]);
  ::close(sv[1]);  // no frame at all
  EXPECT_EQ(lost.poll(), LivenessLink::kRootLost);
  EXPECT_NE(lost.describe(LivenessLink::kRootLost).find("rendezvous root"), std::string::npos);
  EXPECT_FALSE(lost.ended());
}

TEST(NcclLiveness, FramesRoundTripAndForeignBytesAreNoFrame) {
  uint8_t buf[watch_wire::kFrameBytes];
  watch_wire::encode({watch_wire::kBye, -1}, buf);
  watch_wire::Frame f;
  ASSERT_TRUE(watch_wire::decode(buf, &f));
  EXPECT_EQ(f.kind, watch_wire::kBye);
  EXPECT_EQ(f.rank, -1);
  buf[0] ^= 1;
  EXPECT_FALSE(watch_wire::decode(buf, &f));
}
