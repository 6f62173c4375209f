// The clique: the set of ranks of one communicator and the state they share, behind one interface with two
// implementations:
//   - LocalClique (local_clique.h): every rank in this process (concclCommInitAll, or one thread per rank).
//   - ProcessClique (process_clique.h): one rank per process (concclCommInitRank), ranks on one node.
//
// A collective call is assembled from its ranks' arguments (RankArgs). Every rank posts its arguments, waits
// until the call is complete (all ranks posted, validated, schedule built), then launches its own program.
// Both implementations validate the same way (assembleCall below), so a rank gets the same error for the same
// mistake whether its peers are threads or processes.
#pragma once

#include <conccl/conccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "base/error.h"
#include "exec/executor.h"
#include "sched/schedule.h"

namespace conccl {

// What one rank passed to one call (validated locally by src/api before it is posted).
struct RankArgs {
  sched::CollKind kind = sched::CollKind::kAllGather;
  concclDataType_t dtype = concclFloat32;
  concclRedOp_t op = concclSum;
  int root = 0;
  size_t count = 0;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  bool inPlace = false;
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;  // AllToAllv
  std::vector<sched::P2POp> p2p;                                       // SendRecv
  std::vector<void*> p2pBuffers;                                       // SendRecv, per op
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> chunkEvents;  // concclAllGatherChunked: [block] -> event to record (may be null)
  // concclReduceScatterChunked: [block * piecesPerBlock + piece] -> event after which that piece of sendbuff may be
  // read (may be null); empty for every other call.
  std::vector<cudaEvent_t> inputEvents;
  int piecesPerBlock = 0;
  // concclReduceScatterChunked: this rank's input is produced while the call runs (sched::CollectiveCall::pushInputs).
  // Unlike the events it travels to peer processes: every rank's schedule depends on it.
  bool pushInputs = false;
  // Set by concclGroupEnd: this call's group posts no other rank of the communicator (one thread per rank). Such a
  // rank would wait on the host for its peers' threads; a local clique stages it instead (LocalClique::post).
  bool soleRankInGroup = false;
  // Set by ProcessClique when the call was deferred to its proxy thread: `stream` is then the executor's launch stream,
  // and the call runs eagerly (capturing a cached graph can wait for the device, where the caller's stream waits for
  // this very call: exec/cuda/deferred_launch.h).
  bool deferred = false;
  // Set by ProcessClique when this rank's pool buffers were moved onto its bounce regions (sendbuff and recvbuff now
  // point there): a launch on the caller's stream enqueues the bounce copies with the program (CallBinding::poolBounce).
  bool onBounceRegions = false;
  const char* apiName = "";  // for messages, e.g. "concclAllGather"
};

// One call of the clique, from first post to last launch.
struct PendingCall {
  uint64_t seq = 0;
  std::vector<std::optional<RankArgs>> args;  // [rank]
  int posted = 0;
  bool ready = false;  // all ranks posted and the schedule is built, or `error` is set
  // `ready`, published for waiters that spin before they take the lock (LocalClique::spinUntilReady).
  std::atomic<bool> readyPublished{false};
  std::optional<Error> error;
  sched::CollectiveCall call;
  std::shared_ptr<const sched::Schedule> schedule;  // shared with the schedule cache
  exec::CallBinding binding;
  int launched = 0;  // ranks that have taken their program (the call is forgotten when all have)
  // LocalClique, one thread per rank: the call goes through the peers' scratch (decided by the first rank to post,
  // for every rank), and which ranks launched it from their own arguments without waiting for the others, with the
  // programs they assumed (checked against the real call by the last rank to post).
  bool staged = false;
  std::vector<std::shared_ptr<const sched::Schedule>> earlySchedules;  // [rank], null: waits for `ready`
};

// A rank's handle on a call it posted.
struct CallTicket {
  std::shared_ptr<PendingCall> call;  // set when posted (collectives) or when the p2p group closes
  bool collective = false;            // `call` was set at post time and is not written by other threads
  int rank = 0;
  // LocalClique: this rank launches a staged call on its own arguments at once (PendingCall::earlySchedules).
  std::shared_ptr<const sched::Schedule> earlySchedule;
  exec::CallBinding earlyBinding;
  std::string what;  // "concclAllGather #12" for messages
};

class Clique {
 public:
  virtual ~Clique() = default;

  virtual int nranks() const = 0;
  virtual const Config& config() const = 0;
  virtual exec::Executor& executor() = 0;

  // Posts a rank's arguments; never blocks for peers. Throws if the clique is in error.
  virtual std::shared_ptr<CallTicket> post(int rank, RankArgs args) = 0;

  // Waits (bounded by the timeout) until the ticket's call is ready, then launches the rank's program.
  // A timeout or a launch failure puts the clique in error and cancels the executor, so no peer waits forever.
  virtual void waitAndLaunch(CallTicket& ticket) = 0;

  // Puts the clique in error with `reason` and wakes every waiter (concclCommAbort, fatal failures).
  virtual void fail(concclResult_t code, const std::string& reason) = 0;
  // The error that put the clique out of service, if any (also one raised by a peer process).
  virtual std::optional<Error> asyncError() const = 0;

  // A rank gives up a call it posted but will not launch (an earlier call of its group failed). Only forgets
  // the bookkeeping; every rank of such a call fails the same way, so no peer waits for it.
  virtual void abandon(CallTicket& ticket) = 0;

  // Symmetric windows (concclCommWindowRegister). Across processes both calls are collective: every rank calls
  // them in the same position of its call sequence, and they block (bounded by the timeout) for the peers; the
  // peers map each other's window once, so that later calls on buffers inside windows need no host rendezvous.
  // A local clique has no rendezvous to save: it only validates. Returns the window's id, the same on every rank.
  virtual uint64_t registerWindow(int rank, void* ptr, size_t bytes) = 0;
  // Waits for the rank's outstanding work, then drops the window (and, across processes, the peers' mappings).
  virtual void deregisterWindow(int rank, uint64_t id) = 0;

  // Called by each rank's destroy/abort; the executor releases that rank. Calls of other ranks that are still
  // waiting for this rank to post fail at once (concclInvalidUsage) instead of waiting for the timeout.
  virtual void releaseRank(int rank, bool graceful) = 0;
};

// What makes ranks ra and rb disagree on a collective call (collective, count, type, op, root), as a message naming
// both, or "" if they agree.
std::string disagreement(const RankArgs& a, int ra, const RankArgs& b, int rb);

// Fills pending.call and pending.binding from the posted arguments (pending.args[r] set for every rank of a
// collective, or for the members of a Send/Recv group) and checks that the ranks agree (collective, count,
// type, op, root). Throws concclInvalidArgument naming the first disagreeing rank.
void assembleCall(PendingCall& pending, int nranks);

// Whether a call with these arguments is small enough to go through the peers' scratch
// (sched::CollectiveCall::peerScratchOnly): every collective but AllToAllv and Send/Recv whose largest buffer (the
// root's of a rooted call, anyone's otherwise) is at most `maxBytes`. A function of arguments every rank agrees on.
bool fitsStaging(const RankArgs& args, int nranks, size_t maxBytes);

// Rank `rank`'s call as it would be if every peer called exactly like it (what a rank that launches without waiting
// for its peers assumes): `pending.call` and `pending.binding` filled from `mine` alone, the peers' buffers and
// streams left null. Throws as assembleCall does.
void assembleSoloCall(PendingCall& pending, const RankArgs& mine, int rank, int nranks);

// Schedules by call shape. A training loop repeats the same few calls (same collective, count, type, in-place
// flags) thousands of times; building the schedule is ~1 us per rank, a visible share of the enqueue cost.
// Bounded: when full it starts over (a loop's working set is small; a cache that thrashes costs a rebuild).
class ScheduleCache {
 public:
  explicit ScheduleCache(sched::BuildOptions options) : options_(options) {}
  // The schedule of `call` (built, or from the cache). Throws what buildSchedule throws (nothing is cached then).
  // `copyEnginesFor` >= 0: every program but that rank's marked unbounded in size (Schedule::workBytes), so that the
  // rank takes the copy-engine path whatever its peers' sizes (ProcessClique::copyEnginesFor); cached apart, under
  // its own id.
  std::shared_ptr<const sched::Schedule> get(const sched::CollectiveCall& call, int copyEnginesFor = -1);

 private:
  static constexpr size_t kMaxEntries = 256;
  sched::BuildOptions options_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const sched::Schedule>> entries_;
};

// Calls use(index, ptr, bytes, what) for every buffer rank r's program uses in `call` (an in-place rank: only
// the one its program references), after refusing a NULL one (concclInvalidArgument). Reads only what rank r
// itself passed, so a process can vet its own rank before it tells the peers. `what` names the buffer in
// messages ("rank 1 recvbuff").
template <typename Use>
void forEachUsedBuffer(const sched::CollectiveCall& call, const exec::CallBinding& binding, int r, Use&& use) {
  const std::vector<size_t> bytes = sched::bufferBytes(call, r);
  for (size_t b = 0; b < bytes.size(); ++b) {
    if (bytes[b] == 0) continue;
    // An in-place rank's two pointers alias; only the one its program references is bound and checked.
    if (call.kind != sched::CollKind::kSendRecv && call.inPlace[static_cast<size_t>(r)] &&
        static_cast<int>(b) != sched::inPlaceBuffer(call.kind)) {
      continue;
    }
    void* ptr = binding.buffers[static_cast<size_t>(r)][b];
    const std::string what = "rank " + std::to_string(r) + " " +
                             (call.kind == sched::CollKind::kSendRecv ? "buffer of p2p op " + std::to_string(b)
                                                                      : std::string(b == 0 ? "sendbuff" : "recvbuff"));
    CONCCL_REQUIRE(ptr != nullptr, what + " is NULL but " + std::to_string(bytes[b]) + " bytes are needed");
    use(static_cast<int>(b), ptr, bytes[b], what);
  }
}

}  // namespace conccl
