#include "core/config.h"

#include <cerrno>
#include <cstddef>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <strings.h>

#include "base/error.h"
#include "core/tuned_defaults.h"

namespace conccl {
namespace {

// Parses an integer environment variable strictly (the whole string, in range); nullopt-like via bool.
bool envInt(const char* name, long long lo, long long hi, long long* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return false;
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 0);
  // Accept binary suffixes for byte sizes (e.g. CONCCL_SCRATCH_BYTES=64M).
  if (end != nullptr && *end != '\0' && end[1] == '\0') {
    switch (*end) {
      case 'K': case 'k': value <<= 10; ++end; break;
      case 'M': case 'm': value <<= 20; ++end; break;
      case 'G': case 'g': value <<= 30; ++end; break;
      default: break;
    }
  }
  CONCCL_REQUIRE(errno == 0 && end != nullptr && *end == '\0',
                 std::string("environment variable ") + name + "='" + text + "' is not an integer");
  CONCCL_REQUIRE(value >= lo && value <= hi, std::string("environment variable ") + name + "=" + text +
                                                 " is out of range [" + std::to_string(lo) + ", " +
                                                 std::to_string(hi) + "]");
  *out = value;
  return true;
}

template <typename Enum>
bool envEnum(const char* name, std::initializer_list<std::pair<const char*, Enum>> choices, Enum* out) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return false;
  std::string allowed;
  for (const auto& [word, value] : choices) {
    if (strcasecmp(text, word) == 0) {
      *out = value;
      return true;
    }
    allowed += allowed.empty() ? word : std::string("|") + word;
  }
  CONCCL_THROW(concclInvalidArgument,
               std::string("environment variable ") + name + "='" + text + "' is not one of " + allowed);
}

void requireRange(const char* field, long long value, long long lo, long long hi) {
  CONCCL_REQUIRE(value >= lo && value <= hi, std::string("config.") + field + " = " + std::to_string(value) +
                                                 " is out of range [" + std::to_string(lo) + ", " +
                                                 std::to_string(hi) + "]");
}

constexpr int kMaxReduceCtas = 1024;
constexpr int kMaxLanes = 16;
constexpr size_t kMinScratchBytes = size_t{64} << 10;
// Smallest struct accepted: every field this library knows (an older header's struct can only be a prefix).
constexpr size_t kMinConfigSize = offsetof(concclConfig_t, timeoutMs) + sizeof(int);

// ConfigTestHook's edit (empty: none), under its mutex.
std::mutex& testHookMutex() {
  static std::mutex mutex;
  return mutex;
}
std::function<void(Config&)>& testHookEdit() {
  static std::function<void(Config&)> edit;
  return edit;
}

// The caller's explicit fields over `config` (environment and defaults); a smBudget field is left in *smBudget
// (0: not given), because its default depends on the resolved reduceCtas.
void applyUserFields(const concclConfig_t& user, Config& config, int* smBudget);

}  // namespace

Config resolveConfig(const concclConfig_t* user, bool cudaAvailable) {
  Config config;
  config.backend = cudaAvailable ? concclBackendCuda : concclBackendHost;

  // Environment first, then the caller's explicit fields override it (NCCL's precedence).
  envEnum<concclBackend_t>("CONCCL_BACKEND", {{"host", concclBackendHost}, {"cuda", concclBackendCuda}},
                           &config.backend);
  envEnum<concclEngine_t>("CONCCL_ENGINE",
                          {{"auto", concclEngineAuto}, {"copy", concclEngineCopy}},
                          &config.engine);
  long long v = 0;
  if (envInt("CONCCL_REDUCE_CTAS", 0, kMaxReduceCtas, &v)) config.reduceCtas = static_cast<int>(v);
  if (envInt("CONCCL_LANES", 1, kMaxLanes, &v)) {
    config.lanes = static_cast<int>(v);
    config.explicitKnobs |= kKnobLanes;
  }
  if (envInt("CONCCL_SCRATCH_BYTES", static_cast<long long>(kMinScratchBytes), LLONG_MAX, &v)) {
    config.scratchBytes = static_cast<size_t>(v);
  }
  if (envInt("CONCCL_TIMEOUT_MS", 1, INT_MAX, &v)) config.timeoutMs = static_cast<int>(v);
  if (envInt("CONCCL_SMALL_MESSAGE_BYTES", 0, LLONG_MAX, &v)) {
    config.smallMessageBytes = static_cast<size_t>(v);
    config.explicitKnobs |= kKnobSmallMessageBytes;
  }
  if (envInt("CONCCL_SINGLE_STREAM_BYTES", 0, LLONG_MAX, &v)) {
    config.singleStreamBytes = static_cast<size_t>(v);
    config.explicitKnobs |= kKnobSingleStreamBytes;
  }
  if (envInt("CONCCL_MIN_CHUNK_BYTES", 4096, LLONG_MAX, &v)) {
    config.minChunkBytes = static_cast<size_t>(v);
    config.explicitKnobs |= kKnobMinChunkBytes;
  }
  if (envInt("CONCCL_PIPELINE_DEPTH", 1, 16, &v)) config.pipelineDepth = static_cast<int>(v);
  if (envInt("CONCCL_RENDEZVOUS_SPIN_US", 0, 10000, &v)) config.rendezvousSpinUs = static_cast<int>(v);
  if (envInt("CONCCL_HIGH_PRIORITY", 0, 1, &v)) config.highPriority = v != 0;
  int smBudget = 0;  // 0: not given, derived below
  if (envInt("CONCCL_SM_BUDGET", 0, kMaxReduceCtas, &v)) smBudget = static_cast<int>(v);
  if (envInt("CONCCL_GRAPH_CACHE", 0, 1 << 16, &v)) config.graphCacheEntries = static_cast<size_t>(v);
  if (envInt("CONCCL_STAGED_MAX_BYTES", 0, LLONG_MAX, &v)) config.stagedMaxBytes = static_cast<size_t>(v);
  if (envInt("CONCCL_POOL_BOUNCE_MAX_BYTES", 0, LLONG_MAX, &v)) config.poolBounceMaxBytes = static_cast<size_t>(v);
  if (envInt("CONCCL_POOL_BOUNCE_IDLE_MS", 0, 3600 * 1000, &v)) config.poolBounceIdleMs = static_cast<int>(v);
  if (envInt("CONCCL_UNMAP_QUIET_US", 0, 1000 * 1000, &v)) config.unmapQuietUs = static_cast<int>(v);
  if (envInt("CONCCL_UNMAP_QUIET_MAX_MS", 0, 60 * 1000, &v)) config.unmapQuietMaxMs = static_cast<int>(v);
  if (envInt("CONCCL_THREAD_STAGED", 0, 1, &v)) config.threadStaged = static_cast<int>(v);
  if (envInt("CONCCL_DEFER_CALLS", 0, 1, &v)) config.deferCalls = v != 0;
  if (envInt("CONCCL_STAGE_LATE_CALLS", 0, 1, &v)) config.stageLateCalls = v != 0;
  if (envInt("CONCCL_PAIR_OWNED_LATE_CALLS", 0, 1, &v)) config.pairOwnedLateCalls = v != 0;
  if (envInt("CONCCL_VMM_EXPORT", 0, 1, &v)) config.exportVmm = v != 0;
  if (envInt("CONCCL_DEFER_LONG_LAUNCHES", 0, 1, &v)) config.deferLongLaunches = v != 0;

  if (user != nullptr) applyUserFields(*user, config, &smBudget);

  // One contract, checked once: no kernel of a call gets more CTAs than smBudget, so an explicit reduceCtas above it
  // is a contradiction the caller must resolve, not something to clip silently.
  if (smBudget == 0) smBudget = config.reduceCtas > 0 ? config.reduceCtas : kDefaultSmBudget;
  CONCCL_REQUIRE(config.reduceCtas <= smBudget,
                 "reduceCtas = " + std::to_string(config.reduceCtas) + " exceeds smBudget = " +
                     std::to_string(smBudget) + " (CONCCL_REDUCE_CTAS / CONCCL_SM_BUDGET or the config fields)");
  config.smBudget = smBudget;
  {
    std::lock_guard<std::mutex> lock(testHookMutex());
    if (testHookEdit()) testHookEdit()(config);
  }
  return config;
}

ConfigTestHook::ConfigTestHook(std::function<void(Config&)> edit) {
  std::lock_guard<std::mutex> lock(testHookMutex());
  previous_ = std::exchange(testHookEdit(), std::move(edit));
}

ConfigTestHook::~ConfigTestHook() {
  std::lock_guard<std::mutex> lock(testHookMutex());
  testHookEdit() = std::move(previous_);
}

namespace {

void applyUserFields(const concclConfig_t& userConfig, Config& config, int* smBudget) {
  const concclConfig_t* user = &userConfig;

  // The struct must come from CONCCL_CONFIG_INITIALIZER; a newer header's (larger) struct is refused because
  // this library cannot honour fields it does not know.
  CONCCL_REQUIRE(user->magic == CONCCL_CONFIG_MAGIC,
                 "config was not initialised with CONCCL_CONFIG_INITIALIZER (bad magic)");
  CONCCL_REQUIRE(user->size <= sizeof(concclConfig_t) && user->version <= CONCCL_VERSION_CODE,
                 "config comes from a newer conccl header (version " + std::to_string(user->version) +
                     ", size " + std::to_string(user->size) + ") than this library (version " +
                     std::to_string(CONCCL_VERSION_CODE) + ")");
  CONCCL_REQUIRE(user->size >= kMinConfigSize,
                 "config struct is too small (size " + std::to_string(user->size) + ")");

  if (user->backend != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("backend", user->backend, concclBackendHost, concclBackendCuda);
    config.backend = static_cast<concclBackend_t>(user->backend);
  }
  if (user->engine != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("engine", user->engine, concclEngineAuto, concclEngineCopy);
    config.engine = static_cast<concclEngine_t>(user->engine);
  }
  if (user->reduceCtas != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("reduceCtas", user->reduceCtas, 0, kMaxReduceCtas);
    config.reduceCtas = user->reduceCtas;
  }
  if (user->lanes != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("lanes", user->lanes, 1, kMaxLanes);
    config.lanes = user->lanes;
    config.explicitKnobs |= kKnobLanes;
  }
  if (user->scratchBytes != CONCCL_CONFIG_UNDEF_SIZE) {
    CONCCL_REQUIRE(user->scratchBytes >= kMinScratchBytes,
                   "config.scratchBytes = " + std::to_string(user->scratchBytes) + " is below the minimum " +
                       std::to_string(kMinScratchBytes));
    config.scratchBytes = user->scratchBytes;
  }
  if (user->timeoutMs != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("timeoutMs", user->timeoutMs, 1, INT_MAX);
    config.timeoutMs = user->timeoutMs;
  }
  // Fields after timeoutMs exist only in structs from headers that have them.
  if (user->size >= offsetof(concclConfig_t, smallMessageBytes) + sizeof(size_t) &&
      user->smallMessageBytes != CONCCL_CONFIG_UNDEF_SIZE) {
    config.smallMessageBytes = user->smallMessageBytes;
    config.explicitKnobs |= kKnobSmallMessageBytes;
  }
  if (user->size >= offsetof(concclConfig_t, highPriority) + sizeof(int) &&
      user->highPriority != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("highPriority", user->highPriority, 0, 1);
    config.highPriority = user->highPriority != 0;
  }
  if (user->size >= offsetof(concclConfig_t, smBudget) + sizeof(int) && user->smBudget != CONCCL_CONFIG_UNDEF_INT) {
    requireRange("smBudget", user->smBudget, 0, kMaxReduceCtas);
    *smBudget = user->smBudget;
  }
}

}  // namespace

void exportConfig(const Config& config, concclConfig_t* out) {
  concclConfig_t full = CONCCL_CONFIG_INITIALIZER;
  full.backend = config.backend;
  full.engine = config.engine;
  full.reduceCtas = config.reduceCtas;
  full.lanes = config.lanes;
  full.scratchBytes = config.scratchBytes;
  full.timeoutMs = config.timeoutMs;
  full.smallMessageBytes = config.smallMessageBytes;
  full.highPriority = config.highPriority ? 1 : 0;
  full.smBudget = config.smBudget;
  // Only as many bytes as the caller's struct has (an older header's struct is a prefix of ours). A size below
  // every known field is not a conccl config (e.g. uninitialised): writing a few bytes of it, size field
  // included, would silently hand back garbage, so refuse it like resolveConfig does.
  CONCCL_REQUIRE(out->size == 0 || out->size >= kMinConfigSize,
                 "config->size = " + std::to_string(out->size) +
                     " is not the size of a concclConfig_t (start from CONCCL_CONFIG_INITIALIZER)");
  size_t size = out->size == 0 || out->size > sizeof(full) ? sizeof(full) : out->size;
  full.size = size;
  std::memcpy(static_cast<void*>(out), &full, size);
}

}  // namespace conccl
