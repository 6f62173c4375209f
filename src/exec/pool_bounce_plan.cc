// planPoolBounce (exec/pool_bounce_plan.h).
#include "exec/pool_bounce_plan.h"

#include <algorithm>

#include "base/bytes_text.h"

namespace conccl::exec {

namespace {

uintptr_t addressOf(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool overlap(uintptr_t a, size_t aBytes, uintptr_t b, size_t bBytes) { return a < b + bBytes && b < a + aBytes; }

}  // namespace

void* PoolBouncePlan::place(int b, const void* original, const std::array<void*, 2>& regions) const {
  const BouncePlace& at = places[static_cast<size_t>(b)];
  if (at.region < 0) return const_cast<void*>(original);
  return static_cast<char*>(regions[static_cast<size_t>(at.region)]) + at.offset;
}

std::optional<PoolBouncePlan> planPoolBounce(const BounceBufferArg& send, const BounceBufferArg& recv,
                                             bool keepRecvGaps, size_t maxRegionBytes, std::string* whyNot) {
  const bool sendUsed = send.bytes > 0, recvUsed = recv.bytes > 0;
  const uintptr_t s = addressOf(send.ptr), r = addressOf(recv.ptr);
  PoolBouncePlan plan;
  const bool shared = sendUsed && recvUsed && overlap(s, send.bytes, r, recv.bytes);
  if (shared) {
    // One allocation (pool memory or not, the same for both).
    if (!send.pool && !recv.pool) {
      *whyNot = "no buffer is pool memory";
      return std::nullopt;
    }
    const uintptr_t base = std::min(s, r);
    plan.spans[0] = {base, std::max(s + send.bytes, r + recv.bytes) - base};
    if (keepRecvGaps) {
      plan.copiesIn.push_back({0, 0, base, plan.spans[0].bytes});
    } else {
      plan.copiesIn.push_back({0, s - base, s, send.bytes});
    }
    plan.copiesOut.push_back({0, r - base, r, recv.bytes});
    plan.places[0] = {0, s - base};
    plan.places[1] = {0, r - base};
  } else {
    const bool bounceSend = sendUsed && send.pool, bounceRecv = recvUsed && recv.pool;
    if (!bounceSend && !bounceRecv) {
      *whyNot = "no buffer the call uses is pool memory";
      return std::nullopt;
    }
    if (bounceSend) {
      plan.spans[0] = {s, send.bytes};
      plan.copiesIn.push_back({0, 0, s, send.bytes});
    }
    if (bounceRecv) {
      plan.spans[1] = {r, recv.bytes};
      if (keepRecvGaps) plan.copiesIn.push_back({1, 0, r, recv.bytes});
      plan.copiesOut.push_back({1, 0, r, recv.bytes});
    }
    if (bounceSend) plan.places[0] = {0, 0};
    if (bounceRecv) plan.places[1] = {1, 0};
    // A pointer the call does not use (a Broadcast non-root's sendbuff, passed as its recvbuff) goes with the span it
    // starts in, so that the call's pointers keep their relation.
    auto unusedInto = [&](BouncePlace& place, uintptr_t p) {
      for (int region = 0; region < 2; ++region) {
        const BounceSpan& span = plan.spans[static_cast<size_t>(region)];
        if (span.bytes > 0 && p >= span.base && p - span.base < span.bytes) place = {region, p - span.base};
      }
    };
    if (!sendUsed) unusedInto(plan.places[0], s);
    if (!recvUsed) unusedInto(plan.places[1], r);
  }
  for (const BounceSpan& span : plan.spans) {
    if (span.bytes > maxRegionBytes) {
      *whyNot = "a buffer of " + bytesText(span.bytes) + " is above CONCCL_POOL_BOUNCE_MAX_BYTES (" +
                bytesText(maxRegionBytes) + ")";
      return std::nullopt;
    }
  }
  return plan;
}

}  // namespace conccl::exec
