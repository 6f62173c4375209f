#include "tp_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace conccl::tp {

Summary summarize(std::vector<double> values) {
  Summary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  s.min = values.front();
  s.max = values.back();
  s.median = n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
  return s;
}

double relativeError(double maxAbsDiff, double maxAbsRef) {
  if (std::isnan(maxAbsDiff) || std::isnan(maxAbsRef)) return std::numeric_limits<double>::quiet_NaN();
  if (maxAbsRef == 0) return maxAbsDiff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return maxAbsDiff / maxAbsRef;
}

bool withinTolerance(double error, double tolerance) { return error <= tolerance; }  // false for NaN

}  // namespace conccl::tp
