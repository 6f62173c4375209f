// The phases of a hierarchical collective across nodes (issue 25 item 2): what runs inside each node (on conccl's
// copy engines) and what runs across nodes between the ranks of one local index, "the rail" (on NCCL), and on which
// elements. Pure C++, no CUDA types, proven by simulation on host arrays (tests/unit/test_sched_hierarchical.cc). The
// NCCL drop-in runs these plans for its communicators across hosts (src/nccl/hier_steps.h turns one rank's share into
// NCCL-shaped calls, src/nccl/shim_hierarchical.cc issues them). docs/hierarchical.md says when such a plan pays.
//
// Ranks are node-major: rank = node * perNode + local (a caller numbered otherwise maps its ranks to these, and
// gives its block order as HierarchicalCall::blockOf). Sizes are in elements (the caller multiplies by the datatype's
// size). Every rank has three buffers: the call's send and receive buffers, and a scratch area of
// HierarchicalPlan::scratchCount elements. A plan is a list of phases run one after the other; the group
// operations of one phase involve disjoint ranks and run at the same time.
//
// Decompositions (G ranks per node, N nodes, c elements):
//   AllReduce     ReduceScatter in each node (rank l gets piece l of c, pieces as even as the count allows)
//                 -> AllReduce of piece l on rail l -> AllGather in each node. The rails carry c/G each.
//   AllGather     AllGather of c on each rail -> AllGather of the rail's N c in each node -> a local reorder to
//                 rank order (rail first: each rail carries only its own ranks' blocks).
//   ReduceScatter the mirror image: a local reorder -> ReduceScatter in each node -> ReduceScatter on each rail.
//   Broadcast     Scatter in the root's node -> Broadcast of piece l on rail l -> AllGather in each node (the root's
//                 node's G NICs carry c/G each instead of one NIC carrying c).
//   Reduce        ReduceScatter in each node -> Reduce of piece l on rail l to the root's node -> Gather in the
//                 root's node to the root.
//   AllToAll(v)   local reorder -> AllToAll in each node (rank l sends local m what every node's rank m gets from
//                 it) -> local reorder -> AllToAll on each rail (one aggregated message per pair of nodes).
//   Gather        Gather on each rail to the root's node -> Gather in the root's node -> a local reorder.
//   Scatter       the mirror image.
//   Send/Recv     inside a node: one SendRecv. Across nodes: Scatter in the sender's node -> SendRecv of piece l
//                 on rail l -> Gather in the receiver's node (G NICs instead of one).
// With one node, or one rank per node, a plan is the flat collective in one phase.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace conccl::sched {

enum class HierCollective {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllv,
  kGather,
  kScatter,
  kSendRecv,
};
const char* hierCollectiveName(HierCollective c);

struct HierarchicalCall {
  HierCollective collective = HierCollective::kAllReduce;
  int nodes = 1;
  int perNode = 1;
  // AllReduce / Broadcast / Reduce: the buffer; AllGather: each rank's input (output n * count); ReduceScatter: each
  // rank's output (input n * count); AllToAll: per pair; Gather / Scatter: per rank; SendRecv: the message.
  size_t count = 0;
  int root = 0;  // Broadcast, Reduce, Gather, Scatter
  // AllToAllv: counts[i * n + j] elements from rank i to rank j (send blocks in destination order, receive blocks
  // in source order, packed). The plan needs the whole matrix, which a rank of NCCL's API knows only its row of.
  std::vector<size_t> counts;
  int sender = 0, receiver = 0;  // SendRecv
  // AllGather, ReduceScatter, Gather, Scatter: blockOf[p] = the block index (in the send buffer of ReduceScatter and
  // Scatter, the receive buffer of AllGather and Gather) of rank p's block, when the caller's ranks are not numbered
  // node-major (the caller's rank of plan rank p). Empty: blockOf[p] = p. Ranks, roots and members stay plan ranks.
  // Only plans with 2+ nodes of 2+ ranks take one (the flat plans keep the group's order).
  std::vector<int> blockOf;
};

enum class Where { kNode, kRail, kLocal };  // inside a node (copy engines), across nodes on a rail (NCCL), on one rank
const char* whereName(Where w);

enum class HierBuffer { kSend, kRecv, kScratchBuffer };  // kScratchBuffer: the communicator's scratch (not sched::kScratch)

struct Region {
  HierBuffer buffer = HierBuffer::kSend;
  size_t offset = 0;  // elements
  size_t count = 0;
  friend bool operator==(const Region&, const Region&) = default;
};

// One collective among `members` (global ranks, in the group's rank order). For member i: in[i] is what it
// contributes, out[i] where its result goes (an empty region when it gets nothing). Semantics (sum for reductions):
//   kAllReduce     out[i] = sum_j in[j]                                    (all of one count)
//   kReduceScatter out[i] = sum_j in[j][displ(i), +counts[i]]              (in[j].count = sum counts)
//   kAllGather     out[i][displ(j), +counts[j]] = in[j]                    (in[j].count = counts[j])
//   kBroadcast     out[i] = in[root]
//   kReduce        out[root] = sum_j in[j]
//   kGather        out[root][displ(j), +counts[j]] = in[j]
//   kScatter       out[j] = in[root][displ(j), +counts[j]]
//   kAllToAll      out[j][rdispl(j, i), +m[i][j]] = in[i][sdispl(i, j), +m[i][j]], m = counts as an m x m matrix,
//                  sdispl(i, j) = sum_{k<j} m[i][k], rdispl(j, i) = sum_{k<i} m[k][j]
//   kSendRecv      members {sender, receiver}: out[1] = in[0]
//   kCopy          one member: out[0] = in[0]
// displ(i) = counts[0] + ... + counts[i-1]. Results are computed from the inputs as they were before the operation,
// so an output may overlap an input (in place).
enum class GroupKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kGather, kScatter, kAllToAll,
                       kSendRecv, kCopy };
const char* groupKindName(GroupKind k);

struct GroupOp {
  GroupKind kind = GroupKind::kCopy;
  std::vector<int> members;
  int root = 0;                 // index into members
  std::vector<Region> in, out;  // [member]
  std::vector<size_t> counts;   // [member], or [member * m + member] for kAllToAll
};

struct Phase {
  Where where = Where::kNode;
  std::string name;              // e.g. "reduce-scatter in each node"
  std::vector<GroupOp> ops;      // disjoint groups, concurrent
};

struct HierarchicalPlan {
  std::string error;             // non-empty: the call is invalid (nothing else is set)
  std::vector<Phase> phases;
  size_t sendCount = 0, recvCount = 0;  // elements of each rank's buffers the call uses (the largest rank's)
  size_t scratchCount = 0;              // elements of scratch per rank
};

// The plan for `call`; error set for nodes or perNode < 1, a root / sender / receiver out of range, an
// AllToAllv matrix of the wrong size, or a blockOf that is not a permutation of the ranks.
HierarchicalPlan planHierarchical(const HierarchicalCall& call);

// Splits `count` into `parts` pieces as even as possible (the first count % parts are one larger).
std::vector<size_t> splitEvenly(size_t count, int parts);

}  // namespace conccl::sched
