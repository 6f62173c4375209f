// Private helpers shared by the schedule builders (src/sched/*.cc) and the checker: element sizes, where a
// rank's input and output live (in-place rules), call validation, slot layout, and the two program
// emitters every builder is made of (direct push, pipelined exchange + reduce).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <vector>

#include "sched/schedule.h"

namespace conccl::sched::detail {

// Size of one element (0 for an invalid type). Local copy of concclTypeSize so that src/sched does not
// depend on the API layer.
size_t typeSize(concclDataType_t dtype);
bool isFp8(concclDataType_t dtype);
const char* dtypeName(concclDataType_t dtype);
const char* opName(concclRedOp_t op);
using ::conccl::sched::isReduction;
using ::conccl::sched::isRooted;

// True when `rank` effectively runs in place: in-place flags only matter on the root for rooted
// collectives (elsewhere one of the two buffers is unused) and never for SendRecv.
bool inPlaceRank(const CollectiveCall& call, int rank);

// Where byte `offset` of rank's logical sendbuff / recvbuff lives, following the in-place rules. Only for
// collectives (not SendRecv).
Location sendLoc(const CollectiveCall& call, int rank, size_t offset);
Location recvLoc(const CollectiveCall& call, int rank, size_t offset);

// Throws Error(concclInvalidArgument) when the call is inconsistent.
void validateCall(const CollectiveCall& call);

// For SendRecv: for every rank r and each of its posted ops i, the matching op (rank, index) on the peer,
// or {-1, -1} for none. validateCall guarantees every op is matched.
struct P2PMatch {
  int rank = -1;
  int index = -1;
};
std::vector<std::vector<P2PMatch>> matchP2P(const CollectiveCall& call);

// Builder-specific slot layout (after the ready/done slots). `depth` is BuildOptions::pipelineDepth, so the
// layout is a function of (nranks, options) only.
int dataSlot(int nranks, int fromPeer, int k, int depth);    // reducer's flag: chunk in slot k from fromPeer
int creditSlot(int nranks, int fromPeer, int k, int depth);  // sender's flag: fromPeer freed slot k
int joinSlot(int nranks, int depth, int lane);               // rank's own flag: lane `lane` reached the end

// Chunk and piece boundaries are multiples of kAlign bytes (every element size divides it).
inline constexpr size_t kAlign = 256;
inline size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }
inline size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }
// `l` moved on by `bytes`.
inline Location plus(Location l, size_t bytes) {
  l.offset += bytes;
  return l;
}

// One copy that the rank holding `src` pushes to `dst` (dst may be the same rank: a local copy).
struct Transfer {
  Location src;
  Location dst;
  size_t bytes = 0;
  // When set, the same rank then copies what landed at dst on to `then` (its own memory), on the same lane right
  // after each piece: a rank's own block routed through a peer (BuildOptions::ownBlockViaPeer).
  std::optional<Location> then;
  // >= 0: the copy is not split and runs on this lane (a scratch bounce whose region belongs to that lane).
  int lane = -1;
  // The copy is not split and runs on the program's main stream M (no fork to a lane and join back): a rank's own
  // block where its program has nothing else to overlap it with (a pair-owned rank that owns none of its pairs).
  bool mainStream = false;
};

// BuildOptions::ownBlockViaPeer: replaces every rank's local transfers (src and dst in its own memory) by a route
// through a peer: a pull back from a peer that receives the same bytes from it anyway, else a bounce through the
// peer's scratch (one region per sending rank and lane, in pieces of at most the region's size). Sets
// schedule.scratchBytes when it bounces. No-op for nranks < 2.
void routeOwnBlocksThroughPeers(std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options,
                                Schedule& schedule);
// Both routes with the peers a rank's own block may pass through chosen per rank (`via(me)`): each rank's local
// transfers are echoed where it pushes the same bytes to one of them, else bounced through their scratch (taken in
// turn, then the lanes; a region (sender, lane) is reused only behind the previous piece on its lane), else (an empty
// list) kept local. routeOwnBlocksThroughPeers passes every peer. The pair-owned route passes the next rank only: the
// owner of that pair is then the one rank that moves the block, and it knows everything the choice depends on (an
// AllToAllv rank may send its own block's bytes to several peers; each other owner sees only its own pair).
void routeOwnBlocks(std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options, Schedule& schedule,
                    const std::function<std::vector<int>(int me)>& bounceVia);

// Fills `schedule.programs` with direct push programs: transfers[r] are the copies rank r issues (all with
// src.rank == r). Handles the ready/done handshakes, lane assignment and splitting of large copies;
// zero-byte transfers are dropped. `afterDone(me, writer, ops)`, when given, is called right after rank me's Wait for
// the "done" of `writer` (every copy `writer` issues into me has landed there), to append marks (Ready ops).
using AfterDoneHook = std::function<void(int me, int writer, std::vector<Op>& ops)>;
void emitDirect(const std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options, Schedule& schedule,
                const AfterDoneHook& afterDone = {});

// CollectiveCall::pairOwner: the same transfers, each copy between two ranks issued by the pair's owner, pushing or
// pulling, and no handshake between a pair's ranks but the owner's wait for the other's "ready" and the other's wait
// for the owner's "done". A rank that owns none of its pairs therefore only signals and waits. Transfers must not
// carry `then` or a fixed lane. With BuildOptions::ownBlockViaPeer a rank's own block that it also pushes to a peer
// (AllGather, an out-of-place Broadcast root) is echoed back from the next rank by that pair's owner, whichever it is:
// a pull back on copy engines instead of a same-device copy, and no handshake the pair does not have already. The
// other own blocks (AllToAll, Gather and Scatter roots, AllToAllv) go through the next rank's scratch, both hops
// issued by that pair's owner, as `bounce` says: kWhereThePairMoves where the pair with the next rank moves data
// anyway and every rank knows every own block's size (AllToAll, Gather, Scatter: the bounce adds no handshake);
// kWithStructuralEdges adds a ready/done edge from the owner of every pair (r, r + 1) whatever it moves (AllToAllv,
// whose earlier ranks cannot know a later peer's counts: the edge keeps their programs independent of them).
enum class OwnBlockBounce { kWhereThePairMoves, kWithStructuralEdges };
void emitPairOwned(const std::vector<std::vector<Transfer>>& transfers, const std::vector<int>& pairOwner,
                   const BuildOptions& options, Schedule& schedule, const AfterDoneHook& afterDone,
                   OwnBlockBounce bounce);

// CollectiveCall::peerScratchOnly (staged_exchange.cc): the same transfers, but every one between ranks goes through
// the receiver's scratch in pipelined chunks and the receiver copies it into place on M, so no rank touches a peer's
// call buffers. Transfers must not carry `then` (BuildOptions::ownBlockViaPeer is off for such calls). `afterDone(me,
// writer, ops)` is called once everything `writer` sends to `me` has been copied into place. Uses the staged flags
// below and sets scratchBytes (to at least what it needs) and algorithm.
// `sizeIndependentChunks`: the chunk size and slot depth follow from the options and the rank count only, not from
// the transfers' sizes. Send/Recv needs it: a pair's two programs are built from different calls (each rank's own
// group, with only its share of each partner's), so anything taken from the longest transfer could differ between
// the sender's and the receiver's views of the same pair. A staged AllToAllv needs it for the same reason (a rank
// that launches before its peers called knows only its own counts).
// `placement`: where the slots go when the exchange follows another phase of the same program (below).
struct StagedPlacement;
void emitStaged(const std::vector<std::vector<Transfer>>& transfers, const BuildOptions& options, Schedule& schedule,
                const AfterDoneHook& afterDone = {}, bool sizeIndependentChunks = false,
                const StagedPlacement* placement = nullptr);
// A staged exchange after another phase of the same program that used the receivers' scratch (a staged AllReduce's
// all-gather after its reduce-scatter pipeline). Where both fit in BuildOptions::scratchBudget, its slots start at
// `scratchBase` in every receiver's scratch, past what the earlier phase used, so no slot is used twice in the program,
// and a receiver r with readyGiven[r] already told every sender at this program's start that its scratch is free (the
// earlier phase's ready, which covers the whole scratch: its previous program has ended), so the exchange skips its
// own ready to and from r (a signal and a wait per pair: the second handshake of such a program). Otherwise the slots
// start at 0 after the exchange's own ready, as without a placement.
struct StagedPlacement {
  size_t scratchBase = 0;
  std::vector<bool> readyGiven;  // per receiver; empty: none
};
// emitStaged for calls with peerScratchOnly, emitPairOwned for calls with a pairOwner, emitDirect otherwise: what the
// movement builders call.
void emitMovement(const CollectiveCall& call, const std::vector<std::vector<Transfer>>& transfers,
                  const BuildOptions& options, Schedule& schedule, const AfterDoneHook& afterDone = {},
                  bool sizeIndependentChunks = false);
// Flags of the staged exchange, after the join flags (`lanes` of them): receiver's "chunk in slot k from fromPeer"
// and sender's "fromPeer freed slot k".
int stagedDataSlot(int nranks, int fromPeer, int k, int depth, int lanes);
int stagedCreditSlot(int nranks, int fromPeer, int k, int depth, int lanes);

// The chunking of a pipelined exchange through scratch (emitReducePipeline, emitStaged), for `peers` senders per
// receiver and a longest stream of `longestBytes`:
//   slotBytes  - the scratch budget split over peers x depth slots, 256-byte aligned: a hard bound. minChunkBytes is
//                honoured by giving up pipeline depth first. May be below kAlign: the caller refuses the budget then.
//   pieceBytes - about 1/targetChunks of the longest stream (none below minChunkBytes), so that a stream that fits
//                one slot still pipelines (piece i+1 in flight while piece i is reduced or copied out).
// A chunk is min(slotBytes, pieceBytes).
struct PipelineChunking {
  int depth = 1;
  size_t slotBytes = 0;
  size_t pieceBytes = 0;
};
PipelineChunking pipelineChunking(const BuildOptions& options, size_t peers, size_t longestBytes);

// The share of the reduction that one rank computes.
struct ReduceShare {
  size_t elems = 0;
  std::vector<Location> inputs;    // per rank q: where q's contribution to this share starts
  Location output;                 // where the reduced share goes (the reducer's memory)
  std::vector<Location> gatherTo;  // AllReduce: per rank, where to push the reduced share (empty: none); with
                                   // peerReads an entry whose rank is -1 is skipped (Reduce: only the root's)
  // peerReads only: the reducer has no output buffer of its own (Reduce's non-roots). Each piece is reduced into
  // its scratch and pushed from there to gatherTo; `output` is unused.
  bool stagedInScratch = false;
};

// Fills `schedule.programs` with the pipelined exchange-into-scratch + Reduce programs for shares[r]
// reduced by rank r (nranks >= 2), and sets scratchBytes and algorithm.
void emitReducePipeline(const CollectiveCall& call, const BuildOptions& options, const std::vector<ReduceShare>& shares,
                        Schedule& schedule);

// The same shares for ranks that can read each other's memory (BuildOptions::peerReads): each reducer reads every
// rank's contribution where it lies, piece by piece, and pushes each reduced piece on (pull_reduce.cc). Uses no
// scratch. emitReducePipeline calls it when options.peerReads is set.
void emitPullReduce(const CollectiveCall& call, const BuildOptions& options, const std::vector<ReduceShare>& shares,
                    Schedule& schedule);

// CollectiveCall::callOwner (owner_reduce.cc): one block of the reduction, reduced by the owner in Reduce ops over
// every rank's input read where it lies (rank order, so that Avg divides by nranks and every reducer combines alike).
struct OwnedBlock {
  size_t elems = 0;
  std::vector<Location> inputs;  // per rank q: where q's input to the block starts
  // Where the reduced block goes in the owner's own memory (its recvbuff), then copied from there to every entry of
  // copyTo. Empty: the owner has no place for it (the block is another rank's output) and reduces it piece by piece
  // into its scratch, each piece copied to copyTo's single entry.
  std::optional<Location> output;
  std::vector<Location> copyTo;  // other ranks' recvbuffs
};

// Fills `schedule.programs` for a call with callOwner >= 0 and nranks >= 2: the owner reduces `blocks` in order and
// moves them into place; every other rank only takes part in the ready and done handshakes (a program that depends on
// nothing but nranks and its rank). Sets peerReads, scratchBytes and algorithm ("owner-reduces"). Each Reduce has
// nranks inputs: the CUDA kernel takes at most kMaxReduceInputs (16, exec/cuda/reduce_kernel.h), which the caller
// keeps to (ProcessClique takes this route up to 8 ranks).
void emitOwnerReduce(const CollectiveCall& call, const BuildOptions& options, const std::vector<OwnedBlock>& blocks,
                     Schedule& schedule);

// Sets `slots` to one more than the highest slot used (0 if none).
void finalizeSlots(Schedule& schedule);

Schedule newSchedule(const CollectiveCall& call, const BuildOptions& options);

// The whole call on one rank of a reduction whose output is its input (ReduceScatter, AllReduce, Reduce with
// nranks == 1): one copy of `bytes` from sendbuff to recvbuff, or nothing in place.
Schedule localCopySchedule(const CollectiveCall& call, const BuildOptions& options, size_t bytes);

// One builder per collective (src/sched/<collective>.cc). The call is validated already.
Schedule buildAllGather(const CollectiveCall& call, const BuildOptions& options);
Schedule buildReduceScatter(const CollectiveCall& call, const BuildOptions& options);
Schedule buildAllReduce(const CollectiveCall& call, const BuildOptions& options);
Schedule buildBroadcast(const CollectiveCall& call, const BuildOptions& options);
Schedule buildReduce(const CollectiveCall& call, const BuildOptions& options);
Schedule buildAllToAll(const CollectiveCall& call, const BuildOptions& options);
Schedule buildAllToAllv(const CollectiveCall& call, const BuildOptions& options);
Schedule buildGather(const CollectiveCall& call, const BuildOptions& options);
Schedule buildScatter(const CollectiveCall& call, const BuildOptions& options);
Schedule buildSendRecv(const CollectiveCall& call, const BuildOptions& options);

}  // namespace conccl::sched::detail
