// concclC3Plan (include/conccl/conccl.h): argument checks, the decision it reports, and the calibration file
// named by CONCCL_C3_CALIBRATION.
#include <conccl/conccl.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

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
    EXPECT_EQ(plan.gemmSmCount, 128);   // the reduction's 4 CTAs left to it
    EXPECT_EQ(plan.collectiveCtas, 4);  // conccl's default reduceCtas
  }
  {
    ScopedEnv env("CONCCL_C3_CALIBRATION", "/nonexistent/calibration.json");
    const concclC3Workload_t w = squareAllGather();
    concclC3Plan_t plan;
    EXPECT_EQ(concclC3Plan(&w, &plan), concclInvalidArgument);
  }
}

}  // namespace
