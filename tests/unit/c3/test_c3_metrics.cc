// C3 metrics and taxonomy (src/c3/metrics.h) against the definitions and example numbers of FACTS.md.
#include <gtest/gtest.h>

#include <cmath>

#include "c3/metrics.h"

namespace conccl::c3 {
namespace {

TEST(C3Metrics, DefinitionsOnAHandExample) {
  // T_g = 3, T_c = 2, T_c3 = 4: S = 5/4, S_ideal = 5/3, F = 0.25 / (2/3) = 0.375.
  const Metrics m = computeMetrics(3.0, 2.0, 4.0, 3.3, 2.5);
  EXPECT_DOUBLE_EQ(m.speedup, 1.25);
  EXPECT_DOUBLE_EQ(m.idealSpeedup, 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.fractionOfIdeal, 0.375);
  EXPECT_DOUBLE_EQ(m.gemmSlowdown, 1.1);
  EXPECT_DOUBLE_EQ(m.collSlowdown, 1.25);
  EXPECT_EQ(m.overlapClass, OverlapClass::kGLong);
}

TEST(C3Metrics, PerfectOverlapIsOneAndSerialIsZero) {
  EXPECT_DOUBLE_EQ(fractionOfIdeal(3.0, 2.0, 3.0), 1.0);  // T_c3 = max
  EXPECT_DOUBLE_EQ(fractionOfIdeal(3.0, 2.0, 5.0), 0.0);  // T_c3 = sum
  EXPECT_LT(fractionOfIdeal(3.0, 2.0, 6.0), 0.0);         // worse than serial
  EXPECT_DOUBLE_EQ(speedup(3.0, 2.0, 5.0), 1.0);
}

TEST(C3Metrics, FactsExampleNumbers) {
  // 8192^3 fp16 matmul + 64 MiB all-gather on 8xH100: serial 2.96 ms, SM NCCL 2.02 ms, NCCL CE 1.77 ms.
  // Whatever the split of the 2.96 ms, S = serial / overlapped.
  EXPECT_NEAR(speedup(1.9e-3, 1.06e-3, 2.02e-3), 1.465, 1e-3);
  EXPECT_NEAR(speedup(1.9e-3, 1.06e-3, 1.77e-3), 1.672, 1e-3);
  // Probe 2: a GEMM of 11.2 ms beside copy-engine traffic finishing in its shadow reaches 100% of ideal.
  EXPECT_NEAR(fractionOfIdeal(11.2e-3, 4e-3, 11.2e-3), 1.0, 1e-12);
  // ConCCL's averages on MI300X (21% / 42% / 72% of ideal) as T_c3 for a GC-equal pair T_g = T_c = 1.
  for (double f : {0.21, 0.42, 0.72}) EXPECT_NEAR(fractionOfIdeal(1.0, 1.0, 2.0 / (1.0 + f)), f, 1e-12);
}

TEST(C3Metrics, DegenerateInputsAreNaN) {
  EXPECT_TRUE(std::isnan(speedup(1.0, 1.0, 0.0)));
  EXPECT_TRUE(std::isnan(speedup(-1.0, 1.0, 1.0)));
  EXPECT_TRUE(std::isnan(idealSpeedup(0.0, 0.0)));
  EXPECT_DOUBLE_EQ(idealSpeedup(2.0, 0.0), 1.0);
  EXPECT_TRUE(std::isnan(fractionOfIdeal(2.0, 0.0, 2.0)));  // S_ideal = 1: nothing to overlap
  EXPECT_TRUE(std::isnan(fractionOfIdeal(NAN, 1.0, 1.0)));
  EXPECT_TRUE(std::isnan(fractionOfIdeal(INFINITY, 1.0, 1.0)));
  EXPECT_TRUE(std::isnan(slowdown(0.0, 1.0)));
  const Metrics m = computeMetrics(1.0, 1.0, 1.5);  // overlap times not measured
  EXPECT_TRUE(std::isnan(m.gemmSlowdown));
  EXPECT_TRUE(std::isnan(m.collSlowdown));
  EXPECT_TRUE(std::isnan(m.tGOverlap));
  EXPECT_DOUBLE_EQ(m.fractionOfIdeal, (4.0 / 3.0 - 1.0) / 1.0);
}

// FACTS.md "One baseline for every strategy": S, S_ideal, F and R use the baseline's (NCCL's) T_c; the
// strategy's own collective time is only reported. Under the old definition (F from the strategy's own
// T_c) a slower collective raised F: T_g = 1, own T_c = 1.5, T_c3 = 1.5 gave F = 100%.
TEST(C3Metrics, OneBaselineForEveryStrategy) {
  const Metrics slow = computeMetrics(RoundTimes{1.0, 1.0, 1.5, 1.5, -1, -1});
  EXPECT_DOUBLE_EQ(slow.tCOwn, 1.5);
  EXPECT_DOUBLE_EQ(slow.speedup, 2.0 / 1.5);
  EXPECT_DOUBLE_EQ(slow.idealSpeedup, 2.0);
  EXPECT_NEAR(slow.fractionOfIdeal, 1.0 / 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(slow.overlapRatio, 1.5);
  // The same T_c3 with a faster own collective gives the same F and R: only T_c3 counts.
  const Metrics fast = computeMetrics(RoundTimes{1.0, 1.0, 0.5, 1.5, -1, -1});
  EXPECT_DOUBLE_EQ(fast.fractionOfIdeal, slow.fractionOfIdeal);
  EXPECT_DOUBLE_EQ(fast.overlapRatio, slow.overlapRatio);
  // A slower strategy collective never raises F: longer own T_c at a longer T_c3 is a lower F.
  const Metrics slower = computeMetrics(RoundTimes{1.0, 1.0, 3.0, 1.8, -1, -1});
  EXPECT_LT(slower.fractionOfIdeal, slow.fractionOfIdeal);
  // The class comes from the baseline too.
  EXPECT_EQ(computeMetrics(RoundTimes{1.0, 1.0, 2.0, 2.0, -1, -1}).overlapClass, OverlapClass::kGCEqual);
  // The collective slowdown is the strategy's own collective in overlap over its own time alone.
  EXPECT_DOUBLE_EQ(computeMetrics(RoundTimes{1.0, 1.0, 2.0, 2.5, 1.2, 2.5}).collSlowdown, 1.25);
  // No own time: the strategy runs the baseline collective.
  EXPECT_DOUBLE_EQ(computeMetrics(RoundTimes{1.0, 0.8, -1, 1.2, -1, -1}).tCOwn, 0.8);
}

TEST(C3Metrics, SerialMeasuredPerfectlyIsZeroAndRIsItsSum) {
  // serial = NCCL's collective, then the GEMM: T_c3 = T_g + T_c of the baseline.
  const Metrics m = computeMetrics(RoundTimes{3.0, 2.0, 2.0, 5.0, -1, -1});
  EXPECT_DOUBLE_EQ(m.fractionOfIdeal, 0.0);
  EXPECT_DOUBLE_EQ(m.speedup, 1.0);
  EXPECT_DOUBLE_EQ(m.overlapRatio, 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(overlapRatio(3.0, 2.0, 3.0), 1.0);  // perfect overlap at the baseline's speed
  EXPECT_LT(overlapRatio(3.0, 4.0, 3.5), 1.0);         // only below 1 when the strategy's collective is faster
  EXPECT_TRUE(std::isnan(overlapRatio(0.0, 0.0, 1.0)));
}

TEST(C3Rounds, MedianAndRangeFieldByField) {
  EXPECT_DOUBLE_EQ(medianOf({3.0, 1.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(medianOf({4.0, 1.0, 2.0, 3.0}), 2.5);
  EXPECT_DOUBLE_EQ(medianOf({NAN, 1.0, INFINITY}), 1.0);
  EXPECT_TRUE(std::isnan(medianOf({})));
  // Five serial rounds with drifting clocks: each round's T_c3 is that round's T_g + T_c, so every round's
  // F is 0, although T_g alone moves by +-20% (FACTS.md: measured once, serial's F read -25%..+35%).
  std::vector<RoundTimes> rounds;
  for (double drift : {1.0, 1.2, 0.8, 1.1, 0.9}) rounds.push_back({3.0 * drift, 2.0, 2.0, 3.0 * drift + 2.0, -1, -1});
  const RoundSummary s = summarizeRounds(rounds);
  EXPECT_EQ(s.rounds.size(), 5u);
  EXPECT_NEAR(s.median.fractionOfIdeal, 0.0, 1e-12);
  EXPECT_NEAR(s.min.fractionOfIdeal, 0.0, 1e-12);
  EXPECT_NEAR(s.max.fractionOfIdeal, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.median.tG, 3.0);
  EXPECT_DOUBLE_EQ(s.min.tG, 2.4);
  EXPECT_DOUBLE_EQ(s.max.tG, 3.6);
  EXPECT_DOUBLE_EQ(s.median.tC3, 5.0);
  EXPECT_EQ(s.median.overlapClass, OverlapClass::kGLong);
  // Taking T_g from another round than T_c3 (what a one-off T_g did) would not read 0.
  EXPECT_GT(std::fabs(fractionOfIdeal(s.min.tG, 2.0, s.max.tC3)), 0.25);
  // A round with a missing time is left out of that field only.
  rounds.push_back({NAN, 2.0, 2.0, 5.0, -1, -1});
  EXPECT_DOUBLE_EQ(summarizeRounds(rounds).median.tC3, 5.0);
  EXPECT_DOUBLE_EQ(summarizeRounds(rounds).median.tG, 3.0);
}

TEST(C3Rounds, CostOfLeavingSmsFreeIsTheBudgetedGemmOverTheFullOne) {
  // RP rounds also time the GEMM alone with its SM-count target: 1.15 ms against 1.0 ms on all SMs (FACTS.md item 7:
  // taking 4 SMs from a square GEMM cost ~15%).
  std::vector<RoundTimes> rounds;
  for (double budgeted : {1.15, 1.10, 1.20}) {
    RoundTimes t{1.0, 0.8, 0.7, 1.3, -1, -1};
    t.tGBudget = budgeted;
    rounds.push_back(t);
  }
  const RoundSummary s = summarizeRounds(rounds);
  EXPECT_DOUBLE_EQ(s.median.tGBudget, 1.15);
  EXPECT_NEAR(s.median.budgetCost, 1.15, 1e-12);
  EXPECT_NEAR(s.min.budgetCost, 1.10, 1e-12);
  EXPECT_NEAR(s.max.budgetCost, 1.20, 1e-12);
  // Strategies that give the GEMM every SM have no such time.
  const Metrics none = computeMetrics(RoundTimes{1.0, 0.8, 0.7, 1.3, -1, -1});
  EXPECT_TRUE(std::isnan(none.tGBudget));
  EXPECT_TRUE(std::isnan(none.budgetCost));
}

TEST(C3Taxonomy, Boundaries) {
  EXPECT_EQ(classify(1.0, 1.0), OverlapClass::kGCEqual);
  EXPECT_EQ(classify(1.15, 1.0), OverlapClass::kGCEqual);  // strict: exactly 1.15x is not long
  EXPECT_EQ(classify(1.1501, 1.0), OverlapClass::kGLong);
  EXPECT_EQ(classify(1.0, 1.15), OverlapClass::kGCEqual);
  EXPECT_EQ(classify(1.0, 1.1501), OverlapClass::kCLong);
  EXPECT_EQ(classify(0.0, 0.0), OverlapClass::kGCEqual);
  EXPECT_EQ(classify(1e-6, 0.0), OverlapClass::kGLong);
  EXPECT_EQ(classify(0.0, 1e-6), OverlapClass::kCLong);
  // Scale-invariant.
  EXPECT_EQ(classify(1.16e-3, 1e-3), OverlapClass::kGLong);
  EXPECT_EQ(classify(1.14e-3, 1e-3), OverlapClass::kGCEqual);
}

TEST(C3Taxonomy, NamesRoundTrip) {
  for (OverlapClass c : {OverlapClass::kGLong, OverlapClass::kCLong, OverlapClass::kGCEqual}) {
    EXPECT_EQ(parseOverlapClass(overlapClassName(c)), c);
  }
  EXPECT_STREQ(overlapClassName(OverlapClass::kGCEqual), "GC-equal");
  EXPECT_FALSE(parseOverlapClass("g-long").has_value());
}

}  // namespace
}  // namespace conccl::c3
