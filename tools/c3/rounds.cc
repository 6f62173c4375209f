#include "rounds.h"

namespace conccl::c3 {

std::vector<RoundTimes> measureRounds(Harness& harness, const std::vector<const Gemm*>& fullGemms,
                                      const std::vector<const Gemm*>& runGemms, Collective& baseline,
                                      const StrategyRun& run, const RoundsConfig& config) {
  using Mode = Harness::Mode;
  Collective& own = *run.coll;
  harness.prime(fullGemms, &baseline);
  harness.prime(runGemms, &own);
  // Warm-up once per measurement, so that every round is timed the same way.
  const int w = config.warmup;
  harness.median(Mode::kGemm, fullGemms, nullptr, false, 0, w);
  // RP strategies: the GEMM alone with its SM-count target too, so that each row shows what leaving those SMs free
  // costs the GEMM by itself (T_g_budget_ms, gemm_budget_cost), measured in the same rounds as T_g.
  const bool budgeted = run.gemmSmTarget > 0;
  if (budgeted) harness.median(Mode::kGemm, runGemms, nullptr, false, 0, w);
  harness.median(Mode::kColl, {}, &baseline, false, 0, w);
  if (!run.ownIsBaseline) harness.median(Mode::kColl, {}, &own, run.highPriority, 0, w);
  harness.median(run.mode, runGemms, &own, run.highPriority, 0, w);

  std::vector<RoundTimes> rounds;
  for (int r = 0; r < config.rounds; ++r) {
    RoundTimes t;
    t.tG = harness.median(Mode::kGemm, fullGemms, nullptr, false, config.iters, 0).gemm;
    if (budgeted) t.tGBudget = harness.median(Mode::kGemm, runGemms, nullptr, false, config.iters, 0).gemm;
    t.tC = harness.median(Mode::kColl, {}, &baseline, false, config.iters, 0).coll;
    t.tCOwn = run.ownIsBaseline ? t.tC : harness.median(Mode::kColl, {}, &own, run.highPriority, config.iters, 0).coll;
    const Harness::Sample both = harness.median(run.mode, runGemms, &own, run.highPriority, config.iters, 0);
    t.tC3 = both.total;
    t.tGOverlap = both.gemm;
    t.tCOverlap = both.coll;
    rounds.push_back(t);
  }
  return rounds;
}

}  // namespace conccl::c3
