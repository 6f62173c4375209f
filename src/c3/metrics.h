// C3 metrics and the ConCCL taxonomy, exactly as /work/shared/FACTS.md defines them:
//   S       = (T_g + T_c) / T_c3                speedup of overlapping over running one after the other
//   S_ideal = (T_g + T_c) / max(T_g, T_c)       speedup of perfect overlap
//   F       = (S - 1) / (S_ideal - 1)           fraction of ideal: 0 = serial, 1 = perfect, < 0 = worse
//   R       = T_c3 / max(T_g, T_c)              overlap ratio: 1 = perfect overlap at the baseline's speed
//   G-long if T_g > 1.15 T_c, C-long if T_c > 1.15 T_g, else GC-equal.
// T_c is the *baseline* collective alone (NCCL's; conccl's only where NCCL is absent) for every strategy: a
// strategy's own collective time is reported beside it but never enters S, S_ideal, F, R or the class, so a
// slower collective cannot earn a higher F (FACTS.md, "One baseline for every strategy").
// Times are in seconds. A quantity that is undefined for the inputs (a zero or missing time, or
// S_ideal == 1 so that there is nothing to gain) is NaN, never a division by zero or an infinity; the
// table prints it as "-" and the JSON as null.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

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
  double tC = 0;         // the baseline collective alone (NCCL's), the same for every strategy
  double tCOwn = 0;      // this strategy's own collective alone (reported, never in S, S_ideal, F or R)
  double tC3 = 0;        // both, from the common start until both finished
  double tGOverlap = 0;  // GEMM's own time inside the concurrent run (NaN or <= 0: not measured)
  double tCOverlap = 0;  // collective's own time inside the concurrent run

  double speedup = 0;          // S, against the baseline
  double idealSpeedup = 0;     // S_ideal, against the baseline
  double fractionOfIdeal = 0;  // F, against the baseline
  double overlapRatio = 0;     // R = T_c3 / max(T_g, T_c)
  double gemmSlowdown = 0;     // tGOverlap / tG
  double collSlowdown = 0;     // tCOverlap / tCOwn: the strategy's collective beside the GEMM vs alone
  // The cost of leaving SMs free (RP strategies): the GEMM alone with the strategy's SM-count target, and that time
  // over tG (GEMM alone on all SMs). NaN where the strategy gives the GEMM every SM.
  double tGBudget = 0;
  double budgetCost = 0;
  OverlapClass overlapClass = OverlapClass::kGCEqual;  // from T_g and the baseline T_c
};

// The times of one strategy in one measurement round (seconds). tCOwn <= 0 or NaN: the strategy's own
// collective is the baseline (nccl, serial), so tCOwn = tC.
struct RoundTimes {
  double tG = 0;
  double tC = 0;  // baseline
  double tCOwn = -1;
  double tC3 = 0;
  double tGOverlap = -1;
  double tCOverlap = -1;
  double tGBudget = -1;  // the GEMM alone with the strategy's SM-count target (<= 0 or NaN: none)
};

// Fills every derived field from the measured times.
Metrics computeMetrics(const RoundTimes& t);
// Shorthand for a strategy whose own collective is the baseline.
Metrics computeMetrics(double tG, double tC, double tC3, double tGOverlap = -1, double tCOverlap = -1);

// Median and range over the rounds of a measurement, field by field: each round's Metrics is computed
// from the times of that round (measured next to each other, so clock drift between rounds cancels in S,
// F and R), and every field of `median`, `min` and `max` is that statistic over the rounds (NaN rounds
// left out). The class is taken from the median T_g and T_c.
struct RoundSummary {
  Metrics median;
  Metrics min;
  Metrics max;
  std::vector<RoundTimes> rounds;
};
RoundSummary summarizeRounds(const std::vector<RoundTimes>& rounds);

// Median of the finite values (NaN if none); the mean of the middle two for an even count.
double medianOf(std::vector<double> values);

double speedup(double tG, double tC, double tC3);
double idealSpeedup(double tG, double tC);
double fractionOfIdeal(double tG, double tC, double tC3);
double overlapRatio(double tG, double tC, double tC3);
double slowdown(double isolated, double inOverlap);

}  // namespace conccl::c3
