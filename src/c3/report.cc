#include "c3/report.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "c3/planner.h"
#include "c3/text_file.h"
#include "base/error.h"

#if __has_include(<nlohmann/json.hpp>)
#include <nlohmann/json.hpp>
#define CONCCL_C3_HAVE_JSON 1
#endif

namespace conccl::c3 {
namespace {

template <typename... Args>
std::string format(const char* fmt, Args... args) {
  const int n = std::snprintf(nullptr, 0, fmt, args...);
  std::string out(size_t(n > 0 ? n : 0), '\0');
  std::snprintf(out.data(), out.size() + 1, fmt, args...);
  return out;
}

bool defined(double v) { return std::isfinite(v); }

std::string ms(double seconds) { return defined(seconds) ? format("%.3f", seconds * 1e3) : "-"; }
std::string ratio(double v) { return defined(v) ? format("%.2fx", v) : "-"; }
std::string plain(double v) { return defined(v) ? format("%.2f", v) : "-"; }
std::string percent(double v) { return defined(v) ? format("%.0f%%", v * 100) : "-"; }

std::string gemmText(const GemmShape& g) {
  return format("%lldx%lldx%lld %s", static_cast<long long>(g.m), static_cast<long long>(g.n),
                static_cast<long long>(g.k), dtypeName(g.dtype));
}

}  // namespace

std::string formatBytes(double bytes) {
  if (!defined(bytes)) return "-";
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  if (unit == 0) return format("%.0f B", bytes);
  // Whole numbers print without decimals: "256 MiB", not "256.00 MiB".
  if (std::fabs(bytes - std::round(bytes)) < 1e-9) return format("%.0f %s", bytes, kUnits[unit]);
  return format("%.2f %s", bytes, kUnits[unit]);
}

ResultRow makeRow(const Scenario& scenario, std::string strategy, const Metrics& metrics, const MachineProfile& machine,
                  double halfPeakBytes) {
  ResultRow row;
  row.scenario = scenario.name;
  row.strategy = std::move(strategy);
  row.gemm = scenario.gemm;
  row.coll = scenario.coll;
  row.metrics = metrics;
  row.low = metrics;
  row.high = metrics;
  row.gemmBound = classifyGemm(scenario.gemm, machine);
  row.intensity = scenario.gemm.arithmeticIntensity();
  row.halfPeakBytes = halfPeakBytes;
  if (halfPeakBytes > 0) row.collBound = classifyCollective(scenario.coll.bytes, halfPeakBytes);
  return row;
}

ResultRow makeRow(const Scenario& scenario, std::string strategy, const RoundSummary& summary,
                  const MachineProfile& machine, double halfPeakBytes) {
  ResultRow row = makeRow(scenario, std::move(strategy), summary.median, machine, halfPeakBytes);
  row.low = summary.min;
  row.high = summary.max;
  row.rounds = summary.rounds;
  return row;
}

ResultRow makeSkippedRow(const Scenario& scenario, std::string strategy, std::string status,
                         const MachineProfile& machine, double halfPeakBytes) {
  const double nan = std::nan("");
  ResultRow row = makeRow(scenario, std::move(strategy), computeMetrics(nan, nan, nan), machine, halfPeakBytes);
  row.status = std::move(status);
  return row;
}

namespace {

// Range over the rounds relative to the median, in percent ("-" with fewer than two rounds).
std::string range(const ResultRow& r, double Metrics::*field) {
  const double med = r.metrics.*field;
  if (r.rounds.size() < 2 || !defined(med) || med == 0 || !defined(r.low.*field) || !defined(r.high.*field)) return "-";
  return format("%.0f%%", 100.0 * (r.high.*field - r.low.*field) / med);
}

std::string ratioRange(const ResultRow& r) {
  if (r.rounds.size() < 2 || !defined(r.low.overlapRatio)) return "-";
  return format("%.2f-%.2f", r.low.overlapRatio, r.high.overlapRatio);
}

std::string percentRange(const ResultRow& r) {
  if (r.rounds.size() < 2 || !defined(r.low.fractionOfIdeal)) return "-";
  return format("%.0f..%.0f%%", r.low.fractionOfIdeal * 100, r.high.fractionOfIdeal * 100);
}

constexpr const char* kRowFormat =
    "%-34s %-16s %8s %4s %8s %4s %8s %8s %4s %5s %-9s %6s %6s %5s %7s %5s %-11s %-8s %-7s %-9s\n";

}  // namespace

std::string formatTableHeader() {
  return format(kRowFormat, "scenario", "strategy", "T_g(ms)", "rng", "T_c(ms)", "rng", "own(ms)", "T_c3(ms)", "rng",
                "R", "R-range", "g-slow", "c-slow", "S", "S_ideal", "F", "F-range", "class", "gemm", "coll");
}

std::string formatTableRow(const ResultRow& r) {
  const std::string strategy = r.choice.empty() ? r.strategy : r.strategy + ":" + r.choice;
  if (!r.ok()) return format("%-34s %-16s %s\n", r.scenario.c_str(), strategy.c_str(), r.status.c_str());
  const Metrics& m = r.metrics;
  return format(kRowFormat, r.scenario.c_str(), strategy.c_str(), ms(m.tG).c_str(), range(r, &Metrics::tG).c_str(),
                ms(m.tC).c_str(), range(r, &Metrics::tC).c_str(), ms(m.tCOwn).c_str(), ms(m.tC3).c_str(),
                range(r, &Metrics::tC3).c_str(), plain(m.overlapRatio).c_str(), ratioRange(r).c_str(),
                ratio(m.gemmSlowdown).c_str(), ratio(m.collSlowdown).c_str(), plain(m.speedup).c_str(),
                plain(m.idealSpeedup).c_str(), percent(m.fractionOfIdeal).c_str(), percentRange(r).c_str(),
                overlapClassName(m.overlapClass), gemmBoundName(r.gemmBound),
                r.collBound ? collBoundName(*r.collBound) : "-");
}

std::string formatTable(const std::vector<ResultRow>& rows) {
  std::string out = formatTableHeader();
  for (const ResultRow& r : rows) out += formatTableRow(r);
  return out;
}

std::string formatSmBudgetTable(const std::vector<SmBudgetRow>& rows) {
  std::string out =
      format("%-34s %-26s %-17s %5s %10s %8s\n", "gemm-of", "shape", "method", "SMs", "time(ms)", "slowdown");
  for (const SmBudgetRow& r : rows) {
    const std::string sms = r.sms > 0 ? std::to_string(r.sms) : "all";
    if (r.status != "ok") {
      out += format("%-34s %-26s %-17s %5s %s\n", r.gemmName.c_str(), gemmText(r.gemm).c_str(), r.method.c_str(),
                    sms.c_str(), r.status.c_str());
      continue;
    }
    out += format("%-34s %-26s %-17s %5s %10s %8s\n", r.gemmName.c_str(), gemmText(r.gemm).c_str(), r.method.c_str(),
                  sms.c_str(), ms(r.time).c_str(), ratio(r.slowdown).c_str());
  }
  return out;
}

std::string formatSummary(const std::vector<ResultRow>& rows) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<const ResultRow*>> by;
  for (const ResultRow& r : rows) {
    if (!r.ok()) continue;
    if (!by.count(r.strategy)) order.push_back(r.strategy);
    by[r.strategy].push_back(&r);
  }
  std::string out;
  for (const std::string& name : order) {
    double logSum = 0;
    int logCount = 0;
    std::vector<double> f;
    int near = 0, known = 0;
    for (const ResultRow* r : by[name]) {
      if (defined(r->metrics.overlapRatio) && r->metrics.overlapRatio > 0) {
        logSum += std::log(r->metrics.overlapRatio);
        ++logCount;
      }
      f.push_back(r->metrics.fractionOfIdeal);
      if (r->bestFixedTC3 > 0 && defined(r->metrics.tC3)) {
        ++known;
        if (r->metrics.tC3 <= 1.05 * r->bestFixedTC3) ++near;
      }
    }
    out += format("# summary %-12s %3zu rows  geomean R %s  median F %s", name.c_str(), by[name].size(),
                  logCount ? format("%.3f", std::exp(logSum / logCount)).c_str() : "-",
                  percent(medianOf(f)).c_str());
    if (known) out += format("  within 5%% of the best fixed T_c3 in %d/%d scenarios", near, known);
    out += "\n";
  }
  return out;
}

std::string formatGrid(const std::vector<Scenario>& scenarios, const MachineProfile& machine,
                       const Calibration* measured) {
  const CommProfile comm;
  const Calibration calibration = measured != nullptr ? *measured : Calibration::defaults();
  std::string out =
      format("%-34s %-26s %6s %-7s %-14s %10s %5s %-9s %9s %9s %-8s %-10s\n", "scenario", "gemm", "FLOP/B", "bound",
             "collective", "bytes", "ranks", "coll", "T_g*(ms)", "T_c*(ms)", "class*", "best*");
  for (const Scenario& s : scenarios) {
    const double tG = predictGemmTime(s.gemm, machine);
    const double tC = predictCollTime(s.coll, comm);
    const double halfPeak = modelHalfPeakSize(s.coll.kind, s.coll.ranks, comm);
    const Plan p = plan(s.gemm, s.coll, tG, tC, calibration, allStrategies(), machine);
    out += format("%-34s %-26s %6.0f %-7s %-14s %10s %5d %-9s %9s %9s %-8s %-10s\n", s.name.c_str(),
                  gemmText(s.gemm).c_str(), s.gemm.arithmeticIntensity(), gemmBoundName(classifyGemm(s.gemm, machine)),
                  collLabel(s.coll.kind), formatBytes(double(s.coll.bytes)).c_str(), s.coll.ranks,
                  collBoundName(classifyCollective(s.coll.bytes, halfPeak)), ms(tG).c_str(), ms(tC).c_str(),
                  overlapClassName(classify(tG, tC)), strategyName(p.best));
  }
  out += std::string("* predicted by the cost model (docs/c3.md) with ") +
         (measured != nullptr ? "the given calibration" : "the default calibration") + ", not measured\n";
  return out;
}

#ifdef CONCCL_C3_HAVE_JSON
namespace {

using nlohmann::json;

json number(double v) { return defined(v) ? json(v) : json(nullptr); }
json millis(double seconds) { return defined(seconds) ? json(seconds * 1e3) : json(nullptr); }

// The numbers of a Metrics, keyed as in the results JSON.
json metricsJson(const Metrics& m) {
  return {
      {"T_g_ms", millis(m.tG)},
      {"T_c_ms", millis(m.tC)},
      {"T_c_own_ms", millis(m.tCOwn)},
      {"T_c3_ms", millis(m.tC3)},
      {"T_g_overlap_ms", millis(m.tGOverlap)},
      {"T_c_overlap_ms", millis(m.tCOverlap)},
      {"gemm_slowdown", number(m.gemmSlowdown)},
      {"coll_slowdown", number(m.collSlowdown)},
      {"S", number(m.speedup)},
      {"S_ideal", number(m.idealSpeedup)},
      {"F", number(m.fractionOfIdeal)},
      {"R", number(m.overlapRatio)},
      {"T_g_budget_ms", millis(m.tGBudget)},
      {"gemm_budget_cost", number(m.budgetCost)},
  };
}

json roundsJson(const std::vector<RoundTimes>& rounds) {
  json g = json::array(), c = json::array(), own = json::array(), c3 = json::array(), budget = json::array();
  for (const RoundTimes& t : rounds) {
    budget.push_back(t.tGBudget > 0 ? millis(t.tGBudget) : json(nullptr));
    g.push_back(millis(t.tG));
    c.push_back(millis(t.tC));
    own.push_back(millis(t.tCOwn > 0 ? t.tCOwn : t.tC));
    c3.push_back(millis(t.tC3));
  }
  return {{"T_g_ms", g}, {"T_c_ms", c}, {"T_c_own_ms", own}, {"T_c3_ms", c3}, {"T_g_budget_ms", budget}};
}

}  // namespace

std::string resultsToJson(const RunInfo& info, const std::vector<ResultRow>& rows,
                          const std::vector<SmBudgetRow>& smRows) {
  json results = json::array();
  for (const ResultRow& r : rows) {
    json j = {
        {"scenario", r.scenario},
        {"strategy", r.strategy},
        {"choice", r.choice.empty() ? json(nullptr) : json(r.choice)},
        {"status", r.status},
        {"baseline", r.baseline.empty() ? json(nullptr) : json(r.baseline)},
        {"best_fixed", r.bestFixed.empty() ? json(nullptr) : json(r.bestFixed)},
        {"best_fixed_T_c3_ms", r.bestFixedTC3 > 0 ? millis(r.bestFixedTC3) : json(nullptr)},
        {"gemm", {{"m", r.gemm.m}, {"n", r.gemm.n}, {"k", r.gemm.k}, {"dtype", dtypeName(r.gemm.dtype)}}},
        {"collective",
         {{"kind", collLabel(r.coll.kind)},
          {"bytes", r.coll.bytes},
          {"ranks", r.coll.ranks},
          {"dtype", dtypeName(r.coll.dtype)}}},
        {"class", r.ok() ? json(overlapClassName(r.metrics.overlapClass)) : json(nullptr)},
        {"gemm_bound", gemmBoundName(r.gemmBound)},
        {"intensity", number(r.intensity)},
        {"coll_bound", r.collBound ? json(collBoundName(*r.collBound)) : json(nullptr)},
        {"half_peak_bytes", r.halfPeakBytes > 0 ? json(r.halfPeakBytes) : json(nullptr)},
        {"predicted_T_c3_ms", r.predictedTC3 >= 0 ? millis(r.predictedTC3) : json(nullptr)},
        {"min", metricsJson(r.low)},
        {"max", metricsJson(r.high)},
        {"rounds", roundsJson(r.rounds)},
    };
    j.update(metricsJson(r.metrics));
    results.push_back(std::move(j));
  }
  json sm = json::array();
  for (const SmBudgetRow& r : smRows) {
    sm.push_back({{"gemm_of", r.gemmName},
                  {"gemm", {{"m", r.gemm.m}, {"n", r.gemm.n}, {"k", r.gemm.k}, {"dtype", dtypeName(r.gemm.dtype)}}},
                  {"method", r.method},
                  {"sms", r.sms},
                  {"time_ms", millis(r.time)},
                  {"slowdown", number(r.slowdown)},
                  {"status", r.status}});
  }
  json doc = {{"tool", "conccl-c3"},     {"version", format("%d.%d.%d", CONCCL_MAJOR, CONCCL_MINOR, CONCCL_PATCH)},
              {"mode", info.mode},       {"device", info.device},
              {"devices", info.devices}, {"ranks", info.ranks},
              {"iters", info.iters},     {"warmup", info.warmup},
              {"rounds", info.rounds},   {"baseline", info.baseline},
              {"calibration", info.calibration},
              {"caveats", info.caveats}, {"results", results},
              {"sm_budget", sm}};
  return doc.dump(2) + "\n";
}

#else

std::string resultsToJson(const RunInfo&, const std::vector<ResultRow>&, const std::vector<SmBudgetRow>&) {
  CONCCL_THROW(concclNotSupported, "conccl was built without nlohmann/json");
}

#endif

void writeResultsJson(const std::string& path, const RunInfo& info, const std::vector<ResultRow>& rows,
                      const std::vector<SmBudgetRow>& smRows) {
  writeTextFile(path, resultsToJson(info, rows, smRows), "results");
}

}  // namespace conccl::c3
