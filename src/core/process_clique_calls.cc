// ProcessClique (core/process_clique.h), part: call matching: the mailbox rings, agreement of every rank's
// arguments, and the launch (the route of a late call: process_clique_route.cc).
// The shared segment it works on is described in core/process_segment.h.
#include "core/process_clique.h"
#include "core/process_segment.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>
#include <variant>

#include "base/bytes_text.h"
#include "base/host_laps.h"
#include "base/logging.h"
#include "base/scope_exit.h"
#include "base/types.h"

namespace conccl {

void ProcessClique::waitAndLaunch(CallTicket& ticket) {
  HostLaps::lap("api and group");
  // A call handed to the proxy is over there (runDeferred); Send/Recv groups count apart from the calls.
  const RankArgs& args = *ticket.call->args[static_cast<size_t>(rank_)];
  ScopeExit hostDone([&] {
    if (!args.deferred && args.kind != sched::CollKind::kSendRecv) noteHostDone(ticket.call->seq);
  });
  checkHealthy();
  const cudaStream_t stream = args.stream;
  const exec::CaptureStatus atEntry = exec::captureStatusOf(stream);
  if (atEntry == exec::CaptureStatus::kInvalidated) {
    CONCCL_THROW(concclInvalidUsage, ticket.what + ": the graph capture on the caller's stream was invalidated before "
                                                   "this call (by an earlier CUDA call of the capture)");
  }
  // On pool memory: its pointers moved onto the bounce regions, copied in by its launch and out once it is launched.
  bool bounce = false;
  RankArgs& mine = *ticket.call->args[static_cast<size_t>(rank_)];
  bool poolMemory = false;
  if (atEntry == exec::CaptureStatus::kNone) {
    bounce = enterPoolBounce(mine, &poolMemory);
  } else {
    poolMemory = usesPoolMemory(mine);
  }
  {
    // A captured call maps peers' buffers and may allocate beside the work it captures: in relaxed mode, or the
    // caller's global-mode capture would be invalidated.
    const exec::RelaxedCaptureScope relaxed(atEntry == exec::CaptureStatus::kActive);
    try {
      matchAndLaunch(ticket, poolMemory);
    } catch (...) {
      if (bounce) {
        try {
          leavePoolBounce(/*copyOut=*/false);
        } catch (const Error&) {  // the call's own error is the one to report
        }
      }
      throw;
    }
  }
  if (bounce) leavePoolBounce(/*copyOut=*/true);
  if (atEntry != exec::CaptureStatus::kActive) return;
  if (exec::captureStatusOf(stream) == exec::CaptureStatus::kInvalidated) {
    CONCCL_THROW(concclUnhandledCudaError,
                 ticket.what + ": the graph capture on the caller's stream was invalidated during this call");
  }
  // Its replays wait for the peers on the GPU, unseen by the launch counters: a killed peer must still be found.
  gpuWatchdog_->watchCapturedWork();
}

void ProcessClique::matchAndLaunch(CallTicket& ticket, bool poolMemory) {
  RankArgs& mine = *ticket.call->args[static_cast<size_t>(rank_)];
  if (!deferrable(mine) || poolMemory) {
    waitForProxyIdle(ticket.what);
    finishCall(ticket);
    return;
  }
  // Calls that always wait for their peers' arguments (unless late calls are staged: then a Send/Recv group launches
  // at once, and an AllToAllv is routed like any collective), and every call behind a deferred one (calls launch in
  // order).
  const bool waitsForPeers = !config_.stageLateCalls && (mine.kind == sched::CollKind::kSendRecv ||
                                                         mine.kind == sched::CollKind::kAllToAllv);
  if (proxyBusy() || waitsForPeers || !slotFreeNow(ticket.call->seq)) {
    if (deferToProxy(ticket, std::nullopt)) return;
    waitForProxyIdle(ticket.what);
    finishCall(ticket);
    return;
  }
  if (mine.kind == sched::CollKind::kSendRecv) {
    finishCall(ticket);
    return;
  }
  // The proxy is idle and the slot free: the call starts here, and is handed over only if the peers are late.
  closeRetiredPeerImports();
  std::optional<OwnPart> own = checkAndPublish(ticket, /*mayDeferLaunch=*/true);
  if (!own) return;  // symmetric or staged: launched, or handed to the proxy to launch
  if (!peersPublished(ticket.call->seq) && deferToProxy(ticket, own)) return;
  finishRegular(ticket, *own);
}

void ProcessClique::finishCall(CallTicket& ticket) {
  checkHealthy();
  closeRetiredPeerImports();
  if (ticket.call->args[static_cast<size_t>(rank_)]->kind == sched::CollKind::kSendRecv) {
    launchSendRecv(ticket);
    return;
  }
  waitForFreeSlot(ticket.call->seq, ticket.what);
  if (std::optional<OwnPart> own = checkAndPublish(ticket, /*mayDeferLaunch=*/false)) finishRegular(ticket, *own);
}

namespace {
// Enqueueing a program costs about one CUDA call per op (~1.5-3 us each where we measured, docs/cuda-executor.md);
// handing the launch to the proxy costs the caller about two (the gate: an event and a stream wait). Programs up to
// this many ops are cheaper to enqueue here; with Config::deferLongLaunches, longer ones (a staged 1 MiB AllReduce
// has dozens) go to the proxy.
constexpr size_t kInlineLaunchMaxOps = 4;
}  // namespace

std::optional<ProcessClique::OwnPart> ProcessClique::checkAndPublish(CallTicket& ticket, bool mayDeferLaunch) {
  PendingCall& pending = *ticket.call;
  // 1. This rank's own checks and exports, before the peers hear of the call: an error is published instead.
  OwnPart own = checkOwnPart(*pending.args[static_cast<size_t>(rank_)]);
  HostLaps::lap("own checks");
  const bool hasRoute = routed(*pending.args[static_cast<size_t>(rank_)], own);
  // Memory no peer can map: staged whatever the peers say. Claimed before publishing, so only a peer that launched
  // from its windows (which needs no entry of this rank) can have claimed direct: then the ranks passed different
  // kinds of memory, which is refused on every rank (this rank publishes the error). On the pair-owned route (a peer
  // was late before this rank) this rank claims all its pairs first: it moves their data, and no peer maps its memory.
  bool pairOwned = false, claimedAll = false;
  if (hasRoute && own.unshareable) {
    const Route route = claimRoute(pending.seq, Route::kStaged);
    if (route == Route::kPairOwned) {
      claimAllPairsFirst(pending.seq, ticket.what, sched::isReduction(pending.args[static_cast<size_t>(rank_)]->kind));
      pairOwned = claimedAll = true;
    } else if (route != Route::kStaged) {
      own.error = Error(concclInvalidUsage,
                        "rank " + std::to_string(rank_) + " passed memory that CUDA IPC cannot share to " +
                            pending.args[static_cast<size_t>(rank_)]->apiName +
                            " while a peer launched it from its registered windows; use the same kind of memory on "
                            "every rank");
    }
  }
  if (hasRoute && routeOf(pending.seq) == Route::kStaged) own.stagedLate = true;
  if (hasRoute && routeOf(pending.seq) == Route::kPairOwned) pairOwned = true;
  // 2. A symmetric call launches without waiting for the peers.
  std::vector<Assumption> assumed;
  bool symmetric = !own.error && !pairOwned && trySymmetric(pending, own, assumed);
  if (hasRoute && symmetric && !own.stagedLate) {
    const Route route = claimRoute(pending.seq, Route::kDirect);
    if (route != Route::kDirect) {
      // From its windows, but a peer already took the late route (it was late and its buffers are outside the
      // windows): staged, rebuilt as such, or pair-owned (launchPairOwned builds it).
      own.stagedLate = route == Route::kStaged;
      pairOwned = route == Route::kPairOwned;
      symmetric = false;
      forgetMirrors(pending, assumed);
      if (own.stagedLate) symmetric = trySymmetric(pending, own, assumed);
    }
  }
  HostLaps::lap("symmetric build");
  // 3. Publish.
  publish(pending, own, symmetric);
  HostLaps::lap("publish");
  // 4. Late peers: a regular call whose peers do not all arrive within the spin takes the late route (staged, or
  // pair-owned for data movement), and is launched here.
  if (hasRoute && !symmetric && !own.stagedLate && !pairOwned) {
    const Route route = decideRoute(pending.seq, lateRouteFor(*pending.args[static_cast<size_t>(rank_)]));
    HostLaps::lap("route (spin for the peers)");
    if (route == Route::kStaged) {
      own.stagedLate = true;
      symmetric = trySymmetric(pending, own, assumed);  // false: the regular path runs it staged (PeerParts)
      HostLaps::lap("staged build");
    }
    pairOwned = route == Route::kPairOwned;
  }
  if (pairOwned) {
    launchPairOwned(ticket, own, claimedAll);
    return std::nullopt;
  }
  if (symmetric) {
    const size_t ops = pending.schedule->programs[static_cast<size_t>(rank_)].ops.size();
    if (mayDeferLaunch && config_.deferLongLaunches && ops > kInlineLaunchMaxOps && deferEarlyLaunch(ticket, assumed)) {
      return std::nullopt;
    }
    launchEarly(pending, ticket, std::move(assumed));
    return std::nullopt;
  }
  return own;
}

void ProcessClique::finishRegular(CallTicket& ticket, const OwnPart& own) {
  // 4. Wait for every peer's entry and read them; 5. validate, build and map, as every process does; 6. launch.
  PendingCall& pending = *ticket.call;
  const PeerParts peers = readPeers(pending, ticket);
  HostLaps::lap("wait for the peers");
  bindPeers(pending, ticket, peers,
            own.staged || own.unshareable || own.stagedLate || peers.anyUnshareable || peers.routeStaged);
  launchProgram(pending, ticket);
}

ProcessClique::OwnPart ProcessClique::checkOwnPart(const RankArgs& mine) const {
  const int n = nranks_;
  OwnPart own;
  own.windows[0] = findWindow(mine.sendbuff, 0);
  own.windows[1] = findWindow(mine.recvbuff, 0);
  own.staged = stagesThroughScratch(mine);
  try {
    const sched::CollectiveCall solo = soloCallOf(mine);
    exec::CallBinding soloBinding;
    soloBinding.buffers.assign(static_cast<size_t>(n), {});
    soloBinding.buffers[static_cast<size_t>(rank_)] = {const_cast<void*>(mine.sendbuff), mine.recvbuff};
    // exportBuffer checks each buffer as checkBuffer does, with the same driver query it exports from. A buffer
    // inside a registered window needs neither: the window was checked and mapped by the peers. A staged call's
    // peers never touch this rank's buffers: they are checked and not exported, so such calls also take memory that
    // CUDA IPC cannot share (cudaMallocAsync pools, the VMM API: PyTorch's expandable segments).
    // An in-place staged call's second buffer lies in the allocation its first was checked in.
    exec::Executor::CheckedAllocations checked;
    forEachUsedBuffer(solo, soloBinding, rank_, [&](int b, void* ptr, size_t bytes, const std::string& what) {
      CONCCL_ASSERT(b >= 0 && b < 2);
      if (findWindow(ptr, bytes).id != 0) return;
      if (own.staged) {
        checked.check(*executor_, rank_, ptr, bytes, what.c_str(), mine.stream);
        return;
      }
      // Memory CUDA IPC cannot share (PyTorch's expandable segments, pools) is staged whatever the size (AllToAllv
      // too).
      if (std::optional<exec::BufferExport> e =
              executor_->exportIfShareable(rank_, ptr, bytes, what.c_str(), mine.stream)) {
        own.exports[b] = *e;
      } else {
        own.unshareable = true;
      }
    });
  } catch (const Error& e) {
    own.error = e;
  }
  return own;
}

sched::CollectiveCall ProcessClique::soloCallOf(const RankArgs& mine) const {
  const auto n = static_cast<size_t>(nranks_);
  const auto me = static_cast<size_t>(rank_);
  sched::CollectiveCall solo;
  solo.nranks = nranks_;
  solo.kind = mine.kind;
  solo.dtype = mine.dtype;
  solo.op = mine.op;
  solo.root = mine.root;
  solo.count = mine.count;
  solo.inPlace.assign(n, false);
  solo.inPlace[me] = mine.inPlace;
  if (mine.kind == sched::CollKind::kAllToAllv) {
    solo.sendCounts.assign(n, {});
    solo.sendDispls.assign(n, {});
    solo.recvCounts.assign(n, {});
    solo.recvDispls.assign(n, {});
    solo.sendCounts[me] = mine.sendCounts;
    solo.sendDispls[me] = mine.sendDispls;
    solo.recvCounts[me] = mine.recvCounts;
    solo.recvDispls[me] = mine.recvDispls;
  }
  return solo;
}

bool ProcessClique::stagesThroughScratch(const RankArgs& args) const {
  return fitsStaging(args, nranks_, config_.stagedMaxBytes);
}

bool ProcessClique::trySymmetric(PendingCall& pending, const OwnPart& own, std::vector<Assumption>& assumed) {
  // Every peer buffer this rank's program touches follows from its own pointers in the windows, or there is none (a
  // staged call moves everything through the peers' scratch). The peers are assumed to call exactly like this rank;
  // the watchdog checks that they did.
  const int n = nranks_;
  const RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  // Memory no peer can map makes the call staged on every rank (they read this rank's entry), so this rank knows it.
  const bool staged = own.staged || own.unshareable || own.stagedLate;
  // An in-place Gather or Scatter root keeps its own block inside the big buffer (at root * count), so its
  // pointers differ from the peers' by construction: it cannot speak for them, and takes the regular path (unless
  // staged: then no peer pointer is needed).
  const bool rootInPlaceBlock = mine.inPlace && mine.root == rank_ &&
                                (mine.kind == sched::CollKind::kGather || mine.kind == sched::CollKind::kScatter);
  // An AllToAllv's peers differ in their counts: only its staged form (whose program for this rank follows from this
  // rank's counts alone) can be built before they call.
  const bool allToAllv = mine.kind == sched::CollKind::kAllToAllv;
  if ((windows_.empty() && !staged) || (allToAllv && !staged) || (rootInPlaceBlock && !staged)) return false;
  for (int p = 0; p < n; ++p) {
    if (p != rank_) pending.args[static_cast<size_t>(p)] = mirrorOf(mine, p);
  }
  bool symmetric = false;
  try {
    assembleCall(pending, n);
    pending.call.peerScratchOnly = staged;
    pending.schedule = schedules_->get(pending.call, allToAllv ? copyEnginesFor(pending.call) : -1);
    symmetric = bindSymmetric(pending, own.windows, assumed);
    const RankArgs& self = *pending.args[static_cast<size_t>(rank_)];
    if (symmetric && sched::isRooted(self.kind) && self.root != rank_) {
      // Whether the root runs in place is the root's own business (a non-root's buffers say nothing about it):
      // symmetric only if it changes neither this rank's program nor its path. (The other peers' flags are assumed
      // equal to this rank's, as their pointers are; the watchdog checks both once they publish.)
      symmetric = earlyCheck_->ignoresInPlaceOf(*pending.schedule, pending.call, rank_, self.root);
    }
  } catch (const Error&) {
    symmetric = false;  // the regular path builds the same call again and reports the error everywhere
  }
  if (!symmetric) forgetMirrors(pending, assumed);
  return symmetric;
}

void ProcessClique::forgetMirrors(PendingCall& pending, std::vector<Assumption>& assumed) const {
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_) pending.args[static_cast<size_t>(p)].reset();
  }
  assumed.clear();
}

RankArgs ProcessClique::mirrorOf(const RankArgs& mine, int peer) const {
  // What this rank assumes of a peer that has not called: the same call (checked once it has: mismatch). Of an
  // AllToAllv it knows only the exchange with itself: the peer sends this rank what this rank receives from it, and
  // receives what this rank sends it; its exchanges with the other ranks are left empty (they are not in this rank's
  // program). The programs built from it (staged, or pair-owned with the peer as the owner) do not touch the peer's
  // buffers, so its displacements do not matter.
  RankArgs mirror = mine;
  mirror.stream = nullptr;
  if (mine.kind != sched::CollKind::kAllToAllv) return mirror;
  const auto un = static_cast<size_t>(nranks_);
  const auto me = static_cast<size_t>(rank_);
  const auto p = static_cast<size_t>(peer);
  mirror.sendCounts.assign(un, 0);
  mirror.sendDispls.assign(un, 0);
  mirror.recvCounts.assign(un, 0);
  mirror.recvDispls.assign(un, 0);
  mirror.sendCounts[me] = mine.recvCounts[p];
  mirror.recvCounts[me] = mine.sendCounts[p];
  return mirror;
}

int ProcessClique::copyEnginesFor(const sched::CollectiveCall& call) const {
  // The peers' programs in a schedule built from mirrors hold only their share with this rank, so their sizes say
  // nothing about the call: take the copy-engine path, as every rank of a staged AllToAllv does whichever view it
  // built from, so that the ranks never mix paths (as buildP2PCall does for Send/Recv). The schedule cache keeps such
  // a schedule apart, once per shape.
  return call.peerScratchOnly || !call.pairOwner.empty() || call.callOwner >= 0 ? rank_ : -1;
}

void ProcessClique::publish(const PendingCall& pending, const OwnPart& own, bool symmetric) {
  const uint64_t seq = pending.seq;
  const int n = nranks_;
  const RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  MailboxEntry& out = layout_->entry(rank_, seq);
  out.kind = static_cast<int32_t>(mine.kind);
  out.dtype = static_cast<int32_t>(mine.dtype);
  out.op = static_cast<int32_t>(mine.op);
  out.root = mine.root;
  out.count = mine.count;
  out.inPlace = mine.inPlace ? 1 : 0;
  out.pushInputs = mine.pushInputs ? 1 : 0;
  out.errorCode = own.error ? static_cast<int32_t>(own.error->code()) : 0;
  copyMessage(out.error, own.error ? own.error->message() : std::string());
  out.buffers[0] = own.exports[0];
  out.buffers[1] = own.exports[1];
  for (int b = 0; b < 2; ++b) {
    out.windowId[b] = own.windows[b].id;
    out.windowOffset[b] = own.windows[b].offset;
  }
  out.launchedEarly = symmetric ? 1 : 0;
  out.unshareable = own.unshareable && !own.error ? 1 : 0;
  // Before the retirements are taken: one logged after that may concern this call (logIdleRetirements).
  raiseTo(publishedThrough_, seq + 1);
  std::vector<uint64_t> retired = own.error ? std::vector<uint64_t>{} : executor_->takeRetiredExports(rank_, seq);
  out.retiredCount = static_cast<uint32_t>(std::min<size_t>(retired.size(), kMaxRetired));
  for (uint32_t i = 0; i < out.retiredCount; ++i) out.retired[i] = retired[i];
  if (retired.size() > kMaxRetired) {
    // Not lost: handed back, they go out with the next call.
    executor_->requeueRetiredExports(rank_, std::vector<uint64_t>(retired.begin() + kMaxRetired, retired.end()));
  }
  uint64_t* vec = layout_->vectors(out);
  if (mine.kind == sched::CollKind::kAllToAllv && !own.error) {
    const std::vector<size_t>* parts[4] = {&mine.sendCounts, &mine.sendDispls, &mine.recvCounts, &mine.recvDispls};
    for (int v = 0; v < 4; ++v) {
      for (int r = 0; r < n; ++r) {
        vec[static_cast<size_t>(v * n + r)] =
            static_cast<size_t>(r) < parts[v]->size() ? (*parts[v])[static_cast<size_t>(r)] : 0;
      }
    }
  }
  markPublished(out, seq);
}

void ProcessClique::launchEarly(PendingCall& pending, const CallTicket& ticket, std::vector<Assumption> assumed) {
  // Peers that called before this rank are compared first: a mismatch found here is reported before any work is
  // enqueued.
  bool wakeWatchdog = false;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    unmatched_.push_back(Unmatched{pending.seq, true, Clock::now(), ticket.what, std::move(assumed)});
    matchPublishedLocked();
    wakeWatchdog = watchdogParked_;
  }
  checkHealthy();
  startWatchdog();
  if (wakeWatchdog) matchCv_.notify_all();
  launchProgram(pending, ticket);
}

ProcessClique::PeerParts ProcessClique::readPeers(PendingCall& pending, const CallTicket& ticket) {
  const uint64_t seq = pending.seq;
  const int n = nranks_;
  waitForPeersOf(seq, ticket.what);
  std::optional<Error> firstError;
  PeerParts peers;
  peers.exports.resize(static_cast<size_t>(2 * n));
  peers.windows.resize(static_cast<size_t>(2 * n));
  for (int p = 0; p < n; ++p) {
    MailboxEntry& e = layout_->entry(p, seq);
    if (e.kind == kWindowRegisterKind || e.kind == kWindowDeregisterKind) {
      // The call sequences diverged: nothing after this point can be matched any more.
      layout_->rank(rank_).consumed.store(seq + 1, std::memory_order_release);
      std::string reason = "rank " + std::to_string(p) + " called " + entryName(e.kind) + " where rank " +
                           std::to_string(rank_) + " called " + ticket.what +
                           " (every rank must make the same "
                           "calls in the same order)";
      fail(concclInvalidUsage, reason);
      CONCCL_THROW(concclInvalidUsage, reason);
    }
    if (e.errorCode != 0 && !firstError) {
      firstError = Error(static_cast<concclResult_t>(e.errorCode), std::string(e.error));
    }
    if (p == rank_) continue;
    peers.launchedEarly = peers.launchedEarly || e.launchedEarly != 0;
    peers.anyUnshareable = peers.anyUnshareable || e.unshareable != 0;
    RankArgs a = argsOf(e, layout_->vectors(e), n);
    for (int b = 0; b < 2; ++b) {
      peers.exports[static_cast<size_t>(2 * p + b)] = e.buffers[b];
      peers.windows[static_cast<size_t>(2 * p + b)] = WindowRef{e.windowId[b], e.windowOffset[b]};
    }
    for (uint32_t i = 0; i < e.retiredCount && i < kMaxRetired; ++i) closePeerImport(p, e.retired[i]);
    pending.args[static_cast<size_t>(p)] = std::move(a);
  }
  // A staged route means some rank may have launched without reading its peers (decideRoute).
  peers.routeStaged = routeOf(seq) == Route::kStaged;
  peers.launchedEarly = peers.launchedEarly || peers.routeStaged || routeOf(seq) == Route::kPairOwned;
  // Read everything this call needs: the peers may reuse the slots from here on.
  layout_->rank(rank_).consumed.store(seq + 1, std::memory_order_release);
  if (firstError) {
    Error e = Error(*firstError).addContext(ticket.what);
    failIfPeerLaunched(e, peers.launchedEarly);
    throw e;
  }
  return peers;
}

void ProcessClique::bindPeers(PendingCall& pending, const CallTicket& ticket, const PeerParts& peers, bool staged) {
  const int n = nranks_;
  // An error of this rank alone: the others must not wait for it.
  auto failOnThisRank = [&](Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
  };
  try {
    assembleCall(pending, n);
    // Decided as the peers that launched early decided it (trySymmetric): from this rank's arguments, which
    // assembleCall has just found equal to every peer's where the decision depends on them.
    pending.call.peerScratchOnly = staged;
    pending.schedule = schedules_->get(
        pending.call, pending.call.kind == sched::CollKind::kAllToAllv ? copyEnginesFor(pending.call) : -1);
  } catch (Error& e) {
    // Agreement errors are identical on every rank and leave the communicator usable, unless a peer already
    // launched; a CUDA error (the schedule's scratch, say) is this rank's alone.
    if (e.code() == concclUnhandledCudaError) {
      failOnThisRank(e);
      throw;
    }
    e.addContext(ticket.what);
    failIfPeerLaunched(e, peers.launchedEarly);
    throw;
  }
  try {
    bindTouchedPeerBuffers(pending, peers);
  } catch (Error& e) {
    // Mapping a peer's buffer failed on this rank only (CUDA IPC, a VMM import through the owner's handle server,
    // or a wait for an earlier mapping's close that ran out of time, whatever the error code): this rank cannot run
    // its part.
    failOnThisRank(e);
    throw;
  }
}

void ProcessClique::bindTouchedPeerBuffers(PendingCall& pending, const PeerParts& peers) {
  // Map only the peer buffers this rank's program touches. A peer whose buffer this program does not touch
  // does not wait for this rank either, so it may already have finished the call and freed that buffer.
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    pending.binding.buffers[static_cast<size_t>(p)].assign(2, nullptr);
    pending.binding.streams[static_cast<size_t>(p)] = nullptr;
  }
  auto bind = [&](const sched::Location& loc) {
    if (loc.rank == rank_ || loc.buffer == sched::kScratch) return;
    CONCCL_ASSERT(loc.buffer >= 0 && loc.buffer < 2);
    void*& slot = pending.binding.buffers[static_cast<size_t>(loc.rank)][static_cast<size_t>(loc.buffer)];
    if (slot != nullptr) return;
    const size_t index = static_cast<size_t>(2 * loc.rank + loc.buffer);
    // Inside one of the peer's windows (already mapped), or exported.
    const size_t bytes = sched::bufferBytes(pending.call, loc.rank)[static_cast<size_t>(loc.buffer)];
    if (peers.windows[index].id != 0) slot = peerAddress(loc.rank, peers.windows[index], bytes);
    if (slot != nullptr) return;
    const exec::BufferExport& e = peers.exports[index];
    if (e.allocId == 0) {
      CONCCL_THROW(concclInternalError, "the schedule uses buffer " + std::to_string(loc.buffer) + " of rank " +
                                            std::to_string(loc.rank) + ", which that rank did not export");
    }
    slot = executor_->importBuffer(loc.rank, e);
  };
  sched::forEachPeerLocation(pending.schedule->programs[static_cast<size_t>(rank_)], rank_, bind);
}

void ProcessClique::failIfPeerLaunched(const Error& e, bool peerLaunchedEarly) {
  if (peerLaunchedEarly) fail(e.code(), e.message() + " (a peer had already launched its part)");
}

std::string ProcessClique::lapTallyKey(const PendingCall& pending, const CallTicket& ticket) const {
  // "concclAllReduce 64 MiB": the call's name without its number, and its largest buffer on this rank.
  const std::string name = ticket.what.substr(0, ticket.what.find(" #"));
  size_t bytes = 0;
  for (size_t b : sched::bufferBytes(pending.call, rank_)) bytes = std::max(bytes, b);
  return name + " " + bytesText(bytes);
}

void ProcessClique::launchProgram(PendingCall& pending, const CallTicket& ticket) {
  // A deferred call never captures a graph: instantiating can wait for the device, and the caller's stream waits on
  // the device for this very call.
  const bool deferred = pending.args[static_cast<size_t>(rank_)]->deferred;
  if (deferred) pending.binding.eagerOnly = true;
  // On the bounce regions and launched here on the caller's stream: the launch enqueues the copies in (a deferred call
  // had them enqueued before its gate).
  pending.binding.poolBounce = !deferred && pending.args[static_cast<size_t>(rank_)]->onBounceRegions;
  CONCCL_TRACE(rank_, device_,
               "launch " + ticket.what + " (seq " + std::to_string(pending.seq) + ", " +
                   std::to_string(pending.schedule->programs[static_cast<size_t>(rank_)].ops.size()) + " ops" +
                   (pending.call.peerScratchOnly ? ", staged" : "") + ") on " +
                   (deferred ? "the launch stream (proxy)" : "the caller's stream ") +
                   addressText(pending.binding.streams[static_cast<size_t>(rank_)]));
  HostLaps::lap("bind");
  try {
    executor_->launch(*pending.schedule, pending.binding, rank_);
    if (gpuWatchdog_) gpuWatchdog_->launched(rank_, ticket.what);
    HostLaps::lap("after the launch");  // the executor's laps come before: entry, then graph launch or eager enqueue
    if (HostLaps::tallying()) HostLaps::tally(lapTallyKey(pending, ticket));  // the key's own cost is not a lap
    if (logLevel() >= LogLevel::kTrace) {
      if (std::string laps = HostLaps::take(); !laps.empty()) {
        CONCCL_TRACE(rank_, device_, "host laps of " + ticket.what + ": " + laps);
      }
    }
  } catch (Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
}

void ProcessClique::waitForFreeSlot(uint64_t seq, const std::string& what) {
  if (seq < kRingEntries) return;
  const uint64_t previous = seq - kRingEntries;
  // This rank's own reading of the call that used the slot (it compares its own entry with the peers').
  for (;;) {
    int missing = -1;
    uint64_t front = 0;
    {
      std::lock_guard<std::mutex> lock(matchMutex_);
      matchPublishedLocked();
      if (unmatched_.empty() || unmatched_.front().seq > previous) break;
      front = unmatched_.front().seq;
      for (int p = 0; p < nranks_ && missing < 0; ++p) {
        if (p != rank_ && layout_->entry(p, front).published.load(std::memory_order_acquire) != front + 1) missing = p;
      }
    }
    checkHealthy();
    if (missing < 0) continue;
    waitFor([&] { return layout_->entry(missing, front).published.load(std::memory_order_acquire) == front + 1; },
            missing, what + " (waiting for a free mailbox slot)");
  }
  checkHealthy();
  // The peers' reading of it.
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    waitFor([&] { return layout_->rank(p).consumed.load(std::memory_order_acquire) > previous; }, p,
            what + " (waiting for a free mailbox slot)");
  }
}

void ProcessClique::waitForPeersOf(uint64_t seq, const std::string& what) {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    MailboxEntry& e = layout_->entry(p, seq);
    waitFor([&] { return e.published.load(std::memory_order_acquire) == seq + 1; }, p, what);
  }
  // Every peer published seq, so every earlier call too: the unmatched ones can all be compared now.
  bool done = false;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    done = matchPublishedLocked();
  }
  checkHealthy();
  CONCCL_ASSERT(done);
}

std::string ProcessClique::mismatch(const Unmatched& u, int peer) const {
  const MailboxEntry& m = layout_->entry(rank_, u.seq);
  const MailboxEntry& e = layout_->entry(peer, u.seq);
  const std::string who = "rank " + std::to_string(peer);
  const std::string me = "rank " + std::to_string(rank_);
  if (e.kind != m.kind) {
    return who + " called " + entryName(e.kind) + " where " + me + " called " + u.what +
           " (every rank must make the same calls in the same order)";
  }
  if (e.errorCode != 0) return who + " refused its arguments: " + std::string(e.error);
  const RankArgs mine = argsOf(m, layout_->vectors(m), nranks_);
  const RankArgs peers = argsOf(e, layout_->vectors(e), nranks_);
  // Both launched without waiting, one staged (memory its peers cannot map), the other from its windows: their
  // programs do not fit together.
  // (Not where the ranks agreed on the route: then every rank took it.)
  if (m.launchedEarly != 0 && e.launchedEarly != 0 && m.unshareable != e.unshareable && !stagesThroughScratch(mine) &&
      routeOf(u.seq) == Route::kUndecided) {
    const std::string staged = m.unshareable != 0 ? me : who;
    return staged + " passed memory that CUDA IPC cannot share (so it staged " + u.what + " through scratch) while " +
           (m.unshareable != 0 ? who : me) +
           " launched it from its registered windows; use the same kind of memory on every rank";
  }
  if (std::string problem = disagreement(mine, rank_, peers, peer); !problem.empty()) {
    return problem + " (" + u.what + ")";
  }
  if (mine.kind == sched::CollKind::kAllToAllv) {
    // A staged AllToAllv launched from this rank's counts alone (mirrorOf): the peer's must fit them.
    const auto self = static_cast<size_t>(rank_);
    const auto p = static_cast<size_t>(peer);
    auto count = [](const std::vector<size_t>& v, size_t i) { return i < v.size() ? v[i] : size_t{0}; };
    if (count(peers.sendCounts, self) != count(mine.recvCounts, p) ||
        count(peers.recvCounts, self) != count(mine.sendCounts, p)) {
      return "ranks disagree on the counts of " + u.what + ": " + me + " sends " +
             std::to_string(count(mine.sendCounts, p)) + " and expects " + std::to_string(count(mine.recvCounts, p)) +
             " elements to and from " + who + ", which sends " + std::to_string(count(peers.sendCounts, self)) +
             " and expects " + std::to_string(count(peers.recvCounts, self));
    }
  }
  // In place or not matters for every rank of the unrooted collectives, only for the root of the rooted ones (a
  // non-root took this path only where the root's choice changes nothing for it).
  // (On the pair-owned route a rank's in-place choice is its own: whoever moves a pair's data read the other's.)
  if (!sched::isRooted(mine.kind) && mine.inPlace != peers.inPlace && routeOf(u.seq) != Route::kPairOwned) {
    auto how = [](bool inPlace) { return inPlace ? "in place" : "with separate buffers"; };
    return "ranks disagree on in-place: " + me + " called " + u.what + " " + how(mine.inPlace) + ", " + who + " " +
           how(peers.inPlace);
  }
  for (const Assumption& a : u.assumed) {
    if (a.peer != peer) continue;
    const WindowRef theirs{e.windowId[a.buffer], e.windowOffset[a.buffer]};
    if (theirs == a.ref) continue;
    return me + " launched " + u.what + " as a symmetric call, with " + who + "'s " + bufferName(a.buffer) +
           " at offset " + std::to_string(a.ref.offset) + " of window " + std::to_string(a.ref.id) +
           " (like its own), but " + who + " passed " +
           (theirs.id != 0 ? "offset " + std::to_string(theirs.offset) + " of window " + std::to_string(theirs.id)
                           : std::string("a buffer outside every window")) +
           " (symmetric calls need the same window and offset on every rank)";
  }
  return {};
}

bool ProcessClique::matchPublishedLocked() {
  while (!unmatched_.empty()) {
    const Unmatched& u = unmatched_.front();
    if (u.compare) {
      for (int p = 0; p < nranks_; ++p) {
        if (p != rank_ && layout_->entry(p, u.seq).published.load(std::memory_order_acquire) != u.seq + 1) {
          return false;
        }
      }
      for (int p = 0; p < nranks_; ++p) {
        if (p == rank_) continue;
        std::string problem = mismatch(u, p);
        if (!problem.empty()) {
          unmatched_.clear();
          fail(concclInvalidUsage, problem);
          return true;
        }
        const MailboxEntry& e = layout_->entry(p, u.seq);
        for (uint32_t i = 0; i < e.retiredCount && i < kMaxRetired; ++i)
          retiredFromPeers_.emplace_back(p, e.retired[i]);
      }
    }
    layout_->rank(rank_).consumed.store(u.seq + 1, std::memory_order_release);
    unmatched_.pop_front();
  }
  return true;
}

}  // namespace conccl
