// The phases of hierarchical collectives (src/sched/hierarchical.h), proven by simulation on host arrays: every rank
// gets send / receive / scratch arrays, the plan's phases run one after the other with a reference implementation of
// each group operation, and the receive buffers must hold exactly what the flat collective leaves there. Also: every
// phase's groups are disjoint, "node" groups stay inside one node, "rail" groups hold one rank per node of one local
// index, and the rails carry no more than the collective must send off-node. Nodes 1..4, ranks per node 1..8,
// counts 0, 1, odd and uneven.
#include "sched/hierarchical.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

using namespace conccl::sched;

namespace {

constexpr int64_t kUnset = -777;

struct Mem {
  std::vector<int64_t> send, recv, scratch;
  std::vector<int64_t>& of(HierBuffer b) {
    return b == HierBuffer::kSend ? send : b == HierBuffer::kRecv ? recv : scratch;
  }
};

// Reads a region (empty for count 0); the test fails on one outside its buffer.
std::vector<int64_t> read(std::vector<Mem>& mem, int rank, const Region& r) {
  std::vector<int64_t>& buf = mem[rank].of(r.buffer);
  EXPECT_LE(r.offset + r.count, buf.size()) << "rank " << rank << " reads past its buffer";
  if (r.offset + r.count > buf.size()) return std::vector<int64_t>(r.count, 0);
  return std::vector<int64_t>(buf.begin() + static_cast<long>(r.offset),
                              buf.begin() + static_cast<long>(r.offset + r.count));
}

void write(std::vector<Mem>& mem, int rank, const Region& r, const std::vector<int64_t>& v, size_t from = 0) {
  std::vector<int64_t>& buf = mem[rank].of(r.buffer);
  ASSERT_LE(r.offset + r.count, buf.size()) << "rank " << rank << " writes past its buffer";
  ASSERT_LE(from + r.count, v.size());
  for (size_t i = 0; i < r.count; ++i) buf[r.offset + i] = v[from + i];
}

std::vector<size_t> displs(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

// The reference for one group operation: all inputs read first, so outputs may overlap inputs.
void run(const GroupOp& op, std::vector<Mem>& mem) {
  const size_t m = op.members.size();
  ASSERT_EQ(op.in.size(), m);
  ASSERT_EQ(op.out.size(), m);
  std::vector<std::vector<int64_t>> in(m);
  for (size_t i = 0; i < m; ++i) in[i] = read(mem, op.members[i], op.in[i]);
  auto sum = [&](size_t offset, size_t count) {
    std::vector<int64_t> s(count, 0);
    for (size_t j = 0; j < m; ++j) {
      EXPECT_GE(in[j].size(), offset + count);
      for (size_t e = 0; e < count && offset + e < in[j].size(); ++e) s[e] += in[j][offset + e];
    }
    return s;
  };
  const size_t root = static_cast<size_t>(op.root);
  switch (op.kind) {
    case GroupKind::kAllReduce:
      for (size_t i = 0; i < m; ++i) write(mem, op.members[i], op.out[i], sum(0, op.out[i].count));
      break;
    case GroupKind::kReduce:
      write(mem, op.members[root], op.out[root], sum(0, op.out[root].count));
      break;
    case GroupKind::kReduceScatter: {
      ASSERT_EQ(op.counts.size(), m);
      std::vector<size_t> d = displs(op.counts);
      for (size_t i = 0; i < m; ++i) {
        ASSERT_EQ(op.out[i].count, op.counts[i]);
        write(mem, op.members[i], op.out[i], sum(d[i], op.counts[i]));
      }
      break;
    }
    case GroupKind::kAllGather:
    case GroupKind::kGather: {
      ASSERT_EQ(op.counts.size(), m);
      std::vector<size_t> d = displs(op.counts);
      std::vector<int64_t> all;
      for (size_t j = 0; j < m; ++j) {
        ASSERT_EQ(in[j].size(), op.counts[j]);
        all.insert(all.end(), in[j].begin(), in[j].end());
      }
      for (size_t i = 0; i < m; ++i) {
        if (op.kind == GroupKind::kGather && i != root) continue;
        ASSERT_EQ(op.out[i].count, all.size());
        write(mem, op.members[i], op.out[i], all);
      }
      break;
    }
    case GroupKind::kBroadcast:
      for (size_t i = 0; i < m; ++i) write(mem, op.members[i], op.out[i], in[root]);
      break;
    case GroupKind::kScatter: {
      ASSERT_EQ(op.counts.size(), m);
      std::vector<size_t> d = displs(op.counts);
      for (size_t j = 0; j < m; ++j) {
        ASSERT_EQ(op.out[j].count, op.counts[j]);
        write(mem, op.members[j], op.out[j], in[root], d[j]);
      }
      break;
    }
    case GroupKind::kAllToAll: {
      ASSERT_EQ(op.counts.size(), m * m);
      for (size_t j = 0; j < m; ++j) {
        std::vector<int64_t> got;
        for (size_t i = 0; i < m; ++i) {
          size_t s = 0;
          for (size_t k = 0; k < j; ++k) s += op.counts[i * m + k];
          const size_t c = op.counts[i * m + j];
          ASSERT_LE(s + c, in[i].size());
          got.insert(got.end(), in[i].begin() + static_cast<long>(s), in[i].begin() + static_cast<long>(s + c));
        }
        ASSERT_EQ(op.out[j].count, got.size());
        write(mem, op.members[j], op.out[j], got);
      }
      break;
    }
    case GroupKind::kSendRecv:
      ASSERT_EQ(m, 2u);
      write(mem, op.members[1], op.out[1], in[0]);
      break;
    case GroupKind::kCopy:
      ASSERT_EQ(m, 1u);
      write(mem, op.members[0], op.out[0], in[0]);
      break;
  }
}

int64_t value(int rank, size_t e) {
  return static_cast<int64_t>(rank + 1) * 1000003 + static_cast<int64_t>(e) * 7 + 13;
}

// Runs the plan and checks its structure (groups of a node or rail phase are disjoint, so running them one by one is
// running them at once). Returns the memory after the last phase.
std::vector<Mem> simulate(const HierarchicalCall& call, const HierarchicalPlan& plan) {
  const int n = call.nodes * call.perNode;
  std::vector<Mem> mem(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    mem[r].send.resize(plan.sendCount);
    for (size_t e = 0; e < plan.sendCount; ++e) mem[r].send[e] = value(r, e);
    mem[r].recv.assign(plan.recvCount, kUnset);
    mem[r].scratch.assign(plan.scratchCount, kUnset);
  }
  for (const Phase& phase : plan.phases) {
    std::set<int> seen;
    for (const GroupOp& op : phase.ops) {
      std::set<int> nodes, locals;
      for (int r : op.members) {
        // A local phase is a list of copies on each rank (disjoint regions); groups of the others are disjoint.
        if (phase.where != Where::kLocal) {
          EXPECT_TRUE(seen.insert(r).second) << phase.name << ": rank " << r << " in two groups of one phase";
        }
        nodes.insert(r / call.perNode);
        locals.insert(r % call.perNode);
      }
      if (phase.where == Where::kNode) {
        EXPECT_EQ(nodes.size(), 1u) << phase.name;
      }
      if (phase.where == Where::kRail && call.perNode > 1) {
        EXPECT_EQ(locals.size(), 1u) << phase.name;
        EXPECT_EQ(nodes.size(), op.members.size()) << phase.name;
      }
      if (phase.where == Where::kLocal) {
        EXPECT_EQ(op.members.size(), 1u) << phase.name;
      }
    }
    // Within a phase the groups are disjoint, so running them one by one is running them at once.
    for (const GroupOp& op : phase.ops) run(op, mem);
  }
  return mem;
}

// Elements the rail phases carry out of each rank (inputs of rail operations that leave the rank's node).
size_t railElementsSent(const HierarchicalPlan& plan, int rank) {
  size_t total = 0;
  for (const Phase& phase : plan.phases) {
    if (phase.where != Where::kRail) continue;
    for (const GroupOp& op : phase.ops) {
      for (size_t i = 0; i < op.members.size(); ++i) {
        if (op.members[i] == rank) total += op.in[i].count;
      }
    }
  }
  return total;
}

std::string label(const HierarchicalCall& c) {
  return std::string(hierCollectiveName(c.collective)) + " " + std::to_string(c.nodes) + "x" +
         std::to_string(c.perNode) + " count " + std::to_string(c.count) + " root " + std::to_string(c.root);
}

const std::vector<size_t> kCounts = {0, 1, 7, 67};

template <typename F>
void forEachLayout(F&& f) {
  for (int nodes = 1; nodes <= 4; ++nodes) {
    for (int perNode = 1; perNode <= 8; ++perNode) f(nodes, perNode);
  }
}

std::vector<int> rootsFor(int n) {
  std::set<int> s = {0, n - 1, n / 2, (n > 2 ? 2 : 0)};
  return {s.begin(), s.end()};
}

}  // namespace

TEST(SchedHierarchical, AllReduce) {
  forEachLayout([](int nodes, int perNode) {
    for (size_t c : kCounts) {
      HierarchicalCall call{HierCollective::kAllReduce, nodes, perNode, c};
      SCOPED_TRACE(label(call));
      HierarchicalPlan plan = planHierarchical(call);
      ASSERT_EQ(plan.error, "");
      std::vector<Mem> mem = simulate(call, plan);
      const int n = nodes * perNode;
      for (int r = 0; r < n; ++r) {
        for (size_t e = 0; e < c; ++e) {
          int64_t want = 0;
          for (int q = 0; q < n; ++q) want += value(q, e);
          ASSERT_EQ(mem[r].recv[e], want) << "rank " << r << " element " << e;
        }
      }
      if (nodes > 1 && perNode > 1) {
        EXPECT_EQ(plan.phases.size(), 3u);
        // The rails carry each rank's piece, about count / perNode, not the whole buffer.
        for (int r = 0; r < n; ++r) EXPECT_LE(railElementsSent(plan, r), c / perNode + 1);
      }
    }
  });
}

TEST(SchedHierarchical, AllGatherAndReduceScatter) {
  forEachLayout([](int nodes, int perNode) {
    const int n = nodes * perNode;
    for (size_t c : kCounts) {
      HierarchicalCall ag{HierCollective::kAllGather, nodes, perNode, c};
      SCOPED_TRACE(label(ag));
      HierarchicalPlan plan = planHierarchical(ag);
      ASSERT_EQ(plan.error, "");
      std::vector<Mem> mem = simulate(ag, plan);
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) {
          for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[r].recv[q * c + e], value(q, e)) << r << " " << q << " " << e;
        }
        // Rail first: a rank sends only its own block over the network.
        if (nodes > 1) {
          EXPECT_EQ(railElementsSent(plan, r), c);
        }
      }

      HierarchicalCall rs{HierCollective::kReduceScatter, nodes, perNode, c};
      plan = planHierarchical(rs);
      ASSERT_EQ(plan.error, "");
      mem = simulate(rs, plan);
      for (int r = 0; r < n; ++r) {
        for (size_t e = 0; e < c; ++e) {
          int64_t want = 0;
          for (int q = 0; q < n; ++q) want += value(q, r * c + e);
          ASSERT_EQ(mem[r].recv[e], want) << "rank " << r << " element " << e;
        }
        if (nodes > 1) {
          EXPECT_EQ(railElementsSent(plan, r), (perNode > 1 ? nodes : n) * c);
        }
      }
    }
  });
}

TEST(SchedHierarchical, BroadcastAndReduce) {
  forEachLayout([](int nodes, int perNode) {
    const int n = nodes * perNode;
    for (size_t c : kCounts) {
      for (int root : rootsFor(n)) {
        HierarchicalCall bc{HierCollective::kBroadcast, nodes, perNode, c, root};
        SCOPED_TRACE(label(bc));
        HierarchicalPlan plan = planHierarchical(bc);
        ASSERT_EQ(plan.error, "");
        std::vector<Mem> mem = simulate(bc, plan);
        for (int r = 0; r < n; ++r) {
          for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[r].recv[e], value(root, e)) << "rank " << r;
        }
        HierarchicalCall rd{HierCollective::kReduce, nodes, perNode, c, root};
        plan = planHierarchical(rd);
        ASSERT_EQ(plan.error, "");
        mem = simulate(rd, plan);
        for (size_t e = 0; e < c; ++e) {
          int64_t want = 0;
          for (int q = 0; q < n; ++q) want += value(q, e);
          ASSERT_EQ(mem[root].recv[e], want) << "element " << e;
        }
      }
    }
  });
}

TEST(SchedHierarchical, GatherAndScatter) {
  forEachLayout([](int nodes, int perNode) {
    const int n = nodes * perNode;
    for (size_t c : kCounts) {
      for (int root : rootsFor(n)) {
        HierarchicalCall g{HierCollective::kGather, nodes, perNode, c, root};
        SCOPED_TRACE(label(g));
        HierarchicalPlan plan = planHierarchical(g);
        ASSERT_EQ(plan.error, "");
        std::vector<Mem> mem = simulate(g, plan);
        for (int q = 0; q < n; ++q) {
          for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[root].recv[q * c + e], value(q, e)) << q << " " << e;
        }
        HierarchicalCall s{HierCollective::kScatter, nodes, perNode, c, root};
        plan = planHierarchical(s);
        ASSERT_EQ(plan.error, "");
        mem = simulate(s, plan);
        for (int r = 0; r < n; ++r) {
          for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[r].recv[e], value(root, r * c + e)) << r << " " << e;
        }
      }
    }
  });
}

// Reference all-to-all(v): rank j's receive buffer holds, in source order, what each rank i sent it.
void checkAllToAll(const HierarchicalCall& call, const std::vector<size_t>& m) {
  const int n = call.nodes * call.perNode;
  HierarchicalPlan plan = planHierarchical(call);
  ASSERT_EQ(plan.error, "");
  std::vector<Mem> mem = simulate(call, plan);
  for (int j = 0; j < n; ++j) {
    size_t at = 0;
    for (int i = 0; i < n; ++i) {
      size_t s = 0;
      for (int k = 0; k < j; ++k) s += m[static_cast<size_t>(i) * n + k];
      for (size_t e = 0; e < m[static_cast<size_t>(i) * n + j]; ++e, ++at) {
        ASSERT_EQ(mem[j].recv[at], value(i, s + e)) << "to " << j << " from " << i << " element " << e;
      }
    }
  }
  if (call.nodes > 1) {
    for (int node = 0; node < call.nodes; ++node) {
      size_t mustLeave = 0, railSent = 0;
      for (int l = 0; l < call.perNode; ++l) {
        const int i = node * call.perNode + l;
        for (int k = 0; k < n; ++k) {
          if (k / call.perNode != node) mustLeave += m[static_cast<size_t>(i) * n + k];
        }
        railSent += railElementsSent(plan, i);
      }
      // Rail inputs also hold each rank's blocks for its own node (sent to itself on the rail): subtract them.
      size_t toSelfNode = 0;
      for (int l = 0; l < call.perNode; ++l) {
        for (int l2 = 0; l2 < call.perNode; ++l2) {
          toSelfNode += m[static_cast<size_t>(node * call.perNode + l2) * n + node * call.perNode + l];
        }
      }
      EXPECT_EQ(railSent - toSelfNode, mustLeave) << "node " << node;
    }
  }
}

TEST(SchedHierarchical, AllToAllAndUnevenAllToAllv) {
  forEachLayout([](int nodes, int perNode) {
    const int n = nodes * perNode;
    for (size_t c : kCounts) {
      HierarchicalCall call{HierCollective::kAllToAll, nodes, perNode, c};
      SCOPED_TRACE(label(call));
      checkAllToAll(call, std::vector<size_t>(static_cast<size_t>(n) * n, c));
    }
    // Uneven, zeros included, from a fixed pseudo-random sequence.
    uint32_t x = 12345u + static_cast<uint32_t>(n);
    std::vector<size_t> m(static_cast<size_t>(n) * n);
    for (size_t& v : m) {
      x = x * 1664525u + 1013904223u;
      v = (x >> 16) % 6 == 0 ? 0 : (x >> 16) % 9;
    }
    HierarchicalCall v{HierCollective::kAllToAllv, nodes, perNode, 0};
    v.counts = m;
    SCOPED_TRACE(label(v) + " (v)");
    checkAllToAll(v, m);
  });
}

TEST(SchedHierarchical, SendRecvUsesEveryRailOfTheNode) {
  forEachLayout([](int nodes, int perNode) {
    const int n = nodes * perNode;
    const std::vector<std::pair<int, int>> pairs = {{0, n - 1}, {n - 1, 0}, {n / 2, n / 2}, {0, perNode - 1}};
    for (size_t c : kCounts) {
      for (auto [s, d] : pairs) {
        HierarchicalCall call{HierCollective::kSendRecv, nodes, perNode, c};
        call.sender = s;
        call.receiver = d;
        SCOPED_TRACE(label(call) + " " + std::to_string(s) + "->" + std::to_string(d));
        HierarchicalPlan plan = planHierarchical(call);
        ASSERT_EQ(plan.error, "");
        std::vector<Mem> mem = simulate(call, plan);
        for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[d].recv[e], value(s, e));
        if (s / perNode != d / perNode && perNode > 1) {
          // Each rank of the sender's node carries about 1/perNode of the message.
          for (int l = 0; l < perNode; ++l) {
            EXPECT_LE(railElementsSent(plan, (s / perNode) * perNode + l), c / perNode + 1);
          }
        }
      }
    }
  });
}

TEST(SchedHierarchical, FlatWhenThereIsNoHierarchy) {
  HierarchicalPlan p = planHierarchical({HierCollective::kAllReduce, 1, 8, 100});
  ASSERT_EQ(p.phases.size(), 1u);
  EXPECT_EQ(p.phases[0].where, Where::kNode);
  p = planHierarchical({HierCollective::kAllGather, 4, 1, 100});
  ASSERT_EQ(p.phases.size(), 1u);
  EXPECT_EQ(p.phases[0].where, Where::kRail);
  p = planHierarchical({HierCollective::kAllReduce, 2, 4, 10});
  ASSERT_EQ(p.phases.size(), 3u);
  EXPECT_EQ(p.phases[0].where, Where::kNode);
  EXPECT_EQ(p.phases[1].where, Where::kRail);
  EXPECT_EQ(p.phases[2].where, Where::kNode);
}

TEST(SchedHierarchical, InvalidCallsSayWhy) {
  EXPECT_NE(planHierarchical({HierCollective::kAllReduce, 0, 8, 1}).error.find("at least 1"), std::string::npos);
  EXPECT_NE(planHierarchical({HierCollective::kBroadcast, 2, 2, 1, 4}).error.find("root 4"), std::string::npos);
  HierarchicalCall v{HierCollective::kAllToAllv, 2, 2, 0};
  v.counts = {1, 2, 3};
  EXPECT_NE(planHierarchical(v).error.find("n x n"), std::string::npos);
  HierarchicalCall sr{HierCollective::kSendRecv, 2, 2, 5};
  sr.receiver = 9;
  EXPECT_NE(planHierarchical(sr).error.find("receiver 9"), std::string::npos);
  EXPECT_EQ(splitEvenly(10, 4), (std::vector<size_t>{3, 3, 2, 2}));
  EXPECT_EQ(splitEvenly(2, 4), (std::vector<size_t>{1, 1, 0, 0}));
}

// A caller numbered round robin (its rank u on node u % N, local index u / N): plan rank p is its rank blockOf[p],
// and the blocks of AllGather / Gather output and ReduceScatter / Scatter input follow the caller's numbering.
TEST(SchedHierarchical, BlockOfKeepsTheCallersBlockOrder) {
  for (auto [nodes, perNode] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}, std::pair{4, 3}}) {
    const int n = nodes * perNode;
    std::vector<int> blockOf(static_cast<size_t>(n));
    for (int p = 0; p < n; ++p) blockOf[static_cast<size_t>(p)] = (p % perNode) * nodes + p / perNode;
    for (size_t c : {size_t{1}, size_t{7}}) {
      HierarchicalCall ag{HierCollective::kAllGather, nodes, perNode, c};
      ag.blockOf = blockOf;
      SCOPED_TRACE(label(ag));
      HierarchicalPlan plan = planHierarchical(ag);
      ASSERT_EQ(plan.error, "");
      std::vector<Mem> mem = simulate(ag, plan);
      for (int r = 0; r < n; ++r) {
        for (int q = 0; q < n; ++q) {  // plan rank q's block sits at the caller's rank blockOf[q]
          for (size_t e = 0; e < c; ++e) ASSERT_EQ(mem[r].recv[blockOf[q] * c + e], value(q, e));
        }
      }
      HierarchicalCall rs{HierCollective::kReduceScatter, nodes, perNode, c};
      rs.blockOf = blockOf;
      plan = planHierarchical(rs);
      ASSERT_EQ(plan.error, "");
      mem = simulate(rs, plan);
      for (int r = 0; r < n; ++r) {
        for (size_t e = 0; e < c; ++e) {
          int64_t want = 0;
          for (int q = 0; q < n; ++q) want += value(q, blockOf[r] * c + e);
          ASSERT_EQ(mem[r].recv[e], want) << "rank " << r << " element " << e;
        }
      }
    }
  }
  HierarchicalCall bad{HierCollective::kAllGather, 2, 2, 1};
  bad.blockOf = {0, 0, 1, 2};
  EXPECT_NE(planHierarchical(bad).error.find("permutation"), std::string::npos);
}
