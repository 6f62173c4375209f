#include "core/process_clique.h"

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

#include "core/logging.h"
#include "core/types.h"

namespace conccl {
namespace {

using Clock = std::chrono::steady_clock;

// Calls in flight per rank before a rank waits for its slowest peer to catch up. Calls are read as soon as
// a peer reaches them, so a small ring only throttles a rank that is many calls ahead of a peer.
constexpr uint32_t kRingEntries = 16;
// Ids of unmapped allocations one entry can carry; more wait for the next call.
constexpr uint32_t kMaxRetired = 8;
constexpr size_t kMessageBytes = 768;
constexpr uint64_t kSegmentMagic = 0x636f6e63636c5347ull;  // "concclSG"

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free &&
                  std::atomic<int64_t>::is_always_lock_free,
              "shared-memory synchronisation needs address-free (lock-free) atomics");

struct SegmentHeader {
  uint64_t magic;
  uint32_t nranks;
  uint32_t ringEntries;
  std::atomic<uint32_t> errorState;  // 0 healthy, 1 being written, 2 written
  int32_t errorCode;
  int32_t errorRank;
  char errorMessage[kMessageBytes];
};

struct alignas(64) RankShared {
  std::atomic<int64_t> pid;
  std::atomic<uint32_t> departed;
  std::atomic<uint64_t> consumed;  // calls (seq + 1) this rank has read from every mailbox, or abandoned
};

struct MailboxEntry {
  std::atomic<uint64_t> published;  // seq + 1 once the entry is complete
  int32_t kind, dtype, op, root;
  uint64_t count;
  uint32_t inPlace;
  int32_t errorCode;  // concclSuccess, or the error this rank found in its own arguments
  char error[kMessageBytes];
  exec::BufferExport buffers[2];  // exported when not inside a window (allocId 0: not exported)
  uint64_t windowId[2];           // sendbuff / recvbuff as passed lie in this window (0: in none) ...
  uint64_t windowOffset[2];       // ... at this offset
  uint32_t launchedEarly;         // 1: a symmetric call this rank launched without waiting for the peers
  uint32_t retiredCount;
  uint64_t retired[kMaxRetired];
  // followed by AllToAllv: sendCounts, sendDispls, recvCounts, recvDispls (nranks uint64 each)
};

// Send/Recv: every ordered pair (owner, peer) has two rings of records, the owner's sends to the peer and its
// receives from it, each read by the peer alone. Records of a ring pair up with the peer's opposite ring in
// order: the owner's k-th send to p meets p's k-th receive from the owner.
constexpr uint32_t kP2PRingRecords = 16;

struct alignas(64) P2PRingHeader {
  std::atomic<uint64_t> consumed;  // records the peer has read
};

struct P2PRecord {
  std::atomic<uint64_t> published;  // index + 1 once complete
  uint64_t bytes;
  int32_t errorCode;  // concclSuccess, or the error the owner found in its group
  char error[256];
  exec::BufferExport buffer;  // receives: where the sender must write (allocId 0: see the window)
  uint64_t windowId, windowOffset;
};

// Entry kinds beside sched::CollKind's values: the collective window operations, which take ring slots too.
constexpr int32_t kWindowRegisterKind = 1000;
constexpr int32_t kWindowDeregisterKind = 1001;

size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

const char* apiNameOf(sched::CollKind kind) {
  using K = sched::CollKind;
  switch (kind) {
    case K::kAllGather:
      return "concclAllGather";
    case K::kReduceScatter:
      return "concclReduceScatter";
    case K::kAllReduce:
      return "concclAllReduce";
    case K::kBroadcast:
      return "concclBroadcast";
    case K::kReduce:
      return "concclReduce";
    case K::kAllToAll:
      return "concclAllToAll";
    case K::kAllToAllv:
      return "concclAllToAllv";
    case K::kGather:
      return "concclGather";
    case K::kScatter:
      return "concclScatter";
    case K::kSendRecv:
      return "concclSend/concclRecv";
  }
  return "conccl?";
}

const char* entryName(int32_t kind) {
  if (kind == kWindowRegisterKind) return "concclCommWindowRegister";
  if (kind == kWindowDeregisterKind) return "concclCommWindowDeregister";
  return apiNameOf(static_cast<sched::CollKind>(kind));
}

const char* bufferName(int b) { return b == 0 ? "sendbuff" : "recvbuff"; }

// The arguments a collective's mailbox entry carries (no pointers: they travel as exports or window refs);
// `vectors`: the entry's AllToAllv vectors.
RankArgs argsOf(const MailboxEntry& e, const uint64_t* vectors, int n) {
  RankArgs a;
  a.kind = static_cast<sched::CollKind>(e.kind);
  a.dtype = static_cast<concclDataType_t>(e.dtype);
  a.op = static_cast<concclRedOp_t>(e.op);
  a.root = e.root;
  a.count = e.count;
  a.inPlace = e.inPlace != 0;
  a.apiName = apiNameOf(a.kind);
  if (a.kind == sched::CollKind::kAllToAllv) {
    std::vector<size_t>* parts[4] = {&a.sendCounts, &a.sendDispls, &a.recvCounts, &a.recvDispls};
    for (int k = 0; k < 4; ++k) parts[k]->assign(vectors + k * n, vectors + (k + 1) * n);
  }
  return a;
}

void copyMessage(char (&dst)[kMessageBytes], const std::string& text) {
  const size_t n = std::min(text.size(), kMessageBytes - 1);
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

// False once the process is gone: no such pid, or a zombie waiting for its parent to reap it.
bool processAlive(int64_t pid) {
  if (pid <= 0) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

// What each rank tells the others at bootstrap: the rest of the communicator is built from this.
struct HelloPayload {
  int32_t device;
  int32_t lanes;
  uint64_t scratchBytes;
  int32_t pipelineSlots;  // flags per rank the executor needs: derived from the config, must agree
  int32_t reserved;
};

}  // namespace

struct ProcessClique::Layout {
  char* base = nullptr;
  int nranks = 0;
  size_t rankSharedOffset = 0, flagsOffset = 0, flagStride = 0, flagsBytes = 0, mailboxOffset = 0, entryStride = 0;
  size_t p2pOffset = 0, p2pRingStride = 0;
  size_t totalBytes = 0;

  Layout(int n, int slots) : nranks(n) {
    const size_t page = 4096;
    rankSharedOffset = roundUp(sizeof(SegmentHeader), 64);
    flagsOffset = roundUp(rankSharedOffset + sizeof(RankShared) * static_cast<size_t>(n), page);
    flagStride = roundUp(sizeof(uint32_t) * static_cast<size_t>(std::max(slots, 1)), 128);
    flagsBytes = roundUp(flagStride * static_cast<size_t>(n), page);
    mailboxOffset = flagsOffset + flagsBytes;
    entryStride = roundUp(sizeof(MailboxEntry) + 4 * sizeof(uint64_t) * static_cast<size_t>(n), 64);
    p2pOffset = roundUp(mailboxOffset + entryStride * kRingEntries * static_cast<size_t>(n), 64);
    p2pRingStride = roundUp(sizeof(P2PRingHeader) + sizeof(P2PRecord) * kP2PRingRecords, 64);
    totalBytes = p2pOffset + p2pRingStride * 2 * static_cast<size_t>(n) * static_cast<size_t>(n);
  }
  // The ring of `owner`'s sends to (isSend) or receives from `peer`.
  P2PRingHeader& p2pRing(int owner, int peer, bool isSend) const {
    const size_t index =
        (static_cast<size_t>(owner) * static_cast<size_t>(nranks) + static_cast<size_t>(peer)) * 2 + (isSend ? 0 : 1);
    return *reinterpret_cast<P2PRingHeader*>(base + p2pOffset + p2pRingStride * index);
  }
  P2PRecord& p2pRecord(int owner, int peer, bool isSend, uint64_t index) const {
    char* ring = reinterpret_cast<char*>(&p2pRing(owner, peer, isSend));
    return reinterpret_cast<P2PRecord*>(ring + sizeof(P2PRingHeader))[index % kP2PRingRecords];
  }
  SegmentHeader& header() const { return *reinterpret_cast<SegmentHeader*>(base); }
  RankShared& rank(int r) const { return reinterpret_cast<RankShared*>(base + rankSharedOffset)[r]; }
  MailboxEntry& entry(int r, uint64_t seq) const {
    return *reinterpret_cast<MailboxEntry*>(base + mailboxOffset +
                                            entryStride * (static_cast<size_t>(r) * kRingEntries + seq % kRingEntries));
  }
  uint64_t* vectors(MailboxEntry& e) const {
    return reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(&e) + sizeof(MailboxEntry));
  }
  const uint64_t* vectors(const MailboxEntry& e) const {
    return reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(&e) + sizeof(MailboxEntry));
  }
};

ProcessClique::ProcessClique(const Config& config, const UniqueIdData& id, int rank, int nranks, int device)
    : config_(config), rank_(rank), nranks_(nranks), device_(device), tag_(uniqueIdTag(id)) {
  CONCCL_REQUIRE(nranks >= 1, "nranks = " + std::to_string(nranks) + " must be at least 1");
  CONCCL_REQUIRE(rank >= 0 && rank < nranks,
                 "rank = " + std::to_string(rank) + " is not in [0, nranks = " + std::to_string(nranks) + ")");
  const auto timeout = std::chrono::milliseconds(config.timeoutMs);
  const int slots = exec::cudaFlagSlots(nranks, config);
  layout_ = std::make_unique<Layout>(nranks, slots);
  const std::string shmName = "/conccl-" + tag_;

  HelloPayload hello{device, config.lanes, config.scratchBytes, slots, 0};
  std::string payload(sizeof(hello), '\0');
  std::memcpy(payload.data(), &hello, sizeof(hello));
  auto boot = Bootstrap::connect(id, rank, nranks, payload, timeout);
  pids_ = boot->pids();
  sendsPosted_.assign(static_cast<size_t>(nranks), 0);
  recvsPosted_.assign(static_cast<size_t>(nranks), 0);

  // Every process builds every schedule from the same arguments: the options that shape schedules must agree.
  std::vector<int> devices(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    HelloPayload h{};
    CONCCL_ASSERT(boot->payloads()[static_cast<size_t>(r)].size() == sizeof(h));
    std::memcpy(&h, boot->payloads()[static_cast<size_t>(r)].data(), sizeof(h));
    devices[static_cast<size_t>(r)] = h.device;
    if (h.lanes != hello.lanes || h.scratchBytes != hello.scratchBytes || h.pipelineSlots != hello.pipelineSlots) {
      CONCCL_THROW(concclInvalidUsage,
                   "ranks disagree on the configuration: rank " + std::to_string(rank) + " has lanes " +
                       std::to_string(hello.lanes) + ", scratchBytes " + std::to_string(hello.scratchBytes) +
                       ", rank " + std::to_string(r) + " has lanes " + std::to_string(h.lanes) + ", scratchBytes " +
                       std::to_string(h.scratchBytes) + " (set CONCCL_LANES / CONCCL_SCRATCH_BYTES alike everywhere)");
    }
  }

  // Rank 0 creates the segment once the bootstrap has proven it is the only rank 0 (a second one fails there with
  // a clear message), the others open it after the barrier.
  if (rank == 0) {
    segment_ = SharedSegment::create(shmName, layout_->totalBytes);
    SegmentHeader& h = *reinterpret_cast<SegmentHeader*>(segment_.data());
    h.magic = kSegmentMagic;
    h.nranks = static_cast<uint32_t>(nranks);
    h.ringEntries = kRingEntries;
  }
  boot->barrier();
  if (rank != 0) segment_ = SharedSegment::open(shmName, layout_->totalBytes);
  layout_->base = static_cast<char*>(segment_.data());
  if (layout_->header().magic != kSegmentMagic || layout_->header().nranks != static_cast<uint32_t>(nranks)) {
    CONCCL_THROW(concclInternalError, "shared segment " + shmName + " does not belong to this communicator");
  }
  layout_->rank(rank).pid.store(static_cast<int64_t>(::getpid()), std::memory_order_release);

  exec::ProcessTopology topo;
  topo.localRank = rank;
  topo.devices = devices;
  topo.pids = pids_;
  topo.sharedFlags = layout_->base + layout_->flagsOffset;
  topo.sharedFlagsBytes = layout_->flagsBytes;
  topo.flagStrideBytes = layout_->flagStride;
  topo.allGather = [&boot](const std::string& mine) { return boot->allGather(mine); };
  executor_ = exec::makeCudaProcessExecutor(topo, config);
  schedules_ = std::make_unique<ScheduleCache>(executor_->buildOptions());
  gpuWatchdog_ = std::make_unique<GpuWatchdog>(
      nranks, timeout,
      [this](int r, uint32_t* launched, uint32_t* completed) {
        return r == rank_ && executor_->gpuProgress(r, launched, completed);
      },
      [this](const std::string& reason) {
        CONCCL_WARN(rank_, device_, "watchdog: " + reason);
        fail(concclTimeout, reason);
      });

  // The executor's all-gather above happened after every rank had mapped the segment: its name can go now, and
  // after the barrier (every rank has mapped the peers' scratch) the sockets too.
  if (rank == 0) segment_.unlink();
  boot->barrier();
  boot->close();
  CONCCL_INFO(rank, device,
              "rank " + std::to_string(rank) + " of " + std::to_string(nranks) + " (pid " + std::to_string(::getpid()) +
                  ") joined communicator " + tag_ + ": " + std::to_string(layout_->totalBytes) + " B of shared memory");
}

ProcessClique::~ProcessClique() {
  if (gpuWatchdog_) gpuWatchdog_->stop();  // it uses the executor
  stopWatchdog();  // it uses the executor and the segment
  // The executor first: it unregisters the flag area that lives in the segment (destroyed after it).
  executor_.reset();
}

void ProcessClique::checkHealthy() const {
  if (auto e = asyncError()) {
    CONCCL_THROW(concclInvalidUsage,
                 "the communicator is out of service after an earlier error (abort or destroy "
                 "it): " +
                     e->message());
  }
}

std::optional<Error> ProcessClique::asyncError() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return error_;
  }
  const SegmentHeader& h = layout_->header();
  if (h.errorState.load(std::memory_order_acquire) == 2) {
    return Error(static_cast<concclResult_t>(h.errorCode),
                 "rank " + std::to_string(h.errorRank) + " failed: " + std::string(h.errorMessage));
  }
  return std::nullopt;
}

void ProcessClique::fail(concclResult_t code, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = Error(code, reason);
  }
  // Tell the other processes: the first failure wins, later ones keep theirs local.
  SegmentHeader& h = layout_->header();
  uint32_t expected = 0;
  if (h.errorState.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    h.errorCode = static_cast<int32_t>(code);
    h.errorRank = rank_;
    copyMessage(h.errorMessage, reason);
    h.errorState.store(2, std::memory_order_release);
  }
  executor_->cancel();
}

std::shared_ptr<CallTicket> ProcessClique::post(int rank, RankArgs args) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  auto ticket = std::make_shared<CallTicket>();
  ticket->rank = rank;
  ticket->call = std::make_shared<PendingCall>();
  // Send/Recv groups are matched pair by pair (their own rings), outside the collectives' sequence: a rank that
  // takes no part in a group never hears of it.
  ticket->call->seq = args.kind == sched::CollKind::kSendRecv ? nextP2PGroup_++ : nextSeq_++;
  ticket->call->args.resize(static_cast<size_t>(nranks_));
  ticket->what = std::string(args.apiName) + " #" + std::to_string(ticket->call->seq);
  ticket->call->args[static_cast<size_t>(rank)] = std::move(args);
  return ticket;
}

template <typename Ready>
void ProcessClique::waitFor(Ready ready, int peer, const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(config_.timeoutMs);
  auto nap = std::chrono::microseconds(2);
  auto nextLivenessCheck = start + std::chrono::milliseconds(20);
  for (;;) {
    if (ready()) return;
    if (auto e = asyncError()) {
      throw Error(e->code(), "rank " + std::to_string(rank_) + " stopped waiting in " + what + ": " + e->message());
    }
    const RankShared& p = layout_->rank(peer);
    if (p.departed.load(std::memory_order_acquire) != 0) {
      CONCCL_THROW(concclInvalidUsage, what + " on rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                                           " was destroyed or aborted before it made this call");
    }
    const auto now = Clock::now();
    if (now >= nextLivenessCheck) {
      nextLivenessCheck = now + std::chrono::milliseconds(20);
      const int64_t pid = pids_[static_cast<size_t>(peer)];
      if (!processAlive(pid)) {
        std::string reason = "rank " + std::to_string(peer) + " (pid " + std::to_string(pid) + ") exited while rank " +
                             std::to_string(rank_) + " waited for it in " + what;
        fail(concclSystemError, reason);
        CONCCL_THROW(concclSystemError, reason);
      }
    }
    if (now >= deadline) {
      std::string reason = "rank " + std::to_string(rank_) + " waited " + std::to_string(config_.timeoutMs) +
                           " ms in " + what + " for rank(s) " + std::to_string(peer) + " to call it";
      fail(concclTimeout, reason);
      CONCCL_THROW(concclTimeout, reason);
    }
    // Spin (yielding) for up to 200 us: peers of a training step usually arrive within microseconds, and the
    // shortest sleep costs ~50 us of timer slack. Then back off to keep a waiting rank off the CPU.
    if (now - start < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      if (nap < std::chrono::microseconds(500)) nap *= 2;
    }
  }
}

void ProcessClique::waitAndLaunch(CallTicket& ticket) {
  checkHealthy();
  closeRetiredPeerImports();
  if (ticket.call->args[static_cast<size_t>(rank_)]->kind == sched::CollKind::kSendRecv) {
    launchSendRecv(ticket);
    return;
  }
  PendingCall& pending = *ticket.call;
  const uint64_t seq = pending.seq;
  const int n = nranks_;
  RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  waitForFreeSlot(seq, ticket.what);
  MailboxEntry& out = layout_->entry(rank_, seq);

  // 1. This rank's own checks and exports, before the peers hear of the call: an error is published instead.
  //    A buffer inside a registered window needs neither: the window was checked and mapped by the peers.
  const WindowRef rawRefs[2] = {findWindow(mine.sendbuff, 0), findWindow(mine.recvbuff, 0)};
  exec::BufferExport exports[2]{};
  std::optional<Error> ownError;
  try {
    sched::CollectiveCall solo;
    solo.nranks = n;
    solo.kind = mine.kind;
    solo.dtype = mine.dtype;
    solo.op = mine.op;
    solo.root = mine.root;
    solo.count = mine.count;
    solo.inPlace.assign(static_cast<size_t>(n), false);
    solo.inPlace[static_cast<size_t>(rank_)] = mine.inPlace;
    if (mine.kind == sched::CollKind::kAllToAllv) {
      solo.sendCounts.assign(static_cast<size_t>(n), {});
      solo.sendDispls.assign(static_cast<size_t>(n), {});
      solo.recvCounts.assign(static_cast<size_t>(n), {});
      solo.recvDispls.assign(static_cast<size_t>(n), {});
      solo.sendCounts[static_cast<size_t>(rank_)] = mine.sendCounts;
      solo.sendDispls[static_cast<size_t>(rank_)] = mine.sendDispls;
      solo.recvCounts[static_cast<size_t>(rank_)] = mine.recvCounts;
      solo.recvDispls[static_cast<size_t>(rank_)] = mine.recvDispls;
    }
    exec::CallBinding soloBinding;
    soloBinding.buffers.assign(static_cast<size_t>(n), {});
    soloBinding.buffers[static_cast<size_t>(rank_)] = {const_cast<void*>(mine.sendbuff), mine.recvbuff};
    // exportBuffer checks each buffer as checkBuffer does, with the same driver query it exports from.
    forEachUsedBuffer(solo, soloBinding, rank_, [&](int b, void* ptr, size_t bytes, const std::string& what) {
      CONCCL_ASSERT(b >= 0 && b < 2);
      if (findWindow(ptr, bytes).id != 0) return;
      exports[b] = executor_->exportBuffer(rank_, ptr, bytes, what.c_str());
    });
  } catch (const Error& e) {
    ownError = e;
  }

  // 2. A symmetric call: every peer buffer this rank's program touches follows from its own pointers in the
  //    windows (the peers are assumed to call exactly like this rank; the watchdog checks that they did).
  std::vector<Assumption> assumed;
  bool symmetric = false;
  // An in-place Gather or Scatter root keeps its own block inside the big buffer (at root * count), so its
  // pointers differ from the peers' by construction: it cannot speak for them, and takes the regular path.
  const bool rootInPlaceBlock = mine.inPlace && mine.root == rank_ &&
                                (mine.kind == sched::CollKind::kGather || mine.kind == sched::CollKind::kScatter);
  if (!ownError && !windows_.empty() && mine.kind != sched::CollKind::kAllToAllv && !rootInPlaceBlock) {
    for (int p = 0; p < n; ++p) {
      if (p == rank_) continue;
      RankArgs mirror = mine;
      mirror.stream = nullptr;
      pending.args[static_cast<size_t>(p)] = std::move(mirror);
    }
    try {
      assembleCall(pending, n);
      pending.schedule = schedules_->get(pending.call);
      symmetric = bindSymmetric(pending, rawRefs, assumed);
      if (symmetric && sched::isRooted(mine.kind) && mine.root != rank_) {
        // Whether the root runs in place is the root's own business (a non-root's buffers say nothing about it):
        // symmetric only if it changes neither this rank's program nor what the executor chooses its path from.
        sched::CollectiveCall flipped = pending.call;
        flipped.inPlace[static_cast<size_t>(mine.root)] = !flipped.inPlace[static_cast<size_t>(mine.root)];
        const auto other = schedules_->get(flipped);
        symmetric =
            other->programs[static_cast<size_t>(rank_)] == pending.schedule->programs[static_cast<size_t>(rank_)] &&
            other->copyBytes == pending.schedule->copyBytes && other->activeOps == pending.schedule->activeOps &&
            other->reduceInputs == pending.schedule->reduceInputs;
      }
    } catch (const Error&) {
      symmetric = false;  // the regular path below builds the same call again and reports the error everywhere
    }
    if (!symmetric) {
      for (int p = 0; p < n; ++p) {
        if (p != rank_) pending.args[static_cast<size_t>(p)].reset();
      }
      assumed.clear();
    }
  }

  // 3. Publish.
  out.kind = static_cast<int32_t>(mine.kind);
  out.dtype = static_cast<int32_t>(mine.dtype);
  out.op = static_cast<int32_t>(mine.op);
  out.root = mine.root;
  out.count = mine.count;
  out.inPlace = mine.inPlace ? 1 : 0;
  out.errorCode = ownError ? static_cast<int32_t>(ownError->code()) : 0;
  copyMessage(out.error, ownError ? ownError->message() : std::string());
  out.buffers[0] = exports[0];
  out.buffers[1] = exports[1];
  for (int b = 0; b < 2; ++b) {
    out.windowId[b] = rawRefs[b].id;
    out.windowOffset[b] = rawRefs[b].offset;
  }
  out.launchedEarly = symmetric ? 1 : 0;
  std::vector<uint64_t> retired = ownError ? std::vector<uint64_t>{} : executor_->takeRetiredExports(rank_);
  out.retiredCount = static_cast<uint32_t>(std::min<size_t>(retired.size(), kMaxRetired));
  for (uint32_t i = 0; i < out.retiredCount; ++i) out.retired[i] = retired[i];
  if (retired.size() > kMaxRetired) {
    // Not lost: handed back, they go out with the next call.
    executor_->requeueRetiredExports(rank_, std::vector<uint64_t>(retired.begin() + kMaxRetired, retired.end()));
  }
  uint64_t* vec = layout_->vectors(out);
  if (mine.kind == sched::CollKind::kAllToAllv && !ownError) {
    const std::vector<size_t>* parts[4] = {&mine.sendCounts, &mine.sendDispls, &mine.recvCounts, &mine.recvDispls};
    for (int v = 0; v < 4; ++v) {
      for (int r = 0; r < n; ++r) {
        vec[static_cast<size_t>(v * n + r)] =
            static_cast<size_t>(r) < parts[v]->size() ? (*parts[v])[static_cast<size_t>(r)] : 0;
      }
    }
  }
  out.published.store(seq + 1, std::memory_order_release);

  if (symmetric) {
    // 4s. Launch now. Peers that called before this rank are compared first: a mismatch found here is reported
    //     before any work is enqueued.
    {
      std::lock_guard<std::mutex> lock(matchMutex_);
      unmatched_.push_back(Unmatched{seq, true, Clock::now(), ticket.what, std::move(assumed)});
      matchPublishedLocked();
    }
    checkHealthy();
    startWatchdog();
    matchCv_.notify_all();
    launchProgram(pending, ticket);
    return;
  }

  // 4. Wait for every peer's entry, then read them.
  waitForPeersOf(seq, ticket.what);
  std::optional<Error> firstError;
  bool peerLaunchedEarly = false;
  std::vector<exec::BufferExport> peerExports(static_cast<size_t>(2 * n));
  std::vector<WindowRef> peerRefs(static_cast<size_t>(2 * n));
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
    peerLaunchedEarly = peerLaunchedEarly || e.launchedEarly != 0;
    RankArgs a = argsOf(e, layout_->vectors(e), n);
    for (int b = 0; b < 2; ++b) {
      peerExports[static_cast<size_t>(2 * p + b)] = e.buffers[b];
      peerRefs[static_cast<size_t>(2 * p + b)] = WindowRef{e.windowId[b], e.windowOffset[b]};
    }
    for (uint32_t i = 0; i < e.retiredCount && i < kMaxRetired; ++i) closePeerImport(p, e.retired[i]);
    pending.args[static_cast<size_t>(p)] = std::move(a);
  }
  // Read everything this call needs: the peers may reuse the slots from here on.
  layout_->rank(rank_).consumed.store(seq + 1, std::memory_order_release);
  // A peer that launched without waiting cannot take its work back: any error of this call ends the
  // communicator (the fail() opens the flags its GPU may wait on).
  auto failIfPeerLaunched = [&](Error& e) {
    if (peerLaunchedEarly) fail(e.code(), e.message() + " (a peer had already launched its part)");
  };
  if (firstError) {
    Error e = Error(*firstError).addContext(ticket.what);
    failIfPeerLaunched(e);
    throw e;
  }

  // 5. Validate and build, identically in every process (the same inputs give every rank the same error).
  try {
    assembleCall(pending, n);
    pending.schedule = schedules_->get(pending.call);
    // Map only the peer buffers this rank's program touches. A peer whose buffer this program does not touch
    // does not wait for this rank either, so it may already have finished the call and freed that buffer.
    for (int p = 0; p < n; ++p) {
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
      if (peerRefs[index].id != 0) slot = peerAddress(loc.rank, peerRefs[index], bytes);
      if (slot != nullptr) return;
      const exec::BufferExport& e = peerExports[index];
      if (e.allocId == 0) {
        CONCCL_THROW(concclInternalError, "the schedule uses buffer " + std::to_string(loc.buffer) + " of rank " +
                                              std::to_string(loc.rank) + ", which that rank did not export");
      }
      slot = executor_->importBuffer(loc.rank, e);
    };
    for (const sched::Op& op : pending.schedule->programs[static_cast<size_t>(rank_)].ops) {
      if (const auto* copy = std::get_if<sched::Copy>(&op)) {
        if (copy->bytes == 0) continue;
        bind(copy->src);
        bind(copy->dst);
      }
    }
  } catch (Error& e) {
    // Mapping a peer's buffer can fail here only (CUDA): then this rank cannot run its part, so the others must
    // not wait for it. Agreement errors are identical on every rank and leave the communicator usable, unless
    // a peer already launched.
    if (e.code() == concclUnhandledCudaError) {
      e.addContext(ticket.what + " on rank " + std::to_string(rank_));
      fail(e.code(), e.message());
      throw;
    }
    e.addContext(ticket.what);
    failIfPeerLaunched(e);
    throw;
  }

  // 6. Launch.
  launchProgram(pending, ticket);
}

// A group of Send/Recv ops of this rank. Each op with another process is published in the pair's ring, then the
// opposite records are read (the receive's buffer for a send, the send's size for a receive): the host waits for
// the partners to post their side. The program is built from a call that holds this rank's ops and, for each
// partner, the mirror of the ops it shares with this rank. This rank's program in it is the one it has in the
// whole group (direct push: a rank's program depends only on its own transfers and on who writes into it), and
// the ready/done flags are per pair, so groups matched pair by pair cannot cross.
// Any failure here ends the communicator: a partner that already launched its part would wait on its flags.
void ProcessClique::launchSendRecv(CallTicket& ticket) {
  PendingCall& pending = *ticket.call;
  RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  const int n = nranks_;
  const size_t ops = mine.p2p.size();
  std::vector<uint64_t> pairIndex(ops, 0);
  std::optional<Error> ownError;
  std::vector<WindowRef> refs(ops);
  std::vector<exec::BufferExport> exports(ops);
  for (size_t i = 0; i < ops && !ownError; ++i) {
    const sched::P2POp& op = mine.p2p[i];
    if (op.count == 0) continue;
    void* ptr = mine.p2pBuffers[static_cast<size_t>(op.buffer)];
    const std::string what =
        std::string(op.isSend ? "the buffer of a Send to rank " : "the buffer of a Recv from rank ") +
        std::to_string(op.peer);
    try {
      CONCCL_REQUIRE(ptr != nullptr, what + " is NULL");
      refs[i] = findWindow(ptr, op.count);
      if (refs[i].id != 0) continue;
      if (op.peer == rank_ || op.isSend) {
        executor_->checkBuffer(rank_, ptr, op.count, what.c_str());
      } else {
        exports[i] = executor_->exportBuffer(rank_, ptr, op.count, what.c_str());
      }
    } catch (const Error& e) {
      ownError = e;
    }
  }

  // 1. Publish this rank's side: a record per op with another process (an error travels in every record).
  for (size_t i = 0; i < ops; ++i) {
    const sched::P2POp& op = mine.p2p[i];
    if (op.peer == rank_) continue;
    std::vector<uint64_t>& posted = op.isSend ? sendsPosted_ : recvsPosted_;
    const uint64_t k = posted[static_cast<size_t>(op.peer)]++;
    pairIndex[i] = k;
    P2PRingHeader& ring = layout_->p2pRing(rank_, op.peer, op.isSend);
    if (k >= kP2PRingRecords) {
      waitFor([&] { return ring.consumed.load(std::memory_order_acquire) > k - kP2PRingRecords; }, op.peer,
              ticket.what + " (waiting for rank " + std::to_string(op.peer) + " to match earlier Send/Recv)");
    }
    P2PRecord& rec = layout_->p2pRecord(rank_, op.peer, op.isSend, k);
    rec.bytes = op.count;
    rec.errorCode = ownError ? static_cast<int32_t>(ownError->code()) : 0;
    const std::string message = ownError ? ownError->message() : std::string();
    const size_t len = std::min(message.size(), sizeof(rec.error) - 1);
    std::memcpy(rec.error, message.data(), len);
    rec.error[len] = '\0';
    rec.buffer = exports[i];
    rec.windowId = refs[i].id;
    rec.windowOffset = refs[i].offset;
    rec.published.store(k + 1, std::memory_order_release);
  }

  // 2. Read the partners' side, in the same order.
  std::optional<Error> firstError = ownError;
  std::vector<RankArgs> mirrors(static_cast<size_t>(n));
  for (size_t i = 0; i < ops; ++i) {
    const sched::P2POp& op = mine.p2p[i];
    if (op.peer == rank_) continue;
    const uint64_t k = pairIndex[i];
    P2PRecord& rec = layout_->p2pRecord(op.peer, rank_, !op.isSend, k);
    waitFor([&] { return rec.published.load(std::memory_order_acquire) == k + 1; }, op.peer,
            ticket.what + " (rank " + std::to_string(op.peer) + " has not posted the matching " +
                (op.isSend ? "Recv" : "Send") + ")");
    const std::string where = std::string(op.isSend ? "Send #" : "Recv #") + std::to_string(k) + " of rank " +
                              std::to_string(rank_) + (op.isSend ? " to" : " from") + " rank " +
                              std::to_string(op.peer);
    if (!firstError && rec.errorCode != 0) {
      firstError = Error(static_cast<concclResult_t>(rec.errorCode),
                         "rank " + std::to_string(op.peer) + " failed its side of " + where + ": " + rec.error);
    }
    if (!firstError && rec.bytes != op.count) {
      firstError = Error(concclInvalidArgument, where + " moves " + std::to_string(op.count) + " bytes but rank " +
                                                    std::to_string(op.peer) + " posted " + std::to_string(rec.bytes) +
                                                    " bytes for it (a Send and its Recv must have the same size)");
    }
    RankArgs& mirror = mirrors[static_cast<size_t>(op.peer)];
    const int buffer = static_cast<int>(mirror.p2pBuffers.size());
    void* address = nullptr;
    if (!firstError && op.isSend && op.count > 0) {
      // Where this rank writes: the partner's receive buffer, in one of its windows or exported.
      try {
        if (rec.windowId != 0) address = peerAddress(op.peer, WindowRef{rec.windowId, rec.windowOffset}, rec.bytes);
        if (address == nullptr) address = executor_->importBuffer(op.peer, rec.buffer);
      } catch (const Error& e) {
        firstError = e;
      }
    }
    mirror.p2p.push_back(sched::P2POp{!op.isSend, rank_, op.count, buffer});
    mirror.p2pBuffers.push_back(address);
    layout_->p2pRing(op.peer, rank_, !op.isSend).consumed.store(k + 1, std::memory_order_release);
  }
  if (firstError) {
    Error e = Error(*firstError).addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw e;
  }

  // 3. Build from this rank's ops and the partners' mirrors, then launch.
  try {
    for (int p = 0; p < n; ++p) {
      if (p == rank_ || mirrors[static_cast<size_t>(p)].p2p.empty()) continue;
      RankArgs& a = mirrors[static_cast<size_t>(p)];
      a.kind = sched::CollKind::kSendRecv;
      a.dtype = mine.dtype;
      a.apiName = mine.apiName;
      pending.args[static_cast<size_t>(p)] = std::move(a);
    }
    assembleCall(pending, n);
    auto schedule = std::make_shared<sched::Schedule>(*schedules_->get(pending.call));
    // The partners' programs here are only their share with this rank, so their copy volume is unknown: take the
    // copy-engine path, as every rank of a Send/Recv group across processes does, so partners never mix paths.
    for (size_t p = 0; p < schedule->copyBytes.size(); ++p) {
      if (static_cast<int>(p) != rank_) schedule->copyBytes[p] = std::numeric_limits<size_t>::max();
    }
    pending.schedule = std::move(schedule);
  } catch (Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
  launchProgram(pending, ticket);
}

void ProcessClique::launchProgram(PendingCall& pending, const CallTicket& ticket) {
  try {
    executor_->launch(*pending.schedule, pending.binding, rank_);
    if (gpuWatchdog_) gpuWatchdog_->launched(rank_, ticket.what);
  } catch (Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
}

bool ProcessClique::bindSymmetric(PendingCall& pending, const WindowRef (&mine)[2],
                                  std::vector<Assumption>& assumed) const {
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    pending.binding.buffers[static_cast<size_t>(p)].assign(2, nullptr);
    pending.binding.streams[static_cast<size_t>(p)] = nullptr;
  }
  for (const sched::Op& op : pending.schedule->programs[static_cast<size_t>(rank_)].ops) {
    const auto* copy = std::get_if<sched::Copy>(&op);
    if (copy == nullptr || copy->bytes == 0) continue;
    for (const sched::Location* loc : {&copy->src, &copy->dst}) {
      if (loc->rank == rank_ || loc->buffer == sched::kScratch) continue;
      CONCCL_ASSERT(loc->buffer >= 0 && loc->buffer < 2);
      void*& slot = pending.binding.buffers[static_cast<size_t>(loc->rank)][static_cast<size_t>(loc->buffer)];
      if (slot != nullptr) continue;
      const WindowRef& ref = mine[loc->buffer];
      if (ref.id == 0) return false;
      const size_t bytes = sched::bufferBytes(pending.call, loc->rank)[static_cast<size_t>(loc->buffer)];
      slot = peerAddress(loc->rank, ref, bytes);
      if (slot == nullptr) return false;
      assumed.push_back(Assumption{loc->rank, loc->buffer, ref});
    }
  }
  return true;
}

ProcessClique::WindowRef ProcessClique::findWindow(const void* ptr, size_t bytes) const {
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  for (const auto& [id, w] : windows_) {
    const auto base = reinterpret_cast<uintptr_t>(w.base);
    if (addr < base || addr - base >= w.bytes) continue;
    const uint64_t offset = addr - base;
    if (bytes > w.bytes - offset) continue;
    return WindowRef{id, offset};
  }
  return WindowRef{};
}

void* ProcessClique::peerAddress(int peer, const WindowRef& ref, size_t bytes) const {
  auto it = windows_.find(ref.id);
  if (it == windows_.end()) return nullptr;
  const Window& w = it->second;
  if (ref.offset >= w.bytes || bytes > w.bytes - ref.offset) return nullptr;
  return w.peerBase[static_cast<size_t>(peer)] + ref.offset;
}

void ProcessClique::closePeerImport(int peer, uint64_t allocId) {
  for (const auto& [id, w] : windows_) {
    if (w.peerAllocIds[static_cast<size_t>(peer)] == allocId) return;  // a window keeps it until deregistered
  }
  executor_->closeImport(peer, allocId);
}

void ProcessClique::closeRetiredPeerImports() {
  std::vector<std::pair<int, uint64_t>> retired;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    retired.swap(retiredFromPeers_);
  }
  for (const auto& [peer, allocId] : retired) closePeerImport(peer, allocId);
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
  if (std::string problem = disagreement(mine, rank_, peers, peer); !problem.empty()) {
    return problem + " (" + u.what + ")";
  }
  // In place or not matters for every rank of the unrooted collectives, only for the root of the rooted ones (a
  // non-root took this path only where the root's choice changes nothing for it).
  if (!sched::isRooted(mine.kind) && mine.inPlace != peers.inPlace) {
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

void ProcessClique::startWatchdog() {
  if (watchdog_.joinable()) return;
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

void ProcessClique::stopWatchdog() {
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    stopWatchdog_ = true;
  }
  matchCv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void ProcessClique::watchdogLoop() {
  std::unique_lock<std::mutex> lock(matchMutex_);
  auto nap = std::chrono::microseconds(20);
  auto nextLivenessCheck = Clock::now();
  bool cancelled = false;
  while (!stopWatchdog_) {
    if (unmatched_.empty()) {
      matchCv_.wait(lock, [&] { return stopWatchdog_ || !unmatched_.empty(); });
      nap = std::chrono::microseconds(20);
      continue;
    }
    if (auto e = asyncError()) {
      // Failed here or in another process: open this rank's flags too, so that its streams drain.
      unmatched_.clear();
      if (!cancelled) executor_->cancel();
      cancelled = true;
      continue;
    }
    if (matchPublishedLocked()) continue;
    const Unmatched& u = unmatched_.front();
    const auto now = Clock::now();
    std::string missing;
    std::string reason;
    concclResult_t code = concclSuccess;
    const bool checkLiveness = now >= nextLivenessCheck;
    if (checkLiveness) nextLivenessCheck = now + std::chrono::milliseconds(20);
    for (int p = 0; p < nranks_ && code == concclSuccess; ++p) {
      if (p == rank_ || layout_->entry(p, u.seq).published.load(std::memory_order_acquire) == u.seq + 1) continue;
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
      if (layout_->rank(p).departed.load(std::memory_order_acquire) != 0) {
        code = concclInvalidUsage;
        reason = "rank " + std::to_string(p) + " was destroyed or aborted before it made " + u.what + ", which rank " +
                 std::to_string(rank_) + " had launched (symmetric call)";
      } else if (checkLiveness && !processAlive(pids_[static_cast<size_t>(p)])) {
        code = concclSystemError;
        reason = "rank " + std::to_string(p) + " (pid " + std::to_string(pids_[static_cast<size_t>(p)]) +
                 ") exited before it made " + u.what + ", which rank " + std::to_string(rank_) +
                 " had launched (symmetric call)";
      }
    }
    if (code == concclSuccess && now - u.launched >= std::chrono::milliseconds(config_.timeoutMs)) {
      code = concclTimeout;
      reason = "rank " + std::to_string(rank_) + " launched " + u.what + " (symmetric call) " +
               std::to_string(config_.timeoutMs) + " ms ago and rank(s) " + missing + " have not called it";
    }
    if (code != concclSuccess) {
      unmatched_.clear();
      fail(code, reason);
      cancelled = true;
      continue;
    }
    // Peers usually follow within microseconds; back off to 1 ms for a straggler.
    matchCv_.wait_for(lock, nap);
    if (nap < std::chrono::microseconds(1000)) nap *= 2;
  }
}

void ProcessClique::abandon(CallTicket& ticket) {
  // Every rank abandons the same calls (see Clique::abandon): keep the ring moving past this one. A Send/Recv
  // group published nothing (its partners then time out waiting for it, the group's earlier failure being theirs
  // too only where they shared it).
  if (!ticket.call) return;
  const auto& args = ticket.call->args[static_cast<size_t>(rank_)];
  if (args && args->kind == sched::CollKind::kSendRecv) return;
  std::lock_guard<std::mutex> lock(matchMutex_);
  if (unmatched_.empty()) {
    layout_->rank(rank_).consumed.store(ticket.call->seq + 1, std::memory_order_release);
  } else {
    unmatched_.push_back(Unmatched{ticket.call->seq, false, Clock::now(), ticket.what, {}});
  }
}

void ProcessClique::releaseRank(int rank, bool graceful) {
  CONCCL_ASSERT(rank == rank_);
  layout_->rank(rank_).departed.store(1, std::memory_order_release);
  // The watchdog keeps watching the unmatched calls while the streams drain: a peer that never makes one of
  // them ends this wait with the timeout instead of blocking it for ever.
  if (graceful) executor_->synchronize(rank_);
  stopWatchdog();
  executor_->releaseRank(rank_);
}

std::vector<exec::BufferExport> ProcessClique::windowRendezvous(uint64_t seq, int32_t kind, uint64_t value,
                                                                const exec::BufferExport& mine,
                                                                const std::optional<Error>& ownError,
                                                                const std::string& what) {
  waitForFreeSlot(seq, what);
  MailboxEntry& out = layout_->entry(rank_, seq);
  out.kind = kind;
  out.dtype = 0;
  out.op = 0;
  out.root = 0;
  out.count = value;
  out.inPlace = 0;
  out.errorCode = ownError ? static_cast<int32_t>(ownError->code()) : 0;
  copyMessage(out.error, ownError ? ownError->message() : std::string());
  out.buffers[0] = mine;
  out.buffers[1] = exec::BufferExport{};
  out.windowId[0] = out.windowId[1] = 0;
  out.windowOffset[0] = out.windowOffset[1] = 0;
  out.launchedEarly = 0;
  out.retiredCount = 0;  // retired allocations go out with the next collective
  out.published.store(seq + 1, std::memory_order_release);

  waitForPeersOf(seq, what);
  std::vector<exec::BufferExport> exports(static_cast<size_t>(nranks_));
  std::optional<Error> firstError;
  std::string diverged;
  for (int p = 0; p < nranks_; ++p) {
    const MailboxEntry& e = layout_->entry(p, seq);
    if (e.kind != kind) {
      diverged = "rank " + std::to_string(p) + " called " + entryName(e.kind) + " where rank " + std::to_string(rank_) +
                 " called " + what + " (every rank must make the same calls in the same order)";
      break;
    }
    if (e.errorCode != 0 && !firstError) {
      firstError = Error(static_cast<concclResult_t>(e.errorCode), "rank " + std::to_string(p) + ": " + e.error);
    }
    if (!firstError && e.count != value) {
      firstError = Error(concclInvalidArgument,
                         kind == kWindowRegisterKind
                             ? "ranks disagree on the window size: rank " + std::to_string(rank_) + " registers " +
                                   std::to_string(value) + " bytes, rank " + std::to_string(p) + " " +
                                   std::to_string(e.count) + " (a symmetric window has one size on every rank)"
                             : "ranks deregister different windows: rank " + std::to_string(rank_) + " its window #" +
                                   std::to_string(value) + ", rank " + std::to_string(p) + " its window #" +
                                   std::to_string(e.count) + " (deregister in the same order)");
    }
    exports[static_cast<size_t>(p)] = e.buffers[0];
  }
  layout_->rank(rank_).consumed.store(seq + 1, std::memory_order_release);
  if (!diverged.empty()) {
    fail(concclInvalidUsage, diverged);
    CONCCL_THROW(concclInvalidUsage, diverged);
  }
  if (firstError) throw Error(*firstError).addContext(what);
  return exports;
}

uint64_t ProcessClique::registerWindow(int rank, void* ptr, size_t bytes) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  closeRetiredPeerImports();
  const uint64_t seq = nextSeq_++;
  const std::string what = "concclCommWindowRegister #" + std::to_string(seq);
  exec::BufferExport mine{};
  std::optional<Error> ownError;
  try {
    mine = executor_->exportBuffer(rank_, ptr, bytes, "buff");
  } catch (const Error& e) {
    ownError = e;
  }
  const std::vector<exec::BufferExport> exports =
      windowRendezvous(seq, kWindowRegisterKind, bytes, mine, ownError, what);
  Window w;
  w.base = static_cast<char*>(ptr);
  w.bytes = bytes;
  w.peerBase.assign(static_cast<size_t>(nranks_), nullptr);
  w.peerAllocIds.assign(static_cast<size_t>(nranks_), 0);
  try {
    for (int p = 0; p < nranks_; ++p) {
      const exec::BufferExport& e = exports[static_cast<size_t>(p)];
      w.peerAllocIds[static_cast<size_t>(p)] = e.allocId;
      w.peerBase[static_cast<size_t>(p)] = p == rank_ ? w.base : static_cast<char*>(executor_->importBuffer(p, e));
    }
  } catch (Error& e) {
    // The peers consider the window registered: this rank cannot take part in calls on it.
    e.addContext(what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
  const uint64_t id = nextWindowId_++;
  windows_.emplace(id, std::move(w));
  return id;
}

void ProcessClique::deregisterWindow(int rank, uint64_t id) {
  CONCCL_ASSERT(rank == rank_);
  checkHealthy();
  auto it = windows_.find(id);
  CONCCL_REQUIRE(it != windows_.end(), "window #" + std::to_string(id) + " is not registered on this communicator");
  // This rank's work on the window (and, through the flags, the peers' accesses to this rank's part that the
  // work waited for) ends first; the rendezvous then tells every rank that every rank has got that far.
  executor_->synchronize(rank_);
  const uint64_t seq = nextSeq_++;
  windowRendezvous(seq, kWindowDeregisterKind, id, exec::BufferExport{}, std::nullopt,
                   "concclCommWindowDeregister #" + std::to_string(seq));
  const Window w = std::move(it->second);
  windows_.erase(it);
  for (int p = 0; p < nranks_; ++p) {
    if (p != rank_) closePeerImport(p, w.peerAllocIds[static_cast<size_t>(p)]);
  }
}

}  // namespace conccl
