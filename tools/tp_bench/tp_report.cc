#include "tp_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace conccl::tp {

const std::vector<Strategy>& allStrategies() {
  static const std::vector<Strategy> all = {Strategy::kGemm, Strategy::kColl, Strategy::kSerialNccl,
                                            Strategy::kNcclSplit, Strategy::kConcclFused};
  return all;
}

const char* strategyName(Strategy s) {
  switch (s) {
    case Strategy::kGemm:
      return "gemm";
    case Strategy::kColl:
      return "coll";
    case Strategy::kSerialNccl:
      return "serial-nccl";
    case Strategy::kNcclSplit:
      return "nccl-split";
    case Strategy::kConcclFused:
      return "conccl-fused";
  }
  return "?";
}

std::optional<Strategy> parseStrategy(std::string_view name) {
  for (Strategy s : allStrategies()) {
    if (name == strategyName(s)) return s;
  }
  return std::nullopt;
}

namespace {

const TpRow* findOk(const std::vector<TpRow>& rows, Strategy s) {
  for (const TpRow& r : rows) {
    if (r.strategy == s && r.error.empty() && !r.timesMs.empty()) return &r;
  }
  return nullptr;
}

}  // namespace

void finalizeShapeRows(std::vector<TpRow>& rows) {
  for (TpRow& r : rows) r.time = summarize(r.timesMs);
  const TpRow* gemm = findOk(rows, Strategy::kGemm);
  const TpRow* coll = findOk(rows, Strategy::kColl);
  const TpRow* serial = findOk(rows, Strategy::kSerialNccl);
  const std::optional<double> ideal =
      gemm && coll ? std::optional<double>(std::max(gemm->time.median, coll->time.median)) : std::nullopt;
  for (TpRow& r : rows) {
    r.idealMs.reset();
    r.vsIdeal.reset();
    r.speedup.reset();
    r.tflops = 0;
    if (!r.error.empty() || r.timesMs.empty() || r.time.median <= 0) continue;
    r.idealMs = ideal;
    if (ideal) r.vsIdeal = r.time.median / *ideal;
    if (serial) r.speedup = serial->time.median / r.time.median;
    // The collective alone does no arithmetic: no TFLOP/s for it.
    if (r.strategy != Strategy::kColl) r.tflops = r.shape.flopsPerRank() / (r.time.median * 1e-3) / 1e12;
  }
}

namespace {

std::string fixed(const std::optional<double>& v, const char* format) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), format, *v);
  return buf;
}

}  // namespace

std::string formatTableHeader() {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "#%-12s %-8s %6s %6s %6s %3s %-13s %9s %9s %9s %9s %7s %7s %7s  %s\n", "model", "op",
                "m", "n", "k", "tp", "strategy", "median", "min", "max", "ideal", "t/ideal", "speedup", "TFLOP/s",
                "check");
  std::string out = buf;
  std::snprintf(buf, sizeof(buf), "#%-12s %-8s %6s %6s %6s %3s %-13s %9s %9s %9s %9s %7s %7s %7s  %s\n", "", "", "", "",
                "", "", "", "(ms)", "(ms)", "(ms)", "(ms)", "", "(x)", "/GPU", "(rel.err)");
  return out + buf;
}

std::string formatTableRow(const TpRow& r) {
  char head[160];
  std::snprintf(head, sizeof(head), " %-12s %-8s %6lld %6lld %6lld %3d %-13s", r.shape.model.c_str(),
                opName(r.shape.op), static_cast<long long>(r.shape.m), static_cast<long long>(r.shape.n),
                static_cast<long long>(r.shape.k), r.shape.tp, strategyName(r.strategy));
  if (!r.error.empty()) return std::string(head) + "  error: " + r.error + "\n";
  std::string check = "-";
  if (r.checkError) check = fixed(r.checkError, "%.2e") + (r.checkFailed ? " FAILED" : " ok");
  char buf[256];
  std::snprintf(buf, sizeof(buf), " %9.3f %9.3f %9.3f %9s %7s %7s %7s  %s\n", r.time.median, r.time.min, r.time.max,
                fixed(r.idealMs, "%.3f").c_str(), fixed(r.vsIdeal, "%.2f").c_str(), fixed(r.speedup, "%.2f").c_str(),
                r.strategy == Strategy::kColl ? "-" : fixed(r.tflops, "%.1f").c_str(), check.c_str());
  return std::string(head) + buf;
}

namespace {

nlohmann::json optionalNumber(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

}  // namespace

nlohmann::json jsonRow(const TpRow& r, const std::string& device) {
  nlohmann::json j = {{"tool", "conccl-tp-bench"},
                      {"device", device},
                      {"model", r.shape.model},
                      {"op", opName(r.shape.op)},
                      {"m", r.shape.m},
                      {"n", r.shape.n},
                      {"k", r.shape.k},
                      {"tp", r.shape.tp},
                      {"dtype", "bf16"},
                      {"strategy", strategyName(r.strategy)}};
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j;
  }
  j["time_ms"] = {{"median", r.time.median}, {"min", r.time.min}, {"max", r.time.max}};
  j["times_ms"] = r.timesMs;
  j["ideal_ms"] = optionalNumber(r.idealMs);
  j["time_over_ideal"] = optionalNumber(r.vsIdeal);
  j["speedup_vs_serial_nccl"] = optionalNumber(r.speedup);
  j["tflops_per_gpu"] = r.strategy == Strategy::kColl ? nlohmann::json() : nlohmann::json(r.tflops);
  if (r.checkError) {
    // NaN and infinity are not JSON: such an error is written as null, with check_passed false.
    j["check_rel_error"] = std::isfinite(*r.checkError) ? nlohmann::json(*r.checkError) : nlohmann::json();
    j["check_passed"] = !r.checkFailed;
  }
  return j;
}

nlohmann::json jsonSkipped(const std::string& what, const std::string& reason) {
  return {{"tool", "conccl-tp-bench"}, {"shape", what}, {"skipped", reason}};
}

}  // namespace conccl::tp
