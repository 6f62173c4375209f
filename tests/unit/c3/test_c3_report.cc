// Table and JSON rendering of results (src/c3/report.h).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "c3/report.h"

namespace conccl::c3 {
namespace {

ResultRow exampleRow() {
  const Scenario s = smallGrid().front();  // 4096^3 bf16 + 16 MiB all-gather
  return makeRow(s, "conccl", computeMetrics(1e-3, 0.8e-3, 1.2e-3, 1.05e-3, 0.9e-3), MachineProfile::h200(),
                 8.0 * (1 << 20));
}

TEST(C3Report, RowClassification) {
  const ResultRow r = exampleRow();
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.gemmBound, GemmBound::kCompute);
  ASSERT_TRUE(r.collBound.has_value());
  EXPECT_EQ(*r.collBound, CollBound::kBandwidth);  // 16 MiB >= 8 MiB half-peak
  EXPECT_EQ(r.metrics.overlapClass, OverlapClass::kGLong);
  const ResultRow unknown = makeRow(smallGrid().front(), "nccl", r.metrics, MachineProfile::h200(), 0.0);
  EXPECT_FALSE(unknown.collBound.has_value());
}

TEST(C3Report, TableHasTheColumnsAndValues) {
  ResultRow skipped =
      makeSkippedRow(smallGrid()[2], "nccl-ce", "skipped: no CE reduce-scatter in NCCL", MachineProfile::h200(), 0.0);
  const std::string t = formatTable({exampleRow(), skipped});
  for (const char* col : {"scenario", "strategy", "T_g(ms)", "T_c(ms)", "own(ms)", "T_c3(ms)", "rng", "R", "R-range",
                          "g-slow", "c-slow", "S", "S_ideal", "F", "F-range", "class", "gemm", "coll"}) {
    EXPECT_NE(t.find(col), std::string::npos) << col;
  }
  // S = 1.8 / 1.2 = 1.5, S_ideal = 1.8, F = 0.5 / 0.8 = 62.5% -> "62%" or "63%".
  EXPECT_NE(t.find("1.000"), std::string::npos);
  EXPECT_NE(t.find("1.50"), std::string::npos);
  EXPECT_NE(t.find("1.80"), std::string::npos);
  EXPECT_TRUE(t.find("62%") != std::string::npos || t.find("63%") != std::string::npos);
  EXPECT_NE(t.find("1.05x"), std::string::npos);
  EXPECT_NE(t.find("G-long"), std::string::npos);
  EXPECT_NE(t.find("bandwidth"), std::string::npos);
  EXPECT_NE(t.find("skipped: no CE reduce-scatter"), std::string::npos);
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 3);
  // Undefined values print as "-".
  const ResultRow nan = makeRow(smallGrid().front(), "x", computeMetrics(1e-3, 0.0, 1e-3), MachineProfile::h200(), 0);
  EXPECT_NE(formatTableRow(nan).find(" - "), std::string::npos);
}

TEST(C3Report, JsonHasEveryFieldAndNullsForUndefined) {
  RunInfo info;
  info.device = "8x NVIDIA H200";
  info.devices = {0, 1, 2, 3, 4, 5, 6, 7};
  info.ranks = 8;
  info.iters = 20;
  info.caveats = {"a caveat"};
  ResultRow skipped = makeSkippedRow(smallGrid()[2], "nccl-ce", "skipped: x", MachineProfile::h200(), 0.0);
  SmBudgetRow sm{"small-ag-16m", {4096, 4096, 4096, Dtype::kBf16}, "sm-target", 128, 1.2e-3, 1.15, "ok"};
  const nlohmann::json doc = nlohmann::json::parse(resultsToJson(info, {exampleRow(), skipped}, {sm}));
  EXPECT_EQ(doc["tool"], "conccl-c3");
  EXPECT_EQ(doc["ranks"], 8);
  EXPECT_EQ(doc["caveats"][0], "a caveat");
  ASSERT_EQ(doc["results"].size(), 2u);
  const nlohmann::json& r = doc["results"][0];
  EXPECT_EQ(r["scenario"], "small-ag-16m");
  EXPECT_EQ(r["strategy"], "conccl");
  EXPECT_EQ(r["status"], "ok");
  EXPECT_DOUBLE_EQ(r["T_g_ms"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(r["T_c3_ms"].get<double>(), 1.2);
  EXPECT_NEAR(r["S"].get<double>(), 1.5, 1e-12);
  EXPECT_NEAR(r["S_ideal"].get<double>(), 1.8, 1e-12);
  EXPECT_NEAR(r["F"].get<double>(), 0.625, 1e-12);
  EXPECT_EQ(r["class"], "G-long");
  EXPECT_EQ(r["gemm_bound"], "compute");
  EXPECT_EQ(r["coll_bound"], "bandwidth");
  EXPECT_EQ(r["collective"]["kind"], "all-gather");
  EXPECT_EQ(r["gemm"]["m"], 4096);
  EXPECT_TRUE(r["predicted_T_c3_ms"].is_null());
  const nlohmann::json& s = doc["results"][1];
  EXPECT_EQ(s["status"], "skipped: x");
  EXPECT_TRUE(s["F"].is_null());
  EXPECT_TRUE(s["T_g_ms"].is_null());
  EXPECT_TRUE(s["class"].is_null());
  EXPECT_EQ(doc["sm_budget"][0]["sms"], 128);
  EXPECT_NEAR(doc["sm_budget"][0]["time_ms"].get<double>(), 1.2, 1e-12);
}

TEST(C3Report, RoundsGiveMedianAndRangeInTableAndJson) {
  const Scenario s = smallGrid().front();
  // Three rounds of conccl: T_g 1.0/1.1/0.9 ms, NCCL T_c 0.8, conccl's own 0.7, T_c3 1.2/1.3/1.1 ms.
  std::vector<RoundTimes> rounds = {{1.0e-3, 0.8e-3, 0.7e-3, 1.2e-3, 1.1e-3, 0.8e-3},
                                    {1.1e-3, 0.8e-3, 0.7e-3, 1.3e-3, 1.2e-3, 0.8e-3},
                                    {0.9e-3, 0.8e-3, 0.7e-3, 1.1e-3, 1.0e-3, 0.8e-3}};
  ResultRow r = makeRow(s, "conccl", summarizeRounds(rounds), MachineProfile::h200(), 0.0);
  r.baseline = "nccl";
  EXPECT_DOUBLE_EQ(r.metrics.tC3, 1.2e-3);
  EXPECT_DOUBLE_EQ(r.low.tC3, 1.1e-3);
  EXPECT_DOUBLE_EQ(r.high.tC3, 1.3e-3);
  const std::string line = formatTableRow(r);
  EXPECT_NE(line.find("0.700"), std::string::npos);  // own T_c beside the baseline's 0.800
  EXPECT_NE(line.find("0.800"), std::string::npos);
  EXPECT_NE(line.find("17%"), std::string::npos);  // T_c3 range 0.2 / 1.2
  EXPECT_NE(line.find("1.18-1.22"), std::string::npos) << line;  // R = T_c3 / T_g per round
  const nlohmann::json doc = nlohmann::json::parse(resultsToJson(RunInfo{}, {r}));
  const nlohmann::json& j = doc["results"][0];
  EXPECT_EQ(j["baseline"], "nccl");
  EXPECT_NEAR(j["T_c_own_ms"].get<double>(), 0.7, 1e-12);
  EXPECT_NEAR(j["T_c_ms"].get<double>(), 0.8, 1e-12);
  EXPECT_NEAR(j["R"].get<double>(), 1.2 / 1.0, 1e-9);
  EXPECT_NEAR(j["min"]["T_c3_ms"].get<double>(), 1.1, 1e-12);
  EXPECT_NEAR(j["max"]["T_g_ms"].get<double>(), 1.1, 1e-12);
  ASSERT_EQ(j["rounds"]["T_c3_ms"].size(), 3u);
  EXPECT_NEAR(j["rounds"]["T_g_ms"][2].get<double>(), 0.9, 1e-12);
  EXPECT_TRUE(doc.contains("rounds"));
  EXPECT_TRUE(doc.contains("baseline"));
  // No SM-count target in these rounds: no budgeted GEMM time.
  EXPECT_TRUE(j["T_g_budget_ms"].is_null());
  EXPECT_TRUE(j["gemm_budget_cost"].is_null());
  ASSERT_EQ(j["rounds"]["T_g_budget_ms"].size(), 3u);
  EXPECT_TRUE(j["rounds"]["T_g_budget_ms"][0].is_null());
}

TEST(C3Report, AutoRowAndSummary) {
  const Scenario s = smallGrid().front();
  // nccl: R = 1.5; conccl: R = 1.1; auto picked conccl (the fastest): within 5% of the best fixed T_c3.
  ResultRow nccl = makeRow(s, "nccl", computeMetrics(1e-3, 1e-3, 1.5e-3), MachineProfile::h200(), 0.0);
  ResultRow conccl = makeRow(s, "conccl", computeMetrics(RoundTimes{1e-3, 1e-3, 0.9e-3, 1.1e-3, -1, -1}),
                             MachineProfile::h200(), 0.0);
  ResultRow pick = conccl;
  pick.strategy = "auto";
  pick.choice = "conccl";
  pick.bestFixed = "conccl";
  pick.bestFixedTC3 = 1.1e-3;
  EXPECT_NE(formatTableRow(pick).find("auto:conccl"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(resultsToJson(RunInfo{}, {pick}))["results"][0];
  EXPECT_EQ(j["choice"], "conccl");
  EXPECT_EQ(j["best_fixed"], "conccl");
  EXPECT_NEAR(j["best_fixed_T_c3_ms"].get<double>(), 1.1, 1e-12);
  const std::string sum = formatSummary({nccl, conccl, pick});
  EXPECT_NE(sum.find("nccl"), std::string::npos);
  EXPECT_NE(sum.find("geomean R 1.500"), std::string::npos) << sum;
  EXPECT_NE(sum.find("geomean R 1.100"), std::string::npos) << sum;
  EXPECT_NE(sum.find("within 5% of the best fixed T_c3 in 1/1"), std::string::npos) << sum;
  EXPECT_EQ(std::count(sum.begin(), sum.end(), '\n'), 3);
}

TEST(C3Report, Bytes) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(1 << 20), "1 MiB");
  EXPECT_EQ(formatBytes(256.0 * (1 << 20)), "256 MiB");
  EXPECT_EQ(formatBytes(1.5 * (1 << 30)), "1.50 GiB");
}

TEST(C3Report, GridListing) {
  const std::string g = formatGrid(builtinGrid(), MachineProfile::h200());
  EXPECT_NE(g.find("llama405b-tp8-rs-t8192"), std::string::npos);
  EXPECT_NE(g.find("memory"), std::string::npos);
  EXPECT_NE(g.find("latency"), std::string::npos);
  EXPECT_NE(g.find("predicted by the cost model"), std::string::npos);
}

}  // namespace
}  // namespace conccl::c3
