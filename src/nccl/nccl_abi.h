// NCCL 2.28's ABI values, written out so that the pure layer of the shim (mapping, decisions, loader) builds and
// is unit-tested without nccl.h (the CPU-only CI build has none). abi_check.cc, compiled only with the real
// nccl.h, static_asserts every value here against it, so a drift fails the shim's build rather than its users.
#ifndef CONCCL_NCCL_NCCL_ABI_H_
#define CONCCL_NCCL_NCCL_ABI_H_

namespace conccl::nccl {

// The NCCL version whose header the shim implements (NCCL_VERSION_CODE of 2.28.9).
inline constexpr int kNcclVersionCode = 22809;
inline constexpr int kUniqueIdBytes = 128;

// ncclResult_t
inline constexpr int kSuccess = 0;
inline constexpr int kUnhandledCudaError = 1;
inline constexpr int kSystemError = 2;
inline constexpr int kInternalError = 3;
inline constexpr int kInvalidArgument = 4;
inline constexpr int kInvalidUsage = 5;
inline constexpr int kRemoteError = 6;
inline constexpr int kInProgress = 7;

// ncclDataType_t
inline constexpr int kInt8 = 0;
inline constexpr int kUint8 = 1;
inline constexpr int kInt32 = 2;
inline constexpr int kUint32 = 3;
inline constexpr int kInt64 = 4;
inline constexpr int kUint64 = 5;
inline constexpr int kFloat16 = 6;
inline constexpr int kFloat32 = 7;
inline constexpr int kFloat64 = 8;
inline constexpr int kBfloat16 = 9;
inline constexpr int kFloat8e4m3 = 10;
inline constexpr int kFloat8e5m2 = 11;
inline constexpr int kNumTypes = 12;

// ncclRedOp_t. Values >= kNumOps are ops made by ncclRedOpCreatePreMulSum.
inline constexpr int kSum = 0;
inline constexpr int kProd = 1;
inline constexpr int kMax = 2;
inline constexpr int kMin = 3;
inline constexpr int kAvg = 4;
inline constexpr int kNumOps = 5;

}  // namespace conccl::nccl

#endif  // CONCCL_NCCL_NCCL_ABI_H_
