// NCCL -> conccl argument and result mapping: pure functions, no NCCL or CUDA header (values from nccl_abi.h).
// A value with no exact conccl counterpart maps to std::nullopt, never to a near miss: the caller then
// forwards the call to the real NCCL or fails it with a message.
#ifndef CONCCL_NCCL_TYPE_MAP_H_
#define CONCCL_NCCL_TYPE_MAP_H_

#include <conccl/conccl.h>

#include <optional>

namespace conccl::nccl {

// ncclDataType_t -> concclDataType_t (the enums are ordered differently: ncclFloat32 = 7, concclFloat32 = 8).
std::optional<concclDataType_t> toConcclType(int ncclType);

// concclDataType_t -> ncclDataType_t (the inverse of toConcclType); nullopt for a conccl type NCCL lacks.
std::optional<int> toNcclType(concclDataType_t type);

// ncclRedOp_t -> concclRedOp_t for the five built-in ops. Ops from ncclRedOpCreatePreMulSum (>= ncclNumOps) have
// no exact conccl counterpart (a pre-multiplied sum rounds differently from a sum then a division) -> nullopt.
std::optional<concclRedOp_t> toConcclOp(int ncclOp);

// Whether conccl reduces this NCCL type with this NCCL op exactly as NCCL defines it. NCCL reduces fp8 (on
// sm90+); conccl moves fp8 but does not reduce it -> false.
bool concclCanReduce(int ncclType, int ncclOp);

// concclResult_t -> ncclResult_t. NCCL has no timeout and no not-supported code: a peer that did not arrive is
// ncclRemoteError, a valid request conccl does not support is ncclInvalidUsage (the message says which).
int toNcclResult(concclResult_t result);

// Name of an NCCL result code as NCCL's ncclGetErrorString words it.
const char* ncclResultString(int ncclResult);

// Names for log lines ("ncclFloat32", "ncclSum"; "PreMulSum#5" for a created op; "invalid" otherwise).
const char* ncclTypeName(int ncclType);

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_TYPE_MAP_H_
