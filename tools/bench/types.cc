#include "types.h"

#include "exec/host/host_reduce.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace conccl::bench {

const std::vector<DTypeInfo>& AllDTypes() {
  static const std::vector<DTypeInfo> kTypes = {
      {concclInt8, "int8", 1, false, true, true},          {concclUint8, "uint8", 1, false, false, true},
      {concclInt32, "int32", 4, false, true, true},        {concclUint32, "uint32", 4, false, false, true},
      {concclInt64, "int64", 8, false, true, true},        {concclUint64, "uint64", 8, false, false, true},
      {concclFloat16, "half", 2, true, true, true},        {concclBfloat16, "bfloat16", 2, true, true, true},
      {concclFloat32, "float", 4, true, true, true},       {concclFloat64, "double", 8, true, true, true},
      {concclFloat8e4m3, "fp8e4m3", 1, true, true, false}, {concclFloat8e5m2, "fp8e5m2", 1, true, true, false},
  };
  return kTypes;
}

const std::vector<RedOpInfo>& AllRedOps() {
  static const std::vector<RedOpInfo> kOps = {
      {concclSum, "sum"}, {concclProd, "prod"}, {concclMax, "max"}, {concclMin, "min"}, {concclAvg, "avg"}};
  return kOps;
}

const DTypeInfo* FindDType(std::string_view name) {
  struct Alias {
    std::string_view alias;
    std::string_view name;
  };
  static constexpr Alias kAliases[] = {{"char", "int8"},      {"int", "int32"},      {"float16", "half"},
                                       {"fp16", "half"},      {"bf16", "bfloat16"},  {"float32", "float"},
                                       {"fp32", "float"},     {"float64", "double"}, {"fp64", "double"},
                                       {"f8e4m3", "fp8e4m3"}, {"f8e5m2", "fp8e5m2"}};
  for (const Alias& a : kAliases) {
    if (a.alias == name) name = a.name;
  }
  for (const DTypeInfo& t : AllDTypes()) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

const DTypeInfo& DTypeOf(concclDataType_t type) {
  for (const DTypeInfo& t : AllDTypes()) {
    if (t.type == type) return t;
  }
  throw std::invalid_argument("unknown conccl data type " + std::to_string(static_cast<int>(type)));
}

const RedOpInfo* FindRedOp(std::string_view name) {
  for (const RedOpInfo& o : AllRedOps()) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

const char* RedOpName(concclRedOp_t op) {
  for (const RedOpInfo& o : AllRedOps()) {
    if (o.op == op) return o.name;
  }
  return "?";
}

// The conversions are the library's own (exec/host/host_reduce.h: round to nearest even, NaN kept quiet), so that
// the bench's reference rounds exactly like conccl's host backend and the GPU tests' reference.
uint16_t FloatToHalf(float f) { return exec::floatToHalf(f); }
float HalfToFloat(uint16_t h) { return exec::halfToFloat(h); }
uint16_t FloatToBf16(float f) { return exec::floatToBf16(f); }
float Bf16ToFloat(uint16_t b) { return exec::bf16ToFloat(b); }

double UnitRoundoff(concclDataType_t type) {
  switch (type) {
    case concclFloat16:
      return std::ldexp(1.0, -11);
    case concclBfloat16:
      return std::ldexp(1.0, -8);
    case concclFloat32:
      return std::ldexp(1.0, -24);
    case concclFloat64:
      return std::ldexp(1.0, -53);
    case concclFloat8e4m3:
      return std::ldexp(1.0, -4);
    case concclFloat8e5m2:
      return std::ldexp(1.0, -3);
    default:
      return 0.0;
  }
}

namespace {
template <typename T>
T Load(const void* base, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void Store(void* base, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(base) + i * sizeof(T), &v, sizeof(T));
}
}  // namespace

double LoadFloat(concclDataType_t type, const void* base, size_t i) {
  switch (type) {
    case concclFloat16:
      return HalfToFloat(Load<uint16_t>(base, i));
    case concclBfloat16:
      return Bf16ToFloat(Load<uint16_t>(base, i));
    case concclFloat32:
      return Load<float>(base, i);
    case concclFloat64:
      return Load<double>(base, i);
    default:
      throw std::invalid_argument("LoadFloat: not a reducible floating type");
  }
}

void StoreFloat(concclDataType_t type, void* base, size_t i, double v) {
  switch (type) {
    case concclFloat16:
      Store<uint16_t>(base, i, FloatToHalf(static_cast<float>(v)));
      return;
    case concclBfloat16:
      Store<uint16_t>(base, i, FloatToBf16(static_cast<float>(v)));
      return;
    case concclFloat32:
      Store<float>(base, i, static_cast<float>(v));
      return;
    case concclFloat64:
      Store<double>(base, i, v);
      return;
    default:
      throw std::invalid_argument("StoreFloat: not a reducible floating type");
  }
}

uint64_t LoadInt(concclDataType_t type, const void* base, size_t i) {
  switch (type) {
    case concclInt8:
      return static_cast<uint64_t>(static_cast<int64_t>(Load<int8_t>(base, i)));
    case concclUint8:
      return Load<uint8_t>(base, i);
    case concclInt32:
      return static_cast<uint64_t>(static_cast<int64_t>(Load<int32_t>(base, i)));
    case concclUint32:
      return Load<uint32_t>(base, i);
    case concclInt64:
    case concclUint64:
      return Load<uint64_t>(base, i);
    default:
      throw std::invalid_argument("LoadInt: not an integer type");
  }
}

void StoreInt(concclDataType_t type, void* base, size_t i, uint64_t v) {
  switch (type) {
    case concclInt8:
    case concclUint8:
      Store<uint8_t>(base, i, static_cast<uint8_t>(v));
      return;
    case concclInt32:
    case concclUint32:
      Store<uint32_t>(base, i, static_cast<uint32_t>(v));
      return;
    case concclInt64:
    case concclUint64:
      Store<uint64_t>(base, i, v);
      return;
    default:
      throw std::invalid_argument("StoreInt: not an integer type");
  }
}

}  // namespace conccl::bench
