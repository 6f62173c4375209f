#include "nccl/type_map.h"

#include "nccl/nccl_abi.h"

namespace conccl::nccl {

std::optional<concclDataType_t> toConcclType(int ncclType) {
  switch (ncclType) {
    case kInt8:
      return concclInt8;
    case kUint8:
      return concclUint8;
    case kInt32:
      return concclInt32;
    case kUint32:
      return concclUint32;
    case kInt64:
      return concclInt64;
    case kUint64:
      return concclUint64;
    case kFloat16:
      return concclFloat16;
    case kFloat32:
      return concclFloat32;
    case kFloat64:
      return concclFloat64;
    case kBfloat16:
      return concclBfloat16;
    case kFloat8e4m3:
      return concclFloat8e4m3;
    case kFloat8e5m2:
      return concclFloat8e5m2;
    default:
      return std::nullopt;
  }
}

std::optional<int> toNcclType(concclDataType_t type) {
  for (int t = 0; t < kNumTypes; ++t) {
    if (toConcclType(t) == type) return t;
  }
  return std::nullopt;
}

std::optional<concclRedOp_t> toConcclOp(int ncclOp) {
  switch (ncclOp) {
    case kSum:
      return concclSum;
    case kProd:
      return concclProd;
    case kMax:
      return concclMax;
    case kMin:
      return concclMin;
    case kAvg:
      return concclAvg;
    default:
      return std::nullopt;
  }
}

bool concclCanReduce(int ncclType, int ncclOp) {
  auto type = toConcclType(ncclType);
  if (!type || !toConcclOp(ncclOp)) return false;
  return *type != concclFloat8e4m3 && *type != concclFloat8e5m2;
}

int toNcclResult(concclResult_t result) {
  switch (result) {
    case concclSuccess:
      return kSuccess;
    case concclUnhandledCudaError:
      return kUnhandledCudaError;
    case concclSystemError:
      return kSystemError;
    case concclInternalError:
      return kInternalError;
    case concclInvalidArgument:
      return kInvalidArgument;
    case concclInvalidUsage:
      return kInvalidUsage;
    case concclTimeout:
      return kRemoteError;
    case concclNotSupported:
      return kInvalidUsage;
    default:
      return kInternalError;
  }
}

const char* ncclResultString(int ncclResult) {
  switch (ncclResult) {
    case kSuccess:
      return "no error";
    case kUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case kSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case kInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case kInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case kInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case kRemoteError:
      return "remote process exited or there was a network error";
    case kInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclTypeName(int ncclType) {
  switch (ncclType) {
    case kInt8:
      return "ncclInt8";
    case kUint8:
      return "ncclUint8";
    case kInt32:
      return "ncclInt32";
    case kUint32:
      return "ncclUint32";
    case kInt64:
      return "ncclInt64";
    case kUint64:
      return "ncclUint64";
    case kFloat16:
      return "ncclFloat16";
    case kFloat32:
      return "ncclFloat32";
    case kFloat64:
      return "ncclFloat64";
    case kBfloat16:
      return "ncclBfloat16";
    case kFloat8e4m3:
      return "ncclFloat8e4m3";
    case kFloat8e5m2:
      return "ncclFloat8e5m2";
    default:
      return "invalid";
  }
}

}  // namespace conccl::nccl
