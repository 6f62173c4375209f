// Strategies for running a GEMM and a collective together, a calibration of how much each strategy slows
// the two sides down, and the cost model that predicts T_c3 per strategy and picks the best.
//
// The model (docs/c3.md, "The model"). Let a >= 1 and b >= 1 be the GEMM and collective slowdowns a
// strategy causes while both run (from the calibration), x = a T_g and y = b T_c. Both start together;
// the side that is done first (say the GEMM, x <= y) leaves the other with the part of its work not yet
// done, which then runs at its isolated speed:
//     T_c3 = x + (1 - x / y) T_c     if x <= y,        T_c3 = y + (1 - y / x) T_g     otherwise,
// and T_c3 = T_g + T_c for serial. With a = b = 1 this is max(T_g, T_c) (perfect overlap); it is never
// below max(T_g, T_c). Copy-engine strategies may add a fixed per-call cost to T_c (issue and sync of
// several copies, FACTS.md: ~4 us per cudaMemcpyAsync), which is what makes them lose at small sizes.
// Pure C++: no CUDA types.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "c3/workload.h"

namespace conccl::c3 {

// kAuto is not a way of running: it is the planner's pick among the others, per scenario.
enum class Strategy { kSerial, kNccl, kNcclSp, kNcclRp, kNcclCe, kConccl, kConcclRp, kAuto };

// "serial", "nccl", "nccl+SP", "nccl+RP", "nccl-ce", "conccl", "conccl+RP", "auto"
const char* strategyName(Strategy s);
std::optional<Strategy> parseStrategy(std::string_view name);  // case-insensitive; "ncclce" for "nccl-ce" too
// Comma-separated list ("serial,nccl,conccl,auto"), or "all" (every fixed strategy, then auto). Duplicates
// are dropped, order is kept. Throws conccl::Error(concclInvalidArgument) naming the first unknown entry.
std::vector<Strategy> parseStrategyList(std::string_view list);
// The fixed strategies (everything but auto), serial first: the planner's candidates.
const std::vector<Strategy>& allStrategies();

bool strategyUsesNccl(Strategy s);    // nccl, nccl+SP, nccl+RP, nccl-ce
bool strategyUsesConccl(Strategy s);  // conccl, conccl+RP
// Whether the strategy can run this collective at all. NCCL 2.28's copy-engine path covers AllGather and
// AlltoAll (plus Scatter/Gather) only, so nccl-ce has no reduce-scatter, all-reduce or broadcast.
bool strategySupports(Strategy s, CollKind kind);

// What a strategy asks of the GPU: the GEMM's SM budget, the collective's CTAs and stream priority, and which
// library runs the collective. RP leaves the collective's share of SMs out of the GEMM: NCCL's maxCTAs
// (`rpCollCtas`) for nccl+RP; for conccl+RP the SMs conccl's call occupies (`concclSms`: concclCallResources(...).sms,
// c3/call_resources.h computes it without a GPU), and a call that occupies none (copy engines only) leaves the GEMM
// every SM. `kind` is not read: the collective's kind is already in concclSms.
struct StrategyResources {
  int gemmSmCount = 0;     // cuBLASLt SM-count target; 0 = all SMs
  int collectiveCtas = 0;  // NCCL maxCTAs (nccl+RP) or concclSms (conccl strategies); 0 = none or NCCL's default
  bool highPriority = false;
  bool conccl = false;  // the collective runs on conccl (else NCCL)
};
StrategyResources strategyResources(Strategy s, CollKind kind, int gpuSms, int rpCollCtas, int concclSms,
                                    int rpGemmSms = 0, bool ncclPresent = true);

// How much a strategy slows each side while both run, and what it adds to the collective alone.
struct StrategyCost {
  double gemmSlowdown = 1.0;      // a: T_g in overlap / T_g
  double collSlowdown = 1.0;      // b: T_c in overlap / T_c
  double collTimeScale = 1.0;     // isolated collective time relative to NCCL's
  double collExtraLatency = 0.0;  // seconds added to the isolated collective (copy issue costs)
};

// Per strategy and GEMM boundedness, because memory-bound GEMMs fight the collective for HBM bandwidth
// where compute-bound ones mostly fight it for SMs (FACTS.md, probe 3); measured calibrations
// (`conccl-c3 --calibrate`) also key by collective kind, because a reduction takes SMs that a copy does not.
struct Calibration {
  std::map<std::pair<Strategy, GemmBound>, StrategyCost> costs;
  std::map<std::tuple<Strategy, GemmBound, CollKind>, StrategyCost> kindCosts;  // measured; preferred
  // Extra GEMM slowdown factor when a copy-engine strategy runs a collective with a reduction, because
  // its reduction kernel takes SMs (up to config.smBudget, 8 by default). Applied to `costs` priors only: a measured
  // kindCosts entry already contains it.
  double ceReductionGemmSlowdown = 1.03;

  // kindCosts for (s, bound, kind) if measured, else costs for (s, bound) (+ the reduction factor), else
  // no slowdown at all.
  StrategyCost cost(Strategy s, GemmBound bound, CollKind kind) const;
  // Priors from the measurements quoted in FACTS.md; replace them with the slowdowns conccl-c3 measures.
  static Calibration defaults();
};

// Alpha-beta model of a collective's isolated time: T_c = latency + bytes x busBwFactor / busBw.
// Its bus bandwidth reaches half of the peak at bytes = latency x busBw / busBwFactor.
struct CommProfile {
  double busBw = 370e9;    // NVLink 4 as NCCL reaches it on H100/H200 (FACTS.md)
  double latency = 25e-6;  // per call, seconds
};

// Predicted isolated times (roofline for the GEMM at `efficiency` of peak, alpha-beta for the collective).
double predictGemmTime(const GemmShape& gemm, const MachineProfile& machine, double efficiency = 0.8);
double predictCollTime(const CollectiveSpec& coll, const CommProfile& comm);
double modelHalfPeakSize(CollKind kind, int ranks, const CommProfile& comm);

// The overlap model above.
double predictOverlapTime(double tG, double tC, const StrategyCost& cost);

// The inverse of the model: the slowdowns (a, b) that make it reproduce one concurrent measurement, from the
// isolated times and the times each side took inside the concurrent run (both from the common start).
// The side that finished first ran beside the other all along, so its slowdown is its overlap time over its
// isolated time; the other side did that long at 1/a (1/b) of its speed, then the rest alone:
//     T_g,overlap = T_c,overlap + T_g - T_c,overlap / a   when the collective finishes first.
// Slowdowns below 1 (noise) are reported as 1; missing or inconsistent times give nullopt.
std::optional<StrategyCost> inferCost(double tG, double tC, double tGOverlap, double tCOverlap);

struct Prediction {
  Strategy strategy = Strategy::kSerial;
  double tG = 0;
  double tC = 0;      // this strategy's isolated collective time
  double tCBase = 0;  // the baseline's (NCCL's) isolated collective time
  double tC3 = 0;
  double speedup = 0;          // against the baseline: (T_g + T_c,base) / T_c3
  double fractionOfIdeal = 0;  // likewise
  double overlapRatio = 0;     // T_c3 / max(T_g, T_c,base)
};

struct Plan {
  std::vector<Prediction> predictions;  // in the order of `candidates`, unsupported ones left out
  Strategy best = Strategy::kSerial;    // least T_c3; serial wins ties (it needs nothing)
};

// tC is the isolated time of the collective on NCCL (SM kernels, the baseline); each strategy's own T_c is
// taken from `ownCollTimes` where given (measured), else derived from tC with collTimeScale and
// collExtraLatency. Serial is NCCL's collective, then the GEMM: T_g + its own T_c.
Plan plan(const GemmShape& gemm, const CollectiveSpec& coll, double tG, double tC, const Calibration& calibration,
          const std::vector<Strategy>& candidates, const MachineProfile& machine = MachineProfile::h200(),
          const std::map<Strategy, double>& ownCollTimes = {});

}  // namespace conccl::c3
