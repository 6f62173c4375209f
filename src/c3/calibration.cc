#include "c3/calibration.h"

#include <cmath>

#include "c3/text_file.h"
#include "base/error.h"

#if __has_include(<nlohmann/json.hpp>)
#include <nlohmann/json.hpp>
#define CONCCL_C3_HAVE_JSON 1
#endif

namespace conccl::c3 {
namespace {

constexpr CollKind kKinds[] = {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce,
                               CollKind::kAllToAll, CollKind::kBroadcast};
constexpr GemmBound kBounds[] = {GemmBound::kCompute, GemmBound::kMemory};

std::optional<GemmBound> parseGemmBound(std::string_view name) {
  for (GemmBound b : kBounds) {
    if (name == gemmBoundName(b)) return b;
  }
  return std::nullopt;
}

}  // namespace

GemmShape calibrationGemm(GemmBound bound) {
  return bound == GemmBound::kCompute ? GemmShape{8192, 8192, 8192, Dtype::kBf16}
                                      : GemmShape{128, 57344, 8192, Dtype::kBf16};
}

std::vector<Scenario> calibrationScenarios(int ranks, const MachineProfile& machine, const CommProfile& comm) {
  CONCCL_REQUIRE(ranks >= 1, "calibration needs at least one rank");
  std::vector<Scenario> out;
  for (GemmBound bound : kBounds) {
    const GemmShape gemm = calibrationGemm(bound);
    const double tG = predictGemmTime(gemm, machine);
    for (CollKind kind : kKinds) {
      uint64_t best = 0;
      double bestGap = 0;
      for (uint64_t bytes = uint64_t(1) << 20; bytes <= (uint64_t(1) << 30); bytes *= 2) {
        const double gap = std::fabs(std::log(predictCollTime({kind, bytes, ranks, Dtype::kBf16}, comm) / tG));
        if (best == 0 || gap < bestGap) {
          best = bytes;
          bestGap = gap;
        }
      }
      out.push_back(Scenario{std::string("cal-") + gemmBoundName(bound) + "-" + collLabel(kind),
                             "calibration: GEMM and collective of about equal predicted time", gemm,
                             CollectiveSpec{kind, best, ranks, Dtype::kBf16}});
    }
  }
  return out;
}

Calibration calibrationFromRows(const std::vector<ResultRow>& rows) {
  Calibration cal = Calibration::defaults();
  for (const ResultRow& r : rows) {
    const std::optional<Strategy> s = parseStrategy(r.strategy);
    if (!r.ok() || !s || *s == Strategy::kAuto || *s == Strategy::kSerial) continue;
    const Metrics& m = r.metrics;
    std::optional<StrategyCost> cost = inferCost(m.tG, m.tCOwn, m.tGOverlap, m.tCOverlap);
    if (!cost) continue;
    cost->collTimeScale = m.tC > 0 && m.tCOwn > 0 ? m.tCOwn / m.tC : 1.0;
    cal.kindCosts[{*s, r.gemmBound, r.coll.kind}] = *cost;
  }
  return cal;
}

#ifdef CONCCL_C3_HAVE_JSON

using nlohmann::json;

std::string calibrationToJson(const Calibration& calibration, const std::string& device, int ranks) {
  json entries = json::array();
  for (const auto& [key, c] : calibration.kindCosts) {
    const auto& [s, bound, kind] = key;
    entries.push_back({{"strategy", strategyName(s)},
                       {"gemm_bound", gemmBoundName(bound)},
                       {"collective", collLabel(kind)},
                       {"gemm_slowdown", c.gemmSlowdown},
                       {"coll_slowdown", c.collSlowdown},
                       {"coll_time_scale", c.collTimeScale},
                       {"coll_extra_latency_s", c.collExtraLatency}});
  }
  const json doc = {{"tool", "conccl-c3"},
                    {"kind", "c3-calibration"},
                    {"format", 1},
                    {"device", device},
                    {"ranks", ranks},
                    {"ce_reduction_gemm_slowdown", calibration.ceReductionGemmSlowdown},
                    {"entries", entries}};
  return doc.dump(2) + "\n";
}

Calibration calibrationFromJson(std::string_view text) {
  Calibration cal = Calibration::defaults();
  try {
    const json doc = json::parse(text);
    CONCCL_REQUIRE(doc.is_object() && doc.value("kind", "") == "c3-calibration",
                   "not a conccl-c3 calibration file (\"kind\": \"c3-calibration\" missing)");
    CONCCL_REQUIRE(doc.value("format", 0) == 1, "unsupported calibration format (this conccl reads format 1)");
    cal.ceReductionGemmSlowdown = doc.value("ce_reduction_gemm_slowdown", cal.ceReductionGemmSlowdown);
    size_t index = 0;
    for (const json& e : doc.at("entries")) {
      const std::string where = "calibration entry #" + std::to_string(index++) + ": ";
      const std::optional<Strategy> s = parseStrategy(e.at("strategy").get<std::string>());
      const std::optional<GemmBound> bound = parseGemmBound(e.at("gemm_bound").get<std::string>());
      const std::optional<CollKind> kind = parseCollKind(e.at("collective").get<std::string>());
      CONCCL_REQUIRE(s && *s != Strategy::kAuto, where + "unknown strategy");
      CONCCL_REQUIRE(bound.has_value(), where + "gemm_bound must be compute or memory");
      CONCCL_REQUIRE(kind.has_value(), where + "unknown collective");
      StrategyCost c;
      c.gemmSlowdown = e.at("gemm_slowdown").get<double>();
      c.collSlowdown = e.at("coll_slowdown").get<double>();
      c.collTimeScale = e.value("coll_time_scale", 1.0);
      c.collExtraLatency = e.value("coll_extra_latency_s", 0.0);
      CONCCL_REQUIRE(c.gemmSlowdown > 0 && c.collSlowdown > 0 && c.collTimeScale > 0 && c.collExtraLatency >= 0,
                     where + "slowdowns and time scale must be positive, extra latency non-negative");
      cal.kindCosts[{*s, *bound, *kind}] = c;
    }
  } catch (const json::exception& e) {
    CONCCL_THROW(concclInvalidArgument, std::string("calibration file: ") + e.what());
  }
  return cal;
}

#else

std::string calibrationToJson(const Calibration&, const std::string&, int) {
  CONCCL_THROW(concclNotSupported, "conccl was built without nlohmann/json");
}
Calibration calibrationFromJson(std::string_view) {
  CONCCL_THROW(concclNotSupported, "conccl was built without nlohmann/json");
}

#endif

Calibration loadCalibration(const std::string& path) {
  const std::string text = readTextFile(path, "calibration");
  try {
    return calibrationFromJson(text);
  } catch (Error& e) {
    e.addContext(path);
    throw;
  }
}

void saveCalibration(const std::string& path, const Calibration& calibration, const std::string& device, int ranks) {
  writeTextFile(path, calibrationToJson(calibration, device, ranks), "calibration");
}

}  // namespace conccl::c3
