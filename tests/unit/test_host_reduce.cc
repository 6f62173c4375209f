// The host reduction (the host backend's Reduce and the tests' reference) against independent arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "exec/host/host_reduce.h"

namespace conccl::exec {
namespace {

TEST(HostReduce, HalfAndBf16RoundTripAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(halfToFloat(floatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(halfToFloat(floatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(NAN))));
  // 1 + 2^-11 is exactly half-way between two halves: ties go to even (1.0).
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  for (float f : {1.0f, -3.0f, 0.5f, std::ldexp(1.0f, 100)}) EXPECT_EQ(bf16ToFloat(floatToBf16(f)), f);
  EXPECT_EQ(bf16ToFloat(floatToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(NAN))));
}

TEST(HostReduce, FloatOpsMatchDoubleArithmetic) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(0.5f, 1.5f);
  const size_t n = 1000;
  std::vector<float> a(n), b(n), c(n), out(n);
  for (size_t i = 0; i < n; ++i) a[i] = d(rng), b[i] = d(rng), c[i] = d(rng);
  std::vector<const void*> in{a.data(), b.data(), c.data()};
  reduceHost(in, out.data(), n, concclFloat32, concclSum);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], double(a[i]) + b[i] + c[i], 1e-5);
  reduceHost(in, out.data(), n, concclFloat32, concclAvg);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], (double(a[i]) + b[i] + c[i]) / 3, 1e-5);
  reduceHost(in, out.data(), n, concclFloat32, concclProd);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], double(a[i]) * b[i] * c[i], 1e-5);
  reduceHost(in, out.data(), n, concclFloat32, concclMax);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], std::max({a[i], b[i], c[i]}));
  reduceHost(in, out.data(), n, concclFloat32, concclMin);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], std::min({a[i], b[i], c[i]}));
}

TEST(HostReduce, Bf16AccumulatesInFp32AndRoundsOnce) {
  // 256 + 1 + 1 in bf16 step by step would stay 256 (1 is below half an ulp of 256); fp32 accumulation gives 258.
  std::vector<uint16_t> a{floatToBf16(256.0f)}, b{floatToBf16(1.0f)}, c{floatToBf16(1.0f)}, out(1);
  reduceHost({a.data(), b.data(), c.data()}, out.data(), 1, concclBfloat16, concclSum);
  EXPECT_EQ(bf16ToFloat(out[0]), 258.0f);
}

TEST(HostReduce, IntegersWrapAndAverageByDivision) {
  std::vector<int8_t> a{100, -7, 127}, b{100, 3, 1}, out(3);
  reduceHost({a.data(), b.data()}, out.data(), 3, concclInt8, concclSum);
  EXPECT_EQ(out[0], static_cast<int8_t>(200));
  EXPECT_EQ(out[1], -4);
  EXPECT_EQ(out[2], static_cast<int8_t>(128));
  reduceHost({a.data(), b.data()}, out.data(), 3, concclInt8, concclAvg);
  EXPECT_EQ(out[1], -2);
  std::vector<uint64_t> x{UINT64_MAX, 5}, y{2, 7}, o(2);
  reduceHost({x.data(), y.data()}, o.data(), 2, concclUint64, concclSum);
  EXPECT_EQ(o[0], 1u);
  reduceHost({x.data(), y.data()}, o.data(), 2, concclUint64, concclMin);
  EXPECT_EQ(o[0], 2u);
  EXPECT_EQ(o[1], 5u);
  std::vector<int32_t> p{-3, 4}, q{5, -6}, r(2);
  reduceHost({p.data(), q.data()}, r.data(), 2, concclInt32, concclProd);
  EXPECT_EQ(r[0], -15);
  EXPECT_EQ(r[1], -24);
  reduceHost({p.data(), q.data()}, r.data(), 2, concclInt32, concclMax);
  EXPECT_EQ(r[0], 5);
  EXPECT_EQ(r[1], 4);
}

}  // namespace
}  // namespace conccl::exec
