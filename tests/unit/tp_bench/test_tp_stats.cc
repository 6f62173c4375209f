// conccl-tp-bench's statistics and check arithmetic (tools/tp_bench/tp_stats.h).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tp_stats.h"

namespace conccl::tp {
namespace {

TEST(TpStats, SummaryOfOddAndEvenCounts) {
  const Summary odd = summarize({5, 1, 3});
  EXPECT_DOUBLE_EQ(odd.median, 3);
  EXPECT_DOUBLE_EQ(odd.min, 1);
  EXPECT_DOUBLE_EQ(odd.max, 5);
  const Summary even = summarize({4, 1, 3, 2});
  EXPECT_DOUBLE_EQ(even.median, 2.5);
  EXPECT_DOUBLE_EQ(even.min, 1);
  EXPECT_DOUBLE_EQ(even.max, 4);
  const Summary one = summarize({7});
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.min, 7);
  EXPECT_DOUBLE_EQ(one.max, 7);
  const Summary none = summarize({});
  EXPECT_DOUBLE_EQ(none.median, 0);
  EXPECT_DOUBLE_EQ(none.max, 0);
}

TEST(TpStats, MedianIgnoresOneOutlier) { EXPECT_DOUBLE_EQ(summarize({1.0, 1.1, 0.9, 1.0, 50.0}).median, 1.0); }

TEST(TpStats, RelativeError) {
  EXPECT_DOUBLE_EQ(relativeError(0.5, 100), 0.005);
  EXPECT_DOUBLE_EQ(relativeError(0, 0), 0);
  EXPECT_TRUE(std::isinf(relativeError(1, 0)));
  EXPECT_TRUE(std::isnan(relativeError(std::numeric_limits<double>::quiet_NaN(), 1)));
}

TEST(TpStats, ToleranceRejectsNanAndInfinity) {
  EXPECT_TRUE(withinTolerance(0.0, kDefaultBf16Tolerance));
  EXPECT_TRUE(withinTolerance(kDefaultBf16Tolerance, kDefaultBf16Tolerance));
  EXPECT_FALSE(withinTolerance(0.02, kDefaultBf16Tolerance));
  EXPECT_FALSE(withinTolerance(std::numeric_limits<double>::quiet_NaN(), kDefaultBf16Tolerance));
  EXPECT_FALSE(withinTolerance(std::numeric_limits<double>::infinity(), kDefaultBf16Tolerance));
}

TEST(TpStats, DefaultToleranceCoversAFewBf16Roundings) {
  // bf16 keeps 8 significant bits: one rounding is at most 2^-9 relative. A few must pass, a wrong value must not.
  EXPECT_TRUE(withinTolerance(4 * std::ldexp(1.0, -9), kDefaultBf16Tolerance));
  EXPECT_FALSE(withinTolerance(std::ldexp(1.0, -4), kDefaultBf16Tolerance));
}

}  // namespace
}  // namespace conccl::tp
