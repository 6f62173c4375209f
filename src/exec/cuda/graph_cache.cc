// See graph_cache.h.
#include "exec/cuda/graph_cache.h"

#include <cuda.h>

#include <atomic>
#include <optional>
#include <string>

#include "base/error.h"
#include "base/host_laps.h"
#include "base/logging.h"
#include "exec/cuda/bounce_copy_kernel.h"
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
std::atomic<size_t> graphCacheLaneReplayCount{0};    // of which programs with lanes (graphCacheLaneReplays())
std::atomic<size_t> graphCacheBounceReplayCount{0};  // of which calls with their bounce copies as nodes

// Marks a shape as a call on the bounce regions: its graph holds the copy nodes (their counts of copies too, which the
// copy kernels' nodes were captured with).
constexpr uint64_t kBounceShapeWord = 0xb0c3ull << 48;

// The copy kernel launched on the capturing `stream` as `regions` launch it, and the node it became (null: nothing to
// copy, no node).
cudaGraphNode_t captureBounceCopy(const BounceCopyArgs& args, const PoolBounceRegions& regions, cudaStream_t stream) {
  if (!launchBounceCopy(args, regions.maxCtas(), regions.priority(), stream)) return nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* last = nullptr;
  size_t count = 0;
  CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &last, nullptr, &count));
  CONCCL_ASSERT(status == cudaStreamCaptureStatusActive && count == 1);  // the kernel, which the stream now follows
  return last[0];
}

}  // namespace

size_t graphCacheReplays() { return graphCacheReplayCount.load(std::memory_order_relaxed); }
size_t graphCacheLaneReplays() { return graphCacheLaneReplayCount.load(std::memory_order_relaxed); }
size_t graphCacheBounceReplays() { return graphCacheBounceReplayCount.load(std::memory_order_relaxed); }

RankGraphCache::RankGraphCache(size_t capacity) : captureStream_(Stream::createNonBlocking()), cache_(capacity) {}

CallShapeCache<RankGraphCache::CachedGraph>::Entry& RankGraphCache::record(RankState& s, const CallShape& shape,
                                                                           const CopyEngineSetup& setup,
                                                                           const LocationResolver& resolve,
                                                                           const sched::RankProgram& program,
                                                                           PoolBounceRegions* bounce) {
  auto& entry = cache_.use(shape);
  if (entry.value || entry.refused || entry.uses < kCaptureOnUse) return entry;
  try {
    entry.value = capture(s, setup, resolve, program, bounce);
  } catch (const Error& e) {
    // Nothing ran (a capture only records): the call runs eagerly, and so will this shape from now on.
    entry.refused = true;
    CONCCL_WARN(s.rank, s.device,
                std::string("a repeated call could not be captured into a CUDA graph; it runs uncached: ") + e.what());
    return entry;
  }
  CONCCL_TRACE(s.rank, s.device,
               "captured a repeated call into a CUDA graph (" + std::to_string(program.ops.size()) + " ops" +
                   (bounce != nullptr ? " between its bounce copies, " : ", ") + std::to_string(cache_.size()) +
                   " of " + std::to_string(cache_.capacity()) + " shapes cached)");
  return entry;
}

void RankGraphCache::prepare(RankState& s, const CallShape& shape, const CopyEngineSetup& setup,
                             const LocationResolver& resolve, const sched::RankProgram& program) {
  record(s, shape, setup, resolve, program, /*bounce=*/nullptr);
  ++preparedLaunches_;
}

bool RankGraphCache::launch(RankState& s, CallShape& shape, const CopyEngineSetup& setup,
                            const LocationResolver& resolve, const sched::RankProgram& program,
                            PoolBounceRegions* bounce) {
  std::optional<PoolBounceRegions::CallCopies> copies;
  if (bounce != nullptr) {
    copies = bounce->graphCopies();
    shape.add(kBounceShapeWord);
    shape.add(static_cast<uint64_t>(copies->in.jobs));
    shape.add(static_cast<uint64_t>(copies->out.jobs));
  }
  const bool prepared = preparedLaunches_ > 0;
  if (prepared) --preparedLaunches_;
  auto* entry = prepared ? cache_.find(shape) : &record(s, shape, setup, resolve, program, bounce);
  if (entry == nullptr || !entry->value) return false;
  HostLaps::lap("graph lookup");
  CachedGraph& graph = *entry->value;
  const uint32_t marker = s.launches + 1;
  if (copies) {
    // For this launch and the next ones; launches already enqueued keep the previous call's buffers. The copy out,
    // the graph's last node, also writes the done marker (after its own mark, every CTA's copies visible).
    copies->out.done = reinterpret_cast<volatile uint32_t*>(s.doneCounterDevice);
    copies->out.doneValue = marker;
    if (graph.copyIn != nullptr) setBounceCopyNode(graph.exec.get(), graph.copyIn, copies->in, bounce->maxCtas());
    setBounceCopyNode(graph.exec.get(), graph.copyOut, copies->out, bounce->maxCtas());
    HostLaps::lap("bounce copy nodes set");
  }
  CUDA_CHECK(cudaGraphLaunch(graph.exec.get(), setup.main));
  if (bounce != nullptr) bounce->copiesLaunchedInGraph();
  HostLaps::lap("graph launch");
  if (!copies) {
    // The done marker, as the eager path writes it (copy_engine_program.cc, finish): after everything of the call on
    // M, with a memory barrier. Not in the graph, because its value changes with every launch.
    CU_CHECK(driverApi().streamWriteValue32(reinterpret_cast<CUstream>(setup.main), s.doneCounterDevice, marker,
                                            CU_STREAM_WRITE_VALUE_DEFAULT));
    HostLaps::lap("done marker");
  }
  ++s.launches;
  graphCacheReplayCount.fetch_add(1, std::memory_order_relaxed);
  if (!setup.singleStream) graphCacheLaneReplayCount.fetch_add(1, std::memory_order_relaxed);
  if (bounce != nullptr) graphCacheBounceReplayCount.fetch_add(1, std::memory_order_relaxed);
  return true;
}

RankGraphCache::CachedGraph RankGraphCache::capture(RankState& s, const CopyEngineSetup& eagerSetup,
                                                    const LocationResolver& resolve,
                                                    const sched::RankProgram& program, PoolBounceRegions* bounce) {
  // Relaxed for the scope: instantiating a graph may count as a "potentially unsafe" call, which CUDA refuses (and
  // which invalidates the other capture) while another thread of the application captures in global mode, e.g. a
  // framework capturing its model while a helper thread calls conccl eagerly. NCCL guards its own allocations the
  // same way.
  const RelaxedCaptureScope relaxed(true);
  CopyEngineSetup setup = eagerSetup;
  setup.main = captureStream_.get();
  setup.eager = false;  // no done marker captured: launch() writes it or sets the copy-out node to
  CachedGraph cached;
  // Thread-local mode: the capture restricts only this thread (which makes no unsafe call while capturing); other
  // ranks' threads and the application's keep running their own work.
  CUDA_CHECK(cudaStreamBeginCapture(setup.main, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t raw = nullptr;
  try {
    // The copy kernels' nodes, captured with this call's copies (launch() sets them for every launch). The program's
    // lanes fork after the copies in and join before the copies out, so both sides order against every op.
    std::optional<PoolBounceRegions::CallCopies> copies;
    if (bounce != nullptr) copies = bounce->graphCopies();
    if (copies) cached.copyIn = captureBounceCopy(copies->in, *bounce, setup.main);
    CopyEngineProgram(s, setup, resolve).enqueue(program);
    if (copies) cached.copyOut = captureBounceCopy(copies->out, *bounce, setup.main);
  } catch (...) {
    // End the capture whatever failed, so that the capture stream and the lanes it pulled in leave capture mode.
    (void)cudaStreamEndCapture(setup.main, &raw);
    if (raw != nullptr) cudaGraphDestroy(raw);
    (void)cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(setup.main, &raw));
  Graph graph(raw);
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph.get(), 0));
  cached.exec = GraphExec(exec);
  // The template is needed only to name the copy nodes when they are set.
  if (bounce != nullptr) cached.graph = std::move(graph);
  return cached;
}

void RankGraphCache::dropIfStale(uint64_t generation) {
  if (generation == generation_) return;
  cache_.clear();  // graphs still running are freed by the driver when they complete
  generation_ = generation;
}

void RankGraphCache::leak() {
  cache_.forEachValue([](CachedGraph& g) {
    g.exec.leak();
    g.graph.leak();
  });
  cache_.clear();
  captureStream_.leak();
}

}  // namespace conccl::exec
