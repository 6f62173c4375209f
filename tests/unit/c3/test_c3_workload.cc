// GEMM intensity / boundedness, bus-bandwidth factors and the latency/bandwidth split (src/c3/workload.h).
#include <gtest/gtest.h>

#include <cmath>

#include "c3/workload.h"
#include "base/error.h"

namespace conccl::c3 {
namespace {

TEST(C3Gemm, MachineBalanceOfH200) {
  const MachineProfile h200 = MachineProfile::h200();
  EXPECT_NEAR(h200.balance(Dtype::kBf16), 206.0, 0.5);  // FACTS.md: about 206 FLOP/B for bf16
  EXPECT_DOUBLE_EQ(h200.balance(Dtype::kFp16), h200.balance(Dtype::kBf16));
  EXPECT_NEAR(h200.balance(Dtype::kFp8E4M3), 2 * h200.balance(Dtype::kBf16), 1.0);
}

TEST(C3Gemm, IntensityAndBound) {
  const MachineProfile h200 = MachineProfile::h200();
  const GemmShape square{8192, 8192, 8192, Dtype::kBf16};
  EXPECT_DOUBLE_EQ(square.flops(), 2.0 * 8192.0 * 8192.0 * 8192.0);
  EXPECT_DOUBLE_EQ(square.minimalBytes(), 3.0 * 8192.0 * 8192.0 * 2.0);
  EXPECT_NEAR(square.arithmeticIntensity(), 8192.0 / 3.0, 1e-9);
  EXPECT_EQ(classifyGemm(square, h200), GemmBound::kCompute);
  // FACTS.md's memory-bound example.
  const GemmShape thin{32768, 8192, 128, Dtype::kBf16};
  EXPECT_LT(thin.arithmeticIntensity(), 206.0);
  EXPECT_EQ(classifyGemm(thin, h200), GemmBound::kMemory);
  // Decode-sized GEMM (M = 128): intensity ~ M, memory-bound; M = 512 is compute-bound.
  EXPECT_EQ(classifyGemm({128, 28672, 8192, Dtype::kBf16}, h200), GemmBound::kMemory);
  EXPECT_EQ(classifyGemm({512, 28672, 8192, Dtype::kBf16}, h200), GemmBound::kCompute);
  // fp8: 1-byte inputs, 2-byte output, and twice the balance.
  const GemmShape fp8{1024, 1024, 1024, Dtype::kFp8E4M3};
  EXPECT_DOUBLE_EQ(fp8.minimalBytes(), 1024.0 * 1024.0 * (1 + 1 + 2));
  EXPECT_EQ(classifyGemm({128, 16384, 16384, Dtype::kFp8E4M3}, h200), GemmBound::kMemory);
  EXPECT_DOUBLE_EQ(GemmShape{}.arithmeticIntensity(), 0.0);
}

TEST(C3Gemm, DtypeNames) {
  for (Dtype d : {Dtype::kBf16, Dtype::kFp16, Dtype::kFp8E4M3, Dtype::kFp32}) EXPECT_EQ(parseDtype(dtypeName(d)), d);
  EXPECT_EQ(parseDtype("BF16"), Dtype::kBf16);
  EXPECT_FALSE(parseDtype("int4").has_value());
}

TEST(C3Collective, BusBandwidthFactorsFollowNcclTests) {
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kAllGather, 8), 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kReduceScatter, 8), 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kAllToAll, 4), 3.0 / 4.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kAllReduce, 8), 14.0 / 8.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busBwFactor(CollKind::kAllGather, 1), 0.0);
  EXPECT_THROW(busBwFactor(CollKind::kAllGather, 0), Error);
  const CollectiveSpec ag{CollKind::kAllGather, 1000, 8, Dtype::kBf16};
  EXPECT_DOUBLE_EQ(algBw(1000, 1e-6), 1e9);
  EXPECT_DOUBLE_EQ(busBw(ag, 1e-6), 1e9 * 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(algBw(1000, 0.0), 0.0);
}

TEST(C3Collective, CallCount) {
  EXPECT_EQ((CollectiveSpec{CollKind::kAllGather, 64 << 20, 8, Dtype::kBf16}.callCount()), (64u << 20) / 16);
  EXPECT_EQ((CollectiveSpec{CollKind::kAllReduce, 64 << 20, 8, Dtype::kBf16}.callCount()), (64u << 20) / 2);
  EXPECT_EQ((CollectiveSpec{CollKind::kAllToAll, 1000, 8, Dtype::kFp8E4M3}.callCount()), 125u);
  EXPECT_EQ((CollectiveSpec{CollKind::kAllGather, 10, 8, Dtype::kBf16}.callCount()), 0u);
}

TEST(C3Collective, KindNames) {
  for (CollKind k : {CollKind::kAllGather, CollKind::kReduceScatter, CollKind::kAllReduce, CollKind::kAllToAll,
                     CollKind::kBroadcast}) {
    EXPECT_EQ(parseCollKind(collLabel(k)), k);
  }
  EXPECT_EQ(parseCollKind("AllGather"), CollKind::kAllGather);
  EXPECT_EQ(parseCollKind("a2a"), CollKind::kAllToAll);
  EXPECT_EQ(parseCollKind("reduce_scatter"), CollKind::kReduceScatter);
  EXPECT_FALSE(parseCollKind("gather").has_value());
  // The library's other kinds are no C3 collectives: refused, never given a made-up label or bus factor.
  EXPECT_FALSE(isC3Collective(CollKind::kReduce));
  EXPECT_TRUE(isC3Collective(CollKind::kBroadcast));
  EXPECT_THROW(collLabel(CollKind::kGather), Error);
  EXPECT_THROW(busBwFactor(CollKind::kSendRecv, 8), Error);
  EXPECT_THROW((CollectiveSpec{CollKind::kScatter, 1024, 8, Dtype::kBf16}.callCount()), Error);
}

TEST(C3Collective, HalfPeakSizeInterpolatesInLogSize) {
  constexpr uint64_t kMiB = 1 << 20;
  // Unsorted on purpose. Peak 100, half 50 lies between 4 MiB (40) and 8 MiB (80): a quarter of the way.
  const std::vector<BusBwPoint> curve = {{8 * kMiB, 80}, {1 * kMiB, 10}, {16 * kMiB, 100},
                                         {2 * kMiB, 20}, {4 * kMiB, 40}, {32 * kMiB, 98}};
  const std::optional<double> half = halfPeakSize(curve);
  ASSERT_TRUE(half.has_value());
  EXPECT_NEAR(*half, 4.0 * kMiB * std::pow(2.0, 0.25), 1.0);
  EXPECT_EQ(classifyCollective(4 * kMiB, *half), CollBound::kLatency);
  EXPECT_EQ(classifyCollective(8 * kMiB, *half), CollBound::kBandwidth);
  EXPECT_EQ(classifyCollective(uint64_t(*half) + 1, *half), CollBound::kBandwidth);
  // Exactly half at a measured point, and already past half at the first point.
  EXPECT_DOUBLE_EQ(*halfPeakSize({{1024, 10}, {2048, 50}, {4096, 100}}), 2048.0);
  EXPECT_DOUBLE_EQ(*halfPeakSize({{1024, 60}, {2048, 100}}), 1024.0);
  EXPECT_FALSE(halfPeakSize({}).has_value());
  EXPECT_FALSE(halfPeakSize({{1024, 0}, {2048, 0}}).has_value());
}

}  // namespace
}  // namespace conccl::c3
