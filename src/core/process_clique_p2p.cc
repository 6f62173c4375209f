// ProcessClique (core/process_clique.h), part: Send/Recv across processes: the per-pair rings of records.
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

#include "base/host_laps.h"
#include "base/logging.h"
#include "base/types.h"

namespace conccl {

// A group of Send/Recv ops of this rank. Each op with another process is published in the pair's ring, then the
// opposite records are read (the receive's buffer for a send, the send's size for a receive): the host waits for
// the partners to post their side. The program is built from a call that holds this rank's ops and, for each
// partner, the mirror of the ops it shares with this rank. This rank's program in it is the one it has in the
// whole group (direct push: a rank's program depends only on its own transfers and on who writes into it), and
// the ready/done flags are per pair, so groups matched pair by pair cannot cross.
// Any failure here ends the communicator: a partner that already launched its part would wait on its flags.
//
// With Config::stageLateCalls every op with another process goes through the receiver's scratch instead, on both
// sides (the setting is checked equal at init): neither side needs the other's record to build its program, so the
// group launches at once and the partners' records are checked later (mirrorP2PPartners). A group with an error of
// its own takes the waiting form, which reports it on both sides.
void ProcessClique::launchSendRecv(CallTicket& ticket) {
  PendingCall& pending = *ticket.call;
  RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  const OwnP2P own = checkOwnP2P(mine, config_.stageLateCalls);
  for (size_t i = 0; i < mine.p2p.size(); ++i) mine.p2p[i].viaScratch = own.viaScratch[i];
  const bool early = config_.stageLateCalls && !own.error;
  HostLaps::lap("own checks");
  // 1. Publish this rank's side (an error travels in every record); 2. read the partners' side, in the same order
  // (or, launching early, assume it).
  const std::vector<uint64_t> pairIndex = publishP2P(ticket, mine, own);
  HostLaps::lap("publish");
  std::vector<RankArgs> mirrors =
      early ? mirrorP2PPartners(ticket, mine, pairIndex) : readP2PPartners(ticket, mine, pairIndex, own.error);
  HostLaps::lap(early ? "partners assumed" : "wait for the partners");
  // 3. Build from this rank's ops and the partners' mirrors, then launch.
  buildP2PCall(pending, ticket, std::move(mirrors));
  HostLaps::lap("build");
  launchProgram(pending, ticket);
}

ProcessClique::OwnP2P ProcessClique::checkOwnP2P(const RankArgs& mine, bool stageAll) const {
  const size_t ops = mine.p2p.size();
  OwnP2P own;
  own.windows.resize(ops);
  own.exports.resize(ops);
  own.viaScratch.assign(ops, false);
  // An AllToAll's Sends are slices of one tensor, its Recvs of another: each allocation is checked once.
  exec::Executor::CheckedAllocations checked;
  auto check = [&](const void* ptr, size_t bytes, const std::string& what) {
    checked.check(*executor_, rank_, ptr, bytes, what.c_str(), mine.stream);
  };
  for (size_t i = 0; i < ops && !own.error; ++i) {
    const sched::P2POp& op = mine.p2p[i];
    if (op.count == 0) continue;
    void* ptr = mine.p2pBuffers[static_cast<size_t>(op.buffer)];
    const std::string what =
        std::string(op.isSend ? "the buffer of a Send to rank " : "the buffer of a Recv from rank ") +
        std::to_string(op.peer);
    try {
      CONCCL_REQUIRE(ptr != nullptr, what + " is NULL");
      if (stageAll && op.peer != rank_) {
        check(ptr, op.count, what);
        own.viaScratch[i] = !op.isSend;
        continue;
      }
      own.windows[i] = findWindow(ptr, op.count);
      if (own.windows[i].id != 0) continue;
      if (op.peer == rank_ || op.isSend) {
        check(ptr, op.count, what);
      } else if (std::optional<exec::BufferExport> e =
                     executor_->exportIfShareable(rank_, ptr, op.count, what.c_str(), mine.stream)) {
        own.exports[i] = *e;
      } else {
        own.viaScratch[i] = true;  // PyTorch's expandable segments, pools: the sender writes into this rank's scratch
      }
    } catch (const Error& e) {
      own.error = e;
    }
  }
  return own;
}

std::vector<uint64_t> ProcessClique::publishP2P(const CallTicket& ticket, const RankArgs& mine, const OwnP2P& own) {
  std::vector<uint64_t> pairIndex(mine.p2p.size(), 0);
  const std::string message = own.error ? own.error->message() : std::string();
  for (size_t i = 0; i < mine.p2p.size(); ++i) {
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
    rec.errorCode = own.error ? static_cast<int32_t>(own.error->code()) : 0;
    const size_t len = std::min(message.size(), sizeof(rec.error) - 1);
    std::memcpy(rec.error, message.data(), len);
    rec.error[len] = '\0';
    rec.buffer = own.exports[i];
    rec.windowId = own.windows[i].id;
    rec.windowOffset = own.windows[i].offset;
    rec.viaScratch = own.viaScratch[i] ? 1 : 0;
    rec.published.store(k + 1, std::memory_order_release);
  }
  return pairIndex;
}

std::vector<RankArgs> ProcessClique::readP2PPartners(const CallTicket& ticket, const RankArgs& mine,
                                                     const std::vector<uint64_t>& pairIndex,
                                                     const std::optional<Error>& ownError) {
  std::optional<Error> firstError = ownError;
  std::vector<RankArgs> mirrors(static_cast<size_t>(nranks_));
  for (size_t i = 0; i < mine.p2p.size(); ++i) {
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
    const bool viaScratch = op.isSend && rec.viaScratch != 0;
    if (!firstError && op.isSend && op.count > 0 && !viaScratch) {
      // Where this rank writes: the partner's receive buffer, in one of its windows or exported.
      try {
        if (rec.windowId != 0) address = peerAddress(op.peer, WindowRef{rec.windowId, rec.windowOffset}, rec.bytes);
        if (address == nullptr) address = executor_->importBuffer(op.peer, rec.buffer);
      } catch (const Error& e) {
        firstError = e;
      }
    }
    sched::P2POp theirs{!op.isSend, rank_, op.count, buffer};
    theirs.viaScratch = viaScratch;  // the partner's Recv: this rank writes into the partner's scratch
    mirror.p2p.push_back(theirs);
    mirror.p2pBuffers.push_back(address);
    // Consumed even after an error: the partner's ring must not stay blocked on a record this rank has read.
    layout_->p2pRing(op.peer, rank_, !op.isSend).consumed.store(k + 1, std::memory_order_release);
  }
  if (firstError) {
    Error e = Error(*firstError).addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw e;
  }
  return mirrors;
}

std::vector<RankArgs> ProcessClique::mirrorP2PPartners(const CallTicket& ticket, const RankArgs& mine,
                                                       const std::vector<uint64_t>& pairIndex) {
  std::vector<RankArgs> mirrors(static_cast<size_t>(nranks_));
  const auto now = Clock::now();
  bool wakeWatchdog = false;
  {
    std::lock_guard<std::mutex> lock(matchMutex_);
    for (size_t i = 0; i < mine.p2p.size(); ++i) {
      const sched::P2POp& op = mine.p2p[i];
      if (op.peer == rank_) continue;
      RankArgs& mirror = mirrors[static_cast<size_t>(op.peer)];
      sched::P2POp theirs{!op.isSend, rank_, op.count, static_cast<int>(mirror.p2pBuffers.size())};
      theirs.viaScratch = op.isSend;  // the partner's Recv of this rank's Send: into the partner's scratch
      mirror.p2p.push_back(theirs);
      mirror.p2pBuffers.push_back(nullptr);  // never touched: every byte crosses through scratch
      unmatchedP2P_.push_back(UnmatchedP2P{op.peer, op.isSend, pairIndex[i], op.count, now, ticket.what});
    }
    matchP2PLocked();  // partners that posted first are checked before anything is launched
    wakeWatchdog = watchdogParked_;  // a napping watchdog finds these records at its next pass
  }
  checkHealthy();
  startWatchdog();
  if (wakeWatchdog) matchCv_.notify_all();
  return mirrors;
}

bool ProcessClique::matchP2PLocked() {
  // Per pair ring, records are read in order: once one is missing, the later ones of that ring wait for it.
  std::vector<char> blocked(static_cast<size_t>(2 * nranks_), 0);
  for (auto it = unmatchedP2P_.begin(); it != unmatchedP2P_.end();) {
    const UnmatchedP2P& u = *it;
    char& ringBlocked = blocked[static_cast<size_t>(2 * u.peer + (u.isSend ? 1 : 0))];
    P2PRecord& rec = layout_->p2pRecord(u.peer, rank_, !u.isSend, u.k);
    if (ringBlocked != 0 || rec.published.load(std::memory_order_acquire) != u.k + 1) {
      ringBlocked = 1;
      ++it;
      continue;
    }
    std::string problem;
    if (rec.errorCode != 0) {
      problem = "rank " + std::to_string(u.peer) + " failed its side of " + u.describe(rank_) + ": " + rec.error;
    } else if (rec.bytes != u.bytes) {
      problem = u.describe(rank_) + " moves " + std::to_string(u.bytes) + " bytes but rank " + std::to_string(u.peer) +
                " posted " + std::to_string(rec.bytes) + " bytes for it (a Send and its Recv must have the same size)";
    }
    layout_->p2pRing(u.peer, rank_, !u.isSend).consumed.store(u.k + 1, std::memory_order_release);
    if (!problem.empty()) {
      unmatchedP2P_.clear();
      fail(problem.rfind("rank ", 0) == 0 ? static_cast<concclResult_t>(rec.errorCode) : concclInvalidArgument,
           problem);
      return true;
    }
    it = unmatchedP2P_.erase(it);
  }
  return unmatchedP2P_.empty();
}

void ProcessClique::buildP2PCall(PendingCall& pending, const CallTicket& ticket, std::vector<RankArgs> mirrors) {
  const RankArgs& mine = *pending.args[static_cast<size_t>(rank_)];
  try {
    for (int p = 0; p < nranks_; ++p) {
      if (p == rank_ || mirrors[static_cast<size_t>(p)].p2p.empty()) continue;
      RankArgs& a = mirrors[static_cast<size_t>(p)];
      a.kind = sched::CollKind::kSendRecv;
      a.dtype = mine.dtype;
      a.apiName = mine.apiName;
      pending.args[static_cast<size_t>(p)] = std::move(a);
    }
    assembleCall(pending, nranks_);
    // The partners' programs here are only their share with this rank, so their copy volume is unknown: take the
    // copy-engine path, as every rank of a Send/Recv group across processes does, so partners never mix paths. The
    // cache keeps that schedule once per shape, under its own id (no copy per call).
    pending.schedule = schedules_->get(pending.call, rank_);
  } catch (Error& e) {
    e.addContext(ticket.what + " on rank " + std::to_string(rank_));
    fail(e.code(), e.message());
    throw;
  }
}

}  // namespace conccl
