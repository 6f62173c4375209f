// Element types and reduction ops: sizes, names and which combinations are supported. Pure C++.
#pragma once

#include <conccl/conccl.h>

#include <cstddef>

namespace conccl {

bool isValidType(concclDataType_t type);
bool isValidOp(concclRedOp_t op);
size_t typeSize(concclDataType_t type);  // 0 for an invalid type
const char* typeName(concclDataType_t type);
const char* opName(concclRedOp_t op);
// fp8 types are for data movement only.
bool supportsReduction(concclDataType_t type);

}  // namespace conccl
