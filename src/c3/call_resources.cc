#include "c3/call_resources.h"

#include <numeric>
#include <vector>

#include "base/error.h"
#include "core/tuned_defaults.h"
#include "exec/call_path.h"
#include "sched/schedule.h"

namespace conccl::c3 {

concclDataType_t concclTypeOf(Dtype d) {
  switch (d) {
    case Dtype::kBf16:
      return concclBfloat16;
    case Dtype::kFp16:
      return concclFloat16;
    case Dtype::kFp8E4M3:
      return concclFloat8e4m3;
    case Dtype::kFp32:
      return concclFloat32;
  }
  CONCCL_THROW(concclInvalidArgument, "unknown dtype");
}

Config defaultConfigFor(int gpus) {
  Config config = resolveConfig(nullptr, /*cudaAvailable=*/true);
  applyTunedDefaults(config, gpus);
  return config;
}

concclCallResources_t concclCallFootprint(const CollectiveSpec& coll, const Config& config) {
  CONCCL_REQUIRE(coll.ranks >= 1, "ranks must be >= 1");
  const int n = coll.ranks;
  // CudaExecutor's limits and build options with peer access between every pair of GPUs.
  exec::PathLimits limits;
  limits.smallBytes = config.engine == concclEngineCopy ? 0 : config.smallMessageBytes;
  limits.reduceCtas = config.reduceCtas;
  limits.smBudget = config.smBudget;
  limits.highPriority = config.highPriority;
  sched::BuildOptions options;
  options.scratchBudget = config.scratchBytes;
  options.lanes = config.lanes;
  options.pipelineDepth = config.pipelineDepth;
  options.minChunkBytes = config.minChunkBytes;
  options.peerReads = config.peerReduce;
  options.ownBlockViaPeer = config.engine == concclEngineCopy && n >= 2;

  // The call concclCallResources would build for it (src/api/collectives.cc).
  sched::CollectiveCall call;
  call.kind = coll.kind;
  call.nranks = n;
  call.dtype = concclTypeOf(coll.dtype);
  call.op = concclSum;
  call.root = 0;
  call.count = coll.callCount();
  call.inPlace.assign(static_cast<size_t>(n), false);
  const sched::Schedule schedule = sched::buildSchedule(call, options);
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);

  concclCallResources_t busiest{};
  for (int r = 0; r < n; ++r) {
    const concclCallResources_t res = exec::callResources(schedule, r, limits, devices);
    if (r == 0 || res.sms > busiest.sms) busiest = res;
  }
  return busiest;
}

}  // namespace conccl::c3
