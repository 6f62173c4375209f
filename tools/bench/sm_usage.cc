#include "sm_usage.h"

#include <algorithm>

namespace conccl::bench {

SmUsage ConcclSmUsage(const std::vector<concclCallResources_t>& ranks) {
  if (ranks.empty()) return {};
  const concclCallResources_t* busiest = &ranks.front();
  size_t copyBytes = 0;
  for (const concclCallResources_t& r : ranks) {
    if (r.sms > busiest->sms) busiest = &r;
    copyBytes = std::max(copyBytes, r.sameDeviceCopyBytes);
  }
  SmUsage u;
  switch (busiest->path) {
    case concclPathHost:
      return {0, false, false, "host threads, no GPU"};
    case concclPathCopyEngines:
      u = {0, false, false, "copy engines only (concclCallResources)"};
      break;
    case concclPathSmallKernel:
      u = {busiest->sms, false, true, "small-message kernel, 1 CTA for a few us (concclCallResources)"};
      break;
    case concclPathReduceKernel:
      u = {busiest->sms, true, false, "reduction kernel CTAs, at most (concclCallResources)"};
      break;
    default:
      return {};
  }
  if (copyBytes > 0) {
    u.copy_kernels = true;
    u.same_device_copy_bytes = copyBytes;
    if (u.sms == 0) {
      u.sms = 1;  // the copy kernel's SMs: at least one
      u.note =
          "copy engines, plus same-device copies on CUDA's copy kernels (SMs, how many unknown; "
          "concclCallResources)";
    } else {
      u.note += ", plus same-device copies on CUDA's copy kernels (SMs, how many unknown)";
    }
  }
  return u;
}

}  // namespace conccl::bench
