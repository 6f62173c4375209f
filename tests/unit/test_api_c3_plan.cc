// concclC3Plan (include/conccl/conccl.h): argument checks, the decision it reports, the calibration file
// named by CONCCL_C3_CALIBRATION, and that conccl's CTAs in the plan are what the library's decision code
// (exec::callResources, behind concclCallResources) says the call occupies.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/tuned_defaults.h"
#include "exec/call_path.h"
#include "sched/schedule.h"

namespace {

namespace sched = conccl::sched;

concclC3Workload_t squareAllGather() {
  concclC3Workload_t w{};
  w.m = w.n = w.k = 8192;
  w.gemmType = concclBfloat16;
  w.collective = concclC3AllGather;
  w.bytes = size_t(256) << 20;
  w.nranks = 8;
  w.allowNccl = 1;
  return w;
}

// A calibration (conccl-c3 --calibrate format) in which only `winner` overlaps without slowing anything down.
std::string writeCalibration(const char* winner) {
  const auto path = std::filesystem::temp_directory_path() / (std::string("conccl_c3_plan_") + winner + ".json");
  std::string entries;
  for (const char* s : {"nccl", "nccl+SP", "nccl+RP", "nccl-ce", "conccl", "conccl+RP"}) {
    const bool good = std::string(s) == winner;
    for (const char* bound : {"compute", "memory"}) {
      for (const char* kind : {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "broadcast"}) {
        entries += std::string(entries.empty() ? "" : ",") + R"({"strategy": ")" + s + R"(", "gemm_bound": ")" +
                   bound + R"(", "collective": ")" + kind + R"(", "gemm_slowdown": )" + (good ? "1.0" : "1.9") +
                   R"(, "coll_slowdown": )" + (good ? "1.0" : "1.9") + "}";
      }
    }
  }
  std::ofstream(path) << R"({"tool": "conccl-c3", "kind": "c3-calibration", "format": 1, "entries": [)" << entries
                      << "]}";
  return path.string();
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) { setenv(name, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(ApiC3Plan, RejectsBadArguments) {
  concclC3Plan_t plan;
  concclC3Workload_t w = squareAllGather();
  EXPECT_EQ(concclC3Plan(nullptr, &plan), concclInvalidArgument);
  EXPECT_EQ(concclC3Plan(&w, nullptr), concclInvalidArgument);
  w.k = 0;
  EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  EXPECT_NE(std::string(concclGetLastError(nullptr)).find("concclC3Plan"), std::string::npos);
  w = squareAllGather();
  w.gemmType = concclInt32;
  EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  w = squareAllGather();
  w.nranks = 0;
  EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  w = squareAllGather();
  w.collective = concclC3Collective_t(42);
  EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  w = squareAllGather();
  w.bytes = 0;
  EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
}

TEST(ApiC3Plan, PriorsPickCopyEnginesForALargeAllGatherBesideASquareGemm) {
  unsetenv("CONCCL_C3_CALIBRATION");
  const concclC3Workload_t w = squareAllGather();
  concclC3Plan_t plan;
  ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess);
  EXPECT_EQ(plan.strategy, concclC3Conccl);
  EXPECT_EQ(plan.useConccl, 1);
  EXPECT_EQ(plan.gemmSmCount, 0);
  EXPECT_EQ(plan.collectiveCtas, 0);  // a copy: no SMs
  EXPECT_GT(plan.predictedUs, 0);
  EXPECT_LT(plan.predictedUs, plan.predictedSerialUs);
}

TEST(ApiC3Plan, CalibrationFileDecides) {
  {
    ScopedEnv env("CONCCL_C3_CALIBRATION", writeCalibration("nccl+RP"));
    const concclC3Workload_t w = squareAllGather();
    concclC3Plan_t plan;
    ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess);
    EXPECT_EQ(plan.strategy, concclC3NcclRp);
    EXPECT_EQ(plan.useConccl, 0);
    EXPECT_EQ(plan.collectiveCtas, 8);
    EXPECT_EQ(plan.gemmSmCount, 132 - 8);
    // Without NCCL the NCCL strategies are not candidates.
    concclC3Workload_t noNccl = w;
    noNccl.allowNccl = 0;
    noNccl.smCount = 100;
    ASSERT_EQ(concclC3Plan(&noNccl, &plan), concclSuccess);
    EXPECT_EQ(plan.useConccl, 1);
    EXPECT_TRUE(plan.strategy == concclC3Serial || plan.strategy == concclC3Conccl ||
                plan.strategy == concclC3ConcclRp);
  }
  {
    ScopedEnv env("CONCCL_C3_CALIBRATION", writeCalibration("conccl+RP"));
    concclC3Workload_t w = squareAllGather();
    w.collective = concclC3ReduceScatter;
    concclC3Plan_t plan;
    ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess);
    EXPECT_EQ(plan.strategy, concclC3ConcclRp);
    EXPECT_EQ(plan.collectiveCtas, 8);  // 32 MiB per reducer: the auto rule's most, config.smBudget's default
    EXPECT_EQ(plan.gemmSmCount, 132 - 8);
  }
  {
    ScopedEnv env("CONCCL_C3_CALIBRATION", "/nonexistent/calibration.json");
    const concclC3Workload_t w = squareAllGather();
    concclC3Plan_t plan;
    EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  }
}

// The most SMs any rank of `call` occupies, straight from the executor's decision code with the limits and build
// options a CUDA communicator over nranks GPUs with full peer access takes from `config` (CudaExecutor).
int decisionCodeSms(const sched::CollectiveCall& call, const conccl::Config& config) {
  conccl::exec::PathLimits limits;
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
  options.ownBlockViaPeer = config.engine == concclEngineCopy && call.nranks >= 2;
  const sched::Schedule schedule = sched::buildSchedule(call, options);
  std::vector<int> devices(static_cast<size_t>(call.nranks));
  std::iota(devices.begin(), devices.end(), 0);
  int most = 0;
  for (int r = 0; r < call.nranks; ++r) {
    most = std::max(most, conccl::exec::callResources(schedule, r, limits, devices).sms);
  }
  return most;
}

struct C3Case {
  concclC3Collective_t c3;
  sched::CollKind kind;
  bool perRankCount;  // the call's count is bytes / nranks (all-gather, reduce-scatter, all-to-all)
};

// conccl+RP wins under this calibration; for every C3 collective, size and rank count the plan's CTAs must be the
// decision code's, and the GEMM must be left the rest of the SMs (all of them when the call occupies none).
void expectPlanFollowsDecisionCode(const char* what) {
  const conccl::Config config = conccl::resolveConfig(nullptr, /*cudaAvailable=*/true);
  const std::vector<C3Case> cases = {{concclC3AllGather, sched::CollKind::kAllGather, true},
                                     {concclC3ReduceScatter, sched::CollKind::kReduceScatter, true},
                                     {concclC3AllReduce, sched::CollKind::kAllReduce, false},
                                     {concclC3AllToAll, sched::CollKind::kAllToAll, true},
                                     {concclC3Broadcast, sched::CollKind::kBroadcast, false}};
  bool sawReduceKernel = false, sawSmallKernel = false, sawNoSm = false;
  for (const C3Case& c : cases) {
    for (int nranks : {2, 4, 8}) {
      conccl::Config tuned = config;
      conccl::applyTunedDefaults(tuned, nranks);
      for (size_t bytes : {size_t{4} << 10, size_t{256} << 10, size_t{1} << 20, size_t{3} << 20, size_t{64} << 20}) {
        concclC3Workload_t w = squareAllGather();
        w.collective = c.c3;
        w.bytes = bytes;
        w.nranks = nranks;
        w.smCount = 132;
        concclC3Plan_t plan;
        ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess) << concclGetLastError(nullptr);
        ASSERT_EQ(plan.strategy, concclC3ConcclRp);
        sched::CollectiveCall call;
        call.kind = c.kind;
        call.nranks = nranks;
        call.dtype = concclBfloat16;
        call.count = bytes / 2 / (c.perRankCount ? size_t(nranks) : 1);
        call.inPlace.assign(size_t(nranks), false);
        const int want = decisionCodeSms(call, tuned);
        const std::string at = std::string(what) + ": collective " + std::to_string(int(c.c3)) + ", " +
                               std::to_string(nranks) + " ranks, " + std::to_string(bytes) + " B";
        EXPECT_EQ(plan.collectiveCtas, want) << at;
        EXPECT_EQ(plan.gemmSmCount, want > 0 ? std::max(8, 132 - want) : 0) << at;
        sawReduceKernel = sawReduceKernel || want > 1;
        sawSmallKernel = sawSmallKernel || want == 1;
        sawNoSm = sawNoSm || want == 0;
      }
    }
  }
  // The sweep covers the three paths, so a planner that hard-codes any one figure fails it.
  EXPECT_TRUE(sawReduceKernel && sawSmallKernel && sawNoSm) << what;
}

TEST(ApiC3Plan, ConcclCtasAreTheDecisionCodesForEveryCollectiveAndSize) {
  ScopedEnv env("CONCCL_C3_CALIBRATION", writeCalibration("conccl+RP"));
  expectPlanFollowsDecisionCode("defaults");
}

// The limits a communicator would take from the environment are the planner's too.
TEST(ApiC3Plan, ConcclCtasFollowTheEnvironmentLikeACommunicator) {
  ScopedEnv env("CONCCL_C3_CALIBRATION", writeCalibration("conccl+RP"));
  {
    ScopedEnv ctas("CONCCL_REDUCE_CTAS", "3");
    expectPlanFollowsDecisionCode("CONCCL_REDUCE_CTAS=3");
    concclC3Workload_t w = squareAllGather();
    w.collective = concclC3ReduceScatter;
    concclC3Plan_t plan;
    ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess);
    EXPECT_EQ(plan.collectiveCtas, 3);
    EXPECT_EQ(plan.gemmSmCount, 129);
  }
  {
    ScopedEnv budget("CONCCL_SM_BUDGET", "5");
    expectPlanFollowsDecisionCode("CONCCL_SM_BUDGET=5");
  }
  {
    ScopedEnv small("CONCCL_SMALL_MESSAGE_BYTES", "0");  // no small kernel: small reductions get reduction CTAs
    concclC3Workload_t w = squareAllGather();
    w.collective = concclC3AllReduce;
    w.bytes = 4096;
    concclC3Plan_t plan;
    ASSERT_EQ(concclC3Plan(&w, &plan), concclSuccess);
    EXPECT_EQ(plan.collectiveCtas, 1);  // 4 KiB of input: one CTA by the auto rule
  }
  {
    ScopedEnv bad("CONCCL_REDUCE_CTAS", "banana");
    const concclC3Workload_t w = squareAllGather();
    concclC3Plan_t plan;
    EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  }
}

}  // namespace
