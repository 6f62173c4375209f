#include "base/types.h"

namespace conccl {

bool isValidType(concclDataType_t type) { return type >= 0 && type < concclNumTypes; }
bool isValidOp(concclRedOp_t op) { return op >= 0 && op < concclNumOps; }

size_t typeSize(concclDataType_t type) {
  switch (type) {
    case concclInt8:
    case concclUint8:
    case concclFloat8e4m3:
    case concclFloat8e5m2:
      return 1;
    case concclFloat16:
    case concclBfloat16:
      return 2;
    case concclInt32:
    case concclUint32:
    case concclFloat32:
      return 4;
    case concclInt64:
    case concclUint64:
    case concclFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* typeName(concclDataType_t type) {
  switch (type) {
    case concclInt8: return "int8";
    case concclUint8: return "uint8";
    case concclInt32: return "int32";
    case concclUint32: return "uint32";
    case concclInt64: return "int64";
    case concclUint64: return "uint64";
    case concclFloat16: return "half";
    case concclBfloat16: return "bfloat16";
    case concclFloat32: return "float";
    case concclFloat64: return "double";
    case concclFloat8e4m3: return "fp8e4m3";
    case concclFloat8e5m2: return "fp8e5m2";
    default: return "invalid-type";
  }
}

const char* opName(concclRedOp_t op) {
  switch (op) {
    case concclSum: return "sum";
    case concclProd: return "prod";
    case concclMax: return "max";
    case concclMin: return "min";
    case concclAvg: return "avg";
    default: return "invalid-op";
  }
}

bool supportsReduction(concclDataType_t type) {
  return isValidType(type) && type != concclFloat8e4m3 && type != concclFloat8e5m2;
}

}  // namespace conccl

extern "C" size_t concclTypeSize(concclDataType_t datatype) { return conccl::typeSize(datatype); }
