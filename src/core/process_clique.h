// ProcessClique: a communicator whose ranks are in different processes of one node (concclCommInitRank), as
// seen from the one rank this process drives.
//
// Initialisation (constructor): the bootstrap (bootstrap.h) all-gathers each rank's pid, device and config;
// rank 0 creates a shared-memory segment (shared_segment.h) that every process maps; the CUDA executor
// registers the segment's flag area with the GPU and maps the peers' scratch; then the segment's name is
// unlinked and the sockets are closed. What remains for the communicator's life is one mapping per process.
//
// Segment layout (all offsets fixed at creation):
//   Header       magic, sizes, the shared error word (the first rank that fails writes code + reason there;
//                every rank reports it from then on: concclCommGetAsyncError, and its next call fails)
//   RankShared   per rank: pid, departed (destroyed or aborted), consumed (calls read from the mailboxes)
//   flags        per rank: the executor's flags (uint32), written by peers' GPUs with stream memory ops
//   mailboxes    per rank: a ring of kRingEntries MailboxEntry, each followed by the AllToAllv vectors
//   p2p rings    per ordered pair: the owner's Send and Recv records (process_clique_p2p.cc)
//   retire logs  per rank: the exports it retired while it made no call, and each reader's cursor (retire_log.h)
//
// A collective call: the rank checks its own buffers, exports them (CUDA IPC, cached per allocation),
// publishes its arguments in its ring slot seq % kRingEntries, waits until every peer has published seq,
// validates (clique.h's assembleCall: the same checks and messages as a local clique), maps the peers'
// buffers (cached), builds the schedule and launches its own program. The host waits for the peers to *call*
// the collective (as a local clique does), never for GPU work. A slot is reused only after every rank has
// consumed it, and a rank that failed a check publishes its error so that every rank fails the call the same way.
//
// Symmetric calls (the zero-host-sync fast path): when every buffer this rank's program touches, its own and
// its peers', can be derived from this rank's own pointers inside registered windows (same window, same offset
// on every rank: concclCommWindowRegister), the rank publishes its arguments and launches at once, without
// waiting for the peers. The call is then "unmatched" until every peer has published it too; the comparison
// (same collective and arguments, and each assumed peer buffer really at that window and offset) is done by
// whichever comes first: this rank's next call, or the watchdog thread, which also ends the wait of a call
// whose peer died, departed or overran the timeout (fail(): the flags open, so no GPU stream waits forever).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/bootstrap.h"
#include "core/clique.h"
#include "core/early_launch.h"
#include "core/gpu_watchdog.h"
#include "core/retire_log.h"
#include "core/route_spin.h"
#include "core/shared_segment.h"

namespace conccl {

class ProcessClique final : public Clique {
 public:
  // Blocks until every rank arrived (bounded by config.timeoutMs). `device`: this rank's CUDA device.
  ProcessClique(const Config& config, const UniqueIdData& id, int rank, int nranks, int device);
  ~ProcessClique() override;

  int nranks() const override { return nranks_; }
  const Config& config() const override { return config_; }
  exec::Executor& executor() override { return *executor_; }
  int rank() const { return rank_; }

  std::shared_ptr<CallTicket> post(int rank, RankArgs args) override;
  void waitAndLaunch(CallTicket& ticket) override;
  void fail(concclResult_t code, const std::string& reason) override;
  std::optional<Error> asyncError() const override;
  void abandon(CallTicket& ticket) override;
  void releaseRank(int rank, bool graceful) override;
  uint64_t registerWindow(int rank, void* ptr, size_t bytes) override;
  void deregisterWindow(int rank, uint64_t id) override;

  struct Layout;  // process_segment.h

 private:
  // Where a buffer lies in a registered window.
  struct WindowRef {
    uint64_t id = 0;  // 0: in no window
    uint64_t offset = 0;
    bool operator==(const WindowRef&) const = default;
  };
  struct Window {
    char* base = nullptr;  // this rank's window
    size_t bytes = 0;
    std::vector<char*> peerBase;         // [rank] -> the peer's window as mapped here (own rank: base)
    std::vector<uint64_t> peerAllocIds;  // [rank] -> the peer's allocation holding it (for closeImport)
  };
  // A peer buffer a symmetric call assumed: rank `peer`'s buffer `buffer` at `ref`.
  struct Assumption {
    int peer = 0;
    int buffer = 0;
    WindowRef ref;
  };
  // A call this rank has read only partly: launched without waiting (compare) or abandoned (nothing to read).
  struct Unmatched {
    uint64_t seq = 0;
    bool compare = false;
    std::chrono::steady_clock::time_point launched;
    std::string what;
    std::vector<Assumption> assumed;
  };

  void checkHealthy() const;
  // Blocks until `ready()` or a failure: the shared error word, `peer` departed (destroyed or aborted) or dead,
  // the deadline. `peer` and `what` name the wait in messages.
  template <typename Ready>
  void waitFor(Ready ready, int peer, const std::string& what);

  // Ring slot seq % kRingEntries is free: every rank, this one included, has read the call that used it last.
  void waitForFreeSlot(uint64_t seq, const std::string& what);
  // Blocks until every peer has published call `seq`, then finishes the unmatched calls before it (all
  // published by then). Throws what they found.
  void waitForPeersOf(uint64_t seq, const std::string& what);
  // Compares the unmatched calls whose entries every peer has published, oldest first, and advances `consumed`
  // past them. A mismatch fails the communicator. True when nothing is left unmatched. Needs matchMutex_.
  bool matchPublishedLocked();
  // What is wrong with `peer`'s entry of an unmatched call, or "" if it agrees.
  std::string mismatch(const Unmatched& u, int peer) const;
  void startWatchdog();
  void stopWatchdog();
  void watchdogLoop();
  // Whether the oldest unmatched call (`what`, launched at `launched`) can no longer be matched: a peer of
  // `waitingFor` departed or died (checked when `checkLiveness`), or the timeout has passed. code concclSuccess: not yet.
  struct Stall {
    concclResult_t code = concclSuccess;
    std::string reason;
  };
  Stall stallOf(const std::vector<int>& waitingFor, const std::string& what, std::chrono::steady_clock::time_point launched,
                std::chrono::steady_clock::time_point now, bool checkLiveness) const;

  WindowRef findWindow(const void* ptr, size_t bytes) const;
  // rank `peer`'s buffer at `ref`, `bytes` long; nullptr if that would leave the peer's window.
  void* peerAddress(int peer, const WindowRef& ref, size_t bytes) const;
  // Binds the peer buffers this rank's program touches from this rank's own window references `mine`
  // (sendbuff, recvbuff), recording each as an assumption; false when one cannot be derived or would leave
  // the peer's window.
  bool bindSymmetric(PendingCall& pending, const WindowRef (&mine)[2], std::vector<Assumption>& assumed) const;
  // A Send/Recv group: matched pair by pair through the p2p rings (process_clique_p2p.cc), then launched.
  void launchSendRecv(CallTicket& ticket);

  // Deferred calls (process_clique_proxy.cc). A call that would wait on the host for its peers (a regular call whose
  // peers have not published yet, every AllToAllv and Send/Recv group, any call while earlier ones are still deferred)
  // is handed to the proxy thread instead: the caller's stream waits on the GPU (exec::DeferredCall) and the caller
  // returns; the proxy finishes the calls in call order, launching each on the executor's launch stream. Where a call
  // cannot be deferred (graph capture, chunk events, a stream whose hardware queue is shared, ranks that are threads
  // of one process, the knob off) it is
  // finished on the caller's thread after the proxy has drained, as before.
  struct OwnPart;
  struct DeferredItem;
  // Whether a call of these arguments may be deferred at all (no graph capture is checked here: the executor does).
  bool deferrable(const RankArgs& mine) const;
  // Hands the ticket to the proxy (with `own` when the caller's thread already checked and published it); false
  // when the executor refuses to defer the caller's stream.
  bool deferToProxy(CallTicket& ticket, std::optional<OwnPart> own);
  // What deferToProxy and deferEarlyLaunch share: the gate on the caller's stream, then the queue. `earlyLaunch`
  // (a symmetric call's assumptions, else null) is moved into the queue only when the call is deferred.
  bool enqueueDeferred(CallTicket& ticket, std::optional<OwnPart> own, std::vector<Assumption>* earlyLaunch);
  bool proxyBusy();
  // Blocks until every deferred call has been finished (bounded: each one is bounded by the timeout, and a failure
  // makes the later ones fail at once).
  void waitForProxyIdle(const std::string& what);
  void proxyLoop();
  void runDeferred(DeferredItem& item);
  void stopProxy();
  // The blocking forms: a whole call, and a regular call's second half (read the peers, bind, launch).
  void finishCall(CallTicket& ticket);
  void finishRegular(CallTicket& ticket, const OwnPart& own);
  // Steps 1-3 of a collective (its slot free): checks, the symmetric attempt, publish; a symmetric or staged call is
  // launched (nullopt): on this thread, or by the proxy when `mayDeferLaunch` and its program is long enough that
  // enqueueing it would cost the caller more than handing it over (deferEarlyLaunch). A regular call returns what the
  // second half needs.
  std::optional<OwnPart> checkAndPublish(CallTicket& ticket, bool mayDeferLaunch);
  // Hands a symmetric call's launch to the proxy; false when the caller's stream cannot be deferred (`assumed` is
  // then left as it was, for the caller's own launch).
  bool deferEarlyLaunch(CallTicket& ticket, std::vector<Assumption>& assumed);
  // Whether any buffer of the call is cudaMallocAsync pool memory. The caller may free such memory with
  // cudaFreeAsync right after the call returns, after which CUDA refuses the pointer in any later API call (the
  // driver faulted on it, 2026-12-02), so such calls are enqueued on the caller's thread, never by the proxy.
  bool usesPoolMemory(const RankArgs& mine) const;
  // Which of a collective's two buffers is pool memory (an in-place call's one buffer asked once). Not for Send/Recv.
  struct PoolBuffers {
    bool send = false;
    bool recv = false;
  };
  PoolBuffers poolBuffersOf(const RankArgs& mine) const;

  // Calls on pool memory above Config::stagedMaxBytes run on the executor's bounce regions
  // (process_clique_pool_bounce.cc, exec/pool_bounce_plan.h): the call's pointers are moved onto the regions before it
  // is matched (RankArgs::onBounceRegions), its launch or its deferral enqueues the copies in (with the copies out, as
  // nodes of a replayed graph), and the copies out follow once it was launched or handed to the proxy. Then it is an
  // ordinary call on shareable memory: routed, deferred and replayed from cached graphs like any.
  // Returns false when the call keeps its own buffers (not pool memory, staged by size, chunk events, above
  // Config::poolBounceMaxBytes, or the executor cannot: logged once). Not for a captured call. *poolMemory: whether
  // the call, as it goes on, uses pool memory (usesPoolMemory, asked once; false once moved onto the regions).
  bool enterPoolBounce(RankArgs& mine, bool* poolMemory);
  void leavePoolBounce(bool copyOut);
  // The rank's part of a call as a CollectiveCall of its own arguments (what bufferBytes and forEachUsedBuffer read).
  sched::CollectiveCall soloCallOf(const RankArgs& mine) const;
  // Non-blocking checks of what the blocking forms would wait for.
  bool slotFreeNow(uint64_t seq);
  bool peersPublished(uint64_t seq) const;
  void abandonNow(CallTicket& ticket);

  // waitAndLaunch's states for a collective (process_clique_calls.cc), in order:
  //   checkOwnPart -> trySymmetric -> publish -> launchEarly              (symmetric or staged: no host wait)
  //                                          \-> readPeers -> bindPeers -> launch  (regular)
  // What this rank found out about its own part before the peers hear of the call.
  struct OwnPart {
    WindowRef windows[2];            // sendbuff, recvbuff in a registered window (id 0: in none)
    exec::BufferExport exports[2];   // buffers outside windows, exported for the peers
    std::optional<Error> error;      // published instead of the exports
    bool staged = false;             // stagesThroughScratch: decided once per call
    // Valid memory CUDA IPC cannot share (VMM, pools): published, and every rank runs the call through the peers'
    // scratch. This rank then knows the call is staged without hearing from its peers, and launches it at once as a
    // staged symmetric call; a peer with shareable memory learns it from this rank's entry (PeerParts).
    bool unshareable = false;
    // The call's agreed route is staged (Config::stageLateCalls: a peer was late), whatever its size.
    bool stagedLate = false;
  };
  struct DeferredItem {
    CallTicket ticket;
    exec::DeferredCall gate;
    std::optional<OwnPart> own;  // set: checked and published on the caller's thread; the proxy reads the peers
    // Set: a symmetric call, checked, built and published on the caller's thread; the proxy only launches it.
    std::optional<std::vector<Assumption>> earlyLaunch;
    bool abandonOnly = false;  // an abandoned call, kept in order (abandon() while the proxy is busy)
  };
  // What the peers published for a regular call.
  struct PeerParts {
    std::vector<exec::BufferExport> exports;  // [2 * rank + buffer]
    std::vector<WindowRef> windows;           // [2 * rank + buffer]
    bool launchedEarly = false;               // some peer launched symmetrically: its work cannot be taken back
    bool anyUnshareable = false;              // some peer's buffers cannot be mapped: stage the call
    bool routeStaged = false;                 // the agreed route (Config::stageLateCalls) is staged
  };
  // Late peers (Config::stageLateCalls). The route of one call (SegmentHeader::routes): direct (each rank maps its
  // peers' buffers) or staged through the peers' scratch (no peer address needed: launched at once).
  // Or pair-owned (Config::pairOwnedLateCalls): each pair's data moved by the later of its two ranks, which knows
  // both buffers, and a reduction done by the rank that calls last; a rank launches at once with its own arguments
  // and the peers that published before it (process_clique_pair_owned.cc).
  enum class Route : uint32_t { kUndecided = 0, kDirect = 1, kStaged = 2, kPairOwned = 3 };
  // Whether call `mine` takes an agreed route at all: every collective and AllToAllv that is not staged by size
  // already (Send/Recv groups are matched pair by pair instead, and wait for their partners).
  bool routed(const RankArgs& mine, const OwnPart& own) const;
  // The arguments this rank assumes for `peer` before it has called (trySymmetric, the pair-owned route): its own,
  // without a stream; of an AllToAllv, only the exchange with this rank.
  RankArgs mirrorOf(const RankArgs& mine, int peer) const;
  // Drops the peers' mirrors and the assumptions of a call that will not launch symmetrically after all.
  void forgetMirrors(PendingCall& pending, std::vector<Assumption>& assumed) const;
  // A staged AllToAllv and every pair-owned call take the copy-engine path on every rank (the path would otherwise
  // depend on every rank's sizes, which a rank that launches early does not know): ScheduleCache::get's
  // `copyEnginesFor` for such a call (this rank), else -1.
  int copyEnginesFor(const sched::CollectiveCall& call) const;
  // The route of call seq once some rank claimed it, else kUndecided.
  Route routeOf(uint64_t seq) const;
  // Claims `choice` for call seq unless a rank claimed first; returns the route that holds.
  Route claimRoute(uint64_t seq, Route choice);
  // The route this rank proposes for a routed call whose peers are late: pair-owned for data movement (when
  // Config::pairOwnedLateCalls), else staged.
  Route lateRouteFor(const RankArgs& mine) const;
  // The pair-owned route (process_clique_pair_owned.cc): claims this rank's pairs (all of them before publishing when
  // `claimedAll`: its memory cannot be mapped, and it already claimed them), builds the call from the peers that
  // published and mirrors of the others, maps the buffers of the peers whose pairs it owns and launches without
  // waiting; the watchdog compares the peers' arguments as they arrive. A rank that claimed all its pairs waits on the
  // host for peers that have not published (it moves their data too).
  void launchPairOwned(CallTicket& ticket, const OwnPart& own, bool claimedAll);
  // Its steps. Who moves what this rank exchanges with each peer ([p]: this rank or p): its pair claims, or for a
  // `reduction` whether it owns the call; every one of its pairs when `claimedAll` (then it waits for every peer).
  std::vector<int> claimOwners(const CallTicket& ticket, bool reduction, bool claimedAll);
  // pending.args of the peers: the real arguments (and exports) of those whose data this rank moves, mirrors of its
  // own for the others. Throws a peer's published error, or memory of a peer this rank cannot map.
  PeerParts readOwnedPeers(PendingCall& pending, const std::vector<int>& owner);
  // Validates the call and builds its schedule with this rank's owners (callOwner or pairOwner).
  void buildOwnedCall(PendingCall& pending, const std::vector<int>& owner, bool reduction);
  // Claims every pair of this rank in call seq before it publishes (memory no peer can map), or the whole call for a
  // `reduction`; throws when a peer with such memory claimed first (neither could move their pair).
  void claimAllPairsFirst(uint64_t seq, const std::string& what, bool reduction);
  // The word that decides the owner of a late reduction (sched::CollectiveCall::callOwner), as pair claims do.
  std::atomic<uint64_t>& callClaim(uint64_t seq) const;
  // After publishing a routed call that is not symmetric: direct if every peer publishes within the spin (or a peer
  // claimed it), else `late` (lateRouteFor), or the route a peer claimed first.
  Route decideRoute(uint64_t seq, Route late);
  // The spin for call seq: Config::rendezvousSpinUs, or none when a peer is two or more calls behind or was late for
  // the previous call (core/route_spin.h, read from the entries of call seq - 1).
  RouteSpin routeSpinOf(uint64_t seq) const;
  // Whether a call with these arguments goes through the peers' scratch (sched::CollectiveCall::peerScratchOnly): up
  // to Config::stagedMaxBytes in its largest buffer, every collective but AllToAllv. A function of arguments every rank
  // agrees on and of the configuration checked at init, so every process decides alike.
  bool stagesThroughScratch(const RankArgs& args) const;
  // Checks and exports this rank's buffers (a buffer inside a window needs neither); an error is kept, not thrown.
  OwnPart checkOwnPart(const RankArgs& mine) const;
  // Whether the call is symmetric (every peer buffer follows from this rank's own window references, or the program
  // touches no peer buffer at all: a staged call); if so
  // pending.call, schedule and binding are filled and `assumed` lists what the watchdog must confirm.
  bool trySymmetric(PendingCall& pending, const OwnPart& own, std::vector<Assumption>& assumed);
  // Writes this rank's entry of call pending.seq and releases it to the peers.
  void publish(const PendingCall& pending, const OwnPart& own, bool symmetric);
  // A symmetric call: compares the peers that already called, starts the watchdog, launches.
  void launchEarly(PendingCall& pending, const CallTicket& ticket, std::vector<Assumption> assumed);
  // A regular call: waits for every peer's entry and reads it into pending.args (and the slots become free).
  // Throws the first error a rank published, or a diverged call sequence.
  PeerParts readPeers(PendingCall& pending, const CallTicket& ticket);
  // Maps (or finds in their windows) the peer buffers rank_'s program of pending.schedule touches, into
  // pending.binding; `peers` holds the exports and window references of every peer the program touches.
  void bindTouchedPeerBuffers(PendingCall& pending, const PeerParts& peers);
  // Validates and builds the call like every other process, and maps the peer buffers this rank's program touches.
  // `staged`: OwnPart::staged.
  void bindPeers(PendingCall& pending, const CallTicket& ticket, const PeerParts& peers, bool staged);
  // Any error of a call some peer launched early ends the communicator (fail() opens the flags its GPU may wait on).
  void failIfPeerLaunched(const Error& e, bool peerLaunchedEarly);
  // Launches this rank's program; a failure fails the communicator (the peers may be waiting for it).
  void launchProgram(PendingCall& pending, const CallTicket& ticket);
  // CONCCL_HOST_LAPS=1: the key a launched call's laps are tallied under (base/host_laps.h).
  std::string lapTallyKey(const PendingCall& pending, const CallTicket& ticket) const;
  // launchSendRecv's steps (process_clique_p2p.cc). This rank's side of each op: the window it lies in, else its
  // checked buffer (a Send's, or a Recv from itself) or its export (a Recv from another process); an error is kept.
  struct OwnP2P {
    std::vector<WindowRef> windows;           // [op]
    std::vector<exec::BufferExport> exports;  // [op]
    // [op] a Recv into memory CUDA IPC cannot share: its sender goes through this rank's scratch
    // (sched::P2POp::viaScratch).
    std::vector<bool> viaScratch;
    std::optional<Error> error;
  };
  // `stageAll` (Config::stageLateCalls): every Recv from another process goes through this rank's scratch, so its
  // buffer is checked, not exported.
  OwnP2P checkOwnP2P(const RankArgs& mine, bool stageAll) const;
  // Publishes a record per op with another process in the pair's ring; returns each op's index in its ring.
  std::vector<uint64_t> publishP2P(const CallTicket& ticket, const RankArgs& mine, const OwnP2P& own);
  // Reads the partners' records in the same order into their mirrors ([peer]: the ops it shares with this rank, and
  // the address this rank writes for each of its Sends). Fails the communicator on the first error of either side.
  std::vector<RankArgs> readP2PPartners(const CallTicket& ticket, const RankArgs& mine,
                                        const std::vector<uint64_t>& pairIndex, const std::optional<Error>& ownError);
  // Late partners (Config::stageLateCalls): every op with another process goes through the receiver's scratch, so
  // this rank's program follows from its own ops. The partners' mirrors are built from them (each partner is assumed
  // to post the matching op with the same size) and each op's check against the partner's record is queued for the
  // watchdog (unmatchedP2P_), which consumes the records as they arrive.
  std::vector<RankArgs> mirrorP2PPartners(const CallTicket& ticket, const RankArgs& mine,
                                          const std::vector<uint64_t>& pairIndex);
  // Checks the queued ops whose partner record has arrived (in ring order per pair); fails the communicator on a
  // mismatch. True when none is left. Needs matchMutex_.
  bool matchP2PLocked();
  // The call of this rank's ops and the partners' mirrors, and its schedule (copy-engine path on every rank).
  void buildP2PCall(PendingCall& pending, const CallTicket& ticket, std::vector<RankArgs> mirrors);
  // Drops the mapping of a peer allocation the peer has retired, unless a window still holds it. Any thread.
  void closePeerImport(int peer, uint64_t allocId);
  // At the start of a call: the retirements the watchdog read from the peers' entries (it does not touch the windows
  // itself), and the peers' retirement logs.
  void closeRetiredPeerImports();
  // The least call count (`consumed`) the peers still here have read; UINT64_MAX without any.
  uint64_t peersConsumedThrough() const;
  // Retirement logs (core/retire_log.h). This rank's exports retired while its calls stopped (no call published for
  // a housekeeping period) go to its log; the peers' logs are applied as far as this rank has finished its calls
  // (hostDoneThrough_); the least count of this rank's records its peers still here have read (UINT64_MAX without
  // any).
  void logIdleRetirements();
  void applyPeerRetirementLogs();
  bool peerLogsHaveNews() const;  // a peer's log has records this rank has not read
  uint64_t peersLogReadThrough() const;
  // Call seq's host part (checks, mapping of the peers' buffers, launch) is over: on the caller's thread or the proxy.
  void noteHostDone(uint64_t seq) { raiseTo(hostDoneThrough_, seq + 1); }
  // Every GpuWatchdog housekeeping period (its thread): this rank's exports of memory freed since are retired (the
  // peers unmap it after the next call, whatever memory that call uses, or through the log if no call comes), the
  // peers' logs are applied, and retired units no peer can map any more are let go (here only: not on the calls'
  // path).
  void housekeeping();
  // waitAndLaunch without its capture bookkeeping (the capture watch, the relaxed scope, the capture's checks).
  // `poolMemory`: the call uses pool memory (then it is finished on the caller's thread, never deferred).
  void matchAndLaunch(CallTicket& ticket, bool poolMemory);
  // Publishes window operation `kind` (register or deregister) with `value` (size or window id) as call `seq`
  // and reads every peer's entry. Throws when a peer failed its part or did something else; returns the
  // peers' exports.
  std::vector<exec::BufferExport> windowRendezvous(uint64_t seq, int32_t kind, uint64_t value,
                                                   const exec::BufferExport& mine, const std::optional<Error>& ownError,
                                                   const std::string& what);

  Config config_;
  int rank_ = 0;
  int nranks_ = 0;
  int device_ = -1;
  std::string tag_;
  std::vector<int64_t> pids_;
  SharedSegment segment_;  // before executor_: the executor's registered flags live in it
  std::unique_ptr<Layout> layout_;
  std::unique_ptr<exec::Executor> executor_;
  std::unique_ptr<ScheduleCache> schedules_;  // made with the executor's options
  std::unique_ptr<EarlyLaunchCheck> earlyCheck_;  // what a call launched without waiting may assume (core/early_launch.h)
  uint64_t nextSeq_ = 0;
  uint64_t nextP2PGroup_ = 0;                        // Send/Recv groups of this rank (for messages)
  std::vector<uint64_t> sendsPosted_, recvsPosted_;  // [peer] this rank's Sends to / Recvs from it so far
  mutable std::mutex mutex_;                         // error_
  std::optional<Error> error_;

  // By id (ids count up in registration order, equal on every rank). Written on the caller's thread (while the proxy
  // is idle) under windowsMutex_, which the housekeeping's reads take (closePeerImport).
  std::map<uint64_t, Window> windows_;
  std::mutex windowsMutex_;
  uint64_t nextWindowId_ = 1;

  // Retirement logs (logIdleRetirements, applyPeerRetirementLogs). publishedThrough_: calls seq + 1 this rank has
  // published or is publishing (raised before its entry carries retirements: a retirement after that may concern
  // the call); hostDoneThrough_: calls whose host part is over here (calls finish in call order).
  std::atomic<uint64_t> publishedThrough_{0};
  std::atomic<uint64_t> hostDoneThrough_{0};
  uint64_t publishedAtLastHousekeeping_ = 0;  // the housekeeping's own
  std::mutex retireLogMutex_;                 // this rank's read cursors of the peers' logs

  std::mutex matchMutex_;  // unmatched_, stopWatchdog_; taken before mutex_ (fail) when both are needed
  std::condition_variable matchCv_;
  // The watchdog waits on matchCv_ with nothing to match (not napping between checks): only then must a new unmatched
  // call wake it. Waking a napping watchdog cost the caller a futex wake and the watchdog a pass, 2-3 us of every early
  // launch's host time while the peers were late (CONCCL_HOST_LAPS=1, one H100, 2026-12-05).
  bool watchdogParked_ = false;
  std::deque<Unmatched> unmatched_;
  // A Send or Recv launched before its partner posted it (mirrorP2PPartners): the partner's record k is checked later.
  struct UnmatchedP2P {
    int peer = 0;
    bool isSend = false;
    uint64_t k = 0;
    uint64_t bytes = 0;
    std::chrono::steady_clock::time_point launched;
    std::string call;  // the group's call, e.g. "concclSend #12"
    // "Send #3 of rank 0 to rank 1 (concclSend #12)", for messages: made only when one is written, not per op.
    std::string describe(int rank) const {
      return std::string(isSend ? "Send #" : "Recv #") + std::to_string(k) + " of rank " + std::to_string(rank) +
             (isSend ? " to" : " from") + " rank " + std::to_string(peer) + " (" + call + ")";
    }
  };
  std::deque<UnmatchedP2P> unmatchedP2P_;
  std::vector<std::pair<int, uint64_t>> retiredFromPeers_;  // (peer, allocation id) read by matchPublishedLocked
  bool stopWatchdog_ = false;
  std::thread watchdog_;  // started by the first symmetric call
  // The proxy thread of deferred calls (started by the first one) and its queue.
  std::mutex proxyMutex_;
  std::condition_variable proxyCv_;
  std::deque<DeferredItem> proxyQueue_;
  size_t proxyPending_ = 0;  // queued + being finished
  bool stopProxy_ = false;
  std::thread proxy_;
  std::string lastNoDeferReason_;  // logged once per reason
  bool poolBounceRefusalLogged_ = false;  // enterPoolBounce: the executor's first refusal is logged
  bool ranksShareProcess_ = false;  // another rank of this communicator is a thread of this process (deferrable())

  // GPU progress of this process's rank (gpu_watchdog.h): its GPU work that does not complete within timeoutMs
  // fails the communicator with concclTimeout, which every process sees through the segment's error word.
  std::unique_ptr<GpuWatchdog> gpuWatchdog_;
};

}  // namespace conccl
