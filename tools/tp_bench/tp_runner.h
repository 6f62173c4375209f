// Runs one shape: checks that it fits every GPU, allocates its workload, times each selected strategy and, with
// --check, compares the split and fused results with serial NCCL's.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tp_options.h"
#include "tp_report.h"
#include "tp_world.h"

namespace conccl::tp {

// Why the shape does not fit (its buffers plus a reserve for NCCL, cuBLASLt and conccl against the free memory
// of the fullest GPU), or nullopt when it fits.
std::optional<std::string> whyNotFits(TpWorld& world, const TpShape& shape, bool check);

// The finalized rows of one shape, one per strategy. A strategy that fails gets a row with its error and the
// others still run; a TimeoutError (the GPUs stuck) propagates.
std::vector<TpRow> runShape(TpWorld& world, const TpShape& shape, const std::vector<Strategy>& strategies,
                            const TpOptions& options);

}  // namespace conccl::tp
