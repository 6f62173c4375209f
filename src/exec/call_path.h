// How the CUDA executor runs one call, decided from the call's schedule: the small-message kernel, copy engines
// alone, or copy engines plus the reduction kernel, and how many CTAs each kernel gets. Pure C++ (no CUDA types),
// so that the executor (exec/cuda) and the public query concclCallResources (api) run the very same code, and the
// unit tests check it on the CPU. The thresholds live here and nowhere else.
#pragma once

#include <conccl/conccl.h>

#include <cstddef>
#include <vector>

#include "exec/kernel_limits.h"
#include "sched/schedule.h"

namespace conccl::exec {

// True when `ops` non-empty ops with `reduceInputs` reduction inputs in all fit the small kernel's tables.
inline bool fitsSmallProgram(size_t ops, size_t reduceInputs) {
  return ops <= static_cast<size_t>(kSmallMaxOps) && reduceInputs <= static_cast<size_t>(kSmallMaxPointers);
}

// What the path decision depends on, fixed when the executor is made.
struct PathLimits {
  size_t smallBytes = 0;  // small-message threshold in force (0: the kernel is off: engine=copy, no peer access, ...)
  int reduceCtas = 0;     // config.reduceCtas (0: auto)
  int smBudget = kAutoReduceMaxCtas;  // config.smBudget as resolved (>= 1)
  bool highPriority = true;           // config.highPriority
};

// The size of rank r's part of a call (bytes copied + bytes its reductions produce), from the schedule's per-rank
// statistics when the builder filled them in (hand-made schedules: from the program).
size_t rankWorkBytes(const sched::Schedule& schedule, int rank);

// True when rank `rank` has nothing to do in the call (a zero-count call; the builders emit no op for it): the
// executor launches nothing for it, no kernel and no memory operation, as NCCL returns at once for zero bytes. No
// other rank can depend on such a rank: a program without ops signals nothing (the checker proves every Wait has
// its Signal).
inline bool launchesNothing(const sched::Schedule& schedule, int rank) {
  return schedule.programs[static_cast<size_t>(rank)].ops.empty();
}

// Whether rank `rank` runs the call as the small-message kernel. Decided for the whole call from every rank's
// program (each rank holds the full schedule), so all ranks of a call take the same path: mixing was measured
// unsafe (a kernel that read data right after a copy-engine rank's flag saw stale data in graph replays on the
// H200). A rank whose program does not fit the kernel's tables sends the whole call to the copy engines.
bool takesSmallPath(const sched::Schedule& schedule, int rank, size_t smallBytes);

// CTAs of one reduction kernel reading `inputBytes`: config.reduceCtas when set, else the auto rule above; never
// above smBudget.
int reductionCtas(int reduceCtas, int smBudget, size_t inputBytes);

// What rank `rank`'s part of the call occupies (concclCallResources). `devices`: [rank] -> CUDA device, to count
// the copies between two buffers of one GPU.
concclCallResources_t callResources(const sched::Schedule& schedule, int rank, const PathLimits& limits,
                                    const std::vector<int>& devices);

}  // namespace conccl::exec
