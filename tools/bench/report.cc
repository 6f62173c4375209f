#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace conccl::bench {

TimeStats ComputeStats(std::vector<double> seconds) {
  TimeStats s;
  if (seconds.empty()) return s;
  std::sort(seconds.begin(), seconds.end());
  s.mean_s = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  auto rank = [&](double p) {
    const auto k = static_cast<size_t>(std::ceil(p * static_cast<double>(seconds.size())));
    return seconds[std::clamp<size_t>(k, 1, seconds.size()) - 1];
  };
  s.p50_s = rank(0.50);
  s.p99_s = rank(0.99);
  return s;
}

double AlgBw(size_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0.0; }

namespace {

std::string Printf(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

// nccl-tests prints times with fewer decimals as they grow, keeping the column 7 wide.
std::string TimeUs(double seconds) {
  const double us = seconds * 1e6;
  if (us < 10000) return Printf("%7.2f", us);
  if (us < 100000) return Printf("%7.1f", us);
  return Printf("%7.0f", us);
}

std::string Variant(const VariantResult& v) {
  if (!v.present) return Printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
  if (!v.error.empty()) return Printf("  %7s  %6s  %6s  %6s", "ERR", "ERR", "ERR", "ERR");
  const std::string wrong = v.wrong ? std::to_string(*v.wrong) : "N/A";
  return "  " + TimeUs(v.time.mean_s) + Printf("  %6.2f  %6.2f  %6s", v.algbw, v.busbw, wrong.c_str());
}

std::string Percentiles(const VariantResult& v) {
  if (!v.present || !v.error.empty()) return Printf("  %7s  %7s", "N/A", "N/A");
  return "  " + TimeUs(v.time.p50_s) + "  " + TimeUs(v.time.p99_s);
}

std::string HostTime(const VariantResult& v) {
  if (!v.present || !v.error.empty()) return Printf("  %7s", "N/A");
  return "  " + TimeUs(v.host_s);
}

}  // namespace

std::vector<std::string> ColumnHeader() {
  return {
      Printf("# %10s  %12s  %8s  %6s  %6s  %31s  %31s  %-8s  %5s  %16s  %16s  %16s", "", "", "", "", "",
             "out-of-place           ", "in-place           ", "", "", "out-of-place", "in-place", "host per call"),
      Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %-8s  %5s  %7s  %7s  %7s  %7s  %7s  "
             "%7s",
             "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
             "#wrong", "backend", "sms", "p50", "p99", "p50", "p99", "oop", "ip"),
      Printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %-8s  %5s  %7s  %7s  %7s  %7s  %7s  "
             "%7s",
             "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "", "",
             "(us)", "(us)", "(us)", "(us)", "(us)", "(us)"),
  };
}

std::string SmLabel(const SmUsage& sms) {
  if (sms.sms < 0) return "?";
  std::string s = (sms.upper_bound ? "<=" : "") + std::to_string(sms.sms);
  if (sms.copy_kernels) s += "+";  // plus CUDA's same-device copy kernels, of unknown size (backend.h)
  if (sms.sm_path) s += "!";
  return s;
}

std::string FormatRow(const RowResult& row) {
  std::string s =
      Printf("  %10zu  %12zu  %8s  %6s  %6d", row.size_bytes, row.count, row.type.c_str(), row.redop.c_str(), row.root);
  s += Variant(row.out_of_place) + Variant(row.in_place);
  s += Printf("  %-8s  %5s", row.backend.c_str(), SmLabel(row.sms).c_str());
  s += Percentiles(row.out_of_place) + Percentiles(row.in_place);
  s += HostTime(row.out_of_place) + HostTime(row.in_place);
  return s;
}

nlohmann::json JsonRow(const RowResult& row, bool in_place) {
  const VariantResult& v = in_place ? row.in_place : row.out_of_place;
  nlohmann::json j = {
      {"backend", row.backend},
      {"coll", row.coll},
      {"size", row.size_bytes},
      {"count", row.count},
      {"type", row.type},
      {"redop", row.redop},
      {"root", row.root},
      {"nranks", row.nranks},
      {"threads", row.threads},
      {"gpus_shared", row.gpus_shared},
      {"in_place", in_place},
      {"sms", row.sms.sms},
      {"sms_upper_bound", row.sms.upper_bound},
      {"sm_fallback", row.sms.sm_path},
      {"sms_note", row.sms.note},
      {"sms_copy_kernels", row.sms.copy_kernels},
      {"same_device_copy_bytes", row.sms.same_device_copy_bytes},
  };
  const bool ok = v.present && v.error.empty();
  auto num = [&](double x) { return ok ? nlohmann::json(x) : nlohmann::json(nullptr); };
  j["time_us"] = num(v.time.mean_s * 1e6);
  j["p50_us"] = num(v.time.p50_s * 1e6);
  j["p99_us"] = num(v.time.p99_s * 1e6);
  j["host_us"] = num(v.host_s * 1e6);
  j["algbw_GBps"] = num(v.algbw);
  j["busbw_GBps"] = num(v.busbw);
  j["wrong"] = ok && v.wrong ? nlohmann::json(*v.wrong) : nlohmann::json(nullptr);
  if (!v.present) j["skipped"] = "no such variant";
  if (!v.error.empty()) j["error"] = v.error;
  return j;
}

}  // namespace conccl::bench
