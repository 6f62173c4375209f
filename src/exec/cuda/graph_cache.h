// The graph cache of the copy-engine path: an eager call whose shape (schedule, buffers: exec/call_shape_cache.h)
// this rank has run before is captured once into a CUDA graph, instantiated, and from then on replayed with one
// cudaGraphLaunch on the caller's stream instead of enqueueing every copy, memory-op batch, event and kernel again.
// Why: across 2 H200s (docs/results/2026-11-30-h200-x2-sweep-peer-reduce-c3/) the copy-engine path cost 14-37 us of
// host time per rank and call (up to 149 us for pipelined reductions with many pieces), and with one thread driving
// every rank that host time is the call's time at 128 KiB - 8 MB. See docs/cuda-executor.md, "Graph cache".
//
// What makes a replay the same GPU work as an eager enqueue:
//   - the program is captured by the very code that enqueues it eagerly (CopyEngineProgram), on a private stream
//     that never runs work; its lanes join the capture through the fork event and are joined back at its end, so
//     they become parallel branches, and a single-stream program stays one chain;
//   - flags carry constants (wait for 1, reset to 0), scratch offsets and flag slots come from the schedule, and
//     addresses from the shape: nothing in the graph changes from call to call;
//   - the one per-call value, the done marker (launch k writes k: synchronize and the GPU watchdog poll it), is not
//     in the graph: a stream write after the graph launch writes it, as the eager path does when lanes were used;
//   - except for a call on the rank's bounce regions (pool_bounce.h): its graph starts with the copy kernel of its
//     copies in and ends with that of its copies out, two kernel nodes set for each launch
//     (cudaGraphExecKernelNodeSetParams, which leaves launches already enqueued as they were) to the call's own pool
//     buffers and use count. One launch then replaces three: a copy kernel's own launch cost about 3 us, setting
//     a node about 1 us (one H100, 2026-12-06, docs/results/2026-12-06-h100-1gpu-launch-forms/). The copy-out node
//     also writes the done marker after its use count, so no stream write follows that graph (0.4-1.1 us less a
//     call: docs/results/2026-12-06-h100-1gpu-done-marker/).
// Capturing costs the eager enqueue plus an instantiation (~100s of us), so a shape is captured on its second call,
// never its first; in a local clique from Executor::prepareCall, before any rank of the call launches (prepare()).
// Destroying a cached graph that is still running is allowed (the driver frees it on completion).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "exec/call_shape_cache.h"
#include "exec/cuda/pool_bounce.h"
#include "exec/cuda/raii.h"
#include "sched/schedule.h"

namespace conccl::exec {

struct RankState;
struct CopyEngineSetup;
class LocationResolver;

// One rank's cache. Used under the rank's mutex only.
class RankGraphCache {
 public:
  // Creates the private capture stream on the current device (the rank's).
  explicit RankGraphCache(size_t capacity);

  // Local cliques, from Executor::prepareCall (before any rank of the call launches): records the call of `shape`
  // and, on the shape's second call, captures and instantiates its graph there. No stream of the call can be waiting
  // on the GPU yet, so even a driver call that waited for the device (an instantiation might) cannot hang a thread
  // that drives several ranks, or a peer thread whose rank already launched.
  void prepare(RankState& s, const CallShape& shape, const CopyEngineSetup& setup, const LocationResolver& resolve,
               const sched::RankProgram& program);

  // Runs `program` (rank s.rank's part of a call of the given shape) as its cached graph on setup.main, then writes
  // the done marker (or has the graph's copy-out node write it) and counts the launch like an eager one. After
  // prepare() for this call it only looks the shape up; without (several processes: no prepareCall) it records the
  // call and captures on the second call itself.
  // With `bounce` (a call on the rank's bounce regions with its copies in still pending), the graph holds the call's
  // copies too (the words that say so are added to `shape`), and the regions learn that they ran there.
  // Returns false when the caller must enqueue the program eagerly instead (and the copies with it): the shape's first
  // call, or a shape whose capture failed once (logged).
  bool launch(RankState& s, CallShape& shape, const CopyEngineSetup& setup, const LocationResolver& resolve,
              const sched::RankProgram& program, PoolBounceRegions* bounce = nullptr);

  // Drops every cached graph when `generation` differs from the one the graphs were made under (the executor's
  // count of peer mappings closed and allocations newly exported: an address may then name other memory).
  void dropIfStale(uint64_t generation);

  // Forgets the graphs and the capture stream without destroying them (a rank that could not drain: see
  // CudaExecutor::releaseRank).
  void leak();

  // The shape being looked up, reused from call to call (no allocation once warm).
  CallShape& scratchShape() { return shape_; }

 private:
  // An instantiated graph, and for a call on the bounce regions its copy kernels' nodes (in the template graph, which
  // cudaGraphExecKernelNodeSetParams names them by, so it is kept too).
  struct CachedGraph {
    GraphExec exec;
    Graph graph;                       // null unless copy nodes are kept
    cudaGraphNode_t copyIn = nullptr;  // null: the call has no copies in
    cudaGraphNode_t copyOut = nullptr;
  };
  // Counts a call of `shape` and captures its graph when the shape is due; returns the entry.
  CallShapeCache<CachedGraph>::Entry& record(RankState& s, const CallShape& shape, const CopyEngineSetup& setup,
                                             const LocationResolver& resolve, const sched::RankProgram& program,
                                             PoolBounceRegions* bounce);
  CachedGraph capture(RankState& s, const CopyEngineSetup& eagerSetup, const LocationResolver& resolve,
                      const sched::RankProgram& program, PoolBounceRegions* bounce);

  Stream captureStream_;
  CallShapeCache<CachedGraph> cache_;
  CallShape shape_;
  uint64_t generation_ = 0;
  // Calls prepare() recorded whose launch() has not come yet. A group posts (and prepares) all its calls before it
  // launches the first, so a rank may have several; its launches come in the same order.
  size_t preparedLaunches_ = 0;
};

}  // namespace conccl::exec
