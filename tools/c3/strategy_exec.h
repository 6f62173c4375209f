// How each strategy of conccl-c3 runs (docs/c3.md, "Strategies"): which collective (backend and
// configuration), the GEMM's SM budget, stream priority, and whether GEMM and collective overlap or run one
// after the other. Also the baseline collective of S, S_ideal, F and R: NCCL's, conccl's where NCCL is absent.
// The communicators live for the whole run (their creation is not measured).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "c3/planner.h"
#include "collectives.h"
#include "harness.h"

namespace conccl::c3 {

struct StrategyRun {
  std::unique_ptr<Collective> coll;  // null: the strategy cannot run, see `unavailable`
  std::string unavailable;           // "skipped: ..." when coll is null
  int gemmSmTarget = 0;              // 0: all SMs
  int collectiveSms = 0;             // conccl strategies: SMs the call occupies per GPU (concclCallResources)
  bool highPriority = false;
  Harness::Mode mode = Harness::Mode::kBoth;
  bool ownIsBaseline = false;  // the strategy's collective is the baseline's (nccl, serial): not measured twice
};

struct BackendOptions {
  int gpuSms = 132;
  int rpCollCtas = 8;  // nccl+RP: NCCL maxCTAs
  int rpGemmSms = 0;   // RP strategies' GEMM SM-count target (0: SMs - the collective's share)
};

class Backends {
 public:
  // Tries NCCL's default communicators at once (they decide the baseline); the others start on first use.
  Backends(const std::vector<int>& rankDevices, const BackendOptions& options);
  ~Backends();
  Backends(const Backends&) = delete;
  Backends& operator=(const Backends&) = delete;

  const char* baselineName() const { return ncclBaseline_ ? "nccl" : "conccl"; }
  // Why NCCL is not the baseline ("" when it is).
  const std::string& noNcclReason() const { return noNcclReason_; }

  // The baseline collective for `spec`. Throws conccl::Error when it cannot start.
  std::unique_ptr<Collective> baseline(const CollectiveSpec& spec);
  // Everything `strategy` (not auto) needs to run `spec`.
  StrategyRun prepare(Strategy strategy, const CollectiveSpec& spec);

 private:
  NcclComms* nccl(NcclVariant variant, std::string* why);
  ConcclComms* conccl(std::string* why);

  std::vector<int> rankDevices_;
  BackendOptions options_;
  bool sharedGpu_ = false;
  bool ncclBaseline_ = false;
  std::string noNcclReason_;
  std::map<NcclVariant, std::unique_ptr<NcclComms>> nccl_;
  std::map<NcclVariant, std::string> ncclError_;
  std::unique_ptr<ConcclComms> conccl_;
  std::string concclError_;
  bool concclTried_ = false;
};

}  // namespace conccl::c3
