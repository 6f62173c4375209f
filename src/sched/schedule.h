// The schedule: what a collective call moves, as one small program per rank.
//
// Pure C++: no CUDA types. Built by one function per collective (src/sched/<collective>.cc), proven by the
// checker (checker.h), executed by src/exec/host (threads + memcpy) and src/exec/cuda (copy engines).
//
// Execution model (both executors implement exactly this; the checker models exactly this):
//   * Each rank runs its program on one *main* stream M and `lanes` copy lanes L0..L(lanes-1).
//   * Every op has a stream: Copy and Signal name a lane (`lane` >= 0) or M (`lane` == kMainStream);
//     Wait, Reduce and Ready always run on M.
//   * An op is ordered after the previous op on its own stream. An op on a lane is also ordered after
//     every M op that precedes it in program order (the lane waits for M to reach that point). An op on
//     M is NOT ordered after earlier lane ops: to make M wait for a lane, the lane signals the rank itself
//     and M waits for that signal.
//   * Program start: every stream of the rank starts after the rank's caller reached the call.
//     Program end: the caller continues after every stream of the rank has finished.
//   * Signal{peer, slot} sets flag `slot` of rank `peer` to 1, after the ops it is ordered after.
//     Wait{slot} waits on M until the rank's own flag `slot` is 1, then resets it to 0 (consumes it).
//     A flag may carry at most one unconsumed signal: each Signal must be ordered after the Wait that
//     consumed the previous signal of the same flag (in this call or the previous one). This is what makes
//     schedules replayable in CUDA graphs: the values are constants, never sequence numbers.
//   * Copy moves `bytes` bytes; a Copy is issued by the rank whose program holds it and must have that
//     rank as its source or destination. Reduce runs on SMs (CUDA) and writes the issuing rank's memory; it
//     reads the issuing rank's memory, or other ranks' memory when the schedule was built with
//     BuildOptions::peerReads (the executor can address it: peer access between GPUs).
//   * Memory of a rank: its call buffers (by index, see CollectiveCall::bufferBytes) and its scratch
//     (kScratch), which persists across calls and has undefined contents at the start of a call.
//   * Another rank may touch rank q's memory only after q's program started and before it ended: the
//     builders implement this with the ready (kReadySlot) and done (kDoneSlot) handshakes.
#pragma once

#include <conccl/conccl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace conccl::sched {

// Buffer index of a rank's scratch memory in a Location.
inline constexpr int kScratch = -1;
// `lane` value of an op that runs on the main stream.
inline constexpr int kMainStream = -1;

// A byte address in some rank's memory.
struct Location {
  int rank = 0;
  int buffer = 0;  // index into that rank's call buffers, or kScratch
  size_t offset = 0;
  friend bool operator==(const Location&, const Location&) = default;
};

struct Copy {
  Location src;
  Location dst;
  size_t bytes = 0;
  int lane = 0;  // lane index, or kMainStream
  friend bool operator==(const Copy&, const Copy&) = default;
};

struct Signal {
  int peer = 0;  // rank whose flag is set (may be the issuing rank itself)
  int slot = 0;
  int lane = kMainStream;
  friend bool operator==(const Signal&, const Signal&) = default;
};

struct Wait {
  int slot = 0;
  friend bool operator==(const Wait&, const Wait&) = default;
};

// output[i] = op(inputs[0][i], ..., inputs[k-1][i]) for i < count; concclAvg divides the sum by k.
// `output` belongs to the issuing rank; inputs too, unless built with peerReads. `output` may equal one input
// exactly (element-wise in place).
struct Reduce {
  std::vector<Location> inputs;
  Location output;
  size_t count = 0;
  concclDataType_t dtype = concclFloat32;
  concclRedOp_t op = concclSum;
  friend bool operator==(const Reduce&, const Reduce&) = default;
};

// From this point of M on, bytes [at, at + bytes) of the issuing rank's memory hold what the call leaves there:
// everything that writes them is ordered before it (the checker proves both). Moves nothing. `tag` names the range
// for the executor: AllGather marks block p of recvbuff with tag p, and concclAllGatherChunked records its chunk event
// `tag` at the mark (ranges left unmarked are recorded at the program's end).
struct Ready {
  Location at;
  size_t bytes = 0;
  int tag = 0;
  friend bool operator==(const Ready&, const Ready&) = default;
};

using Op = std::variant<Copy, Signal, Wait, Reduce, Ready>;

struct RankProgram {
  std::vector<Op> ops;
  friend bool operator==(const RankProgram&, const RankProgram&) = default;
};

struct Schedule {
  int nranks = 0;
  int lanes = 1;                      // lanes a program may use (ops use lane < lanes)
  int slots = 0;                      // flags per rank (slot < slots)
  size_t scratchBytes = 0;            // scratch per rank used by this schedule (<= the call's scratch budget)
  std::vector<RankProgram> programs;  // one per rank
  std::string algorithm;              // e.g. "direct", "direct-pipelined(chunks=12)": for logs and tools
  bool peerReads = false;             // some Reduce reads another rank's memory (built with peerReads)
  // [rank] -> bytes the rank's Copy ops move, filled by buildSchedule (empty in hand-made schedules): executors
  // choose a path per call from it without walking every program on every launch.
  std::vector<size_t> copyBytes;
  // [rank] -> copyBytes plus the bytes the rank's reductions produce: the size of a rank's part of the call, from
  // which executors choose a path (a reduction reading its peers' inputs in place copies nothing); filled likewise.
  std::vector<size_t> workBytes;
  // [rank] -> the ops of the rank's program that do something (copies and reductions of zero size left out) and
  // the inputs of its non-empty reductions; filled like copyBytes. An executor that packs a program into fixed
  // tables (the CUDA small-message kernel) checks every rank's fit from these, once per call, not per op.
  std::vector<size_t> activeOps, reduceInputs;
  // Nonzero: this schedule is immutable and no other schedule in the process has the same id (the communicator's
  // schedule cache numbers what it builds). Executors may cache work derived from it under this id (the CUDA
  // executor's graph cache); 0 (hand-made schedules) means: derive nothing.
  uint64_t id = 0;
};

// Calls f(location) for every location of another rank (call buffers and scratch) that `program` of rank `rank`
// touches: copy sources and destinations, reduction inputs (peerReads) and outputs; empty ops are skipped. What a
// process must map of its peers' memory for the program.
template <typename F>
void forEachPeerLocation(const RankProgram& program, int rank, F&& f) {
  for (const Op& op : program.ops) {
    if (const auto* copy = std::get_if<Copy>(&op)) {
      if (copy->bytes == 0) continue;
      if (copy->src.rank != rank) f(copy->src);
      if (copy->dst.rank != rank) f(copy->dst);
    } else if (const auto* red = std::get_if<Reduce>(&op)) {
      if (red->count == 0) continue;
      for (const Location& in : red->inputs) {
        if (in.rank != rank) f(in);
      }
      if (red->output.rank != rank) f(red->output);
    }
  }
}

// Bytes the Copy ops of `program` move.
size_t programCopyBytes(const RankProgram& program);
// Whether copy `next` continues copy `first`: the same source and destination buffers (rank, buffer), each at the
// offset where `first` ends. Executors may issue the two as one copy where they run on one stream.
bool copyContinues(const Copy& first, const Copy& next);

// What Schedule::workBytes holds for `program`.
size_t programWorkBytes(const RankProgram& program);
// What Schedule::activeOps and Schedule::reduceInputs hold for `program`.
size_t programActiveOps(const RankProgram& program);
size_t programReduceInputs(const RankProgram& program);

// ------------------------------------------------------------------------------------------------
// What a collective call asks for, with every rank's arguments (the builders are global functions of the
// whole call; each executor runs one rank's program).

enum class CollKind {
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllv,
  kGather,
  kScatter,
  kSendRecv,
};

const char* collKindName(CollKind kind);
// ReduceScatter, AllReduce, Reduce: the calls that take an op.
bool isReduction(CollKind kind);
// Broadcast, Reduce, Gather, Scatter: the calls that take a root.
bool isRooted(CollKind kind);

// One Send or Recv of a group of point-to-point operations, as posted by `rank`.
struct P2POp {
  bool isSend = false;
  int peer = 0;
  size_t count = 0;
  int buffer = 0;  // index of its buffer in the posting rank's call buffers
  // Recv only: the sender may not write into this buffer (memory its process cannot share, e.g. PyTorch's expandable
  // segments): every Send of this pair in the call goes through the receiver's scratch, and the receiver copies it
  // into place (detail::emitStaged).
  bool viaScratch = false;
};

struct CollectiveCall {
  CollKind kind = CollKind::kAllGather;
  int nranks = 1;
  concclDataType_t dtype = concclFloat32;
  concclRedOp_t op = concclSum;  // reductions only
  int root = 0;                  // rooted collectives only
  // Element count as the public API defines it for this collective (sendcount / recvcount / count).
  size_t count = 0;
  // Per rank: true when the rank called in place (see conccl.h). Collective buffers are
  // 0 = sendbuff, 1 = recvbuff. An in-place rank's buffers alias, and its program references only the
  // larger of the two: recvbuff (1), except for ReduceScatter and Scatter, whose recvbuff lies inside
  // sendbuff, so their in-place ranks reference only sendbuff (0) (output at offset rank*count elements).
  // For rooted collectives the flag matters on the root only (elsewhere one buffer is unused anyway).
  std::vector<bool> inPlace;
  // AllToAllv: per rank r and peer p, in elements (the arrays as rank r passed them).
  std::vector<std::vector<size_t>> sendCounts, sendDispls, recvCounts, recvDispls;
  // SendRecv: per rank, the ops it posted, in order.
  std::vector<std::vector<P2POp>> p2p;
  // ReduceScatter only (concclReduceScatterChunked): the ranks' inputs are still being produced when the call starts,
  // so each rank must move its own input to the reducers (copies it issues, which its executor can order after its
  // producer) and no Reduce may read a peer's input in place (BuildOptions::peerReads is ignored).
  bool pushInputs = false;
  // No rank's program touches another rank's call buffers: whatever crosses ranks lands in the receiver's scratch and
  // the receiver moves (or reduces) it into place itself (detail::emitStaged). A rank's program then follows from its
  // own arguments alone, so a rank of a process clique can launch without learning its peers' buffer addresses (no
  // host rendezvous, core/process_clique_calls.cc). Costs one local copy of every received byte (SMs on our GPUs) and
  // turns BuildOptions::peerReads and ownBlockViaPeer off. AllToAllv takes it only once every rank's counts are known
  // (process cliques use it for memory a peer cannot map). Not for SendRecv, whose pairs choose on their own
  // (P2POp::viaScratch).
  bool peerScratchOnly = false;
  // Empty, or nranks x nranks: pairOwner[i * nranks + j] (i != j) is the rank, i or j (the same for (j, i)), that
  // issues every copy between i and j, both directions (pushing into the other's memory and pulling from it); the
  // diagonal is unused. Data movement only (AllGather, Broadcast, AllToAll, AllToAllv, Gather, Scatter), not with
  // peerScratchOnly. The program of a rank that owns none of its pairs is signals and waits only, and follows from its
  // own arguments: a rank that calls before its peers can leave all the moving to the later ones, on their copy
  // engines (docs/dev/next-steps.md, "the later rank moves"). With BuildOptions::ownBlockViaPeer a rank's own block
  // is moved by the owner of its pair with the next rank (detail::emitPairOwned).
  std::vector<int> pairOwner;
  // -1, or the rank that does a whole reduction (AllReduce, ReduceScatter, Reduce) for every rank: it reduces every
  // rank's input (reading its peers' memory: needs BuildOptions::peerReads) and moves every rank's output into place;
  // every other rank only signals "ready" to each peer, waits for each peer's "ready", signals "done" to each peer and
  // waits for each peer's "done" (the owner's among them), a program that neither depends on which peer owns the call
  // nor grows with the size, so a rank that calls before its peers can launch it without knowing them
  // (ProcessClique's pair-owned route for reductions: the rank that calls last owns). Why the non-owners exchange
  // "done" too: detail::emitOwnerReduce (owner_reduce.cc). Each Reduce has nranks inputs, which the CUDA kernel
  // bounds (exec/cuda kMaxReduceInputs). Not with peerScratchOnly, pairOwner or pushInputs.
  int callOwner = -1;
};

struct BuildOptions {
  size_t scratchBudget = 64u << 20;  // per rank, bytes
  int lanes = 2;                     // copy lanes per rank
  int pipelineDepth = 2;             // scratch chunks in flight per peer (>= 1)
  size_t minChunkBytes = 64u << 10;  // below this a pipelined exchange does not split further
  int targetChunks = 4;              // pieces a reduction pipeline aims to cut a share into (>= 1)
  // Ranks can read each other's memory in a Reduce (GPUs with peer access, ranks of one GPU, one process's host
  // memory): reducers read the peers' inputs where they lie instead of receiving them into scratch.
  bool peerReads = false;
  // A rank's own block (a copy inside its own memory: AllGather, AllToAll(v), out-of-place Broadcast / Gather /
  // Scatter roots) goes through a peer on copy engines instead: pulled back from a peer that receives the same
  // block anyway (AllGather, Broadcast), or bounced through the peer's scratch. Same-device copies run on SMs on
  // our driver (FACTS.md), so this is what keeps movement off the SMs while a GEMM holds them, at the price of
  // one more NVLink crossing of that block. Only meaningful when ranks are on distinct GPUs; SendRecv
  // self-sends stay local (the peers of a point-to-point group need not take part).
  bool ownBlockViaPeer = false;
};

// Byte sizes of rank r's call buffers (index -> bytes): what the executor must bind and what argument
// validation checks. For collectives: {sendbuff bytes, recvbuff bytes} (0 where the buffer is unused, e.g.
// recvbuff on a non-root rank of Reduce). For SendRecv: one entry per posted op.
std::vector<size_t> bufferBytes(const CollectiveCall& call, int rank);

// The buffer index that an in-place rank's program references (see CollectiveCall::inPlace): 1 (recvbuff),
// or 0 (sendbuff) for ReduceScatter and Scatter. Its size is bufferBytes(call, rank)[inPlaceBuffer(kind)].
int inPlaceBuffer(CollKind kind);

// Flag slots every schedule may use. Fixed per communicator so that executors allocate flags once.
// Layout: [0, n) ready-from-peer, [n, 2n) done-from-peer, then builder-specific slots.
inline constexpr int kReadySlotBase = 0;
int readySlot(int nranks, int fromPeer);
int doneSlot(int nranks, int fromPeer);
int firstFreeSlot(int nranks);
// Upper bound of `Schedule::slots` for any schedule of a communicator of nranks with the given options.
int maxSlots(int nranks, const BuildOptions& options);

// Builds the schedule of `call`. Throws conccl::Error(concclInvalidArgument) on an inconsistent call.
Schedule buildSchedule(const CollectiveCall& call, const BuildOptions& options);

}  // namespace conccl::sched
