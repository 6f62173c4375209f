// The shared-memory segment of a ProcessClique (core/process_clique.h): its layout (header, per-rank state,
// mailbox rings, Send/Recv rings, flags), the helpers that read and write it, and the bounded, liveness-aware
// wait every part uses. Private to src/core/process_clique*.cc.
#pragma once

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

#include "base/logging.h"
#include "base/types.h"
#include "core/retire_log.h"

namespace conccl {
namespace process_segment {

using Clock = std::chrono::steady_clock;

// Calls in flight per rank before a rank waits for its slowest peer to catch up. Calls are read as soon as
// a peer reaches them, so a small ring only throttles a rank that is many calls ahead of a peer.
inline constexpr uint32_t kRingEntries = 16;
// Ids of freed allocations one entry can carry (the peers unmap them); more wait for the next call. A PyTorch job
// frees dozens to hundreds of cached segments at once (torch.cuda.empty_cache, an out-of-memory retry), and every
// call delivers at most this many: at 8, the peers of a rank held 1.1-3.6 GiB of freed memory through eight further
// calls (tests/torch/workloads.py memory_return, 2-4 processes on one H200, 2026-12-05).
inline constexpr uint32_t kMaxRetired = 256;
inline constexpr size_t kMessageBytes = 768;
inline constexpr uint64_t kSegmentMagic = 0x636f6e63636c5347ull;  // "concclSG"

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
  // The route of call seq (stageLateCalls), agreed by the first rank to claim it: ((seq + 1) << 2) | the
  // ProcessClique::Route (direct, staged or pair-owned), in slot seq % kRingEntries (reused only once every rank has read it: the mailbox ring's
  // free-slot rule).
  std::atomic<uint64_t> routes[kRingEntries];
};

struct alignas(64) RankShared {
  std::atomic<int64_t> pid;
  std::atomic<uint32_t> departed;
  std::atomic<uint64_t> consumed;  // calls (seq + 1) this rank has read from every mailbox, or abandoned
};

struct MailboxEntry {
  std::atomic<uint64_t> published;  // seq + 1 once the entry is complete
  // When it was published (steady clock, ns; one clock for every process of a host): how late a peer was for the
  // previous call decides whether the next one spins for it (core/route_spin.h).
  std::atomic<uint64_t> publishedAtNs;
  int32_t kind, dtype, op, root;
  uint64_t count;
  uint32_t inPlace;
  uint32_t pushInputs;  // concclReduceScatterChunked (RankArgs::pushInputs)
  int32_t errorCode;  // concclSuccess, or the error this rank found in its own arguments
  char error[kMessageBytes];
  exec::BufferExport buffers[2];  // exported when not inside a window (allocId 0: not exported)
  uint64_t windowId[2];           // sendbuff / recvbuff as passed lie in this window (0: in none) ...
  uint64_t windowOffset[2];       // ... at this offset
  uint32_t launchedEarly;         // 1: a symmetric call this rank launched without waiting for the peers
  uint32_t unshareable;           // 1: this rank's buffers cannot be mapped (VMM, pools): every rank stages the call
  uint32_t retiredCount;
  uint64_t retired[kMaxRetired];
  // followed by AllToAllv: sendCounts, sendDispls, recvCounts, recvDispls (nranks uint64 each)
};

// Send/Recv: every ordered pair (owner, peer) has two rings of records, the owner's sends to the peer and its
// receives from it, each read by the peer alone. Records of a ring pair up with the peer's opposite ring in
// order: the owner's k-th send to p meets p's k-th receive from the owner.
inline constexpr uint32_t kP2PRingRecords = 16;

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
  uint32_t viaScratch;  // receives: 1 when the receiver's buffer cannot be mapped (sched::P2POp::viaScratch)
};

// Entry kinds beside sched::CollKind's values: the collective window operations, which take ring slots too.
inline constexpr int32_t kWindowRegisterKind = 1000;
inline constexpr int32_t kWindowDeregisterKind = 1001;

inline size_t roundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline uint64_t steadyNowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// Marks entry `e` complete for call seq (after every other field is written).
inline void markPublished(MailboxEntry& e, uint64_t seq) {
  e.publishedAtNs.store(steadyNowNs(), std::memory_order_relaxed);
  e.published.store(seq + 1, std::memory_order_release);
}

inline const char* apiNameOf(sched::CollKind kind) {
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

inline const char* entryName(int32_t kind) {
  if (kind == kWindowRegisterKind) return "concclCommWindowRegister";
  if (kind == kWindowDeregisterKind) return "concclCommWindowDeregister";
  return apiNameOf(static_cast<sched::CollKind>(kind));
}

inline const char* bufferName(int b) { return b == 0 ? "sendbuff" : "recvbuff"; }

// The arguments a collective's mailbox entry carries (no pointers: they travel as exports or window refs);
// `vectors`: the entry's AllToAllv vectors.
inline RankArgs argsOf(const MailboxEntry& e, const uint64_t* vectors, int n) {
  RankArgs a;
  a.kind = static_cast<sched::CollKind>(e.kind);
  a.dtype = static_cast<concclDataType_t>(e.dtype);
  a.op = static_cast<concclRedOp_t>(e.op);
  a.root = e.root;
  a.count = e.count;
  a.inPlace = e.inPlace != 0;
  a.pushInputs = e.pushInputs != 0;
  a.apiName = apiNameOf(a.kind);
  if (a.kind == sched::CollKind::kAllToAllv) {
    std::vector<size_t>* parts[4] = {&a.sendCounts, &a.sendDispls, &a.recvCounts, &a.recvDispls};
    for (int k = 0; k < 4; ++k) parts[k]->assign(vectors + k * n, vectors + (k + 1) * n);
  }
  return a;
}

inline void copyMessage(char (&dst)[kMessageBytes], const std::string& text) {
  const size_t n = std::min(text.size(), kMessageBytes - 1);
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

// False once the process is gone: no such pid, or a zombie waiting for its parent to reap it.
inline bool processAlive(int64_t pid) {
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
  int32_t stageLateCalls;  // Config::stageLateCalls (1/0): every rank must take the same route
  // Config fields that shape schedules (every process builds every schedule): must agree.
  uint64_t minChunkBytes;
  uint64_t stagedMaxBytes;
};

}  // namespace process_segment

// Only the process_clique*.cc files include this header.
using namespace process_segment;  // NOLINT

struct ProcessClique::Layout {
  char* base = nullptr;
  int nranks = 0;
  size_t rankSharedOffset = 0, flagsOffset = 0, flagStride = 0, flagsBytes = 0, mailboxOffset = 0, entryStride = 0;
  size_t p2pOffset = 0, p2pRingStride = 0;
  size_t retireLogOffset = 0, retireLogStride = 0, retireReadOffset = 0;
  size_t totalBytes = 0;

  Layout(int n, int slots) : nranks(n) {
    const size_t page = 4096;
    rankSharedOffset = roundUp(sizeof(SegmentHeader), 64);
    flagsOffset = roundUp(rankSharedOffset + sizeof(RankShared) * static_cast<size_t>(n), page);
    flagStride = roundUp(sizeof(uint32_t) * static_cast<size_t>(std::max(slots, 1)), 128);
    flagsBytes = roundUp(flagStride * static_cast<size_t>(n), page);
    mailboxOffset = flagsOffset + flagsBytes;
    // The entry, its AllToAllv vectors (4 x n), its pair claim words (n).
    entryStride = roundUp(sizeof(MailboxEntry) + 5 * sizeof(uint64_t) * static_cast<size_t>(n), 64);
    p2pOffset = roundUp(mailboxOffset + entryStride * kRingEntries * static_cast<size_t>(n), 64);
    p2pRingStride = roundUp(sizeof(P2PRingHeader) + sizeof(P2PRecord) * kP2PRingRecords, 64);
    const size_t p2pEnd = p2pOffset + p2pRingStride * 2 * static_cast<size_t>(n) * static_cast<size_t>(n);
    // Each rank's retirement log (core/retire_log.h), then every reader's cursor of every log.
    retireLogOffset = roundUp(p2pEnd, 64);
    retireLogStride = roundUp(sizeof(RetireLog), 64);
    retireReadOffset = retireLogOffset + retireLogStride * static_cast<size_t>(n);
    totalBytes = retireReadOffset + sizeof(std::atomic<uint64_t>) * static_cast<size_t>(n) * static_cast<size_t>(n);
  }
  // Rank `writer`'s retirement log, and how many of its records rank `reader` has read.
  RetireLog& retireLog(int writer) const {
    return *reinterpret_cast<RetireLog*>(base + retireLogOffset + retireLogStride * static_cast<size_t>(writer));
  }
  std::atomic<uint64_t>& retireRead(int reader, int writer) const {
    auto* cursors = reinterpret_cast<std::atomic<uint64_t>*>(base + retireReadOffset);
    return cursors[static_cast<size_t>(reader) * static_cast<size_t>(nranks) + static_cast<size_t>(writer)];
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
  // The claim word of the pair (a, b) of call seq on the pair-owned route (core/pair_claims.h): word max(a, b) of the
  // lower rank's entry of that call.
  std::atomic<uint64_t>& pairClaim(int a, int b, uint64_t seq) const {
    const int lo = std::min(a, b), hi = std::max(a, b);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(vectors(entry(lo, seq)) + 4 * static_cast<size_t>(nranks));
    return words[hi];
  }
};

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

}  // namespace conccl
