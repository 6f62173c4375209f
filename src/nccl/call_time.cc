#include "nccl/call_time.h"

#include <chrono>

namespace conccl::nccl {
namespace {

thread_local int tlsDepth = 0;
thread_local ShimCallTime tlsTotal;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ShimCallTimer::ShimCallTimer() {
  if (tlsDepth++ == 0) startNs_ = nowNs();
}

ShimCallTimer::~ShimCallTimer() {
  --tlsDepth;
  if (startNs_ >= 0) {
    tlsTotal.ns += static_cast<uint64_t>(nowNs() - startNs_);
    ++tlsTotal.calls;
  }
}

ShimCallTime takeShimCallTime() {
  ShimCallTime t = tlsTotal;
  tlsTotal = ShimCallTime{};
  return t;
}

}  // namespace conccl::nccl
