// The communicator configuration after the caller's struct, environment variables and defaults have been
// merged (see the table in conccl.h). Every later layer reads this, never the environment. Plain data, so that the
// executors below core can read it; core/config.h makes it (resolveConfig).
#pragma once

#include <conccl/conccl.h>

#include <cstddef>

namespace conccl {

// smBudget's default when neither it nor reduceCtas is given: the most CTAs the auto reduction takes. The number is a
// configuration default, so it lives here (core) rather than in exec/kernel_limits.h, which describes the kernels and
// sits above core; exec/call_path.cc asserts that exec::kAutoReduceMaxCtas equals it, so the two cannot drift apart.
inline constexpr int kDefaultSmBudget = 8;

struct Config {
  concclBackend_t backend = concclBackendHost;
  concclEngine_t engine = concclEngineAuto;
  int reduceCtas = 0;  // 0: auto, from the size of each reduction (exec/cuda/copy_engine_program.h)
  int lanes = 2;
  size_t scratchBytes = size_t{64} << 20;
  int timeoutMs = 300000;
  size_t smallMessageBytes = size_t{64} << 10;
  // conccl's kernels at the greatest stream priority (conccl.h explains why this is the default).
  bool highPriority = true;
  // The most SMs (CTAs) any kernel of a call may use; resolved, never 0 (default: reduceCtas if set, else
  // kDefaultSmBudget, the auto reduction's maximum).
  int smBudget = kDefaultSmBudget;
  // Tuning knobs without a config field (environment only; README table), defaults per GPU count from
  // core/tuned_defaults.h (these are its 2-GPU row, from the sweep of 2026-11-30,
  // docs/results/2026-11-30-h200-x2-sweep-peer-reduce-c3/):
  // programs that copy at most singleStreamBytes run every op on the caller's stream (lanes cost fork/join calls that
  // small programs do not win back); reduction pipelines cut a share into pieces of at least minChunkBytes (each
  // piece costs ~3-6 CUDA calls per rank, which 512 KiB - 2 MiB pieces did not win back below 16 MiB), at most what
  // the scratch allows at pipelineDepth slots per peer.
  size_t singleStreamBytes = size_t{4} << 20;
  size_t minChunkBytes = size_t{8} << 20;
  int pipelineDepth = 2;
  // How long a rank's thread spins for its peers before it blocks on the clique's condition variable
  // (LocalClique::spinUntilReady; CONCCL_RENDEZVOUS_SPIN_US, 0 = block at once).
  int rendezvousSpinUs = 50;
  // Eager copy-engine calls whose shape (schedule + buffers) repeats run as one cached CUDA graph per rank
  // (exec/cuda/graph_cache.h): at most this many shapes per rank; 0 = off (CONCCL_GRAPH_CACHE).
  size_t graphCacheEntries = 64;
  // Ranks in separate processes stage a call through their peers' scratch (sched::CollectiveCall::peerScratchOnly) when
  // its largest buffer is at most this many bytes: the call then launches without waiting on the host for the peers
  // (whose buffer addresses it no longer needs), at the price of one local copy of what a rank receives; 0 = never
  // (CONCCL_STAGED_MAX_BYTES). Must agree across the processes of a communicator (checked at init).
  size_t stagedMaxBytes = size_t{8} << 20;
  // Across processes, a call above stagedMaxBytes on cudaMallocAsync pool memory runs on the rank's bounce regions
  // (exec/pool_bounce_plan.h): one copy in and one copy out on the caller's stream around an ordinary call on memory
  // the peers map, instead of a staged program that grows with the call. The largest buffer (span of an in-place
  // call) a region takes; its memory is mapped as calls need it and given back after poolBounceIdleMs unused. Larger
  // calls, and every call with 0, are staged (CONCCL_POOL_BOUNCE_MAX_BYTES). Each process decides alone.
  size_t poolBounceMaxBytes = size_t{1} << 30;
  // Bounce regions no call used for this long give their memory back (their peers' mappings go with the next
  // retirement); the next call on pool memory maps them again (CONCCL_POOL_BOUNCE_IDLE_MS).
  int poolBounceIdleMs = 200;
  // A peer's buffer that its owner freed is unmapped here by a background thread, which holds this process's launches
  // off while it unmaps (exec/cuda/host_gated_work.h: 170-310 us for a 64 MiB VMM unit). It waits for unmapQuietUs
  // (0: not asked) without a launch, without GPU work waiting for a peer and since the close was asked for, at most
  // unmapQuietMaxMs after the request, so that the unmap falls between bursts of calls
  // (CONCCL_UNMAP_QUIET_US, CONCCL_UNMAP_QUIET_MAX_MS). Process-wide: the last communicator made sets it.
  int unmapQuietUs = 2000;
  int unmapQuietMaxMs = 100;
  // A call across processes whose peers have not all made it within rendezvousSpinUs of this rank is run staged
  // through the peers' scratch (as a staged call: no peer address needed) and launched at once, on the caller's thread
  // and stream; every rank of the call takes the same route, agreed through the shared segment (ProcessClique, "Late
  // peers"). 0 = such calls wait on the host for their peers (CONCCL_STAGE_LATE_CALLS). Concerns every collective but
  // AllToAllv; Send/Recv and AllToAllv wait for their peers (or are deferred: deferCalls). Must agree across the
  // processes of a communicator (checked at init).
  bool stageLateCalls = true;
  // With stageLateCalls: a late collective takes the pair-owned route instead of the staged one. Data movement
  // (AllGather, Broadcast, AllToAll, AllToAllv, Gather, Scatter): each pair's data is moved, both directions, by the
  // later of its two ranks on its copy engines (sched::CollectiveCall::pairOwner); reductions (AllReduce,
  // ReduceScatter, Reduce; up to 8 ranks): the rank that calls last reduces for every rank (CollectiveCall::callOwner).
  // A rank whose peers are late only signals "ready", waits and ends with a "done" (ProcessClique, "Late peers"), plus
  // its own block's copy where the collective has one (moved through a peer with engine=copy): no staging copy, a
  // program whose length does not grow with the size. 0 = such calls are staged
  // (CONCCL_PAIR_OWNED_LATE_CALLS). Only decides the route this rank proposes; every rank follows the route claimed
  // first, so it need not agree across processes.
  bool pairOwnedLateCalls = true;
  // Buffers of VMM memory created shareable (cuMemCreate with a POSIX descriptor or fabric handle type: PyTorch's
  // expandable segments) are exported to the peer processes piece by piece through the process's handle server
  // (exec/cuda/vmm_export.h), so calls on them move data directly like calls on cudaMalloc memory (CONCCL_VMM_EXPORT,
  // default 1; checked on one H200 with 2-4 processes, 2026-12-05: docs/results/2026-12-05-h200-1gpu-late-vmm/).
  // 0: such calls are staged, an SM copy of every received byte. Used only when every process of the communicator
  // asks for it and the init check (a buffer across two mapped pieces exported by each process and mapped by every
  // other: exec::probeVmmExport) passes; otherwise staged, said once at WARN.
  bool exportVmm = true;
  // Calls that would wait on the host for their peers (Send/Recv, AllToAllv, and every call after one of them) are
  // finished by the communicator's proxy thread while the caller's stream waits on the GPU (ProcessClique, "Deferred
  // calls"); CONCCL_DEFER_CALLS=1. Off by default: work enqueued after the call returned sits behind whatever the
  // program enqueued or does meanwhile, and on one H200 (2026-12-02) every deferred call deadlocked once PyTorch made
  // other streams wait on the caller's (tests/torch/stream_waits.py), with 8 or 32 hardware queues.
  bool deferCalls = false;
  // With deferCalls: symmetric and staged calls whose program is long are handed to the proxy thread to enqueue too,
  // so that the caller pays the gate's two CUDA calls instead (CONCCL_DEFER_LONG_LAUNCHES=1). Off by default.
  bool deferLongLaunches = false;
  // Ranks of one process called from a thread each (a group per call posting only that rank) may stage such calls
  // too and launch them at once instead of waiting for the peers' threads (LocalClique::post). CONCCL_THREAD_STAGED:
  // 0 (default, until it is measured across GPUs: docs/cuda-executor.md, "Thread-per-rank staged calls") = never;
  // 1 = when every rank has a GPU of its own. 2 (tests only, through ConfigTestHook; the host backend's CPU tests and
  // ranks sharing one GPU) = also when ranks share a GPU or run on the host backend: there the ranks' streams must
  // first have been used by a grouped call (their hardware queues claimed together, Hazard 4), and such calls never
  // use the graph cache (exec::CallBinding::eagerOnly).
  int threadStaged = 0;
  // The knobs of core/tuned_defaults.h (lanes, singleStreamBytes, minChunkBytes, smallMessageBytes) that the caller's
  // struct or the environment set (TunedKnob bits); the others take the row for the communicator's GPU count once its
  // devices are known (applyTunedDefaults). The values above are that table's 2-GPU row until then.
  unsigned explicitKnobs = 0;

  // Test-only switches: never read from the environment or concclConfig_t, set only through ConfigTestHook (below).
  // Each turns off a fix or a design choice, to reproduce what it prevents or to check that both forms agree.
  //
  // Reductions read the peers' inputs where they lie when every GPU pair has peer access (sched::emitPullReduce);
  // false keeps the copy-engine exchange into scratch everywhere (the form used anyway without peer access).
  bool peerReduce = true;
  // A rank's calls on different caller streams run in call order (CudaExecutor::orderAfterPreviousCall); false only
  // reproduces two calls of a rank running at once on the GPU (docs/cuda-executor.md, Hazard 6).
  bool callOrder = true;
  // Every stream's first use is claimed one at a time (exec/cuda/queue_claim.h); false only reproduces the shared-GPU
  // hardware-queue deadlock (docs/cuda-executor.md, Hazard 4).
  bool queueClaim = true;
  // Only programs whose part of the call (Schedule::workBytes) is at most this are graph-cached; 0 = no limit. For
  // comparing cache policies (e.g. single-stream programs only).
  size_t graphCacheMaxBytes = 0;
};

}  // namespace conccl
