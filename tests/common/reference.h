// Test support shared by the unit (host) and GPU suites: random inputs, a plain reference of every collective
// computed on the host, and comparison with dtype-aware tolerances. Header-only, no CUDA.
#pragma once

#include <conccl/conccl.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exec/host/host_reduce.h"
#include "sched/schedule.h"

namespace conccl::test {

using Bytes = std::vector<uint8_t>;

inline size_t esize(concclDataType_t t) { return concclTypeSize(t); }

inline bool isFloat(concclDataType_t t) {
  return t == concclFloat16 || t == concclBfloat16 || t == concclFloat32 || t == concclFloat64;
}

// Fresh random elements: never zeros. Floats in [0.5, 1.5) so that products of up to 8 ranks stay in range;
// integers small and non-zero (products wrap, which integer reductions define).
inline Bytes randomData(size_t count, concclDataType_t t, std::mt19937_64& rng) {
  Bytes out(count * esize(t));
  std::uniform_real_distribution<double> real(0.5, 1.5);
  std::uniform_int_distribution<int> small(1, 9);
  std::uniform_int_distribution<int> byte(0, 255);
  for (size_t i = 0; i < count; ++i) {
    uint8_t* p = out.data() + i * esize(t);
    switch (t) {
      case concclFloat16: { uint16_t v = exec::floatToHalf(static_cast<float>(real(rng))); std::memcpy(p, &v, 2); break; }
      case concclBfloat16: { uint16_t v = exec::floatToBf16(static_cast<float>(real(rng))); std::memcpy(p, &v, 2); break; }
      case concclFloat32: { float v = static_cast<float>(real(rng)); std::memcpy(p, &v, 4); break; }
      case concclFloat64: { double v = real(rng); std::memcpy(p, &v, 8); break; }
      case concclFloat8e4m3:
      case concclFloat8e5m2: { *p = static_cast<uint8_t>(byte(rng)); break; }
      default: {
        // Integers: a small signed value, sign-extended into the element.
        int64_t v = small(rng) * ((rng() & 1) ? 1 : -1);
        if (t == concclUint8 || t == concclUint32 || t == concclUint64) v = small(rng);
        std::memcpy(p, &v, esize(t));  // little endian: the low bytes
        break;
      }
    }
  }
  return out;
}

inline double elementAsDouble(const uint8_t* p, concclDataType_t t) {
  switch (t) {
    case concclFloat16: { uint16_t v; std::memcpy(&v, p, 2); return exec::halfToFloat(v); }
    case concclBfloat16: { uint16_t v; std::memcpy(&v, p, 2); return exec::bf16ToFloat(v); }
    case concclFloat32: { float v; std::memcpy(&v, p, 4); return v; }
    case concclFloat64: { double v; std::memcpy(&v, p, 8); return v; }
    default: return 0.0;
  }
}

// Number of elements of `got` that differ from `want`: exact for data movement and integers; relative
// tolerance for floating-point reductions, whose results depend on the order of accumulation.
inline size_t countWrong(const Bytes& got, const Bytes& want, concclDataType_t t, bool reduced, int nranks) {
  if (got.size() != want.size()) return std::max(got.size(), want.size()) / esize(t);
  const size_t n = got.size() / esize(t);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* g = got.data() + i * esize(t);
    const uint8_t* w = want.data() + i * esize(t);
    if (std::memcmp(g, w, esize(t)) == 0) continue;
    if (reduced && isFloat(t)) {
      double eps = t == concclFloat64 ? 1e-12 : t == concclFloat32 ? 1e-6 : t == concclFloat16 ? 1e-3 : 8e-3;
      double a = elementAsDouble(g, t), b = elementAsDouble(w, t);
      if (std::fabs(a - b) <= eps * nranks * (std::fabs(b) + 1.0)) continue;
    }
    ++wrong;
  }
  return wrong;
}

inline Bytes reduceAll(const std::vector<const uint8_t*>& inputs, size_t count, concclDataType_t t, concclRedOp_t op) {
  Bytes out(count * esize(t));
  std::vector<const void*> in(inputs.begin(), inputs.end());
  if (count > 0) exec::reduceHost(in, out.data(), count, t, op);
  return out;
}

// The collective kinds are the schedule layer's (one name per idea); the host reference covers the eight
// collectives of one call each (not AllToAllv or Send/Recv, which the suites drive with their own tables).
using Coll = sched::CollKind;

inline bool hasInPlace(Coll c) { return c != Coll::kAllToAll && c != Coll::kAllToAllv && c != Coll::kSendRecv; }

// Elements of sendbuff / recvbuff for rank r, as the public API sizes them (0: the rank does not use it).
inline size_t sendElems(Coll c, size_t count, int n, int r, int root) {
  switch (c) {
    case Coll::kAllGather: case Coll::kAllReduce: case Coll::kReduce: case Coll::kGather: return count;
    case Coll::kReduceScatter: case Coll::kAllToAll: return count * n;
    case Coll::kBroadcast: return r == root ? count : 0;
    case Coll::kScatter: return r == root ? count * n : 0;
    case Coll::kAllToAllv: case Coll::kSendRecv: break;  // not covered here (see Coll)
  }
  return 0;
}
inline size_t recvElems(Coll c, size_t count, int n, int r, int root) {
  switch (c) {
    case Coll::kAllGather: case Coll::kAllToAll: return count * n;
    case Coll::kReduceScatter: case Coll::kScatter: case Coll::kAllReduce: case Coll::kBroadcast: return count;
    case Coll::kReduce: return r == root ? count : 0;
    case Coll::kGather: return r == root ? count * n : 0;
    case Coll::kAllToAllv: case Coll::kSendRecv: break;  // not covered here (see Coll)
  }
  return 0;
}

// Expected recvbuff of every rank (empty where the rank has no output). `send[r]` holds rank r's input.
inline std::vector<Bytes> reference(Coll c, const std::vector<Bytes>& send, size_t count, concclDataType_t t,
                                    concclRedOp_t op, int root) {
  const int n = static_cast<int>(send.size());
  const size_t es = esize(t), cb = count * es;
  std::vector<Bytes> out(n);
  auto slice = [&](int r, size_t at) { return send[r].data() + at; };
  // memcpy with a null pointer is undefined even for 0 bytes, and an empty vector's data() may be null
  // (count 0): UBSan stops there.
  auto copy = [](uint8_t* dst, const uint8_t* src, size_t bytes) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  };
  for (int r = 0; r < n; ++r) {
    out[r].assign(recvElems(c, count, n, r, root) * es, 0);
    switch (c) {
      case Coll::kAllGather:
      case Coll::kGather:
        if (c == Coll::kGather && r != root) break;
        for (int p = 0; p < n; ++p) copy(out[r].data() + p * cb, slice(p, 0), cb);
        break;
      case Coll::kAllToAll:
        for (int p = 0; p < n; ++p) copy(out[r].data() + p * cb, slice(p, r * cb), cb);
        break;
      case Coll::kBroadcast:
        copy(out[r].data(), slice(root, 0), cb);
        break;
      case Coll::kScatter:
        copy(out[r].data(), slice(root, r * cb), cb);
        break;
      case Coll::kReduceScatter: {
        std::vector<const uint8_t*> in;
        for (int p = 0; p < n; ++p) in.push_back(slice(p, r * cb));
        out[r] = reduceAll(in, count, t, op);
        break;
      }
      case Coll::kAllReduce:
      case Coll::kReduce: {
        if (c == Coll::kReduce && r != root) break;
        std::vector<const uint8_t*> in;
        for (int p = 0; p < n; ++p) in.push_back(slice(p, 0));
        out[r] = reduceAll(in, count, t, op);
        break;
      }
      case Coll::kAllToAllv:
      case Coll::kSendRecv:
        break;  // not covered here (see Coll)
    }
  }
  return out;
}

}  // namespace conccl::test
