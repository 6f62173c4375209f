// How the CUDA executor runs a call (src/exec/call_path.h), checked on the CPU on real schedules: the path, the CTAs
// of each kernel, the SM budget, and the public query concclCallResources that answers from the same code.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

#include "base/types.h"
#include "exec/call_path.h"
#include "sched/schedule.h"
#include "test_sched_util.h"

namespace conccl::exec {
namespace {

sched::Schedule scheduleOf(sched::CollKind kind, int nranks, size_t count, concclDataType_t dtype, bool peerReads,
                           int root = 0) {
  const sched::CollectiveCall call = sched::testing::makeCall(kind, nranks, count, dtype, concclSum, root);
  sched::BuildOptions options;  // the CUDA executor's defaults (core/config.h)
  options.scratchBudget = size_t{64} << 20;
  options.minChunkBytes = size_t{8} << 20;
  options.peerReads = peerReads;
  return sched::buildSchedule(call, options);
}

std::vector<int> devicesOf(int nranks) {
  std::vector<int> d;
  for (int r = 0; r < nranks; ++r) d.push_back(r);
  return d;
}

// The largest CTA count the executor would launch for any reduction of rank r's program: walked here op by op,
// independently of callResources' own loop.
int largestReduction(const sched::Schedule& s, int r, const PathLimits& limits) {
  int most = 0;
  for (const sched::Op& op : s.programs[static_cast<size_t>(r)].ops) {
    if (const auto* red = std::get_if<sched::Reduce>(&op); red != nullptr && red->count > 0) {
      most = std::max(most, reductionCtas(limits.reduceCtas, limits.smBudget,
                                          red->count * typeSize(red->dtype) * red->inputs.size()));
    }
  }
  return most;
}

TEST(CallPath, ReductionCtasFollowTheAutoRuleAndNeverExceedTheBudget) {
  EXPECT_EQ(reductionCtas(0, 8, 0), 1);
  EXPECT_EQ(reductionCtas(0, 8, kAutoReduceBytesPerCta), 1);
  EXPECT_EQ(reductionCtas(0, 8, kAutoReduceBytesPerCta + 1), 2);
  EXPECT_EQ(reductionCtas(0, 8, 100 * kAutoReduceBytesPerCta), kAutoReduceMaxCtas);
  EXPECT_EQ(reductionCtas(0, 3, 100 * kAutoReduceBytesPerCta), 3);
  EXPECT_EQ(reductionCtas(0, 64, 100 * kAutoReduceBytesPerCta), kAutoReduceMaxCtas);  // a budget is a cap, not a goal
  EXPECT_EQ(reductionCtas(16, 16, 1), 16);  // a configured count is used as it is
  EXPECT_EQ(reductionCtas(16, 4, 1), 4);
}

TEST(CallPath, ZeroCountCallsLaunchNothing) {
  PathLimits limits;
  limits.smallBytes = size_t{64} << 10;
  for (sched::CollKind kind : {sched::CollKind::kAllGather, sched::CollKind::kReduceScatter,
                               sched::CollKind::kAllReduce, sched::CollKind::kBroadcast, sched::CollKind::kReduce,
                               sched::CollKind::kAllToAll, sched::CollKind::kGather, sched::CollKind::kScatter}) {
    for (int n : {1, 2, 5}) {
      const auto empty = scheduleOf(kind, n, 0, concclFloat32, true, n - 1);
      const auto one = scheduleOf(kind, n, 1, concclFloat32, true, n - 1);
      for (int r = 0; r < n; ++r) {
        const std::string what = std::string(sched::collKindName(kind)) + " n=" + std::to_string(n) + " rank " +
                                 std::to_string(r);
        EXPECT_TRUE(launchesNothing(empty, r)) << what;
        const concclCallResources_t res = callResources(empty, r, limits, devicesOf(n));
        EXPECT_EQ(res.path, concclPathCopyEngines) << what;
        EXPECT_EQ(res.ctas, 0) << what;
        EXPECT_EQ(res.sms, 0) << what;
        EXPECT_EQ(res.sameDeviceCopyBytes, 0u) << what;
      }
      // One element (out of place) is work for some rank.
      bool someRankWorks = false;
      for (int r = 0; r < n; ++r) someRankWorks = someRankWorks || !launchesNothing(one, r);
      EXPECT_TRUE(someRankWorks) << sched::collKindName(kind) << " n=" << n;
    }
  }
}

TEST(CallPath, SmallCallsRunAsOneCtaOnEveryRank) {
  PathLimits limits;
  limits.smallBytes = size_t{64} << 10;
  for (int n : {1, 2, 3, 8}) {
    const auto s = scheduleOf(sched::CollKind::kAllReduce, n, 1024, concclFloat32, true);
    for (int r = 0; r < n; ++r) {
      const concclCallResources_t res = callResources(s, r, limits, devicesOf(n));
      EXPECT_EQ(res.path, concclPathSmallKernel) << n << " ranks, rank " << r;
      EXPECT_EQ(res.ctas, kSmallKernelCtas);
      EXPECT_EQ(res.sms, kSmallKernelCtas);
      EXPECT_EQ(res.highPriority, 1);
      EXPECT_EQ(res.sameDeviceCopyBytes, 0u);
    }
  }
  // Movement-only calls use the kernel up to kSmallMovementFactor x the threshold; reductions only up to it.
  const size_t ag = (limits.smallBytes * kSmallMovementFactor) / 4 / sizeof(float);  // 4 ranks, rank's part <= limit
  const auto gather = scheduleOf(sched::CollKind::kAllGather, 4, ag / 4, concclFloat32, true);
  EXPECT_EQ(callResources(gather, 0, limits, devicesOf(4)).path, concclPathSmallKernel);
  // Off: every path but the small kernel.
  limits.smallBytes = 0;
  const auto tiny = scheduleOf(sched::CollKind::kAllReduce, 2, 16, concclFloat32, true);
  EXPECT_EQ(callResources(tiny, 0, limits, devicesOf(2)).path, concclPathReduceKernel);
  EXPECT_FALSE(takesSmallPath(tiny, 0, 0));
}

TEST(CallPath, LargeMovementUsesNoConcclKernel) {
  PathLimits limits;
  limits.smallBytes = size_t{64} << 10;
  const size_t count = size_t{16} << 20;  // 64 MiB per rank of fp32
  for (sched::CollKind kind : {sched::CollKind::kAllGather, sched::CollKind::kAllToAll, sched::CollKind::kBroadcast,
                               sched::CollKind::kGather, sched::CollKind::kScatter}) {
    const auto s = scheduleOf(kind, 4, count, concclFloat32, true);
    for (int r = 0; r < 4; ++r) {
      const concclCallResources_t res = callResources(s, r, limits, devicesOf(4));
      EXPECT_EQ(res.path, concclPathCopyEngines) << sched::collKindName(kind) << " rank " << r;
      EXPECT_EQ(res.ctas, 0);
      EXPECT_EQ(res.sms, 0);
    }
  }
}

TEST(CallPath, SameDeviceCopiesAreCountedNotHidden) {
  PathLimits limits;  // small path off
  const size_t count = size_t{1} << 20;
  const auto s = scheduleOf(sched::CollKind::kAllGather, 2, count, concclFloat32, true);
  // Both ranks on one GPU: every byte the rank copies stays on that GPU.
  size_t copied = 0;
  for (const sched::Op& op : s.programs[0].ops) {
    if (const auto* c = std::get_if<sched::Copy>(&op)) copied += c->bytes;
  }
  ASSERT_GT(copied, 0u);
  EXPECT_EQ(callResources(s, 0, limits, {0, 0}).sameDeviceCopyBytes, copied);
  // One GPU per rank: at most the rank's own block can stay on its GPU.
  EXPECT_LE(callResources(s, 0, limits, {0, 1}).sameDeviceCopyBytes, count * sizeof(float));
}

TEST(CallPath, ReductionsReportTheCtasTheExecutorLaunchesWithinTheBudget) {
  const size_t count = size_t{32} << 20;  // 128 MiB per rank of fp32: pipelined pieces
  for (bool peerReads : {false, true}) {
    for (sched::CollKind kind : {sched::CollKind::kReduceScatter, sched::CollKind::kAllReduce}) {
      const size_t c = kind == sched::CollKind::kReduceScatter ? count / 4 : count;
      const auto s = scheduleOf(kind, 4, c, concclBfloat16, peerReads);
      for (auto [reduceCtas, budget] : {std::pair{0, 8}, {0, 4}, {0, 1}, {2, 8}, {16, 16}}) {
        PathLimits limits;
        limits.smallBytes = size_t{64} << 10;
        limits.reduceCtas = reduceCtas;
        limits.smBudget = budget;
        for (int r = 0; r < 4; ++r) {
          const concclCallResources_t res = callResources(s, r, limits, devicesOf(4));
          const std::string what = std::string(sched::collKindName(kind)) + (peerReads ? " peer reads" : " scratch") +
                                   " reduceCtas " + std::to_string(reduceCtas) + " budget " + std::to_string(budget);
          EXPECT_EQ(res.path, concclPathReduceKernel) << what;
          EXPECT_EQ(res.ctas, largestReduction(s, r, limits)) << what;
          EXPECT_LE(res.sms, budget) << what;
          EXPECT_EQ(res.sms, reduceCtas > 0 ? std::min(reduceCtas, budget) : std::min(kAutoReduceMaxCtas, budget))
              << what;
        }
      }
    }
  }
}

TEST(CallPath, ReduceUsesSmsWhereItsScheduleReduces) {
  // Exchange into scratch: the root alone reduces. Peer reads: every rank reduces its 1/n share (sched/reduce.cc).
  PathLimits limits;
  const auto staged = scheduleOf(sched::CollKind::kReduce, 4, size_t{8} << 20, concclFloat32, false, /*root=*/2);
  const auto pulled = scheduleOf(sched::CollKind::kReduce, 4, size_t{8} << 20, concclFloat32, true, /*root=*/2);
  for (int r = 0; r < 4; ++r) {
    const concclCallResources_t s = callResources(staged, r, limits, devicesOf(4));
    const concclCallResources_t p = callResources(pulled, r, limits, devicesOf(4));
    EXPECT_EQ(p.path, concclPathReduceKernel) << "rank " << r;
    EXPECT_GT(p.ctas, 0) << "rank " << r;
    if (r == 2) {
      EXPECT_EQ(s.path, concclPathReduceKernel);
      EXPECT_GT(s.ctas, 0);
    } else {
      EXPECT_EQ(s.path, concclPathCopyEngines) << "rank " << r;
      EXPECT_EQ(s.ctas, 0) << "rank " << r;
    }
  }
}

TEST(CallPath, HighPriorityIsReportedAsConfigured) {
  PathLimits limits;
  limits.highPriority = false;
  const auto s = scheduleOf(sched::CollKind::kAllReduce, 2, 1 << 20, concclFloat32, true);
  EXPECT_EQ(callResources(s, 0, limits, devicesOf(2)).highPriority, 0);
}

// --- The public query and the config fields ---

std::string lastError() { return concclGetLastError(nullptr); }

concclComm_t hostComm(int n, std::vector<concclComm_t>* all) {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  all->resize(static_cast<size_t>(n));
  EXPECT_EQ(concclCommInitAll(all->data(), n, nullptr, &config), concclSuccess) << lastError();
  return (*all)[0];
}

TEST(CallResourcesApi, HostBackendRunsNoKernel) {
  std::vector<concclComm_t> comms;
  concclComm_t comm = hostComm(3, &comms);
  concclCallResources_t out;
  for (int c = 0; c < concclNumColls; ++c) {
    ASSERT_EQ(concclCallResources(comm, static_cast<concclCollective_t>(c), 1000, concclFloat32, 1, &out),
              concclSuccess)
        << lastError();
    EXPECT_EQ(out.path, concclPathHost);
    EXPECT_EQ(out.ctas, 0);
    EXPECT_EQ(out.sms, 0);
  }
  for (concclComm_t c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
}

TEST(CallResourcesApi, ValidatesEveryArgument) {
  std::vector<concclComm_t> comms;
  concclComm_t comm = hostComm(2, &comms);
  concclCallResources_t out;
  EXPECT_EQ(concclCallResources(nullptr, concclCollAllGather, 1, concclFloat32, 0, &out), concclInvalidArgument);
  EXPECT_EQ(concclCallResources(comm, concclCollAllGather, 1, concclFloat32, 0, nullptr), concclInvalidArgument);
  EXPECT_NE(std::string(concclGetLastError(comm)).find("out is NULL"), std::string::npos) << concclGetLastError(comm);
  EXPECT_EQ(concclCallResources(comm, concclNumColls, 1, concclFloat32, 0, &out), concclInvalidArgument);
  EXPECT_EQ(concclCallResources(comm, static_cast<concclCollective_t>(-1), 1, concclFloat32, 0, &out),
            concclInvalidArgument);
  EXPECT_EQ(concclCallResources(comm, concclCollAllGather, 1, concclNumTypes, 0, &out), concclInvalidArgument);
  // fp8 moves but does not reduce.
  EXPECT_EQ(concclCallResources(comm, concclCollAllGather, 1, concclFloat8e4m3, 0, &out), concclSuccess);
  EXPECT_EQ(concclCallResources(comm, concclCollReduceScatter, 1, concclFloat8e4m3, 0, &out), concclInvalidArgument);
  // Roots matter only for rooted collectives.
  EXPECT_EQ(concclCallResources(comm, concclCollReduce, 1, concclFloat32, 2, &out), concclInvalidArgument);
  EXPECT_EQ(concclCallResources(comm, concclCollBroadcast, 1, concclFloat32, -1, &out), concclInvalidArgument);
  EXPECT_EQ(concclCallResources(comm, concclCollAllReduce, 1, concclFloat32, 7, &out), concclSuccess);
  // A count whose bytes overflow.
  EXPECT_EQ(concclCallResources(comm, concclCollAllGather, SIZE_MAX / 2, concclFloat32, 0, &out), concclInvalidArgument);
  for (concclComm_t c : comms) EXPECT_EQ(concclCommDestroy(c), concclSuccess);
  EXPECT_EQ(concclCallResources(comm, concclCollAllGather, 1, concclFloat32, 0, &out), concclInvalidUsage);
}

concclConfig_t hostConfig() {
  concclConfig_t config = CONCCL_CONFIG_INITIALIZER;
  config.backend = concclBackendHost;
  return config;
}

// Init with `config`, read the resolved config back; nullopt-like: result code in *rc.
concclConfig_t resolved(const concclConfig_t& config, concclResult_t* rc) {
  concclConfig_t got = CONCCL_CONFIG_INITIALIZER;
  concclComm_t comm = nullptr;
  *rc = concclCommInitAll(&comm, 1, nullptr, &config);
  if (*rc != concclSuccess) return got;
  EXPECT_EQ(concclCommGetConfig(comm, &got), concclSuccess);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
  return got;
}

TEST(CallResourcesApi, SmBudgetDefaultsFollowReduceCtasAndContradictionsAreRefused) {
  concclResult_t rc = concclSuccess;
  concclConfig_t c = hostConfig();
  EXPECT_EQ(resolved(c, &rc).smBudget, kAutoReduceMaxCtas);
  c.reduceCtas = 16;
  EXPECT_EQ(resolved(c, &rc).smBudget, 16);
  c.smBudget = 32;
  EXPECT_EQ(resolved(c, &rc).smBudget, 32);
  c.smBudget = 8;  // reduceCtas 16 > smBudget 8
  resolved(c, &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  EXPECT_NE(lastError().find("exceeds smBudget"), std::string::npos) << lastError();
  c = hostConfig();
  c.smBudget = 1025;
  resolved(c, &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  c.smBudget = -1;
  resolved(c, &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  // The environment, then the fields over it.
  setenv("CONCCL_SM_BUDGET", "4", 1);
  c = hostConfig();
  EXPECT_EQ(resolved(c, &rc).smBudget, 4);
  c.reduceCtas = 8;  // above the environment's budget
  resolved(c, &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  c.smBudget = 8;
  EXPECT_EQ(resolved(c, &rc).smBudget, 8);
  setenv("CONCCL_SM_BUDGET", "many", 1);
  resolved(hostConfig(), &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  unsetenv("CONCCL_SM_BUDGET");
}

TEST(CallResourcesApi, HighPriorityFromFieldEnvironmentAndOlderStructs) {
  concclResult_t rc = concclSuccess;
  concclConfig_t c = hostConfig();
  EXPECT_EQ(resolved(c, &rc).highPriority, 1);
  setenv("CONCCL_HIGH_PRIORITY", "0", 1);
  EXPECT_EQ(resolved(c, &rc).highPriority, 0);
  c.highPriority = 1;
  EXPECT_EQ(resolved(c, &rc).highPriority, 1);
  unsetenv("CONCCL_HIGH_PRIORITY");
  c.highPriority = 2;
  resolved(c, &rc);
  EXPECT_EQ(rc, concclInvalidArgument);
  // A struct from a header that ends at smallMessageBytes: accepted, the new fields keep their defaults (the bytes
  // beyond its size are not read), and GetConfig writes nothing past it.
  concclConfig_t older = hostConfig();
  older.size = offsetof(concclConfig_t, highPriority);
  older.highPriority = 77;
  older.smBudget = -5;
  concclComm_t comm = nullptr;
  ASSERT_EQ(concclCommInitAll(&comm, 1, nullptr, &older), concclSuccess) << lastError();
  concclConfig_t out = CONCCL_CONFIG_INITIALIZER;
  out.size = offsetof(concclConfig_t, highPriority);
  out.highPriority = 77;
  out.smBudget = 55;
  ASSERT_EQ(concclCommGetConfig(comm, &out), concclSuccess);
  EXPECT_EQ(out.highPriority, 77);
  EXPECT_EQ(out.smBudget, 55);
  concclConfig_t full = CONCCL_CONFIG_INITIALIZER;
  ASSERT_EQ(concclCommGetConfig(comm, &full), concclSuccess);
  EXPECT_EQ(full.highPriority, 1);
  EXPECT_EQ(full.smBudget, kAutoReduceMaxCtas);
  EXPECT_EQ(concclCommDestroy(comm), concclSuccess);
}

}  // namespace
}  // namespace conccl::exec
