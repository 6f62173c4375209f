// The `sms` column of a conccl row from what the library says each rank's call occupies (concclCallResources, the
// executor's own decision code). Pure: no CUDA types, unit-tested on the CPU (tests/unit/bench/test_bench_sm_usage.cc).
#ifndef CONCCL_TOOLS_BENCH_SM_USAGE_H_
#define CONCCL_TOOLS_BENCH_SM_USAGE_H_

#include <conccl/conccl.h>

#include <vector>

#include "backend.h"

namespace conccl::bench {

// The busiest rank counts (most `sms`). Copies between two buffers of one GPU (sameDeviceCopyBytes on any rank) are
// CUDA's copy kernels on SMs on our driver, of a size CUDA does not report: they make the row's count "at least one
// SM more than conccl's kernels" when conccl launches none (copy engines only: sms 1, label "1+"), and add a '+' to
// the kernels' figure otherwise (the copies may run beside the reduction kernel on another lane: "<=8+"). Empty
// `ranks`: unknown.
SmUsage ConcclSmUsage(const std::vector<concclCallResources_t>& ranks);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_SM_USAGE_H_
