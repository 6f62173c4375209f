// Interleaved measurement rounds (FACTS.md: times that enter one F are measured interleaved, because clocks
// drift between runs): for one strategy, each round measures T_g, for RP strategies the GEMM alone with its SM-count
// target (the cost of leaving SMs free), the baseline's T_c, the strategy's own T_c (unless it is the baseline's) and
// T_c3, one after the other; each is the median of `iters` gated runs.
#pragma once

#include <vector>

#include "c3/metrics.h"
#include "harness.h"
#include "strategy_exec.h"

namespace conccl::c3 {

struct RoundsConfig {
  int rounds = 5;
  int iters = 10;  // gated runs per measurement in a round
  int warmup = 2;  // untimed runs of each measurement before the first round
};

// `fullGemms`: the GEMM on all SMs (T_g); `runGemms`: the GEMM as the strategy runs it (an SM budget for RP).
std::vector<RoundTimes> measureRounds(Harness& harness, const std::vector<const Gemm*>& fullGemms,
                                      const std::vector<const Gemm*>& runGemms, Collective& baseline,
                                      const StrategyRun& run, const RoundsConfig& config);

}  // namespace conccl::c3
