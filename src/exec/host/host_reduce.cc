#include "exec/host/host_reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace conccl::exec {

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity
  if (absx < 0x38800000u) {                                               // subnormal or zero in half
    // Shift the float into half's subnormal range with round to nearest even.
    float a;
    std::memcpy(&a, &absx, sizeof(a));
    float scaled = a * 16777216.0f;  // 2^24: one half-subnormal ulp becomes 1.0
    auto r = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t exp = ((absx >> 23) - 127 + 15) << 10;
  uint32_t man = (absx >> 13) & 0x3ffu;
  uint32_t rest = absx & 0x1fffu;
  uint32_t h = exp | man;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: still correct
  return static_cast<uint16_t>(sign | h);
}

float bf16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

namespace {

template <typename Acc>
Acc combine(Acc a, Acc b, concclRedOp_t op) {
  switch (op) {
    case concclSum:
    case concclAvg:
      return static_cast<Acc>(a + b);
    case concclProd:
      return static_cast<Acc>(a * b);
    case concclMax:
      return std::max(a, b);
    case concclMin:
      return std::min(a, b);
    default:
      return a;
  }
}

// T: storage type; Acc: accumulation type; load/store convert between them.
template <typename T, typename Acc, typename Load, typename Store>
void reduceTyped(const std::vector<const void*>& inputs, void* output, size_t count, concclRedOp_t op, Load load,
                 Store store) {
  const size_t k = inputs.size();
  auto* out = static_cast<T*>(output);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, static_cast<const T*>(inputs[0]) + i, sizeof(T));
    Acc acc = load(v);
    for (size_t j = 1; j < k; ++j) {
      std::memcpy(&v, static_cast<const T*>(inputs[j]) + i, sizeof(T));
      acc = combine<Acc>(acc, load(v), op);
    }
    if (op == concclAvg) acc = static_cast<Acc>(acc / static_cast<Acc>(k));
    T result = store(acc);
    std::memcpy(out + i, &result, sizeof(T));
  }
}

template <typename T>
void reduceInt(const std::vector<const void*>& inputs, void* output, size_t count, concclRedOp_t op) {
  // Unsigned arithmetic for wrap-around without undefined behaviour; max/min need the signed comparison.
  using U = std::make_unsigned_t<T>;
  const bool wraps = op == concclSum || op == concclProd || op == concclAvg;
  if (wraps) {
    reduceTyped<T, U>(
        inputs, output, count, op == concclAvg ? concclSum : op, [](T v) { return static_cast<U>(v); },
        [](U v) { return static_cast<T>(v); });
    if (op == concclAvg) {
      auto* out = static_cast<T*>(output);
      // Integer average: the (wrapped) sum divided by the rank count, in the signed type.
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<T>(out[i] / static_cast<T>(inputs.size()));
    }
  } else {
    reduceTyped<T, T>(inputs, output, count, op, [](T v) { return v; }, [](T v) { return v; });
  }
}

}  // namespace

void reduceHost(const std::vector<const void*>& inputs, void* output, size_t count, concclDataType_t dtype,
                concclRedOp_t op) {
  CONCCL_ASSERT(!inputs.empty());
  switch (dtype) {
    case concclInt8: return reduceInt<int8_t>(inputs, output, count, op);
    case concclUint8: return reduceInt<uint8_t>(inputs, output, count, op);
    case concclInt32: return reduceInt<int32_t>(inputs, output, count, op);
    case concclUint32: return reduceInt<uint32_t>(inputs, output, count, op);
    case concclInt64: return reduceInt<int64_t>(inputs, output, count, op);
    case concclUint64: return reduceInt<uint64_t>(inputs, output, count, op);
    case concclFloat16:
      return reduceTyped<uint16_t, float>(inputs, output, count, op, halfToFloat, floatToHalf);
    case concclBfloat16:
      return reduceTyped<uint16_t, float>(inputs, output, count, op, bf16ToFloat, floatToBf16);
    case concclFloat32:
      return reduceTyped<float, float>(inputs, output, count, op, [](float v) { return v; }, [](float v) { return v; });
    case concclFloat64:
      return reduceTyped<double, double>(inputs, output, count, op, [](double v) { return v; },
                                         [](double v) { return v; });
    default:
      CONCCL_THROW(concclInvalidArgument, "reductions are not supported for this datatype");
  }
}

}  // namespace conccl::exec
