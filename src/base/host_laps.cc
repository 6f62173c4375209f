#include "base/host_laps.h"

#include <array>
#include <chrono>
#include <cstdint>

#include "base/logging.h"

namespace conccl {
namespace {

using Clock = std::chrono::steady_clock;

// Enough for the marks of one call's path (API, group, clique, launch); later marks are folded into the last one.
constexpr size_t kMaxLaps = 12;

struct Record {
  bool open = false;
  Clock::time_point begin, last;
  size_t used = 0;
  std::array<const char*, kMaxLaps> names{};
  std::array<int64_t, kMaxLaps> ns{};
};

thread_local Record tls;

}  // namespace

bool HostLaps::start() {
  if (tls.open || logLevel() < LogLevel::kTrace) return false;
  tls.open = true;
  tls.used = 0;
  tls.begin = tls.last = Clock::now();
  return true;
}

void HostLaps::lap(const char* name) {
  if (!tls.open) return;
  const Clock::time_point now = Clock::now();
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - tls.last).count();
  tls.last = now;
  if (tls.used < kMaxLaps) {
    tls.names[tls.used] = name;
    tls.ns[tls.used] = ns;
    ++tls.used;
  } else {
    tls.ns[kMaxLaps - 1] += ns;
  }
}

std::string HostLaps::take() {
  if (!tls.open) return "";
  tls.open = false;
  auto us = [](int64_t ns) { return std::to_string((ns + 500) / 1000) + " us"; };
  std::string out;
  for (size_t i = 0; i < tls.used; ++i) out += std::string(tls.names[i]) + " " + us(tls.ns[i]) + ", ";
  const int64_t total = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tls.begin).count();
  return out + "total " + us(total);
}

void HostLaps::drop() { tls.open = false; }

}  // namespace conccl
