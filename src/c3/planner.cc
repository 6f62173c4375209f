#include "c3/planner.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "c3/metrics.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

struct StrategyInfo {
  Strategy strategy;
  const char* name;
};

constexpr StrategyInfo kStrategies[] = {
    {Strategy::kSerial, "serial"},      {Strategy::kNccl, "nccl"},      {Strategy::kNcclSp, "nccl+SP"},
    {Strategy::kNcclRp, "nccl+RP"},     {Strategy::kNcclCe, "nccl-ce"}, {Strategy::kConccl, "conccl"},
    {Strategy::kConcclRp, "conccl+RP"}, {Strategy::kAuto, "auto"},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

}  // namespace

const char* strategyName(Strategy s) {
  for (const StrategyInfo& info : kStrategies) {
    if (info.strategy == s) return info.name;
  }
  return "?";
}

std::optional<Strategy> parseStrategy(std::string_view name) {
  const std::string s = lower(trim(name));
  for (const StrategyInfo& info : kStrategies) {
    if (s == lower(info.name)) return info.strategy;
  }
  if (s == "ncclce" || s == "nccl_ce") return Strategy::kNcclCe;
  return std::nullopt;
}

const std::vector<Strategy>& allStrategies() {
  static const std::vector<Strategy> all = [] {
    std::vector<Strategy> v;
    for (const StrategyInfo& info : kStrategies) {
      if (info.strategy != Strategy::kAuto) v.push_back(info.strategy);
    }
    return v;
  }();
  return all;
}

std::vector<Strategy> parseStrategyList(std::string_view list) {
  if (lower(trim(list)) == "all") {
    std::vector<Strategy> all = allStrategies();
    all.push_back(Strategy::kAuto);
    return all;
  }
  std::vector<Strategy> out;
  size_t pos = 0;
  while (pos <= list.size()) {
    const size_t comma = std::min(list.find(',', pos), list.size());
    const std::string item = trim(list.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) continue;
    const std::optional<Strategy> s = parseStrategy(item);
    if (!s) {
      std::string known;
      for (const StrategyInfo& info : kStrategies) known += std::string(known.empty() ? "" : ", ") + info.name;
      CONCCL_THROW(concclInvalidArgument, "unknown strategy '" + item + "' (known: " + known + ")");
    }
    if (std::find(out.begin(), out.end(), *s) == out.end()) out.push_back(*s);
  }
  CONCCL_REQUIRE(!out.empty(), "empty strategy list");
  return out;
}

bool strategyUsesNccl(Strategy s) {
  return s == Strategy::kNccl || s == Strategy::kNcclSp || s == Strategy::kNcclRp || s == Strategy::kNcclCe;
}

bool strategyUsesConccl(Strategy s) { return s == Strategy::kConccl || s == Strategy::kConcclRp; }

bool strategySupports(Strategy s, CollKind kind) {
  if (s == Strategy::kNcclCe) return kind == CollKind::kAllGather || kind == CollKind::kAllToAll;
  return true;
}

StrategyResources strategyResources(Strategy s, CollKind /*kind*/, int gpuSms, int rpCollCtas, int concclSms,
                                    int rpGemmSms, bool ncclPresent) {
  StrategyResources r;
  // serial is NCCL's collective, then the GEMM; conccl's only where NCCL is absent.
  r.conccl = strategyUsesConccl(s) || (s == Strategy::kSerial && !ncclPresent);
  if (s == Strategy::kNcclRp) {
    r.gemmSmCount = rpGemmSms > 0 ? rpGemmSms : std::max(8, gpuSms - rpCollCtas);
    r.collectiveCtas = rpCollCtas;
  }
  if (s == Strategy::kConcclRp) {
    r.gemmSmCount = rpGemmSms > 0 ? rpGemmSms : concclSms > 0 ? std::max(8, gpuSms - concclSms) : 0;
  }
  if (r.conccl) r.collectiveCtas = concclSms;
  r.highPriority = s == Strategy::kNcclSp;
  return r;
}

StrategyCost Calibration::cost(Strategy s, GemmBound bound, CollKind kind) const {
  if (auto it = kindCosts.find({s, bound, kind}); it != kindCosts.end()) return it->second;
  StrategyCost c;
  if (auto it = costs.find({s, bound}); it != costs.end()) c = it->second;
  if ((s == Strategy::kConccl || s == Strategy::kConcclRp) && isReduction(kind)) {
    c.gemmSlowdown *= ceReductionGemmSlowdown;
  }
  return c;
}

Calibration Calibration::defaults() {
  // Sources (FACTS.md): SM collectives make overlapped matmuls 30-40% slower on H100; an 8-CTA SM copy
  // slowed a GEMM 1.137x, copy-engine traffic 1.010x; taking 4-8 SMs from a GEMM costs ~15% (wave
  // quantisation); memory-bound GEMMs lose much more to HBM contention. Collective-side numbers are
  // priors to be replaced by measurement. Copy-engine paths pay ~4 us per copy issue: 7 peers ~ 30 us.
  using enum Strategy;
  constexpr GemmBound kC = GemmBound::kCompute;
  constexpr GemmBound kM = GemmBound::kMemory;
  Calibration cal;
  cal.costs[{kSerial, kC}] = {1.0, 1.0, 1.0, 0.0};
  cal.costs[{kSerial, kM}] = {1.0, 1.0, 1.0, 0.0};
  cal.costs[{kNccl, kC}] = {1.35, 1.30, 1.0, 0.0};
  cal.costs[{kNccl, kM}] = {1.50, 1.40, 1.0, 0.0};
  cal.costs[{kNcclSp, kC}] = {1.35, 1.10, 1.0, 0.0};
  cal.costs[{kNcclSp, kM}] = {1.50, 1.20, 1.0, 0.0};
  cal.costs[{kNcclRp, kC}] = {1.15, 1.25, 1.0, 0.0};
  cal.costs[{kNcclRp, kM}] = {1.25, 1.35, 1.0, 0.0};
  cal.costs[{kNcclCe, kC}] = {1.02, 1.05, 1.0, 30e-6};
  cal.costs[{kNcclCe, kM}] = {1.15, 1.20, 1.0, 30e-6};
  cal.costs[{kConccl, kC}] = {1.01, 1.05, 1.0, 30e-6};
  cal.costs[{kConccl, kM}] = {1.15, 1.20, 1.0, 30e-6};
  // CE+RP: shrinking the GEMM costs it ~15% but leaves HBM to the copies, which pays for memory-bound ones.
  cal.costs[{kConcclRp, kC}] = {1.15, 1.03, 1.0, 30e-6};
  cal.costs[{kConcclRp, kM}] = {1.12, 1.05, 1.0, 30e-6};
  return cal;
}

double predictGemmTime(const GemmShape& gemm, const MachineProfile& machine, double efficiency) {
  if (efficiency <= 0) efficiency = 1.0;
  const double compute = gemm.flops() / (machine.peakFlops(gemm.dtype) * efficiency);
  const double memory = gemm.minimalBytes() / (machine.hbmBytesPerSec * efficiency);
  return std::max(compute, memory);
}

double predictCollTime(const CollectiveSpec& coll, const CommProfile& comm) {
  return comm.latency + double(coll.bytes) * busBwFactor(coll.kind, coll.ranks) / comm.busBw;
}

double modelHalfPeakSize(CollKind kind, int ranks, const CommProfile& comm) {
  // busbw(s) = s f / (latency + s f / B) = B / 2  <=>  s = latency B / f.
  const double f = busBwFactor(kind, ranks);
  return f > 0 ? comm.latency * comm.busBw / f : 0.0;
}

double predictOverlapTime(double tG, double tC, const StrategyCost& cost) {
  const double x = std::max(1.0, cost.gemmSlowdown) * tG;
  const double y = std::max(1.0, cost.collSlowdown) * tC;
  if (x <= 0) return tC;
  if (y <= 0) return tG;
  if (x <= y) return x + (1.0 - x / y) * tC;
  return y + (1.0 - y / x) * tG;
}

std::optional<StrategyCost> inferCost(double tG, double tC, double tGOverlap, double tCOverlap) {
  auto finitePositive = [](double t) { return std::isfinite(t) && t > 0; };
  if (!finitePositive(tG) || !finitePositive(tC) || !finitePositive(tGOverlap) || !finitePositive(tCOverlap)) {
    return std::nullopt;
  }
  // A side that made (almost) no progress beside the other is capped at 1000x slower: the model then
  // reads as serial, which is what was measured.
  constexpr double kMaxSlowdown = 1000;
  StrategyCost c;
  if (tCOverlap <= tGOverlap) {
    // The collective ran beside the GEMM all along; the GEMM did tCOverlap / a of its work meanwhile.
    c.collSlowdown = tCOverlap / tC;
    const double doneBeside = tG - (tGOverlap - tCOverlap);  // = tCOverlap / a
    c.gemmSlowdown = tCOverlap / std::max(doneBeside, tCOverlap / kMaxSlowdown);
  } else {
    c.gemmSlowdown = tGOverlap / tG;
    const double doneBeside = tC - (tCOverlap - tGOverlap);  // = tGOverlap / b
    c.collSlowdown = tGOverlap / std::max(doneBeside, tGOverlap / kMaxSlowdown);
  }
  c.gemmSlowdown = std::max(1.0, c.gemmSlowdown);
  c.collSlowdown = std::max(1.0, c.collSlowdown);
  return c;
}

Plan plan(const GemmShape& gemm, const CollectiveSpec& coll, double tG, double tC, const Calibration& calibration,
          const std::vector<Strategy>& candidates, const MachineProfile& machine,
          const std::map<Strategy, double>& ownCollTimes) {
  const GemmBound bound = classifyGemm(gemm, machine);
  Plan result;
  double bestTime = 0;
  bool haveBest = false;
  for (Strategy s : candidates) {
    if (s == Strategy::kAuto || !strategySupports(s, coll.kind)) continue;
    const StrategyCost cost = calibration.cost(s, bound, coll.kind);
    Prediction p;
    p.strategy = s;
    p.tG = tG;
    p.tCBase = tC;
    if (auto it = ownCollTimes.find(s); it != ownCollTimes.end()) {
      p.tC = it->second;
    } else {
      p.tC = s == Strategy::kSerial ? tC : tC * cost.collTimeScale + cost.collExtraLatency;
    }
    p.tC3 = s == Strategy::kSerial ? p.tG + p.tC : predictOverlapTime(p.tG, p.tC, cost);
    p.speedup = speedup(p.tG, p.tCBase, p.tC3);
    p.fractionOfIdeal = fractionOfIdeal(p.tG, p.tCBase, p.tC3);
    p.overlapRatio = overlapRatio(p.tG, p.tCBase, p.tC3);
    result.predictions.push_back(p);
    // Strictly less: on a tie the earlier candidate stays, and serial comes first in allStrategies().
    if (!haveBest || p.tC3 < bestTime) {
      bestTime = p.tC3;
      result.best = s;
      haveBest = true;
    }
  }
  return result;
}

}  // namespace conccl::c3
