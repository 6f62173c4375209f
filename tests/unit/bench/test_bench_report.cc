// conccl-bench bandwidth arithmetic, statistics, text rows and JSON rows.
#include <gtest/gtest.h>

#include <sstream>

#include "coll.h"
#include "report.h"

namespace conccl::bench {
namespace {

TEST(BenchReport, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(kAllGatherColl.bus_factor(8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(kReduceScatterColl.bus_factor(8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(kAllToAllColl.bus_factor(8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(kAllReduceColl.bus_factor(8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(kBroadcastColl.bus_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(kReduceColl.bus_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(kSendRecvColl.bus_factor(8), 1.0);
  EXPECT_DOUBLE_EQ(kGatherColl.bus_factor(4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(kScatterColl.bus_factor(4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(kAllReduceColl.bus_factor(1), 0.0);
}

TEST(BenchReport, ByteCountsFollowNcclTests) {
  // 1000 elements over 3 ranks: the per-rank parts are equal, so sizes round down to 999.
  CollCounts ag = kAllGatherColl.counts(1000, 3);
  EXPECT_EQ(ag.send, 333u);
  EXPECT_EQ(ag.recv, 999u);
  EXPECT_EQ(ag.size, 999u);  // the per-rank output
  CollCounts rs = kReduceScatterColl.counts(1000, 3);
  EXPECT_EQ(rs.send, 999u);
  EXPECT_EQ(rs.recv, 333u);
  EXPECT_EQ(rs.size, 999u);  // the per-rank input
  CollCounts a2a = kAllToAllColl.counts(1000, 3);
  EXPECT_EQ(a2a.param, 333u);
  EXPECT_EQ(a2a.size, 999u);
  CollCounts ar = kAllReduceColl.counts(1000, 3);
  EXPECT_EQ(ar.size, 1000u);
  EXPECT_EQ(kGatherColl.counts(1000, 3).size, 999u);
  EXPECT_EQ(kScatterColl.counts(1000, 3).size, 999u);
  EXPECT_EQ(kBroadcastColl.counts(1000, 3).size, 1000u);
}

TEST(BenchReport, InPlaceOffsets) {
  CaseArgs a;
  a.nranks = 4;
  a.counts = kAllGatherColl.counts(400, 4);
  EXPECT_EQ(kAllGatherColl.send_offset_in_place(a, 3), 300u);
  EXPECT_EQ(kAllGatherColl.recv_offset_in_place(a, 3), 0u);
  a.counts = kReduceScatterColl.counts(400, 4);
  EXPECT_EQ(kReduceScatterColl.send_offset_in_place(a, 2), 0u);
  EXPECT_EQ(kReduceScatterColl.recv_offset_in_place(a, 2), 200u);
  EXPECT_FALSE(kAllToAllColl.in_place);
  EXPECT_FALSE(kSendRecvColl.in_place);
}

TEST(BenchReport, StatsAndBandwidth) {
  std::vector<double> t;
  for (int i = 1; i <= 100; ++i) t.push_back(i * 1e-6);
  const TimeStats s = ComputeStats(t);
  EXPECT_NEAR(s.mean_s, 50.5e-6, 1e-12);
  EXPECT_DOUBLE_EQ(s.p50_s, 50e-6);
  EXPECT_DOUBLE_EQ(s.p99_s, 99e-6);
  EXPECT_DOUBLE_EQ(ComputeStats({}).mean_s, 0.0);
  EXPECT_DOUBLE_EQ(ComputeStats({3.0}).p99_s, 3.0);
  EXPECT_DOUBLE_EQ(AlgBw(1'000'000'000, 0.5), 2.0);
  EXPECT_DOUBLE_EQ(AlgBw(100, 0.0), 0.0);
}

RowResult SampleRow() {
  RowResult row;
  row.backend = "conccl";
  row.coll = "all_gather";
  row.size_bytes = 1 << 20;
  row.count = 1 << 18;
  row.type = "float";
  row.redop = "none";
  row.root = -1;
  row.nranks = 8;
  row.sms = {0, false, false, "copy engines only"};
  row.out_of_place.present = true;
  row.out_of_place.time = {10e-6, 9e-6, 20e-6};
  row.out_of_place.algbw = AlgBw(row.size_bytes, 10e-6);
  row.out_of_place.busbw = row.out_of_place.algbw * 7 / 8;
  row.out_of_place.wrong = 0;
  row.out_of_place.host_s = 3.5e-6;
  row.in_place = row.out_of_place;
  row.in_place.wrong = std::nullopt;
  return row;
}

TEST(BenchReport, RowHasNcclTestsColumnsThenConcclColumns) {
  const std::string line = FormatRow(SampleRow());
  std::istringstream in(line);
  std::vector<std::string> cols;
  for (std::string w; in >> w;) cols.push_back(w);
  ASSERT_EQ(cols.size(), 21u) << line;
  EXPECT_EQ(cols[0], "1048576");
  EXPECT_EQ(cols[1], "262144");
  EXPECT_EQ(cols[2], "float");
  EXPECT_EQ(cols[3], "none");
  EXPECT_EQ(cols[4], "-1");
  EXPECT_EQ(cols[5], "10.00");
  EXPECT_EQ(cols[6], "104.86");
  EXPECT_EQ(cols[7], "91.75");
  EXPECT_EQ(cols[8], "0");
  EXPECT_EQ(cols[12], "N/A");  // in-place not checked
  EXPECT_EQ(cols[13], "conccl");
  EXPECT_EQ(cols[14], "0");
  EXPECT_EQ(cols[15], "9.00");
  EXPECT_EQ(cols[16], "20.00");
  EXPECT_EQ(cols[19], "3.50");  // host time per rank and call, out of place
  EXPECT_EQ(cols[20], "3.50");  // in place
  for (const std::string& h : ColumnHeader()) EXPECT_EQ(h[0], '#');
}

TEST(BenchReport, HostColumnsShowNaForMissingVariants) {
  RowResult row = SampleRow();
  row.in_place.present = false;
  row.out_of_place.error = "boom";
  std::istringstream in(FormatRow(row));
  std::vector<std::string> cols;
  for (std::string w; in >> w;) cols.push_back(w);
  ASSERT_EQ(cols.size(), 21u);
  EXPECT_EQ(cols[19], "N/A");
  EXPECT_EQ(cols[20], "N/A");
  // The header names the columns in the same order: the last two titles are the host times.
  const std::string titles = ColumnHeader()[1];
  EXPECT_NE(titles.find("oop"), std::string::npos);
  EXPECT_LT(titles.rfind("p99"), titles.find("oop"));
}

TEST(BenchReport, SmLabels) {
  EXPECT_EQ(SmLabel({4, false, false, ""}), "4");
  EXPECT_EQ(SmLabel({32, true, false, ""}), "<=32");
  EXPECT_EQ(SmLabel({32, true, true, ""}), "<=32!");
  EXPECT_EQ(SmLabel({}), "?");
}

TEST(BenchReport, JsonRowSchema) {
  RowResult row = SampleRow();
  const nlohmann::json j = JsonRow(row, false);
  for (const char* key : {"backend", "coll", "size", "count", "type", "redop", "root", "nranks", "gpus_shared",
                          "in_place", "time_us", "p50_us", "p99_us", "host_us", "algbw_GBps", "busbw_GBps", "wrong",
                          "sms", "threads"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["backend"], "conccl");
  EXPECT_EQ(j["in_place"], false);
  EXPECT_DOUBLE_EQ(j["time_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(j["host_us"].get<double>(), 3.5);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["wrong"], 0);
  EXPECT_EQ(j["sms"], 0);
  const nlohmann::json ip = JsonRow(row, true);
  EXPECT_TRUE(ip["wrong"].is_null());
  row.in_place.present = false;
  EXPECT_TRUE(JsonRow(row, true)["time_us"].is_null());
  EXPECT_TRUE(JsonRow(row, true)["host_us"].is_null());
  row.out_of_place.error = "boom";
  EXPECT_EQ(JsonRow(row, false)["error"], "boom");
}

}  // namespace
}  // namespace conccl::bench
