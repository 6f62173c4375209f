// Strategy names, the overlap cost model and the planner (src/c3/planner.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "c3/call_resources.h"
#include "c3/planner.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

TEST(C3Strategy, NamesAndLists) {
  for (Strategy s : allStrategies()) EXPECT_EQ(parseStrategy(strategyName(s)), s);
  EXPECT_EQ(allStrategies().size(), 7u);
  EXPECT_EQ(parseStrategy("NCCL+sp"), Strategy::kNcclSp);
  EXPECT_EQ(parseStrategy("ncclce"), Strategy::kNcclCe);
  EXPECT_EQ(parseStrategyList("serial, conccl,nccl,conccl"),
            (std::vector<Strategy>{Strategy::kSerial, Strategy::kConccl, Strategy::kNccl}));
  std::vector<Strategy> withAuto = allStrategies();
  withAuto.push_back(Strategy::kAuto);
  EXPECT_EQ(parseStrategyList("all"), withAuto);
  EXPECT_EQ(parseStrategy("AUTO"), Strategy::kAuto);
  EXPECT_EQ(std::count(allStrategies().begin(), allStrategies().end(), Strategy::kAuto), 0);
  EXPECT_THROW(parseStrategyList("nccl,bogus"), Error);
  EXPECT_THROW(parseStrategyList(" , "), Error);
  try {
    parseStrategyList("bogus");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'bogus'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("conccl+RP"), std::string::npos);  // lists the known ones
  }
}

TEST(C3Strategy, Support) {
  EXPECT_TRUE(strategySupports(Strategy::kNcclCe, CollKind::kAllGather));
  EXPECT_TRUE(strategySupports(Strategy::kNcclCe, CollKind::kAllToAll));
  EXPECT_FALSE(strategySupports(Strategy::kNcclCe, CollKind::kReduceScatter));
  EXPECT_TRUE(strategySupports(Strategy::kConccl, CollKind::kReduceScatter));
  EXPECT_TRUE(strategyUsesNccl(Strategy::kNcclRp));
  EXPECT_FALSE(strategyUsesNccl(Strategy::kConccl));
  EXPECT_TRUE(strategyUsesConccl(Strategy::kConcclRp));
}

TEST(C3Model, OverlapTime) {
  // No interference: perfect overlap.
  EXPECT_DOUBLE_EQ(predictOverlapTime(3.0, 2.0, {1.0, 1.0}), 3.0);
  EXPECT_DOUBLE_EQ(predictOverlapTime(2.0, 3.0, {1.0, 1.0}), 3.0);
  // GEMM 1.5x slower (x = 3), collective 2x slower (y = 4): GEMM done at 3 with 3/4 of the collective done;
  // the last quarter runs alone: 3 + 0.25 x 2 = 3.5.
  EXPECT_DOUBLE_EQ(predictOverlapTime(2.0, 2.0, {1.5, 2.0}), 3.5);
  // Symmetric case: collective first.
  EXPECT_DOUBLE_EQ(predictOverlapTime(2.0, 2.0, {2.0, 1.5}), 3.5);
  // Full serialisation (each side twice as slow as alone for equal times) equals serial.
  EXPECT_DOUBLE_EQ(predictOverlapTime(1.0, 1.0, {2.0, 2.0}), 2.0);
  // Never below max(T_g, T_c), whatever the calibration says (slowdowns < 1 are clamped).
  EXPECT_DOUBLE_EQ(predictOverlapTime(1.0, 4.0, {0.5, 0.5}), 4.0);
  EXPECT_DOUBLE_EQ(predictOverlapTime(0.0, 4.0, {1.3, 1.3}), 4.0);
}

TEST(C3Model, IsolatedTimes) {
  const MachineProfile h200 = MachineProfile::h200();
  const GemmShape square{8192, 8192, 8192, Dtype::kBf16};
  EXPECT_NEAR(predictGemmTime(square, h200, 1.0), square.flops() / 989.4e12, 1e-12);
  const GemmShape thin{128, 28672, 8192, Dtype::kBf16};  // memory-bound: bytes / HBM
  EXPECT_NEAR(predictGemmTime(thin, h200, 1.0), thin.minimalBytes() / 4.8e12, 1e-12);
  const CommProfile comm{400e9, 20e-6};
  const CollectiveSpec ag{CollKind::kAllGather, 400'000'000, 8, Dtype::kBf16};
  EXPECT_NEAR(predictCollTime(ag, comm), 20e-6 + 400e6 * 7.0 / 8.0 / 400e9, 1e-12);
  // Half-peak size of the alpha-beta model: latency x busBw / factor.
  EXPECT_NEAR(modelHalfPeakSize(CollKind::kAllGather, 8, comm), 20e-6 * 400e9 * 8.0 / 7.0, 1e-3);
}

TEST(C3Planner, PicksCopyEnginesForComputeBoundAndSerialWhenOverlapCannotPay) {
  const GemmShape square{8192, 8192, 8192, Dtype::kBf16};
  const CollectiveSpec ag{CollKind::kAllGather, 256 << 20, 8, Dtype::kBf16};
  const Plan p = plan(square, ag, 1.4e-3, 1.4e-3, Calibration::defaults(), allStrategies());
  EXPECT_EQ(p.predictions.size(), allStrategies().size());
  EXPECT_EQ(p.best, Strategy::kConccl);
  for (const Prediction& pr : p.predictions) {
    if (pr.strategy == Strategy::kSerial) {
      EXPECT_DOUBLE_EQ(pr.tC3, 2.8e-3);
      EXPECT_NEAR(pr.fractionOfIdeal, 0.0, 1e-12);
    }
    EXPECT_GE(pr.tC3, std::max(pr.tG, pr.tC) - 1e-15);
    EXPECT_DOUBLE_EQ(pr.tCBase, 1.4e-3);
    EXPECT_NEAR(pr.overlapRatio, pr.tC3 / 1.4e-3, 1e-12);
  }

  // A calibration in which overlap makes everything 3x slower: serial wins.
  Calibration bad;
  for (Strategy s : allStrategies()) {
    for (GemmBound b : {GemmBound::kCompute, GemmBound::kMemory}) bad.costs[{s, b}] = {3.0, 3.0, 1.0, 0.0};
  }
  EXPECT_EQ(plan(square, ag, 1e-3, 1e-3, bad, allStrategies()).best, Strategy::kSerial);
}

TEST(C3Planner, LeavesOutUnsupportedStrategiesAndAddsReductionCost) {
  const GemmShape square{8192, 8192, 8192, Dtype::kBf16};
  const CollectiveSpec rs{CollKind::kReduceScatter, 64 << 20, 8, Dtype::kBf16};
  const Plan p = plan(square, rs, 1e-3, 1e-3, Calibration::defaults(), allStrategies());
  for (const Prediction& pr : p.predictions) EXPECT_NE(pr.strategy, Strategy::kNcclCe);
  EXPECT_EQ(p.predictions.size(), allStrategies().size() - 1);
  const Calibration cal = Calibration::defaults();
  EXPECT_GT(cal.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kReduceScatter).gemmSlowdown,
            cal.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kAllGather).gemmSlowdown);
  // Only the requested candidates are considered.
  const Plan only = plan(square, rs, 1e-3, 1e-3, cal, {Strategy::kNccl, Strategy::kNcclSp});
  EXPECT_EQ(only.predictions.size(), 2u);
  EXPECT_TRUE(only.best == Strategy::kNccl || only.best == Strategy::kNcclSp);
}

// conccl's figures are whatever the call occupies (concclCallResources' sms), never a constant of the planner.
TEST(C3Strategy, ResourcesTakeConcclsSmsFromTheCall) {
  for (int concclSms : {0, 1, 3, 8, 20}) {
    for (CollKind kind : {CollKind::kAllGather, CollKind::kReduceScatter}) {
      const StrategyResources rp = strategyResources(Strategy::kConcclRp, kind, 132, 8, concclSms, 0, true);
      EXPECT_TRUE(rp.conccl);
      EXPECT_EQ(rp.collectiveCtas, concclSms);
      EXPECT_EQ(rp.gemmSmCount, concclSms > 0 ? 132 - concclSms : 0);  // no SM taken: the GEMM keeps them all
      const StrategyResources ce = strategyResources(Strategy::kConccl, kind, 132, 8, concclSms, 0, true);
      EXPECT_EQ(ce.collectiveCtas, concclSms);
      EXPECT_EQ(ce.gemmSmCount, 0);
      EXPECT_EQ(strategyResources(Strategy::kSerial, kind, 132, 8, concclSms, 0, false).collectiveCtas, concclSms);
      EXPECT_EQ(strategyResources(Strategy::kSerial, kind, 132, 8, concclSms, 0, true).collectiveCtas, 0);  // NCCL's
    }
  }
  EXPECT_EQ(strategyResources(Strategy::kConcclRp, CollKind::kAllReduce, 12, 8, 8, 0, true).gemmSmCount, 8);
  EXPECT_EQ(strategyResources(Strategy::kConcclRp, CollKind::kAllReduce, 132, 8, 8, 100, true).gemmSmCount, 100);
  const StrategyResources nccl = strategyResources(Strategy::kNcclRp, CollKind::kAllReduce, 132, 16, 8, 0, true);
  EXPECT_FALSE(nccl.conccl);
  EXPECT_EQ(nccl.collectiveCtas, 16);
  EXPECT_EQ(nccl.gemmSmCount, 116);
}

// The footprint the planner uses is the executor's decision for the call (exec/call_path.h), without a GPU.
TEST(C3Strategy, ConcclCallFootprintIsTheDecisionCodes) {
  Config config;  // the defaults: auto reduction CTAs, smBudget 8, 64 KiB small-message threshold
  const CollectiveSpec bigRs{CollKind::kReduceScatter, uint64_t{256} << 20, 8, Dtype::kBf16};
  concclCallResources_t r = concclCallFootprint(bigRs, config);
  EXPECT_EQ(r.path, concclPathReduceKernel);
  EXPECT_EQ(r.sms, 8);
  config.reduceCtas = 2;
  config.smBudget = 2;
  EXPECT_EQ(concclCallFootprint(bigRs, config).sms, 2);
  config = Config{};
  // An all-gather moves data on copy engines; its own block is a copy inside the rank's GPU.
  const CollectiveSpec bigAg{CollKind::kAllGather, uint64_t{64} << 20, 8, Dtype::kBf16};
  r = concclCallFootprint(bigAg, config);
  EXPECT_EQ(r.path, concclPathCopyEngines);
  EXPECT_EQ(r.sms, 0);
  EXPECT_EQ(r.sameDeviceCopyBytes, size_t{8} << 20);
  // engine = copy sends the own block through a peer, and turns the small kernel off.
  config.engine = concclEngineCopy;
  EXPECT_EQ(concclCallFootprint(bigAg, config).sameDeviceCopyBytes, 0u);
  const CollectiveSpec tinyAr{CollKind::kAllReduce, 4096, 8, Dtype::kBf16};
  EXPECT_EQ(concclCallFootprint(tinyAr, config).path, concclPathReduceKernel);
  EXPECT_EQ(concclCallFootprint(tinyAr, Config{}).path, concclPathSmallKernel);
  EXPECT_EQ(concclCallFootprint(tinyAr, Config{}).sms, 1);
}

TEST(C3Planner, CopyEngineIssueCostLosesAtTinySizes) {
  // 20 us GEMM beside a 10 us collective: the 30 us copy-engine issue cost makes conccl worse than NCCL.
  const GemmShape g{128, 8192, 8192, Dtype::kBf16};
  const CollectiveSpec ag{CollKind::kAllGather, 1 << 20, 8, Dtype::kBf16};
  const Plan p = plan(g, ag, 20e-6, 10e-6, Calibration::defaults(), {Strategy::kNccl, Strategy::kConccl});
  EXPECT_EQ(p.best, Strategy::kNccl);
}

TEST(C3Planner, MeasuredOwnTimesAndTheBaselineInF) {
  // A strategy whose own collective is slower than NCCL's: F is against NCCL's T_c, so it is lower than it
  // would be against its own, and the planner takes the measured own time over the derived one.
  const GemmShape square{8192, 8192, 8192, Dtype::kBf16};
  const CollectiveSpec ag{CollKind::kAllGather, 256 << 20, 8, Dtype::kBf16};
  Calibration none;
  for (Strategy s : allStrategies()) {
    for (GemmBound b : {GemmBound::kCompute, GemmBound::kMemory}) none.costs[{s, b}] = {1.0, 1.0, 1.0, 0.0};
  }
  const Plan p = plan(square, ag, 1.0, 1.0, none, {Strategy::kNccl, Strategy::kConccl}, MachineProfile::h200(),
                      {{Strategy::kConccl, 1.5}});
  ASSERT_EQ(p.predictions.size(), 2u);
  EXPECT_DOUBLE_EQ(p.predictions[1].tC, 1.5);
  EXPECT_DOUBLE_EQ(p.predictions[1].tC3, 1.5);
  EXPECT_NEAR(p.predictions[1].fractionOfIdeal, 1.0 / 3.0, 1e-12);  // own T_c in F would say 100%
  EXPECT_DOUBLE_EQ(p.predictions[0].fractionOfIdeal, 1.0);
  EXPECT_EQ(p.best, Strategy::kNccl);
  // auto among the candidates is ignored: it is the pick, not a way of running.
  EXPECT_EQ(plan(square, ag, 1.0, 1.0, none, {Strategy::kAuto, Strategy::kNccl}).predictions.size(), 1u);
}

TEST(C3Model, InferCostInvertsTheModel) {
  // Whatever the slowdowns, the inferred ones reproduce the concurrent time they came from.
  for (auto [tG, tC, a, b] : {std::tuple{2.0, 1.0, 1.3, 1.2}, std::tuple{1.0, 2.0, 1.5, 1.1},
                              std::tuple{1.0, 1.0, 1.01, 1.05}, std::tuple{1.0, 0.3, 2.0, 3.0}}) {
    const double x = a * tG, y = b * tC;
    // Each side's end inside the concurrent run, as the model has it.
    const double tC3 = predictOverlapTime(tG, tC, {a, b});
    const double gEnd = x <= y ? x : tC3;
    const double cEnd = x <= y ? tC3 : y;
    const std::optional<StrategyCost> c = inferCost(tG, tC, gEnd, cEnd);
    ASSERT_TRUE(c.has_value());
    EXPECT_NEAR(predictOverlapTime(tG, tC, *c), tC3, 1e-12) << tG << " " << tC << " " << a << " " << b;
    // The side that finished first is recovered exactly.
    if (x <= y) {
      EXPECT_NEAR(c->gemmSlowdown, a, 1e-12);
    } else {
      EXPECT_NEAR(c->collSlowdown, b, 1e-12);
    }
  }
  // Serial behaviour (the GEMM made no progress beside the collective) reads as serial.
  const std::optional<StrategyCost> serialLike = inferCost(1.0, 1.0, 2.0, 1.0);
  ASSERT_TRUE(serialLike.has_value());
  EXPECT_NEAR(predictOverlapTime(1.0, 1.0, *serialLike), 2.0, 2e-3);
  // Noise below 1 is read as no slowdown; missing times give nothing.
  EXPECT_DOUBLE_EQ(inferCost(1.0, 1.0, 0.99, 0.98)->gemmSlowdown, 1.0);
  EXPECT_FALSE(inferCost(1.0, 1.0, NAN, 1.0).has_value());
  EXPECT_FALSE(inferCost(0.0, 1.0, 1.0, 1.0).has_value());
}

TEST(C3Calibration, MeasuredKindEntriesWinOverPriors) {
  Calibration cal = Calibration::defaults();
  const StrategyCost prior = cal.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kReduceScatter);
  EXPECT_DOUBLE_EQ(prior.gemmSlowdown, 1.01 * 1.03);  // the prior with the reduction factor
  cal.kindCosts[{Strategy::kConccl, GemmBound::kCompute, CollKind::kReduceScatter}] = {1.2, 1.1, 1.3, 0.0};
  const StrategyCost measured = cal.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kReduceScatter);
  EXPECT_DOUBLE_EQ(measured.gemmSlowdown, 1.2);  // as measured: the reduction's SMs are in it already
  EXPECT_DOUBLE_EQ(measured.collTimeScale, 1.3);
  EXPECT_DOUBLE_EQ(cal.cost(Strategy::kConccl, GemmBound::kCompute, CollKind::kAllGather).gemmSlowdown, 1.01);
}

}  // namespace
}  // namespace conccl::c3
