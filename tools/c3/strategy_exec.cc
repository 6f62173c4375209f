#include "strategy_exec.h"

#include <algorithm>

#include "cuda_timer.h"  // conccl-bench's HasRepeats

namespace conccl::c3 {

Backends::Backends(const std::vector<int>& rankDevices, const BackendOptions& options)
    : rankDevices_(rankDevices), options_(options), sharedGpu_(bench::HasRepeats(rankDevices)) {
  std::string why;
  ncclBaseline_ = nccl(NcclVariant::kDefault, &why) != nullptr;
  if (!ncclBaseline_) noNcclReason_ = why;
}

Backends::~Backends() = default;

NcclComms* Backends::nccl(NcclVariant v, std::string* why) {
  if (auto e = ncclError_.find(v); e != ncclError_.end()) {
    *why = e->second;
    return nullptr;
  }
  if (!nccl_.count(v)) {
    try {
      CONCCL_REQUIRE(!sharedGpu_, "NCCL does not allow two ranks on one GPU");
      nccl_[v] = std::make_unique<NcclComms>(rankDevices_, v, options_.rpCollCtas);
    } catch (const Error& e) {
      ncclError_[v] = e.what();
      *why = e.what();
      return nullptr;
    }
  }
  return nccl_[v].get();
}

ConcclComms* Backends::conccl(std::string* why) {
  if (!concclTried_) {
    concclTried_ = true;
    try {
      conccl_ = std::make_unique<ConcclComms>(rankDevices_);
    } catch (const Error& e) {
      concclError_ = e.what();
    }
  }
  if (!conccl_) *why = concclError_;
  return conccl_.get();
}

std::unique_ptr<Collective> Backends::baseline(const CollectiveSpec& spec) {
  std::string why;
  if (ncclBaseline_) return makeNcclCollective(*nccl(NcclVariant::kDefault, &why), spec);
  ConcclComms* c = conccl(&why);
  if (c == nullptr) CONCCL_THROW(concclSystemError, "no baseline collective: NCCL: " + noNcclReason_ + "; conccl: " + why);
  return makeConcclCollective(*c, spec);
}

StrategyRun Backends::prepare(Strategy st, const CollectiveSpec& spec) {
  StrategyRun run;
  if (!strategySupports(st, spec.kind)) {
    run.unavailable = std::string("skipped: NCCL has no copy-engine ") + collLabel(spec.kind);
    return run;
  }
  // The planner's resources; for conccl+RP the GEMM's target is replaced below by what conccl says this very call
  // occupies (concclCallResources), so the GEMM leaves exactly those SMs free.
  const StrategyResources res = strategyResources(st, spec.kind, options_.gpuSms, options_.rpCollCtas, 4,
                                                  options_.rpGemmSms, ncclBaseline_);
  std::string why;
  if (!res.conccl) {
    const NcclVariant v = st == Strategy::kNcclRp   ? NcclVariant::kReducedCtas
                          : st == Strategy::kNcclCe ? NcclVariant::kCopyEngine
                                                    : NcclVariant::kDefault;
    if (NcclComms* c = nccl(v, &why)) {
      run.coll = makeNcclCollective(*c, spec);
    } else {
      run.unavailable = "skipped: NCCL: " + why;
    }
  } else if (ConcclComms* c = conccl(&why)) {
    run.coll = makeConcclCollective(*c, spec);
    run.collectiveSms = concclCallSms(*c, spec);
  } else {
    run.unavailable = "skipped: conccl: " + why;
  }
  run.gemmSmTarget = res.gemmSmCount;
  if (st == Strategy::kConcclRp && run.coll && options_.rpGemmSms <= 0) {
    // SMs - the collective's SMs; a call that uses none (copy engines only) leaves the GEMM every SM.
    run.gemmSmTarget = run.collectiveSms > 0 ? std::max(8, options_.gpuSms - run.collectiveSms) : 0;
  }
  run.highPriority = res.highPriority;
  run.mode = st == Strategy::kSerial ? Harness::Mode::kSerial : Harness::Mode::kBoth;
  run.ownIsBaseline = st == Strategy::kSerial || (st == Strategy::kNccl && ncclBaseline_) ||
                      (st == Strategy::kConccl && !ncclBaseline_);
  return run;
}

}  // namespace conccl::c3
