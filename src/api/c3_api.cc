// concclC3Plan: the C3 planner (src/c3/planner.h) behind the public API, with the calibration named by
// CONCCL_C3_CALIBRATION and conccl's CTAs from the library's own decision code (src/c3/call_resources.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "api/api_guard.h"
#include "c3/calibration.h"
#include "c3/call_resources.h"
#include "c3/planner.h"

namespace conccl::api {
namespace {

c3::Dtype gemmDtype(int t) {
  switch (t) {
    case concclBfloat16:
      return c3::Dtype::kBf16;
    case concclFloat16:
      return c3::Dtype::kFp16;
    case concclFloat8e4m3:
      return c3::Dtype::kFp8E4M3;
    case concclFloat32:
      return c3::Dtype::kFp32;
    default:
      CONCCL_THROW(concclInvalidArgument, "gemmType must be concclBfloat16, concclFloat16, concclFloat8e4m3 or "
                                          "concclFloat32");
  }
}

// The caller's enum field read as the int it holds: a value outside the enum's range is the caller's error to
// report, and loading it as the enum type would be undefined behaviour (UBSan flags it).
template <typename Enum>
int rawEnum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int));
  int raw = 0;
  std::memcpy(&raw, &field, sizeof(raw));
  return raw;
}

c3::CollKind collKind(int c) {
  switch (c) {
    case concclC3AllGather:
      return c3::CollKind::kAllGather;
    case concclC3ReduceScatter:
      return c3::CollKind::kReduceScatter;
    case concclC3AllReduce:
      return c3::CollKind::kAllReduce;
    case concclC3AllToAll:
      return c3::CollKind::kAllToAll;
    case concclC3Broadcast:
      return c3::CollKind::kBroadcast;
  }
  CONCCL_THROW(concclInvalidArgument, "unknown collective " + std::to_string(c));
}

// NCCL's config.maxCTAs for nccl+RP: conccl-c3's --rp-coll-ctas default, with which that strategy's slowdowns are
// measured (conccl's own CTAs come from its decision code instead).
constexpr int kNcclRpCtas = 8;

// The public enum follows the order of c3::Strategy (serial .. conccl+RP).
concclC3Strategy_t publicStrategy(c3::Strategy s) { return concclC3Strategy_t(int(s)); }

// Calibration files are read once per path and process.
c3::Calibration calibrationFromEnvironment() {
  const char* path = std::getenv("CONCCL_C3_CALIBRATION");
  if (path == nullptr || *path == '\0') return c3::Calibration::defaults();
  static std::mutex mutex;
  static std::map<std::string, c3::Calibration> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(path);
  if (it == cache.end()) it = cache.emplace(path, c3::loadCalibration(path)).first;
  return it->second;
}

}  // namespace
}  // namespace conccl::api

extern "C" concclResult_t concclC3Plan(const concclC3Workload_t* workload, concclC3Plan_t* plan) {
  using namespace conccl;
  return api::apiCall(nullptr, "concclC3Plan", [&] {
    CONCCL_REQUIRE(workload != nullptr, "workload is NULL");
    CONCCL_REQUIRE(plan != nullptr, "plan is NULL");
    const concclC3Workload_t& w = *workload;
    CONCCL_REQUIRE(w.m > 0 && w.n > 0 && w.k > 0, "GEMM dimensions must be positive");
    CONCCL_REQUIRE(w.bytes > 0, "bytes must be positive");
    CONCCL_REQUIRE(w.nranks >= 1, "nranks must be >= 1");
    CONCCL_REQUIRE(w.smCount >= 0, "smCount must be >= 0 (0: 132)");
    const c3::GemmShape gemm{w.m, w.n, w.k, api::gemmDtype(api::rawEnum(w.gemmType))};
    const c3::CollectiveSpec coll{api::collKind(api::rawEnum(w.collective)), uint64_t(w.bytes), w.nranks, c3::Dtype::kBf16};
    const c3::MachineProfile machine = c3::MachineProfile::h200();
    const int sms = w.smCount > 0 ? w.smCount : machine.sms;

    std::vector<c3::Strategy> candidates;
    for (c3::Strategy s : c3::allStrategies()) {
      if (w.allowNccl || !c3::strategyUsesNccl(s)) candidates.push_back(s);
    }
    const double tG = c3::predictGemmTime(gemm, machine);
    const double tC = c3::predictCollTime(coll, c3::CommProfile{});
    const c3::Plan p = c3::plan(gemm, coll, tG, tC, api::calibrationFromEnvironment(), candidates, machine);
    // What conccl's call would occupy on a communicator of nranks GPUs created without a config struct.
    const concclCallResources_t call = c3::concclCallFootprint(coll, c3::defaultConfigFor(w.nranks));
    const c3::StrategyResources res =
        c3::strategyResources(p.best, coll.kind, sms, api::kNcclRpCtas, call.sms, 0, w.allowNccl != 0);

    concclC3Plan_t out{};
    out.strategy = api::publicStrategy(p.best);
    out.useConccl = res.conccl ? 1 : 0;
    out.gemmSmCount = res.gemmSmCount;
    out.collectiveCtas = res.collectiveCtas;
    out.collectiveHighPriority = res.highPriority ? 1 : 0;
    for (const c3::Prediction& pr : p.predictions) {
      if (pr.strategy == p.best) out.predictedUs = pr.tC3 * 1e6;
    }
    out.predictedSerialUs = (tG + tC) * 1e6;
    *plan = out;
  });
}
