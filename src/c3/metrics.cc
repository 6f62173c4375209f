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

double overlapRatio(double tG, double tC, double tC3) {
  if (!nonNegative(tG) || !nonNegative(tC) || !positive(tC3) || !positive(std::max(tG, tC))) return kNaN;
  return tC3 / std::max(tG, tC);
}

double slowdown(double isolated, double inOverlap) {
  if (!positive(isolated) || !positive(inOverlap)) return kNaN;
  return inOverlap / isolated;
}

Metrics computeMetrics(const RoundTimes& t) {
  Metrics m;
  m.tG = t.tG;
  m.tC = t.tC;
  m.tCOwn = positive(t.tCOwn) ? t.tCOwn : t.tC;
  m.tC3 = t.tC3;
  m.tGOverlap = positive(t.tGOverlap) ? t.tGOverlap : kNaN;
  m.tCOverlap = positive(t.tCOverlap) ? t.tCOverlap : kNaN;
  // The baseline T_c, never the strategy's own, in everything that compares strategies.
  m.speedup = speedup(t.tG, t.tC, t.tC3);
  m.idealSpeedup = idealSpeedup(t.tG, t.tC);
  m.fractionOfIdeal = fractionOfIdeal(t.tG, t.tC, t.tC3);
  m.overlapRatio = overlapRatio(t.tG, t.tC, t.tC3);
  m.gemmSlowdown = slowdown(t.tG, m.tGOverlap);
  m.collSlowdown = slowdown(m.tCOwn, m.tCOverlap);
  m.tGBudget = positive(t.tGBudget) ? t.tGBudget : kNaN;
  m.budgetCost = slowdown(t.tG, m.tGBudget);
  m.overlapClass = classify(t.tG, t.tC);
  return m;
}

Metrics computeMetrics(double tG, double tC, double tC3, double tGOverlap, double tCOverlap) {
  return computeMetrics(RoundTimes{tG, tC, tC, tC3, tGOverlap, tCOverlap});
}

double medianOf(std::vector<double> v) {
  std::erase_if(v, [](double x) { return !std::isfinite(x); });
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

RoundSummary summarizeRounds(const std::vector<RoundTimes>& rounds) {
  // Every numeric field of Metrics, so that median/min/max are taken the same way for each.
  static constexpr double Metrics::*kFields[] = {
      &Metrics::tG,           &Metrics::tC,           &Metrics::tCOwn,           &Metrics::tC3,
      &Metrics::tGOverlap,    &Metrics::tCOverlap,    &Metrics::speedup,         &Metrics::idealSpeedup,
      &Metrics::fractionOfIdeal, &Metrics::overlapRatio, &Metrics::gemmSlowdown, &Metrics::collSlowdown,
      &Metrics::tGBudget,     &Metrics::budgetCost};
  std::vector<Metrics> per;
  for (const RoundTimes& t : rounds) per.push_back(computeMetrics(t));
  RoundSummary out;
  out.rounds = rounds;
  for (double Metrics::*f : kFields) {
    std::vector<double> v;
    for (const Metrics& m : per) {
      if (std::isfinite(m.*f)) v.push_back(m.*f);
    }
    out.median.*f = medianOf(v);
    out.min.*f = v.empty() ? kNaN : *std::min_element(v.begin(), v.end());
    out.max.*f = v.empty() ? kNaN : *std::max_element(v.begin(), v.end());
  }
  out.median.overlapClass = classify(out.median.tG, out.median.tC);
  out.min.overlapClass = out.max.overlapClass = out.median.overlapClass;
  return out;
}

}  // namespace conccl::c3
