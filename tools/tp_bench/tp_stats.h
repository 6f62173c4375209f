// Statistics of conccl-tp-bench's timings and of its result check. Pure C++: unit-tested on the CPU
// (tests/unit/tp_bench/test_tp_stats.cc).
#pragma once

#include <vector>

namespace conccl::tp {

// Median (the mean of the two middle values for an even count), minimum and maximum; all zero when empty.
struct Summary {
  double median = 0;
  double min = 0;
  double max = 0;
};
Summary summarize(std::vector<double> values);

// The relative error that --check reports: max |got - ref| over the tensor divided by max |ref| (the error
// normalised by the tensor's largest magnitude, so that outputs near zero do not inflate it). 0 when both are
// 0; +inf when only the reference is 0; NaN propagates (a NaN in the output must fail the check).
double relativeError(double maxAbsDiff, double maxAbsRef);

// True when `error` is a number <= tolerance (NaN fails).
bool withinTolerance(double error, double tolerance);

// The default tolerance for bf16 outputs with fp32 accumulation: bf16 rounds to 2^-9 relative; the reference and
// the measured result round differently (per-shard GEMMs, partial sums rounded to bf16 before a reduction in
// another order), a few roundings at most, so 1e-2 (about 5 half-ulps) of the largest magnitude.
inline constexpr double kDefaultBf16Tolerance = 1e-2;

}  // namespace conccl::tp
