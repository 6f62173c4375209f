// conccl-bench host reference: conversions, reductions, input data and the #wrong comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "reference.h"
#include "types.h"

namespace conccl::bench {
namespace {

TEST(BenchTypes, HalfConversionsRoundTripAndRound) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(70000.0f), 0x7c00);                      // overflow to infinity
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie rounds to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
}

TEST(BenchTypes, Bf16ConversionsRound) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(-3.0f)), -3.0f);
}

TEST(BenchTypes, NamesAndAliases) {
  EXPECT_EQ(FindDType("float")->type, concclFloat32);
  EXPECT_EQ(FindDType("half")->type, concclFloat16);
  EXPECT_EQ(FindDType("bf16")->type, concclBfloat16);
  EXPECT_EQ(FindDType("fp8e4m3")->size, 1u);
  EXPECT_FALSE(FindDType("fp8e4m3")->reducible);
  EXPECT_EQ(FindDType("nope"), nullptr);
  EXPECT_STREQ(RedOpName(concclAvg), "avg");
}

TEST(BenchReference, RandomDataIsSeededAndNotZero) {
  const Bytes a = RandomElements(concclFloat32, 1000, 42, concclSum, 4);
  const Bytes b = RandomElements(concclFloat32, 1000, 42, concclSum, 4);
  const Bytes c = RandomElements(concclFloat32, 1000, 43, concclSum, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  size_t zeros = 0;
  for (size_t i = 0; i < 1000; ++i) zeros += LoadFloat(concclFloat32, a.data(), i) == 0.0;
  EXPECT_LT(zeros, 10u);
  EXPECT_NE(InputSeed(1, 0, 64, 0, 0, 0), InputSeed(1, 1, 64, 0, 0, 0));
  EXPECT_NE(InputSeed(1, 0, 64, 0, 0, 0), InputSeed(1, 0, 128, 0, 0, 0));
}

TEST(BenchReference, IntegerSumAndAvgStayInRange) {
  // int8 over 8 ranks: |x| <= 127/8, so sums never overflow and averages are well defined.
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const Bytes v = RandomElements(concclInt8, 256, seed, concclSum, 8);
    for (size_t i = 0; i < 256; ++i) {
      EXPECT_LE(std::abs(static_cast<int8_t>(v[i])), 127 / 8);
    }
  }
}

TEST(BenchReference, IntegerReductionsWrapAndTruncate) {
  const int8_t a[] = {100, -7, 3, -128};
  const int8_t b[] = {100, 2, -5, -1};
  std::vector<const unsigned char*> in = {reinterpret_cast<const unsigned char*>(a),
                                          reinterpret_cast<const unsigned char*>(b)};
  int8_t out[4];
  ReduceRanks(concclInt8, concclSum, in, 0, 4, reinterpret_cast<unsigned char*>(out), nullptr);
  EXPECT_EQ(out[0], static_cast<int8_t>(200 - 256));  // wraps like the C type
  EXPECT_EQ(out[1], -5);
  ReduceRanks(concclInt8, concclAvg, in, 1, 2, reinterpret_cast<unsigned char*>(out), nullptr);
  EXPECT_EQ(out[0], -2);  // -5 / 2 truncates toward zero
  EXPECT_EQ(out[1], -1);
  ReduceRanks(concclInt8, concclMax, in, 0, 4, reinterpret_cast<unsigned char*>(out), nullptr);
  EXPECT_EQ(out[3], -1);
  ReduceRanks(concclInt8, concclMin, in, 0, 4, reinterpret_cast<unsigned char*>(out), nullptr);
  EXPECT_EQ(out[3], -128);
  ReduceRanks(concclInt8, concclProd, in, 1, 1, reinterpret_cast<unsigned char*>(out), nullptr);
  EXPECT_EQ(out[0], -14);
}

TEST(BenchReference, FloatReductionsAndTolerance) {
  const float a[] = {1.0f, 2.0f, -3.0f};
  const float b[] = {0.5f, 4.0f, 1.0f};
  std::vector<const unsigned char*> in = {reinterpret_cast<const unsigned char*>(a),
                                          reinterpret_cast<const unsigned char*>(b)};
  float out[3];
  std::vector<double> scale;
  ReduceRanks(concclFloat32, concclSum, in, 0, 3, reinterpret_cast<unsigned char*>(out), &scale);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[2], -2.0f);
  EXPECT_DOUBLE_EQ(scale[2], 4.0);
  ReduceRanks(concclFloat32, concclAvg, in, 0, 3, reinterpret_cast<unsigned char*>(out), &scale);
  EXPECT_EQ(out[1], 3.0f);
  ReduceRanks(concclFloat32, concclProd, in, 0, 3, reinterpret_cast<unsigned char*>(out), &scale);
  EXPECT_EQ(out[1], 8.0f);

  // Within tolerance: one ulp off; outside: a visibly wrong value; NaN is always wrong.
  ReduceRanks(concclFloat32, concclSum, in, 0, 3, reinterpret_cast<unsigned char*>(out), &scale);
  float got[3];
  std::memcpy(got, out, sizeof(got));
  got[0] = std::nextafter(got[0], 10.0f);
  EXPECT_EQ(CountWrong(concclFloat32, concclSum, 2, reinterpret_cast<unsigned char*>(got),
                       reinterpret_cast<unsigned char*>(out), 3, &scale),
            0u);
  got[1] += 0.01f;
  got[2] = NAN;
  EXPECT_EQ(CountWrong(concclFloat32, concclSum, 2, reinterpret_cast<unsigned char*>(got),
                       reinterpret_cast<unsigned char*>(out), 3, &scale),
            2u);
}

TEST(BenchReference, HalfSumToleranceScalesWithRanks) {
  // Eight fp16 inputs summed in a different order and accumulated in fp32 can differ from the double
  // reference by a few ulps; the tolerance grows with the rank count.
  constexpr int kRanks = 8;
  std::vector<Bytes> inputs;
  std::vector<const unsigned char*> in;
  for (int r = 0; r < kRanks; ++r) inputs.push_back(RandomElements(concclFloat16, 512, 100 + r, concclSum, kRanks));
  for (const Bytes& b : inputs) in.push_back(b.data());
  Bytes expected(512 * 2), got(512 * 2);
  std::vector<double> scale;
  ReduceRanks(concclFloat16, concclSum, in, 0, 512, expected.data(), &scale);
  for (size_t i = 0; i < 512; ++i) {
    float acc = 0;  // reverse order, fp32 accumulation, like a device reduction might do it
    for (int r = kRanks - 1; r >= 0; --r) acc += static_cast<float>(LoadFloat(concclFloat16, in[r], i));
    StoreFloat(concclFloat16, got.data(), i, acc);
  }
  EXPECT_EQ(CountWrong(concclFloat16, concclSum, kRanks, got.data(), expected.data(), 512, &scale), 0u);
}

TEST(BenchReference, MovementIsBitwise) {
  const Bytes a = RandomElements(concclFloat8e4m3, 64, 7, -1, 4);
  Bytes b = a;
  EXPECT_EQ(CountWrong(concclFloat8e4m3, -1, 4, b.data(), a.data(), 64, nullptr), 0u);
  b[10] ^= 1;
  EXPECT_EQ(CountWrong(concclFloat8e4m3, -1, 4, b.data(), a.data(), 64, nullptr), 1u);
}

}  // namespace
}  // namespace conccl::bench
