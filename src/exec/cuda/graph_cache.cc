// See graph_cache.h.
#include "exec/cuda/graph_cache.h"

#include <cuda.h>

#include <atomic>
#include <string>

#include "base/error.h"
#include "base/host_laps.h"
#include "base/logging.h"
#include "exec/cuda/copy_engine_program.h"
#include "exec/cuda/cuda_check.h"
#include "exec/cuda/driver_api.h"
#include "exec/cuda/rank_state.h"

namespace conccl::exec {
namespace {

// A shape is captured on its second call: the first may be a one-off (a graph costs an instantiation, ~100s of us,
// and device memory), the second says the caller repeats it (training loops and caching allocators repeat shapes
// and pointers).
constexpr uint32_t kCaptureOnUse = 2;

// Replays by every communicator of the process (graphCacheReplays() in exec/executor.h, for tests).
std::atomic<size_t> graphCacheReplayCount{0};
std::atomic<size_t> graphCacheLaneReplayCount{0};  // of which programs with lanes (graphCacheLaneReplays())

}  // namespace

size_t graphCacheReplays() { return graphCacheReplayCount.load(std::memory_order_relaxed); }
size_t graphCacheLaneReplays() { return graphCacheLaneReplayCount.load(std::memory_order_relaxed); }

RankGraphCache::RankGraphCache(size_t capacity) : captureStream_(Stream::createNonBlocking()), cache_(capacity) {}

RankGraphCache::Cache::Entry& RankGraphCache::record(RankState& s, const CallShape& shape, const CopyEngineSetup& setup,
                                                     const LocationResolver& resolve,
                                                     const sched::RankProgram& program) {
  Cache::Entry* found = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    found = &cache_.use(shape);
  }
  // Stays in place while capturing: only this thread (holding the rank's mutex) adds or drops entries.
  Cache::Entry& entry = *found;
  if (entry.value || entry.refused || entry.uses < kCaptureOnUse) return entry;
  try {
    auto graph = std::make_shared<GraphExec>(capture(s, setup, resolve, program));
    const std::lock_guard<std::mutex> lock(mutex_);
    entry.value = std::move(graph);
  } catch (const Error& e) {
    // Nothing ran (a capture only records): the call runs eagerly, and so will this shape from now on.
    const std::lock_guard<std::mutex> lock(mutex_);
    entry.refused = true;
    CONCCL_WARN(s.rank, s.device,
                std::string("a repeated call could not be captured into a CUDA graph; it runs uncached: ") + e.what());
    return entry;
  }
  CONCCL_TRACE(s.rank, s.device,
               "captured a repeated call into a CUDA graph (" + std::to_string(program.ops.size()) + " ops, " +
                   std::to_string(cache_.size()) + " of " + std::to_string(cache_.capacity()) + " shapes cached)");
  return entry;
}

void RankGraphCache::prepare(RankState& s, const CallShape& shape, const CopyEngineSetup& setup,
                             const LocationResolver& resolve, const sched::RankProgram& program) {
  record(s, shape, setup, resolve, program);
  ++preparedLaunches_;
}

bool RankGraphCache::launch(RankState& s, const CallShape& shape, const CopyEngineSetup& setup,
                            const LocationResolver& resolve, const sched::RankProgram& program) {
  const bool prepared = preparedLaunches_ > 0;
  if (prepared) --preparedLaunches_;
  std::shared_ptr<GraphExec> graph;
  if (prepared) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (Cache::Entry* entry = cache_.find(shape)) graph = entry->value.value_or(nullptr);
  } else {
    Cache::Entry& entry = record(s, shape, setup, resolve, program);
    const std::lock_guard<std::mutex> lock(mutex_);
    graph = entry.value.value_or(nullptr);
  }
  if (!graph) return false;
  HostLaps::lap("graph lookup");
  replayGraph(s, graph->get(), setup.main, setup.singleStream);
  return true;
}

std::shared_ptr<GraphExec> RankGraphCache::pin(uint64_t scheduleId, int rank, const CallBinding& binding,
                                               uint64_t generation) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_ || !makeCallShape(scheduleId, rank, binding, pinShape_)) return nullptr;
  Cache::Entry* entry = cache_.find(pinShape_);
  return entry != nullptr ? entry->value.value_or(nullptr) : nullptr;
}

void replayGraph(RankState& s, cudaGraphExec_t graph, cudaStream_t stream, bool singleStream) {
  CUDA_CHECK(cudaGraphLaunch(graph, stream));
  HostLaps::lap("graph launch");
  // The done marker, as the eager path writes it (copy_engine_program.cc, finish): after everything of the call on
  // M, with a memory barrier. Not in the graph, because its value changes with every launch.
  const uint32_t marker = s.launches + 1;
  CU_CHECK(driverApi().streamWriteValue32(reinterpret_cast<CUstream>(stream), s.doneCounterDevice, marker,
                                          CU_STREAM_WRITE_VALUE_DEFAULT));
  ++s.launches;
  HostLaps::lap("done marker");
  graphCacheReplayCount.fetch_add(1, std::memory_order_relaxed);
  if (!singleStream) graphCacheLaneReplayCount.fetch_add(1, std::memory_order_relaxed);
}

GraphExec RankGraphCache::capture(RankState& s, const CopyEngineSetup& eagerSetup, const LocationResolver& resolve,
                                  const sched::RankProgram& program) {
  // Relaxed for the scope: instantiating a graph may count as a "potentially unsafe" call, which CUDA refuses (and
  // which invalidates the other capture) while another thread of the application captures in global mode, e.g. a
  // framework capturing its model while a helper thread calls conccl eagerly. NCCL guards its own allocations the
  // same way.
  const RelaxedCaptureScope relaxed(true);
  CopyEngineSetup setup = eagerSetup;
  setup.main = captureStream_.get();
  setup.eager = false;  // no done marker inside the graph: launch() writes it after every replay
  // Thread-local mode: the capture restricts only this thread (which makes no unsafe call while capturing); other
  // ranks' threads and the application's keep running their own work.
  CUDA_CHECK(cudaStreamBeginCapture(setup.main, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t raw = nullptr;
  try {
    CopyEngineProgram(s, setup, resolve).enqueue(program);
  } catch (...) {
    // End the capture whatever failed, so that the capture stream and the lanes it pulled in leave capture mode.
    (void)cudaStreamEndCapture(setup.main, &raw);
    if (raw != nullptr) cudaGraphDestroy(raw);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(setup.main, &raw));
  const Graph graph(raw);  // the template is not needed once instantiated
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  return GraphExec(exec);
}

void RankGraphCache::dropIfStale(uint64_t generation) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (generation == generation_) return;
  cache_.clear();  // graphs still running (or pinned) are freed when they complete (or are let go)
  generation_ = generation;
}

void RankGraphCache::leak() {
  const std::lock_guard<std::mutex> lock(mutex_);
  cache_.forEachValue([](std::shared_ptr<GraphExec>& g) {
    if (g) g->leak();
  });
  cache_.clear();
  captureStream_.leak();
}

}  // namespace conccl::exec
