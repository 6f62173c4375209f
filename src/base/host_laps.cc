#include "base/host_laps.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <utility>

#include "base/logging.h"

namespace conccl {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxLaps = HostLaps::kMaxLaps;

struct Record {
  bool open = false;
  Clock::time_point begin, last;
  bool afterIdle = false;  // started kIdleGapMs or more after the thread's previous API call returned
  size_t used = 0;
  std::array<const char*, kMaxLaps> names{};
  std::array<int64_t, kMaxLaps> ns{};
  std::string tallyKey;  // set by tally(): the record is tallied under it when the call returns (drop())
  bool joinsGroup = false;  // joinGroup(): its time is carried to the group's end when it closes
  bool endsGroup = false;   // endGroup(): its launch takes the carried time as its first lap
};

thread_local Record tls;
// When an API call of this thread last returned (drop() of an open record); none yet: the epoch.
thread_local Clock::time_point lastReturn{};
// The time of this thread's records that joined the open group (joinGroup), not yet taken by its end.
thread_local int64_t carriedNs = 0;

// At a group end's launch: the carried time becomes the record's first lap and moves its begin back by as much (the
// total spans the group). With every slot used, the last two laps are folded into one to make room.
void takeCarried() {
  if (!tls.endsGroup || carriedNs == 0) return;
  if (tls.used == kMaxLaps) {
    tls.ns[kMaxLaps - 2] += tls.ns[kMaxLaps - 1];
    --tls.used;
  }
  std::copy_backward(tls.names.begin(), tls.names.begin() + static_cast<std::ptrdiff_t>(tls.used),
                     tls.names.begin() + static_cast<std::ptrdiff_t>(tls.used) + 1);
  std::copy_backward(tls.ns.begin(), tls.ns.begin() + static_cast<std::ptrdiff_t>(tls.used),
                     tls.ns.begin() + static_cast<std::ptrdiff_t>(tls.used) + 1);
  tls.names[0] = HostLaps::kGroupCallsLap;
  tls.ns[0] = carriedNs;
  ++tls.used;
  tls.begin -= std::chrono::nanoseconds(carriedNs);
  carriedNs = 0;
}

// The tallied calls of one key: each lap's samples (laps named by the same literal share a pointer, but equal text
// from two literals is one lap: compared as text), in the order first seen. Bounded: a long job keeps the first
// kMaxSamples calls of each key and at most kMaxKeys keys.
constexpr size_t kMaxSamples = 4096;
constexpr size_t kMaxKeys = 256;

struct KeyTally {
  std::string key;
  size_t calls = 0;
  std::vector<std::pair<std::string, std::vector<int64_t>>> laps;  // the last entry is "total"
};

struct Tally {
  std::mutex mutex;
  std::vector<KeyTally> keys;
};

Tally& tally() {
  static Tally* t = new Tally;  // never destroyed: communicators may be destroyed during static destruction
  return *t;
}

std::vector<int64_t>& samplesOf(KeyTally& k, const char* name) {
  for (auto& [n, v] : k.laps) {
    if (n == name) return v;
  }
  return k.laps.emplace_back(name, std::vector<int64_t>{}).second;
}

std::string usText(int64_t ns) { return std::to_string((ns + 500) / 1000) + " us"; }

void addToTally(const std::string& key) {
  const int64_t total = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tls.begin).count();
  Tally& t = ::conccl::tally();
  std::lock_guard<std::mutex> lock(t.mutex);
  auto it = std::find_if(t.keys.begin(), t.keys.end(), [&](const KeyTally& k) { return k.key == key; });
  if (it == t.keys.end()) {
    if (t.keys.size() >= kMaxKeys) return;
    t.keys.push_back(KeyTally{key, 0, {}});
    it = std::prev(t.keys.end());
  }
  if (it->calls >= kMaxSamples) return;
  ++it->calls;
  // A lap named twice in one call counts once, summed.
  std::array<bool, kMaxLaps> counted{};
  for (size_t i = 0; i < tls.used; ++i) {
    if (counted[i]) continue;
    int64_t ns = tls.ns[i];
    for (size_t j = i + 1; j < tls.used; ++j) {
      if (!counted[j] && std::strcmp(tls.names[j], tls.names[i]) == 0) {
        ns += tls.ns[j];
        counted[j] = true;
      }
    }
    samplesOf(*it, tls.names[i]).push_back(ns);
  }
  samplesOf(*it, "total").push_back(total);
}

}  // namespace

bool HostLaps::tallying() {
  static const bool on = [] {
    const char* env = std::getenv("CONCCL_HOST_LAPS");
    return env != nullptr && std::strcmp(env, "1") == 0;
  }();
  return on;
}

bool HostLaps::start() {
  if (tls.open || (logLevel() < LogLevel::kTrace && !tallying())) return false;
  tls.open = true;
  tls.used = 0;
  tls.tallyKey.clear();
  tls.joinsGroup = tls.endsGroup = false;
  tls.begin = tls.last = Clock::now();
  tls.afterIdle = lastReturn != Clock::time_point{} && tls.begin - lastReturn >= std::chrono::milliseconds(kIdleGapMs);
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
  takeCarried();
  if (tls.tallyKey.empty()) tls.open = false;  // a tallied record stays open until the call returns
  std::string out;
  for (size_t i = 0; i < tls.used; ++i) out += std::string(tls.names[i]) + " " + usText(tls.ns[i]) + ", ";
  const int64_t total = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tls.begin).count();
  return out + "total " + usText(total);
}

void HostLaps::tally(const std::string& key) {
  if (!tls.open || !tallying()) return;
  tls.tallyKey = key;
  // The time since the last mark went into making `key` (measurement, not the call): left out of the laps and the
  // total.
  const Clock::time_point now = Clock::now();
  tls.begin += now - tls.last;
  tls.last = now;
  takeCarried();
}

void HostLaps::joinGroup(bool opens) {
  if (!tls.open) return;
  if (opens) carriedNs = 0;
  tls.joinsGroup = true;
}

void HostLaps::endGroup() {
  if (tls.open) tls.endsGroup = true;
}

void HostLaps::drop() {
  if (tls.open && tls.joinsGroup) {  // a call that joins a group launches nothing: its whole time is carried
    carriedNs += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - tls.begin).count();
  }
  if (tls.endsGroup) carriedNs = 0;  // taken at its launch, or the group launched nothing
  if (tls.open && !tls.tallyKey.empty()) {
    // The call's way back to its caller (its clean-up, the group layer, the API guard) is a lap too.
    lap("return");
    addToTally(tls.afterIdle ? tls.tallyKey + kAfterIdleSuffix : tls.tallyKey);
    tls.tallyKey.clear();
  }
  if (tls.open) lastReturn = Clock::now();
  tls.open = false;
}

std::vector<std::string> HostLaps::tallyLines() {
  Tally& t = ::conccl::tally();
  std::vector<KeyTally> keys;
  {
    std::lock_guard<std::mutex> lock(t.mutex);
    keys.swap(t.keys);
  }
  std::vector<std::string> lines;
  for (KeyTally& k : keys) {
    std::string line = k.key + ", " + std::to_string(k.calls) + " call(s), median:";
    const char* sep = " ";
    // "total" last, wherever it was first seen.
    std::stable_partition(k.laps.begin(), k.laps.end(), [](const auto& lap) { return lap.first != "total"; });
    for (auto& [name, v] : k.laps) {
      std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
      line += sep + name + " " + usText(v[v.size() / 2]);
      if (v.size() != k.calls) line += " (" + std::to_string(v.size()) + " calls)";
      sep = ", ";
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace conccl
