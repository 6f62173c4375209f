// Element types and reduction operations of conccl-bench, with the host-side arithmetic the reference
// computations need (fp16 / bf16 conversions, typed element access). No CUDA types: unit-tested on the CPU.
#ifndef CONCCL_TOOLS_BENCH_TYPES_H_
#define CONCCL_TOOLS_BENCH_TYPES_H_

#include <conccl/conccl.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace conccl::bench {

struct DTypeInfo {
  concclDataType_t type;
  const char* name;  // nccl-tests spelling: "float", "half", "bfloat16", ...
  size_t size;       // bytes per element
  bool is_float;
  bool is_signed;
  bool reducible;  // fp8 types are for data movement only
};

struct RedOpInfo {
  concclRedOp_t op;
  const char* name;  // "sum", "prod", "max", "min", "avg"
};

const std::vector<DTypeInfo>& AllDTypes();
const std::vector<RedOpInfo>& AllRedOps();
// nullptr when the name is unknown. Accepts nccl-tests aliases (float32, fp16, int, char, ...).
const DTypeInfo* FindDType(std::string_view name);
const DTypeInfo& DTypeOf(concclDataType_t type);
const RedOpInfo* FindRedOp(std::string_view name);
const char* RedOpName(concclRedOp_t op);

// IEEE binary16 and bfloat16 conversions, round to nearest even (what the GPU's conversions do).
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);
float Bf16ToFloat(uint16_t b);

// Unit roundoff of the storage format of a floating type (2^-11 for half, ...); 0 for integers.
double UnitRoundoff(concclDataType_t type);

// Typed access to element i of a byte buffer, as double (floating types) or as the bits of the integer
// (sign-extended for signed types) for integer types.
double LoadFloat(concclDataType_t type, const void* base, size_t i);
void StoreFloat(concclDataType_t type, void* base, size_t i, double v);
uint64_t LoadInt(concclDataType_t type, const void* base, size_t i);
void StoreInt(concclDataType_t type, void* base, size_t i, uint64_t v);

}  // namespace conccl::bench

#endif  // CONCCL_TOOLS_BENCH_TYPES_H_
