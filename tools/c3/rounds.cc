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
  harness.median(Mode::kColl, {}, &baseline, false, 0, w);
  if (!run.ownIsBaseline) harness.median(Mode::kColl, {}, &own, run.highPriority, 0, w);
  harness.median(run.mode, runGemms, &own, run.highPriority, 0, w);

  std::vector<RoundTimes> rounds;
  for (int r = 0; r < config.rounds; ++r) {
    RoundTimes t;
    t.tG = harness.median(Mode::kGemm, fullGemms, nullptr, false, config.iters, 0).gemm;
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
