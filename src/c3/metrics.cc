#include "c3/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace conccl::c3 {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool positive(double t) { return std::isfinite(t) && t > 0; }
bool nonNegative(double t) { return std::isfinite(t) && t >= 0; }

}  // namespace

const char* overlapClassName(OverlapClass c) {
  switch (c) {
    case OverlapClass::kGLong:
      return "G-long";
    case OverlapClass::kCLong:
      return "C-long";
    case OverlapClass::kGCEqual:
      return "GC-equal";
  }
  return "?";
}

std::optional<OverlapClass> parseOverlapClass(std::string_view name) {
  if (name == "G-long") return OverlapClass::kGLong;
  if (name == "C-long") return OverlapClass::kCLong;
  if (name == "GC-equal") return OverlapClass::kGCEqual;
  return std::nullopt;
}

OverlapClass classify(double tG, double tC) {
  if (tG > kLongFactor * tC) return OverlapClass::kGLong;
  if (tC > kLongFactor * tG) return OverlapClass::kCLong;
  return OverlapClass::kGCEqual;
}

double speedup(double tG, double tC, double tC3) {
  if (!nonNegative(tG) || !nonNegative(tC) || !positive(tC3)) return kNaN;
  return (tG + tC) / tC3;
}

double idealSpeedup(double tG, double tC) {
  if (!nonNegative(tG) || !nonNegative(tC) || !positive(std::max(tG, tC))) return kNaN;
  return (tG + tC) / std::max(tG, tC);
}

double fractionOfIdeal(double tG, double tC, double tC3) {
  const double s = speedup(tG, tC, tC3);
  const double ideal = idealSpeedup(tG, tC);
  // S_ideal == 1 when one side takes no time: there is no overlap to win, so F is undefined rather than
  // +-infinity. (S_ideal is exactly 1 only then, because (a + b) / max(a, b) > 1 for a, b > 0.)
  if (std::isnan(s) || std::isnan(ideal) || !(ideal > 1.0)) return kNaN;
  return (s - 1.0) / (ideal - 1.0);
}

double slowdown(double isolated, double inOverlap) {
  if (!positive(isolated) || !positive(inOverlap)) return kNaN;
  return inOverlap / isolated;
}

Metrics computeMetrics(double tG, double tC, double tC3, double tGOverlap, double tCOverlap) {
  Metrics m;
  m.tG = tG;
  m.tC = tC;
  m.tC3 = tC3;
  m.tGOverlap = positive(tGOverlap) ? tGOverlap : kNaN;
  m.tCOverlap = positive(tCOverlap) ? tCOverlap : kNaN;
  m.speedup = speedup(tG, tC, tC3);
  m.idealSpeedup = idealSpeedup(tG, tC);
  m.fractionOfIdeal = fractionOfIdeal(tG, tC, tC3);
  m.gemmSlowdown = slowdown(tG, m.tGOverlap);
  m.collSlowdown = slowdown(tC, m.tCOverlap);
  m.overlapClass = classify(tG, tC);
  return m;
}

}  // namespace conccl::c3
