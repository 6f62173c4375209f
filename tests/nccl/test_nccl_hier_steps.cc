// The drop-in's hierarchical steps (src/nccl/hier_steps.h) on the CPU: the layout of ranks from a host table, the
// order and counts of each rank's calls, and the results: every rank's steps are run on host arrays by a small
// simulator with NCCL's semantics per call (one intra-node communicator per node, one rail communicator per local
// index, copies as rows of blocks), and the outputs are compared with the flat collective computed directly.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nccl/hier_steps.h"

namespace {

using conccl::nccl::HierComm;
using conccl::nccl::hierLayout;
using conccl::nccl::hierProgram;
using conccl::nccl::HierProgram;
using conccl::nccl::HierStep;
using conccl::sched::GroupKind;
using conccl::sched::HierarchicalCall;
using conccl::sched::HierBuffer;
using conccl::sched::HierCollective;
using conccl::sched::planHierarchical;

using Vec = std::vector<double>;

struct RankBuffers {
  Vec send, recv, scratch;
  bool inPlace = false;  // send is recv (AllReduce / Broadcast called with sendbuff == recvbuff)
  Vec& at(HierBuffer b) {
    if (b == HierBuffer::kSend) return inPlace ? recv : send;
    return b == HierBuffer::kRecv ? recv : scratch;
  }
};

// Which chunk of a pipelined call last wrote each element (-1: none): chunks run at once on the GPU, so a chunk that
// reads or writes an element another chunk wrote would race there even though the sequential simulation is right.
struct Owners {
  std::vector<int> send, recv, scratch;
  std::vector<int>& at(HierBuffer b, size_t size) {
    std::vector<int>& v = b == HierBuffer::kSend ? send : b == HierBuffer::kRecv ? recv : scratch;
    if (v.size() < size) v.resize(size, -1);
    return v;
  }
};

// Runs the programs of all n = N * G ranks; returns "" or the first inconsistency between the members of a call.
// With `owners`, also the first element that chunk `chunk` touches after another chunk wrote it.
std::string simulate(const std::vector<HierProgram>& progs, int G, std::vector<RankBuffers>* bufs,
                     std::vector<Owners>* owners = nullptr, int chunk = -1) {
  const int n = static_cast<int>(progs.size());
  std::string race;
  auto touch = [&](int r, HierBuffer b, size_t offset, size_t count, bool write) {
    if (owners == nullptr || count == 0) return;
    const bool inPlaceSend = b == HierBuffer::kSend && (*bufs)[static_cast<size_t>(r)].inPlace;
    std::vector<int>& own = (*owners)[static_cast<size_t>(r)].at(inPlaceSend ? HierBuffer::kRecv : b, offset + count);
    for (size_t e = offset; e < offset + count; ++e) {
      if (own[e] != -1 && own[e] != chunk && race.empty()) {
        race = "chunk " + std::to_string(chunk) + " touches element " + std::to_string(e) + " of rank " +
               std::to_string(r) + " that chunk " + std::to_string(own[e]) + " wrote";
      }
      if (write) own[e] = chunk;
    }
  };
  int phases = 0;
  for (const auto& p : progs) phases = std::max(phases, p.phases);
  for (int ph = 0; ph < phases; ++ph) {
    // (comm, group) -> [group rank] -> that member's steps in this phase, in order
    std::map<std::pair<int, int>, std::map<int, std::vector<std::pair<int, HierStep>>>> groups;
    for (int r = 0; r < n; ++r) {
      for (const HierStep& s : progs[static_cast<size_t>(r)].steps) {
        if (s.phase != ph) continue;
        if (s.comm == HierComm::kLocal) {
          Vec& src = (*bufs)[static_cast<size_t>(r)].at(s.in.buffer);
          Vec& dst = (*bufs)[static_cast<size_t>(r)].at(s.out.buffer);
          for (size_t row = 0; row < s.rows; ++row) {
            touch(r, s.in.buffer, s.in.offset + row * s.srcPitch, s.count, false);
            touch(r, s.out.buffer, s.out.offset + row * s.dstPitch, s.count, true);
            for (size_t e = 0; e < s.count; ++e) {
              dst.at(s.out.offset + row * s.dstPitch + e) = src.at(s.in.offset + row * s.srcPitch + e);
            }
          }
          continue;
        }
        const bool intra = s.comm == HierComm::kIntra;
        groups[{intra ? 0 : 1, intra ? r / G : r % G}][intra ? r % G : r / G].push_back({r, s});
      }
    }
    for (auto& [key, members] : groups) {
      const size_t calls = members.begin()->second.size();
      if (members.begin()->second.front().second.kind == GroupKind::kSendRecv) {
        for (auto& [g, list] : members) {
          for (auto& [r, s] : list) {
            if (!s.send) continue;
            if (members.count(s.peer) == 0 || members[s.peer].size() != 1) return "send without its recv";
            auto& [pr, ps] = members[s.peer].front();
            if (ps.send || ps.count != s.count || ps.peer != g) return "send/recv pair mismatch";
            const Vec& src = (*bufs)[static_cast<size_t>(r)].at(s.in.buffer);
            Vec& dst = (*bufs)[static_cast<size_t>(pr)].at(ps.out.buffer);
            touch(r, s.in.buffer, s.in.offset, s.count, false);
            touch(pr, ps.out.buffer, ps.out.offset, s.count, true);
            for (size_t e = 0; e < s.count; ++e) dst.at(ps.out.offset + e) = src.at(s.in.offset + e);
          }
        }
        continue;
      }
      // A collective involves the whole communicator: every node's ranks (intra) or every node (rail).
      const int size = key.first == 0 ? G : n / G;
      for (size_t c = 0; c < calls; ++c) {
        std::vector<std::pair<int, HierStep>> m;  // [group rank]
        for (int g = 0; g < size; ++g) {
          if (members.count(g) == 0 || members[g].size() != calls) return "a member misses a call";
          m.push_back(members[g][c]);
        }
        const HierStep& s0 = m[0].second;
        for (auto& [r, s] : m) {
          if (s.kind != s0.kind || s.count != s0.count || s.root != s0.root) return "members disagree on a call";
        }
        // Inputs before the call (in-place calls read what they overwrite).
        std::vector<Vec> in(static_cast<size_t>(size));
        for (int g = 0; g < size; ++g) {
          auto& [r, s] = m[static_cast<size_t>(g)];
          Vec& b = (*bufs)[static_cast<size_t>(r)].at(s.in.buffer);
          touch(r, s.in.buffer, s.in.offset, s.in.count, false);
          if (s.in.count > 0)
            in[static_cast<size_t>(g)].assign(b.begin() + static_cast<long>(s.in.offset),
                                              b.begin() + static_cast<long>(s.in.offset + s.in.count));
        }
        const size_t cnt = s0.count;
        auto out = [&](int g, size_t e) -> double& {
          auto& [r, s] = m[static_cast<size_t>(g)];
          touch(r, s.out.buffer, s.out.offset + e, 1, true);
          return (*bufs)[static_cast<size_t>(r)].at(s.out.buffer).at(s.out.offset + e);
        };
        for (int g = 0; g < size; ++g) {
          const size_t G_ = static_cast<size_t>(g);
          switch (s0.kind) {
            case GroupKind::kAllReduce:
            case GroupKind::kReduce:
              if (s0.kind == GroupKind::kReduce && g != s0.root) break;
              for (size_t e = 0; e < cnt; ++e) {
                double sum = 0;
                for (int j = 0; j < size; ++j) sum += in[static_cast<size_t>(j)].at(e);
                out(g, e) = sum;
              }
              break;
            case GroupKind::kReduceScatter:
              for (size_t e = 0; e < cnt; ++e) {
                double sum = 0;
                for (int j = 0; j < size; ++j) sum += in[static_cast<size_t>(j)].at(G_ * cnt + e);
                out(g, e) = sum;
              }
              break;
            case GroupKind::kAllGather:
              for (int j = 0; j < size; ++j)
                for (size_t e = 0; e < cnt; ++e)
                  out(g, static_cast<size_t>(j) * cnt + e) = in[static_cast<size_t>(j)].at(e);
              break;
            case GroupKind::kBroadcast:
              for (size_t e = 0; e < cnt; ++e) out(g, e) = in[static_cast<size_t>(s0.root)].at(e);
              break;
            case GroupKind::kGather:
              if (g != s0.root) break;
              for (int j = 0; j < size; ++j)
                for (size_t e = 0; e < cnt; ++e)
                  out(g, static_cast<size_t>(j) * cnt + e) = in[static_cast<size_t>(j)].at(e);
              break;
            case GroupKind::kScatter:
              for (size_t e = 0; e < cnt; ++e) out(g, e) = in[static_cast<size_t>(s0.root)].at(G_ * cnt + e);
              break;
            case GroupKind::kAllToAll:
              for (int j = 0; j < size; ++j)
                for (size_t e = 0; e < cnt; ++e)
                  out(g, static_cast<size_t>(j) * cnt + e) = in[static_cast<size_t>(j)].at(G_ * cnt + e);
              break;
            default:
              return "unexpected call kind";
          }
        }
      }
    }
  }
  return race;
}

// The flat collective on all n ranks (node-major numbering), from the send buffers.
std::vector<Vec> reference(HierCollective coll, const std::vector<Vec>& send, size_t c, int root, int sender,
                           int receiver) {
  const int n = static_cast<int>(send.size());
  std::vector<Vec> out(static_cast<size_t>(n));
  auto sum = [&](size_t e) {
    double s = 0;
    for (const Vec& v : send) s += v.at(e);
    return s;
  };
  for (int r = 0; r < n; ++r) {
    Vec& o = out[static_cast<size_t>(r)];
    switch (coll) {
      case HierCollective::kAllReduce:
        for (size_t e = 0; e < c; ++e) o.push_back(sum(e));
        break;
      case HierCollective::kReduce:
        if (r == root)
          for (size_t e = 0; e < c; ++e) o.push_back(sum(e));
        break;
      case HierCollective::kBroadcast:
        o = send[static_cast<size_t>(root)];
        break;
      case HierCollective::kAllGather:
        for (const Vec& v : send) o.insert(o.end(), v.begin(), v.begin() + static_cast<long>(c));
        break;
      case HierCollective::kGather:
        if (r == root)
          for (const Vec& v : send) o.insert(o.end(), v.begin(), v.begin() + static_cast<long>(c));
        break;
      case HierCollective::kReduceScatter:
        for (size_t e = 0; e < c; ++e) o.push_back(sum(static_cast<size_t>(r) * c + e));
        break;
      case HierCollective::kScatter:
        for (size_t e = 0; e < c; ++e) o.push_back(send[static_cast<size_t>(root)].at(static_cast<size_t>(r) * c + e));
        break;
      case HierCollective::kAllToAll:
        for (int j = 0; j < n; ++j)
          for (size_t e = 0; e < c; ++e) o.push_back(send[static_cast<size_t>(j)].at(static_cast<size_t>(r) * c + e));
        break;
      case HierCollective::kSendRecv:
        if (r == receiver) o = send[static_cast<size_t>(sender)];
        break;
      default:
        break;
    }
  }
  return out;
}

// Plans, translates and simulates one call; compares with the reference. Returns "" on success.
// roundRobin: the caller's rank u sits on node u % N with local index u / N (not node-major): the plan runs on plan
// ranks, the caller's buffers and roots are the caller's ranks', and the block order is the caller's (blockOf).
std::string runCase(HierCollective coll, int N, int G, size_t c, int root = 0, bool inPlace = false, int sender = 0,
                    int receiver = 1, uint32_t seed = 1, bool roundRobin = false) {
  const int n = N * G;
  std::vector<int> commRank(static_cast<size_t>(n)), planRank(static_cast<size_t>(n));  // [plan] / [caller's]
  for (int p = 0; p < n; ++p) {
    commRank[static_cast<size_t>(p)] = roundRobin ? (p % G) * N + p / G : p;
    planRank[static_cast<size_t>(commRank[static_cast<size_t>(p)])] = p;
  }
  HierarchicalCall call;
  call.collective = coll;
  call.nodes = N;
  call.perNode = G;
  call.count = c;
  call.root = planRank[static_cast<size_t>(root)];
  call.sender = sender;
  call.receiver = receiver;
  if (roundRobin) call.blockOf = commRank;
  auto plan = planHierarchical(call);
  if (!plan.error.empty()) return "plan: " + plan.error;
  std::vector<HierProgram> progs;
  for (int r = 0; r < n; ++r) {
    progs.push_back(hierProgram(plan, r, G));
    if (!progs.back().error.empty()) return "program: " + progs.back().error;
  }
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-1000, 1000);
  std::vector<RankBuffers> bufs(static_cast<size_t>(n));
  std::vector<Vec> send(static_cast<size_t>(n));  // [caller's rank]
  for (int u = 0; u < n; ++u) {
    RankBuffers& b = bufs[static_cast<size_t>(planRank[static_cast<size_t>(u)])];
    b.inPlace = inPlace;
    b.send.resize(plan.sendCount);
    b.recv.assign(plan.recvCount, -1e9);
    b.scratch.assign(plan.scratchCount, -2e9);
    for (double& x : b.send) x = d(rng);
    if (inPlace) b.recv = b.send;
    send[static_cast<size_t>(u)] = b.send;
  }
  std::string err = simulate(progs, G, &bufs);
  if (!err.empty()) return "simulate: " + err;
  auto want = reference(coll, send, c, root, sender, receiver);
  for (int r = 0; r < n; ++r) {
    const Vec& w = want[static_cast<size_t>(r)];
    const Vec& got = bufs[static_cast<size_t>(planRank[static_cast<size_t>(r)])].recv;
    for (size_t e = 0; e < w.size(); ++e) {
      if (got.at(e) != w[e]) {
        return "rank " + std::to_string(r) + " element " + std::to_string(e) + ": got " + std::to_string(got[e]) +
               ", want " + std::to_string(w[e]);
      }
    }
  }
  return "";
}

const std::vector<std::pair<int, int>> kLayouts = {{2, 2}, {2, 3}, {3, 2}, {2, 4}, {4, 2}, {3, 3}, {2, 8}};

TEST(NcclHierSteps, LayoutFromHostsNodeMajorOrNot) {
  auto l = hierLayout({7, 7, 9, 9});
  ASSERT_TRUE(l.error.empty());
  EXPECT_EQ(l.nodes, 2);
  EXPECT_EQ(l.perNode, 2);
  EXPECT_TRUE(l.nodeMajor);
  EXPECT_TRUE(conccl::nccl::hierarchicalLayout(l));
  // Round-robin placement (rank r on host r % 2): node 0 = ranks 0, 2, 4; node 1 = ranks 1, 3, 5.
  auto rr = hierLayout({5, 6, 5, 6, 5, 6});
  ASSERT_TRUE(rr.error.empty());
  EXPECT_EQ(rr.nodes, 2);
  EXPECT_EQ(rr.perNode, 3);
  EXPECT_FALSE(rr.nodeMajor);
  EXPECT_EQ(rr.node, (std::vector<int>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(rr.local, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(rr.planRank, (std::vector<int>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(rr.commRank, (std::vector<int>{0, 2, 4, 1, 3, 5}));
  auto uneven = hierLayout({1, 1, 1, 2});
  EXPECT_NE(uneven.error.find("ranks per host differ (3, 1)"), std::string::npos) << uneven.error;
  EXPECT_FALSE(conccl::nccl::hierarchicalLayout(uneven));
  EXPECT_FALSE(conccl::nccl::hierarchicalLayout(hierLayout({1, 2, 3})));  // one rank per node: NCCL alone
  EXPECT_FALSE(conccl::nccl::hierarchicalLayout(hierLayout({1, 1})));     // one node
}

TEST(NcclHierSteps, AllReduceIsIntraReduceScatterRailAllReduceIntraAllGather) {
  for (auto [N, G] : kLayouts) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(G));
    const size_t c = 12 * static_cast<size_t>(G);
    auto plan = planHierarchical({HierCollective::kAllReduce, N, G, c});
    for (int r = 0; r < N * G; ++r) {
      auto p = hierProgram(plan, r, G);
      ASSERT_TRUE(p.error.empty()) << p.error;
      ASSERT_EQ(p.steps.size(), 3u);
      const size_t piece = c / static_cast<size_t>(G), mine = static_cast<size_t>(r % G) * piece;
      EXPECT_EQ(p.steps[0].comm, HierComm::kIntra);
      EXPECT_EQ(p.steps[0].kind, GroupKind::kReduceScatter);
      EXPECT_EQ(p.steps[0].count, piece);
      EXPECT_EQ(p.steps[0].in.offset, 0u);
      EXPECT_EQ(p.steps[0].out.offset, mine);
      EXPECT_EQ(p.steps[1].comm, HierComm::kRail);
      EXPECT_EQ(p.steps[1].kind, GroupKind::kAllReduce);
      EXPECT_EQ(p.steps[1].count, piece);
      EXPECT_EQ(p.steps[1].in.offset, mine);
      EXPECT_EQ(p.steps[1].out.offset, mine);
      EXPECT_EQ(p.steps[2].comm, HierComm::kIntra);
      EXPECT_EQ(p.steps[2].kind, GroupKind::kAllGather);
      EXPECT_EQ(p.steps[2].count, piece);
      EXPECT_EQ(p.steps[2].in.offset, mine);
      EXPECT_EQ(p.steps[2].out.offset, 0u);
      EXPECT_EQ(p.scratchCount, 0u);
    }
  }
}

TEST(NcclHierSteps, AllGatherIsRailThenIntraThenOneStridedCopyPerLocalIndex) {
  for (auto [N, G] : kLayouts) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(G));
    const size_t c = 5;
    auto plan = planHierarchical({HierCollective::kAllGather, N, G, c});
    auto p = hierProgram(plan, 1, G);
    ASSERT_TRUE(p.error.empty()) << p.error;
    ASSERT_EQ(p.steps.size(), 2u + static_cast<size_t>(G));
    EXPECT_EQ(p.steps[0].comm, HierComm::kRail);
    EXPECT_EQ(p.steps[0].kind, GroupKind::kAllGather);
    EXPECT_EQ(p.steps[0].count, c);
    EXPECT_EQ(p.steps[1].comm, HierComm::kIntra);
    EXPECT_EQ(p.steps[1].count, static_cast<size_t>(N) * c);
    for (int l = 0; l < G; ++l) {
      const HierStep& s = p.steps[2 + static_cast<size_t>(l)];
      EXPECT_EQ(s.comm, HierComm::kLocal);
      EXPECT_EQ(s.rows, static_cast<size_t>(N));
      EXPECT_EQ(s.count, c);
      EXPECT_EQ(s.srcPitch, c);
      EXPECT_EQ(s.dstPitch, static_cast<size_t>(G) * c);
      EXPECT_EQ(s.out.offset, static_cast<size_t>(l) * c);
    }
  }
}

TEST(NcclHierSteps, EveryCollectiveMatchesTheFlatOneOnRandomData) {
  for (auto [N, G] : kLayouts) {
    const int n = N * G;
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(G));
    uint32_t seed = 1;
    for (size_t unit : {size_t{1}, size_t{3}}) {
      const size_t c = unit * static_cast<size_t>(G);  // divisible by G: the decomposed path
      for (int root : {0, n - 1, G + 1 < n ? G + 1 : 1}) {
        EXPECT_EQ(runCase(HierCollective::kAllReduce, N, G, c, 0, false, 0, 1, seed++), "");
        EXPECT_EQ(runCase(HierCollective::kAllReduce, N, G, c, 0, true, 0, 1, seed++), "") << "in place";
        EXPECT_EQ(runCase(HierCollective::kBroadcast, N, G, c, root, false, 0, 1, seed++), "") << root;
        EXPECT_EQ(runCase(HierCollective::kBroadcast, N, G, c, root, true, 0, 1, seed++), "") << root << " in place";
        EXPECT_EQ(runCase(HierCollective::kReduce, N, G, c, root, false, 0, 1, seed++), "") << root;
        EXPECT_EQ(runCase(HierCollective::kGather, N, G, c, root, false, 0, 1, seed++), "") << root;
        EXPECT_EQ(runCase(HierCollective::kScatter, N, G, c, root, false, 0, 1, seed++), "") << root;
      }
      EXPECT_EQ(runCase(HierCollective::kAllGather, N, G, c, 0, false, 0, 1, seed++), "");
      EXPECT_EQ(runCase(HierCollective::kReduceScatter, N, G, c, 0, false, 0, 1, seed++), "");
      EXPECT_EQ(runCase(HierCollective::kAllToAll, N, G, c, 0, false, 0, 1, seed++), "");
      EXPECT_EQ(runCase(HierCollective::kSendRecv, N, G, c, 0, false, 0, n - 1, seed++), "");
      EXPECT_EQ(runCase(HierCollective::kSendRecv, N, G, c, 0, false, 1, 0, seed++), "");
    }
    // Counts G does not divide: AllGather, ReduceScatter, AllToAll, Gather, Scatter do not split the count.
    EXPECT_EQ(runCase(HierCollective::kAllGather, N, G, 7, 0, false, 0, 1, seed++), "");
    EXPECT_EQ(runCase(HierCollective::kReduceScatter, N, G, 7, 0, false, 0, 1, seed++), "");
    EXPECT_EQ(runCase(HierCollective::kAllToAll, N, G, 7, 0, false, 0, 1, seed++), "");
  }
}

TEST(NcclHierSteps, UnevenPiecesAreNotExpressibleAndSaySo) {
  // AllReduce of 7 elements over 2 ranks per node: pieces 4 and 3, which one NCCL call cannot take.
  auto plan = planHierarchical({HierCollective::kAllReduce, 2, 2, 7});
  auto p = hierProgram(plan, 0, 2);
  EXPECT_NE(p.error.find("uneven pieces"), std::string::npos) << p.error;
  EXPECT_NE(runCase(HierCollective::kAllReduce, 2, 2, 7), "");
  // The verdict is the same on every rank, also where only the root's node has the uneven group (Broadcast's
  // scatter, Reduce's gather): a rank going flat alone would wait for its peers forever.
  for (HierCollective coll : {HierCollective::kAllReduce, HierCollective::kBroadcast, HierCollective::kReduce}) {
    for (int root : {0, 5}) {
      auto uneven = planHierarchical({coll, 2, 3, 7, root});
      for (int r = 0; r < 6; ++r) {
        EXPECT_NE(hierProgram(uneven, r, 3).error, "") << conccl::sched::hierCollectiveName(coll) << " rank " << r;
      }
    }
  }
  // A wrong answer must be caught: the simulator compares every element.
  EXPECT_EQ(runCase(HierCollective::kAllReduce, 2, 3, 6), "");
}

TEST(NcclHierSteps, ChunkCounts) {
  using conccl::nccl::hierChunkCounts;
  EXPECT_EQ(hierChunkCounts(64, 2, 4, 1), (std::vector<size_t>{16, 16, 16, 16}));
  EXPECT_EQ(hierChunkCounts(66, 3, 4, 1), (std::vector<size_t>{15, 15, 15, 21}));  // multiples of 3, rest last
  EXPECT_EQ(hierChunkCounts(64, 2, 4, 20), (std::vector<size_t>{20, 20, 24}));     // none below 20 elements
  EXPECT_EQ(hierChunkCounts(64, 2, 4, 40), (std::vector<size_t>{64}));
  EXPECT_EQ(hierChunkCounts(63, 2, 4, 1), (std::vector<size_t>{63}));         // not a multiple of G
  EXPECT_EQ(hierChunkCounts(7, 1, 4, 1), (std::vector<size_t>{1, 1, 1, 4}));  // AllGather pieces: any size
  EXPECT_EQ(hierChunkCounts(64, 2, 1, 1), (std::vector<size_t>{64}));
}

TEST(NcclHierSteps, PipelinedChunksGiveTheFlatResultAndShareNothing) {
  for (auto [N, G] : kLayouts) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(G));
    const int n = N * G;
    for (HierCollective coll : {HierCollective::kAllReduce, HierCollective::kBroadcast, HierCollective::kReduce,
                                HierCollective::kAllGather, HierCollective::kReduceScatter}) {
      for (bool roundRobin : {false, true}) {
        for (int root : {0, n - 1}) {
          SCOPED_TRACE(std::string(conccl::sched::hierCollectiveName(coll)) + " root " + std::to_string(root) +
                       (roundRobin ? " round robin" : ""));
          const size_t c = 11 * static_cast<size_t>(G);  // 11 units: uneven chunks
          std::vector<int> commRank(static_cast<size_t>(n)), planRank(static_cast<size_t>(n));
          for (int p = 0; p < n; ++p) {
            commRank[static_cast<size_t>(p)] = roundRobin ? (p % G) * N + p / G : p;
            planRank[static_cast<size_t>(commRank[static_cast<size_t>(p)])] = p;
          }
          HierarchicalCall call{coll, N, G, c, planRank[static_cast<size_t>(root)]};
          const bool blocks = coll == HierCollective::kAllGather || coll == HierCollective::kReduceScatter;
          if (roundRobin && blocks) call.blockOf = commRank;
          auto whole = planHierarchical(call);
          std::vector<conccl::nccl::HierChunks> per;
          for (int p = 0; p < n; ++p) {
            per.push_back(conccl::nccl::hierChunkPrograms(call, p, 4, 1));
            ASSERT_TRUE(per.back().error.empty()) << per.back().error;
            ASSERT_EQ(per.back().programs.size(), 4u);
            EXPECT_EQ(per.back().scratchCount, whole.scratchCount);  // the slots add up to the whole call's need
          }
          const size_t unit = blocks ? 1 : static_cast<size_t>(G);
          EXPECT_EQ(per[0].counts, (std::vector<size_t>{c / unit / 4 * unit, c / unit / 4 * unit, c / unit / 4 * unit,
                                                        c - 3 * (c / unit / 4 * unit)}));
          std::mt19937 rng(static_cast<uint32_t>(7 + root));
          std::uniform_int_distribution<int> d(-100, 100);
          std::vector<RankBuffers> bufs(static_cast<size_t>(n));
          std::vector<Vec> send(static_cast<size_t>(n));  // [caller's rank]
          for (int u = 0; u < n; ++u) {
            RankBuffers& b = bufs[static_cast<size_t>(planRank[static_cast<size_t>(u)])];
            b.send.resize(whole.sendCount);
            for (double& x : b.send) x = d(rng);
            b.recv.assign(whole.recvCount, -1e9);
            b.scratch.assign(whole.scratchCount, -2e9);
            send[static_cast<size_t>(u)] = b.send;
          }
          // Run chunk after chunk, and check that no chunk touches what another wrote (on the GPU they overlap).
          std::vector<Owners> owners(static_cast<size_t>(n));
          for (size_t k = 0; k < 4; ++k) {
            std::vector<HierProgram> progs;
            for (int p = 0; p < n; ++p) progs.push_back(per[static_cast<size_t>(p)].programs[k]);
            ASSERT_EQ(simulate(progs, G, &bufs, &owners, static_cast<int>(k)), "");
          }
          auto want = reference(coll, send, c, root, 0, 1);
          for (int u = 0; u < n; ++u) {
            const Vec& got = bufs[static_cast<size_t>(planRank[static_cast<size_t>(u)])].recv;
            const Vec& w = want[static_cast<size_t>(u)];
            ASSERT_GE(got.size(), w.size());
            EXPECT_EQ(Vec(got.begin(), got.begin() + static_cast<long>(w.size())), w) << "rank " << u;
          }
        }
      }
    }
  }
  HierarchicalCall a2a{HierCollective::kAllToAll, 2, 2, 8};
  EXPECT_FALSE(conccl::nccl::hierChunkPrograms(a2a, 0, 4, 1).error.empty());
}

TEST(NcclHierSteps, RanksNotNodeMajorKeepTheCallersBlockOrder) {
  // Rank u on node u % N: every collective but AllToAll runs hierarchically with the caller's numbering.
  EXPECT_FALSE(conccl::nccl::needsNodeMajor(HierCollective::kAllGather));
  EXPECT_FALSE(conccl::nccl::needsNodeMajor(HierCollective::kReduceScatter));
  EXPECT_TRUE(conccl::nccl::needsNodeMajor(HierCollective::kAllToAll));
  for (auto [N, G] : kLayouts) {
    SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(G));
    const int n = N * G;
    uint32_t seed = 100;
    const size_t c = 2 * static_cast<size_t>(G);
    for (HierCollective coll :
         {HierCollective::kAllReduce, HierCollective::kAllGather, HierCollective::kReduceScatter}) {
      EXPECT_EQ(runCase(coll, N, G, c, 0, false, 0, 1, seed++, true), "") << conccl::sched::hierCollectiveName(coll);
    }
    for (int root : {0, 1, n - 1}) {
      for (HierCollective coll :
           {HierCollective::kBroadcast, HierCollective::kReduce, HierCollective::kGather, HierCollective::kScatter}) {
        EXPECT_EQ(runCase(coll, N, G, c, root, false, 0, 1, seed++, true), "")
            << conccl::sched::hierCollectiveName(coll) << " root " << root;
      }
    }
  }
  // A blockOf that is no permutation, or one given to a flat plan, is refused.
  HierarchicalCall call{HierCollective::kAllGather, 2, 2, 3};
  call.blockOf = {0, 1, 2};
  EXPECT_NE(planHierarchical(call).error.find("permutation"), std::string::npos);
  call.blockOf = {0, 2, 1, 3};
  call.nodes = 1;
  call.perNode = 4;
  EXPECT_NE(planHierarchical(call).error.find("2+ nodes"), std::string::npos);
}

}  // namespace
