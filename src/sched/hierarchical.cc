#include "sched/hierarchical.h"

#include <algorithm>
#include <numeric>

namespace conccl::sched {
namespace {

// The ranks and buffers of one call, and the phases being built.
class Planner {
 public:
  Planner(const HierarchicalCall& call, HierarchicalPlan* plan)
      : call_(call), plan_(plan), N_(call.nodes), G_(call.perNode), n_(call.nodes * call.perNode) {}

  int rank(int node, int local) const { return node * G_ + local; }
  // Where rank r's block sits in a buffer of blocks in the caller's rank order.
  size_t block(int r) const {
    return call_.blockOf.empty() ? static_cast<size_t>(r) : static_cast<size_t>(call_.blockOf[static_cast<size_t>(r)]);
  }
  std::vector<int> node(int k) const {
    std::vector<int> v;
    for (int l = 0; l < G_; ++l) v.push_back(rank(k, l));
    return v;
  }
  std::vector<int> rail(int l) const {
    std::vector<int> v;
    for (int k = 0; k < N_; ++k) v.push_back(rank(k, l));
    return v;
  }
  std::vector<int> all() const {
    std::vector<int> v(static_cast<size_t>(n_));
    std::iota(v.begin(), v.end(), 0);
    return v;
  }
  // The flat collective's scope: inside the node with one node, on the rail with one rank per node.
  Where flatWhere() const { return N_ == 1 ? Where::kNode : Where::kRail; }
  bool flat() const { return N_ == 1 || G_ == 1; }

  Phase& phase(Where where, std::string name) {
    plan_->phases.push_back(Phase{where, std::move(name), {}});
    return plan_->phases.back();
  }

  // A group operation whose members all contribute `in` and receive into `out` (same regions on every member).
  static GroupOp uniform(GroupKind kind, std::vector<int> members, int root, Region in, Region out,
                         std::vector<size_t> counts = {}) {
    GroupOp op;
    op.kind = kind;
    op.root = root;
    op.in.assign(members.size(), in);
    op.out.assign(members.size(), out);
    op.members = std::move(members);
    op.counts = std::move(counts);
    return op;
  }
  static void copy(Phase& p, int r, Region from, Region to) {
    if (from.count == 0) return;
    GroupOp op;
    op.kind = GroupKind::kCopy;
    op.members = {r};
    op.in = {from};
    op.out = {to};
    p.ops.push_back(op);
  }

  void allReduce();
  void allGather();
  void reduceScatter();
  void broadcast();
  void reduce();
  void allToAll(const std::vector<size_t>& m);
  void gather();
  void scatter();
  void sendRecv();

 private:
  const HierarchicalCall& call_;
  HierarchicalPlan* plan_;
  const int N_, G_, n_;
};

constexpr Region R(HierBuffer b, size_t offset, size_t count) { return Region{b, offset, count}; }
constexpr HierBuffer kS = HierBuffer::kSend, kR = HierBuffer::kRecv, kT = HierBuffer::kScratchBuffer;

std::vector<size_t> prefix(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

void Planner::allReduce() {
  const size_t c = call_.count;
  plan_->sendCount = plan_->recvCount = c;
  if (flat()) {
    phase(flatWhere(), "all-reduce").ops.push_back(uniform(GroupKind::kAllReduce, all(), 0, R(kS, 0, c), R(kR, 0, c)));
    return;
  }
  const std::vector<size_t> b = splitEvenly(c, G_), d = prefix(b);
  Phase& p1 = phase(Where::kNode, "reduce-scatter in each node");
  for (int k = 0; k < N_; ++k) {
    GroupOp op = uniform(GroupKind::kReduceScatter, node(k), 0, R(kS, 0, c), {}, b);
    for (int l = 0; l < G_; ++l) op.out[l] = R(kR, d[l], b[l]);
    p1.ops.push_back(op);
  }
  Phase& p2 = phase(Where::kRail, "all-reduce of piece l on rail l");
  for (int l = 0; l < G_; ++l) {
    p2.ops.push_back(uniform(GroupKind::kAllReduce, rail(l), 0, R(kR, d[l], b[l]), R(kR, d[l], b[l])));
  }
  Phase& p3 = phase(Where::kNode, "all-gather in each node");
  for (int k = 0; k < N_; ++k) {
    GroupOp op = uniform(GroupKind::kAllGather, node(k), 0, {}, R(kR, 0, c), b);
    for (int l = 0; l < G_; ++l) op.in[l] = R(kR, d[l], b[l]);
    p3.ops.push_back(op);
  }
}

void Planner::allGather() {
  const size_t c = call_.count, Nc = N_ * c, nc = n_ * c;
  plan_->sendCount = c;
  plan_->recvCount = nc;
  if (flat()) {
    phase(flatWhere(), "all-gather")
        .ops.push_back(uniform(GroupKind::kAllGather, all(), 0, R(kS, 0, c), R(kR, 0, nc),
                               std::vector<size_t>(static_cast<size_t>(n_), c)));
    return;
  }
  plan_->scratchCount = Nc + nc;
  Phase& p1 = phase(Where::kRail, "all-gather on each rail");
  for (int l = 0; l < G_; ++l) {
    p1.ops.push_back(uniform(GroupKind::kAllGather, rail(l), 0, R(kS, 0, c), R(kT, 0, Nc),
                             std::vector<size_t>(static_cast<size_t>(N_), c)));
  }
  Phase& p2 = phase(Where::kNode, "all-gather of the rails' blocks in each node");
  for (int k = 0; k < N_; ++k) {
    p2.ops.push_back(uniform(GroupKind::kAllGather, node(k), 0, R(kT, 0, Nc), R(kT, Nc, nc),
                             std::vector<size_t>(static_cast<size_t>(G_), Nc)));
  }
  // Scratch holds block (local l, node k) at Nc + (l N + k) c; the output wants it at (k G + l) c.
  Phase& p3 = phase(Where::kLocal, "reorder to rank order");
  for (int r = 0; r < n_; ++r) {
    for (int l = 0; l < G_; ++l) {
      for (int k = 0; k < N_; ++k) copy(p3, r, R(kT, Nc + (l * N_ + k) * c, c), R(kR, block(rank(k, l)) * c, c));
    }
  }
}

void Planner::reduceScatter() {
  const size_t c = call_.count, Nc = N_ * c, nc = n_ * c;
  plan_->sendCount = nc;
  plan_->recvCount = c;
  if (flat()) {
    phase(flatWhere(), "reduce-scatter")
        .ops.push_back(uniform(GroupKind::kReduceScatter, all(), 0, R(kS, 0, nc), R(kR, 0, c),
                               std::vector<size_t>(static_cast<size_t>(n_), c)));
    return;
  }
  plan_->scratchCount = nc + Nc;
  Phase& p0 = phase(Where::kLocal, "reorder by rail");
  for (int r = 0; r < n_; ++r) {
    for (int k = 0; k < N_; ++k) {
      for (int l = 0; l < G_; ++l) copy(p0, r, R(kS, block(rank(k, l)) * c, c), R(kT, (l * N_ + k) * c, c));
    }
  }
  Phase& p1 = phase(Where::kNode, "reduce-scatter in each node");
  for (int k = 0; k < N_; ++k) {
    p1.ops.push_back(uniform(GroupKind::kReduceScatter, node(k), 0, R(kT, 0, nc), R(kT, nc, Nc),
                             std::vector<size_t>(static_cast<size_t>(G_), Nc)));
  }
  Phase& p2 = phase(Where::kRail, "reduce-scatter on each rail");
  for (int l = 0; l < G_; ++l) {
    p2.ops.push_back(uniform(GroupKind::kReduceScatter, rail(l), 0, R(kT, nc, Nc), R(kR, 0, c),
                             std::vector<size_t>(static_cast<size_t>(N_), c)));
  }
}

void Planner::broadcast() {
  const size_t c = call_.count;
  plan_->sendCount = plan_->recvCount = c;
  if (flat()) {
    phase(flatWhere(), "broadcast")
        .ops.push_back(uniform(GroupKind::kBroadcast, all(), call_.root, R(kS, 0, c), R(kR, 0, c)));
    return;
  }
  const int rn = call_.root / G_, rl = call_.root % G_;
  const std::vector<size_t> b = splitEvenly(c, G_), d = prefix(b);
  Phase& p1 = phase(Where::kNode, "scatter in the root's node");
  GroupOp sc = uniform(GroupKind::kScatter, node(rn), rl, R(kS, 0, c), {}, b);
  for (int l = 0; l < G_; ++l) sc.out[l] = R(kR, d[l], b[l]);
  p1.ops.push_back(sc);
  Phase& p2 = phase(Where::kRail, "broadcast of piece l on rail l");
  for (int l = 0; l < G_; ++l) {
    p2.ops.push_back(uniform(GroupKind::kBroadcast, rail(l), rn, R(kR, d[l], b[l]), R(kR, d[l], b[l])));
  }
  Phase& p3 = phase(Where::kNode, "all-gather in each node");
  for (int k = 0; k < N_; ++k) {
    GroupOp op = uniform(GroupKind::kAllGather, node(k), 0, {}, R(kR, 0, c), b);
    for (int l = 0; l < G_; ++l) op.in[l] = R(kR, d[l], b[l]);
    p3.ops.push_back(op);
  }
}

void Planner::reduce() {
  const size_t c = call_.count;
  plan_->sendCount = plan_->recvCount = c;
  if (flat()) {
    GroupOp op = uniform(GroupKind::kReduce, all(), call_.root, R(kS, 0, c), {});
    op.out[static_cast<size_t>(call_.root)] = R(kR, 0, c);
    phase(flatWhere(), "reduce").ops.push_back(op);
    return;
  }
  const int rn = call_.root / G_, rl = call_.root % G_;
  const std::vector<size_t> b = splitEvenly(c, G_);
  plan_->scratchCount = b[0];
  Phase& p1 = phase(Where::kNode, "reduce-scatter in each node");
  for (int k = 0; k < N_; ++k) {
    GroupOp op = uniform(GroupKind::kReduceScatter, node(k), 0, R(kS, 0, c), {}, b);
    for (int l = 0; l < G_; ++l) op.out[l] = R(kT, 0, b[l]);
    p1.ops.push_back(op);
  }
  Phase& p2 = phase(Where::kRail, "reduce of piece l on rail l to the root's node");
  for (int l = 0; l < G_; ++l) {
    GroupOp op = uniform(GroupKind::kReduce, rail(l), rn, R(kT, 0, b[l]), {});
    op.out[static_cast<size_t>(rn)] = R(kT, 0, b[l]);
    p2.ops.push_back(op);
  }
  Phase& p3 = phase(Where::kNode, "gather in the root's node to the root");
  GroupOp g = uniform(GroupKind::kGather, node(rn), rl, {}, {}, b);
  for (int l = 0; l < G_; ++l) g.in[l] = R(kT, 0, b[l]);
  g.out[static_cast<size_t>(rl)] = R(kR, 0, c);
  p3.ops.push_back(g);
}

void Planner::allToAll(const std::vector<size_t>& m) {
  auto M = [&](int i, int j) { return m[static_cast<size_t>(i) * n_ + j]; };
  size_t maxSend = 0, maxRecv = 0;
  for (int i = 0; i < n_; ++i) {
    size_t row = 0, col = 0;
    for (int j = 0; j < n_; ++j) {
      row += M(i, j);
      col += M(j, i);
    }
    maxSend = std::max(maxSend, row);
    maxRecv = std::max(maxRecv, col);
  }
  plan_->sendCount = maxSend;
  plan_->recvCount = maxRecv;
  if (flat()) {
    GroupOp op;
    op.kind = GroupKind::kAllToAll;
    op.members = all();
    op.counts = m;
    for (int i = 0; i < n_; ++i) {
      size_t row = 0, col = 0;
      for (int j = 0; j < n_; ++j) {
        row += M(i, j);
        col += M(j, i);
      }
      op.in.push_back(R(kS, 0, row));
      op.out.push_back(R(kR, 0, col));
    }
    phase(flatWhere(), "all-to-all").ops.push_back(op);
    return;
  }
  // Scratch: A = the send blocks by destination local index, then node; B = what a rank gets in its node, by source
  // local index, then destination node; C = B by destination node, then source local index (what its rail sends).
  size_t maxB = 0;
  for (int a = 0; a < N_; ++a) {
    for (int mm = 0; mm < G_; ++mm) {
      size_t got = 0;
      for (int l = 0; l < G_; ++l) {
        for (int b = 0; b < N_; ++b) got += M(rank(a, l), rank(b, mm));
      }
      maxB = std::max(maxB, got);
    }
  }
  const size_t offB = maxSend, offC = maxSend + maxB;
  plan_->scratchCount = maxSend + 2 * maxB;
  Phase& p0 = phase(Where::kLocal, "reorder by destination local index");
  for (int i = 0; i < n_; ++i) {
    std::vector<size_t> sdispl(static_cast<size_t>(n_), 0);
    for (int j = 1; j < n_; ++j) sdispl[j] = sdispl[j - 1] + M(i, j - 1);
    size_t at = 0;
    for (int mm = 0; mm < G_; ++mm) {
      for (int b = 0; b < N_; ++b) {
        const int j = rank(b, mm);
        copy(p0, i, R(kS, sdispl[j], M(i, j)), R(kT, at, M(i, j)));
        at += M(i, j);
      }
    }
  }
  Phase& p1 = phase(Where::kNode, "all-to-all in each node");
  for (int a = 0; a < N_; ++a) {
    GroupOp op;
    op.kind = GroupKind::kAllToAll;
    op.members = node(a);
    op.counts.assign(static_cast<size_t>(G_) * G_, 0);
    for (int l = 0; l < G_; ++l) {
      for (int mm = 0; mm < G_; ++mm) {
        for (int b = 0; b < N_; ++b) op.counts[static_cast<size_t>(l) * G_ + mm] += M(rank(a, l), rank(b, mm));
      }
    }
    for (int x = 0; x < G_; ++x) {
      size_t row = 0, col = 0;
      for (int y = 0; y < G_; ++y) {
        row += op.counts[static_cast<size_t>(x) * G_ + y];
        col += op.counts[static_cast<size_t>(y) * G_ + x];
      }
      op.in.push_back(R(kT, 0, row));
      op.out.push_back(R(kT, offB, col));
    }
    p1.ops.push_back(op);
  }
  Phase& p2 = phase(Where::kLocal, "reorder by destination node");
  for (int a = 0; a < N_; ++a) {
    for (int mm = 0; mm < G_; ++mm) {
      const int me = rank(a, mm);
      // B: for l, for b: M((a,l), (b,mm)). C: for b, for l.
      auto offsetInB = [&](int l, int b) {
        size_t o = 0;
        for (int l2 = 0; l2 < G_; ++l2) {
          for (int b2 = 0; b2 < N_; ++b2) {
            if (l2 == l && b2 == b) return o;
            o += M(rank(a, l2), rank(b2, mm));
          }
        }
        return o;
      };
      size_t at = 0;
      for (int b = 0; b < N_; ++b) {
        for (int l = 0; l < G_; ++l) {
          const size_t cnt = M(rank(a, l), rank(b, mm));
          copy(p2, me, R(kT, offB + offsetInB(l, b), cnt), R(kT, offC + at, cnt));
          at += cnt;
        }
      }
    }
  }
  Phase& p3 = phase(Where::kRail, "all-to-all on each rail");
  for (int mm = 0; mm < G_; ++mm) {
    GroupOp op;
    op.kind = GroupKind::kAllToAll;
    op.members = rail(mm);
    op.counts.assign(static_cast<size_t>(N_) * N_, 0);
    for (int a = 0; a < N_; ++a) {
      for (int b = 0; b < N_; ++b) {
        for (int l = 0; l < G_; ++l) op.counts[static_cast<size_t>(a) * N_ + b] += M(rank(a, l), rank(b, mm));
      }
    }
    for (int x = 0; x < N_; ++x) {
      size_t row = 0, col = 0;
      for (int y = 0; y < N_; ++y) {
        row += op.counts[static_cast<size_t>(x) * N_ + y];
        col += op.counts[static_cast<size_t>(y) * N_ + x];
      }
      op.in.push_back(R(kT, offC, row));
      op.out.push_back(R(kR, 0, col));
    }
    p3.ops.push_back(op);
  }
}

void Planner::gather() {
  const size_t c = call_.count, Nc = N_ * c, nc = n_ * c;
  plan_->sendCount = c;
  plan_->recvCount = nc;
  if (flat()) {
    GroupOp op = uniform(GroupKind::kGather, all(), call_.root, R(kS, 0, c), {},
                         std::vector<size_t>(static_cast<size_t>(n_), c));
    op.out[static_cast<size_t>(call_.root)] = R(kR, 0, nc);
    phase(flatWhere(), "gather").ops.push_back(op);
    return;
  }
  const int rn = call_.root / G_, rl = call_.root % G_;
  plan_->scratchCount = Nc + nc;
  Phase& p1 = phase(Where::kRail, "gather on each rail to the root's node");
  for (int l = 0; l < G_; ++l) {
    GroupOp op = uniform(GroupKind::kGather, rail(l), rn, R(kS, 0, c), {},
                         std::vector<size_t>(static_cast<size_t>(N_), c));
    op.out[static_cast<size_t>(rn)] = R(kT, 0, Nc);
    p1.ops.push_back(op);
  }
  Phase& p2 = phase(Where::kNode, "gather in the root's node to the root");
  GroupOp g = uniform(GroupKind::kGather, node(rn), rl, R(kT, 0, Nc), {},
                      std::vector<size_t>(static_cast<size_t>(G_), Nc));
  g.out[static_cast<size_t>(rl)] = R(kT, Nc, nc);
  p2.ops.push_back(g);
  Phase& p3 = phase(Where::kLocal, "reorder to rank order at the root");
  for (int l = 0; l < G_; ++l) {
    for (int k = 0; k < N_; ++k) {
      copy(p3, call_.root, R(kT, Nc + (l * N_ + k) * c, c), R(kR, block(rank(k, l)) * c, c));
    }
  }
}

void Planner::scatter() {
  const size_t c = call_.count, Nc = N_ * c, nc = n_ * c;
  plan_->sendCount = nc;
  plan_->recvCount = c;
  if (flat()) {
    phase(flatWhere(), "scatter")
        .ops.push_back(uniform(GroupKind::kScatter, all(), call_.root, R(kS, 0, nc), R(kR, 0, c),
                               std::vector<size_t>(static_cast<size_t>(n_), c)));
    return;
  }
  const int rn = call_.root / G_, rl = call_.root % G_;
  plan_->scratchCount = nc + Nc;
  Phase& p0 = phase(Where::kLocal, "reorder by rail at the root");
  for (int k = 0; k < N_; ++k) {
    for (int l = 0; l < G_; ++l) copy(p0, call_.root, R(kS, block(rank(k, l)) * c, c), R(kT, (l * N_ + k) * c, c));
  }
  Phase& p1 = phase(Where::kNode, "scatter in the root's node");
  p1.ops.push_back(uniform(GroupKind::kScatter, node(rn), rl, R(kT, 0, nc), R(kT, nc, Nc),
                           std::vector<size_t>(static_cast<size_t>(G_), Nc)));
  Phase& p2 = phase(Where::kRail, "scatter on each rail from the root's node");
  for (int l = 0; l < G_; ++l) {
    p2.ops.push_back(uniform(GroupKind::kScatter, rail(l), rn, R(kT, nc, Nc), R(kR, 0, c),
                             std::vector<size_t>(static_cast<size_t>(N_), c)));
  }
}

void Planner::sendRecv() {
  const size_t c = call_.count;
  const int s = call_.sender, d = call_.receiver;
  plan_->sendCount = plan_->recvCount = c;
  const int sn = s / G_, sl = s % G_, dn = d / G_, dl = d % G_;
  if (s == d) {
    copy(phase(Where::kLocal, "copy"), s, R(kS, 0, c), R(kR, 0, c));
    return;
  }
  if (sn == dn || G_ == 1) {
    GroupOp op;
    op.kind = GroupKind::kSendRecv;
    op.members = {s, d};
    op.in = {R(kS, 0, c), Region{kS, 0, 0}};
    op.out = {Region{kR, 0, 0}, R(kR, 0, c)};
    phase(sn == dn ? Where::kNode : Where::kRail, "send/recv").ops.push_back(op);
    return;
  }
  const std::vector<size_t> b = splitEvenly(c, G_);
  plan_->scratchCount = b[0];
  Phase& p1 = phase(Where::kNode, "scatter in the sender's node");
  GroupOp sc = uniform(GroupKind::kScatter, node(sn), sl, R(kS, 0, c), {}, b);
  for (int l = 0; l < G_; ++l) sc.out[l] = R(kT, 0, b[l]);
  p1.ops.push_back(sc);
  Phase& p2 = phase(Where::kRail, "send/recv of piece l on rail l");
  for (int l = 0; l < G_; ++l) {
    GroupOp op;
    op.kind = GroupKind::kSendRecv;
    op.members = {rank(sn, l), rank(dn, l)};
    op.in = {R(kT, 0, b[l]), Region{kT, 0, 0}};
    op.out = {Region{kT, 0, 0}, R(kT, 0, b[l])};
    p2.ops.push_back(op);
  }
  Phase& p3 = phase(Where::kNode, "gather in the receiver's node");
  GroupOp g = uniform(GroupKind::kGather, node(dn), dl, {}, {}, b);
  for (int l = 0; l < G_; ++l) g.in[l] = R(kT, 0, b[l]);
  g.out[static_cast<size_t>(dl)] = R(kR, 0, c);
  p3.ops.push_back(g);
}

}  // namespace

const char* hierCollectiveName(HierCollective c) {
  switch (c) {
    case HierCollective::kAllReduce: return "all_reduce";
    case HierCollective::kAllGather: return "all_gather";
    case HierCollective::kReduceScatter: return "reduce_scatter";
    case HierCollective::kBroadcast: return "broadcast";
    case HierCollective::kReduce: return "reduce";
    case HierCollective::kAllToAll: return "all_to_all";
    case HierCollective::kAllToAllv: return "all_to_allv";
    case HierCollective::kGather: return "gather";
    case HierCollective::kScatter: return "scatter";
    case HierCollective::kSendRecv: return "send_recv";
  }
  return "invalid";
}

const char* whereName(Where w) {
  switch (w) {
    case Where::kNode: return "node";
    case Where::kRail: return "rail";
    case Where::kLocal: return "local";
  }
  return "invalid";
}

const char* groupKindName(GroupKind k) {
  switch (k) {
    case GroupKind::kAllReduce: return "all_reduce";
    case GroupKind::kReduceScatter: return "reduce_scatter";
    case GroupKind::kAllGather: return "all_gather";
    case GroupKind::kBroadcast: return "broadcast";
    case GroupKind::kReduce: return "reduce";
    case GroupKind::kGather: return "gather";
    case GroupKind::kScatter: return "scatter";
    case GroupKind::kAllToAll: return "all_to_all";
    case GroupKind::kSendRecv: return "send_recv";
    case GroupKind::kCopy: return "copy";
  }
  return "invalid";
}

std::vector<size_t> splitEvenly(size_t count, int parts) {
  std::vector<size_t> out(static_cast<size_t>(std::max(parts, 0)), parts > 0 ? count / parts : 0);
  for (size_t i = 0; parts > 0 && i < count % static_cast<size_t>(parts); ++i) ++out[i];
  return out;
}

HierarchicalPlan planHierarchical(const HierarchicalCall& call) {
  HierarchicalPlan plan;
  if (call.nodes < 1 || call.perNode < 1) {
    plan.error = "nodes (" + std::to_string(call.nodes) + ") and ranks per node (" + std::to_string(call.perNode) +
                 ") must be at least 1";
    return plan;
  }
  const int n = call.nodes * call.perNode;
  auto inRange = [n](int r) { return r >= 0 && r < n; };
  const bool rooted = call.collective == HierCollective::kBroadcast || call.collective == HierCollective::kReduce ||
                      call.collective == HierCollective::kGather || call.collective == HierCollective::kScatter;
  if (rooted && !inRange(call.root)) {
    plan.error = "root " + std::to_string(call.root) + " is not one of the " + std::to_string(n) + " ranks";
    return plan;
  }
  if (call.collective == HierCollective::kSendRecv && (!inRange(call.sender) || !inRange(call.receiver))) {
    plan.error = "sender " + std::to_string(call.sender) + " or receiver " + std::to_string(call.receiver) +
                 " is not one of the " + std::to_string(n) + " ranks";
    return plan;
  }
  if (call.collective == HierCollective::kAllToAllv && call.counts.size() != static_cast<size_t>(n) * n) {
    plan.error = "all_to_allv needs an n x n matrix of counts (" + std::to_string(n * n) + "), got " +
                 std::to_string(call.counts.size());
    return plan;
  }
  if (!call.blockOf.empty()) {
    std::vector<bool> seen(static_cast<size_t>(n), false);
    bool ok = call.blockOf.size() == static_cast<size_t>(n);
    for (size_t i = 0; ok && i < call.blockOf.size(); ++i) {
      const int b = call.blockOf[i];
      ok = inRange(b) && !seen[static_cast<size_t>(b)];
      if (ok) seen[static_cast<size_t>(b)] = true;
    }
    if (!ok) {
      plan.error = "blockOf must be a permutation of the " + std::to_string(n) + " ranks";
      return plan;
    }
    if (call.nodes == 1 || call.perNode == 1) {
      plan.error = "blockOf needs 2+ nodes of 2+ ranks (a flat plan keeps the group's rank order)";
      return plan;
    }
  }
  Planner p(call, &plan);
  switch (call.collective) {
    case HierCollective::kAllReduce: p.allReduce(); break;
    case HierCollective::kAllGather: p.allGather(); break;
    case HierCollective::kReduceScatter: p.reduceScatter(); break;
    case HierCollective::kBroadcast: p.broadcast(); break;
    case HierCollective::kReduce: p.reduce(); break;
    case HierCollective::kAllToAll: p.allToAll(std::vector<size_t>(static_cast<size_t>(n) * n, call.count)); break;
    case HierCollective::kAllToAllv: p.allToAll(call.counts); break;
    case HierCollective::kGather: p.gather(); break;
    case HierCollective::kScatter: p.scatter(); break;
    case HierCollective::kSendRecv: p.sendRecv(); break;
  }
  return plan;
}

}  // namespace conccl::sched
