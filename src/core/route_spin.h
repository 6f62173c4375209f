// How long a rank that published a routed call spins for its peers before it takes the late route
// (ProcessClique::decideRoute, "Late peers" in docs/multiprocess.md). The spin buys the direct route (copy engines on
// the peers' own buffers) in a lock-step job, whose peers arrive within microseconds of each other; for a peer that is
// late anyway it is host time spent for nothing, on every call. The previous call's mailbox entries tell the two
// apart before the spin starts:
// - a peer that has not published the previous call is two or more calls behind this rank (busy elsewhere: a pipeline
//   stage, a rank whose CPU runs behind): no spin;
// - a peer that published the previous call more than the spin after this rank did was late for it: a peer late once
//   is late again in the patterns that make it so (a pipeline stage, a rank with more work per step, a late thread
//   that issues one call per step), so no spin either. One call on time resets it (its entries are close together),
//   so a lock-step job that met one late call spins again from its next call.
// The choice changes the route only (every rank of the call agrees on it through the segment's route word), never a
// result. Pure: the caller reads the entries (core/process_segment.h), tests give them directly.
#pragma once

#include <cstdint>
#include <optional>

namespace conccl {

// What a peer's entry for the previous call (seq - 1) says.
struct PreviousEntry {
  uint64_t published = 0;    // the entry's published word: seq - 1 + 1 once the peer published call seq - 1
  uint64_t publishedAtNs = 0;  // when it did (steady clock, ns; the same clock in every process of a host)
};

struct RouteSpin {
  enum class Why { kSpin, kPeerTwoCallsBehind, kPeerLateLastCall };
  int spinUs = 0;
  Why why = Why::kSpin;
  int peer = -1;         // the peer that made the spin pointless (kPeerTwoCallsBehind, kPeerLateLastCall)
  uint64_t lateByNs = 0;  // kPeerLateLastCall: how long after this rank that peer published call seq - 1
};

// `previous(p)`: peer p's entry for call seq - 1 (PreviousEntry), for p != rank; `mineAtNs`: when this rank published
// call seq - 1 (none: lateness unknown, only "two calls behind" is judged). Call 0 has no previous call: it spins.
template <typename Previous>
RouteSpin routeSpinFor(uint64_t seq, int rank, int nranks, int configuredSpinUs, std::optional<uint64_t> mineAtNs,
                       Previous previous) {
  RouteSpin s;
  s.spinUs = configuredSpinUs;
  if (seq == 0 || configuredSpinUs <= 0) return s;
  const uint64_t lateNs = static_cast<uint64_t>(configuredSpinUs) * 1000;
  for (int p = 0; p < nranks; ++p) {
    if (p == rank) continue;
    const PreviousEntry e = previous(p);
    // Smaller than seq: the peer has not reached seq - 1. Larger: the peer is so far ahead that it reused the slot
    // (it is not late). Equal: the entry is call seq - 1's.
    if (e.published < seq) return RouteSpin{0, RouteSpin::Why::kPeerTwoCallsBehind, p, 0};
    if (mineAtNs && e.published == seq && e.publishedAtNs > *mineAtNs && e.publishedAtNs - *mineAtNs > lateNs) {
      return RouteSpin{0, RouteSpin::Why::kPeerLateLastCall, p, e.publishedAtNs - *mineAtNs};
    }
  }
  return s;
}

}  // namespace conccl
