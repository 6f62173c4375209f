// The drop-in's hierarchical collectives (docs/hierarchical.md), pure part: where each rank of a communicator that
// spans hosts sits (node, local index), and one rank's share of a hierarchical plan (sched/hierarchical.h) as the
// NCCL-shaped calls the shim issues, in order: collectives on the intra-node conccl communicator, collectives on the
// rail's real-NCCL communicator, and local copies (rows of equal blocks, so one cudaMemcpy2DAsync each). No CUDA or
// NCCL types: tested on the CPU (tests/nccl/test_nccl_hier_steps.cc runs the steps of every rank on host arrays).
#ifndef CONCCL_NCCL_HIER_STEPS_H_
#define CONCCL_NCCL_HIER_STEPS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sched/hierarchical.h"

namespace conccl::nccl {

// Nodes in the order of their lowest rank; local index = order of a rank among its host's ranks. Every rank
// computes the same layout from the same host table (the rendezvous's). The plan's rank of (node, local) is
// node * perNode + local; a communicator whose ranks are numbered that way is "node-major".
struct HierLayout {
  int nodes = 0;
  int perNode = 0;
  std::vector<int> node, local;  // [communicator rank]
  std::vector<int> planRank;     // [communicator rank]
  std::vector<int> commRank;     // [plan rank]
  bool nodeMajor = false;
  std::string error;  // non-empty: no even layout (ranks per host differ, or an empty table); nothing else is set
};
HierLayout hierLayout(const std::vector<uint64_t>& hosts);

// Whether a layout runs hierarchically at all: 2+ nodes and 2+ ranks on each (one rank per node is the flat
// collective on the rail, i.e. NCCL alone).
inline bool hierarchicalLayout(const HierLayout& l) { return l.error.empty() && l.nodes >= 2 && l.perNode >= 2; }

enum class HierComm { kIntra, kRail, kLocal };
const char* hierCommName(HierComm c);

// One call of one rank. Regions are in elements of the call's datatype (sched::Region: send, recv or scratch).
//   kAllReduce / kBroadcast / kReduce: in -> out, `count` elements (Reduce: out only at the root).
//   kReduceScatter: in holds groupSize * count, out gets count.      kAllGather: in count, out groupSize * count.
//   kScatter / kGather: count per rank (the root's in / out hold groupSize * count).
//   kAllToAll: count per pair.    kSendRecv: `send` ? in -> peer : peer -> out, count elements.
//   kCopy: `rows` blocks of `count` elements, block i from in.offset + i * srcPitch to out.offset + i * dstPitch.
// root / peer: ranks in the step's communicator (intra: local index; rail: node index).
struct HierStep {
  int phase = 0;
  HierComm comm = HierComm::kLocal;
  sched::GroupKind kind = sched::GroupKind::kCopy;
  sched::Region in, out;
  size_t count = 0;
  int root = 0;
  int peer = -1;
  bool send = false;
  size_t rows = 1, srcPitch = 0, dstPitch = 0;
};

struct HierProgram {
  std::string error;  // non-empty: the plan has an operation NCCL's API cannot express (e.g. uneven pieces)
  std::vector<HierStep> steps;
  size_t scratchCount = 0;  // elements
  int phases = 0;
};

// The steps of plan rank `planRank` (G ranks per node), in the plan's phase order. A group operation whose members
// would need different counts (splitEvenly of a count G does not divide) cannot be one NCCL call: error set, the
// caller runs the call flat. Every operation of the plan is checked, not only this rank's, so the error is the same
// on every rank.
HierProgram hierProgram(const sched::HierarchicalPlan& plan, int planRank, int perNode);

// Pipelining in chunks. The call is cut into at most `chunks` pieces of a multiple of `multiple` elements, none below
// `minChunk` elements (the last takes the rest); {count} when it cannot be cut (count not a multiple, or too small).
std::vector<size_t> hierChunkCounts(size_t count, int multiple, int chunks, size_t minChunk);
// The programs of plan rank `planRank` for each chunk of `call`, addressing the caller's buffers and a scratch slot of
// their own (chunks share nothing, so they may run at once):
//   AllReduce, Broadcast, Reduce: chunks of the buffer (multiples of perNode, so that a node's pieces stay even);
//   AllGather / ReduceScatter: piece [offset, offset + count) of every rank's block (any size).
// error set for the other collectives. scratchCount: the sum of the chunks' slots (the unpipelined call's need).
struct HierChunks {
  std::string error;
  std::vector<size_t> counts, offsets;
  std::vector<HierProgram> programs;
  size_t scratchCount = 0;
};
HierChunks hierChunkPrograms(const sched::HierarchicalCall& call, int planRank, int chunks, size_t minChunk);

// Whether the collective runs hierarchically only on node-major communicators: AllToAll(v), whose plan lays every
// block out in node-major order (AllGather, ReduceScatter, Gather and Scatter take the numbering as
// HierarchicalCall::blockOf instead).
bool needsNodeMajor(sched::HierCollective c);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_HIER_STEPS_H_
