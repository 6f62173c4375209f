// Element-wise reductions on the host: the host backend's Reduce op, and the reference that tests compare the
// CUDA backend against. Semantics match the CUDA kernel exactly: inputs combined in order 0..k-1, fp16/bf16/fp32
// accumulated in fp32 and rounded once (round to nearest even), fp64 in fp64, integers wrap; avg = sum / k
// (integer division for integer types).
#pragma once

#include <conccl/conccl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace conccl::exec {

void reduceHost(const std::vector<const void*>& inputs, void* output, size_t count, concclDataType_t dtype,
                concclRedOp_t op);

float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

}  // namespace conccl::exec
