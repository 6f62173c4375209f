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
