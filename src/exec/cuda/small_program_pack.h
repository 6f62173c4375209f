// Packs one rank's schedule program into the small-message kernel's parameter (small_program_kernel.h).
#pragma once

#include <cuda.h>

#include <vector>

#include "exec/cuda/rank_state.h"
#include "exec/cuda/small_program_kernel.h"
#include "sched/schedule.h"

namespace conccl::exec {

// True when `ops` non-empty ops with `reduceInputs` reduction inputs in all fit the kernel's tables.
inline bool fitsSmallProgram(size_t ops, size_t reduceInputs) {
  return ops <= static_cast<size_t>(kSmallMaxOps) && reduceInputs <= static_cast<size_t>(kSmallMaxPointers);
}

// Fills out.ops / out.pointers / out.numOps (and dtype/op from the reductions) from `program`, skipping empty
// copies and reductions. The caller checked fitsSmallProgram; the header fields (abort/error words, done marker,
// timeout) are the caller's. Flags are addressed through `flagTable` ([rank] -> flags as the GPUs see them).
void packSmallProgram(const sched::RankProgram& program, int rank, const LocationResolver& resolve,
                      const std::vector<CUdeviceptr>& flagTable, SmallProgram& out);

}  // namespace conccl::exec
