#include "reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>

#include "types.h"

namespace conccl::bench {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool IsFloat(concclDataType_t t) { return DTypeOf(t).is_float; }

// Largest magnitude of integer inputs so that the sum over nranks fits the type (8-bit: 127 / n).
int64_t IntRange(concclDataType_t t, int nranks) {
  const DTypeInfo& info = DTypeOf(t);
  const int bits = static_cast<int>(info.size * 8) - (info.is_signed ? 1 : 0);
  const int64_t max = bits >= 63 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << bits) - 1;
  return std::max<int64_t>(1, std::min<int64_t>(max / std::max(1, nranks), 1'000'000));
}

}  // namespace

uint64_t InputSeed(uint64_t base_seed, int rank, size_t bytes, int coll, int type, int op) {
  uint64_t h = SplitMix64(base_seed);
  for (uint64_t v : {static_cast<uint64_t>(rank), static_cast<uint64_t>(bytes), static_cast<uint64_t>(coll),
                     static_cast<uint64_t>(type), static_cast<uint64_t>(op + 1)}) {
    h = SplitMix64(h ^ v);
  }
  return h;
}

Bytes RandomElements(concclDataType_t type, size_t count, uint64_t seed, int op, int nranks) {
  const DTypeInfo& info = DTypeOf(type);
  Bytes out(count * info.size);
  std::mt19937_64 gen(seed);
  if (op < 0 || !info.reducible) {
    // Data movement: random bits; the check is bitwise, so NaN patterns are fine.
    for (size_t i = 0; i < out.size(); i += 8) {
      const uint64_t r = gen();
      std::memcpy(out.data() + i, &r, std::min<size_t>(8, out.size() - i));
    }
    return out;
  }
  const auto red = static_cast<concclRedOp_t>(op);
  if (IsFloat(type)) {
    // Products of n values stay near 1 in [0.5, 1.5]; other ops use [-1, 1].
    std::uniform_real_distribution<double> dist(red == concclProd ? 0.5 : -1.0, red == concclProd ? 1.5 : 1.0);
    for (size_t i = 0; i < count; ++i) StoreFloat(type, out.data(), i, dist(gen));
    return out;
  }
  if (red == concclProd) {
    // Wrapping products are exact in any order; small factors keep some of them from being zero.
    std::uniform_int_distribution<int> dist(info.is_signed ? -3 : 1, 3);
    for (size_t i = 0; i < count; ++i) StoreInt(type, out.data(), i, static_cast<uint64_t>(dist(gen)));
    return out;
  }
  const int64_t range = IntRange(type, nranks);
  std::uniform_int_distribution<int64_t> dist(info.is_signed ? -range : 0, range);
  for (size_t i = 0; i < count; ++i) StoreInt(type, out.data(), i, static_cast<uint64_t>(dist(gen)));
  return out;
}

void ReduceRanks(concclDataType_t type, concclRedOp_t op, const std::vector<const unsigned char*>& inputs,
                 size_t in_offset, size_t count, unsigned char* out, std::vector<double>* scale) {
  const DTypeInfo& info = DTypeOf(type);
  if (!info.reducible) throw std::invalid_argument(std::string("no reductions on ") + info.name);
  const int n = static_cast<int>(inputs.size());
  if (scale) scale->assign(count, 0.0);
  if (info.is_float) {
    for (size_t i = 0; i < count; ++i) {
      double acc = 0.0;
      double mag = 0.0;
      for (int r = 0; r < n; ++r) {
        const double v = LoadFloat(type, inputs[r], in_offset + i);
        if (r == 0) {
          acc = v;
          mag = std::fabs(v);
          continue;
        }
        switch (op) {
          case concclSum:
          case concclAvg:
            acc += v;
            mag += std::fabs(v);
            break;
          case concclProd:
            acc *= v;
            mag = std::fabs(acc);
            break;
          case concclMax:
            acc = std::max(acc, v);
            break;
          case concclMin:
            acc = std::min(acc, v);
            break;
          default:
            throw std::invalid_argument("bad reduction op");
        }
      }
      if (op == concclAvg) {
        acc /= n;
        mag /= n;
      }
      StoreFloat(type, out, i, acc);
      if (scale) (*scale)[i] = mag;
    }
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    uint64_t acc = 0;  // modular arithmetic: exact wrap-around for sum and prod in any order
    int64_t sacc = 0;
    for (int r = 0; r < n; ++r) {
      const uint64_t v = LoadInt(type, inputs[r], in_offset + i);
      const auto sv = static_cast<int64_t>(v);
      if (r == 0) {
        acc = v;
        sacc = sv;
        continue;
      }
      switch (op) {
        case concclSum:
        case concclAvg:
          acc += v;
          sacc += sv;
          break;
        case concclProd:
          acc *= v;
          break;
        case concclMax:
          acc = info.is_signed ? static_cast<uint64_t>(std::max(static_cast<int64_t>(acc), sv)) : std::max(acc, v);
          break;
        case concclMin:
          acc = info.is_signed ? static_cast<uint64_t>(std::min(static_cast<int64_t>(acc), sv)) : std::min(acc, v);
          break;
        default:
          throw std::invalid_argument("bad reduction op");
      }
    }
    if (op == concclAvg) {
      // Inputs are small enough that the sum does not overflow; C division truncates toward zero.
      acc = info.is_signed ? static_cast<uint64_t>(sacc / n) : acc / static_cast<uint64_t>(n);
    }
    StoreInt(type, out, i, acc);
  }
}

size_t CountWrong(concclDataType_t type, int op, int nranks, const unsigned char* got, const unsigned char* expected,
                  size_t count, const std::vector<double>* scale) {
  const DTypeInfo& info = DTypeOf(type);
  const bool exact = op < 0 || !info.is_float || op == concclMax || op == concclMin;
  size_t wrong = 0;
  if (exact) {
    for (size_t i = 0; i < count; ++i) {
      wrong += std::memcmp(got + i * info.size, expected + i * info.size, info.size) != 0;
    }
    return wrong;
  }
  const double u = UnitRoundoff(type);
  for (size_t i = 0; i < count; ++i) {
    const double g = LoadFloat(type, got, i);
    const double e = LoadFloat(type, expected, i);
    const double s = scale ? (*scale)[i] : std::fabs(e);
    const double tol = (nranks + 1) * u * s + u * std::fabs(e);
    if (!(std::fabs(g - e) <= tol)) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

}  // namespace conccl::bench
