// conccl-tp-bench's rows: derived columns, table and JSON lines (tools/tp_bench/tp_report.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tp_report.h"

namespace conccl::tp {
namespace {

TpShape shape() {
  TpShape s;
  s.model = "llama3-70b";
  s.op = TpOp::kAllGatherGemm;
  s.tp = 8;
  s.m = 4096;
  s.n = 3584;
  s.k = 8192;
  return s;
}

TpRow row(Strategy s, std::vector<double> ms) {
  TpRow r;
  r.shape = shape();
  r.strategy = s;
  r.timesMs = std::move(ms);
  return r;
}

TEST(TpReport, StrategyNamesRoundTrip) {
  ASSERT_EQ(allStrategies().size(), 5u);
  for (Strategy s : allStrategies()) EXPECT_EQ(parseStrategy(strategyName(s)), s);
  EXPECT_FALSE(parseStrategy("nccl").has_value());
}

TEST(TpReport, IdealSpeedupAndTflops) {
  std::vector<TpRow> rows = {row(Strategy::kGemm, {2.0, 2.2, 1.8}), row(Strategy::kColl, {1.0, 1.0, 3.0}),
                             row(Strategy::kSerialNccl, {3.0}), row(Strategy::kNcclSplit, {2.5}),
                             row(Strategy::kConcclFused, {2.4, 2.0})};
  finalizeShapeRows(rows);
  EXPECT_DOUBLE_EQ(rows[0].time.median, 2.0);
  EXPECT_DOUBLE_EQ(rows[0].time.min, 1.8);
  EXPECT_DOUBLE_EQ(rows[0].time.max, 2.2);
  for (const TpRow& r : rows) {
    ASSERT_TRUE(r.idealMs.has_value()) << strategyName(r.strategy);
    EXPECT_DOUBLE_EQ(*r.idealMs, 2.0);  // max(T_gemm 2.0, T_coll 1.0)
  }
  EXPECT_DOUBLE_EQ(*rows[2].vsIdeal, 1.5);
  EXPECT_DOUBLE_EQ(*rows[2].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*rows[4].vsIdeal, 1.1);
  EXPECT_DOUBLE_EQ(*rows[4].speedup, 3.0 / 2.2);
  EXPECT_NEAR(rows[0].tflops, 2.0 * 4096 * 3584 * 8192 / 2e-3 / 1e12, 1e-9);
  EXPECT_DOUBLE_EQ(rows[1].tflops, 0);  // the collective alone does no arithmetic
}

TEST(TpReport, MissingBaselinesLeaveColumnsEmpty) {
  std::vector<TpRow> rows = {row(Strategy::kGemm, {2.0}), row(Strategy::kConcclFused, {2.5})};
  TpRow failed = row(Strategy::kColl, {});
  failed.error = "ncclAllGather: unhandled cuda error";
  rows.insert(rows.begin() + 1, failed);
  finalizeShapeRows(rows);
  EXPECT_FALSE(rows[2].idealMs.has_value());
  EXPECT_FALSE(rows[2].speedup.has_value());
  EXPECT_GT(rows[2].tflops, 0);
  EXPECT_FALSE(rows[1].idealMs.has_value());
}

TEST(TpReport, TableRows) {
  std::vector<TpRow> rows = {row(Strategy::kGemm, {2.0}), row(Strategy::kColl, {1.0}),
                             row(Strategy::kSerialNccl, {3.0}), row(Strategy::kConcclFused, {2.5})};
  rows[3].checkError = 0.004;
  finalizeShapeRows(rows);
  const std::string header = formatTableHeader();
  EXPECT_NE(header.find("t/ideal"), std::string::npos);
  EXPECT_NE(header.find("speedup"), std::string::npos);
  const std::string line = formatTableRow(rows[3]);
  EXPECT_NE(line.find("llama3-70b"), std::string::npos) << line;
  EXPECT_NE(line.find("conccl-fused"), std::string::npos) << line;
  EXPECT_NE(line.find("2.500"), std::string::npos) << line;
  EXPECT_NE(line.find("1.25"), std::string::npos) << line;  // time / ideal
  EXPECT_NE(line.find("1.20"), std::string::npos) << line;  // speedup
  EXPECT_NE(line.find("4.00e-03 ok"), std::string::npos) << line;
  TpRow failed = row(Strategy::kNcclSplit, {});
  failed.error = "boom";
  EXPECT_NE(formatTableRow(failed).find("error: boom"), std::string::npos);
}

TEST(TpReport, JsonRow) {
  std::vector<TpRow> rows = {row(Strategy::kGemm, {2.0}), row(Strategy::kColl, {1.0}),
                             row(Strategy::kSerialNccl, {3.0, 3.2}), row(Strategy::kConcclFused, {2.5})};
  rows[3].checkError = std::numeric_limits<double>::quiet_NaN();
  rows[3].checkFailed = true;
  finalizeShapeRows(rows);
  const nlohmann::json j = jsonRow(rows[2], "NVIDIA H200");
  EXPECT_EQ(j["tool"], "conccl-tp-bench");
  EXPECT_EQ(j["strategy"], "serial-nccl");
  EXPECT_EQ(j["op"], "ag-gemm");
  EXPECT_EQ(j["m"], 4096);
  EXPECT_EQ(j["tp"], 8);
  EXPECT_DOUBLE_EQ(j["time_ms"]["median"].get<double>(), 3.1);
  EXPECT_EQ(j["times_ms"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["ideal_ms"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["speedup_vs_serial_nccl"].get<double>(), 1.0);
  EXPECT_FALSE(j.contains("check_passed"));
  const nlohmann::json coll = jsonRow(rows[1], "x");
  EXPECT_TRUE(coll["tflops_per_gpu"].is_null());
  const nlohmann::json fused = jsonRow(rows[3], "x");
  EXPECT_TRUE(fused["check_rel_error"].is_null());  // NaN is not JSON
  EXPECT_FALSE(fused["check_passed"].get<bool>());
  EXPECT_TRUE(nlohmann::json::parse(fused.dump()).is_object());
  TpRow failed = row(Strategy::kNcclSplit, {});
  failed.error = "boom";
  const nlohmann::json jf = jsonRow(failed, "x");
  EXPECT_EQ(jf["error"], "boom");
  EXPECT_FALSE(jf.contains("time_ms"));
  EXPECT_EQ(jsonSkipped("llama3-405b gemm-rs", "needs 200 GiB")["skipped"], "needs 200 GiB");
}

}  // namespace
}  // namespace conccl::tp
