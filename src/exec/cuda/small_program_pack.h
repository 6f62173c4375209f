// Packs one rank's schedule program into the small-message kernel's parameter (small_program_kernel.h).
#pragma once

#include <cuda.h>

#include <vector>

#include "exec/cuda/rank_state.h"
#include "exec/cuda/small_program_kernel.h"
#include "sched/schedule.h"

namespace conccl::exec {

// Fills out.ops / out.pointers / out.numOps (and dtype/op from the reductions) from `program`, skipping empty
// copies and reductions. The caller checked fitsSmallProgram (exec/call_path.h); the header fields (abort/error words, done marker,
// timeout) are the caller's. Flags are addressed through `flagTable` ([rank] -> flags as the GPUs see them).
void packSmallProgram(const sched::RankProgram& program, int rank, const LocationResolver& resolve,
                      const std::vector<CUdeviceptr>& flagTable, SmallProgram& out);

}  // namespace conccl::exec
