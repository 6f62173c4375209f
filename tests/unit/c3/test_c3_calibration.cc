// The measured calibration (src/c3/calibration.h): its scenarios, rows -> slowdowns, and the file.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "c3/calibration.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

TEST(C3Calibration, ScenariosCoverEveryBoundAndKindAtAboutEqualTimes) {
  const MachineProfile h200 = MachineProfile::h200();
  const CommProfile comm;
  const std::vector<Scenario> cal = calibrationScenarios(2, h200, comm);
  EXPECT_EQ(cal.size(), 10u);  // 2 bounds x 5 kinds
  std::set<std::pair<GemmBound, CollKind>> seen;
  for (const Scenario& s : cal) {
    validateScenario(s);
    EXPECT_EQ(s.coll.ranks, 2);
    seen.insert({classifyGemm(s.gemm, h200), s.coll.kind});
    // Within a factor of 2 of the GEMM's predicted time (the nearest power-of-two size).
    const double ratio = predictCollTime(s.coll, comm) / predictGemmTime(s.gemm, h200);
    EXPECT_GT(ratio, 0.5) << s.name;
    EXPECT_LT(ratio, 2.0) << s.name;
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(classifyGemm(calibrationGemm(GemmBound::kMemory), h200), GemmBound::kMemory);
  EXPECT_EQ(classifyGemm(calibrationGemm(GemmBound::kCompute), h200), GemmBound::kCompute);
  EXPECT_THROW(calibrationScenarios(0), Error);
}

ResultRow row(const Scenario& s, const char* strategy, RoundTimes t) {
  return makeRow(s, strategy, summarizeRounds({t, t, t}), MachineProfile::h200(), 0.0);
}

TEST(C3Calibration, RowsBecomeKindEntries) {
  const std::vector<Scenario> cal = calibrationScenarios(2);
  const Scenario& rs = cal[1];  // compute-bound GEMM beside a reduce-scatter
  ASSERT_EQ(rs.coll.kind, CollKind::kReduceScatter);
  // T_g = 1, baseline T_c = 1, conccl's own T_c = 1.2; beside each other the collective ends at 1.32 (1.1x
  // its own time) and the GEMM at 1.4.
  std::vector<ResultRow> rows = {row(rs, "conccl", {1.0, 1.0, 1.2, 1.4, 1.4, 1.32}),
                                 row(rs, "serial", {1.0, 1.0, -1, 2.0, 2.0, 1.0}),
                                 makeSkippedRow(rs, "nccl-ce", "skipped", MachineProfile::h200(), 0.0)};
  const Calibration c = calibrationFromRows(rows);
  EXPECT_EQ(c.kindCosts.size(), 1u);
  const StrategyCost k = c.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kReduceScatter);
  EXPECT_NEAR(k.collSlowdown, 1.1, 1e-12);
  EXPECT_NEAR(k.collTimeScale, 1.2, 1e-12);
  EXPECT_NEAR(predictOverlapTime(1.0, 1.2, k), 1.4, 1e-12);  // reproduces the measurement
  // Priors stay for what was not measured.
  EXPECT_EQ(c.costs.size(), Calibration::defaults().costs.size());
}

TEST(C3Calibration, FileRoundTripAndErrors) {
  Calibration c = Calibration::defaults();
  c.kindCosts[{Strategy::kNcclRp, GemmBound::kMemory, CollKind::kAllToAll}] = {1.4, 1.2, 1.05, 2e-6};
  c.kindCosts[{Strategy::kConccl, GemmBound::kCompute, CollKind::kAllGather}] = {1.01, 1.0, 0.9, 0.0};
  const std::string text = calibrationToJson(c, "2x NVIDIA H200", 2);
  const Calibration back = calibrationFromJson(text);
  ASSERT_EQ(back.kindCosts.size(), 2u);
  const StrategyCost& k = back.kindCosts.at({Strategy::kNcclRp, GemmBound::kMemory, CollKind::kAllToAll});
  EXPECT_DOUBLE_EQ(k.gemmSlowdown, 1.4);
  EXPECT_DOUBLE_EQ(k.collSlowdown, 1.2);
  EXPECT_DOUBLE_EQ(k.collTimeScale, 1.05);
  EXPECT_DOUBLE_EQ(k.collExtraLatency, 2e-6);
  EXPECT_EQ(back.costs.size(), Calibration::defaults().costs.size());

  EXPECT_THROW(calibrationFromJson("{"), Error);
  EXPECT_THROW(calibrationFromJson(R"({"kind": "something else", "format": 1, "entries": []})"), Error);
  EXPECT_THROW(calibrationFromJson(R"({"kind": "c3-calibration", "format": 2, "entries": []})"), Error);
  EXPECT_THROW(calibrationFromJson(R"({"kind": "c3-calibration", "format": 1, "entries": [{"strategy": "bogus",
      "gemm_bound": "compute", "collective": "all-gather", "gemm_slowdown": 1, "coll_slowdown": 1}]})"),
               Error);
  EXPECT_THROW(calibrationFromJson(R"({"kind": "c3-calibration", "format": 1, "entries": [{"strategy": "nccl",
      "gemm_bound": "compute", "collective": "all-gather", "gemm_slowdown": -1, "coll_slowdown": 1}]})"),
               Error);
  EXPECT_THROW(loadCalibration("/nonexistent/cal.json"), Error);
}

}  // namespace
}  // namespace conccl::c3
