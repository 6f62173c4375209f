// What conccl's part of a C3 workload occupies on the GPU, answered without a GPU or a communicator by the very
// decision code a call runs (exec::callResources, behind concclCallResources): the schedule the call would get, the
// small-message and reduction thresholds, config.reduceCtas and config.smBudget. The planner's CTA and SM figures
// come from here, so that they cannot drift from what the library does. Pure C++: no CUDA types.
#pragma once

#include <conccl/conccl.h>

#include "c3/workload.h"
#include "core/config.h"

namespace conccl::c3 {

// The conccl datatype of a C3 GEMM / collective dtype.
concclDataType_t concclTypeOf(Dtype d);

// The configuration a communicator over `gpus` GPUs resolves when the caller passes no struct: the CONCCL_*
// environment and the defaults (resolveConfig), then the tuned defaults for that GPU count (applyTunedDefaults).
// Throws conccl::Error(concclInvalidArgument) for a bad environment variable, as communicator creation would.
Config defaultConfigFor(int gpus);

// The resources of `coll` (an out-of-place call with op sum) on a CUDA communicator of coll.ranks ranks in one
// process, one GPU each with peer access between every pair (the NVLink node the planner models), configured by
// `config`: the busiest rank's (most `sms`; ranks tie in the five C3 collectives except broadcast's root).
// It mirrors how CudaExecutor derives its limits and build options from the config (exec/cuda/cuda_executor.cc,
// cudaBuildOptions and the constructor), under the assumption of full peer access.
concclCallResources_t concclCallFootprint(const CollectiveSpec& coll, const Config& config);

}  // namespace conccl::c3
