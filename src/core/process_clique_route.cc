// ProcessClique (core/process_clique.h), part: the route of a call whose peers may be late. Every rank of a call takes
// the same route: the first to decide claims it in the segment's route word for the call (direct when every peer has
// published, else the late route: pair-owned or staged), after a spin that is skipped for peers already known to be
// late (core/route_spin.h). The routes themselves: process_clique_calls.cc (direct, staged) and
// process_clique_pair_owned.cc.
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

#include "base/logging.h"
#include "core/process_clique.h"
#include "core/process_segment.h"
#include "core/route_spin.h"

namespace conccl {

bool ProcessClique::routed(const RankArgs& mine, const OwnPart& own) const {
  return config_.stageLateCalls && !own.error && !own.staged && mine.kind != sched::CollKind::kSendRecv;
}

ProcessClique::Route ProcessClique::routeOf(uint64_t seq) const {
  const uint64_t v = layout_->header().routes[seq % kRingEntries].load(std::memory_order_acquire);
  return (v >> 2) == seq + 1 ? static_cast<Route>(v & 3) : Route::kUndecided;
}

ProcessClique::Route ProcessClique::claimRoute(uint64_t seq, Route choice) {
  std::atomic<uint64_t>& word = layout_->header().routes[seq % kRingEntries];
  const uint64_t mine = ((seq + 1) << 2) | static_cast<uint64_t>(choice);
  uint64_t seen = word.load(std::memory_order_acquire);
  for (;;) {
    if ((seen >> 2) == seq + 1) return static_cast<Route>(seen & 3);
    // The slot still holds an earlier call's route (every rank has read it: the ring's free-slot rule).
    CONCCL_ASSERT((seen >> 2) < seq + 1);
    if (word.compare_exchange_weak(seen, mine, std::memory_order_acq_rel, std::memory_order_acquire)) return choice;
  }
}

ProcessClique::Route ProcessClique::decideRoute(uint64_t seq, Route late) {
  // The spin is kept for peers that were on time for the previous call: in a lock-step job they arrive within
  // microseconds and then give the direct route (copy engines, no staging copy). A peer two or more calls behind, or
  // one that was late for the previous call, is not waited for (core/route_spin.h). Measured before these rules (one
  // H200, 2026-12-03, peers 2 s late): the spin was 50 of a 64 MiB AllReduce's 109-117 us of host time at the C API.
  const RouteSpin spin = routeSpinOf(seq);
  const auto until = Clock::now() + std::chrono::microseconds(spin.spinUs);
  for (;;) {
    if (const Route r = routeOf(seq); r != Route::kUndecided) return r;
    if (peersPublished(seq)) return claimRoute(seq, Route::kDirect);
    if (Clock::now() >= until) break;
    std::this_thread::yield();
  }
  const Route r = claimRoute(seq, late);
  if (r == late && logLevel() >= LogLevel::kTrace) {  // its text costs host time on every late call
    std::string why;
    switch (spin.why) {
      case RouteSpin::Why::kSpin:
        why = "a peer had not called within " + std::to_string(spin.spinUs) + " us";
        break;
      case RouteSpin::Why::kPeerTwoCallsBehind:
        why = "rank " + std::to_string(spin.peer) + " is two or more calls behind (no spin)";
        break;
      case RouteSpin::Why::kPeerLateLastCall:
        why = "rank " + std::to_string(spin.peer) + " was " + std::to_string(spin.lateByNs / 1000) +
              " us late for the previous call and has not called yet (no spin)";
        break;
    }
    CONCCL_TRACE(rank_, device_,
                 "call seq " + std::to_string(seq) + (r == Route::kStaged ? " is staged: " : " is pair-owned: ") + why);
  }
  return r;
}

RouteSpin ProcessClique::routeSpinOf(uint64_t seq) const {
  std::optional<uint64_t> mineAtNs;
  if (seq > 0) {
    // This rank's own entry for seq - 1 (its slot is next written by this rank, for call seq - 1 + kRingEntries).
    const MailboxEntry& e = layout_->entry(rank_, seq - 1);
    if (e.published.load(std::memory_order_acquire) == seq) mineAtNs = e.publishedAtNs.load(std::memory_order_relaxed);
  }
  return routeSpinFor(seq, rank_, nranks_, config_.rendezvousSpinUs, mineAtNs, [&](int p) {
    const MailboxEntry& e = layout_->entry(p, seq - 1);
    PreviousEntry prev;
    prev.published = e.published.load(std::memory_order_acquire);
    prev.publishedAtNs = e.publishedAtNs.load(std::memory_order_relaxed);
    // A peer far ahead may be rewriting the slot for a later call (it writes the time, then `published`): the second
    // read narrows that window without closing it. A time read from a later call makes this rank skip the spin at
    // worst; only the route's spin depends on it, never a result.
    if (e.published.load(std::memory_order_acquire) != prev.published) prev.published = seq + 1;
    return prev;
  });
}

}  // namespace conccl
