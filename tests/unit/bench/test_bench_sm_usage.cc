// conccl-bench's `sms` column for conccl rows (tools/bench/sm_usage.h): the busiest rank's figure from
// concclCallResources, and same-device copies (CUDA's copy kernels on SMs on our driver, FACTS.md) counted as at
// least one SM instead of 0.
#include <gtest/gtest.h>

#include <vector>

#include "report.h"
#include "sm_usage.h"

namespace conccl::bench {
namespace {

concclCallResources_t resources(concclCallPath_t path, int sms, size_t sameDeviceCopyBytes) {
  concclCallResources_t r{};
  r.path = path;
  r.ctas = sms;
  r.sms = sms;
  r.highPriority = 1;
  r.sameDeviceCopyBytes = sameDeviceCopyBytes;
  return r;
}

TEST(BenchSmUsage, CopyEnginesWithoutSameDeviceCopiesUseNoSm) {
  const SmUsage u = ConcclSmUsage({resources(concclPathCopyEngines, 0, 0), resources(concclPathCopyEngines, 0, 0)});
  EXPECT_EQ(u.sms, 0);
  EXPECT_FALSE(u.copy_kernels);
  EXPECT_EQ(SmLabel(u), "0");
}

// An out-of-place all-gather on the copy-engine path: each rank's own block is a copy inside its GPU, which runs on
// SMs. The row must not say 0.
TEST(BenchSmUsage, SameDeviceCopiesCountAsAtLeastOneSm) {
  const SmUsage u =
      ConcclSmUsage({resources(concclPathCopyEngines, 0, 4096), resources(concclPathCopyEngines, 0, 8192)});
  EXPECT_EQ(u.sms, 1);
  EXPECT_TRUE(u.copy_kernels);
  EXPECT_FALSE(u.upper_bound);
  EXPECT_EQ(u.same_device_copy_bytes, 8192u);  // the rank that copies most
  EXPECT_EQ(SmLabel(u), "1+");
  EXPECT_NE(u.note.find("copy kernels"), std::string::npos) << u.note;
}

TEST(BenchSmUsage, ReductionKernelPlusSameDeviceCopies) {
  const SmUsage plain =
      ConcclSmUsage({resources(concclPathReduceKernel, 8, 0), resources(concclPathReduceKernel, 4, 0)});
  EXPECT_EQ(plain.sms, 8);
  EXPECT_TRUE(plain.upper_bound);
  EXPECT_EQ(SmLabel(plain), "<=8");
  const SmUsage copying =
      ConcclSmUsage({resources(concclPathReduceKernel, 4, 0), resources(concclPathReduceKernel, 8, 1 << 20)});
  EXPECT_EQ(copying.sms, 8);
  EXPECT_TRUE(copying.copy_kernels);
  EXPECT_EQ(SmLabel(copying), "<=8+");
}

TEST(BenchSmUsage, SmallKernelAndHostAndUnknown) {
  EXPECT_EQ(SmLabel(ConcclSmUsage({resources(concclPathSmallKernel, 1, 0)})), "1!");
  const SmUsage host = ConcclSmUsage({resources(concclPathHost, 0, 0)});
  EXPECT_EQ(host.sms, 0);
  EXPECT_FALSE(host.copy_kernels);
  EXPECT_EQ(ConcclSmUsage({}).sms, -1);
}

TEST(BenchSmUsage, JsonRowCarriesTheCopies) {
  RowResult row;
  row.backend = "conccl";
  row.sms = ConcclSmUsage({resources(concclPathCopyEngines, 0, 4096)});
  const nlohmann::json j = JsonRow(row, false);
  EXPECT_EQ(j["sms"], 1);
  EXPECT_EQ(j["sms_copy_kernels"], true);
  EXPECT_EQ(j["same_device_copy_bytes"], 4096);
  EXPECT_EQ(FormatRow(row).find("  1+") != std::string::npos, true) << FormatRow(row);
}

}  // namespace
}  // namespace conccl::bench
