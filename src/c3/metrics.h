// C3 metrics and the ConCCL taxonomy, exactly as /work/shared/FACTS.md defines them:
//   S       = (T_g + T_c) / T_c3                speedup of overlapping over running one after the other
//   S_ideal = (T_g + T_c) / max(T_g, T_c)       speedup of perfect overlap
//   F       = (S - 1) / (S_ideal - 1)           fraction of ideal: 0 = serial, 1 = perfect, < 0 = worse
//   G-long if T_g > 1.15 T_c, C-long if T_c > 1.15 T_g, else GC-equal.
// Times are in seconds. A quantity that is undefined for the inputs (a zero or missing time, or
// S_ideal == 1 so that there is nothing to gain) is NaN, never a division by zero or an infinity; the
// table prints it as "-" and the JSON as null.
#pragma once

#include <optional>
#include <string_view>

namespace conccl::c3 {

// Factor by which one side must be longer than the other to count as "long" (ConCCL's taxonomy).
inline constexpr double kLongFactor = 1.15;

enum class OverlapClass { kGLong, kCLong, kGCEqual };
const char* overlapClassName(OverlapClass c);  // "G-long", "C-long", "GC-equal"
std::optional<OverlapClass> parseOverlapClass(std::string_view name);

// Both times zero (or equal) is GC-equal; the comparisons are strict, so a ratio of exactly 1.15 is
// GC-equal too.
OverlapClass classify(double tG, double tC);

struct Metrics {
  double tG = 0;         // GEMM alone
  double tC = 0;         // collective alone
  double tC3 = 0;        // both, from the common start until both finished
  double tGOverlap = 0;  // GEMM's own time inside the concurrent run (NaN or <= 0: not measured)
  double tCOverlap = 0;  // collective's own time inside the concurrent run

  double speedup = 0;          // S
  double idealSpeedup = 0;     // S_ideal
  double fractionOfIdeal = 0;  // F
  double gemmSlowdown = 0;     // tGOverlap / tG
  double collSlowdown = 0;     // tCOverlap / tC
  OverlapClass overlapClass = OverlapClass::kGCEqual;
};

// Fills every derived field from the measured times.
Metrics computeMetrics(double tG, double tC, double tC3, double tGOverlap = -1, double tCOverlap = -1);

double speedup(double tG, double tC, double tC3);
double idealSpeedup(double tG, double tC);
double fractionOfIdeal(double tG, double tC, double tC3);
double slowdown(double isolated, double inOverlap);

}  // namespace conccl::c3
